#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <vector>

#include "unwind/stack_capture.hpp"

using memtrace::unwind::capture;

namespace {

uintptr_t g_chain[64];
int g_chain_n;

[[gnu::noipa]] int chain_c(int x) {
  g_chain_n = capture(g_chain, 64);
  return x + 1;
}
[[gnu::noipa]] int chain_b(int x) { return chain_c(x * 2) + 1; }
[[gnu::noipa]] int chain_a(int x) { return chain_b(x + 3) + 1; }

// Which of fns (function start addresses) holds pc: the nearest start at or below it,
// within a small distance (these functions are tiny).
int owner_index(uintptr_t pc, const std::vector<uintptr_t>& fns) {
  int best = -1;
  for (size_t i = 0; i < fns.size(); ++i)
    if (fns[i] < pc && (best < 0 || fns[i] > fns[static_cast<size_t>(best)])) best = static_cast<int>(i);
  if (best >= 0 && pc - fns[static_cast<size_t>(best)] > 512) return -1;
  return best;
}

[[gnu::noipa]] int recurse(int depth, uintptr_t* out, int max, int* n) {
  if (depth == 0) {
    *n = capture(out, max);
    return 0;
  }
  int r = recurse(depth - 1, out, max, n);
  asm volatile("" : "+r"(r));  // no turning the recursion into a loop
  return r + 1;
}

}  // namespace

TEST_CASE("capture: limits", "[capture]") {
  uintptr_t out[8] = {};
  CHECK(capture(nullptr, 8) == 0);
  CHECK(capture(out, 0) == 0);
  CHECK(capture(out, -3) == 0);
  CHECK(capture(out, 1) == 1);
  CHECK(out[0] != 0);
  CHECK(out[1] == 0);
}

TEST_CASE("capture: a known call chain appears in order", "[capture]") {
  chain_a(5);
  REQUIRE(g_chain_n >= 5);
  const std::vector<uintptr_t> fns = {
      reinterpret_cast<uintptr_t>(&capture), reinterpret_cast<uintptr_t>(&chain_c),
      reinterpret_cast<uintptr_t>(&chain_b), reinterpret_cast<uintptr_t>(&chain_a)};
  // Innermost first: capture itself (memtrace's own frame), then c, b, a.
  for (int i = 0; i < 4; ++i) CHECK(owner_index(g_chain[i], fns) == i);
}

TEST_CASE("capture: depth is bounded by max_depth", "[capture]") {
  std::vector<uintptr_t> out(1024, 0);
  int n = 0;
  recurse(100, out.data(), 10, &n);
  CHECK(n == 10);
  CHECK(out[10] == 0);
  const uintptr_t rec = reinterpret_cast<uintptr_t>(&recurse);
  for (int i = 1; i < 10; ++i) CHECK(owner_index(out[static_cast<size_t>(i)], {rec}) == 0);

  recurse(100, out.data(), 200, &n);
  CHECK(n > 100);
  CHECK(n < 200);
  int in_recurse = 0;
  for (int i = 0; i < n; ++i) in_recurse += owner_index(out[static_cast<size_t>(i)], {rec}) == 0;
  CHECK(in_recurse == 101);

  std::fill(out.begin(), out.end(), 0);
  recurse(400, out.data(), 300, &n);
  CHECK(n == 300);
  CHECK(out[300] == 0);
  CHECK(owner_index(out[0], {reinterpret_cast<uintptr_t>(&capture), rec}) == 0);
  for (int i = 1; i < n; ++i) REQUIRE(owner_index(out[static_cast<size_t>(i)], {rec}) == 0);
}
