// Raw return addresses of the calling thread, innermost first, via libunwind's fast path
// (unw_backtrace with its per-thread cache). No symbolization, no allocation.
#pragma once
#include <cstdint>

namespace memtrace::unwind {

// Writes at most max_depth return addresses into out; returns how many.
// Frames of memtrace itself are NOT removed here (output drops them by module).
int capture(uintptr_t* out, int max_depth);

}  // namespace memtrace::unwind
