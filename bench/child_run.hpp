// The benchmarks that measure memtrace inside a program run each configuration in a fresh child
// (its own environment, so its own LD_PRELOAD and MEMTRACE_* settings, and a session of its own):
// `self --child ARGS...` prints its figures on one line, which the parent reads back.
#pragma once
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

namespace memtrace::bench {

// The child's line, or "" when it could not run or failed. The snapshot the child's session wrote
// at exit (MEMTRACE_OUTPUT's default for the benchmarks: snapshot_prefix + pid + ".pickle") is removed.
inline std::string run_child(const char* self, const std::vector<std::string>& args,
                             const std::vector<std::string>& env, const std::string& snapshot_prefix) {
  int fds[2];
  if (pipe(fds) != 0) return "";
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 1);
    close(fds[0]);
    for (const std::string& e : env) putenv(const_cast<char*>(e.c_str()));
    std::vector<char*> argv{const_cast<char*>(self), const_cast<char*>("--child")};
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(self, argv.data());
    _exit(127);
  }
  close(fds[1]);
  std::string out;
  char buf[256];
  for (ssize_t got; (got = read(fds[0], buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(got));
  close(fds[0]);
  int st = 0;
  waitpid(pid, &st, 0);
  unlink((snapshot_prefix + std::to_string(pid) + ".pickle").c_str());
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) return "";
  return out;
}

}  // namespace memtrace::bench
