// `memtrace summary` and `memtrace peak` on a large snapshot, against Python loading the same file:
//
//   bench_analyze [--entries N] [DIR]   (N default 1000000; DIR default $TMPDIR or /tmp; the
//                                        snapshot is removed afterwards unless MEMTRACE_BENCH_KEEP is set)
//
// The snapshot is what memtrace itself writes (output::build_snapshot): N (1,000,000) trace entries on
// 2 devices (alloc = segment_alloc + alloc, free = free_requested + free_completed + segment_free),
// 10,000 distinct stacks of 16 frames drawn from shared pools of files and functions, owners torch
// and nccl. The program's live set climbs to ~6,000 allocations, churns, and falls back to ~1,000,
// so the peak lies mid-history and the peak set is large.
// Each command runs as its own process (bin/memtrace, output to /dev/null), 3 times; wall time is
// the median (its CPU time, user + system, beside it: steadier on a shared machine), peak memory is
// the child's ru_maxrss from wait4 (the largest of the runs). In-process,
// load_snapshot and the replay of every device are timed apart. Python: the command line
// `python3 -c "import pickle; pickle.load(open(f,'rb'))"`, measured the same way, as Python runs it and
// with its garbage collector off (gc.disable(), which a loader of acyclic data would do). The load
// average is printed before and after: on a shared machine the figures move with it.
// Targets: at 1,000,000 entries each command under 2 s and peak memory under 4x the file size
// (issue 5); at 5,000,000 (--entries 5000000) summary's peak memory under 2x the file (issue 18),
// wall time not targeted there.
// Not a test: figures depend on the machine.
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "../output/tests/fake_source.hpp"
#include "cli/analysis/device_history.hpp"
#include "cli/reader/snapshot.hpp"
#include "format/atomic_file.hpp"
#include "output/snapshot_builder.hpp"

using namespace memtrace;
using Clock = std::chrono::steady_clock;

