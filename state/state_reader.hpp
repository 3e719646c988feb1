// Reading a state file (docs/state-file.md) back into what a dump works from: the live records at
// the moment the process stopped, the kept history, the counters, the recorded stacks (raw
// addresses) and the loaded objects, so that stacks can be symbolized from the files on disk.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/records.hpp"
#include "unwind/module_map.hpp"

namespace memtrace::state {

struct Recovered {
  StateCopy state;  // stack ids are the recorded ones: index into `stacks` minus one
  std::vector<std::vector<uintptr_t>> stacks;  // empty where the addresses did not fit
  std::vector<unwind::LoadedObject> modules;
  int64_t pid = 0;
  std::string program, host, rank;
  uint64_t live_unrecorded = 0;  // live allocations the file has no room for (none normally)
  bool same_boot = true;         // false: times are estimates (the tick counter was another boot's)
  int fatal_signal = 0;           // the signal memtrace saw ending the process, 0 if none
  bool ended_cleanly = false;    // the process had removed the file (a copy made just before)
};

// Reads the file. False with one line in *why (no file, not a state file, another format
// version or build, truncated, written by another user) and *out untouched.
bool read_state_file(const std::string& path, Recovered* out, std::string* why);
// The loaded objects alone (cheap however long the ring): for naming a running process's frames.
bool read_state_modules(const std::string& path, std::vector<unwind::LoadedObject>* out, std::string* why);

}  // namespace memtrace::state
