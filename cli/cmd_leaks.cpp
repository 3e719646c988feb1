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
    "usage: memtrace leaks [--json] [--device N] [--top N] FILE\n"
    "\n"
    "Per device: what is still allocated at the end of the snapshot, by owner and by stack and owner,\n"
    "largest first. A block's owner is the category of the alloc event that made it ('unknown' when\n"
    "that event is not in the kept history). Bytes are requested bytes.\n"
    "\n"
    "  --json      one JSON document on stdout (every group unless --top is given)\n"
    "  --device N  only device N\n"
    "  --frames all  every frame of each stack, in full (default: the frames that tell stacks apart)\n"
    "  --top N     stack groups shown (text default 20; 0 = all)\n"
    "  --lenient   read a file that breaks the format's invariants (each named on stderr)\n",
    1, 1, false, false, false, true};

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
  if (cl->json) {
    j.begin_document();
    j.field("file", path);
    producer_json(j, s);
    j.key("devices").begin_array();
  } else {
    std::printf("%s: %s\n", path.c_str(), describe_producer(s).c_str());
  }
  StackView view(s, cl->frames);
  const size_t width = format::report_width(1);
  for (int d : devices_to_report(s, cl->device)) {
    DeviceHistory h = analyze_device(s, d);
    uint64_t bytes = 0;
    for (const LiveAlloc& a : h.live_at_end) bytes += a.bytes;
    auto owners = group_allocs(s, h.live_at_end, GroupBy::kOwner);
    auto stacks = group_allocs(s, h.live_at_end, GroupBy::kStackAndOwner, cl->json ? nullptr : &view);
    if (cl->json) {
      j.begin_object();
      j.field_int("device", d);
      j.field_uint("live_bytes", bytes);
      j.field_uint("allocations", h.live_at_end.size());
      j.key("owners");
      groups_json(j, s, owners, 0, false);
      j.key("stacks");
      groups_json(j, s, stacks, cl->top.value_or(0), true);
      j.end_object();
      continue;
    }
    std::printf("device %d: %s still allocated at the end in %s\n", d, human_bytes(bytes).c_str(),
                count_of(h.live_at_end.size(), "allocation").c_str());
    if (owners.empty()) continue;
    std::printf("  by owner:\n");
    print_groups(stdout, owners, 0, true, false);
    std::printf("  by stack:\n");
    print_groups(stdout, stacks, cl->top.value_or(20), true, true, &view, width);
  }
  if (cl->json) {
    j.end_array();
    j.end_object();
    std::printf("%s\n", j.text().c_str());
  }
  return 0;
}

}  // namespace memtrace::cli
