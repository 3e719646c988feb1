// Snapshots on demand, besides the one at exit: on a signal (MEMTRACE_SIGNAL), every N seconds
// (MEMTRACE_INTERVAL) and on out-of-memory (MEMTRACE_DUMP_ON_OOM, a few per run). The signal
// handler only posts a semaphore; a memtrace thread, started lazily, takes the dump, so the
// program's threads are held up only for the copy of the state.
#pragma once

#include <atomic>

#include "core/config.hpp"

namespace memtrace::preload {

// At session start: installs the signal handler (chaining to the program's) and, when a
// signal or an interval is configured, starts the dump thread.
void start_dump_triggers(const Config& c);
// An out-of-memory was recorded: dumps now, in the calling thread, at most a few times per run.
void note_oom_for_dump();
// Warns once if the program took the dump signal over (its own handler) or blocks it everywhere.
void check_dump_signal(bool at_exit);
// In a forked child: the dump thread did not survive the fork. It is started again by the
// child's first hooked call, not in the fork handler.
void dump_triggers_after_fork();
extern std::atomic<bool> g_restart_in_child;
void resume_dump_thread_after_fork_slow();
inline void resume_dump_thread_after_fork() {
  if (__builtin_expect(g_restart_in_child.load(std::memory_order_relaxed), 0)) resume_dump_thread_after_fork_slow();
}

}  // namespace memtrace::preload
