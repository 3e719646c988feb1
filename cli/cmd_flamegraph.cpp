// memtrace flamegraph: the allocations live at the end or at the peak, by stack, for flame graph
// tools: folded stacks ("outer;...;inner bytes") for flamegraph.pl and inferno, or speedscope's
// JSON file format (one profile per device).
#include <cstdio>

#include "cli/analysis/command_line.hpp"
#include "cli/analysis/device_history.hpp"
#include "cli/analysis/folded.hpp"
#include "cli/analysis/human_size.hpp"
#include "cli/analysis/json_writer.hpp"
#include "cli/analysis/speedscope.hpp"
#include "cli/commands.hpp"
#include "format/atomic_file.hpp"

namespace memtrace::cli {

using namespace memtrace::analysis;

namespace {

constexpr const char* kValueOptions[] = {"--format"};

const CommandSpec kSpec{
    "flamegraph",
    "usage: memtrace flamegraph [--format folded|speedscope] [--at end|peak] [--device N] [--frames all]\n"
    "                           [--by owner|stack|range] [--json] FILE [-o OUT]\n"
    "\n"
    "The requested bytes live at the end or at the peak, by stack, for flame graph tools.\n"
    "Folded stacks (the default), one line per distinct stack: frames outermost first, ';' between\n"
    "them, then the bytes live there, read by flamegraph.pl and inferno:\n"
    "  flamegraph.pl --countname bytes --title 'live GPU memory' OUT.folded > out.svg\n"
    "speedscope's JSON file format, one profile per device, weighed in bytes (open it at\n"
    "https://www.speedscope.app or with the `speedscope` command from npm):\n"
    "  memtrace flamegraph --format speedscope FILE -o OUT.speedscope.json\n"
    "\n"
    "  --format folded      folded stacks (default)\n"
    "  --format speedscope  speedscope's JSON file format\n"
    "  --at end    the allocations live at the end (default)\n"
    "  --at peak   the allocations live at each device's peak\n"
    "  --device N  only device N (default: all devices; folded: together, speedscope: a profile each)\n"
    "  --frames all  every frame, in full (default: the frames that tell stacks apart)\n"
    "  --by stack  the stacks alone (default); --by range: each stack under its range names, as\n"
    "              frames of their own ('(no range)' for none); --by owner: under its owner\n"
    "  -o OUT      write there (default: stdout)\n"
    "  --json      with -o: report what was written as JSON on stdout\n"
    "  --lenient   read a file that breaks the format's invariants (each named on stderr)\n",
    1, 1, true, true, false, false, kValueOptions, true};

struct Written {
  std::string text;
  size_t stacks = 0;
  uint64_t bytes = 0;
};

const char* moment_name(Moment at) { return at == Moment::kPeak ? "peak" : "end"; }

Written folded_output(const reader::Snapshot& snap, const CommandLine& cl) {
  std::vector<LiveAlloc> allocs;
  for (int d : devices_to_report(snap, cl.device)) {
    DeviceHistory h = analyze_device(snap, d);
    const auto& v = cl.at == Moment::kPeak ? h.live_at_peak : h.live_at_end;
    allocs.insert(allocs.end(), v.begin(), v.end());
  }
  StackView view(snap, cl.frames);
  auto lines = fold_allocs(snap, allocs, &view, cl.by.value_or(GroupBy::kStack));
  Written w{folded_text(lines), lines.size(), 0};
  for (const FoldedLine& l : lines) w.bytes += l.bytes;
  return w;
}

Written speedscope_output(const reader::Snapshot& snap, const CommandLine& cl) {
  std::vector<SpeedscopeProfile> profiles;
  for (int d : devices_to_report(snap, cl.device)) {
    DeviceHistory h = analyze_device(snap, d);
    std::string name = "device " + std::to_string(d) + ": requested bytes live at the " + moment_name(cl.at);
    profiles.push_back({std::move(name), cl.at == Moment::kPeak ? h.live_at_peak : h.live_at_end});
  }
  StackView view(snap, cl.frames);
  const std::string& file = cl.args[0];
  SpeedscopeFile f =
      speedscope_file(snap, profiles, &view, file == "-" ? "standard input" : file, cl.by.value_or(GroupBy::kStack));
  return {f.json + "\n", f.samples, f.bytes};
}

}  // namespace

int cmd_flamegraph(int argc, char** argv) {
  auto cl = parse_command_line(argc, argv, kSpec);
  if (!cl) return kExitUsage;
  if (cl->help) return 0;
  bool speedscope = false;
  for (const std::string& f : cl->values_of("--format")) {
    if (f != "folded" && f != "speedscope") {
      print_usage_error(kSpec, "--format takes 'folded' or 'speedscope'");
      return kExitUsage;
    }
    speedscope = f == "speedscope";
  }
  if (cl->json && cl->output.empty()) {
    print_usage_error(kSpec, "--json needs -o OUT (the flame graph goes there)");
    return kExitUsage;
  }
  auto snap = load_for_command(cl->args[0], kSpec, cl->lenient, cl->device);
  if (!snap) return kExitBadInput;
  Written w = speedscope ? speedscope_output(*snap, *cl) : folded_output(*snap, *cl);
  if (cl->output.empty() || cl->output == "-") {
    std::fwrite(w.text.data(), 1, w.text.size(), stdout);
    return 0;
  }
  std::string error;
  if (!format::write_file_atomically(cl->output, w.text, &error)) {
    std::fprintf(stderr, "memtrace flamegraph: %s\n", error.c_str());
    return 1;
  }
  if (cl->json) {
    JsonWriter j;
    j.begin_document();
    j.field("file", cl->args[0]);
    j.field("output", cl->output);
    j.field("format", speedscope ? "speedscope" : "folded");
    j.field("at", moment_name(cl->at));
    if (cl->by) j.field("by", *cl->by == GroupBy::kRange ? "range" : *cl->by == GroupBy::kOwner ? "owner" : "stack");
    j.field_uint("stacks", w.stacks);
    j.field_uint("total_bytes", w.bytes);
    j.end_object();
    std::printf("%s\n", j.text().c_str());
  } else {
    std::printf("wrote %s: %zu stacks, %s live at the %s\n", cl->output.c_str(), w.stacks, human_bytes(w.bytes).c_str(),
                moment_name(cl->at));
  }
  return 0;
}

}  // namespace memtrace::cli
