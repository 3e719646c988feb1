#include "cli/analysis/replay.hpp"

#include "format/units.hpp"

#include <algorithm>
#include <iterator>
#include <map>
#include <unordered_map>

#include "core/caching/backend.hpp"
#include "core/caching/listener.hpp"

namespace memtrace::analysis::replay {

namespace mc = memtrace::caching;

namespace {

constexpr uintptr_t kSegmentBase = 0x7f0000000000;
constexpr uintptr_t kReserveBase = 0x800000000000;  // expandable reservations, away from segments
constexpr size_t kSegmentAlign = size_t{2} << 20;

uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// The device the replay runs on: addresses and a capacity, no memory (replay.hpp).
class OfflineDevice : public mc::Backend {
 public:
  OfflineDevice(uint64_t capacity, std::vector<std::pair<uint64_t, uint64_t>> recorded)
      : capacity_(capacity), recorded_(std::move(recorded)) {}

  int allocate(size_t bytes, uintptr_t* out) override {
    if (used_ + bytes > capacity_) return mc::kErrorOutOfMemory;
    uintptr_t a = 0;
    if (follow_ < recorded_.size() && recorded_[follow_].second == bytes && is_free(recorded_[follow_].first, bytes)) {
      a = recorded_[follow_++].first;
    } else {
      follow_ = recorded_.size();  // diverged: addresses of our own from now on
      a = lowest_fit(bytes);
    }
    segments_[a] = a + bytes;
    used_ += bytes;
    *out = a;
    return 0;
  }
  int free(uintptr_t base, size_t bytes) override {
    auto it = segments_.find(base);
    if (it == segments_.end() || it->second != base + bytes) return 1;
    segments_.erase(it);
    used_ -= bytes;
    return 0;
  }
  bool supports_expandable() const override { return true; }
  int reserve(size_t bytes, uintptr_t* out) override {
    *out = next_reserve_;
    next_reserve_ += align_up(bytes, uint64_t{1} << 30) + (uint64_t{1} << 30);
    return 0;
  }
  int map(uintptr_t, size_t, size_t bytes) override {
    if (used_ + bytes > capacity_) return mc::kErrorOutOfMemory;
    used_ += bytes;
    return 0;
  }
  int unmap(uintptr_t, size_t, size_t bytes) override {
    used_ -= bytes;
    return 0;
  }
  int release(uintptr_t, size_t) override { return 0; }
  int synchronize() override { return 0; }
  int mem_get_info(size_t* free_bytes, size_t* total_bytes) override {
    *free_bytes = capacity_ - used_;
    *total_bytes = capacity_;
    return 0;
  }

 private:
  bool is_free(uintptr_t a, size_t bytes) const {
    auto it = segments_.lower_bound(a);
    if (it != segments_.end() && it->first < a + bytes) return false;
    if (it != segments_.begin() && std::prev(it)->second > a) return false;
    return true;
  }
  uintptr_t lowest_fit(size_t bytes) const {
    uintptr_t a = kSegmentBase;
    for (const auto& [lo, hi] : segments_) {
      if (hi <= a) continue;
      if (lo >= a + bytes) break;
      a = align_up(hi, kSegmentAlign);
    }
    return a;
  }

  uint64_t capacity_;
  uint64_t used_ = 0;
  std::vector<std::pair<uint64_t, uint64_t>> recorded_;
  size_t follow_ = 0;
  std::map<uintptr_t, uintptr_t> segments_;  // base -> end
  uintptr_t next_reserve_ = kReserveBase;
};

// The replay's listener only counts: segment sizes in order, reserved bytes, allocated bytes.
class Tally : public mc::Listener {
 public:
  explicit Tally(Outcome& o) : o_(o) {}
  void on_event(const mc::AllocatorEvent& e) override {
    switch (e.action) {
      case Action::Alloc: allocated_ += e.block_size; break;
      case Action::FreeCompleted: allocated_ -= e.block_size; break;
      case Action::SegmentAlloc: o_.segment_allocs.push_back(e.size); reserved_ += e.size; break;
      case Action::SegmentFree: o_.segment_frees.push_back(e.size); reserved_ -= e.size; break;
      case Action::SegmentMap: o_.segment_maps.push_back(e.size); reserved_ += e.size; break;
      case Action::SegmentUnmap: o_.segment_unmaps.push_back(e.size); reserved_ -= e.size; break;
      default: break;
    }
  }
  uint64_t reserved() const { return reserved_; }
  uint64_t allocated() const { return allocated_; }

