// Raw return addresses of the calling thread, innermost first: memtrace's own walk of the
// stack with cached frame rules, libunwind's unw_backtrace where the walk cannot be sure
// (docs/stack-capture.md). No symbolization; no allocation once a thread has its table.
#pragma once
#include <cstdint>

namespace memtrace::unwind {

// How many walks a thread remembers (docs/stack-capture.md, "Repeated stacks"). Their tokens
// are consecutive numbers, so a caller's cache of this many entries indexed by token modulo its
// size holds all the live ones without collisions.
constexpr unsigned kRememberedWalks = 64;

// Writes at most max_depth return addresses into out; returns how many.
// Frames of memtrace itself are NOT removed here (output drops them by module).
// The first entry is a pc inside capture() itself.
//
// token (optional): nonzero when the answer came from, or was remembered as, one of this
// thread's remembered walks; two captures on one thread that give the same nonzero token gave
// the same frames, so a caller may keep what it derived from them (a stack id) by token. 0 says
// nothing. Tokens are never reused within a thread.
int capture(uintptr_t* out, int max_depth, uint64_t* token = nullptr);

// How this thread's captures were answered by the walk, for tests and benchmarks: from a
// remembered walk whole, by joining one part way (docs/stack-capture.md), or by walking to the
// end. Captures that libunwind answered are in none of them.
struct CaptureCounts {
  uint64_t remembered = 0, joined = 0, walked = 0;
};
CaptureCounts capture_counts();

// This thread forgets the walks it remembered (its rule table stays): for tests that need a
// thread with room, as a thread that has just started has.
void forget_remembered_walks();

// libunwind's answer alone (unw_backtrace): what capture() must equal, for tests and benchmarks.
// The first entry is a pc inside capture_libunwind().
int capture_libunwind(uintptr_t* out, int max_depth);

// The walk alone: -1 where capture() would hand the stack to libunwind. For the tests, which
// check that the walk, not the fallback, answered. The first entry is a pc inside this function.
int capture_walk_only(uintptr_t* out, int max_depth, uint64_t* token = nullptr);

}  // namespace memtrace::unwind
