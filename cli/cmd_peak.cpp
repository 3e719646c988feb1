// memtrace peak: the allocations alive at the moment of peak allocated bytes, grouped by stack,
// largest first (replayed from the history plus the final state; see analysis/device_history.hpp).
#include <cinttypes>
#include <cstdio>

#include "cli/analysis/command_line.hpp"
#include "cli/analysis/device_history.hpp"
#include "cli/analysis/grouping.hpp"
#include "cli/analysis/human_size.hpp"
#include "cli/analysis/json_writer.hpp"
#include "cli/analysis/report.hpp"
#include "cli/commands.hpp"
#include "format/stack_line.hpp"

namespace memtrace::cli {

using namespace memtrace::analysis;

namespace {

const CommandSpec kSpec{
    "peak",
    "usage: memtrace peak [--json] [--device N] [--top N] [--by owner|stack|range] FILE\n"
    "\n"
    "Per device: the allocations alive when allocated bytes were highest, grouped by stack, largest\n"
    "first. Replayed from the history plus the final state: live blocks allocated before the first\n"
    "kept entry count as alive throughout. Bytes are requested bytes.\n"
    "\n"
    "  --json      one JSON document on stdout (every group unless --top is given)\n"
    "  --device N  only device N\n"
    "  --frames all  every frame of each stack, in full (default: the frames that tell stacks apart)\n"
    "  --top N     groups shown (text default 20; 0 = all)\n"
    "  --by stack  group by stack (default); --by owner: by owner; --by range: by range stack\n"
    "  --lenient   read a file that breaks the format's invariants (each named on stderr)\n",
    1, 1, false, false, false, true, {}, true};

}  // namespace

int cmd_peak(int argc, char** argv) {
  auto cl = parse_command_line(argc, argv, kSpec);
  if (!cl) return kExitUsage;
  if (cl->help) return 0;
  auto snap = load_for_command(cl->args[0], kSpec, cl->lenient, cl->device);
  if (!snap) return kExitBadInput;
  const reader::Snapshot& s = *snap;
  const std::string& path = cl->args[0];
  JsonWriter j;
  if (cl->json) {
    j.begin_document();
    j.field("file", path);
    producer_json(j, s);
    if (cl->by == GroupBy::kRange) j.field("ranges_from", ranges_from_name(s));
    j.key("devices").begin_array();
  } else {
    std::printf("%s: %s\n", path.c_str(), describe_producer(s).c_str());
  }
  StackView view(s, cl->frames);
  const size_t width = format::report_width(1);
  for (int d : devices_to_report(s, cl->device)) {
    DeviceHistory h = analyze_device(s, d);
    const GroupBy by = cl->by.value_or(GroupBy::kStack);
    auto groups = group_allocs(s, h.live_at_peak, by, cl->json ? nullptr : &view);
    if (cl->json) {
      j.begin_object();
      j.field_int("device", d);
      j.field_uint("peak_allocated_bytes", h.peak_allocated);
      j.field_int("peak_entry", h.peak_index);
      j.field_int("peak_time_us", h.peak_time_us);
      j.field_uint("entries", h.entries);
      j.field_uint("allocations", h.live_at_peak.size());
      if (by == GroupBy::kRange) {
        j.key("ranges");
        range_groups_json(j, s, groups, cl->top.value_or(0));
      } else {
        j.key(by == GroupBy::kOwner ? "owners" : "stacks");
        groups_json(j, s, groups, cl->top.value_or(0), by == GroupBy::kStack);
      }
      j.key("out_of_memory");
      ooms_json(j, s, find_ooms(s, d));
      j.end_object();
      continue;
    }
    std::printf("device %d: peak %s allocated in %s, ", d, human_bytes(h.peak_allocated).c_str(),
                count_of(h.live_at_peak.size(), "allocation").c_str());
    if (h.peak_index >= 0)
      std::printf("after entry %" PRId64 " of %zu (%s)\n", h.peak_index, h.entries, human_time_us(h.peak_time_us).c_str());
    else
      std::printf("before the first of %zu entries\n", h.entries);
    if (by == GroupBy::kRange) {
      std::string origin = ranges_origin(s);
      if (!origin.empty()) std::printf("  by range (%s):\n", origin.c_str());
      print_range_groups(stdout, groups, cl->top.value_or(20), width);
    } else {
      print_groups(stdout, groups, cl->top.value_or(20), true, by == GroupBy::kStack, &view, width);
    }
    print_ooms(stdout, find_ooms(s, d), view, width);
  }
  if (cl->json) {
    j.end_array();
    j.end_object();
    std::printf("%s\n", j.text().c_str());
  }
  return 0;
}

}  // namespace memtrace::cli
