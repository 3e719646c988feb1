// Where a loaded object's code lies, and above all where memtrace's own code lies: the frames a
// stack capture drops, the module whose frames never show in a snapshot, the object the deep-bind
// scan leaves alone. Found here, and only here, from the loader's program headers.
#pragma once
#include <cstdint>

namespace memtrace::unwind {

// The span from the lowest to the highest end of one object's executable PT_LOAD segments.
struct CodeRange {
  uintptr_t lo = 0, hi = 0;
  bool contains(uintptr_t a) const { return a >= lo && a < hi; }
  bool empty() const { return lo >= hi; }
};

// The code of the loaded object one of whose executable segments holds `addr`; empty if none.
// Walks the loader's list (dl_iterate_phdr): not for hot paths.
CodeRange code_range_of(uintptr_t addr);

// memtrace's own code: libmemtrace.so, or the program unwind/ is linked into (tests, tools).
// Found on the first call, then one load.
CodeRange own_code();

}  // namespace memtrace::unwind
