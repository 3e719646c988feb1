// Test-only: collects forked children without ever blocking on one. A child still running kChildLimit after
// its fork is killed and counted as hung (deadlocked) instead of being waited for forever; the limit is
// generous because the CI machine has 2 loaded cores and ctest runs other suites beside the fork tests.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <sstream>
#include <string>
#include <thread>

namespace fork_reaper {

using Clock = std::chrono::steady_clock;

// How long a child may take before it is declared hung; each child makes only a handful of calls.
constexpr auto kChildLimit = std::chrono::seconds(60);
constexpr int kHung = -1;

class Reaper {
 public:
  void add(pid_t pid) { live_[pid] = Clock::now(); }

  void poll() {
    for (auto it = live_.begin(); it != live_.end();) {
      int status = 0;
      pid_t r = waitpid(it->first, &status, WNOHANG);
      if (r == it->first) {
        record(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
        it = live_.erase(it);
      } else if (Clock::now() - it->second > kChildLimit) {
        kill(it->first, SIGKILL);
        waitpid(it->first, &status, 0);
        record(kHung);
        it = live_.erase(it);
      } else {
        ++it;
      }
    }
  }

  // Returns once every child has exited or been declared hung.
  void finish() {
    while (!live_.empty()) {
      poll();
      if (!live_.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

  int children() const { return total_; }
  int hung() const { return outcomes_.count(kHung) ? outcomes_.at(kHung) : 0; }
  int passed() const { return outcomes_.count(0) ? outcomes_.at(0) : 0; }
  // "code x count" for every outcome, for the failure message.
  std::string describe() const {
    std::ostringstream s;
    for (auto [code, n] : outcomes_) {
      s << (code == kHung ? std::string("hung") : "exit " + std::to_string(code)) << " x" << n << "; ";
    }
    return s.str();
  }

 private:
  void record(int code) {
    ++outcomes_[code];
    ++total_;
  }
  std::map<pid_t, Clock::time_point> live_;
  std::map<int, int> outcomes_;
  int total_ = 0;
};

// Forks up to n children, each running child() and _exit()ing with what it returns, handing each
// pid to the reaper as it goes. Returns how many forks failed (the loop stops at the first).
template <class Child>
int fork_children(Reaper& reaper, int n, Child child) {
  for (int i = 0; i < n; ++i) {
    pid_t pid = fork();
    if (pid == 0) _exit(child());
    if (pid < 0) return 1;
    reaper.add(pid);
    reaper.poll();
  }
  return 0;
}

}  // namespace fork_reaper