namespace {

size_t g_entries = 1000000;  // --entries
constexpr uint32_t kStacks = 10000;
constexpr int kDepth = 16;

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
double mib(double b) { return b / 1048576.0; }

StateCopy synthetic_state() {
  StateCopy st;
  std::mt19937_64 rng(11);
  std::vector<AllocRecord> open;
  uint64_t t = 1767225600000000, next = 0x7f0000000000;
  auto push = [&](const AllocRecord& r, Action a, uint64_t size) {
    TraceEntry e;
    e.time_us = ++t;
    e.addr = r.addr;
    e.size = size;
    e.stream = r.stream;
    e.stack_id = r.stack_id;
    e.device = r.device;
    e.action = a;
    st.trace.push_back(e);
  };
  st.trace.reserve(g_entries + 3);
  while (st.trace.size() < g_entries) {
    double phase = static_cast<double>(st.trace.size()) / g_entries;
    size_t target = phase < 0.3 ? 6000 : phase < 0.7 ? 4000 : 1000;  // climb, churn, fall
    bool alloc = open.size() < target ? rng() % 10 < 7 : rng() % 10 < 3;
    if (alloc || open.empty()) {
      AllocRecord r;
      r.addr = next;
      next += 0x200000;
      r.size = 512 * (1 + rng() % 4096);
      r.requested = r.size - rng() % 512;
      r.stack_id = 1 + static_cast<uint32_t>(rng() % kStacks);
      r.device = static_cast<int16_t>(rng() % 2);
      r.time_us = t;
      push(r, Action::SegmentAlloc, r.size);
      push(r, Action::Alloc, r.requested);
      open.push_back(r);
    } else {
      size_t k = rng() % open.size();
      AllocRecord r = open[k];
      open[k] = open.back();
      open.pop_back();
      push(r, Action::FreeRequested, r.requested);
      push(r, Action::FreeCompleted, r.requested);
      push(r, Action::SegmentFree, r.size);
    }
  }
  std::sort(open.begin(), open.end(), [](const AllocRecord& a, const AllocRecord& b) {
    return a.device != b.device ? a.device < b.device : a.addr < b.addr;
  });
  st.live = open;
  st.device_count = 2;
  st.ring_capacity = g_entries;
  st.total_entries = st.trace.size();
  st.time_us = t;
  return st;
}

void fill_source(output::test::FakeFrameSource& src) {
  for (uint32_t s = 1; s <= kStacks; ++s) {
    std::vector<output::test::FakeFrameSource::F> f;
    for (int d = 0; d < kDepth; ++d) {
      uint32_t outer = static_cast<uint32_t>(kDepth - 1 - d);  // 0 = outermost: shared callers
      uint32_t spread = outer < 4 ? 1 + outer * 3 : 6000;
      uint32_t fn = (s * 2654435761u + static_cast<uint32_t>(d) * 40503u) % spread + outer * 7;
      f.push_back({"/opt/conda/lib/python3.11/site-packages/torch/lib/libtorch_part" + std::to_string(fn % 40) + ".so",
                   "at::native::(anonymous namespace)::op_impl_" + std::to_string(fn) + "(at::Tensor const&, long)",
                   static_cast<int>(fn % 900) + 1});
    }
    src.set(s, f, s % 5 ? "torch" : "nccl");
  }
}

struct Run {
  double wall = 0;
  double cpu = 0;  // user + system
  long maxrss_kib = 0;
  int status = -1;
};

// Runs argv with stdout to /dev/null; wall time and the child's peak RSS.
Run run_child(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  Run r;
  std::fflush(stdout);
  auto t0 = Clock::now();
  pid_t pid = fork();
  if (pid == 0) {
    int fd = open("/dev/null", O_WRONLY);
    if (fd >= 0) dup2(fd, 1);
    execvp(argv[0], argv.data());
    _exit(127);
  }
  struct rusage ru {};
  int status = 0;
  wait4(pid, &status, 0, &ru);
  r.wall = since(t0);
  r.maxrss_kib = ru.ru_maxrss;
  r.cpu = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
          static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

Run median_of_3(const std::vector<std::string>& args) {
  std::vector<Run> runs;
  for (int i = 0; i < 3; ++i) runs.push_back(run_child(args));
  std::sort(runs.begin(), runs.end(), [](const Run& a, const Run& b) { return a.wall < b.wall; });
  Run m = runs[1];
  for (const Run& r : runs) {
    m.maxrss_kib = std::max(m.maxrss_kib, r.maxrss_kib);
    if (r.status != 0) m.status = r.status;
  }
  return m;
}

void report(const char* what, const Run& r, double file_bytes, bool target) {
  double ratio = static_cast<double>(r.maxrss_kib) * 1024.0 / file_bytes;
  const bool large = g_entries > 1000000;
  const bool met = large ? ratio < 2.0 : r.wall < 2.0 && ratio < 4.0;
  std::printf("  %-38s %6.2f s (cpu %5.2f s)   peak RSS %7.1f MiB = %4.2fx file%s%s\n", what, r.wall, r.cpu,
              r.maxrss_kib / 1024.0, ratio,
              target ? (met ? (large ? "   [under 2x: met]" : "   [targets met]") : "   [TARGET MISSED]") : "",
              r.status == 0 ? "" : "   (FAILED)");
}

}  // namespace

int main(int argc, char** argv) {
  const char* tmp = std::getenv("TMPDIR");
  std::string dir = tmp && *tmp ? tmp : "/tmp";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--entries" && i + 1 < argc) {
      char* end = nullptr;
      unsigned long long n = std::strtoull(argv[++i], &end, 10);
      if (end == argv[i] || *end != '\0' || n < 1000) {
        std::fprintf(stderr, "bench_analyze: --entries wants a count of at least 1000, not '%s'\n", argv[i]);
        return 2;
      }
      g_entries = static_cast<size_t>(n);
    } else {
      dir = a;
    }
  }
  std::string path = dir + "/memtrace_bench_analyze.pickle";

  // Built in a child: the parent stays small, so the children it forks start from a small RSS
  // (a child's ru_maxrss counts the memory it had before exec).
  std::fflush(stdout);
  pid_t gen = fork();
  if (gen == 0) {
    StateCopy st = synthetic_state();
    output::test::FakeFrameSource src;
    fill_source(src);
    output::BuildOptions o;
    o.meta.reason = "bench";
    format::PickleWriter w;
    output::build_snapshot(st, src, o, w);
    std::string err;
    if (!format::write_file_atomically(path, w.bytes(), &err)) {
      std::fprintf(stderr, "bench_analyze: %s\n", err.c_str());
      _exit(1);
    }
    std::printf("snapshot: %zu trace entries on 2 devices, %zu live allocations, %u stacks x %d frames, %.1f MiB\n",
                st.trace.size(), st.live.size(), kStacks, kDepth, mib(static_cast<double>(w.size())));
    std::fflush(stdout);
    _exit(0);
  }
  int gen_status = 0;
  waitpid(gen, &gen_status, 0);
  if (!WIFEXITED(gen_status) || WEXITSTATUS(gen_status) != 0) return 1;
  struct rusage self {};
  getrusage(RUSAGE_SELF, &self);
  std::printf("(this program's own RSS, inherited by each child until exec: %.1f MiB)\n", self.ru_maxrss / 1024.0);
  struct stat sb {};
  stat(path.c_str(), &sb);
  const double file_bytes = static_cast<double>(sb.st_size);

  auto load_average = [] {
    char buf[128] = {};
    if (FILE* f = std::fopen("/proc/loadavg", "r")) {
      if (std::fgets(buf, sizeof buf, f) == nullptr) buf[0] = '\0';
      std::fclose(f);
    }
    return std::string(buf);
  };
  std::printf("load average before: %s", load_average().c_str());
  std::printf("commands (median of 3 runs, stdout to /dev/null):\n");
  report("memtrace summary", median_of_3({MEMTRACE_CLI, "summary", path}), file_bytes, true);
  report("memtrace peak", median_of_3({MEMTRACE_CLI, "peak", path}), file_bytes, true);
  report("memtrace peak --json (every group)", median_of_3({MEMTRACE_CLI, "peak", "--json", path}), file_bytes, true);
  report("python3 pickle.load, gc on (default)",
         median_of_3({"python3", "-c", "import pickle,sys; pickle.load(open(sys.argv[1],'rb'))", path}), file_bytes,
         false);
  report("python3 pickle.load, gc.disable()",
         median_of_3({"python3", "-c", "import gc,pickle,sys; gc.disable(); pickle.load(open(sys.argv[1],'rb'))", path}),
         file_bytes, false);

  // Where the time goes, in a child so its RSS is its own.
  std::fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    auto t0 = Clock::now();
    reader::LoadResult r = reader::load_snapshot(path);
    double load = since(t0);
    if (!r.snapshot) {
      std::printf("  load failed: %s\n", r.error ? r.error->message.c_str() : "?");
      _exit(1);
    }
    struct rusage ru {};
    getrusage(RUSAGE_SELF, &ru);
    long after_load = ru.ru_maxrss;
    t0 = Clock::now();
    size_t at_peak = 0;
    for (int d = 0; d < analysis::device_count(*r.snapshot); ++d)
      at_peak += analysis::analyze_device(*r.snapshot, d).live_at_peak.size();
    double replay = since(t0);
    getrusage(RUSAGE_SELF, &ru);
    std::printf("in process: load_snapshot %.2f s (peak RSS %.1f MiB), replay of both devices %.2f s (peak RSS %.1f MiB, "
                "%zu allocations live at the peaks)\n",
                load, after_load / 1024.0, replay, ru.ru_maxrss / 1024.0, at_peak);
    std::fflush(stdout);
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  if (!std::getenv("MEMTRACE_BENCH_KEEP")) std::remove(path.c_str());
  else std::printf("kept %s\n", path.c_str());
  std::printf("load average after: %s", load_average().c_str());
  return 0;
}
