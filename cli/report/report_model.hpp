// What the HTML report draws, computed from a snapshot: per device a time series at a few levels of
// detail, the live set at a bounded number of moments, the leaks, the out-of-memory post-mortems
// and the segment layouts (docs/report.md, "The page's data"). Everything here is bounded by
// Limits, not by the history's length, so the page stays small for any file.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cli/analysis/device_history.hpp"
#include "cli/analysis/layout.hpp"
#include "cli/analysis/oom.hpp"
#include "cli/reader/snapshot.hpp"
#include "cli/report/live_trees.hpp"

namespace memtrace::report {

struct Limits {
  size_t moments = 240;            // evenly spread moments (the peak, OOMs and the end come on top)
  double keep_fraction = 0.005;    // a tree node is kept when what lives below it holds this share of a moment
  size_t top = 10;                 // largest live allocations per moment
  size_t max_segments = 400;       // segments drawn per layout
  std::vector<size_t> levels{2048, 16384, 65536};  // series buckets, coarse to fine
  size_t owner_levels = 2;         // the first levels carry the split by owner
  size_t max_owners = 12;          // owners beyond these are one "other"
  size_t max_ranges = 12;          // range stacks beyond these are one "other ranges"
  size_t top_stacks = 8;           // the series' split by stack: the largest at the peak, then "other"
};

// One level of a series: a point per bucket (or per event when the history is shorter).
struct SeriesLevel {
  std::vector<int64_t> t;
  std::vector<uint64_t> allocated;  // the largest value reached in the bucket
  std::vector<uint64_t> reserved;   // the largest value reached in the bucket
  std::vector<std::vector<uint64_t>> by_owner;  // [owner][point] at the allocated maximum; empty if not kept
  std::vector<std::vector<uint64_t>> by_stack;  // [stack group][point], likewise (DeviceModel::top_stacks)
  std::vector<std::vector<uint64_t>> by_range;  // [range group][point], likewise (Model::ranges); empty without ranges
};

struct LiveItem {
  uint64_t bytes = 0;
  uint64_t addr = 0;
  uint32_t owner = 0;
  reader::StackId stack = 0;
  uint32_t group = 0;  // its stack's group in the series' split by stack
  uint32_t range = 0;  // its range stack's group (Model::ranges; 0 when the file has no ranges)
};

struct StackBytes {
  reader::StackId stack = 0;
  uint64_t bytes = 0;
};

struct Moment {
  int64_t t = 0;
  int64_t entry = -1;  // the state right after this entry; -1: before the first
  std::string label;   // "peak", "oom", "end", or ""
  uint64_t allocated = 0;
  uint64_t reserved = 0;
  uint64_t count = 0;                  // live allocations
  std::vector<StackBytes> stacks;      // every live stack (while the sweep hands the moment over)
  NodeBytes live[2];                   // the live set on the short and the full tree (LiveTrees)
  std::vector<uint64_t> by_owner;      // bytes per owner id
  std::vector<uint64_t> count_by_owner;
  std::vector<uint64_t> by_stack;      // bytes per stack group
  std::vector<uint64_t> by_range;      // bytes per range group (empty without ranges)
  std::vector<LiveItem> top;           // largest first
};

struct Marker {
  std::string kind;  // "peak", "oom", "snapshot", "annotation"
  int64_t t = 0;
  std::string label;
};

struct LayoutView {
  std::string label;
  int64_t t = 0;
  analysis::Layout layout;         // runs cut to Limits::max_segments, largest first
  size_t omitted = 0;              // runs left out
  std::optional<std::string> verdict;  // the OOM post-mortem's, for an OOM's layout
};

struct DeviceModel {
  int device = 0;  // analysis::kHostDevice for pinned host memory
  std::string title;
  analysis::DeviceHistory history;  // the figures `summary` prints (without the live sets)
  std::vector<SeriesLevel> series;  // coarse to fine
  std::vector<reader::StackId> top_stacks;  // the stack groups but the last ("other stacks")
  std::vector<Marker> markers;
  std::vector<Moment> moments;      // in time order; the last is the end
  size_t peak_moment = 0;           // index into moments
  std::vector<analysis::OomReport> ooms;
  std::vector<int64_t> oom_t;       // each OOM's x
  std::vector<LayoutView> layouts;  // the peak's, then each OOM's
};

struct Model {
  const reader::Snapshot* snapshot = nullptr;
  std::string file;
  bool timed = false;   // x is microseconds since t0_us; else entry indices
  int64_t t0_us = 0;
  int64_t first = 0, last = 0;  // x span over the devices shown
  bool truncated = false;
  std::vector<std::string> owners;  // owner id -> name
  // Range group id -> its range stack as text ("(no range)", "step 7 > forward", "other ranges"
  // last when folded); empty when the snapshot has no ranges (docs/ranges.md).
  std::vector<std::string> ranges;
  std::vector<DeviceModel> devices;
  std::unique_ptr<LiveTrees> trees;  // every moment's live set, and the stacks the page names
};

// The devices to draw (as the commands choose them) and, when `host`, the pinned host memory.
Model build_model(const reader::Snapshot& s, const std::string& file, const std::vector<int>& devices, bool host,
                  const Limits& limits = Limits());

}  // namespace memtrace::report
