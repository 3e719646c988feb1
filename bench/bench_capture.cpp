// Cost of taking a stack, warm:
//   unwind::capture(out, 32) called from 40 noinline frames deep (so 32 frames are really walked),
//   and beside it unwind::capture_libunwind (libunwind's unw_backtrace alone, what capture used
//   before it walked the stack itself), batches alternated, with the frames checked equal; then
//   capture from several call sites at the same depth (docs/stack-capture.md, "Repeated stacks"):
//     8 and 32 in turn (a loop's sites in the same order each time: the predicted walk),
//     32 in a shuffled order (found through the hints, joined past the frames they share),
//     128 in turn, more than the 64 a thread remembers (each joined and remembered anew),
//   each row with how its captures were answered (remembered whole, joined, walked in full)
//   StackTable::intern of a 32-frame stack the table already holds (the lock-free lookup path)
//   StackTable::intern of a new 32-frame stack (insert path), for comparison
//
//   bench_capture [BATCHES [PER_BATCH]]   (default 2000 batches of 100 calls)
//
// Each batch is timed with steady_clock and divided by its size; median and min over batches, ns.
// Not a test: figures depend on the machine.
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <utility>
#include <vector>

#include "unwind/stack_capture.hpp"
#include "unwind/stack_table.hpp"

namespace {

using Clock = std::chrono::steady_clock;

struct Stats {
  double median, min;
};

Stats stats(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.front()};
}

int g_batches = 2000;
int g_per_batch = 100;
volatile int g_sink = 0;
std::vector<double> g_capture_ns, g_libunwind_ns;
int g_depth_seen = 0, g_libunwind_depth = 0;
bool g_same_frames = true;

// Call-site shapes: which sites, in what order, and how their captures were answered.
struct Shape {
  const char* label;
  std::vector<int> order;
  std::vector<double> ns;
  memtrace::unwind::CaptureCounts how;
};
std::vector<Shape> g_shapes;

template <int Site>
__attribute__((noinline)) int capture_at(uintptr_t* buf) {
  int n = memtrace::unwind::capture(buf, 32);
  asm volatile("" : "+r"(n));  // not a tail call: this frame, different per site, stays
  return n + Site * 0;
}
using SiteFn = int (*)(uintptr_t*);
template <int... I>
constexpr std::array<SiteFn, sizeof...(I)> site_table(std::integer_sequence<int, I...>) {
  return {&capture_at<I>...};
}
constexpr auto kSites = site_table(std::make_integer_sequence<int, 128>{});

// Captures from the shape's sites in its order, timed per batch.
void measure_sites(Shape& shape) {
  uintptr_t buf[64];
  const std::vector<int>& order = shape.order;
  for (size_t w = 0; w < 1000; ++w) g_sink = g_sink + kSites[static_cast<size_t>(order[w % order.size()])](buf);
  const auto before = memtrace::unwind::capture_counts();
  size_t at = 0;
  for (int b = 0; b < g_batches; ++b) {
    auto t0 = Clock::now();
    int n = 0;
    for (int i = 0; i < g_per_batch; ++i, at = (at + 1) % order.size()) n += kSites[static_cast<size_t>(order[at])](buf);
    auto t1 = Clock::now();
    g_sink = g_sink + n;
    shape.ns.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / g_per_batch);
  }
  const auto after = memtrace::unwind::capture_counts();
  shape.how = {after.remembered - before.remembered, after.joined - before.joined, after.walked - before.walked};
}

std::vector<int> in_turn(int sites) {
  std::vector<int> v(static_cast<size_t>(sites));
  for (int i = 0; i < sites; ++i) v[static_cast<size_t>(i)] = i;
  return v;
}

// 32 sites, each 32 times, in an order no prediction follows (a fixed LCG shuffle).
std::vector<int> shuffled(int sites) {
  std::vector<int> v;
  for (int r = 0; r < 32; ++r)
    for (int i = 0; i < sites; ++i) v.push_back(i);
  uint64_t x = 88172645463325252ull;
  for (size_t i = v.size() - 1; i > 0; --i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    std::swap(v[i], v[static_cast<size_t>((x >> 33) % (i + 1))]);
  }
  return v;
}

__attribute__((noinline)) void measure_capture() {
  uintptr_t buf[64], lib[64];
  for (int w = 0; w < 1000; ++w) {  // warm both caches
    g_sink = g_sink + memtrace::unwind::capture(buf, 32);
    g_sink = g_sink + memtrace::unwind::capture_libunwind(lib, 32);
  }
  // Entry 0 is a pc inside each capture function and entry 1 a call site here; the rest are the same.
  int a = memtrace::unwind::capture(buf, 32), b = memtrace::unwind::capture_libunwind(lib, 32);
  g_same_frames = a == b && a > 2 && std::equal(buf + 2, buf + a, lib + 2);
  g_capture_ns.reserve(static_cast<size_t>(g_batches));
  for (int b = 0; b < g_batches; ++b) {
    auto t0 = Clock::now();
    int n = 0;
    for (int i = 0; i < g_per_batch; ++i) n += memtrace::unwind::capture(buf, 32);
    auto t1 = Clock::now();
    int m = 0;
    for (int i = 0; i < g_per_batch; ++i) m += memtrace::unwind::capture_libunwind(lib, 32);
    auto t2 = Clock::now();
    g_sink = g_sink + n + m;
    g_depth_seen = n / g_per_batch;
    g_libunwind_depth = m / g_per_batch;
    g_capture_ns.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / g_per_batch);
    g_libunwind_ns.push_back(std::chrono::duration<double, std::nano>(t2 - t1).count() / g_per_batch);
  }
  g_shapes.push_back({"capture, 8 call sites in turn", in_turn(8), {}, {}});
  g_shapes.push_back({"capture, 32 call sites in turn", in_turn(32), {}, {}});
  g_shapes.push_back({"capture, 32 call sites shuffled", shuffled(32), {}, {}});
  g_shapes.push_back({"capture, 128 call sites in turn", in_turn(128), {}, {}});
  for (Shape& shape : g_shapes) measure_sites(shape);
}

