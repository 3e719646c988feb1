// The listener that writes one caching allocator's actions into the session's recorder, as they
// happen, under the allocator's lock (docs/caching-allocator.md, "Listener and Backend"), and the
// per-thread facts about the request being served that it records them with.
#pragma once
#include <cuda.h>

#include <cstdint>
#include <map>

#include "core/caching/listener.hpp"
#include "core/records.hpp"
#include "preload/session.hpp"

namespace memtrace::preload {

// What the hook knows about the request the allocator is serving on this thread: set by the hook
// before it calls the allocator (never under its lock), read by the listener.
struct CachingRequest {
  uint32_t stack_id;
  uint32_t free_stack_id;
  const char* note;
  uint16_t owner;
  bool small;  // rounded request <= 1 MiB: a segment it creates is a small-pool one
};
extern __thread CachingRequest t_request __attribute__((tls_model("initial-exec")));

// One allocator's actions into the recorder. Without a session (a process that does not record,
// serving memtrace_malloc) it records nothing.
class RecordingListener : public caching::Listener {
 public:
  RecordingListener(Session* s, CUcontext ctx, int device)
      : s_(s), ctx_(reinterpret_cast<uint64_t>(ctx)), device_(device) {}

  void on_event(const caching::AllocatorEvent& e) override;

 private:
  AllocRecord base_record(uint64_t addr, uint64_t size, uint32_t stack) const;
  AllocRecord segment_record(uint64_t addr, uint64_t size, uint64_t stream, uint8_t flags, uint32_t stack) const;
  TraceEntry entry(const caching::AllocatorEvent& e, uint32_t stack) const;
  void mapped(const caching::AllocatorEvent& e);
  void unmapped(const caching::AllocatorEvent& e);

  Session* s_;
  uint64_t ctx_;
  int device_;
  std::map<uint64_t, AllocRecord> segs_;  // under the allocator's lock (listener calls)
  uint64_t settled_ticks_ = 0;  // when the synchronize being reported returned (same lock)
};

}  // namespace memtrace::preload
