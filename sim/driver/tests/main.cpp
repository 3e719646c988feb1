#define CATCH_CONFIG_RUNNER
#include "helpers.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

extern char** environ;

namespace simtest {

CUcontext use_primary(int dev) {
  static CUcontext primaries[2] = {nullptr, nullptr};
  REQUIRE(cuInit(0) == CUDA_SUCCESS);
  if (primaries[dev] == nullptr) REQUIRE(cuDevicePrimaryCtxRetain(&primaries[dev], dev) == CUDA_SUCCESS);
  REQUIRE(cuCtxSetCurrent(primaries[dev]) == CUDA_SUCCESS);
  return primaries[dev];
}

size_t free_bytes() {
  size_t f = 0, t = 0;
  REQUIRE(cuMemGetInfo(&f, &t) == CUDA_SUCCESS);
  return f;
}

ChildResult run_child(const std::string& name, const std::vector<std::string>& env) {
  std::vector<std::string> vars;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "SIMCUDA_", 8) != 0) vars.emplace_back(*e);
  }
  vars.emplace_back("SIM_DRIVER_TEST_CHILD=1");
  vars.insert(vars.end(), env.begin(), env.end());
  std::vector<char*> envp;
  for (auto& v : vars) envp.push_back(v.data());
  envp.push_back(nullptr);

  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  REQUIRE(n > 0);
  exe[n] = '\0';
  std::string test_name = name;
  char* argv[] = {exe, test_name.data(), nullptr};

  int pipefd[2];
  REQUIRE(pipe2(pipefd, O_CLOEXEC) == 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipefd[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, pipefd[1], STDERR_FILENO);
  pid_t pid;
  int rc = posix_spawn(&pid, exe, &actions, nullptr, argv, envp.data());
  posix_spawn_file_actions_destroy(&actions);
  close(pipefd[1]);
  REQUIRE(rc == 0);
  ChildResult result;
  char buf[4096];
  while ((n = read(pipefd[0], buf, sizeof buf)) > 0) result.output.append(buf, static_cast<size_t>(n));
  close(pipefd[0]);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

}  // namespace simtest

int main(int argc, char* argv[]) {
  if (std::getenv("SIM_DRIVER_TEST_CHILD") == nullptr) {
    setenv("SIMCUDA_DEVICES", "2", 1);
    setenv("SIMCUDA_MEMORY", "256M", 1);
    unsetenv("SIMCUDA_FAIL");
    unsetenv("SIMCUDA_LOG");
  }
  return Catch::Session().run(argc, argv);
}
