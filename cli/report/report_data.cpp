#include "cli/report/report_data.hpp"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <map>
#include <unordered_map>

#include "cli/analysis/json_writer.hpp"
#include "cli/analysis/report.hpp"
#include "cli/analysis/stack_text.hpp"
#include "cli/analysis/stack_view.hpp"
#include "cli/report/live_trees.hpp"
#include "format/stack_line.hpp"

namespace memtrace::report {

using analysis::JsonWriter;

namespace {

std::string hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%" PRIx64, v);
  return buf;
}

// The trees as the page gets them: only the kept nodes, renumbered in their order (a parent still
// comes before its children), each named by its frame's label; and the stacks the page names.
class PageTrees {
 public:
  PageTrees(const reader::Snapshot& s, LiveTrees& trees)
      : s_(s), trees_(trees), view_(s, analysis::FrameMode::kShort) {
    for (TreeKind t : {kShortTree, kAllTree}) {
      const StackTree& tree = trees.tree(t);
      remap_[t].assign(tree.size(), UINT32_MAX);
      for (uint32_t n = 0; n < tree.size(); ++n) {
        if (!trees.kept(t, n)) continue;
        remap_[t][n] = static_cast<uint32_t>(parent_[t].size());
        parent_[t].push_back(n == 0 ? -1 : static_cast<int32_t>(remap_[t][tree.parent()[n]]));
        name_[t].push_back(label(t, tree.name()[n], n == 0));
      }
    }
  }
  uint32_t node(TreeKind t, uint32_t original) const { return remap_[t][original]; }
  // Index into the page's `stacks` table (the stack's path was kept: LiveTrees::keep_stack).
  uint32_t stack(reader::StackId id) {
    auto [it, inserted] = index_.try_emplace(id, static_cast<uint32_t>(leaves_.size()));
    if (inserted) leaves_.push_back({node(kShortTree, trees_.leaf(id, kShortTree)), node(kAllTree, trees_.leaf(id, kAllTree))});
    return it->second;
  }
  // A stack in one line, as the text reports show it (docs/reports.md, "Readable stacks").
  std::string line(reader::StackId id) { return view_.line(id, 90); }
  void write(JsonWriter& j) const {
    j.key("strings").begin_array();
    for (const std::string& str : strings_) j.string(str);
    j.end_array();
    j.key("trees").begin_object();
    for (TreeKind t : {kShortTree, kAllTree}) {
      j.key(t == kShortTree ? "short" : "all").begin_object();
      j.key("parent").begin_array();
      for (int32_t p : parent_[t]) j.integer(p);
      j.end_array();
      j.key("name").begin_array();
      for (uint32_t n : name_[t]) j.uinteger(n);
      j.end_array();
      j.end_object();
    }
    j.end_object();
    j.key("stacks").begin_array();
    for (const auto& [sh, all] : leaves_) {
      j.begin_object();
      j.field_uint("short", sh);
      j.field_uint("all", all);
      j.end_object();
    }
    j.end_array();
  }

 private:
  uint32_t label(TreeKind t, uint32_t frame, bool root) {
    if (root) return 0;
    std::string text;
    if (frame == StackTree::kNoStack) {
      text = "[no stack]";
    } else if (frame == StackTree::kSmaller) {
      text = "(smaller stacks)";
    } else {
      const reader::Frame& f = s_.frames[frame];
      text = t == kShortTree ? format::short_frame_label({s_.str(f.name), s_.str(f.filename), f.line})
                             : analysis::frame_text(s_, frame);
    }
    auto [it, inserted] = ids_.try_emplace(text, static_cast<uint32_t>(strings_.size()));
    if (inserted) strings_.push_back(text);
    return it->second;
  }

