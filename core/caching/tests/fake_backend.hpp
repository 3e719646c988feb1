// A Backend for the allocator's tests: hands out addresses from a bump pointer, enforces a
// capacity, counts every call, can be told to fail, and remembers which address ranges still have
// "work in flight" (submitted and not yet covered by a synchronize).
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "core/caching/backend.hpp"
#include "core/caching/caching_allocator.hpp"
#include "core/caching/listener.hpp"

namespace memtrace::caching::testing {

class FakeBackend : public Backend {
 public:
  explicit FakeBackend(size_t capacity = size_t{8} << 30, bool vmm = true) : capacity_(capacity), vmm_(vmm) {}

  int oom_code = kErrorOutOfMemory;  // what this "driver" says when it runs out
  int fail_next_allocate = 0;        // non-zero: the next allocate returns it (once)
  int fail_next_map = 0;

  int allocate(size_t bytes, uintptr_t* out) override {
    std::lock_guard<std::mutex> g(mu_);
    ++allocs;
    if (int e = fail_next_allocate) return fail_next_allocate = 0, e;
    if (used_ + bytes > capacity_) return oom_code;
    *out = take_range(bytes);
    live_[*out] = bytes;
    used_ += bytes;
    return 0;
  }
  int free(uintptr_t base, size_t bytes) override {
    std::lock_guard<std::mutex> g(mu_);
    ++frees;
    auto it = live_.find(base);
    if (it == live_.end() || it->second != bytes) return ++bad_calls, 1;
    live_.erase(it);
    used_ -= bytes;
    return 0;
  }
  bool supports_expandable() const override { return vmm_; }
  int reserve(size_t bytes, uintptr_t* out) override {
    std::lock_guard<std::mutex> g(mu_);
    ++reserves;
    *out = take_range(bytes);
    reservations_[*out] = bytes;
    return 0;
  }
  int map(uintptr_t base, size_t offset, size_t bytes) override {
    std::lock_guard<std::mutex> g(mu_);
    ++maps;
    if (int e = fail_next_map) return fail_next_map = 0, e;
    if (!reservations_.count(base) || offset + bytes > reservations_[base]) return ++bad_calls, 1;
    if (used_ + bytes > capacity_) return oom_code;
    for (auto& [o, b] : mapped_[base])
      if (offset < o + b && o < offset + bytes) return ++bad_calls, 1;  // mapped twice
    mapped_[base][offset] = bytes;
    used_ += bytes;
    return 0;
  }
  int unmap(uintptr_t base, size_t offset, size_t bytes) override {
    std::lock_guard<std::mutex> g(mu_);
    ++unmaps;
    // The allocator may unmap a range that several maps made, or part of one: track by page.
    auto& m = mapped_[base];
    size_t covered = 0;
    std::map<size_t, size_t> keep;
    for (auto [o, b] : m) {
      size_t lo = std::max(o, offset), hi = std::min(o + b, offset + bytes);
      if (lo >= hi) { keep[o] = b; continue; }
      covered += hi - lo;
      if (o < lo) keep[o] = lo - o;
      if (hi < o + b) keep[hi] = o + b - hi;
    }
    if (covered != bytes) return ++bad_calls, 1;  // unmapping memory that was not mapped
    m = keep;
    used_ -= bytes;
    return 0;
  }
  int release(uintptr_t base, size_t bytes) override {
    std::lock_guard<std::mutex> g(mu_);
    ++releases;
    if (!reservations_.count(base) || reservations_[base] != bytes || !mapped_[base].empty()) return ++bad_calls, 1;
    reservations_.erase(base);
    mapped_.erase(base);
    return 0;
  }
  int synchronize() override {
    std::lock_guard<std::mutex> g(mu_);
    ++syncs;
    work_.clear();
    return 0;
  }
  int mem_get_info(size_t* free_bytes, size_t* total_bytes) override {
    std::lock_guard<std::mutex> g(mu_);
    *free_bytes = capacity_ - used_;
    *total_bytes = capacity_;
    return 0;
  }
  bool is_out_of_memory(int e) const override { return e == oom_code; }
  int out_of_memory_error() const override { return oom_code; }

  // The program submits work that touches [p, p+n); it is in flight until a synchronize.
  void submit_work(uintptr_t p, size_t n) {
    std::lock_guard<std::mutex> g(mu_);
    work_.emplace_back(p, n);
  }
  bool work_in_flight(uintptr_t p, size_t n) {
    std::lock_guard<std::mutex> g(mu_);
    for (auto [a, b] : work_)
      if (p < a + b && a < p + n) return true;
    return false;
  }

  size_t used() {
    std::lock_guard<std::mutex> g(mu_);
    return used_;
  }
  size_t live_allocations() {
    std::lock_guard<std::mutex> g(mu_);
    return live_.size() + reservations_.size();
  }

  uint64_t allocs = 0, frees = 0, reserves = 0, maps = 0, unmaps = 0, releases = 0, syncs = 0;
  uint64_t bad_calls = 0;  // calls with arguments no real driver would accept

 private:
  uintptr_t take_range(size_t bytes) {
    uintptr_t p = next_;
    // 2 MiB aligned, with a hole after each range so neighbours are never contiguous by chance.
    next_ += (bytes + (4u << 20) - 1) / (2u << 20) * (2u << 20);
    return p;
  }

  std::mutex mu_;
  size_t capacity_;
  bool vmm_;
  size_t used_ = 0;
  uintptr_t next_ = uintptr_t{1} << 40;
  std::map<uintptr_t, size_t> live_;
  std::map<uintptr_t, size_t> reservations_;
  std::map<uintptr_t, std::map<size_t, size_t>> mapped_;
  std::vector<std::pair<uintptr_t, size_t>> work_;
};

// Keeps every event (called under the allocator's lock, so no lock of its own).
struct Recorder : Listener {
  std::vector<AllocatorEvent> events;
  void on_event(const AllocatorEvent& e) override { events.push_back(e); }
  std::vector<AllocatorEvent> of(Action a) const {
    std::vector<AllocatorEvent> out;
    for (const auto& e : events)
      if (e.action == a) out.push_back(e);
    return out;
  }
  size_t count(Action a) const { return of(a).size(); }
};

inline AllocConf conf_of(const char* s) {
  std::vector<std::string> w;
  AllocConf c = parse_alloc_conf(s, &w);
  if (!w.empty()) throw std::runtime_error("test conf did not parse: " + w[0]);
  return c;
}

constexpr size_t MiB = kMiB;

}  // namespace memtrace::caching::testing
