// memtrace summary: per device, current and peak reserved/allocated bytes, live allocations, the
// history's span and whether it is complete, bytes by owner, the largest live stacks and
// fragmentation.
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
    "summary",
    "usage: memtrace summary [--json] [--device N] [--by owner|stack|range] FILE\n"
    "\n"
    "Per device: reserved and allocated bytes now (from the segments) and at their peak (replayed\n"
    "from the history), live allocations, the history's span and whether it is truncated, bytes by\n"
    "owner, the ten largest live stacks and fragmentation (free bytes inside segments). Pinned host\n"
    "memory (host_segments/host_traces) follows as its own section when the file has it.\n"
    "Allocation bytes are requested bytes (what the program asked for, as the viewer draws them);\n"
    "'in blocks' adds the allocator's rounding.\n"
    "\n"
    "  --json      one JSON document on stdout\n"
    "  --device N  only device N (and no host memory section)\n"
    "  --frames all  every frame of each stack, in full (default: the frames that tell stacks apart)\n"
    "  --by owner  live bytes by owner only; --by stack: the largest live stacks only; --by range:\n"
    "              by range stack (NVTX ranges, record_function scopes; default: owner and stack)\n"
    "  --lenient   read a file that breaks the format's invariants (each named on stderr)\n",
    1, 1, false, false, false, false, {}, true};

constexpr size_t kTopStacks = 10;

std::string truncation(const reader::Snapshot& s, const DeviceHistory& h) {
  std::string why;
  if (s.producer == reader::Producer::kMemtrace && s.memtrace.entries_dropped > 0)
    why = std::to_string(s.memtrace.entries_dropped) + " oldest entries dropped";
  if (h.frees_without_alloc) {
    if (!why.empty()) why += "; ";
    why += count_of(h.frees_without_alloc, "free") + " without their alloc";
  }
  if (h.untraced_blocks) {
    if (!why.empty()) why += "; ";
    why += count_of(h.untraced_blocks, "live block") + " allocated before the first entry";
  }
  return why;
}

// One history's section: a device's, or the pinned host memory's (which has no OOMs to report).
// The title of the by-range rows: where the ranges came from, when not from 'ranges' keys.
std::string range_title(const reader::Snapshot& s, const char* what) {
  std::string origin = ranges_origin(s);
  return std::string("  by range (") + what + (origin.empty() ? "" : ", " + origin) + "):\n";
}

void print_history(const reader::Snapshot& s, const DeviceHistory& h, StackView& view, size_t width,
                   std::optional<GroupBy> by) {
  std::printf("  reserved       %s now, %s at peak, %s\n", human_bytes(h.reserved_now).c_str(),
              human_bytes(h.peak_reserved).c_str(), count_of(h.segment_count, "segment").c_str());
  std::printf("  allocated      %s now (%s in blocks), %s at peak", human_bytes(h.requested_now).c_str(),
              human_bytes(h.allocated_now).c_str(), human_bytes(h.peak_allocated).c_str());
  if (h.peak_index >= 0)
    std::printf(" (after entry %" PRId64 ", %s)\n", h.peak_index, human_time_us(h.peak_time_us).c_str());
  else
    std::printf(" (before the first entry)\n");
  std::printf("  live           %s\n", count_of(h.live_count, "allocation").c_str());
  std::string why = truncation(s, h);
  if (h.entries)
    std::printf("  history        %zu entries, %s to %s, %s\n", h.entries, human_time_us(h.first_time_us).c_str(),
                human_time_us(h.last_time_us).c_str(), why.empty() ? "complete" : ("truncated: " + why).c_str());
  else
    std::printf("  history        none%s\n", why.empty() ? "" : (" (truncated: " + why + ")").c_str());
  std::printf("  fragmentation  %s free inside segments, largest free block %s\n",
              human_bytes(h.free_in_segments).c_str(), human_bytes(h.largest_free_block).c_str());
  if (!by || *by == GroupBy::kOwner) {
    auto owners = group_allocs(s, h.live_at_end, GroupBy::kOwner);
    if (!owners.empty()) {
      std::printf("  by owner (live now):\n");
      print_groups(stdout, owners, 0, true, false);
    }
  }
  if (!by || *by == GroupBy::kStack) {
    auto stacks = group_allocs(s, h.live_at_end, GroupBy::kStack, &view);
    if (!stacks.empty()) {
      std::printf("  largest live stacks:\n");
      print_groups(stdout, stacks, kTopStacks, true, true, &view, width);
    }
  }
  if (by == GroupBy::kRange) {
    auto ranges = group_allocs(s, h.live_at_end, GroupBy::kRange);
    if (!ranges.empty()) {
      std::fputs(range_title(s, "live now").c_str(), stdout);
      print_range_groups(stdout, ranges, 0, width);
    }
  }
}

