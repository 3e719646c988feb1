// The benchmarks that measure memtrace inside a program run each configuration in a fresh child
// (its own environment, so its own LD_PRELOAD and MEMTRACE_* settings, and a session of its own):
// `self --child ARGS...` prints its figures on one line, which the parent reads back.
#pragma once
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

namespace memtrace::bench {

// Runs argv (with env added to this environment) and returns what it printed on stdout (and on
// stderr too with merge_stderr), or "" when it could not run or failed.
inline std::string run_command(const std::vector<std::string>& args, const std::vector<std::string>& env,
                               bool merge_stderr, pid_t* child = nullptr) {
  int fds[2];
  if (pipe(fds) != 0) return "";
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 1);
    if (merge_stderr) dup2(fds[1], 2);
    close(fds[0]);
    for (const std::string& e : env) putenv(const_cast<char*>(e.c_str()));
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    _exit(127);
  }
  if (child != nullptr) *child = pid;
  close(fds[1]);
  std::string out;
  char buf[256];
  for (ssize_t got; (got = read(fds[0], buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(got));
  close(fds[0]);
  int st = 0;
  waitpid(pid, &st, 0);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) return "";
  return out;
}

// The child's line, or "" when it could not run or failed. The snapshot the child's session wrote
// at exit (MEMTRACE_OUTPUT's default for the benchmarks: snapshot_prefix + pid + ".pickle") is removed.
inline std::string run_child(const char* self, const std::vector<std::string>& args,
                             const std::vector<std::string>& env, const std::string& snapshot_prefix) {
  std::vector<std::string> argv{self, "--child"};
  argv.insert(argv.end(), args.begin(), args.end());
  pid_t pid = 0;
  std::string out = run_command(argv, env, false, &pid);
  if (pid > 0) unlink((snapshot_prefix + std::to_string(pid) + ".pickle").c_str());
  return out;
}

}  // namespace memtrace::bench
