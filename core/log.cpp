#include "core/log.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

namespace memtrace::log {

namespace {
std::atomic<bool> g_debug{false};
// Where memtrace speaks: a duplicate of the stderr the process started with (so a program that
// later puts a data file on fd 2 does not get memtrace's lines in it), or MEMTRACE_LOG's file.
// -1 until set_destination runs: fd 2 then.
std::atomic<int> g_fd{-1};

// Writes without ever raising SIGPIPE in the program: a reader that went away must not change
// the program's exit status. SIGPIPE is blocked for the write; one that the write itself caused
// is taken back, one the program had pending already is left alone.
void write_all_quietly(int fd, const char* data, size_t n) {
  sigset_t pipe_only, old, pending;
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  bool masked = pthread_sigmask(SIG_BLOCK, &pipe_only, &old) == 0;
  bool was_pending = false;
  if (masked) {
    sigemptyset(&pending);
    was_pending = sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE);
  }
  bool broke = false;
  while (n > 0) {
    ssize_t w = ::write(fd, data, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      broke = errno == EPIPE;
      break;
    }
    data += w;
    n -= static_cast<size_t>(w);
  }
  if (masked) {
    if (broke && !was_pending) {
      timespec zero{0, 0};
      while (sigtimedwait(&pipe_only, nullptr, &zero) < 0 && errno == EINTR) {
      }
    }
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
  }
}
}  // namespace

void write_line(const char* data, size_t n) {
  int saved = errno;  // the program's errno is not memtrace's to change
  int fd = g_fd.load(std::memory_order_acquire);
  write_all_quietly(fd >= 0 ? fd : STDERR_FILENO, data, n);
  errno = saved;
}

void set_destination(const char* log_path) {
  int saved = errno;
  int fd = -1;
  if (log_path && *log_path)
    fd = ::open(log_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY, 0600);
  bool log_failed = log_path && *log_path && fd < 0;
  int open_errno = errno;
  // Above the descriptors programs hand out first, so that one closing "its" low numbers does
  // not take this one by accident.
  if (fd < 0) fd = ::fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 100);
  int old = g_fd.exchange(fd, std::memory_order_acq_rel);
  if (old >= 0 && old != fd) ::close(old);
  errno = saved;
  if (log_failed)
    warn("cannot open MEMTRACE_LOG='{}' ({}); writing to stderr", log_path, std::strerror(open_errno));
}

bool debug_enabled() { return g_debug.load(std::memory_order_relaxed); }
void set_debug(bool on) { g_debug.store(on, std::memory_order_relaxed); }

}  // namespace memtrace::log
