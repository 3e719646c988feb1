// memtrace merge: PyTorch's snapshot plus what memtrace saw outside PyTorch's allocator, in one file
// the viewer opens (the rules are in analysis/merge.hpp).
#include <cinttypes>
#include <cstdio>

#include "cli/analysis/command_line.hpp"
#include "cli/analysis/human_size.hpp"
#include "cli/analysis/json_writer.hpp"
#include "cli/analysis/merge.hpp"
#include "cli/commands.hpp"
#include "format/atomic_file.hpp"
#include "format/pickle_writer.hpp"

namespace memtrace::cli {

using namespace memtrace::analysis;

namespace {

const CommandSpec kSpec{
    "merge",
    "usage: memtrace merge [--json] [--device N] PYTORCH_SNAPSHOT MEMTRACE_SNAPSHOT -o OUT\n"
    "\n"
    "Writes OUT: PyTorch's segments with its own blocks and stacks, plus every segment memtrace saw\n"
    "outside PyTorch's address ranges (NCCL buffers, cuBLAS workspaces, other libraries) with its owner\n"
    "as category. Traces are merged by time_us (both files stamp Unix microseconds; no offset is\n"
    "applied). memtrace events inside PyTorch's ranges are PyTorch's own cudaMalloc seen at the\n"
    "driver and are dropped as duplicates. Device N of one file is taken to be device N of the other.\n"
    "\n"
    "  -o OUT      the merged snapshot (required)\n"
    "  --json      report what was merged as one JSON document on stdout\n"
    "  --device N  merge only device N\n"
    "  --lenient   read a file that breaks the format's invariants (each named on stderr)\n",
    2, 2, false, true, true, false};

}  // namespace

int cmd_merge(int argc, char** argv) {
  auto cl = parse_command_line(argc, argv, kSpec);
  if (!cl) return kExitUsage;
  if (cl->help) return 0;
  auto pt = load_for_command(cl->args[0], kSpec, cl->lenient, cl->device);
  if (!pt) return kExitBadInput;
  auto mt = load_for_command(cl->args[1], kSpec, cl->lenient, cl->device);
  if (!mt) return kExitBadInput;
  if (pt->producer == reader::Producer::kMemtrace)
    std::fprintf(stderr, "memtrace merge: warning: %s was written by memtrace, not PyTorch\n", cl->args[0].c_str());

  format::PickleWriter w;
  MergeStats st = merge_snapshots(*pt, *mt, MergeOptions{cl->device, cl->args[0], cl->args[1]}, w);
  std::string error;
  if (!format::write_file_atomically(cl->output, w.bytes(), &error)) {
    std::fprintf(stderr, "memtrace merge: %s\n", error.c_str());
    return 1;
  }
  if (cl->json) {
    JsonWriter j;
    j.begin_document();
    j.field("output", cl->output);
    j.field_uint("written_bytes", w.size());
    j.field_uint("devices", st.devices);
    j.field_uint("pytorch_segments", st.pytorch_segments);
    j.field_uint("pytorch_entries", st.pytorch_entries);
    j.field_uint("pytorch_entries_dropped", st.pytorch_entries_dropped);
    j.field_uint("memtrace_segments_kept", st.memtrace_segments_kept);
    j.field_uint("memtrace_bytes_kept", st.memtrace_bytes_kept);
    j.field_uint("memtrace_segments_dropped", st.memtrace_segments_dropped);
    j.field_uint("memtrace_entries_kept", st.memtrace_entries_kept);
    j.field_uint("memtrace_entries_dropped", st.memtrace_entries_dropped);
    j.end_object();
    std::printf("%s\n", j.text().c_str());
    return 0;
  }
  std::printf("wrote %s (%s)\n", cl->output.c_str(), human_bytes(w.size()).c_str());
  std::printf("  from PyTorch:  %s, %zu trace entries\n", count_of(st.pytorch_segments, "segment").c_str(),
              st.pytorch_entries);
  std::printf("  from memtrace: %s outside PyTorch (%s), %zu trace entries\n",
              count_of(st.memtrace_segments_kept, "segment").c_str(), human_bytes(st.memtrace_bytes_kept).c_str(),
              st.memtrace_entries_kept);
  std::printf("  dropped:       %s and %zu trace entries of memtrace's inside PyTorch's ranges (duplicates) or markers",
              count_of(st.memtrace_segments_dropped, "segment").c_str(), st.memtrace_entries_dropped);
  if (st.pytorch_entries_dropped) std::printf("; %zu PyTorch entries of unknown actions", st.pytorch_entries_dropped);
  std::printf("\n");
  return 0;
}

}  // namespace memtrace::cli
