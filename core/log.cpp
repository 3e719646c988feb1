#include "core/log.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <spdlog/common.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <string>

namespace memtrace::log {

namespace sl = spdlog::level;
static_assert(static_cast<int>(Level::trace) == sl::trace && static_cast<int>(Level::debug) == sl::debug &&
              static_cast<int>(Level::info) == sl::info && static_cast<int>(Level::warn) == sl::warn &&
              static_cast<int>(Level::error) == sl::err && static_cast<int>(Level::off) == sl::off);

namespace detail {
constinit std::atomic<int> g_level{static_cast<int>(Level::info)};
}

namespace {
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

namespace {
// Above the descriptors programs hand out first, so that one closing "its" low numbers does not
// take this one by accident.
int high_descriptor(int fd) {
  if (fd < 0 || fd >= 100) return fd;
  int high = ::fcntl(fd, F_DUPFD_CLOEXEC, 100);
  if (high < 0) return fd;
  ::close(fd);
  return high;
}

void replace_destination(int fd) {
  int old = g_fd.exchange(fd, std::memory_order_acq_rel);
  if (old >= 0 && old != fd) ::close(old);
}
}  // namespace

void use_stderr() {
  int saved = errno;
  replace_destination(::fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 100));
  errno = saved;
}

void use_fd2() {
  int saved = errno;
  replace_destination(-1);
  errno = saved;
}

int use_file(const char* path) {
  int saved = errno;
  // Non-blocking only for the open: a FIFO nobody reads fails (ENXIO) instead of holding the
  // program at load; lines are then written blocking, as to any file.
  int fd = ::open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK, 0600);
  int err = fd < 0 ? errno : 0;
  if (fd >= 0) {
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    replace_destination(high_descriptor(fd));
  }
  errno = saved;
  return err;
}

bool set_destination(const char* log_path) {
  int err = log_path && *log_path ? use_file(log_path) : -1;
  if (err == 0) return true;
  use_stderr();
  if (err > 0) warn("cannot open MEMTRACE_LOG='{}' ({}); writing to stderr", log_path, std::strerror(err));
  return false;
}

Level level() { return static_cast<Level>(detail::g_level.load(std::memory_order_relaxed)); }
void set_level(Level l) { detail::g_level.store(static_cast<int>(l), std::memory_order_relaxed); }

bool parse_level(std::string_view text, Level* out) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.remove_suffix(1);
  // Every name fits the string's own buffer (15 characters): the std::string below allocates nothing.
  char lower[16];
  if (text.empty() || text.size() >= sizeof(lower)) return false;
  for (size_t i = 0; i < text.size(); ++i) lower[i] = static_cast<char>(std::tolower(static_cast<unsigned char>(text[i])));
  const std::string name(lower, text.size());
  const sl::level_enum l = sl::from_str(name);  // `off` also for a name it does not know
  if (l == sl::critical || (l == sl::off && name != "off")) return false;
  *out = static_cast<Level>(l);
  return true;
}

const char* level_name(Level l) {
  switch (l) {
    case Level::trace: return "trace";
    case Level::debug: return "debug";
    case Level::info: return "info";
    case Level::warn: return "warn";
    case Level::error: return "error";
    case Level::off: return "off";
  }
  return "info";
}

const char* line_prefix(Level l) {
  switch (l) {
    case Level::trace: return "memtrace: trace: ";
    case Level::debug: return "memtrace: debug: ";
    case Level::warn: return "memtrace: warning: ";
    case Level::error: return "memtrace: error: ";
    case Level::info:
    case Level::off: break;
  }
  return "memtrace: ";
}

}  // namespace memtrace::log
