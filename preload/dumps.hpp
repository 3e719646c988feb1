// Taking a snapshot of the session: one at a time, whatever asked for it (the exit, a signal, the
// interval timer, an out-of-memory), none after the exit snapshot; interval snapshots beyond
// MEMTRACE_INTERVAL_KEEP removed. How the files are named is output/output_path.hpp's rule.
#pragma once

#include <string>
#include <string_view>

#include "output/dump.hpp"

namespace memtrace::preload {

// Writes a snapshot now, in the calling thread; keeps the program's errno. Does nothing without a
// recording session or once the exit snapshot is taken.
void dump_now(output::DumpKind kind);

// A snapshot the program asked for (memtrace_dump): what came of it.
struct RequestedDump {
  enum Outcome { Written, NotRecording, AfterExit, Failed } outcome = NotRecording;
  std::string path;   // the file written, or the one that could not be
  std::string error;  // one line when Failed (also logged, once, as every failed snapshot is)
};
// Written in the calling thread before it returns, under the same one-at-a-time rule: at `path`
// exactly when it is not empty (no '%' expansion: the program named its file), else under the
// configured name as any on-demand dump. Keeps the program's errno.
RequestedDump dump_requested(std::string_view path);

// Whether the exit snapshot has been taken (or is being taken).
bool exit_dump_taken();

// In a forked child: numbering starts again from 0, and a dump another parent thread was writing
// at the fork (that thread is not in the child) is not waited for.
void dumps_after_fork_child();

}  // namespace memtrace::preload