void print_text(const std::string& path, const reader::Snapshot& s, const std::vector<int>& devices, bool host,
                FrameMode frames, std::optional<GroupBy> by) {
  StackView view(s, frames);
  const size_t width = format::report_width(1);
  std::printf("%s: %s\n", path.c_str(), describe_producer(s).c_str());
  for (int d : devices) {
    std::printf("device %d\n", d);
    print_history(s, analyze_device(s, d), view, width, by);
    print_ooms(stdout, find_ooms(s, d), view, width);
  }
  if (host) {
    std::printf("pinned host memory (not device memory; PyTorch's viewer does not show it)\n");
    print_history(s, analyze_host(s), view, width, by);
  }
}

void history_json(JsonWriter& j, const reader::Snapshot& s, const DeviceHistory& h, std::optional<GroupBy> by) {
  j.field_uint("reserved_bytes", h.reserved_now);
  j.field_uint("peak_reserved_bytes", h.peak_reserved);
  j.field_uint("segments", h.segment_count);
  j.field_uint("allocated_bytes", h.requested_now);
  j.field_uint("allocated_block_bytes", h.allocated_now);
  j.field_uint("peak_allocated_bytes", h.peak_allocated);
  j.field_int("peak_entry", h.peak_index);
  j.field_int("peak_time_us", h.peak_time_us);
  j.field_uint("live_allocations", h.live_count);
  j.key("history").begin_object();
  j.field_uint("entries", h.entries);
  j.field_int("first_time_us", h.first_time_us);
  j.field_int("last_time_us", h.last_time_us);
  j.field_bool("truncated", !truncation(s, h).empty());
  j.field_int("entries_dropped", s.producer == reader::Producer::kMemtrace ? s.memtrace.entries_dropped : 0);
  j.field_uint("frees_without_alloc", h.frees_without_alloc);
  j.field_uint("blocks_without_alloc", h.untraced_blocks);
  j.end_object();
  j.key("fragmentation").begin_object();
  j.field_uint("free_bytes", h.free_in_segments);
  j.field_uint("largest_free_block_bytes", h.largest_free_block);
  j.end_object();
  if (!by || *by == GroupBy::kOwner) {
    j.key("owners");
    groups_json(j, s, group_allocs(s, h.live_at_end, GroupBy::kOwner), 0, false);
  }
  if (!by || *by == GroupBy::kStack) {
    j.key("top_stacks");
    groups_json(j, s, group_allocs(s, h.live_at_end, GroupBy::kStack), kTopStacks, true);
  }
  if (by == GroupBy::kRange) {
    j.key("ranges");
    range_groups_json(j, s, group_allocs(s, h.live_at_end, GroupBy::kRange), 0);
  }
}

void print_json(const std::string& path, const reader::Snapshot& s, const std::vector<int>& devices, bool host,
                std::optional<GroupBy> by) {
  JsonWriter j;
  j.begin_document();
  j.field("file", path);
  producer_json(j, s);
  if (by == GroupBy::kRange) j.field("ranges_from", ranges_from_name(s));
  j.key("devices").begin_array();
  for (int d : devices) {
    j.begin_object();
    j.field_int("device", d);
    history_json(j, s, analyze_device(s, d), by);
    j.key("out_of_memory");
    ooms_json(j, s, find_ooms(s, d));
    j.end_object();
  }
  j.end_array();
  // null when the file has no pinned host memory or --device chose one device.
  j.key("host_memory");
  if (host) {
    j.begin_object();
    history_json(j, s, analyze_host(s), by);
    j.end_object();
  } else {
    j.null();
  }
  j.end_object();
  std::printf("%s\n", j.text().c_str());
}

}  // namespace

int cmd_summary(int argc, char** argv) {
  auto cl = parse_command_line(argc, argv, kSpec);
  if (!cl) return kExitUsage;
  if (cl->help) return 0;
  auto snap = load_for_command(cl->args[0], kSpec, cl->lenient, cl->device);
  if (!snap) return kExitBadInput;
  std::vector<int> devices = devices_to_report(*snap, cl->device);
  const bool host = !cl->device && has_host_memory(*snap);
  if (cl->json) print_json(cl->args[0], *snap, devices, host, cl->by);
  else print_text(cl->args[0], *snap, devices, host, cl->frames, cl->by);
  return 0;
}

}  // namespace memtrace::cli
