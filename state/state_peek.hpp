// A look at a running process's state file (docs/state-file.md), for `memtrace top`: the header,
// the counters, the ring's sequence number, the live records and the top frame of their stacks.
// Header-only and read-only (PROT_READ, MAP_SHARED): bin/memtrace links nothing of state/, and the
// program is never stopped or slowed. Every value follows the writer/reader agreement of the file.
#pragma once
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <string>
#include <vector>

#include "state/state_layout.hpp"

namespace memtrace::state {

struct Peek {
  int64_t pid = 0;
  std::string program, host, rank;
  uint64_t ring_total = 0;
  UsageCounters counters{};
  bool counters_steady = false;   // two copies agreed with no push between them
  std::vector<AllocRecord> live;  // complete slots only
  std::vector<uintptr_t> top_frame;  // by stack id - 1: its first return address, 0 if unknown
  std::vector<ModuleEntry> modules;  // path and range only are used
  std::vector<std::string> owner_names;  // by owner id, those published so far
};

class PeekMap {
 public:
  PeekMap() = default;
  PeekMap(const PeekMap&) = delete;
  PeekMap& operator=(const PeekMap&) = delete;
  ~PeekMap() {
    if (p_ != MAP_FAILED) munmap(p_, n_);
  }
  // Maps the file; false with one line in *why when it is not a complete state file of this build
  // that belongs to the user.
  bool open(const std::string& path, std::string* why) {
    int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return fail(why, path + ": " + std::strerror(errno));
    struct stat st {};
    const bool ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
    if (!ok || st.st_uid != getuid()) {
      ::close(fd);
      return fail(why, path + (ok ? ": written by another user" : ": not a regular file"));
    }
    if (static_cast<uint64_t>(st.st_size) < kPage) {
      ::close(fd);
      return fail(why, path + ": truncated");
    }
    n_ = static_cast<size_t>(st.st_size);
    p_ = mmap(nullptr, n_, PROT_READ, MAP_SHARED, fd, 0);
    ::close(fd);
    if (p_ == MAP_FAILED) return fail(why, path + ": " + std::strerror(errno));
    const Header& h = header();
    // The magic is stored last (after a release fence): with it the rest of the header is there.
    if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0) return fail(why, path + ": not a state file");
    std::atomic_thread_fence(std::memory_order_acquire);
    if (h.version != kFormatVersion) return fail(why, path + ": format version " + std::to_string(h.version));
    if (h.header_bytes != sizeof(Header) || h.entry_bytes != sizeof(TraceEntry) ||
        h.slot_bytes != sizeof(LiveSlot) || h.counters_bytes != sizeof(UsageCounters) ||
        h.module_bytes != sizeof(ModuleEntry) || h.owner_bytes != sizeof(OwnerName))
      return fail(why, path + ": written by another memtrace build");
    if (h.file_bytes != n_) return fail(why, path + ": truncated");
    auto fits = [&](const Section& s, uint64_t elem) {
      return s.offset % kPage == 0 && s.offset <= n_ && s.count <= (n_ - s.offset) / elem;
    };
    if (!fits(h.counters, sizeof(UsageCounters)) || h.counters.count < 1 || !fits(h.live, sizeof(LiveSlot)) ||
        !fits(h.stack_records, sizeof(uint64_t)) || !fits(h.stack_frames, sizeof(uintptr_t)) ||
        !fits(h.modules, sizeof(ModuleEntry)) || !fits(h.owners, sizeof(OwnerName)))
      return fail(why, path + ": truncated");
    return true;
  }

