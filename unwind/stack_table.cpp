// Interned call stacks.
//
// Layout: two address-space reservations that never move (frames_: every stack's addresses
// back to back; records_: one {hash, first, n} per stack, index id - 1), committed in chunks
// under the insert lock, plus an open-addressing index of 64-bit words (hash tag << 32 | id).
// A lookup reads the current index with acquire loads and compares records and frames,
// which were written before the word that names them was published: no lock. An insert
// takes a spinlock, looks again, appends, and publishes. When the index passes half full a
// twice-as-large one is built and published; readers still walking the old one are safe
// because old indexes are kept until clear() or destruction (their sizes sum to less than
// the current one's).
#include "unwind/stack_table.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>

namespace memtrace::unwind {

struct StackTable::Record {
  uint64_t hash;
  uint32_t first;  // index into frames_ (kMaxFrames < 2^32)
  uint32_t n;
};
static_assert(sizeof(uintptr_t) == 8, "64-bit only");

struct StackTable::Slots {
  uint64_t mask;  // capacity - 1
  size_t bytes;   // of the mapping
  Slots* older;   // previous (smaller) index, kept for readers still on it
  std::atomic<uint64_t>* words() { return reinterpret_cast<std::atomic<uint64_t>*>(this + 1); }
  const std::atomic<uint64_t>* words() const {
    return reinterpret_cast<const std::atomic<uint64_t>*>(this + 1);
  }
};

namespace {

constexpr uint64_t kInitialSlots = 4096;
constexpr size_t kFrameChunk = 256 << 10;   // commit frames 256 KiB at a time
constexpr size_t kRecordChunk = 64 << 10;   // and records 64 KiB at a time

size_t round_up(size_t v, size_t to) { return (v + to - 1) / to * to; }

uint64_t fmix64(uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 33;
  return h;
}

// Four independent lanes, frame i into lane i % 4: one chain of multiplies would make every
// frame wait for the last (five cycles each, a sixth of a 32-frame capture's cost).
uint64_t hash_stack(const uintptr_t* pcs, uint32_t n) {
  constexpr uint64_t kMul = 0x9fb21c651e98df25ull;
  uint64_t h[4] = {0x9e3779b97f4a7c15ull ^ (uint64_t{n} * 0x2545f4914f6cdd1dull), 0x6a09e667f3bcc908ull,
                   0xbb67ae8584caa73bull, 0x3c6ef372fe94f82bull};
  uint32_t i = 0;
  for (; i + 4 <= n; i += 4) {
    for (int k = 0; k < 4; ++k) {
      h[k] = (h[k] ^ pcs[i + k]) * kMul;
      h[k] = (h[k] << 29) | (h[k] >> 35);
    }
  }
  for (int k = 0; i < n; ++i, ++k) h[k] = ((h[k] ^ pcs[i]) * kMul) ^ (h[k] >> 31);
  uint64_t x = fmix64(h[0]) ^ (fmix64(h[1]) * 3) ^ (fmix64(h[2]) * 5) ^ (fmix64(h[3]) * 7);
  return fmix64(x);
}

void* reserve(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

size_t frames_reserved(uint64_t max_frames) {
  return round_up(static_cast<size_t>(max_frames) * sizeof(uintptr_t), kFrameChunk);
}
size_t records_reserved(uint32_t max_stacks, size_t record_size) {
  return round_up(size_t{max_stacks} * record_size, kRecordChunk);
}

uint64_t max_slots(uint32_t max_stacks) {
  uint64_t cap = kInitialSlots;
  while (cap < uint64_t{max_stacks} * 2) cap <<= 1;
  return cap;
}

}  // namespace

StackTable::StackTable() { init(); }

StackTable::StackTable(uint32_t max_stacks, uint64_t max_frames)
    : max_stacks_(std::clamp<uint32_t>(max_stacks, 1, kMaxStacks)),
      max_frames_(std::clamp<uint64_t>(max_frames, 1, kMaxFrames)) {
  init();
}

StackTable::~StackTable() { release(); }

void StackTable::init() {
  frames_ = static_cast<uintptr_t*>(reserve(frames_reserved(max_frames_)));
  records_ = static_cast<Record*>(reserve(records_reserved(max_stacks_, sizeof(Record))));
  size_t bytes = sizeof(Slots) + kInitialSlots * sizeof(uint64_t);
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  Slots* s = nullptr;
  if (p != MAP_FAILED) {
    s = static_cast<Slots*>(p);  // zero-filled: every word empty
    s->mask = kInitialSlots - 1;
    s->bytes = bytes;
    s->older = nullptr;
    index_bytes_.store(bytes, std::memory_order_relaxed);
  }
  slots_.store(s, std::memory_order_release);
}

void StackTable::release() {
  Slots* s = slots_.exchange(nullptr, std::memory_order_acq_rel);
  while (s) {
    Slots* older = s->older;
    munmap(s, s->bytes);
    s = older;
  }
  if (frames_) munmap(frames_, frames_reserved(max_frames_));
  if (records_) munmap(records_, records_reserved(max_stacks_, sizeof(Record)));
  frames_ = nullptr;
  records_ = nullptr;
  count_.store(0, std::memory_order_relaxed);
  frames_used_.store(0, std::memory_order_relaxed);
  index_bytes_.store(0, std::memory_order_relaxed);
  frames_committed_.store(0, std::memory_order_relaxed);
  records_committed_.store(0, std::memory_order_relaxed);
}

void StackTable::clear() {
  // Forked child: one thread, and whoever held the lock in the parent is gone.
  insert_lock_.reset();
  mirror_ = nullptr;  // the parent's state file is not the child's
  release();
  init();
  generation_.fetch_add(1, std::memory_order_relaxed);
}

bool StackTable::commit(void* base, std::atomic<size_t>& committed, size_t need, size_t limit,
                        size_t chunk) {
  size_t have = committed.load(std::memory_order_relaxed);
  if (need <= have) return true;
  size_t want = std::min(round_up(need, chunk), limit);
  if (want < need) return false;
  if (mprotect(static_cast<char*>(base) + have, want - have, PROT_READ | PROT_WRITE) != 0)
    return false;
  committed.store(want, std::memory_order_relaxed);
  return true;
}

uint32_t StackTable::find(const Slots* s, uint64_t hash, const uintptr_t* pcs, uint32_t n) const {
  const uint32_t tag = static_cast<uint32_t>(hash >> 32);
  const std::atomic<uint64_t>* w = s->words();
  for (uint64_t i = hash & s->mask;; i = (i + 1) & s->mask) {
    uint64_t v = w[i].load(std::memory_order_acquire);
    if (v == 0) return 0;
    if (static_cast<uint32_t>(v >> 32) != tag) continue;
    uint32_t id = static_cast<uint32_t>(v);
    const Record& r = records_[id - 1];
    if (r.hash == hash && r.n == n &&
        std::memcmp(frames_ + r.first, pcs, size_t{n} * sizeof(uintptr_t)) == 0)
      return id;
  }
}

namespace {
template <class S>
void place(S* s, uint64_t hash, uint32_t id, std::memory_order order) {
  auto* w = s->words();
  uint64_t i = hash & s->mask;
  while (w[i].load(std::memory_order_relaxed) != 0) i = (i + 1) & s->mask;
  w[i].store((hash >> 32) << 32 | id, order);
}
}  // namespace

uint32_t StackTable::insert_locked(uint64_t hash, const uintptr_t* pcs, uint32_t n, bool into_reserve) {
  const uint32_t c = count_.load(std::memory_order_relaxed);
  if (c >= max_stacks_ - (into_reserve ? 0 : reserved())) return 0;
  const uint64_t used = frames_used_.load(std::memory_order_relaxed);
  const uint64_t frame_room = max_frames_ - (into_reserve ? 0 : std::min<uint64_t>(kReserved, max_frames_ / 4));
  if (used > frame_room || n > frame_room - used) return 0;

  // Keep the index at most half full; build a bigger one first if this insert would pass it.
  Slots* s = slots_.load(std::memory_order_relaxed);
  const uint64_t cap = s->mask + 1;
  if ((uint64_t{c} + 1) * 2 > cap && cap < max_slots(max_stacks_)) {
    const uint64_t ncap = cap * 2;
    const size_t bytes = sizeof(Slots) + ncap * sizeof(uint64_t);
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p != MAP_FAILED) {
      Slots* ns = static_cast<Slots*>(p);
      ns->mask = ncap - 1;
      ns->bytes = bytes;
      ns->older = s;
      for (uint32_t i = 0; i < c; ++i) place(ns, records_[i].hash, i + 1, std::memory_order_relaxed);
      slots_.store(ns, std::memory_order_release);
      index_bytes_.fetch_add(bytes, std::memory_order_relaxed);
      s = ns;
    } else if ((uint64_t{c} + 1) * 4 > (s->mask + 1) * 3) {
      return 0;  // could not grow and the index is getting crowded
    }
  }