 private:
  Outcome& o_;
  uint64_t reserved_ = 0;
  uint64_t allocated_ = 0;
};

}  // namespace

Outcome run(const Plan& plan, const Configuration& config, uint64_t capacity) {
  Outcome o;
  o.conf = config.conf;
  o.label = config.label;
  mc::AllocConf conf = mc::parse_alloc_conf(config.conf, &o.warnings);
  conf.deferred_free = false;  // PyTorch's stream-ordered frees: a block is reusable at once
  OfflineDevice device(capacity, plan.segment_allocs);
  Tally tally(o);
  {
    mc::CachingAllocator alloc(device, conf, &tally);
    o.expandable_active = alloc.expandable_active();
    o.policy = mc::policy_name(alloc.conf().policy);
    std::unordered_map<uint64_t, uintptr_t> ptr_of;  // recorded address -> replayed block
    // "At the peak": of the moments reserved memory stands at its peak, the one with the most
    // allocated, so the fragmentation reported is what the peak could not avoid (reserved often
    // reaches its peak long before the allocations that fill it).
    uint64_t peak_seen = 0;
    int64_t ordinal = 0;
    auto after_malloc = [&] {
      if (tally.reserved() < peak_seen) return;
      if (tally.reserved() == peak_seen && tally.allocated() <= o.allocated_at_peak) return;
      peak_seen = tally.reserved();
      mc::Stats s = alloc.stats();
      o.allocated_at_peak = s.allocated;
      o.largest_free_at_peak = s.largest_free_block;
    };
    auto failed = [&](const Op& op, bool recorded) {
      ++o.failed_requests;
      if (!o.first_oom) o.first_oom = OomAt{op.event, op.event < 0 ? -1 : ordinal, op.size, op.stream, recorded};
    };
    auto apply = [&](const Op& op) {
      switch (op.kind) {
        case OpKind::Alloc: {
          mc::MallocResult r = alloc.malloc(op.size, op.stream);
          if (r.ptr) ptr_of[op.addr] = r.ptr;
          else failed(op, false);
          after_malloc();
          if (op.event >= 0) ++ordinal;
          break;
        }
        case OpKind::Free: {
          if (!op.enabled) break;
          auto it = ptr_of.find(op.addr);
          if (it == ptr_of.end()) break;  // its allocation failed here
          alloc.free(it->second);
          ptr_of.erase(it);
          break;
        }
        case OpKind::RecordedOom: {
          mc::MallocResult r = alloc.malloc(op.size, op.stream);
          after_malloc();
          if (r.ptr) alloc.free(r.ptr);
          else failed(op, true);
          break;
        }
        case OpKind::EmptyCache: {
          const uint64_t before = tally.reserved();
          alloc.empty_cache();
          o.empty_cache_released += before - tally.reserved();
          break;
        }
      }
    };
    for (const Op& op : plan.prealloc) apply(op);
    for (const Op& op : plan.ops) apply(op);
    o.stats = alloc.stats();
  }
  if (!plan.truncated && plan.recorded_by_cache) {
    // Allocations in order; releases as sets (their order within one release is the pools').
    auto same_set = [](std::vector<uint64_t> a, std::vector<uint64_t> b) {
      std::sort(a.begin(), a.end());
      std::sort(b.begin(), b.end());
      return a == b;
    };
    bool same = o.segment_allocs.size() == plan.segment_allocs.size() && o.segment_maps == plan.segment_maps &&
                same_set(o.segment_frees, plan.segment_frees) && same_set(o.segment_unmaps, plan.segment_unmaps);
    for (size_t i = 0; same && i < o.segment_allocs.size(); ++i)
      same = o.segment_allocs[i] == plan.segment_allocs[i].second;
    o.matches_recorded = same;
  }
  return o;
}

std::string segment_difference(const Outcome& o, const Plan& plan) {
  std::string out;
  auto count = [&](const char* what, size_t replayed, size_t recorded) {
    if (replayed == recorded) return;
    if (!out.empty()) out += ", ";
    out += std::to_string(replayed) + " " + what + " replayed, " + std::to_string(recorded) + " recorded";
  };
  count("segment allocs", o.segment_allocs.size(), plan.segment_allocs.size());
  count("maps", o.segment_maps.size(), plan.segment_maps.size());
  count("segment frees", o.segment_frees.size(), plan.segment_frees.size());
  count("unmaps", o.segment_unmaps.size(), plan.segment_unmaps.size());
  const size_t n = std::min(o.segment_allocs.size(), plan.segment_allocs.size());
  for (size_t i = 0; i < n; ++i) {
    if (o.segment_allocs[i] == plan.segment_allocs[i].second) continue;
    if (!out.empty()) out += "; ";
    out += "segment alloc #" + std::to_string(i + 1) + " is " + format::human_bytes(o.segment_allocs[i]) +
           ", recorded " + format::human_bytes(plan.segment_allocs[i].second);
    return out;
  }
  if (out.empty() && o.segment_maps != plan.segment_maps) out = "maps of other sizes or order";
  if (out.empty() && !(o.matches_recorded.value_or(true))) out = "segments released in other sets";
  return out;
}

// The PYTORCH_CUDA_ALLOC_CONF the snapshot says it was recorded with ("" when it does not say).
std::string recorded_conf(const reader::Snapshot& snap) {
  for (const auto& [k, v] : snap.settings)
    if (k == "PYTORCH_CUDA_ALLOC_CONF") {
      if (v.size() >= 2 && (v.front() == '\'' || v.front() == '"') && v.back() == v.front())
        return v.substr(1, v.size() - 2);
      return v;
    }
  return "";
}

Configuration given_configuration(const std::string& conf) {
  return Configuration{conf, conf.empty() ? "\"\" (PyTorch's defaults)" : conf};
}

std::vector<Configuration> default_configurations(const reader::Snapshot& snap, const Plan& plan) {
  std::vector<Configuration> configs;
  std::string rec = recorded_conf(snap);
  if (plan.recorded_by_cache)
    configs.push_back(Configuration{rec, "as recorded: \"" + rec + "\""});
  else  // memtrace without its caching allocator: every allocation went to the driver
    configs.push_back(given_configuration(""));
  if (!mc::parse_alloc_conf(rec, nullptr).expandable_segments)
    configs.push_back(Configuration{"expandable_segments:True", "expandable_segments:True"});
  configs.push_back(Configuration{"memtrace_policy:remap", "memtrace_policy:remap (memtrace's own)"});
  return configs;
}

}  // namespace memtrace::analysis::replay
