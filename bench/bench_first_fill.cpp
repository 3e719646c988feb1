// Whether a fresh history ring costs more per event until it has filled once (page faults on its
// first pass), the case bench_hooks hides by warming up with exactly one ring's worth.
//
//   bench_first_fill [PAIRS]   a ring of 5 * PAIRS entries (default PAIRS 100,000: the default
//                              ring of 500,000), a warm-up of 1,000 pairs, then PAIRS pairs that
//                              fill the ring for the first time and PAIRS more that overwrite it;
//                              with the record in the state file (the default) and in private
//                              memory, and without memtrace, taking turns for 5 rounds; then the
//                              same with a pause after the warm-up, as a program's start-up gives
//                              memtrace's thread time to touch the ring's pages ahead of the events
//
// An alloc+free pair of 4 KiB on the simulated device, MEMTRACE_STACKS=none (stacks would hide the
// ring's share), is 5 history entries: segment_alloc, alloc, free_requested, free_completed,
// segment_free.
#include <cuda.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "child_run.hpp"

namespace {

constexpr long kPauseMs = 1000;

double timed_pairs(long pairs) {
  CUdeviceptr p = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (long i = 0; i < pairs; ++i) {
    if (cuMemAlloc(&p, 4096) != CUDA_SUCCESS || cuMemFree(p) != CUDA_SUCCESS) {
      std::fprintf(stderr, "bench_first_fill: allocation failed\n");
      std::exit(1);
    }
  }
  const auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::nano>(t1 - t0).count() / static_cast<double>(pairs);
}

long minor_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

int child(long pairs, long pause_ms) {
  CUdevice dev;
  CUcontext ctx;
  if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
      cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
    std::fprintf(stderr, "bench_first_fill: no device\n");
    return 1;
  }
  timed_pairs(1000);
  if (pause_ms > 0) usleep(static_cast<useconds_t>(pause_ms) * 1000);
  const long f0 = minor_faults();
  const double first = timed_pairs(pairs);
  const long f1 = minor_faults();
  const double again = timed_pairs(pairs);
  const long f2 = minor_faults();
  std::printf("%.2f %.2f %ld %ld\n", first, again, f1 - f0, f2 - f1);
  return 0;
}

struct Figures {
  double first = 1e30, again = 1e30;
  long faults_first = 0, faults_again = 0;  // of the best first pass's run
};

void run(const char* self, long pairs, long pause_ms, const std::vector<std::string>& env, Figures* f) {
  const std::string line =
      memtrace::bench::run_child(self, {std::to_string(pairs), std::to_string(pause_ms)}, env, "/tmp/memtrace-bench-");
  double a = 0, b = 0;
  long fa = 0, fb = 0;
  if (std::sscanf(line.c_str(), "%lf %lf %ld %ld", &a, &b, &fa, &fb) != 4) return;
  if (a < f->first) f->faults_first = fa, f->faults_again = fb;
  f->first = std::min(f->first, a);
  f->again = std::min(f->again, b);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 4 && std::strcmp(argv[1], "--child") == 0) return child(std::atol(argv[2]), std::atol(argv[3]));
  const long pairs = argc >= 2 ? std::atol(argv[1]) : 100000;
  const char* preload = std::getenv("MEMTRACE_BENCH_PRELOAD");
  const std::string ld = std::string("LD_PRELOAD=") + (preload ? preload : MEMTRACE_LIB_PATH);
  const std::vector<std::string> common = {"MEMTRACE_SUMMARY=0", "MEMTRACE_OUTPUT=/tmp/memtrace-bench-%p.pickle",
                                           "MEMTRACE_STACKS=none",
                                           "MEMTRACE_MAX_ENTRIES=" + std::to_string(5 * pairs)};
  auto with = [&](std::vector<std::string> v) {
    v.insert(v.end(), common.begin(), common.end());
    return v;
  };
  Figures base, state, priv, state_paused, priv_paused;
  for (int round = 0; round < 5; ++round) {
    run(argv[0], pairs, 0, {"LD_PRELOAD="}, &base);
    run(argv[0], pairs, 0, with({ld}), &state);
    run(argv[0], pairs, 0, with({ld, "MEMTRACE_STATE_DIR=off"}), &priv);
    run(argv[0], pairs, kPauseMs, with({ld}), &state_paused);
    run(argv[0], pairs, kPauseMs, with({ld, "MEMTRACE_STATE_DIR=off"}), &priv_paused);
  }
  if (base.first >= 1e30 || state.first >= 1e30 || priv.first >= 1e30 || state_paused.first >= 1e30 ||
      priv_paused.first >= 1e30) {
    std::fprintf(stderr, "bench_first_fill: a configuration failed\n");
    return 1;
  }
  std::printf("ring's first fill against its second pass (%ld pairs = %ld entries each, ring of %ld entries, "
              "MEMTRACE_STACKS=none, best of 5 rounds)\n", pairs, 5 * pairs, 5 * pairs);
  std::printf("  %-34s %8s %8s %25s %16s\n", "", "1st pass", "2nd pass", "1st - 2nd", "page faults");
  auto row = [&](const char* name, const Figures& f) {
    std::printf("  %-34s %8.1f %8.1f %+8.1f ns/pair (%+6.1f ns/event) %7ld / %-7ld\n", name, f.first, f.again,
                f.first - f.again, (f.first - f.again) / 5, f.faults_first, f.faults_again);
  };
  row("without memtrace", base);
  row("memtrace, state file (default)", state);
  row("memtrace, MEMTRACE_STATE_DIR=off", priv);
  std::printf("the same with a pause of %ld ms after the first 1,000 pairs (the time memtrace's thread has to touch "
              "the ring's pages ahead of the events)\n", kPauseMs);
  row("memtrace, state file (default)", state_paused);
  row("memtrace, MEMTRACE_STATE_DIR=off", priv_paused);
  return 0;
}
