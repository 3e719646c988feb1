#include "preload/allocator_settings.hpp"

#include <cstdint>
#include <utility>
#include <variant>
#include <vector>

#include "core/log.hpp"

namespace memtrace::preload {

caching::AllocConf parse_allocator_settings(const std::string& text) {
  std::vector<std::string> warnings;
  caching::AllocConf c = caching::parse_alloc_conf(text, &warnings);
  for (const std::string& w : warnings) log::warn("MEMTRACE_ALLOC_CONF: {}", w);
  return c;
}

void describe_allocator_settings(const caching::AllocConf& c, bool expandable_in_use, output::AllocatorSettings* out) {
  format::IntDict divisions;
  for (int i = 0; i < 16; ++i) divisions.emplace_back(std::to_string(1 << i), c.roundup_power2_divisions[i]);
  out->pytorch = {
      {"PYTORCH_CUDA_ALLOC_CONF", c.source},
      {"max_split_size",
       c.max_split_size == caching::kNoMaxSplit ? int64_t{-1} : static_cast<int64_t>(c.max_split_size)},
      {"garbage_collection_threshold", c.garbage_collection_threshold},
      {"expandable_segments", expandable_in_use},
      {"release_lock_on_cudamalloc", c.release_lock_on_cudamalloc},
      {"roundup_power2_divisions", std::move(divisions)},
  };
  format::Setting fraction{"per_process_memory_fraction", std::monostate{}};
  if (c.per_process_memory_fraction) fraction.value = *c.per_process_memory_fraction;
  out->memtrace = {
      {"policy", std::string(caching::policy_name(c.policy))},
      {"deferred_free", c.deferred_free},
      {"free_batch_bytes", static_cast<uint64_t>(c.free_batch_bytes)},
      {"max_non_split_rounding", static_cast<uint64_t>(c.max_non_split_rounding)},
      {"large_segment_size", static_cast<uint64_t>(c.large_segment_size)},
      std::move(fraction),
  };
}

}  // namespace memtrace::preload
