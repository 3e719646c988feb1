// The processes running under memtrace now, found through their state files (docs/state-file.md):
// what `memtrace top` and `memtrace snap` look at. A dead process's file is left for `recover`.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "state/state_peek.hpp"

namespace memtrace::cli {

struct Running {
  std::string path;
  std::unique_ptr<state::PeekMap> map;
};

bool process_alive(long pid);
// The configured state folders, and the MEMTRACE_STATE_DIR each named process had at exec.
std::vector<std::string> state_dirs_for(const std::vector<long>& pids);
// The live processes' files in `dirs` (for `pids` only, when given), the newest file per pid.
std::vector<Running> find_running(const std::vector<std::string>& dirs, const std::vector<long>& pids);
// Whether `dirs` hold a file named for `pid` that cannot be read yet: a process that is making
// its file has one before find_running can read it.
bool has_state_file_in_making(const std::vector<std::string>& dirs, long pid);
// Why `pid` was not found: one line ("no process N", "process N is not running under memtrace ...").
std::string not_running(long pid);

}  // namespace memtrace::cli
