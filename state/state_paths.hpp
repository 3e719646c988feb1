// Where state files are (docs/state-file.md), for the writer and for the command line's readers
// (`memtrace run` looks for its program's file): header-only, so bin/memtrace links nothing of it.
#pragma once
#include <stdlib.h>
#include <unistd.h>

#include <string>
#include <vector>

namespace memtrace::state {

// MEMTRACE_STATE_DIR's default folders, tried in this order: $XDG_RUNTIME_DIR/memtrace when that is
// set, /dev/shm/memtrace-UID, /tmp/memtrace-UID. The first two are memory file systems, where a
// shared mapping costs no disk writeback; the next is taken when one cannot hold the file (a
// container's small /dev/shm).
inline std::vector<std::string> default_state_dirs() {
  std::vector<std::string> out;
  const char* xdg = getenv("XDG_RUNTIME_DIR");
  if (xdg && xdg[0] == '/') out.push_back(std::string(xdg) + "/memtrace");
  const std::string uid = std::to_string(getuid());
  out.push_back("/dev/shm/memtrace-" + uid);
  out.push_back("/tmp/memtrace-" + uid);
  return out;
}

// The folders a state file of this environment may be in (none when MEMTRACE_STATE_DIR is "off").
inline std::vector<std::string> configured_state_dirs() {
  const char* v = getenv("MEMTRACE_STATE_DIR");
  if (v && std::string(v) == "off") return {};
  if (v && *v) return {std::string(v)};
  return default_state_dirs();
}

// The file a process of this pid writes first; "memtrace-PID-N.state" when that name is taken.
inline std::string state_file_name(long pid) { return "memtrace-" + std::to_string(pid) + ".state"; }
inline std::string state_file_name(long pid, int n) {
  return n == 0 ? state_file_name(pid) : "memtrace-" + std::to_string(pid) + "-" + std::to_string(n) + ".state";
}

}  // namespace memtrace::state
