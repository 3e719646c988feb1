#include "cli/analysis/oom.hpp"

#include "cli/analysis/layout.hpp"

namespace memtrace::analysis {

std::vector<OomReport> find_ooms(const reader::Snapshot& s, int device) {
  std::vector<OomReport> out;
  if (device < 0 || device >= static_cast<int>(s.device_traces.size())) return out;
  const auto& tr = s.device_traces[device];
  std::vector<int64_t> at;
  for (size_t i = 0; i < tr.size(); ++i)
    if (tr[i].action == reader::Action::Oom) at.push_back(static_cast<int64_t>(i));
  // An oom entry changes nothing: the state when the request failed is the one right after it.
  std::vector<Layout> layouts = layouts_after(device_source(s, device), at, false);
  for (size_t k = 0; k < at.size(); ++k) {
    const reader::TraceEntry& e = tr[at[k]];
    OomReport r;
    r.device = device;
    r.entry = static_cast<size_t>(at[k]);
    r.time_us = e.time_us;
    r.requested = e.size;
    r.device_free = e.device_free();
    r.stack = e.stack;
    r.reserved = layouts[k].reserved;
    r.allocated = layouts[k].allocated;
    r.free_in_segments = layouts[k].free_in_segments;
    r.largest_free = layouts[k].largest_free;
    out.push_back(r);
  }
  return out;
}

}  // namespace memtrace::analysis