  if (!commit(frames_, frames_committed_, (used + n) * sizeof(uintptr_t),
              frames_reserved(max_frames_), kFrameChunk))
    return 0;
  if (!commit(records_, records_committed_, (size_t{c} + 1) * sizeof(Record),
              records_reserved(max_stacks_, sizeof(Record)), kRecordChunk))
    return 0;

  std::memcpy(frames_ + used, pcs, size_t{n} * sizeof(uintptr_t));
  records_[c] = Record{hash, static_cast<uint32_t>(used), n};
  frames_used_.store(used + n, std::memory_order_relaxed);
  const uint32_t id = c + 1;
  // count_ first: whoever finds the id through the index can get() it at once.
  count_.store(id, std::memory_order_release);
  place(s, hash, id, std::memory_order_release);
  return id;
}

uint32_t StackTable::reserved() const {
  return std::min<uint32_t>(kReserved, max_stacks_ / 4);
}

void StackTable::limit_stacks(uint32_t max_stacks) {
  max_stacks_ = std::clamp<uint32_t>(max_stacks, 4, max_stacks_);
}

uint32_t StackTable::intern(const uintptr_t* pcs, uint32_t n) { return intern_up_to(pcs, n, false); }

uint32_t StackTable::intern_reserved(const uintptr_t* pcs, uint32_t n) { return intern_up_to(pcs, n, true); }

uint32_t StackTable::intern_up_to(const uintptr_t* pcs, uint32_t n, bool into_reserve) {
  if (n == 0 || pcs == nullptr) return 0;
  const uint64_t hash = hash_stack(pcs, n);
  if (const Slots* s = slots_.load(std::memory_order_acquire)) {
    if (uint32_t id = find(s, hash, pcs, n)) return id;
  } else {
    return 0;
  }
  if (frames_ == nullptr || records_ == nullptr) return 0;
  bool added = false;
  uint32_t id;
  {
    SpinGuard guard(insert_lock_);
    id = find(slots_.load(std::memory_order_relaxed), hash, pcs, n);
    if (id == 0 && (id = insert_locked(hash, pcs, n, into_reserve)) != 0) {
      added = true;
      if (mirror_) mirror_locked(id, pcs, n);
    }
  }
  if (added && mirror_ && mirror_->on_new_stack) mirror_->on_new_stack();
  return id;
}

void StackTable::mirror_locked(uint32_t id, const uintptr_t* pcs, uint32_t n) {
  StackMirror& m = *mirror_;
  if (id > m.max_stacks) return;  // ids stay in order: the mirror ends here
  uint64_t rec = 0;
  if (n < 0x1000 && m.frames_used + n <= m.max_frames) {
    std::memcpy(m.frames + m.frames_used, pcs, size_t{n} * sizeof(uintptr_t));
    rec = (m.frames_used << 12) | n;
    m.frames_used += n;
  }
  m.records[id - 1] = rec;
  m.published->store(id, std::memory_order_release);
}

std::span<const uintptr_t> StackTable::get(uint32_t id) const {
  if (id == 0 || id > count_.load(std::memory_order_acquire)) return {};
  const Record& r = records_[id - 1];
  return {frames_ + r.first, r.n};
}

size_t StackTable::size() const { return count_.load(std::memory_order_relaxed); }

size_t StackTable::frame_count() const { return frames_used_.load(std::memory_order_relaxed); }

size_t StackTable::memory_bytes() const {
  return sizeof(*this) + frames_committed_.load(std::memory_order_relaxed) +
         records_committed_.load(std::memory_order_relaxed) +
         index_bytes_.load(std::memory_order_relaxed);
}

}  // namespace memtrace::unwind
