#include "unwind/readable_memory.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

namespace memtrace::unwind {

namespace detail {
__thread HotRange t_hot[kHotRanges] __attribute__((tls_model("initial-exec")));
__thread uint32_t t_hot_seq __attribute__((tls_model("initial-exec"))) = ~0u;
std::atomic<uint32_t> g_maps_seq{0};
}  // namespace detail

namespace {

using detail::kHotRanges;
using detail::t_hot;
using detail::t_hot_seq;
using Range = detail::HotRange;
std::atomic<uint32_t>& g_seq = detail::g_maps_seq;

constexpr uint32_t kCapacity = 1u << 16;           // mappings; a large PyTorch job has ~5,000
constexpr uint64_t kMinRefreshNs = 5'000'000;      // a miss refreshes at most every 5 ms

// The published table. Entries are written only under an odd sequence number; readers accept
// what they found only if the number was even and unchanged around their search.
Range* g_table = nullptr;
Range* g_scratch = nullptr;
std::atomic<uint32_t> g_count{0};
std::atomic<bool> g_refreshing{false};
std::atomic<uint64_t> g_last_refresh_ns{0};
std::atomic<uint64_t> g_refreshes{0};
std::atomic<int> g_vm_readv{1};  // 0 once the kernel refused it (seccomp, old kernel)

__thread uint32_t t_hot_next __attribute__((tls_model("initial-exec"))) = 0;

uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

bool ensure_buffers() {
  if (g_table) return true;
  static std::atomic<bool> creating{false};
  bool expected = false;
  if (!creating.compare_exchange_strong(expected, true)) return false;  // another thread is on it
  void* a = mmap(nullptr, 2 * kCapacity * sizeof(Range), PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (a == MAP_FAILED) {
    creating.store(false);
    return false;
  }
  g_scratch = static_cast<Range*>(a) + kCapacity;
  __atomic_store_n(&g_table, static_cast<Range*>(a), __ATOMIC_RELEASE);
  return true;
}

uintptr_t hex(const char*& p, const char* end) {
  uintptr_t v = 0;
  for (; p < end; ++p) {
    char c = *p;
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) break;
    v = v * 16 + static_cast<uintptr_t>(d);
  }
  return v;
}

// Parses /proc/self/maps into g_scratch (sorted by the kernel, adjacent readable mappings
// merged). No allocation: the file is read in blocks through a stack buffer.
uint32_t read_maps() {
  int fd = static_cast<int>(syscall(SYS_openat, AT_FDCWD, "/proc/self/maps", O_RDONLY | O_CLOEXEC));
  if (fd < 0) return 0;
  char buf[8192];
  size_t have = 0;
  uint32_t n = 0;
  bool eof = false;
  while (!eof || have > 0) {
    if (!eof && have < sizeof buf) {
      ssize_t r = read(fd, buf + have, sizeof buf - have);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) eof = true;
      else have += static_cast<size_t>(r);
    }
    char* nl = static_cast<char*>(memchr(buf, '\n', have));
    if (!nl) {
      if (eof || have == sizeof buf) have = 0;  // a line longer than the buffer: drop it
      continue;
    }
    const char* p = buf;
    const char* end = nl;
    uintptr_t lo = hex(p, end);
    if (p < end && *p == '-') ++p;
    uintptr_t hi = hex(p, end);
    if (p < end && *p == ' ') ++p;
    bool readable = p < end && *p == 'r';
    // Device mappings (a GPU's BAR, /dev/mem) and the vvar page are readable on paper but reading
    // them can fault or has side effects: never walk into them.
    const char* path = static_cast<const char*>(memchr(p, '/', static_cast<size_t>(end - p)));
    const char* bracket = static_cast<const char*>(memchr(p, '[', static_cast<size_t>(end - p)));
    if (path && end - path >= 5 && std::memcmp(path, "/dev/", 5) == 0 && !memmem(path, static_cast<size_t>(end - path), "/dev/shm/", 9))
      readable = false;
    if (bracket && end - bracket >= 5 && std::memcmp(bracket, "[vvar", 5) == 0) readable = false;
    if (readable && hi > lo && n < kCapacity) {
      if (n > 0 && g_scratch[n - 1].hi == lo) g_scratch[n - 1].hi = hi;
      else g_scratch[n++] = Range{lo, hi};
    }
    size_t used = static_cast<size_t>(nl + 1 - buf);
    std::memmove(buf, nl + 1, have - used);
    have -= used;
  }
  close(fd);
  return n;
}

void refresh() {
  bool expected = false;
  if (!g_refreshing.compare_exchange_strong(expected, true, std::memory_order_acquire)) return;
  int saved = errno;  // the program's errno is not memtrace's to change
  uint32_t n = read_maps();
  errno = saved;
  if (n > 0) {
    g_seq.fetch_add(1, std::memory_order_acq_rel);  // odd: readers wait or look again
    for (uint32_t i = 0; i < n; ++i) {
      __atomic_store_n(&g_table[i].lo, g_scratch[i].lo, __ATOMIC_RELAXED);
      __atomic_store_n(&g_table[i].hi, g_scratch[i].hi, __ATOMIC_RELAXED);
    }
    g_count.store(n, std::memory_order_relaxed);
    g_seq.fetch_add(1, std::memory_order_release);
    g_refreshes.fetch_add(1, std::memory_order_relaxed);
  }
  g_last_refresh_ns.store(now_ns(), std::memory_order_relaxed);
  g_refreshing.store(false, std::memory_order_release);
}

// Searches the table for one range holding [a, b). Returns the range's bounds through *hit.
bool in_table(uintptr_t a, uintptr_t b, Range* hit, uint32_t* seq_out) {
  for (int spins = 0;; ++spins) {
    uint32_t s = g_seq.load(std::memory_order_acquire);
    if (s & 1) {
      if (spins > 100000) return false;  // a writer stopped mid-refresh (cannot happen short of a fork)
      continue;
    }
    uint32_t n = g_count.load(std::memory_order_relaxed);
    uint32_t lo = 0, hi = n;
    bool found = false;
    Range r{0, 0};
    while (lo < hi) {
      uint32_t mid = lo + (hi - lo) / 2;
      uintptr_t mlo = __atomic_load_n(&g_table[mid].lo, __ATOMIC_RELAXED);
      uintptr_t mhi = __atomic_load_n(&g_table[mid].hi, __ATOMIC_RELAXED);
      if (a < mlo) {
        hi = mid;
      } else if (a >= mhi) {
        lo = mid + 1;
      } else {
        found = b <= mhi;
        r = Range{mlo, mhi};
        break;
      }
    }
    std::atomic_thread_fence(std::memory_order_acquire);
    if (g_seq.load(std::memory_order_relaxed) != s) continue;
    *hit = r;
    *seq_out = s;
    return found;
  }
}

bool readable_slow(uintptr_t a, uintptr_t b) {
  if (!ensure_buffers()) return false;
  Range hit;
  uint32_t seq;
  if (g_count.load(std::memory_order_relaxed) == 0) refresh();
  if (in_table(a, b, &hit, &seq)) {
    t_hot[t_hot_next++ % kHotRanges] = hit;
    t_hot_seq = seq;
    return true;
  }
  // Not in the table: perhaps mapped since it was read.
  uint64_t last = g_last_refresh_ns.load(std::memory_order_relaxed);
  if (now_ns() - last >= kMinRefreshNs) {
    refresh();
    if (in_table(a, b, &hit, &seq)) {
      if (seq != t_hot_seq) t_hot_next = 0;
      t_hot[t_hot_next++ % kHotRanges] = hit;
      t_hot_seq = seq;
      return true;
    }
  }
  return false;
}

}  // namespace

