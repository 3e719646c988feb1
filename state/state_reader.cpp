#include "state/state_reader.hpp"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include <fmt/format.h>

#include "core/clock.hpp"
#include "core/recorder.hpp"
#include "state/state_layout.hpp"
#include "state/state_reconcile.hpp"

namespace memtrace::state {

namespace {

struct Mapping {
  void* p = MAP_FAILED;
  size_t n = 0;
  ~Mapping() {
    if (p != MAP_FAILED) munmap(p, n);
  }
};

std::string text_of(const char* s, size_t cap) { return std::string(s, strnlen(s, cap)); }

bool section_fits(const Section& s, uint64_t elem, uint64_t file_bytes) {
  if (s.offset % kPage != 0 || s.offset > file_bytes) return false;
  if (s.count > (file_bytes - s.offset) / (elem ? elem : 1)) return false;
  return true;
}

// The live slots: a copy is kept only when its sequence number was even and unchanged around it;
// an odd one was being written when the process stopped, in a call that had not returned.
void read_live(const char* base, const Header& h, std::vector<AllocRecord>* out) {
  const LiveSlot* slots = reinterpret_cast<const LiveSlot*>(base + h.live.offset);
  for (uint64_t i = 0; i < h.live.count; ++i) {
    const LiveSlot& s = slots[i];
    const uint32_t q1 = s.seq.load(std::memory_order_acquire);
    if (q1 == 0 || (q1 & 1)) continue;
    AllocRecord r = s.rec;
    const uint32_t live = s.live;
    std::atomic_thread_fence(std::memory_order_acquire);
    if (s.seq.load(std::memory_order_relaxed) != q1 || !live) continue;
    r.note = nullptr;  // a pointer into the dead process
    r.range = r.phase = 0;  // range names lived in its heap
    out->push_back(r);
  }
}

// The ring: entries [T - capacity + 1, T) when it has wrapped, [0, T) before. The push in progress
// when the process stopped wrote slot T % capacity, which held entry T - capacity.
void read_ring(const char* base, const Header& h, StateCopy* c) {
  const uint64_t cap = h.ring.count;
  const uint64_t total = h.ring_total.load(std::memory_order_acquire);
  const uint64_t first = total >= cap ? total - cap + (cap ? 1 : 0) : 0;
  c->total_entries = total;
  c->dropped_entries = first;
  c->ring_capacity = cap;
  c->ring_bytes = cap * sizeof(TraceEntry);
  if (cap == 0) return;
  const TraceEntry* ring = reinterpret_cast<const TraceEntry*>(base + h.ring.offset);
  c->trace.reserve(static_cast<size_t>(total - first));
  for (uint64_t i = first; i < total; ++i) {
    TraceEntry e = ring[i % cap];
    e.note = nullptr;
    e.range = e.phase = 0;
    c->trace.push_back(e);
  }
}

void read_counters(const char* base, const Header& h, StateCopy* c) {
  const UsageCounters& u = *reinterpret_cast<const UsageCounters*>(base + h.counters.offset);
  for (int i = 0; i < kMaxDevices; ++i) c->device[i] = u.reserved[i];
  for (int i = 0; i < kMaxOwners; ++i) c->owner_device[i] = u.owner_device[i];
  c->device_count = std::clamp(u.device_count, 0, kMaxDevices);
  c->host = u.host;
  c->stale_replaced = u.stale_replaced;
}

void read_stacks(const char* base, const Header& h, Recovered* out) {
  const uint64_t n = std::min(h.stacks_published.load(std::memory_order_acquire), h.stack_records.count);
  const uint64_t* recs = reinterpret_cast<const uint64_t*>(base + h.stack_records.offset);
  const uintptr_t* frames = reinterpret_cast<const uintptr_t*>(base + h.stack_frames.offset);
  out->stacks.resize(n);
  for (uint64_t i = 0; i < n; ++i) {
    const uint64_t off = recs[i] >> 12, len = recs[i] & 0xfff;
    if (len == 0 || off + len > h.stack_frames.count) continue;
    out->stacks[i].assign(frames + off, frames + off + len);
  }
  out->state.distinct_stacks = n;
}

// Names of owner ids below owners_published; an empty one is left for recover to name again.
void read_owners(const char* base, const Header& h, StateCopy* c) {
  const uint64_t n = std::min(h.owners_published.load(std::memory_order_acquire), h.owners.count);
  const OwnerName* names = reinterpret_cast<const OwnerName*>(base + h.owners.offset);
  c->owner_names.clear();
  for (uint64_t i = 0; i < n; ++i) c->owner_names.push_back(text_of(names[i].text, sizeof names[i].text));
}

void read_modules(const char* base, const Header& h, std::vector<unwind::LoadedObject>* out) {
  const uint64_t n = std::min(h.modules_published.load(std::memory_order_acquire), h.modules.count);
  const ModuleEntry* m = reinterpret_cast<const ModuleEntry*>(base + h.modules.offset);
  for (uint64_t i = 0; i < n; ++i) {
    unwind::LoadedObject o;
    o.path = text_of(m[i].path, sizeof m[i].path);
    o.start = m[i].start;
    o.end = m[i].end;
    o.bias = m[i].bias;
    o.build_id = text_of(m[i].build_id, sizeof m[i].build_id);
    o.segments.push_back({o.start, o.end});
    out->push_back(std::move(o));
  }
}

// Maps a state file of this build that belongs to the user, every section inside it; false with one
// line in *why otherwise.
bool map_checked(const std::string& path, Mapping& map, std::string* why) {
  int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    *why = fmt::format("cannot open '{}': {}", path, std::strerror(errno));
    return false;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    *why = fmt::format("'{}' is not a memtrace state file (not a regular file)", path);
    return false;
  }
  if (st.st_uid != getuid()) {
    close(fd);
    *why = fmt::format("'{}' was written by another user (uid {}); only its owner may recover it", path, st.st_uid);
    return false;
  }
  map.n = static_cast<size_t>(st.st_size);
  if (map.n >= sizeof(Header)) map.p = mmap(nullptr, map.n, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (map.p == MAP_FAILED) {
    *why = map.n < sizeof(Header) ? fmt::format("'{}' is truncated ({} bytes, no complete header)", path, map.n)
                                  : fmt::format("cannot read '{}': {}", path, std::strerror(errno));
    return false;
  }
  const char* base = static_cast<const char*>(map.p);
  const Header& h = *reinterpret_cast<const Header*>(base);
  if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0) {
    *why = fmt::format("'{}' is not a memtrace state file", path);
    return false;
  }
  if (h.version != kFormatVersion) {
    *why = fmt::format("'{}' is a state file of format version {}; this memtrace reads version {}", path, h.version,
                       kFormatVersion);
    return false;
  }
  if (h.header_bytes != sizeof(Header) || h.entry_bytes != sizeof(TraceEntry) ||
      h.record_bytes != sizeof(AllocRecord) || h.slot_bytes != sizeof(LiveSlot) ||
      h.counters_bytes != sizeof(UsageCounters) || h.module_bytes != sizeof(ModuleEntry) ||
      h.owner_bytes != sizeof(OwnerName)) {
    *why = fmt::format("'{}' was written by a memtrace build with another layout; recover it with that build", path);
    return false;
  }
  if (h.file_bytes != map.n) {
    *why = fmt::format("'{}' is truncated ({} of {} bytes)", path, map.n, h.file_bytes);
    return false;
  }
  if (!section_fits(h.ring, sizeof(TraceEntry), map.n) || !section_fits(h.counters, sizeof(UsageCounters), map.n) ||
      h.counters.count != 1 || !section_fits(h.live, sizeof(LiveSlot), map.n) ||
      !section_fits(h.stack_records, sizeof(uint64_t), map.n) ||
      !section_fits(h.stack_frames, sizeof(uintptr_t), map.n) || !section_fits(h.modules, sizeof(ModuleEntry), map.n) ||
      !section_fits(h.owners, sizeof(OwnerName), map.n)) {
    *why = fmt::format("'{}' is damaged (a section lies outside the file)", path);
    return false;
  }
  return true;
}

}  // namespace

