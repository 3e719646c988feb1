// One pass forward over a history, keeping the live set as it goes, that yields the report's time
// series and the live set at chosen moments. The live set follows the rules of
// cli/analysis/device_history.hpp exactly (pairing, frees without their alloc, blocks older than
// the history), so a moment's totals are the ones `summary` prints for it.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "cli/analysis/device_history.hpp"
#include "cli/report/report_model.hpp"

namespace memtrace::report {

struct SweepInput {
  analysis::HistorySource src;
  const std::vector<int64_t>* x = nullptr;    // each entry's position on the time axis
  const std::vector<uint32_t>* owner_of = nullptr;  // category StrId -> owner id
  uint32_t owner_count = 0;
  const std::vector<uint32_t>* range_of = nullptr;  // RangeId -> range group (null: no split by range)
  uint32_t range_count = 0;
  std::vector<int64_t> checkpoints;           // ascending, -1 .. n-1, no repeats
  int64_t peak_entry = -1;                    // where the stacks of the split by stack are chosen
  const Limits* limits = nullptr;
  // Called with each moment as it is taken, its `stacks` filled: to weigh them and let them go.
  std::function<void(Moment&)> on_moment;
};

struct SweepOutput {
  std::vector<SeriesLevel> series;
  std::vector<Moment> moments;  // one per checkpoint, in order (labels left empty)
  std::vector<reader::StackId> top_stacks;  // the series' stack groups, largest at the peak first
};

SweepOutput sweep_history(const SweepInput& in);

}  // namespace memtrace::report
