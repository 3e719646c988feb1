// memtrace ranks: one line per rank's snapshot in a directory (peak, owners at the peak), with the
// outliers marked (rule in analysis/rank_table.hpp).
#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/analysis/command_line.hpp"
#include "cli/analysis/device_history.hpp"
#include "cli/analysis/grouping.hpp"
#include "cli/analysis/human_size.hpp"
#include "cli/analysis/json_writer.hpp"
#include "cli/analysis/rank_table.hpp"
#include "cli/commands.hpp"

namespace memtrace::cli {

using namespace memtrace::analysis;

namespace {

const CommandSpec kSpec{
    "ranks",
    "usage: memtrace ranks [--json] [--device N] DIR\n"
    "\n"
    "One line per snapshot (*.pickle, *.pkl) in DIR: its rank (memtrace's recorded rank, else the\n"
    "digits after 'rank' in the file name, else a name that is only digits), peak allocated and peak\n"
    "reserved bytes (summed over the rank's devices) and the owners of the bytes live at the peak.\n"
    "A rank is an outlier when its peak allocated bytes differ from the median of all ranks by more\n"
    "than 20% of the median and by more than 3 scaled MADs (1.4826 x median absolute deviation);\n"
    "with fewer than 3 ranks nothing is an outlier. Files that do not load are reported and the exit\n"
    "status is 2.\n"
    "\n"
    "  --json      one JSON document on stdout\n"
    "  --device N  only device N of each snapshot\n"
    "  --lenient   read a file that breaks the format's invariants (each named on stderr)\n",
    1, 1};

struct Row {
  std::string file;
  std::string rank;
  uint64_t peak_allocated = 0;
  uint64_t peak_reserved = 0;
  std::vector<Group> owners;
};

std::string owners_text(const std::vector<Group>& owners) {
  std::string out;
  for (const Group& g : owners) {
    if (!out.empty()) out += ", ";
    out += g.owner + " " + human_bytes(g.bytes);
  }
  return out.empty() ? "-" : out;
}

}  // namespace

int cmd_ranks(int argc, char** argv) {
  auto cl = parse_command_line(argc, argv, kSpec);
  if (!cl) return kExitUsage;
  if (cl->help) return 0;
  namespace fs = std::filesystem;
  const std::string& dir = cl->args[0];
  std::error_code ec;
  std::vector<std::string> files;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::string name = it->path().filename().string();
    bool snap = name.size() > 7 && name.compare(name.size() - 7, 7, ".pickle") == 0;
    snap = snap || (name.size() > 4 && name.compare(name.size() - 4, 4, ".pkl") == 0);
    std::error_code ec2;
    if (snap && name[0] != '.' && it->is_regular_file(ec2)) files.push_back(name);
  }
  if (ec) {
    std::fprintf(stderr, "memtrace ranks: %s: %s\n", dir.c_str(), ec.message().c_str());
    return kExitBadInput;
  }
  if (files.empty()) {
    std::fprintf(stderr, "memtrace ranks: %s: no *.pickle or *.pkl snapshots\n", dir.c_str());
    return kExitBadInput;
  }
  std::sort(files.begin(), files.end());

  std::vector<Row> rows;
  bool failed = false;
  for (const std::string& name : files) {
    auto snap = load_for_command((fs::path(dir) / name).string(), kSpec, cl->lenient, cl->device);
    if (!snap) {
      failed = true;
      continue;
    }
    Row r;
    r.file = name;
    r.rank = snap->producer == reader::Producer::kMemtrace && !snap->memtrace.rank.empty() ? snap->memtrace.rank
                                                                                          : rank_from_filename(name);
    std::vector<LiveAlloc> at_peak;
    for (int d : devices_to_report(*snap, cl->device)) {
      DeviceHistory h = analyze_device(*snap, d);
      r.peak_allocated += h.peak_allocated;
      r.peak_reserved += h.peak_reserved;
      at_peak.insert(at_peak.end(), h.live_at_peak.begin(), h.live_at_peak.end());
    }
    r.owners = group_allocs(*snap, at_peak, GroupBy::kOwner);
    rows.push_back(std::move(r));
  }
  std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return rank_less(a.rank, b.rank); });
  std::vector<uint64_t> peaks;
  for (const Row& r : rows) peaks.push_back(r.peak_allocated);
  OutlierVerdict v = find_outliers(peaks);

  if (cl->json) {
    JsonWriter j;
    j.begin_document();
    j.field("dir", dir);
    j.field_uint("median_peak_allocated_bytes", static_cast<uint64_t>(std::llround(v.median)));
    j.field_uint("scaled_mad_bytes", static_cast<uint64_t>(std::llround(v.mad)));
    j.key("ranks").begin_array();
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      j.begin_object();
      j.field("rank", r.rank);
      j.field("file", r.file);
      j.field_uint("peak_allocated_bytes", r.peak_allocated);
      j.field_uint("peak_reserved_bytes", r.peak_reserved);
      j.field("outlier", v.flag[i] > 0 ? "high" : v.flag[i] < 0 ? "low" : "");
      j.key("owners_at_peak").begin_array();
      for (const Group& g : r.owners) {
        j.begin_object();
        j.field("owner", g.owner);
        j.field_uint("bytes", g.bytes);
        j.end_object();
      }
      j.end_array();
      j.end_object();
    }
    j.end_array();
    j.end_object();
    std::printf("%s\n", j.text().c_str());
    return failed ? kExitBadInput : 0;
  }
  size_t fw = 4;
  for (const Row& r : rows) fw = std::max(fw, r.file.size());
  std::printf("%-6s %-*s %14s %14s  %-14s %s\n", "rank", static_cast<int>(fw), "file", "peak alloc", "peak reserved",
              "outlier", "owners at peak");
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    std::string mark = "-";
    if (v.flag[i] != 0 && v.median > 0) {
      double pct = (static_cast<double>(r.peak_allocated) - v.median) * 100.0 / v.median;
      char buf[48];
      std::snprintf(buf, sizeof buf, "%s %+.0f%%", v.flag[i] > 0 ? "HIGH" : "LOW", pct);
      mark = buf;
    }
    std::printf("%-6s %-*s %14s %14s  %-14s %s\n", r.rank.empty() ? "?" : r.rank.c_str(), static_cast<int>(fw),
                r.file.c_str(), human_bytes(r.peak_allocated).c_str(), human_bytes(r.peak_reserved).c_str(),
                mark.c_str(), owners_text(r.owners).c_str());
  }
  std::printf("median peak allocated %s over %zu ranks; outlier: off the median by > 20%% and > 3 x %s (scaled MAD)\n",
              human_bytes(static_cast<uint64_t>(v.median)).c_str(), rows.size(),
              human_bytes(static_cast<uint64_t>(v.mad)).c_str());
  return failed ? kExitBadInput : 0;
}

}  // namespace memtrace::cli