  const Header& header() const { return *static_cast<const Header*>(p_); }
  // The signal that asks the process for a snapshot, 0 when it has none (or took it over).
  int dump_signal() const { return header().dump_signal.load(std::memory_order_acquire); }
  // How many snapshots the process has written while running, and the last one's path (""
  // when there is none, or it was being noted at every try).
  uint64_t snapshots(std::string* last) const {
    const Header& h = header();
    for (int tries = 0; tries < 1000; ++tries) {
      const uint64_t q = h.snapshot_seq.load(std::memory_order_acquire);
      if (q & 1) continue;
      const char* p = h.last_snapshot;
      std::string path(p, strnlen(p, sizeof h.last_snapshot));
      std::atomic_thread_fence(std::memory_order_acquire);
      if (h.snapshot_seq.load(std::memory_order_relaxed) != q) continue;
      *last = std::move(path);
      return q / 2;
    }
    last->clear();
    return h.snapshot_seq.load(std::memory_order_acquire) / 2;
  }
  uint64_t ring_total() const { return header().ring_total.load(std::memory_order_acquire); }

  // One look. Counters are plain values written under the ring lock with each event: a copy is
  // kept when two copies made back to back agree and the ring's sequence number did not move.
  void read(Peek* out, bool with_live) const {
    const Header& h = header();
    const char* base = static_cast<const char*>(p_);
    out->pid = h.pid;
    out->program = std::string(h.program, strnlen(h.program, sizeof h.program));
    out->host = std::string(h.host, strnlen(h.host, sizeof h.host));
    out->rank = std::string(h.rank, strnlen(h.rank, sizeof h.rank));
    const auto* c = reinterpret_cast<const UsageCounters*>(base + h.counters.offset);
    out->counters_steady = false;
    static UsageCounters a, b;  // 28 KiB each: off the stack
    for (int tries = 0; tries < 100 && !out->counters_steady; ++tries) {
      const uint64_t t0 = ring_total();
      std::memcpy(static_cast<void*>(&a), c, sizeof a);
      std::atomic_thread_fence(std::memory_order_acquire);
      std::memcpy(static_cast<void*>(&b), c, sizeof b);
      std::atomic_thread_fence(std::memory_order_acquire);
      out->counters_steady = ring_total() == t0 && std::memcmp(&a, &b, sizeof a) == 0;
      out->ring_total = t0;
    }
    out->counters = a;
    if (!with_live) return;
    out->live.clear();
    const auto* slots = reinterpret_cast<const LiveSlot*>(base + h.live.offset);
    for (uint64_t i = 0; i < h.live.count; ++i) {
      const LiveSlot& s = slots[i];
      const uint32_t q1 = s.seq.load(std::memory_order_acquire);
      if (q1 == 0 || (q1 & 1)) continue;  // never used, or being changed right now
      AllocRecord r;
      std::memcpy(static_cast<void*>(&r), &s.rec, sizeof r);
      const uint32_t live = s.live;
      std::atomic_thread_fence(std::memory_order_acquire);
      if (s.seq.load(std::memory_order_relaxed) != q1 || !live) continue;
      r.note = nullptr;
      out->live.push_back(r);
    }
    const uint64_t n = std::min(h.stacks_published.load(std::memory_order_acquire), h.stack_records.count);
    const auto* recs = reinterpret_cast<const uint64_t*>(base + h.stack_records.offset);
    const auto* frames = reinterpret_cast<const uintptr_t*>(base + h.stack_frames.offset);
    out->top_frame.assign(n, 0);
    for (uint64_t i = 0; i < n; ++i) {
      const uint64_t off = recs[i] >> 12, len = recs[i] & 0xfff;
      if (len > 0 && off < h.stack_frames.count) out->top_frame[i] = frames[off];
    }
    const uint64_t m = std::min(h.modules_published.load(std::memory_order_acquire), h.modules.count);
    const auto* mods = reinterpret_cast<const ModuleEntry*>(base + h.modules.offset);
    out->modules.assign(mods, mods + m);
    const uint64_t o = std::min(h.owners_published.load(std::memory_order_acquire), h.owners.count);
    const auto* names = reinterpret_cast<const OwnerName*>(base + h.owners.offset);
    out->owner_names.clear();
    for (uint64_t i = 0; i < o; ++i) out->owner_names.emplace_back(names[i].text, strnlen(names[i].text, sizeof names[i].text));
  }

 private:
  static bool fail(std::string* why, std::string s) {
    *why = std::move(s);
    return false;
  }
  void* p_ = MAP_FAILED;
  size_t n_ = 0;
};

}  // namespace memtrace::state
