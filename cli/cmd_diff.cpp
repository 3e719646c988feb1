// memtrace diff: growth and shrinkage between two snapshots, by owner and by stack (stacks matched
// by their frame text: ids are per file), plus each device's totals side by side.
#include <cinttypes>
#include <cstdio>
#include <set>

#include "cli/analysis/command_line.hpp"
#include "cli/analysis/device_history.hpp"
#include "cli/analysis/grouping.hpp"
#include "cli/analysis/human_size.hpp"
#include "cli/analysis/json_writer.hpp"
#include "cli/analysis/report.hpp"
#include "cli/analysis/snapshot_diff.hpp"
#include "cli/analysis/stack_text.hpp"
#include "cli/commands.hpp"
#include "format/stack_line.hpp"

namespace memtrace::cli {

using namespace memtrace::analysis;

namespace {

const CommandSpec kSpec{
    "diff",
    "usage: memtrace diff [--json] [--device N] [--at end|peak] [--top N] [--by owner|stack|range] A B\n"
    "\n"
    "What grew and what shrank from snapshot A to snapshot B: each device's totals, then the live\n"
    "allocations by owner and by stack (matched by frame text), largest change first. Unchanged\n"
    "groups are left out. Bytes are requested bytes. Pinned host memory (host_segments/host_traces)\n"
    "is compared in a section of its own when either file has it.\n"
    "\n"
    "  --json        one JSON document on stdout (every row unless --top is given)\n"
    "  --device N    only device N (default: all devices together; no host memory section)\n"
    "  --frames all  every frame of each stack, in full (default: the frames that tell stacks apart)\n"
    "  --at end      compare what is live at the end of each file (default)\n"
    "  --at peak     compare what was live at each device's peak\n"
    "  --top N       stack rows shown (text default 20; 0 = all)\n"
    "  --by owner    by owner only; --by stack: by stack only; --by range: by range stack, matched\n"
    "                by its names (default: by owner, then by stack)\n"
    "  --lenient     read a file that breaks the format's invariants (each named on stderr)\n",
    2, 2, true, false, false, true, {}, true};

struct Side {
  std::vector<DeviceHistory> devices;
  std::vector<LiveAlloc> allocs;
};

Side collect(const reader::Snapshot& s, const std::vector<int>& devices, Moment at) {
  Side side;
  for (int d : devices) {
    side.devices.push_back(analyze_device(s, d));
    const auto& v = at == Moment::kPeak ? side.devices.back().live_at_peak : side.devices.back().live_at_end;
    side.allocs.insert(side.allocs.end(), v.begin(), v.end());
  }
  return side;
}

void row_json(JsonWriter& j, const DiffRow& r, bool frames, bool range = false) {
  j.begin_object();
  if (range) {
    j.field("range", r.key);
    j.key("ranges").begin_array();
    for (reader::StrId name : r.frames_from->range_path(r.range_id)) j.string(r.frames_from->str(name));
    j.end_array();
  } else if (frames) {
    j.field("owner", r.owner);
    j.key("frames").begin_array();
    for (reader::FrameId f : r.frames_from->stacks[r.stack_id]) j.string(frame_text(*r.frames_from, f));
    j.end_array();
  } else {
    j.field("owner", r.key);
  }
  j.field_uint("a_bytes", r.bytes_a);
  j.field_uint("b_bytes", r.bytes_b);
  j.field_int("delta_bytes", r.delta());
  j.field_uint("a_count", r.count_a);
  j.field_uint("b_count", r.count_b);
  j.end_object();
}

void row_text(const DiffRow& r, bool stack, StackView* view = nullptr, size_t width = 0) {
  std::string counts = std::to_string(r.count_a) + "x -> " + std::to_string(r.count_b) + "x";
  std::printf("  %12s  %10s -> %-10s %-14s  ", human_delta(r.delta()).c_str(), human_bytes(r.bytes_a).c_str(),
              human_bytes(r.bytes_b).c_str(), counts.c_str());
  // "  <12>  <10> -> <10> <14>  <12>  ": what a row holds before its stack.
  constexpr size_t kLead = 2 + 12 + 2 + 10 + 4 + 10 + 1 + 14 + 2 + 12 + 2;
  if (stack) {
    std::string text = r.key;
    if (view) text = view->line(r.stack_id, width == 0 ? 0 : width > kLead + 20 ? width - kLead : 20);
    std::printf("%-12s  %s\n", r.owner.c_str(), text.c_str());
  }
  else std::printf("%s\n", r.key.c_str());
}

void totals_json(JsonWriter& j, const DeviceHistory& ha, const DeviceHistory& hb) {
  auto pair = [&](const char* key, uint64_t x, uint64_t y) {
    j.key(key).begin_array();
    j.uinteger(x);
    j.uinteger(y);
    j.end_array();
  };
  pair("reserved_bytes", ha.reserved_now, hb.reserved_now);
  pair("allocated_bytes", ha.requested_now, hb.requested_now);
  pair("peak_allocated_bytes", ha.peak_allocated, hb.peak_allocated);
  pair("peak_reserved_bytes", ha.peak_reserved, hb.peak_reserved);
}

void totals_text(const char* title, const DeviceHistory& ha, const DeviceHistory& hb) {
  auto line = [](const char* what, uint64_t x, uint64_t y) {
    std::printf("  %-15s %10s -> %-10s (%s)\n", what, human_bytes(x).c_str(), human_bytes(y).c_str(),
                human_delta(static_cast<int64_t>(y) - static_cast<int64_t>(x)).c_str());
  };
  std::printf("%s\n", title);
  line("reserved", ha.reserved_now, hb.reserved_now);
  line("allocated", ha.requested_now, hb.requested_now);
  line("peak reserved", ha.peak_reserved, hb.peak_reserved);
  line("peak allocated", ha.peak_allocated, hb.peak_allocated);
}

// The rows of one comparison (all devices together, or the pinned host memory): the groupings
// --by asks for (owners and stacks when it is not given).
struct Rows {
  bool by_owner = true, by_stack = true, by_range = false;
  std::vector<DiffRow> owners, stacks, ranges;
};

Rows diff_rows(const reader::Snapshot& a, const std::vector<LiveAlloc>& la, const reader::Snapshot& b,
               const std::vector<LiveAlloc>& lb, StackView* view_a, StackView* view_b, std::optional<GroupBy> by) {
  Rows r;
  r.by_owner = !by || *by == GroupBy::kOwner;
  r.by_stack = !by || *by == GroupBy::kStack;
  r.by_range = by == GroupBy::kRange;
  if (r.by_owner)
    r.owners = diff_groups(a, group_allocs(a, la, GroupBy::kOwner), b, group_allocs(b, lb, GroupBy::kOwner), true);
  // Text rows match stacks by the frames shown (docs/reports.md, "Readable stacks"); JSON (no
  // views) by the whole stack.
  if (r.by_stack)
    r.stacks = diff_groups(a, group_allocs(a, la, GroupBy::kStack, view_a), b,
                           group_allocs(b, lb, GroupBy::kStack, view_b), false);
  if (r.by_range)
    r.ranges = diff_groups(a, group_allocs(a, la, GroupBy::kRange), b, group_allocs(b, lb, GroupBy::kRange),
                           GroupBy::kRange);
  return r;
}

void rows_json(JsonWriter& j, const Rows& rows, size_t top) {
  if (rows.by_owner) {
    j.key("owners").begin_array();
    for (const DiffRow& r : rows.owners) row_json(j, r, false);
    j.end_array();
  }
  if (rows.by_stack) {
    size_t shown = top == 0 ? rows.stacks.size() : std::min(top, rows.stacks.size());
    j.key("stacks").begin_array();
    for (size_t i = 0; i < shown; ++i) row_json(j, rows.stacks[i], true);
    j.end_array();
  }
  if (rows.by_range) {
    size_t shown = top == 0 ? rows.ranges.size() : std::min(top, rows.ranges.size());
    j.key("ranges").begin_array();
    for (size_t i = 0; i < shown; ++i) row_json(j, rows.ranges[i], false, true);
    j.end_array();
  }
}

// "  ... N more rows (<delta> together)" when `shown` left some out.
void rest_text(const std::vector<DiffRow>& rows, size_t shown) {
  if (shown >= rows.size()) return;
  int64_t rest = 0;
  for (size_t i = shown; i < rows.size(); ++i) rest += rows[i].delta();
  std::printf("  ... %zu more rows (%s together)\n", rows.size() - shown, human_delta(rest).c_str());
}

void rows_text(const Rows& rows, const char* lead, size_t top, const reader::Snapshot* a, StackView& view_a,
               StackView& view_b) {
  if (rows.by_owner) {
    std::printf("%s, by owner:\n", lead);
    if (rows.owners.empty()) std::printf("  no change\n");
    for (const DiffRow& r : rows.owners) row_text(r, false);
  }
  if (rows.by_stack) {
    size_t shown = top == 0 ? rows.stacks.size() : std::min(top, rows.stacks.size());
    std::printf("%s, by stack:\n", lead);
    if (rows.stacks.empty()) std::printf("  no change\n");
    const size_t width = format::report_width(1);
    for (size_t i = 0; i < shown; ++i)
      row_text(rows.stacks[i], true, rows.stacks[i].frames_from == a ? &view_a : &view_b, width);
    rest_text(rows.stacks, shown);
  }
  if (rows.by_range) {
    size_t shown = top == 0 ? rows.ranges.size() : std::min(top, rows.ranges.size());
    std::printf("%s, by range:\n", lead);
    if (rows.ranges.empty()) std::printf("  no change\n");
    for (size_t i = 0; i < shown; ++i) row_text(rows.ranges[i], false);
    rest_text(rows.ranges, shown);
  }
}

}  // namespace

int cmd_diff(int argc, char** argv) {
  auto cl = parse_command_line(argc, argv, kSpec);
  if (!cl) return kExitUsage;
  if (cl->help) return 0;
  auto a = load_for_command(cl->args[0], kSpec, cl->lenient, cl->device);
  if (!a) return kExitBadInput;
  auto b = load_for_command(cl->args[1], kSpec, cl->lenient, cl->device);
  if (!b) return kExitBadInput;

  std::set<int> dev_set;
  for (int d : devices_to_report(*a, cl->device)) dev_set.insert(d);
  for (int d : devices_to_report(*b, cl->device)) dev_set.insert(d);
  std::vector<int> devices(dev_set.begin(), dev_set.end());
  Side sa = collect(*a, devices, cl->at), sb = collect(*b, devices, cl->at);
  StackView view_a(*a, cl->frames), view_b(*b, cl->frames);
  StackView* va = cl->json ? nullptr : &view_a;
  StackView* vb = cl->json ? nullptr : &view_b;
  Rows rows = diff_rows(*a, sa.allocs, *b, sb.allocs, va, vb, cl->by);
  // Pinned host memory, compared on its own (left out when --device picks one device).
  const bool host = !cl->device && (has_host_memory(*a) || has_host_memory(*b));
  DeviceHistory host_a, host_b;
  Rows host_rows;
  if (host) {
    host_a = analyze_host(*a);
    host_b = analyze_host(*b);
    host_rows = diff_rows(*a, cl->at == Moment::kPeak ? host_a.live_at_peak : host_a.live_at_end, *b,
                          cl->at == Moment::kPeak ? host_b.live_at_peak : host_b.live_at_end, va, vb, cl->by);
  }
  const char* at = cl->at == Moment::kPeak ? "peak" : "end";
  size_t top = cl->top.value_or(cl->json ? 0 : 20);

  if (cl->json) {
    JsonWriter j;
    j.begin_document();
    j.field("a", cl->args[0]);
    j.field("b", cl->args[1]);
    j.field("at", at);
    if (cl->by == GroupBy::kRange) {
      j.field("a_ranges_from", ranges_from_name(*a));
      j.field("b_ranges_from", ranges_from_name(*b));
    }
    j.key("devices").begin_array();
    for (size_t i = 0; i < devices.size(); ++i) {
      j.begin_object();
      j.field_int("device", devices[i]);
      totals_json(j, sa.devices[i], sb.devices[i]);
      j.end_object();
    }
    j.end_array();
    rows_json(j, rows, top);
    j.key("host_memory");
    if (host) {
      j.begin_object();
      totals_json(j, host_a, host_b);
      rows_json(j, host_rows, top);
      j.end_object();
    } else {
      j.null();
    }
    j.end_object();
    std::printf("%s\n", j.text().c_str());
    return 0;
  }

  std::printf("A: %s: %s\nB: %s: %s\n", cl->args[0].c_str(), describe_producer(*a).c_str(), cl->args[1].c_str(),
              describe_producer(*b).c_str());
  for (size_t i = 0; i < devices.size(); ++i)
    totals_text(("device " + std::to_string(devices[i])).c_str(), sa.devices[i], sb.devices[i]);
  const std::string lead = std::string("live at ") + at;
  rows_text(rows, lead.c_str(), top, &*a, view_a, view_b);
  if (host) {
    totals_text("pinned host memory", host_a, host_b);
    rows_text(host_rows, ("pinned host memory " + lead).c_str(), top, &*a, view_a, view_b);
  }
  return 0;
}

}  // namespace memtrace::cli
