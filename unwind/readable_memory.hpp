// Validated reads of this process's own memory, for walking data structures memtrace does not
// own (CPython's frame chain) without trusting their pointers: a read is done only when the
// whole range lies in a mapping that /proc/self/maps listed as readable. The list is a sorted
// table refreshed when an address falls outside it (at most every few milliseconds; between
// refreshes a miss is settled exactly by process_vm_readv). Readers never lock: they check the
// table under a sequence counter, so a refresh in progress makes them look again rather than
// believe a half-written table. See docs/python-frames.md ("Reading memory that may be torn").
#pragma once
#include <cstddef>
#include <cstdint>

namespace memtrace::unwind {

// Copies [addr, addr + len) into out when it is readable; false (and nothing read) otherwise.
bool safe_read(uintptr_t addr, void* out, size_t len);

// Whether [addr, addr + len) is readable now, by the same rules.
bool safe_readable(uintptr_t addr, size_t len);

// Forgets the table so the next read builds it again (tests, and a forked child whose parent
// was refreshing).
void safe_memory_reset();

// How many times the table was read from /proc/self/maps (for tests and the debug log).
uint64_t safe_memory_refreshes();

}  // namespace memtrace::unwind
