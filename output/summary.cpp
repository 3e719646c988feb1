#include "output/summary.hpp"

#include "format/report_name.hpp"

#include <algorithm>
#include <iterator>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "format/stack_line.hpp"
#include "format/units.hpp"

namespace memtrace::output {

using format::human_bytes;

namespace {
template <typename... A>
void put_line(std::string& out, fmt::format_string<A...> f, A&&... a) {
  fmt::format_to(std::back_inserter(out), f, std::forward<A>(a)...);
  out.push_back('\n');
}

// A call site in one line, by the frames that tell call sites apart (docs/reports.md, "Readable
// stacks"): memtrace's own frames, the runtime and driver entry points, binding glue, the
// interpreter and the process start are folded away, the rest cut to the width of the terminal
// the summary goes to.
std::string describe_site(const std::vector<FrameRef>& frames, size_t width) {
  std::vector<format::FrameKind> kinds;
  kinds.reserve(frames.size());
  for (const FrameRef& f : frames) kinds.push_back(format::classify_frame(f.name, f.filename));
  std::vector<std::string> labels;
  for (size_t i : format::shown_frames(kinds))
    labels.push_back(format::short_frame_label({frames[i].name, frames[i].filename, frames[i].line}));
  return labels.empty() ? std::string("(no frames)") : format::fit_stack_line(labels, width);
}

// Device and host totals, and the VMM physical memory still alive.
void put_totals(std::string& out, const StateCopy& s) {
  bool any_device = false;
  int ndev = std::clamp(s.device_count, 0, kMaxDevices);
  for (int d = 0; d < ndev; ++d) {
    const UsageStats& u = s.device[d];
    if (u.allocations == 0 && u.peak == 0 && u.current == 0) continue;
    any_device = true;
    put_line(out, "  device {}: current {}, peak {}, {} allocation{}", d, human_bytes(u.current), human_bytes(u.peak),
         u.allocations, u.allocations == 1 ? "" : "s");
  }
  if (!any_device) put_line(out, "  device memory: none seen");
  if (s.host.allocations || s.host.peak || s.host.current)
    put_line(out, "  host pinned: current {}, peak {}, {} allocation{}", human_bytes(s.host.current), human_bytes(s.host.peak),
         s.host.allocations, s.host.allocations == 1 ? "" : "s");

  if (!s.handles.empty()) {
    uint64_t dev = 0, host = 0;
    for (const HandleRecord& h : s.handles) (h.host ? host : dev) += h.size;
    std::string where = human_bytes(dev) + " on devices";
    if (host) where += ", " + human_bytes(host) + " on the host";
    put_line(out, "  VMM physical memory still alive: {} handle{}, {}", s.handles.size(), s.handles.size() == 1 ? "" : "s",
         where);
  }
}

// Live allocations grouped by owner, largest first; the caching allocator's segments on their own line.
void put_live_by_owner(std::string& out, const StateCopy& s, FrameSource& owners, const SummaryInfo& info) {
  struct Group {
    std::string owner;
    uint64_t count = 0;
    uint64_t bytes = 0;
  };
  std::vector<Group> groups;
  std::unordered_map<std::string, size_t> by_name;
  std::unordered_map<uint32_t, size_t> by_stack;
  uint64_t live_bytes = 0, live_count = 0;
  // The caching allocator's segments are its cache, not allocations: counted on their own line.
  uint64_t cache_segments = 0, cache_reserved = 0, cache_held = 0;
  for (const AllocRecord& r : s.live) {
    if (r.cache == CacheRole::Segment) {
      ++cache_segments;
      cache_reserved += r.size;
      continue;
    }
    if (r.cache == CacheRole::Block) cache_held += r.size;
    ++live_count;
    size_t gi;
    auto it = by_stack.find(r.stack_id);
    if (it != by_stack.end()) {
      gi = it->second;
    } else {
      std::string o = r.stack_id ? owners.owner(r.stack_id) : std::string("unknown");
      if (o.empty()) o = "unknown";
      auto nt = by_name.find(o);
      if (nt == by_name.end()) {
        gi = groups.size();
        by_name.emplace(o, gi);
        groups.push_back(Group{o, 0, 0});
      } else {
        gi = nt->second;
      }
      by_stack.emplace(r.stack_id, gi);
    }
    groups[gi].count += 1;
    groups[gi].bytes += r.size;
    live_bytes += r.size;
  }
  if (cache_segments)
    put_line(out, "  caching allocator: {} reserved in {} segment{}, {} of it in blocks the program holds",
             human_bytes(cache_reserved), cache_segments, cache_segments == 1 ? "" : "s", human_bytes(cache_held));
  if (live_count == 0) {
    put_line(out, "  live at exit: nothing");
  } else {
    put_line(out, "  live at exit: {} allocation{}, {}", live_count, live_count == 1 ? "" : "s", human_bytes(live_bytes));
    std::sort(groups.begin(), groups.end(), [](const Group& a, const Group& b) {
      if (a.bytes != b.bytes) return a.bytes > b.bytes;
      return a.owner < b.owner;
    });
    size_t rows = std::min(groups.size(), std::max<size_t>(info.max_owner_rows, 1));
    if (rows + 1 == groups.size()) rows = groups.size();  // no "1 more owner" line
    size_t width = 5;
    for (size_t i = 0; i < rows; ++i) width = std::max(width, std::min<size_t>(groups[i].owner.size(), 32));
    for (size_t i = 0; i < rows; ++i)
      put_line(out, "    {:<{}}  {:>7}  {:>10}", groups[i].owner.substr(0, 32), width, groups[i].count,
           human_bytes(groups[i].bytes));
    if (rows < groups.size()) {
      uint64_t c = 0, b = 0;
      for (size_t i = rows; i < groups.size(); ++i) {
        c += groups[i].count;
        b += groups[i].bytes;
      }
      put_line(out, "    {:<{}}  {:>7}  {:>10}", fmt::format("({} more)", groups.size() - rows), width, c, human_bytes(b));
    }
  }
}

// Device memory by owner over the whole run: what each holds now and its own peak.
void put_owner_usage(std::string& out, const StateCopy& s, const SummaryInfo& info) {
  if (s.owner_names.empty()) return;
  struct Row {
    std::string_view name;
    UsageStats u;
  };
  std::vector<Row> rows;
  for (size_t i = 0; i < s.owner_names.size() && i < static_cast<size_t>(kMaxOwners); ++i)
    if (s.owner_device[i].peak > 0) rows.push_back(Row{s.owner_names[i], s.owner_device[i]});
  std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
    return a.u.peak != b.u.peak ? a.u.peak > b.u.peak : a.name < b.name;
  });
  if (!rows.empty()) put_line(out, "  device memory by owner (now / peak):");
  size_t shown = std::min(rows.size(), std::max<size_t>(info.max_owner_rows, 1));
  for (size_t i = 0; i < shown; ++i)
    put_line(out, "    {:<16}  {:>10} / {:>10}  in {} allocation{}", rows[i].name.substr(0, 32),
             human_bytes(rows[i].u.current), human_bytes(rows[i].u.peak), rows[i].u.allocations,
             rows[i].u.allocations == 1 ? "" : "s");
  if (shown < rows.size()) put_line(out, "    ({} more owners)", rows.size() - shown);
}

