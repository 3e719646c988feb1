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

void print_groups(std::FILE* out, const std::vector<Group>& groups, size_t limit, bool show_owner, bool show_stack) {
  size_t n = limit == 0 ? groups.size() : std::min(limit, groups.size());
  for (size_t i = 0; i < n; ++i) {
    const Group& g = groups[i];
    std::fprintf(out, "  %10s %6" PRIu64 "x", human_bytes(g.bytes).c_str(), g.count);
    if (show_owner) std::fprintf(out, show_stack ? "  %-12s" : "  %s", g.owner.c_str());
    if (show_stack) std::fprintf(out, "  %s", g.stack.c_str());
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

}  // namespace memtrace::analysis
