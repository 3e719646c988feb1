// The one call the preload makes to write a snapshot: symbolize, build, write atomically, and
// print the summary. It runs inside someone else's process (often at exit): it never throws, and a
// failure to write costs exactly one line on stderr ("memtrace: warning: snapshot not written: ...").
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/records.hpp"
#include "output/frame_source.hpp"
#include "output/output_path.hpp"
#include "output/snapshot_builder.hpp"
#include "unwind/module_map.hpp"

namespace memtrace::unwind {
class StackTable;
}

namespace memtrace::output {

// Why a snapshot is taken. The snapshot's metadata ("reason") and the stderr line of an on-demand
// dump say it with dump_kind_name(); the exit dump's file is named differently (output_path.hpp).
enum class DumpKind : uint8_t {
  Exit,      // the end of the run (preload/exit_dump.cpp)
  Signal,    // MEMTRACE_SIGNAL
  Interval,  // MEMTRACE_INTERVAL
  Oom,       // the driver or the caching allocator said out of memory (MEMTRACE_DUMP_ON_OOM)
  Api,       // the program asked (memtrace_dump, the Python module's dump())
  Recover,   // made after the process ended, from its state file (memtrace recover)
};
constexpr const char* dump_kind_name(DumpKind k) {
  switch (k) {
    case DumpKind::Exit: return "exit";
    case DumpKind::Signal: return "signal";
    case DumpKind::Interval: return "interval";
    case DumpKind::Oom: return "oom";
    case DumpKind::Api: return "api";
    case DumpKind::Recover: return "recover";
  }
  return "unknown";
}

struct DumpRequest {
  std::string path_template;  // MEMTRACE_OUTPUT; empty: no snapshot (the summary says so)
  uint64_t sequence = 0;      // %n
  bool print_summary = true;
  bool report_follows = false;  // the summary says the report is written next (MEMTRACE_REPORT=1)
  bool include_frames = true;
  unsigned symbolize_threads = 0;  // Symbolizer::prepare's threads (0: its default)
  DumpKind kind = DumpKind::Exit;  // its name goes into the snapshot's metadata
  AllocatorSettings allocator;  // allocator_settings
  // Objects seen loaded while recording (dlclosed ones included), so their addresses resolve.
  std::vector<unwind::LoadedObject> module_history;
};

struct DumpReport {
  bool written = false;
  std::string path;   // expanded path (also when writing failed)
  std::string error;  // one line; empty when written or when no snapshot was asked for
  size_t bytes = 0;
  double seconds = 0;  // symbolize + build + write
  // dump_snapshot(): whether the last dump's Symbolizer served (unwind/symbolizer_reuse.hpp), and
  // the calling thread's CPU time in getting it and symbolizing every native address ahead
  // (prepare()'s other threads, used above a few hundred new addresses, not counted).
  bool symbolizer_reused = false;
  double symbolize_cpu_seconds = 0;
};

// Symbolizes with the process's dump Symbolizer (a fresh one when objects were loaded or unloaded
// since the last dump: unwind/symbolizer_reuse.hpp), then dump_with_source(). One at a time per
// process: a second call waits for the first.
DumpReport dump_snapshot(const StateCopy& state, const unwind::StackTable& stacks, const DumpRequest& request);

// The same with the frames and the process facts supplied by the caller (tests, other front ends).
// If the frame source throws while the snapshot is built, it is built again without frames.
DumpReport dump_with_source(const StateCopy& state, FrameSource& frames, const DumpRequest& request,
                            const PathContext& context, const std::string& exe_path,
                            std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now());

}  // namespace memtrace::output
