#include "cli/running.hpp"

#include <dirent.h>
#include <signal.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <fstream>
#include <map>

#include "state/state_paths.hpp"

namespace memtrace::cli {

namespace {

// MEMTRACE_STATE_DIR as the process itself has it (its environment at exec), "" when unset.
std::string state_dir_of(long pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/environ", std::ios::binary);
  std::string var;
  while (std::getline(f, var, '\0'))
    if (var.rfind("MEMTRACE_STATE_DIR=", 0) == 0) return var.substr(19);
  return "";
}

// "memtrace-PID.state" or "memtrace-PID-N.state": PID, or 0 for any other name.
long pid_of_name(const std::string& name) {
  if (name.rfind("memtrace-", 0) != 0 || name.size() < 16 || name.compare(name.size() - 6, 6, ".state") != 0)
    return 0;
  const std::string mid = name.substr(9, name.size() - 15);
  size_t n = 0;
  while (n < mid.size() && isdigit(static_cast<unsigned char>(mid[n]))) ++n;
  if (n == 0 || (n < mid.size() && mid[n] != '-')) return 0;
  return std::stol(mid.substr(0, n));
}

}  // namespace

bool process_alive(long pid) { return pid > 0 && (kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM); }

std::vector<std::string> state_dirs_for(const std::vector<long>& pids) {
  std::vector<std::string> dirs = state::configured_state_dirs();
  for (long pid : pids) {
    const std::string d = state_dir_of(pid);
    if (!d.empty() && d != "off" && std::find(dirs.begin(), dirs.end(), d) == dirs.end()) dirs.push_back(d);
  }
  return dirs;
}

std::vector<Running> find_running(const std::vector<std::string>& dirs, const std::vector<long>& pids) {
  std::map<long, Running> best;
  for (const std::string& dir : dirs) {
    DIR* d = opendir(dir.c_str());
    if (!d) continue;
    while (dirent* e = readdir(d)) {
      const long pid = pid_of_name(e->d_name);
      if (pid == 0 || !process_alive(pid)) continue;
      if (!pids.empty() && std::find(pids.begin(), pids.end(), pid) == pids.end()) continue;
      Running w;
      w.path = dir + "/" + e->d_name;
      w.map = std::make_unique<state::PeekMap>();
      std::string why;
      if (!w.map->open(w.path, &why)) continue;
      const state::Header& h = w.map->header();
      if (h.pid != pid || h.state != state::kRunning) continue;
      auto it = best.find(pid);
      if (it == best.end() || it->second.map->header().start_us < h.start_us) best[pid] = std::move(w);
    }
    closedir(d);
  }
  std::vector<Running> out;
  for (auto& [pid, w] : best) out.push_back(std::move(w));
  return out;
}

bool has_state_file_in_making(const std::vector<std::string>& dirs, long pid) {
  for (const std::string& dir : dirs) {
    DIR* d = opendir(dir.c_str());
    if (!d) continue;
    bool making = false;
    while (dirent* e = readdir(d)) {
      std::string why;
      if (pid_of_name(e->d_name) == pid && !state::PeekMap().open(dir + "/" + e->d_name, &why)) {
        making = true;
        break;
      }
    }
    closedir(d);
    if (making) return true;
  }
  return false;
}

std::string not_running(long pid) {
  if (!process_alive(pid)) return "no process " + std::to_string(pid);
  return "process " + std::to_string(pid) + " is not running under memtrace (no state file of it)";
}

}  // namespace memtrace::cli
