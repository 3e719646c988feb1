// `memtrace replay`'s computation: a Plan (replay_plan.hpp) run through memtrace's caching allocator
// over an offline device (addresses only, no memory, a capacity), once per allocator
// configuration, and what each would have reserved, wasted and asked the driver for, and whether
// it runs out of memory.
//
// Under the recorded settings the replay should make the recorded segment decisions again. Best fit
// breaks ties by address, so the offline device hands out the recorded segment addresses for as long
// as the allocator asks for the recorded segment sizes, in order; after the first difference (or
// under other settings) it places segments at the lowest free 2 MiB-aligned address from
// 0x7f0000000000, as a fresh device does.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cli/analysis/replay_plan.hpp"
#include "cli/reader/snapshot.hpp"
#include "core/caching/caching_allocator.hpp"

namespace memtrace::analysis::replay {

// Offline devices report this much memory when no capacity is given: no trace reaches it.
constexpr uint64_t kUnlimited = uint64_t{1} << 46;

// An allocator configuration in PYTORCH_CUDA_ALLOC_CONF syntax, and how the output names it.
struct Configuration {
  std::string conf;
  std::string label;
};

struct OomAt {
  int64_t event = -1;          // trace index; -1 during pre-allocation
  int64_t alloc_ordinal = -1;  // how many of the trace's allocs came before it
  uint64_t size = 0;
  uint64_t stream = 0;
  bool recorded = false;  // the recording ran out of memory here too (an oom entry)
};

struct Outcome {
  std::string conf;
  std::string label;
  std::vector<std::string> warnings;  // about the configuration's text
  bool expandable_active = false;
  std::string policy;
  caching::Stats stats;
  uint64_t allocated_at_peak = 0;
  uint64_t largest_free_at_peak = 0;
  std::vector<uint64_t> segment_allocs, segment_frees, segment_maps, segment_unmaps;
  std::optional<OomAt> first_oom;
  uint64_t failed_requests = 0;
  uint64_t empty_cache_released = 0;     // bytes the replayed empty_cache() calls gave back
  std::optional<bool> matches_recorded;  // nullopt when the history is incomplete
};

// Replays `plan` under `config` on a device of `capacity` bytes.
Outcome run(const Plan& plan, const Configuration& config, uint64_t capacity);

// The PYTORCH_CUDA_ALLOC_CONF the snapshot says it was recorded with ("" when it does not say).
std::string recorded_conf(const reader::Snapshot& snap);

// What differs between the replayed and the recorded segment decisions, in one line: the counts
// that differ, then the first segment allocation of a different size. "" when they are the same.
std::string segment_difference(const Outcome& o, const Plan& plan);

// A configuration given on the command line; "" is labelled as PyTorch's defaults.
Configuration given_configuration(const std::string& conf);

// Without --alloc-conf: the recorded settings (PyTorch's defaults when memtrace recorded without
// its caching allocator), expandable segments unless the recording had them, and memtrace's remap
// policy.
std::vector<Configuration> default_configurations(const reader::Snapshot& snap, const Plan& plan);

}  // namespace memtrace::analysis::replay
