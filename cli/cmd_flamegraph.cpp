// memtrace flamegraph: folded stacks ("outer;...;inner bytes") of the allocations live at the end
// or at the peak, for flamegraph.pl, speedscope and inferno.
#include <cstdio>

#include "cli/analysis/command_line.hpp"
#include "cli/analysis/device_history.hpp"
#include "cli/analysis/folded.hpp"
#include "cli/analysis/human_size.hpp"
#include "cli/analysis/json_writer.hpp"
#include "cli/commands.hpp"
#include "format/atomic_file.hpp"

namespace memtrace::cli {

using namespace memtrace::analysis;

namespace {

const CommandSpec kSpec{
    "flamegraph",
    "usage: memtrace flamegraph [--at end|peak] [--device N] [--json] FILE [-o OUT.folded]\n"
    "\n"
    "Folded stacks, one line per distinct stack: frames outermost first, ';' between them, then the\n"
    "requested bytes live there, read by flamegraph.pl, speedscope and inferno:\n"
    "  flamegraph.pl --countname bytes --title 'live GPU memory' OUT.folded > out.svg\n"
    "\n"
    "  --at end    the allocations live at the end (default)\n"
    "  --at peak   the allocations live at each device's peak\n"
    "  --device N  only device N (default: all devices together)\n"
    "  --frames all  every frame, in full (default: the frames that tell stacks apart)\n"
    "  -o OUT      write there (default: stdout)\n"
    "  --json      with -o: report what was written as JSON on stdout\n"
    "  --lenient   read a file that breaks the format's invariants (each named on stderr)\n",
    1, 1, true, true, false, false};

}  // namespace

int cmd_flamegraph(int argc, char** argv) {
  auto cl = parse_command_line(argc, argv, kSpec);
  if (!cl) return kExitUsage;
  if (cl->help) return 0;
  if (cl->json && cl->output.empty()) {
    std::fprintf(stderr, "memtrace flamegraph: --json needs -o OUT (the folded stacks go there)\n\n%s", kSpec.help);
    return kExitUsage;
  }
  auto snap = load_for_command(cl->args[0], kSpec, cl->lenient, cl->device);
  if (!snap) return kExitBadInput;
  std::vector<LiveAlloc> allocs;
  for (int d : devices_to_report(*snap, cl->device)) {
    DeviceHistory h = analyze_device(*snap, d);
    const auto& v = cl->at == Moment::kPeak ? h.live_at_peak : h.live_at_end;
    allocs.insert(allocs.end(), v.begin(), v.end());
  }
  StackView view(*snap, cl->frames);
  auto lines = fold_allocs(*snap, allocs, &view);
  std::string text = folded_text(lines);
  if (cl->output.empty() || cl->output == "-") {
    std::fwrite(text.data(), 1, text.size(), stdout);
    return 0;
  }
  std::string error;
  if (!format::write_file_atomically(cl->output, text, &error)) {
    std::fprintf(stderr, "memtrace flamegraph: %s\n", error.c_str());
    return 1;
  }
  uint64_t bytes = 0;
  for (const FoldedLine& l : lines) bytes += l.bytes;
  if (cl->json) {
    JsonWriter j;
    j.begin_document();
    j.field("file", cl->args[0]);
    j.field("output", cl->output);
    j.field("at", cl->at == Moment::kPeak ? "peak" : "end");
    j.field_uint("stacks", lines.size());
    j.field_uint("total_bytes", bytes);
    j.end_object();
    std::printf("%s\n", j.text().c_str());
  } else {
    std::printf("wrote %s: %zu stacks, %s live at the %s\n", cl->output.c_str(), lines.size(),
                human_bytes(bytes).c_str(), cl->at == Moment::kPeak ? "peak" : "end");
  }
  return 0;
}

}  // namespace memtrace::cli