bool read_state_modules(const std::string& path, std::vector<unwind::LoadedObject>* out, std::string* why) {
  Mapping map;
  if (!map_checked(path, map, why)) return false;
  out->clear();
  read_modules(static_cast<const char*>(map.p), *static_cast<const Header*>(map.p), out);
  return true;
}

bool read_state_file(const std::string& path, Recovered* out, std::string* why) {
  Mapping map;
  if (!map_checked(path, map, why)) return false;
  const char* base = static_cast<const char*>(map.p);
  const Header& h = *reinterpret_cast<const Header*>(base);
  Recovered r;
  r.pid = h.pid;
  r.program = text_of(h.program, sizeof h.program);
  r.host = text_of(h.host, sizeof h.host);
  r.rank = text_of(h.rank, sizeof h.rank);
  r.live_unrecorded = h.live_unrecorded.load(std::memory_order_relaxed);
  r.ended_cleanly = h.state != kRunning;
  r.fatal_signal = h.fatal_signal.load(std::memory_order_relaxed);
  read_live(base, h, &r.state.live);
  read_ring(base, h, &r.state);
  reconcile(&r.state);
  read_counters(base, h, &r.state);
  read_stacks(base, h, &r);
  read_modules(base, h, &r.modules);
  read_owners(base, h, &r.state);
  r.state.unknown_frees = h.unknown_frees.load(std::memory_order_relaxed);

  // Ticks to Unix microseconds by the recording's start point and now: right on the same boot.
  TickClock clock;
  clock.start_at(h.start_ticks, h.start_us);
  const std::string boot = text_of(h.boot_id, sizeof h.boot_id);
  r.same_boot = !boot.empty() && boot == current_boot_id();
  if (r.same_boot) clock.calibrate();
  uint64_t last = h.start_us;
  for (TraceEntry& e : r.state.trace) last = std::max(last, e.time_us = clock.to_us(e.time_us));
  for (AllocRecord& a : r.state.live) last = std::max(last, a.time_us = clock.to_us(a.time_us));
  r.state.time_us = last;
  order_live(&r.state);
  *out = std::move(r);
  return true;
}

}  // namespace memtrace::state
