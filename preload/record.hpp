// What every wrapper does after the real call: turn its outcome into recorder events.
// Kept out of the wrappers so each wrapper reads as "real call, then record".
#pragma once
#include <cstdint>

#include "core/event.hpp"
#include "preload/session.hpp"

namespace memtrace::preload {

// Device of the calling thread's current context (0 if none), and that context.
int current_device(uint64_t* ctx_out);
// Forget cached context → device answers (a context was destroyed).
void invalidate_context_cache();

struct NewAlloc {
  uint64_t addr = 0;
  uint64_t size = 0;
  uint64_t requested = 0;
  uint64_t stream = 0;
  uint64_t handle = 0;
  MemKind kind = MemKind::Device;
  int device = -2;  // -2: ask the current context
};

void record_alloc(Session& s, const NewAlloc& a, void* caller);
// The driver said out of memory: an `oom` entry with the device's free bytes.
void record_oom(Session& s, uint64_t size, uint64_t stream, void* caller);

// Frees follow one protocol: take the record before the real free (so a concurrent
// re-allocation of the address is never erased), put it back if the free failed.
class PendingFree {
 public:
  PendingFree(Session* s, uint64_t addr);
  void finish(bool ok, uint64_t stream, void* caller);

 private:
  Session* s_;
  uint64_t addr_;
  bool known_ = false;
  AllocRecord rec_;
};

}  // namespace memtrace::preload
