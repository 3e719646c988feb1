// What every wrapper does after the real call: turn its outcome into recorder events.
// Kept out of the wrappers so each wrapper reads as "real call, then record".
#pragma once
#include <cstdint>

#include "core/event.hpp"
#include "preload/session.hpp"

namespace memtrace::preload {

// Device of the calling thread's current context (0 if none), and that context.
int current_device(uint64_t* ctx_out);
// The device the calling thread last worked on, without asking the driver (0 before any):
// what a range or a marker is filed under.
int thread_device_hint();
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

// Frees follow one protocol: the record goes (and its free entries are written) before the
// real free, so the history stays in the driver's order; it comes back if the free failed.
class PendingFree {
 public:
  PendingFree(Session* s, uint64_t addr, uint64_t stream, void* caller);
  void finish(bool ok);

 private:
  Session* s_;
  bool known_ = false;
  AllocRecord rec_;
};

}  // namespace memtrace::preload
