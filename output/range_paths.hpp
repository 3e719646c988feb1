// The ranges of a StateCopy's events as the snapshot writer names them (docs/ranges.md): each
// distinct (process-wide, thread) pair of range nodes an event carries gets one id, and its names
// are the process-wide ranges' then the thread's, outermost first.
#pragma once
#include <cstdint>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/records.hpp"
#include "format/snapshot_writer.hpp"

namespace memtrace::output {

class RangePaths : public format::RangeSource {
 public:
  explicit RangePaths(const StateCopy& s) : s_(s) {}
  // 0 when the event had no range open.
  uint32_t id(uint32_t range, uint32_t phase);
  void names(uint32_t id, std::vector<std::string_view>* out) override;
  // The range's own name (what external_annotations calls it).
  std::string_view name_of(uint32_t node) const;

 private:
  void append_path(uint32_t node, std::vector<std::string_view>* out) const;

  const StateCopy& s_;
  std::unordered_map<uint64_t, uint32_t> ids_;
  std::vector<uint64_t> pairs_;  // by id - 1: phase << 32 | range
};

}  // namespace memtrace::output
