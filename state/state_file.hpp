// The recording process's side of the state file (docs/state-file.md): the folder checked, the file
// created (0600, O_EXCL|O_NOFOLLOW) and its whole size reserved, mapped shared, its header filled
// in; the recorder and the stack table then write into it (core/state_memory.hpp,
// unwind::StackMirror), and this side adds the loaded objects as they appear.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <utility>

#include "core/state_memory.hpp"
#include "state/state_layout.hpp"
#include "state/state_paths.hpp"
#include "unwind/stack_table.hpp"

namespace memtrace::state {

struct CreateOptions {
  std::string dir;          // "" = the first of default_state_dirs() that can hold the file
  bool dir_is_default = true;  // the default folder is created 0700 and must be ours and private
  uint64_t ring_entries = 0;
  std::string program, host, rank;
};

class StateFile {
 public:
  StateFile() = default;
  StateFile(const StateFile&) = delete;
  StateFile& operator=(const StateFile&) = delete;

  // Creates and maps the file. False, with one line in *why and nothing left behind, on failure.
  bool create(const CreateOptions& options, std::string* why);
  bool active() const { return header_ != nullptr; }
  const std::string& path() const { return path_; }

  StateMemory memory() const;
  unwind::StackMirror* stack_mirror() { return &mirror_; }
  // Adds the objects loaded since the last call (when the loader's list changed). Cold: called
  // after each new stack; a call that finds another one running returns at once.
  void record_modules();
  // Async-signal-safe: notes the signal that is ending the process, for `memtrace recover` to say.
  void note_signal(int sig) const {
    if (header_) header_->fatal_signal.store(sig, std::memory_order_relaxed);
  }
  // The signal that asks for a snapshot (0: none), for `memtrace snap` to send.
  void note_dump_signal(int sig) const {
    if (header_) header_->dump_signal.store(sig, std::memory_order_release);
  }
  // A snapshot is complete at `path` (cold: one per snapshot; snapshots are written one at a time).
  void note_snapshot(const std::string& path) const;
  // Async-signal-safe: asks the kernel to write the mapping back (only a power cut needs it; the
  // page cache keeps a killed process's writes).
  void sync() const;
  // The process ends cleanly and its snapshot is written: the file goes (the mapping stays, so
  // late events still have somewhere to go).
  void remove();
  // A forked child: the file is the parent's; forget it without touching it.
  void forget();

 private:
  bool create_in(const std::string& dir, bool is_default, const CreateOptions& o, std::string* why);
  Header* header_ = nullptr;
  uint64_t bytes_ = 0;
  std::string path_;
  unwind::StackMirror mirror_;
  std::mutex modules_mu_;
  uint64_t loader_gen_ = ~uint64_t{0};
  std::set<std::pair<uintptr_t, std::string>> modules_seen_;
};

}  // namespace memtrace::state
