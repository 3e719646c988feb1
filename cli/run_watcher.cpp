// `memtrace run`'s watcher: the program keeps run's process (exec), so run cannot wait for it. A
// process started beside it waits for the program to end and, when it left a state file behind
// (docs/state-file.md: killed, crashed, gone through _exit), runs memtrace-recover on it, which
// writes the snapshot under MEMTRACE_OUTPUT's name and says where.
//
// It must change nothing the program sees: it is not the program's child (started through an
// intermediate process that exits at once and is reaped before the exec), holds none of its
// descriptors but stderr (for its one line), and ignores the signals a terminal or scheduler sends
// the whole group, so that it outlives the program long enough to recover.
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "cli/paths.hpp"
#include "state/state_paths.hpp"

namespace memtrace::cli {

namespace {

bool process_gone(pid_t pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  FILE* f = std::fopen(path, "r");
  if (!f) return true;
  char buf[512];
  size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  const char* close_paren = std::strrchr(buf, ')');
  return !close_paren || close_paren[1] == '\0' || close_paren[2] == 'Z' || close_paren[2] == 'X';
}

void wait_for_exit(pid_t pid) {
#ifdef SYS_pidfd_open
  int fd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (fd >= 0) {
    pollfd p{fd, POLLIN, 0};
    while (poll(&p, 1, -1) < 0) {
    }
    close(fd);
    return;
  }
#endif
  while (!process_gone(pid)) {
    timespec ts{0, 50 * 1000 * 1000};
    nanosleep(&ts, nullptr);
  }
}

// The program's state files, made since the watcher started (an older one of the same pid belongs
// to a process before it).
std::vector<std::string> files_of(const std::string& dir, pid_t pid, time_t since) {
  std::vector<std::string> out;
  for (int n = 0; n < 16; ++n) {
    std::string path = dir + "/" + state::state_file_name(pid, n);
    struct stat st;
    if (lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_mtime >= since) out.push_back(path);
  }
  return out;
}

[[noreturn]] void watch(pid_t program, const std::string& recover, const std::vector<std::string>& dirs) {
  const time_t started = time(nullptr) - 1;
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGUSR1, SIGUSR2}) signal(sig, SIG_IGN);
  int null = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null >= 0) {
    dup2(null, 0);
    dup2(null, 1);
  }
  for (int fd = 3; fd < 1024; ++fd) close(fd);
  wait_for_exit(program);
  std::vector<std::string> files;
  for (const std::string& dir : dirs)
    for (std::string& f : files_of(dir, program, started)) files.push_back(std::move(f));
  for (const std::string& file : files) {
    pid_t r = fork();
    if (r == 0) {
      execl(recover.c_str(), "memtrace-recover", file.c_str(), static_cast<char*>(nullptr));
      std::fprintf(stderr, "memtrace run: cannot run '%s': %s\n", recover.c_str(), std::strerror(errno));
      _exit(kExitCannotRun);
    }
    int st = 0;
    if (r > 0 && waitpid(r, &st, 0) == r && WIFEXITED(st) && WEXITSTATUS(st) == 0) unlink(file.c_str());
  }
  _exit(0);
}

}  // namespace

void start_run_watcher(const std::string& prefix) {
  const std::vector<std::string> dirs = state::configured_state_dirs();
  if (dirs.empty()) return;  // MEMTRACE_STATE_DIR=off: nothing to recover from
  const std::string recover = recover_program(prefix);
  if (access(recover.c_str(), X_OK) != 0) return;
  const pid_t program = getpid();
  std::fflush(nullptr);
  pid_t mid = fork();
  if (mid < 0) return;  // no watcher: the file can still be recovered by hand
  if (mid == 0) {
    if (fork() == 0) watch(program, recover, dirs);
    _exit(0);
  }
  int st = 0;
  while (waitpid(mid, &st, 0) < 0 && errno == EINTR) {
  }
}

}  // namespace memtrace::cli
