#include "preload/report_after_dump.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string_view>
#include <vector>

#include "core/log.hpp"
#include "format/report_name.hpp"

extern char** environ;

namespace memtrace::preload {

namespace {

// <prefix>/lib/libmemtrace.so -> <prefix>/bin/memtrace, the layout of both the build folder and
// an install.
std::string cli_path() {
  Dl_info info;
  if (!dladdr(reinterpret_cast<void*>(&write_report), &info) || !info.dli_fname) return {};
  std::string lib = info.dli_fname;
  size_t slash = lib.rfind('/');
  if (slash == std::string::npos) return {};
  std::string dir = lib.substr(0, slash);
  slash = dir.rfind('/');
  return (slash == std::string::npos ? std::string(".") : dir.substr(0, slash)) + "/bin/memtrace";
}

bool keep_variable(std::string_view kv) {
  if (kv.starts_with("LD_PRELOAD=")) return false;
  if (kv.starts_with("MEMTRACE_REPORT_ASSETS=")) return true;  // the report's own setting
  return !kv.starts_with("MEMTRACE_");
}

}  // namespace

void write_report(const std::string& snapshot_path) {
  const int saved_errno = errno;
  try {
    const std::string cli = cli_path();
    const std::string out = format::report_path_for(snapshot_path);
    if (cli.empty() || access(cli.c_str(), X_OK) != 0) {
      log::warn("MEMTRACE_REPORT: no report written: memtrace's command line is not at '{}'", cli);
      errno = saved_errno;
      return;
    }
    std::vector<char*> env;
    for (char** e = environ; e && *e; ++e)
      if (keep_variable(*e)) env.push_back(*e);
    env.push_back(nullptr);
    std::string a0 = cli, a1 = "report", a2 = snapshot_path, a3 = "-o", a4 = out;
    char* argv[] = {a0.data(), a1.data(), a2.data(), a3.data(), a4.data(), nullptr};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
    pid_t pid;
    int rc = posix_spawn(&pid, cli.c_str(), &fa, nullptr, argv, env.data());
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) {
      log::warn("MEMTRACE_REPORT: cannot start '{}': {}", cli, std::strerror(rc));
      errno = saved_errno;
      return;
    }
    int status = 0;
    pid_t w;
    while ((w = waitpid(pid, &status, 0)) < 0 && errno == EINTR) {
    }
    if (w < 0)  // the program reaped it (a SIGCHLD handler of its own): the page says for itself
      log::info("report: {} (written by a child the program reaped)", out);
    else if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
      log::info("report: {}", out);
    else
      log::warn("MEMTRACE_REPORT: `memtrace report` failed for {} (status {}); its message is above", snapshot_path,
                WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
  } catch (...) {
  }
  errno = saved_errno;
}

}  // namespace memtrace::preload
