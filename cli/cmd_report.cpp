// memtrace report: one self-contained HTML page that shows where the memory went (docs/report.md).
#include <cstdio>
#include <cstdlib>

#include "cli/analysis/command_line.hpp"
#include "cli/analysis/human_size.hpp"
#include "cli/analysis/json_writer.hpp"
#include "cli/commands.hpp"
#include "cli/paths.hpp"
#include "cli/report/report_data.hpp"
#include "cli/report/report_model.hpp"
#include "cli/report/report_page.hpp"
#include "format/atomic_file.hpp"
#include "format/report_name.hpp"

namespace memtrace::cli {

using namespace memtrace::analysis;

namespace {

const CommandSpec kSpec{
    "report",
    "usage: memtrace report [--device N] [-o OUT.html] [--json] FILE\n"
    "\n"
    "Writes one HTML page, for any browser, with everything inline (it loads nothing from the\n"
    "network): per device, memory over time stacked by owner with the peak and every\n"
    "out-of-memory marked; what was live at the peak or at any moment clicked, as a flame graph\n"
    "and the largest allocations; leaks; segments and fragmentation at the peak and at each\n"
    "out-of-memory; and the file's header. Pinned host memory is a section of its own.\n"
    "Reads memtrace's snapshots and PyTorch's; the history is aggregated here, so the page stays\n"
    "small and fast for millions of entries.\n"
    "\n"
    "  -o OUT.html   where to write it (default: FILE with .html for .pickle; - : stdout)\n"
    "  --device N    only device N (and no host memory section)\n"
    "  --json        report what was written as JSON on stdout\n"
    "  --lenient     read a file that breaks the format's invariants (each named on stderr)\n",
    1, 1, false, true};

std::string assets_dir() {
  if (const char* d = std::getenv("MEMTRACE_REPORT_ASSETS"); d && *d) return d;
  return install_prefix() + "/share/memtrace/report";
}

}  // namespace

int cmd_report(int argc, char** argv) {
  auto cl = parse_command_line(argc, argv, kSpec);
  if (!cl) return kExitUsage;
  if (cl->help) return 0;
  std::string error;
  // The assets first: a missing install is found before a large file is read.
  auto assets = report::load_page_assets(assets_dir(), &error);
  if (!assets) {
    std::fprintf(stderr, "memtrace report: %s\n", error.c_str());
    return kExitCannotRun;
  }
  auto snap = load_for_command(cl->args[0], kSpec, cl->lenient, cl->device);
  if (!snap) return kExitBadInput;
  const std::vector<int> devices = devices_to_report(*snap, cl->device);
  const bool host = !cl->device && has_host_memory(*snap);
  report::Model model = report::build_model(*snap, cl->args[0], devices, host);
  const std::string page = report::assemble_page(*assets, report::report_data_json(model, MEMTRACE_VERSION));
  const std::string out = !cl->output.empty()    ? cl->output
                          : cl->args[0] == "-" ? std::string("memtrace-report.html")
                                               : format::report_path_for(cl->args[0]);
  if (out == "-") {
    std::fwrite(page.data(), 1, page.size(), stdout);
    return 0;
  }
  if (!format::write_file_atomically(out, page, &error)) {
    std::fprintf(stderr, "memtrace report: %s\n", error.c_str());
    return 1;
  }
  if (cl->json) {
    JsonWriter j;
    j.begin_document();
    j.field("file", cl->args[0]);
    j.field("output", out);
    j.field_uint("written_bytes", page.size());
    j.field_uint("devices", model.devices.size());
    j.end_object();
    std::printf("%s\n", j.text().c_str());
  } else {
    std::printf("wrote %s (%s): open it in a browser\n", out.c_str(), human_bytes(page.size()).c_str());
  }
  return 0;
}

}  // namespace memtrace::cli
