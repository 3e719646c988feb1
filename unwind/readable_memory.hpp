// Validated reads of this process's own memory, for walking data structures memtrace does not
// own (CPython's frame chain) without trusting their pointers: a read is done only when the
// whole range lies in a mapping that /proc/self/maps listed as readable. The list is a sorted
// table refreshed when an address falls outside it (at most every few milliseconds; between
// refreshes a miss is settled exactly by process_vm_readv). Readers never lock: they check the
// table under a sequence counter, so a refresh in progress makes them look again rather than
// believe a half-written table. See docs/python-frames.md ("Reading memory that may be torn").
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace memtrace::unwind {

namespace detail {
// The ranges this thread last found readable, valid while the table's sequence number is the one
// they were found under: a walk reads mostly the same two or three mappings (the frame stack, the
// heap), so most reads are settled here, inline, without a search.
struct HotRange {
  uintptr_t lo, hi;
};
constexpr int kHotRanges = 4;
extern __thread HotRange t_hot[kHotRanges] __attribute__((tls_model("initial-exec")));
extern __thread uint32_t t_hot_seq __attribute__((tls_model("initial-exec")));
extern std::atomic<uint32_t> g_maps_seq;
bool safe_read_slow(uintptr_t addr, void* out, size_t len);
bool safe_readable_slow(uintptr_t addr, size_t len);

// The copy itself: memory outside any object this process owns (another library's structures, or
// past an object's end when a pointer was torn) is read on purpose once the range is known to be
// mapped and readable, so AddressSanitizer must not instrument it. ThreadSanitizer neither: it
// too reports such a read when it lands in freed heap memory, and the interpreter's threads write
// those frames and code objects with no synchronisation memtrace could take part in (the walk
// holds no GIL), so the read races with them by design. A torn value is harmless: every pointer
// read is validated again, and a chain that does not hold together ends the walk as failed
// (docs/python-frames.md, "Reading memory that may be torn").
__attribute__((no_sanitize("address", "hwaddress", "thread"))) inline void copy_unchecked(void* out, uintptr_t addr,
                                                                                          size_t len) {
  auto* d = static_cast<unsigned char*>(out);
  const auto* s = reinterpret_cast<const unsigned char*>(addr);
  for (size_t i = 0; i < len; ++i) d[i] = s[i];
}

inline bool hot(uintptr_t a, size_t len) {
  const uintptr_t b = a + len;
  if (t_hot_seq != g_maps_seq.load(std::memory_order_acquire) || b < a) return false;
  for (const HotRange& r : t_hot)
    if (a >= r.lo && b <= r.hi) return true;
  return false;
}
}  // namespace detail

// Copies [addr, addr + len) into out when it is readable; false (and nothing read) otherwise.
inline bool safe_read(uintptr_t addr, void* out, size_t len) {
  if (addr != 0 && len != 0 && detail::hot(addr, len)) {
    detail::copy_unchecked(out, addr, len);
    return true;
  }
  return detail::safe_read_slow(addr, out, len);
}

// Whether [addr, addr + len) is readable now, by the same rules.
inline bool safe_readable(uintptr_t addr, size_t len) {
  return (addr != 0 && len != 0 && detail::hot(addr, len)) || detail::safe_readable_slow(addr, len);
}

// Forgets the table so the next read builds it again (tests, and a forked child whose parent
// was refreshing).
void safe_memory_reset();

// How many times the table was read from /proc/self/maps (for tests and the debug log).
uint64_t safe_memory_refreshes();

}  // namespace memtrace::unwind
