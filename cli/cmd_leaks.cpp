// memtrace leaks: what is still allocated at the end (the snapshot's live blocks), by owner and by
// stack and owner.
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
    "leaks",
    "usage: memtrace leaks [--json] [--device N] [--top N] [--by owner|stack|range] FILE\n"
    "\n"
    "Per device: what is still allocated at the end of the snapshot, by owner and by stack and owner,\n"
    "largest first. A block's owner is the category of the alloc event that made it ('unknown' when\n"
    "that event is not in the kept history). Bytes are requested bytes. Pinned host memory\n"
    "(host_segments/host_traces) follows as its own section when the file has it.\n"
    "\n"
    "  --json      one JSON document on stdout (every group unless --top is given)\n"
    "  --device N  only device N (and no host memory section)\n"
    "  --frames all  every frame of each stack, in full (default: the frames that tell stacks apart)\n"
    "  --top N     stack groups shown (text default 20; 0 = all)\n"
    "  --by owner  by owner only; --by stack: by stack and owner only; --by range: by range stack\n"
    "              (default: by owner, then by stack and owner)\n"
    "  --lenient   read a file that breaks the format's invariants (each named on stderr)\n",
    1, 1, false, false, false, true, {}, true};

// One history's leaks: text, or its JSON members (the caller opens the object).
void report_leaks(const reader::Snapshot& s, const DeviceHistory& h, const CommandLine& cl, const char* title,
                  StackView& view, JsonWriter* j) {
  uint64_t bytes = 0;
  for (const LiveAlloc& a : h.live_at_end) bytes += a.bytes;
  const bool by_owner = !cl.by || *cl.by == GroupBy::kOwner;
  const bool by_stack = !cl.by || *cl.by == GroupBy::kStack;
  const bool by_range = cl.by == GroupBy::kRange;
  std::vector<Group> owners, stacks, ranges;
  if (by_owner) owners = group_allocs(s, h.live_at_end, GroupBy::kOwner);
  if (by_stack) stacks = group_allocs(s, h.live_at_end, GroupBy::kStackAndOwner, j ? nullptr : &view);
  if (by_range) ranges = group_allocs(s, h.live_at_end, GroupBy::kRange);
  if (j) {
    j->field_uint("live_bytes", bytes);
    j->field_uint("allocations", h.live_at_end.size());
    if (by_owner) {
      j->key("owners");
      groups_json(*j, s, owners, 0, false);
    }
    if (by_stack) {
      j->key("stacks");
      groups_json(*j, s, stacks, cl.top.value_or(0), true);
    }
    if (by_range) {
      j->key("ranges");
      range_groups_json(*j, s, ranges, cl.top.value_or(0));
    }
    return;
  }
  std::printf("%s: %s still allocated at the end in %s\n", title, human_bytes(bytes).c_str(),
              count_of(h.live_at_end.size(), "allocation").c_str());
  if (h.live_at_end.empty()) return;
  if (by_owner) {
    std::printf("  by owner:\n");
    print_groups(stdout, owners, 0, true, false);
  }
  if (by_stack) {
    std::printf("  by stack:\n");
    print_groups(stdout, stacks, cl.top.value_or(20), true, true, &view, format::report_width(1));
  }
  if (by_range) {
    std::string origin = ranges_origin(s);
    std::printf("  by range%s:\n", origin.empty() ? "" : (" (" + origin + ")").c_str());
    print_range_groups(stdout, ranges, cl.top.value_or(20), format::report_width(1));
  }
}

}  // namespace

int cmd_leaks(int argc, char** argv) {
  auto cl = parse_command_line(argc, argv, kSpec);
  if (!cl) return kExitUsage;
  if (cl->help) return 0;
  auto snap = load_for_command(cl->args[0], kSpec, cl->lenient, cl->device);
  if (!snap) return kExitBadInput;
  const reader::Snapshot& s = *snap;
  const std::string& path = cl->args[0];
  JsonWriter j;
  JsonWriter* json = cl->json ? &j : nullptr;
  if (json) {
    j.begin_document();
    j.field("file", path);
    producer_json(j, s);
    if (cl->by == GroupBy::kRange) j.field("ranges_from", ranges_from_name(s));
    j.key("devices").begin_array();
  } else {
    std::printf("%s: %s\n", path.c_str(), describe_producer(s).c_str());
  }
  StackView view(s, cl->frames);
  for (int d : devices_to_report(s, cl->device)) {
    if (json) {
      j.begin_object();
      j.field_int("device", d);
    }
    const std::string title = "device " + std::to_string(d);
    report_leaks(s, analyze_device(s, d), *cl, title.c_str(), view, json);
    if (json) j.end_object();
  }
  if (json) j.end_array();
  // Pinned host memory is its own section, left out when --device picks one device.
  const bool host = !cl->device && has_host_memory(s);
  if (json) {
    j.key("host_memory");
    if (host) {
      j.begin_object();
      report_leaks(s, analyze_host(s), *cl, "", view, json);
      j.end_object();
    } else {
      j.null();
    }
    j.end_object();
    std::printf("%s\n", j.text().c_str());
  } else if (host) {
    report_leaks(s, analyze_host(s), *cl, "pinned host memory", view, nullptr);
  }
  return 0;
}

}  // namespace memtrace::cli
