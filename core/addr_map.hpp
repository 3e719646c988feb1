// Open-addressing hash map from a non-zero 64-bit key to a trivially copyable value.
// Linear probing with backward-shift deletion (no tombstones), so a long-running
// program that allocates and frees forever never degrades, and steady state never
// touches the heap: memory is only requested when the table grows.
#pragma once
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>

namespace memtrace {

template <typename V>
class AddrMap {
  static_assert(std::is_trivially_copyable_v<V>);

 public:
  AddrMap() = default;
  AddrMap(const AddrMap&) = delete;
  AddrMap& operator=(const AddrMap&) = delete;
  ~AddrMap() { std::free(slots_); }

  // Inserts or replaces. Returns false only if memory for growth could not be had.
  bool put(uint64_t key, const V& v) {
    bool existed;
    return assign(key, v, nullptr, &existed);
  }

  // Inserts or replaces in one probe; *old receives the replaced value. True if one existed.
  bool exchange(uint64_t key, const V& v, V* old) {
    bool existed = false;
    assign(key, v, old, &existed);
    return existed;
  }

  V* find(uint64_t key) {
    if (cap_ == 0) return nullptr;
    size_t i = slot_of(key);
    while (slots_[i].key != 0) {
      if (slots_[i].key == key) return &slots_[i].value;
      i = (i + 1) & (cap_ - 1);
    }
    return nullptr;
  }

  bool take(uint64_t key, V* out) {
    if (cap_ == 0) return false;
    size_t i = slot_of(key);
    while (slots_[i].key != key) {
      if (slots_[i].key == 0) return false;
      i = (i + 1) & (cap_ - 1);
    }
    if (out) *out = slots_[i].value;
    // Backward-shift: pull later members of the probe chain into the hole.
    size_t hole = i;
    size_t j = i;
    for (;;) {
      j = (j + 1) & (cap_ - 1);
      if (slots_[j].key == 0) break;
      size_t home = slot_of(slots_[j].key);
      bool movable = (hole <= j) ? (home <= hole || home > j) : (home <= hole && home > j);
      if (movable) {
        slots_[hole] = slots_[j];
        hole = j;
      }
    }
    slots_[hole].key = 0;
    set_size(size() - 1);
    return true;
  }

  template <typename F>
  void for_each(F&& f) const {
    for (size_t i = 0; i < cap_; ++i)
      if (slots_[i].key != 0) f(slots_[i].key, slots_[i].value);
  }

  // Room for n members without growing (one allocation instead of a doubling series, each
  // re-inserting everything). False only if the memory could not be had.
  bool reserve(size_t n) {
    size_t want = cap_ ? cap_ : 64;
    while (n * 4 > want * 3) want *= 2;
    return want == cap_ || grow_to(want);
  }

  void clear() {
    if (slots_) std::memset(static_cast<void*>(slots_), 0, cap_ * sizeof(Slot));
    set_size(0);
  }
  // Exact for the owner (whoever serialises the writes). Another thread may also read it without
  // that lock, as a hint (Recorder::copy_state sizes its buffers so before taking the locks): the
  // count is a relaxed atomic so that read is defined. On x86 a relaxed load or store is a plain
  // move, so the owner pays nothing for it.
  size_t size() const { return size_.load(std::memory_order_relaxed); }
  size_t memory_bytes() const { return cap_ * sizeof(Slot); }

 private:
  struct Slot {
    uint64_t key;
    V value;
  };

  bool assign(uint64_t key, const V& v, V* old, bool* existed) {
    *existed = false;
    if ((size() + 1) * 4 > cap_ * 3 && !grow()) return false;
    size_t i = slot_of(key);
    while (slots_[i].key != 0) {
      if (slots_[i].key == key) {
        if (old) *old = slots_[i].value;
        slots_[i].value = v;
        *existed = true;
        return true;
      }
      i = (i + 1) & (cap_ - 1);
    }
    slots_[i].key = key;
    slots_[i].value = v;
    set_size(size() + 1);
    return true;
  }

  size_t slot_of(uint64_t key) const {
    // Addresses share low zero bits and high prefixes; a multiplicative mix spreads them.
    uint64_t h = key * 0x9E3779B97F4A7C15ull;
    return static_cast<size_t>(h >> 20) & (cap_ - 1);
  }

  void set_size(size_t n) { size_.store(n, std::memory_order_relaxed); }

  bool grow() { return grow_to(cap_ ? cap_ * 2 : 64); }

  bool grow_to(size_t ncap) {
    Slot* fresh = static_cast<Slot*>(std::calloc(ncap, sizeof(Slot)));
    if (!fresh) return false;
    Slot* old = slots_;
    size_t ocap = cap_;
    slots_ = fresh;
    cap_ = ncap;
    set_size(0);
    for (size_t i = 0; i < ocap; ++i)
      if (old[i].key != 0) put(old[i].key, old[i].value);
    std::free(old);
    return true;
  }

  Slot* slots_ = nullptr;
  size_t cap_ = 0;
  std::atomic<size_t> size_{0};
};

}  // namespace memtrace
