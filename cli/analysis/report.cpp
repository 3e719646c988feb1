#include "cli/analysis/report.hpp"

#include <cinttypes>

#include "cli/analysis/human_size.hpp"
#include "cli/analysis/stack_text.hpp"

namespace memtrace::analysis {

std::string describe_producer(const reader::Snapshot& s) {
  if (s.producer != reader::Producer::kMemtrace) return "PyTorch snapshot";
  std::string d = "memtrace snapshot (pid " + std::to_string(s.memtrace.pid);
  if (!s.memtrace.rank.empty()) d += ", rank " + s.memtrace.rank;
  if (!s.memtrace.reason.empty()) d += ", reason " + s.memtrace.reason;
  return d + ")";
}

void producer_json(JsonWriter& j, const reader::Snapshot& s) {
  bool mt = s.producer == reader::Producer::kMemtrace;
  j.field("producer", mt ? "memtrace" : "pytorch");
  if (!mt) return;
  j.key("memtrace").begin_object();
  j.field_int("pid", s.memtrace.pid);
  j.field("rank", s.memtrace.rank);
  j.field("host", s.memtrace.host);
  j.field("exe", s.memtrace.exe);
  j.field("reason", s.memtrace.reason);
  j.field_int("entries_dropped", s.memtrace.entries_dropped);
  j.end_object();
}

void print_groups(std::FILE* out, const std::vector<Group>& groups, size_t limit, bool show_owner, bool show_stack,
                  StackView* view, size_t width) {
  // "  <10> <6>x  <owner 12>  ": what a row holds before its stack.
  const size_t lead = 2 + 10 + 1 + 6 + 1 + (show_owner ? 2 + 12 : 0) + 2;
  size_t n = limit == 0 ? groups.size() : std::min(limit, groups.size());
  for (size_t i = 0; i < n; ++i) {
    const Group& g = groups[i];
    std::fprintf(out, "  %10s %6" PRIu64 "x", human_bytes(g.bytes).c_str(), g.count);
    if (show_owner) std::fprintf(out, show_stack ? "  %-12s" : "  %s", g.owner.c_str());
    if (show_stack) {
      const size_t room = width == 0 ? 0 : width > lead + 20 ? width - lead : 20;
      std::fprintf(out, "  %s", view ? view->line(g.stack_id, room).c_str() : g.stack.c_str());
    }
    std::fputc('\n', out);
  }
  if (n < groups.size()) {
    uint64_t rest = 0, count = 0;
    for (size_t i = n; i < groups.size(); ++i) {
      rest += groups[i].bytes;
      count += groups[i].count;
    }
    std::fprintf(out, "  ... %zu more (%s in %" PRIu64 " allocations)\n", groups.size() - n, human_bytes(rest).c_str(),
                 count);
  }
}

void groups_json(JsonWriter& j, const reader::Snapshot& s, const std::vector<Group>& groups, size_t limit,
                 bool with_stack) {
  size_t n = limit == 0 ? groups.size() : std::min(limit, groups.size());
  j.begin_array();
  for (size_t i = 0; i < n; ++i) {
    const Group& g = groups[i];
    j.begin_object();
    j.field_uint("bytes", g.bytes);
    j.field_uint("count", g.count);
    j.field("owner", g.owner);
    if (with_stack) {
      j.key("frames").begin_array();
      for (reader::FrameId f : s.stacks[g.stack_id]) j.string(frame_text(s, f));
      j.end_array();
    }
    j.end_object();
  }
  j.end_array();
}

void print_range_groups(std::FILE* out, const std::vector<Group>& groups, size_t limit, size_t width) {
  // "  <10> <6>x  ": what a row holds before its range stack.
  constexpr size_t kLead = 2 + 10 + 1 + 6 + 1 + 2;
  const size_t room = width == 0 ? 0 : width > kLead + 20 ? width - kLead : 20;
  size_t n = limit == 0 ? groups.size() : std::min(limit, groups.size());
  for (size_t i = 0; i < n; ++i) {
    const Group& g = groups[i];
    std::string text = g.range;
    if (room && text.size() > room) {  // the innermost names tell rows apart: the start is cut
      size_t from = text.size() - (room - 3);
      while (from < text.size() && (static_cast<unsigned char>(text[from]) & 0xC0) == 0x80) ++from;  // UTF-8
      text = "..." + text.substr(from);
    }
    std::fprintf(out, "  %10s %6" PRIu64 "x  %s\n", human_bytes(g.bytes).c_str(), g.count, text.c_str());
  }
  if (n < groups.size()) {
    uint64_t rest = 0, count = 0;
    for (size_t i = n; i < groups.size(); ++i) {
      rest += groups[i].bytes;
      count += groups[i].count;
    }
    std::fprintf(out, "  ... %zu more (%s in %" PRIu64 " allocations)\n", groups.size() - n, human_bytes(rest).c_str(),
                 count);
  }
}

void range_groups_json(JsonWriter& j, const reader::Snapshot& s, const std::vector<Group>& groups, size_t limit) {
  size_t n = limit == 0 ? groups.size() : std::min(limit, groups.size());
  j.begin_array();
  for (size_t i = 0; i < n; ++i) {
    const Group& g = groups[i];
    j.begin_object();
    j.field_uint("bytes", g.bytes);
    j.field_uint("count", g.count);
    j.field("range", g.range);
    j.key("ranges").begin_array();
    for (reader::StrId name : s.range_path(g.range_id)) j.string(s.str(name));
    j.end_array();
    j.field("owner", g.owner);
    j.end_object();
  }
  j.end_array();
}

std::string ranges_origin(const reader::Snapshot& s) {
  switch (s.ranges_from) {
    case reader::RangesFrom::kKeys: return {};
    case reader::RangesFrom::kAnnotations: return "derived from external_annotations";
    case reader::RangesFrom::kNone: break;
  }
  return "the file has no ranges";
}

const char* ranges_from_name(const reader::Snapshot& s) {
  switch (s.ranges_from) {
    case reader::RangesFrom::kKeys: return "ranges";
    case reader::RangesFrom::kAnnotations: return "external_annotations";
    case reader::RangesFrom::kNone: break;
  }
  return "none";
}

std::string oom_verdict(const OomReport& r) {
  if (r.fits_without_fragmentation())
    return "would have fitted without fragmentation: " + human_bytes(r.free_in_segments) +
           " free inside segments, but the largest free block is " + human_bytes(r.largest_free);
  return "would not have fitted even without fragmentation: " + human_bytes(r.free_in_segments) +
         " free inside segments, the allocator needed more than the device had";
}

void print_ooms(std::FILE* out, const std::vector<OomReport>& ooms, StackView& view, size_t width) {
  for (const OomReport& r : ooms) {
    std::string when = "entry " + std::to_string(r.entry);
    if (r.time_us) when += ", " + human_time_us(r.time_us);
    std::fprintf(out, "  out of memory  at %s: asked for %s", when.c_str(), human_bytes(r.requested).c_str());
    if (r.device_free) std::fprintf(out, ", device free %s", human_bytes(*r.device_free).c_str());
    std::fputc('\n', out);
    std::fprintf(out, "                 then: %s reserved, %s allocated, largest free block %s\n",
                 human_bytes(r.reserved).c_str(), human_bytes(r.allocated).c_str(), human_bytes(r.largest_free).c_str());
    std::fprintf(out, "                 %s\n", oom_verdict(r).c_str());
    const size_t indent = 24;  // "                 stack: "
    std::fprintf(out, "                 stack: %s\n", view.line(r.stack, width > indent ? width - indent : 0).c_str());
  }
}

void ooms_json(JsonWriter& j, const reader::Snapshot& s, const std::vector<OomReport>& ooms) {
  j.begin_array();
  for (const OomReport& r : ooms) {
    j.begin_object();
    j.field_int("device", r.device);
    j.field_uint("entry", r.entry);
    j.field_int("time_us", r.time_us);
    j.field_uint("requested_bytes", r.requested);
    if (r.device_free)
      j.field_uint("device_free_bytes", *r.device_free);
    else
      j.key("device_free_bytes").null();
    j.field_uint("reserved_bytes", r.reserved);
    j.field_uint("allocated_bytes", r.allocated);
    j.field_uint("free_in_segments_bytes", r.free_in_segments);
    j.field_uint("largest_free_block_bytes", r.largest_free);
    j.field_bool("fits_without_fragmentation", r.fits_without_fragmentation());
    j.key("frames").begin_array();
    for (reader::FrameId f : s.stacks[r.stack]) j.string(frame_text(s, f));
    j.end_array();
    j.end_object();
  }
  j.end_array();
}

}  // namespace memtrace::analysis
