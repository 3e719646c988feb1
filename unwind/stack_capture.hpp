// Raw return addresses of the calling thread, innermost first: memtrace's own walk of the
// stack with cached frame rules, libunwind's unw_backtrace where the walk cannot be sure
// (docs/stack-capture.md). No symbolization; no allocation once a thread has its table.
#pragma once
#include <cstdint>

namespace memtrace::unwind {

// Writes at most max_depth return addresses into out; returns how many.
// Frames of memtrace itself are NOT removed here (output drops them by module).
// The first entry is a pc inside capture() itself.
//
// token (optional): nonzero when the answer came from, or was remembered as, one of this
// thread's remembered walks; two captures on one thread that give the same nonzero token gave
// the same frames, so a caller may keep what it derived from them (a stack id) by token. 0 says
// nothing. Tokens are never reused within a thread.
int capture(uintptr_t* out, int max_depth, uint64_t* token = nullptr);

// libunwind's answer alone (unw_backtrace): what capture() must equal, for tests and benchmarks.
// The first entry is a pc inside capture_libunwind().
int capture_libunwind(uintptr_t* out, int max_depth);

// The walk alone: -1 where capture() would hand the stack to libunwind. For the tests, which
// check that the walk, not the fallback, answered. The first entry is a pc inside this function.
int capture_walk_only(uintptr_t* out, int max_depth, uint64_t* token = nullptr);

}  // namespace memtrace::unwind
