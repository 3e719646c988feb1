// Shared internals of the simulated CUDA driver (libcuda.so.1).
//
// The library is compiled with __CUDA_API_VERSION_INTERNAL, the switch cuda.h provides for the
// driver's own build: it stops the header from renaming cuMemAlloc to cuMemAlloc_v2 and so on,
// and declares the legacy 32-bit ABIs and the _ptsz/_ptds twins. Every function defined here
// therefore carries exactly the ELF name it is written with, and the compiler checks each
// definition against the toolkit's declaration of that name.
#pragma once

#ifndef __CUDA_API_VERSION_INTERNAL
#error "sim/driver must be compiled with __CUDA_API_VERSION_INTERNAL (see CMakeLists.txt)"
#endif
#include <cuda.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <vector>

// The only symbols the library exports; everything else is hidden by -fvisibility=hidden.
#define SIM_API extern "C" __attribute__((visibility("default")))

namespace sim {

constexpr int kDriverVersion = 13000;
constexpr int kMaxDevices = 16;
constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kGranularity = 2 * kMiB;  // VMM granularity, pool segment and commit unit
constexpr uint64_t kLinearAlign = 512;       // cuMemAlloc alignment and footprint rounding

// Rounds v up to a multiple of a; false when the result would not fit in 64 bits, so that
// absurd sizes become CUDA_ERROR_OUT_OF_MEMORY instead of tiny wrapped-around requests.
inline bool round_up(uint64_t v, uint64_t a, uint64_t* out) {
  if (v > UINT64_MAX - (a - 1)) return false;
  *out = (v + a - 1) / a * a;
  return true;
}

// ---- config.cpp: environment, warnings, call log ------------------------------------------
struct Config {
  int devices = 1;
  uint64_t memory = 16ull << 30;
  int log_fd = -1;
};
const Config& config();
void warn(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void log_write(const char* text, size_t len);

// ---- fault_injection.cpp --------------------------------------------------------------------
// True when SIMCUDA_FAIL asks the entry point `elf_name` to fail on this call; *code is the
// result to return.
bool fault_hit(const char* elf_name, CUresult* code);

// ---- init.cpp: initialisation state, fork, one-time construction -----------------------------
// True once cuInit succeeded in this process. False in a child forked after that (see README:
// fork), where every call that needs the driver reports CUDA_ERROR_NOT_INITIALIZED, as the real
// driver's do, so none of them reaches a lock another thread of the parent may have held.
bool initialized();

// Guards the first construction of the objects that calls allowed before cuInit use (the
// configuration, the fault rules, the resolver's tables). A function-local static would not do:
// a fork while another thread is inside its construction leaves the child waiting on the
// compiler's guard forever. This lock is re-created in the child instead, and an object is
// published only once complete, so a child forked mid-construction simply builds it again.
class OnceLock {
 public:
  OnceLock();
  ~OnceLock();
  OnceLock(const OnceLock&) = delete;
  OnceLock& operator=(const OnceLock&) = delete;
};

// The object in `slot`, built by make() (returning a never-freed pointer) on first use.
template <typename T, typename Make>
const T& build_once(std::atomic<const T*>& slot, Make make) {
  if (const T* p = slot.load(std::memory_order_acquire)) return *p;
  OnceLock lock;
  const T* p = slot.load(std::memory_order_relaxed);
  if (p == nullptr) {
    p = make();
    slot.store(p, std::memory_order_release);
  }
  return *p;
}

// Every entry point starts with one of these. __func__ is the ELF name, because each API
// function is defined under its literal exported name.
#define SIM_FAULT_CHECK()                                                     \
  do {                                                                        \
    CUresult sim_fault_code_;                                                 \
    if (::sim::fault_hit(__func__, &sim_fault_code_)) return sim_fault_code_; \
  } while (0)
#define SIM_ENTER()                                                 \
  do {                                                              \
    SIM_FAULT_CHECK();                                              \
    if (!::sim::initialized()) return CUDA_ERROR_NOT_INITIALIZED;   \
  } while (0)

// ---- range_allocator.cpp --------------------------------------------------------------------
// First-fit allocator over [0, size): offsets only, no memory of its own.
class RangeAllocator {
 public:
  void reset(uint64_t size);
  std::optional<uint64_t> allocate(uint64_t size, uint64_t align);
  void release(uint64_t offset, uint64_t size);
  uint64_t free_bytes() const;

 private:
  std::map<uint64_t, uint64_t> free_;  // offset -> length, coalesced
};

// ---- device_memory.cpp ----------------------------------------------------------------------
// A PROT_NONE reservation whose 2 MiB chunks become readable/writable only while some
// allocation covers them, so untouched capacity costs no RAM. Not locked: owners lock.
class Arena {
 public:
  bool reserve(uint64_t size, uint64_t fixed_hint);
  bool reserved() const { return base_ != 0; }
  uint64_t base() const { return base_; }
  std::optional<uint64_t> take(uint64_t size, uint64_t align);
  void give(uint64_t addr, uint64_t size);
  bool contains(uint64_t p) const { return p >= base_ && p - base_ < size_; }

 private:
  bool set_chunks(uint64_t addr, uint64_t size, int delta);
  void retire_cold_chunks();
  uint64_t base_ = 0;
  uint64_t size_ = 0;
  RangeAllocator ranges_;
  std::vector<uint32_t> chunk_refs_;
  std::vector<uint8_t> chunk_open_;     // chunk is readable/writable right now
  std::vector<uint8_t> chunk_listed_;   // chunk is in emptied_
  std::deque<uint64_t> emptied_;        // chunks that lost their last allocation, oldest first
};

struct Device {
  int ordinal = 0;
  uint64_t capacity = 0;
  std::mutex mu;      // guards used and arena
  uint64_t used = 0;  // bytes charged against capacity: linear, pool segments, VMM handles
  Arena arena;
  std::atomic<uint64_t> arena_lo{0}, arena_hi{0};  // lock-free "is this ours" test
  CUctx_st* primary = nullptr;                     // created on first retain, never freed
};

Device* device(int ordinal);  // nullptr unless 0 <= ordinal < device_count()
int device_count();
bool charge(Device& d, uint64_t bytes);
void uncharge(Device& d, uint64_t bytes);
// Linear device memory: *footprint is the rounded size charged against capacity.
CUresult device_alloc(Device& d, uint64_t size, uint64_t* addr, uint64_t* footprint);
void device_free(Device& d, uint64_t addr, uint64_t footprint);
// Memory below 4 GiB for the legacy 32-bit ABIs (CUdeviceptr_v1), charged to device d.
CUresult legacy_alloc(Device& d, uint64_t size, uint64_t* addr, uint64_t* footprint);
void legacy_free(Device& d, uint64_t addr, uint64_t footprint);
bool in_device_arena(uint64_t p);

// ---- registry.cpp: every live allocation of every family, by address -----------------------
enum class Kind : uint8_t { Linear, Legacy, Managed, Async, HostAlloc, HostRegistered, VmmMapping };

struct Allocation {
  uint64_t base = 0;
  uint64_t size = 0;       // what the caller asked for (pitch * height for pitched memory)
  uint64_t footprint = 0;  // what the owning allocator holds for it
  Kind kind = Kind::Linear;
  CUctx_st* ctx = nullptr;
  int device = -1;  // -1: host memory
  unsigned flags = 0;
  CUmemPoolHandle_st* pool = nullptr;  // Async
  uint64_t handle = 0;                 // VmmMapping: the physical handle
  uint64_t buffer_id = 0;
  bool free_pending = false;  // a stream-ordered free is queued
};

uint64_t next_buffer_id();
bool registry_insert(const Allocation& a);  // false if it overlaps a live entry
std::optional<Allocation> registry_find(uint64_t p);
using AllocFilter = std::function<bool(const Allocation&)>;
// Removes and returns the entry starting exactly at base, if accept() agrees.
std::optional<Allocation> registry_take(uint64_t base, const AllocFilter& accept);
// Flags the entry starting at base as free-pending (once), if accept() agrees.
std::optional<Allocation> registry_mark_free_pending(uint64_t base, const AllocFilter& accept);
std::vector<Allocation> registry_take_all(const AllocFilter& accept);
// True when [p, p+n) lies in one live allocation (or in adjacent VMM mappings).
bool registry_covers(uint64_t p, uint64_t n);

// ---- linear.cpp (shared with the legacy 32-bit entry points in legacy.cpp) ------------------
// Gives an allocation's memory back to whichever allocator owns it.
void release_memory(const Allocation& a);
CUresult alloc_linear(Kind kind, uint64_t size, unsigned flags, uint64_t* addr);
CUresult free_device_memory(uint64_t addr);
CUresult mem_get_info(uint64_t* free_bytes, uint64_t* total_bytes);

// ---- host.cpp -------------------------------------------------------------------------------
CUresult host_alloc(void** pp, uint64_t size, unsigned flags);

// ---- context.cpp ----------------------------------------------------------------------------
CUresult current_ctx(CUctx_st** out);
bool ctx_valid(CUctx_st* c);  // known and not destroyed
int ctx_device(CUctx_st* c);
}  // namespace sim

struct CUstream_st {
  enum class Type { User, Legacy, PerThread };
  Type type = Type::User;
  CUctx_st* ctx = nullptr;
  unsigned flags = 0;
  int priority = 0;
  // Guarded by sim::exec_mutex().
  struct Op {
    uint64_t seq;
    std::function<void(CUstream_st&)> run;
  };
  std::deque<Op> queue;
  uint64_t last_seq = 0;
  CUresult error = CUDA_SUCCESS;  // first failure of queued work, reported at the next sync
  bool blocking() const { return type != Type::User || !(flags & CU_STREAM_NON_BLOCKING); }
};

struct CUctx_st {
  int device = 0;
  unsigned flags = 0;
  bool primary = false;
  std::atomic<bool> alive{false};
  int primary_refs = 0;  // guarded by the primary-context mutex in context.cpp
  // Guarded by sim::exec_mutex().
  std::shared_ptr<CUstream_st> legacy;
  std::map<std::thread::id, std::shared_ptr<CUstream_st>> per_thread;
  std::set<CUstream_st*> streams;
  std::set<CUevent_st*> events;
};

// ---- streams.cpp ----------------------------------------------------------------------------
namespace sim {
using StreamPtr = std::shared_ptr<CUstream_st>;

// One lock serialises all queued work: execution is lazy and happens on whichever thread
// synchronises, and recursion covers host callbacks that call back into the driver.
std::recursive_mutex& exec_mutex();

// Maps a CUstream argument (NULL, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD or a handle) to a
// stream. `ptsz` is true in the _ptsz entry points, where NULL means the per-thread stream.
CUresult resolve_stream(CUstream h, bool ptsz, StreamPtr* out);
void enqueue(const StreamPtr& s, std::function<void(CUstream_st&)> op);
void drain_until(CUstream_st& s, uint64_t seq);
CUresult stream_take_error(CUstream_st& s);
// What a synchronous memcpy/memset/free waits for: the legacy stream and, through it, every
// blocking stream of the context (or the per-thread stream for the _ptds variants).
void sync_before_blocking_op(CUctx_st* ctx, bool ptds);
// What cuMemFree waits for: all work of the context, non-blocking streams included (the real
// free synchronizes the device), without consuming the errors a later synchronize reports.
void sync_before_free(CUctx_st* ctx);
CUresult ctx_synchronize(CUctx_st* ctx);
void ctx_streams_init(CUctx_st* ctx);
void ctx_streams_teardown(CUctx_st* ctx);
void ctx_events_teardown(CUctx_st* ctx);  // events.cpp

// ---- pools.cpp ------------------------------------------------------------------------------
void pool_release(CUmemPoolHandle_st* pool, uint64_t addr, uint64_t footprint);
// Release thresholds apply at stream/event/context synchronisation.
void pools_trim_to_thresholds();
void pools_trim_device(int device);

// ---- vmm.cpp --------------------------------------------------------------------------------
bool vmm_reservation_of(uint64_t p, uint64_t* base, uint64_t* size);
uint64_t vmm_allowed_handle_types(uint64_t handle);
unsigned vmm_access_flags(uint64_t addr, int device);

// ---- memops.cpp -----------------------------------------------------------------------------
bool in_simulated_address_space(uint64_t p);
}  // namespace sim