  const reader::Snapshot& s_;
  LiveTrees& trees_;
  analysis::StackView view_;
  std::vector<uint32_t> remap_[2];
  std::vector<int32_t> parent_[2];
  std::vector<uint32_t> name_[2];
  std::vector<std::string> strings_{""};
  std::unordered_map<std::string, uint32_t> ids_{{"", 0}};
  std::unordered_map<reader::StackId, uint32_t> index_;
  std::vector<std::pair<uint32_t, uint32_t>> leaves_;
};

void write_live(JsonWriter& j, const PageTrees& st, const Moment& m) {
  j.key("live").begin_object();
  for (TreeKind t : {kShortTree, kAllTree}) {
    j.key(t == kShortTree ? "short" : "all").begin_array();
    for (const auto& [node, bytes] : m.live[t]) {
      j.uinteger(st.node(t, node));
      j.uinteger(bytes);
    }
    j.end_array();
  }
  j.end_object();
}

void write_top(JsonWriter& j, PageTrees& st, const Moment& m) {
  j.key("top").begin_array();
  for (const LiveItem& it : m.top) {
    j.begin_object();
    j.field_uint("bytes", it.bytes);
    j.field("addr", hex(it.addr));
    j.field_uint("owner", it.owner);
    j.field_uint("stack", st.stack(it.stack));
    j.end_object();
  }
  j.end_array();
}

void write_moment(JsonWriter& j, PageTrees& st, const Moment& m) {
  j.begin_object();
  j.field_int("t", m.t);
  j.field_int("entry", m.entry);
  j.field("label", m.label);
  j.field_uint("allocated_bytes", m.allocated);
  j.field_uint("reserved_bytes", m.reserved);
  j.field_uint("allocations", m.count);
  write_live(j, st, m);
  j.key("by_owner").begin_array();
  for (uint64_t b : m.by_owner) j.uinteger(b);
  j.end_array();
  j.key("by_stack").begin_array();
  for (uint64_t b : m.by_stack) j.uinteger(b);
  j.end_array();
  if (!m.by_range.empty()) {  // only a file with ranges has the split (docs/report.md)
    j.key("by_range").begin_array();
    for (uint64_t b : m.by_range) j.uinteger(b);
    j.end_array();
  }
  write_top(j, st, m);
  j.end_object();
}

void write_series(JsonWriter& j, const std::vector<SeriesLevel>& levels, bool has_ranges) {
  j.key("series").begin_array();
  for (const SeriesLevel& l : levels) {
    j.begin_object();
    j.key("t").begin_array();
    for (int64_t t : l.t) j.integer(t);
    j.end_array();
    j.key("allocated").begin_array();
    for (uint64_t v : l.allocated) j.uinteger(v);
    j.end_array();
    j.key("reserved").begin_array();
    for (uint64_t v : l.reserved) j.uinteger(v);
    j.end_array();
    for (const auto& [key, split] : {std::pair{"by_owner", &l.by_owner}, std::pair{"by_stack", &l.by_stack},
                                     std::pair{"by_range", &l.by_range}}) {
      if (split == &l.by_range && !has_ranges) continue;  // the key only where the file has ranges
      j.key(key);
      if (split->empty()) {
        j.null();
        continue;
      }
      j.begin_array();
      for (const auto& o : *split) {
        j.begin_array();
        for (uint64_t v : o) j.uinteger(v);
        j.end_array();
      }
      j.end_array();
    }
    j.end_object();
  }
  j.end_array();
}

void write_leaks(JsonWriter& j, PageTrees& st, const Model& model, const Moment& end) {
  j.key("leaks").begin_object();
  j.field_uint("bytes", end.allocated);
  j.field_uint("count", end.count);
  j.key("by_owner").begin_array();
  for (size_t o = 0; o < end.by_owner.size(); ++o) {
    if (end.count_by_owner[o] == 0) continue;
    j.begin_array();
    j.uinteger(o);  // an owner id, as everywhere in the data
    j.uinteger(end.by_owner[o]);
    j.uinteger(end.count_by_owner[o]);
    j.end_array();
  }
  j.end_array();
  write_live(j, st, end);
  write_top(j, st, end);
  j.end_object();
}

void write_ooms(JsonWriter& j, PageTrees& st, const DeviceModel& d) {
  j.key("ooms").begin_array();
  for (size_t k = 0; k < d.ooms.size(); ++k) {
    const analysis::OomReport& r = d.ooms[k];
    j.begin_object();
    j.field_int("t", d.oom_t[k]);
    j.field_uint("entry", r.entry);
    j.field_uint("requested_bytes", r.requested);
    if (r.device_free) j.field_uint("device_free_bytes", *r.device_free);
    else j.key("device_free_bytes").null();
    j.field_uint("reserved_bytes", r.reserved);
    j.field_uint("allocated_bytes", r.allocated);
    j.field_uint("free_in_segments_bytes", r.free_in_segments);
    j.field_uint("largest_free_block_bytes", r.largest_free);
    j.field_bool("fits_without_fragmentation", r.fits_without_fragmentation());
    j.field("verdict", analysis::oom_verdict(r));
    j.field_uint("stack", st.stack(r.stack));
    j.end_object();
  }
  j.end_array();
}

void write_layouts(JsonWriter& j, const DeviceModel& d) {
  j.key("layouts").begin_array();
  for (const LayoutView& v : d.layouts) {
    j.begin_object();
    j.field("label", v.label);
    j.field_int("t", v.t);
    j.field_int("entry", v.layout.after_entry);
    j.field_uint("reserved_bytes", v.layout.reserved);
    j.field_uint("allocated_bytes", v.layout.allocated);
    j.field_uint("largest_free_block_bytes", v.layout.largest_free);
    if (v.verdict) j.field("verdict", *v.verdict);
    else j.key("verdict").null();
    j.key("segments").begin_array();
    for (const analysis::SegmentRun& run : v.layout.runs) {
      j.begin_object();
      j.field("addr", hex(run.addr));
      j.field_uint("size", run.size);
      j.key("blocks").begin_array();
      for (const auto& [addr, size] : run.blocks) {
        j.uinteger(addr - run.addr);
        j.uinteger(size);
      }
      j.end_array();
      j.end_object();
    }
    j.end_array();
    j.field_uint("segments_omitted", v.omitted);
    j.end_object();
  }
  j.end_array();
}

void write_device(JsonWriter& j, PageTrees& st, const Model& model, const DeviceModel& d) {
  j.begin_object();
  j.field_int("device", d.device);
  j.field("title", d.title);
  write_series(j, d.series, !model.ranges.empty());
  // The series' split by stack: one group per stack named here, then "other stacks".
  j.key("stack_groups").begin_array();
  for (reader::StackId id : d.top_stacks) {
    j.begin_object();
    j.field_uint("stack", st.stack(id));
    j.field("label", st.line(id));
    j.end_object();
  }
  j.end_array();
  const Moment& peak = d.moments[d.peak_moment];
  j.key("peak").begin_object();
  j.field_int("t", peak.t);
  j.field_int("entry", peak.entry);
  j.field_uint("allocated_bytes", d.history.peak_allocated);
  j.field_uint("reserved_bytes", d.history.peak_reserved);
  j.end_object();
  j.key("end").begin_object();
  j.field_uint("allocated_bytes", d.history.requested_now);
  j.field_uint("reserved_bytes", d.history.reserved_now);
  j.end_object();
  j.key("markers").begin_array();
  for (const Marker& mk : d.markers) {
    j.begin_object();
    j.field("kind", mk.kind);
    j.field_int("t", mk.t);
    j.field("label", mk.label);
    j.end_object();
  }
  j.end_array();
  j.key("moments").begin_array();
  for (const Moment& m : d.moments) write_moment(j, st, m);
  j.end_array();
  write_leaks(j, st, model, d.moments.back());
  write_ooms(j, st, d);
  write_layouts(j, d);
  j.end_object();
}

void write_header(JsonWriter& j, const Model& m, const std::string& version) {
  const reader::Snapshot& s = *m.snapshot;
  const bool mt = s.producer == reader::Producer::kMemtrace;
  j.key("header").begin_object();
  j.field("file", m.file);
  j.field("producer", mt ? "memtrace" : "pytorch");
  j.field("description", analysis::describe_producer(s));
  j.field("exe", s.memtrace.exe);
  if (mt) j.field_int("pid", s.memtrace.pid);
  else j.key("pid").null();
  j.field("rank", s.memtrace.rank);
  j.field("host", s.memtrace.host);
  j.field("reason", s.memtrace.reason);
  j.field_int("t0_us", m.t0_us);
  j.field("x_unit", m.timed ? "us" : "entry");
  j.field_int("first", m.first);
  j.field_int("last", m.last);
  j.field_bool("truncated", m.truncated);
  j.field_int("entries_dropped", mt ? s.memtrace.entries_dropped : 0);
  j.key("settings").begin_array();
  for (const auto& [k, v] : s.settings) {
    j.begin_array();
    j.string(k);
    j.string(v);
    j.end_array();
  }
  j.end_array();
  // A merged file: which owners came from which input (merge names PyTorch's entries "torch").
  j.key("parts").begin_array();
  if (!s.memtrace.merged_pytorch.empty()) {
    for (size_t o = 0; o < m.owners.size(); ++o) {
      uint64_t bytes = 0;
      for (const DeviceModel& d : m.devices) bytes += d.moments.back().by_owner[o];
      j.begin_object();
      j.field("owner", m.owners[o]);
      j.field("from", m.owners[o] == "torch" ? s.memtrace.merged_pytorch : s.memtrace.merged_memtrace);
      j.field("source", m.owners[o] == "torch" ? "pytorch" : "memtrace");
      j.field_uint("live_bytes", bytes);
      j.end_object();
    }
  }
  j.end_array();
  j.field("memtrace_version", version);
  j.end_object();
}

}  // namespace

std::string report_data_json(const Model& m, const std::string& version) {
  JsonWriter j;
  PageTrees st(*m.snapshot, *m.trees);
  j.begin_document();
  write_header(j, m, version);
  if (!m.ranges.empty()) {
    j.key("ranges").begin_array();
    for (const std::string& r : m.ranges) j.string(r);
    j.end_array();
  }
  j.key("owners").begin_array();
  for (const std::string& o : m.owners) j.string(o);
  j.end_array();
  j.key("devices").begin_array();
  for (const DeviceModel& d : m.devices) write_device(j, st, m, d);
  j.end_array();
  // Last: every stack the devices named is known only now.
  st.write(j);
  j.end_object();
  return j.text();
}

}  // namespace memtrace::report