// Where the live memory was allocated: the largest call sites, by bytes.
void put_call_sites(std::string& out, const StateCopy& s, FrameSource& owners, const SummaryInfo& info) {
  if (s.live.empty() || info.max_site_rows == 0) return;
  struct Site {
    uint32_t stack_id;
    uint64_t count = 0;
    uint64_t bytes = 0;
  };
  std::unordered_map<uint32_t, Site> sites;
  for (const AllocRecord& r : s.live) {
    if (r.stack_id == 0 || r.cache == CacheRole::Segment) continue;
    Site& site = sites.try_emplace(r.stack_id, Site{r.stack_id}).first->second;
    site.count += 1;
    site.bytes += r.size;
  }
  std::vector<Site> top;
  for (auto& kv : sites) top.push_back(kv.second);
  std::sort(top.begin(), top.end(), [](const Site& a, const Site& b) {
    return a.bytes != b.bytes ? a.bytes > b.bytes : a.stack_id < b.stack_id;
  });
  if (top.size() > info.max_site_rows) top.resize(info.max_site_rows);
  if (!top.empty()) put_line(out, "  largest live call sites:");
  std::vector<FrameRef> frames;
  for (const Site& site : top) {
    frames.clear();
    owners.frames(site.stack_id, &frames);
    // "    <10>  <5>x  ": what the row holds before its call site.
    constexpr size_t kLead = 4 + 10 + 2 + 5 + 3;
    const size_t width = format::report_width(2);
    put_line(out, "    {:>10}  {:>5}x  {}", human_bytes(site.bytes), site.count,
             describe_site(frames, width > kLead + 20 ? width - kLead : 20));
  }
}

// The history ring, unknown frees, Python support and memtrace's own memory.
void put_history(std::string& out, const StateCopy& s) {
  if (s.ring_capacity == 0 && s.trace.empty())
    put_line(out, "  history: not kept (MEMTRACE_MAX_ENTRIES=0)");
  else
    put_line(out, "  history: {} event{} kept, {} dropped (ring holds {})", s.trace.size(), s.trace.size() == 1 ? "" : "s",
         s.dropped_entries, s.ring_capacity);
  if (s.unknown_frees) put_line(out, "  frees of pointers memtrace never saw allocated: {}", s.unknown_frees);
  if (!s.python_support.empty() && s.python_direct)
    put_line(out, "  python: {}; {} stack{} without Python frames (frame chain unreadable)", s.python_support,
             s.python_walks_failed, s.python_walks_failed == 1 ? "" : "s");
  else if (!s.python_support.empty())
    put_line(out, "  python: {}", s.python_support);
  if (s.ring_bytes || s.stack_table_bytes)
    put_line(out, "  memtrace's own memory: {} distinct stack{} ({}), history ring {} reserved", s.distinct_stacks,
             s.distinct_stacks == 1 ? "" : "s", human_bytes(s.stack_table_bytes), human_bytes(s.ring_bytes));
}

}  // namespace

std::string format_summary(const StateCopy& s, FrameSource& owners, const SummaryInfo& info) {
  std::string out;
  if (info.program.empty())
    put_line(out, "memtrace: summary (pid {})", info.pid);
  else
    put_line(out, "memtrace: summary of {} (pid {})", info.program, info.pid);
  put_totals(out, s);
  put_live_by_owner(out, s, owners, info);
  put_owner_usage(out, s, info);
  put_call_sites(out, s, owners, info);
  put_history(out, s);
  // Where the snapshot went.
  if (info.written) {
    put_line(out, "  snapshot: {} ({}, {:.2f} s)", info.path, human_bytes(info.bytes), info.seconds);
    if (info.report_follows)
      put_line(out, "  report:   {} (MEMTRACE_REPORT=1: written next)", format::report_path_for(info.path));
    else
      put_line(out, "  see it:   memtrace report {}   (one HTML page, offline)", info.path);
  } else
    put_line(out, "  snapshot: not written ({})", info.why_not.empty() ? std::string("no reason given") : info.why_not);
  return out;
}

}  // namespace memtrace::output