// Distinct frames, not inlined, not a tail call (the volatile add after the call).
__attribute__((noinline)) int recurse(int depth) {
  if (depth == 0) {
    measure_capture();
    return g_sink;
  }
  int r = recurse(depth - 1);
  g_sink = g_sink + 1;
  return r + 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) g_batches = std::max(1, std::atoi(argv[1]));
  if (argc > 2) g_per_batch = std::max(1, std::atoi(argv[2]));

  recurse(40);
  Stats cap = stats(g_capture_ns);
  Stats lib = stats(g_libunwind_ns);

  // intern of a known stack: a real 32-frame capture would do, but fixed addresses keep it exact.
  memtrace::unwind::StackTable table;
  std::vector<uintptr_t> stack(32);
  for (int i = 0; i < 32; ++i) stack[static_cast<size_t>(i)] = 0x7f1234560000 + static_cast<uintptr_t>(i) * 0x1234 + 5;
  // Some other stacks in the table so the index is not trivially small.
  std::vector<uintptr_t> other(32);
  for (uint32_t s = 0; s < 10000; ++s) {
    for (int i = 0; i < 32; ++i) other[static_cast<size_t>(i)] = 0x7f0000000000 + s * 0x10000 + static_cast<uintptr_t>(i) * 8;
    table.intern(other.data(), 32);
  }
  uint32_t id = table.intern(stack.data(), 32);
  std::vector<double> known;
  known.reserve(static_cast<size_t>(g_batches));
  for (int w = 0; w < 1000; ++w) g_sink = g_sink + static_cast<int>(table.intern(stack.data(), 32));
  bool same = true;
  for (int b = 0; b < g_batches; ++b) {
    auto t0 = Clock::now();
    uint32_t acc = 0;
    for (int i = 0; i < g_per_batch; ++i) acc |= table.intern(stack.data(), 32) ^ id;
    auto t1 = Clock::now();
    same = same && acc == 0;
    known.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / g_per_batch);
  }
  Stats kn = stats(known);

  // intern of new stacks (insert path).
  std::vector<double> fresh;
  uint32_t next = 20000;
  for (int b = 0; b < std::min(g_batches, 500); ++b) {
    std::vector<std::vector<uintptr_t>> stacks(static_cast<size_t>(g_per_batch), std::vector<uintptr_t>(32));
    for (auto& s : stacks) {
      for (int i = 0; i < 32; ++i) s[static_cast<size_t>(i)] = 0x7e0000000000 + uintptr_t{next} * 0x10000 + static_cast<uintptr_t>(i) * 8;
      ++next;
    }
    auto t0 = Clock::now();
    for (auto& s : stacks) g_sink = g_sink + static_cast<int>(table.intern(s.data(), 32));
    auto t1 = Clock::now();
    fresh.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / g_per_batch);
  }
  Stats fr = stats(fresh);

  std::printf("%d batches x %d calls; ns per call\n", g_batches, g_per_batch);
  std::printf("  %-48s median %7.1f   min %7.1f   (frames returned: %d)\n", "unwind::capture, depth 32, warm, one call site", cap.median,
              cap.min, g_depth_seen);
  std::printf("  %-48s median %7.1f   min %7.1f   (frames returned: %d; same frames: %s; capture/libunwind %.2fx)\n",
              "unwind::capture_libunwind (unw_backtrace), same", lib.median, lib.min, g_libunwind_depth,
              g_same_frames ? "yes" : "NO", cap.median / lib.median);
  for (const Shape& shape : g_shapes) {
    const Stats st = stats(shape.ns);
    std::printf("  %-48s median %7.1f   min %7.1f   (capture/libunwind %.2fx; answered: %llu remembered, %llu joined, %llu walked)\n",
                shape.label, st.median, st.min, st.median / lib.median,
                static_cast<unsigned long long>(shape.how.remembered), static_cast<unsigned long long>(shape.how.joined),
                static_cast<unsigned long long>(shape.how.walked));
  }
  std::printf("  %-48s median %7.1f   min %7.1f   (same id every time: %s; table %zu stacks)\n",
              "StackTable::intern, known 32-frame stack", kn.median, kn.min, same ? "yes" : "NO", table.size() - fresh.size() * static_cast<size_t>(g_per_batch));
  std::printf("  %-48s median %7.1f   min %7.1f   (%zu stacks inserted)\n", "StackTable::intern, new 32-frame stack",
              fr.median, fr.min, fresh.size() * static_cast<size_t>(g_per_batch));
  std::printf("  %-48s median %7.1f   min %7.1f\n", "capture + intern (known): sums", cap.median + kn.median,
              cap.min + kn.min);
  return 0;
}
