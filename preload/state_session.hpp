// The session's state file (docs/state-file.md): created as recording starts, so that the record
// outlives a process that is killed or crashes; removed once the exit snapshot is written; left to
// its parent by a forked child.
#pragma once
#include <string>

namespace memtrace::preload {

struct Session;

// Creates the file in MEMTRACE_STATE_DIR and moves the recorder's ring, counters and live records
// and the stack table's new stacks into it. A folder or file that cannot be used costs one warning,
// and recording goes on in private memory. Called once, before the first event is recorded.
void start_state_file(Session& s);
// Notes a signal that ends the program in the file, then hands it on (preload/state_signals.hpp).
// Called after every other handler memtrace installs, so that it chains to them too.
void watch_fatal_signals();
// After the exit snapshot: written (or none asked for) removes the file; a snapshot that could not
// be written leaves it for `memtrace recover`.
void end_state_file(bool snapshot_written);
// In a forked child: the file is the parent's.
void state_file_after_fork();
// The session has tried to install MEMTRACE_SIGNAL's handler: the state file says which signal
// answers (0: none), for `memtrace snap`, which waits until it does.
void note_dump_signal_armed(int sig);
// The program took the dump signal over: `memtrace snap` must not send it.
void note_dump_signal_off();
// A snapshot was written while the program runs: its path, for `memtrace snap` to hand on.
void note_snapshot_written(const std::string& path);
// The path of this process's state file, "" when it has none.
const char* state_file_path();

}  // namespace memtrace::preload
