// Device capacity and the address space behind device pointers.
//
// Each device owns one PROT_NONE, MAP_NORESERVE reservation as large as its capacity, made on
// its first allocation. Device pointers are host addresses inside it, so the program (and a
// test) can read and write device memory directly; 2 MiB chunks are made accessible while an
// allocation covers them. A chunk that empties stays open for a while, like the real driver's
// cached pages (so a loop of small cudaMalloc/cudaFree costs no system call); only the
// kWarmChunks most recently emptied chunks are kept, older ones are discarded and re-protected,
// so a simulated 16 GiB device costs at most the memory allocated plus 64 MiB, and a stale
// pointer into a long-empty chunk faults.
#include <sys/mman.h>

#include "internal.h"

namespace sim {

namespace {
constexpr size_t kWarmChunks = 32;  // 64 MiB of emptied chunks kept open per arena
}

bool Arena::reserve(uint64_t size, uint64_t fixed_hint) {
  uint64_t rounded;
  if (!round_up(size, kGranularity, &rounded)) return false;
  const int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
  void* p;
  if (fixed_hint != 0) {
    p = ::mmap(reinterpret_cast<void*>(fixed_hint), rounded, PROT_NONE, flags | MAP_FIXED_NOREPLACE, -1, 0);
    if (p == MAP_FAILED) return false;
    if (reinterpret_cast<uint64_t>(p) != fixed_hint) {  // kernel without MAP_FIXED_NOREPLACE
      ::munmap(p, rounded);
      return false;
    }
  } else {
    // Over-reserve so the base can be 2 MiB aligned: large allocations then start on a chunk.
    p = ::mmap(nullptr, rounded + kGranularity, PROT_NONE, flags, -1, 0);
    if (p == MAP_FAILED) return false;
    uint64_t raw = reinterpret_cast<uint64_t>(p);
    uint64_t aligned = (raw + kGranularity - 1) / kGranularity * kGranularity;
    if (aligned > raw) ::munmap(p, aligned - raw);
    uint64_t tail = raw + rounded + kGranularity - (aligned + rounded);
    if (tail != 0) ::munmap(reinterpret_cast<void*>(aligned + rounded), tail);
    p = reinterpret_cast<void*>(aligned);
  }
  base_ = reinterpret_cast<uint64_t>(p);
  size_ = rounded;
  ranges_.reset(rounded);
  chunk_refs_.assign(rounded / kGranularity, 0);
  chunk_open_.assign(rounded / kGranularity, 0);
  chunk_listed_.assign(rounded / kGranularity, 0);
  emptied_.clear();
  return true;
}

std::optional<uint64_t> Arena::take(uint64_t size, uint64_t align) {
  std::optional<uint64_t> off = ranges_.allocate(size, align);
  if (!off) return std::nullopt;
  if (!set_chunks(base_ + *off, size, +1)) {  // e.g. vm.max_map_count reached: report OOM
    set_chunks(base_ + *off, size, -1);
    ranges_.release(*off, size);
    return std::nullopt;
  }
  return base_ + *off;
}

void Arena::give(uint64_t addr, uint64_t size) {
  set_chunks(addr, size, -1);
  ranges_.release(addr - base_, size);
}

// Runs of chunks that must be opened are handled with one system call each. False if making a
// run accessible failed; the reference counts are updated regardless, for the caller's undo.
bool Arena::set_chunks(uint64_t addr, uint64_t size, int delta) {
  bool ok = true;
  const uint64_t first = (addr - base_) / kGranularity;
  const uint64_t last = (addr - base_ + size - 1) / kGranularity;
  if (delta < 0) {
    for (uint64_t c = first; c <= last; ++c) {
      if (--chunk_refs_[c] == 0 && !chunk_listed_[c]) {
        chunk_listed_[c] = 1;
        emptied_.push_back(c);
      }
    }
    retire_cold_chunks();
    return true;
  }
  auto open = [&](uint64_t run_start, uint64_t run_end) {
    void* p = reinterpret_cast<void*>(base_ + run_start * kGranularity);
    if (::mprotect(p, (run_end - run_start) * kGranularity, PROT_READ | PROT_WRITE) != 0) ok = false;
  };
  uint64_t run_start = UINT64_MAX;
  for (uint64_t c = first; c <= last; ++c) {
    chunk_refs_[c]++;
    bool closed = !chunk_open_[c];
    chunk_open_[c] = 1;
    if (closed && run_start == UINT64_MAX) run_start = c;
    if (!closed && run_start != UINT64_MAX) {
      open(run_start, c);
      run_start = UINT64_MAX;
    }
  }
  if (run_start != UINT64_MAX) open(run_start, last + 1);
  return ok;
}

void Arena::retire_cold_chunks() {
  while (emptied_.size() > kWarmChunks) {
    uint64_t c = emptied_.front();
    emptied_.pop_front();
    chunk_listed_[c] = 0;
    // In use again since it emptied: it is listed anew when it next empties.
    if (chunk_refs_[c] != 0 || !chunk_open_[c]) continue;
    void* p = reinterpret_cast<void*>(base_ + c * kGranularity);
    ::madvise(p, kGranularity, MADV_DONTNEED);
    ::mprotect(p, kGranularity, PROT_NONE);
    chunk_open_[c] = 0;
  }
}

namespace {

Device* make_devices() {
  auto* devs = new Device[kMaxDevices];
  for (int i = 0; i < kMaxDevices; ++i) {
    devs[i].ordinal = i;
    devs[i].capacity = config().memory;
  }
  return devs;
}

Device* devices() {
  static Device* devs = make_devices();
  return devs;
}

// CUdeviceptr_v1 is 32 bits wide, so legacy allocations need addresses below 4 GiB: one window
// shared by all devices, reserved at the first legacy allocation.
struct LegacyWindow {
  std::mutex mu;
  Arena arena;
  bool tried = false;
  std::atomic<uint64_t> lo{0}, hi{0};
};
constexpr uint64_t kLegacyWindowSize = 512 * kMiB;

LegacyWindow& legacy_window() {
  static LegacyWindow* w = new LegacyWindow();
  return *w;
}

}  // namespace

Device* device(int ordinal) {
  if (ordinal < 0 || ordinal >= device_count()) return nullptr;
  return &devices()[ordinal];
}

int device_count() { return config().devices; }

bool charge(Device& d, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(d.mu);
  if (bytes > d.capacity - d.used) return false;
  d.used += bytes;
  return true;
}

void uncharge(Device& d, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(d.mu);
  d.used -= bytes;
}

CUresult device_alloc(Device& d, uint64_t size, uint64_t* addr, uint64_t* footprint) {
  uint64_t fp;
  if (size == 0 || !round_up(size, kLinearAlign, &fp)) return CUDA_ERROR_OUT_OF_MEMORY;
  const uint64_t align = fp >= kGranularity ? kGranularity : kLinearAlign;
  std::lock_guard<std::mutex> lock(d.mu);
  if (fp > d.capacity - d.used) return CUDA_ERROR_OUT_OF_MEMORY;
  if (!d.arena.reserved()) {
    if (!d.arena.reserve(d.capacity, 0)) return CUDA_ERROR_OUT_OF_MEMORY;
    d.arena_lo.store(d.arena.base());
    d.arena_hi.store(d.arena.base() + d.capacity);
  }
  std::optional<uint64_t> p = d.arena.take(fp, align);
  if (!p) return CUDA_ERROR_OUT_OF_MEMORY;  // fragmentation: capacity left but no hole fits
  d.used += fp;
  *addr = *p;
  *footprint = fp;
  return CUDA_SUCCESS;
}

void device_free(Device& d, uint64_t addr, uint64_t footprint) {
  std::lock_guard<std::mutex> lock(d.mu);
  d.arena.give(addr, footprint);
  d.used -= footprint;
}

CUresult legacy_alloc(Device& d, uint64_t size, uint64_t* addr, uint64_t* footprint) {
  uint64_t fp;
  if (size == 0 || !round_up(size, kLinearAlign, &fp)) return CUDA_ERROR_OUT_OF_MEMORY;
  if (!charge(d, fp)) return CUDA_ERROR_OUT_OF_MEMORY;
  LegacyWindow& w = legacy_window();
  std::optional<uint64_t> p;
  {
    std::lock_guard<std::mutex> lock(w.mu);
    if (!w.arena.reserved() && !w.tried) {
      w.tried = true;
      for (uint64_t hint = 1ull << 30; hint + kLegacyWindowSize <= (1ull << 32); hint += kLegacyWindowSize) {
        if (w.arena.reserve(kLegacyWindowSize, hint)) {
          w.lo.store(hint);
          w.hi.store(hint + kLegacyWindowSize);
          break;
        }
      }
    }
    if (w.arena.reserved()) p = w.arena.take(fp, kLinearAlign);
  }
  if (!p) {
    uncharge(d, fp);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *addr = *p;
  *footprint = fp;
  return CUDA_SUCCESS;
}

void legacy_free(Device& d, uint64_t addr, uint64_t footprint) {
  LegacyWindow& w = legacy_window();
  {
    std::lock_guard<std::mutex> lock(w.mu);
    w.arena.give(addr, footprint);
  }
  uncharge(d, footprint);
}

bool in_device_arena(uint64_t p) {
  for (int i = 0; i < device_count(); ++i) {
    const Device& d = devices()[i];
    if (p >= d.arena_lo.load() && p < d.arena_hi.load()) return true;
  }
  LegacyWindow& w = legacy_window();
  return p >= w.lo.load() && p < w.hi.load();
}

}  // namespace sim
