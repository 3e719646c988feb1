#include "cli/site_namer.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "cli/commands.hpp"
#include "cli/paths.hpp"

namespace memtrace::cli {

SiteNamer::~SiteNamer() { stop(); }

bool SiteNamer::start() {
  int up[2], down[2];  // up: helper -> top, down: top -> helper
  if (pipe2(up, O_CLOEXEC) != 0) return false;
  if (pipe2(down, O_CLOEXEC) != 0) {
    close(up[0]), close(up[1]);
    return false;
  }
  const std::string helper = recover_program(install_prefix());
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(down[0], STDIN_FILENO);
    dup2(up[1], STDOUT_FILENO);
    const int null = open("/dev/null", O_WRONLY);  // its complaints would tear top's screen
    if (null >= 0) dup2(null, STDERR_FILENO);
    execl(helper.c_str(), "memtrace-recover", "--names", state_file_.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(up[1]);
  close(down[0]);
  if (pid < 0) {
    close(up[0]), close(down[1]);
    return false;
  }
  // A helper that died must not take top with it through SIGPIPE: its writes then fail instead.
  signal(SIGPIPE, SIG_IGN);
  child_ = pid;
  to_ = fdopen(down[1], "w");
  from_ = fdopen(up[0], "r");
  if (!to_ || !from_) {
    stop();
    return false;
  }
  return true;
}

void SiteNamer::stop() {
  if (to_) std::fclose(to_);
  if (from_) std::fclose(from_);
  to_ = from_ = nullptr;
  if (child_ > 0) {
    kill(child_, SIGTERM);
    waitpid(child_, nullptr, 0);
  }
  child_ = -1;
}

std::string SiteNamer::name(uintptr_t pc, const std::string& fallback) {
  if (auto it = names_.find(pc); it != names_.end()) return it->second;
  if (failed_) return fallback;
  if (!to_ && !start()) {
    failed_ = true;
    return fallback;
  }
  char line[4096];
  if (std::fprintf(to_, "%lx\n", static_cast<unsigned long>(pc)) < 0 || std::fflush(to_) != 0 ||
      !std::fgets(line, sizeof line, from_)) {
    stop();
    failed_ = true;
    return fallback;
  }
  line[strcspn(line, "\n")] = '\0';
  std::string got = line[0] && std::strcmp(line, "?") != 0 ? std::string(line) : fallback;
  names_.emplace(pc, got);
  return got;
}

}  // namespace memtrace::cli
