#include "cli/reader/range_derivation.hpp"

#include <algorithm>
#include <string>
#include <unordered_map>

#include "cli/reader/range_table.hpp"

namespace memtrace::reader {

namespace {

// Open ranges kept per device: past this many, further STARTs are ignored (counted), so that a
// hostile list of markers cannot make matching its ENDs quadratic.
constexpr size_t kMaxOpen = 4 * kMaxRangeDepth;

struct Marker {
  int64_t time_us = 0;
  StrId name = 0;
  bool start = false;
};

// A marker's field as an int64 (memtrace's RawValues keep ints and uints apart).
bool raw_int(const format::RawValues& raw, format::RawId id, int64_t* out) {
  const format::RawValues::Node& n = raw.node(id);
  if (n.kind == format::RawKind::kInt) {
    *out = static_cast<int64_t>(n.v);
    return true;
  }
  if (n.kind == format::RawKind::kUInt && n.v <= static_cast<uint64_t>(INT64_MAX)) {
    *out = static_cast<int64_t>(n.v);
    return true;
  }
  return false;
}

// The names markers use, as the snapshot's strings (added when new).
class Names {
 public:
  explicit Names(std::vector<std::string>* strings) : strings_(strings) {}
  StrId id(std::string_view name) {
    if (index_.empty())
      for (size_t i = 0; i < strings_->size(); ++i) index_.emplace((*strings_)[i], static_cast<StrId>(i));
    auto [it, added] = index_.try_emplace(std::string(name), static_cast<StrId>(strings_->size()));
    if (added) strings_->emplace_back(name);
    return it->second;
  }

 private:
  std::vector<std::string>* strings_;
  std::unordered_map<std::string, StrId> index_;  // copies: the vector's strings move as it grows
};

}  // namespace

void derive_ranges_from_annotations(Snapshot& s) {
  const format::RawValues& raw = s.raw;
  const format::RawId list = s.external_annotations;
  if (list == 0) return;
  const format::RawKind lk = raw.node(list).kind;
  if (lk != format::RawKind::kList && lk != format::RawKind::kTuple) return;
  const size_t n = raw.node(list).count;
  const format::RawId* items = raw.children(list);

  Names names(&s.strings);
  std::vector<std::vector<Marker>> per_device(s.device_traces.size());
  RangeDerivation& stats = s.range_derivation;
  for (size_t i = 0; i < n; ++i) {
    format::RawId m = items[i];
    const format::RawId* name = raw.find(m, "name");
    const format::RawId* stage = raw.find(m, "stage");
    const format::RawId* time = raw.find(m, "time_us");
    const format::RawId* device = raw.find(m, "device");
    int64_t t = 0, d = 0;
    bool start = stage && raw.is_str(*stage, "START");
    bool end = stage && raw.is_str(*stage, "END");
    if (!name || raw.node(*name).kind != format::RawKind::kStr || !(start || end) || !time || !raw_int(raw, *time, &t) ||
        (device && !raw_int(raw, *device, &d)) || d < 0 || d >= static_cast<int64_t>(per_device.size())) {
      ++stats.ignored;
      continue;
    }
    per_device[static_cast<size_t>(d)].push_back({t, names.id(raw.text_of(*name)), start});
  }

  RangeTable table(&s.ranges);
  bool any = false;
  for (size_t d = 0; d < per_device.size(); ++d) {
    std::vector<Marker>& ms = per_device[d];
    if (ms.empty()) continue;
    any = true;
    stats.markers += ms.size();
    std::stable_sort(ms.begin(), ms.end(), [](const Marker& a, const Marker& b) { return a.time_us < b.time_us; });
    // The stack after each group of markers with one time: (time, node), times ascending.
    std::vector<std::pair<int64_t, RangeId>> changes;
    std::vector<StrId> open;
    for (size_t i = 0; i < ms.size();) {
      const int64_t t = ms[i].time_us;
      for (; i < ms.size() && ms[i].time_us == t; ++i) {
        if (ms[i].start) {
          if (open.size() < kMaxOpen) open.push_back(ms[i].name);
          else ++stats.ignored;
          continue;
        }
        auto it = std::find(open.rbegin(), open.rend(), ms[i].name);
        if (it == open.rend()) ++stats.unmatched_ends;
        else open.erase(std::next(it).base());
      }
      changes.emplace_back(t, table.stack(open.data(), open.size()));
    }
    stats.unclosed += open.size();

    std::unordered_map<uint64_t, RangeId> alloc_range;  // address -> the last alloc's ranges
    for (TraceEntry& e : s.device_traces[d]) {
      auto it = std::upper_bound(changes.begin(), changes.end(), e.time_us,
                                 [](int64_t t, const std::pair<int64_t, RangeId>& c) { return t < c.first; });
      e.range = it == changes.begin() ? 0 : std::prev(it)->second;
      if (e.action == Action::Alloc) alloc_range[e.addr] = e.range;
    }
    for (Segment& seg : s.segments) {
      if (seg.device != static_cast<int>(d)) continue;
      for (Block& b : seg.blocks) {
        if (b.state != BlockState::ActiveAllocated && b.state != BlockState::ActivePendingFree) continue;
        if (auto it = alloc_range.find(b.address); it != alloc_range.end()) b.range = it->second;
      }
    }
  }
  if (any) s.ranges_from = RangesFrom::kAnnotations;
}

}  // namespace memtrace::reader