namespace detail {

bool safe_readable_slow(uintptr_t addr, size_t len) {
  if (addr == 0 || len == 0) return false;
  uintptr_t end = addr + len;
  if (end < addr) return false;
  return readable_slow(addr, end);
}

bool safe_read_slow(uintptr_t addr, void* out, size_t len) {
  if (safe_readable_slow(addr, len)) {
    copy_unchecked(out, addr, len);
    return true;
  }
  if (addr == 0 || len == 0 || g_vm_readv.load(std::memory_order_relaxed) == 0) return false;
  // Between refreshes the table can miss memory mapped a moment ago; the kernel settles it
  // without any risk of a fault (one system call, only on this rare path).
  iovec local{out, len};
  iovec remote{reinterpret_cast<void*>(addr), len};
  int saved = errno;
  ssize_t r = syscall(SYS_process_vm_readv, getpid(), &local, 1, &remote, 1, 0);
  if (r < 0 && (errno == ENOSYS || errno == EPERM)) g_vm_readv.store(0, std::memory_order_relaxed);
  errno = saved;
  return r == static_cast<ssize_t>(len);
}

}  // namespace detail

void safe_memory_reset() {
  g_refreshing.store(false);
  // A new even number: every thread's remembered ranges are forgotten, not only this one's.
  g_seq.fetch_add((g_seq.load() & 1) ? 1 : 2);
  g_count.store(0);
  g_last_refresh_ns.store(0);
  t_hot_seq = ~0u;
}

uint64_t safe_memory_refreshes() { return g_refreshes.load(std::memory_order_relaxed); }

}  // namespace memtrace::unwind
