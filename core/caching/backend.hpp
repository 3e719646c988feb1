// What the caching allocator needs from a device: the real driver (preload hooks), the simulated
// device and the offline replayer each implement this. Every call returns the device's own error
// code (0 = success) and the allocator hands it back untouched, so a hook returns to the program
// exactly what the driver said.
#pragma once
#include <cstddef>
#include <cstdint>

namespace memtrace::caching {

// CUDA_ERROR_OUT_OF_MEMORY; backends whose out-of-memory code differs override is_out_of_memory().
constexpr int kErrorOutOfMemory = 2;

class Backend {
 public:
  virtual ~Backend() = default;

  // A new segment of `bytes` (a multiple of 512, usually of 2 MiB) at *out.
  virtual int allocate(size_t bytes, uintptr_t* out) = 0;
  // Gives back a segment `allocate` returned, whole.
  virtual int free(uintptr_t base, size_t bytes) = 0;

  // Virtual-memory support for expandable segments. A backend without it returns false here and
  // never sees the four calls below.
  virtual bool supports_expandable() const { return false; }
  // Reserves `bytes` of address space (no memory behind it).
  virtual int reserve(size_t bytes, uintptr_t* out) { (void)bytes; (void)out; return 1; }
  // Backs [base+offset, base+offset+bytes) with physical memory / releases that backing.
  // Offsets and sizes are multiples of the page size the allocator uses for that range.
  virtual int map(uintptr_t base, size_t offset, size_t bytes) { (void)base; (void)offset; (void)bytes; return 1; }
  virtual int unmap(uintptr_t base, size_t offset, size_t bytes) { (void)base; (void)offset; (void)bytes; return 1; }
  // Drops a reservation that has nothing mapped any more.
  virtual int release(uintptr_t base, size_t bytes) { (void)base; (void)bytes; return 1; }

  // Returns once all work submitted to the device before the call has finished.
  virtual int synchronize() = 0;
  // Free and total device bytes (the `device_free` of an oom event; the memory fraction's base).
  virtual int mem_get_info(size_t* free_bytes, size_t* total_bytes) = 0;

  virtual bool is_out_of_memory(int error) const { return error == kErrorOutOfMemory; }
  // The code the allocator returns when it refuses on its own (per_process_memory_fraction).
  virtual int out_of_memory_error() const { return kErrorOutOfMemory; }
};

}  // namespace memtrace::caching
