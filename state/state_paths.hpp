// Where state files are (docs/state-file.md), for the writer and for the command line's readers
// (`memtrace run` looks for its program's file): header-only, so bin/memtrace links nothing of it.
#pragma once
#include <stdlib.h>
#include <unistd.h>

#include <string>

namespace memtrace::state {

// MEMTRACE_STATE_DIR's default: $XDG_RUNTIME_DIR/memtrace when that is set, else /tmp/memtrace-UID.
inline std::string default_state_dir() {
  const char* xdg = getenv("XDG_RUNTIME_DIR");
  if (xdg && xdg[0] == '/') return std::string(xdg) + "/memtrace";
  return "/tmp/memtrace-" + std::to_string(getuid());
}

// The folder MEMTRACE_STATE_DIR names ("" when it is "off").
inline std::string configured_state_dir() {
  const char* v = getenv("MEMTRACE_STATE_DIR");
  if (v && std::string(v) == "off") return {};
  return v && *v ? std::string(v) : default_state_dir();
}

// The file a process of this pid writes first; "memtrace-PID-N.state" when that name is taken.
inline std::string state_file_name(long pid) { return "memtrace-" + std::to_string(pid) + ".state"; }
inline std::string state_file_name(long pid, int n) {
  return n == 0 ? state_file_name(pid) : "memtrace-" + std::to_string(pid) + "-" + std::to_string(n) + ".state";
}

}  // namespace memtrace::state
