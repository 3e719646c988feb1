#include <signal.h>

#include <algorithm>
#include <array>
#include <catch2/catch.hpp>
#include <cstdint>
#include <thread>
#include <utility>
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

// ---- capture() against libunwind's own answer, the same stacks ----

namespace {

using memtrace::unwind::capture_libunwind;

struct Both {
  std::vector<uintptr_t> ours = std::vector<uintptr_t>(300), theirs = std::vector<uintptr_t>(300);
  std::vector<uintptr_t> walked = std::vector<uintptr_t>(300);
  int n_ours = -1, n_theirs = -1;
  int n_walked = -2;  // the walk alone: -1 when it declined
};

// Entry 0 of each lies in its own capture function and entry 1 at one of two call sites here;
// from entry 2 on the stacks are the same frames, so they must match exactly.
[[gnu::noipa]] void capture_both(Both& b, int max) {
  b.n_ours = capture(b.ours.data(), max);
  b.n_theirs = capture_libunwind(b.theirs.data(), max);
  b.n_walked = memtrace::unwind::capture_walk_only(b.walked.data(), max);
}

// expect_walk: the walk itself must have answered (not libunwind through the fallback).
void check_same(const Both& b, bool expect_walk = true) {
  if (expect_walk) {
    REQUIRE(b.n_walked == b.n_theirs);
    for (int i = 2; i < b.n_walked; ++i) REQUIRE(b.walked[static_cast<size_t>(i)] == b.theirs[static_cast<size_t>(i)]);
  } else {
    CHECK(b.n_walked == -1);
  }
  REQUIRE(b.n_ours == b.n_theirs);
  REQUIRE(b.n_ours >= 3);
  const uintptr_t here = reinterpret_cast<uintptr_t>(&capture_both);
  CHECK(owner_index(b.ours[1], {here}) == 0);
  CHECK(owner_index(b.theirs[1], {here}) == 0);
  for (int i = 2; i < b.n_ours; ++i) {
    INFO("frame " << i << " of " << b.n_ours);
    REQUIRE(b.ours[static_cast<size_t>(i)] == b.theirs[static_cast<size_t>(i)]);
  }
}

[[gnu::noipa]] int recurse_both(int depth, Both& b, int max) {
  if (depth == 0) {
    capture_both(b, max);
    return 0;
  }
  int r = recurse_both(depth - 1, b, max);
  asm volatile("" : "+r"(r));
  return r + 1;
}

// A frame whose size is known only at run time: its CFA is kept in rbp.
[[gnu::noipa]] int variable_frame(int n, Both& b) {
  volatile char* buf = static_cast<volatile char*>(__builtin_alloca(static_cast<size_t>(n)));
  buf[0] = 1;
  capture_both(b, 300);
  return buf[0] + n;
}

Both* g_qsort_both;
int compare_and_capture(const void* x, const void* y) {
  if (g_qsort_both->n_ours < 0) capture_both(*g_qsort_both, 300);
  return *static_cast<const int*>(x) - *static_cast<const int*>(y);
}

Both* g_signal_both;
void capture_in_handler(int) { capture_both(*g_signal_both, 300); }

}  // namespace

TEST_CASE("capture: the walk gives libunwind's frames, to the end of the stack", "[capture]") {
  for (int depth : {0, 1, 5, 40, 120}) {
    Both b;
    recurse_both(depth, b, 300);
    INFO("depth " << depth);
    check_same(b);
    CHECK(b.n_ours < 300);  // the whole stack, outermost frame included
    // Again: now every frame's rule comes from the thread's table.
    Both again;
    recurse_both(depth, again, 300);
    check_same(again);
  }
}

TEST_CASE("capture: the walk stops at max_depth where libunwind does", "[capture]") {
  for (int max : {1, 2, 3, 7, 32}) {
    Both b;
    recurse_both(60, b, max);
    CHECK(b.n_ours == max);
    CHECK(b.n_theirs == max);
    for (int i = 2; i < max; ++i) CHECK(b.ours[static_cast<size_t>(i)] == b.theirs[static_cast<size_t>(i)]);
  }
}

TEST_CASE("capture: a frame addressed from rbp (alloca)", "[capture]") {
  for (int n : {16, 4000, 100000}) {
    Both b;
    variable_frame(n, b);
    check_same(b);
  }
}

TEST_CASE("capture: through libc's frames (qsort calling back)", "[capture]") {
  std::vector<int> v(64);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int>((i * 37) % 64);
  Both b;
  g_qsort_both = &b;
  qsort(v.data(), v.size(), sizeof(int), compare_and_capture);
  check_same(b);
}

// Under ThreadSanitizer libunwind cannot run on these threads: its per-thread cache's destructor
// locks a mutex after the sanitizer has finished the thread, and faults. There the threads check
// that the walk answered, with the frames of recurse_both, and repeats gave the same token.
[[gnu::noipa]] int recurse_walk(int depth, uintptr_t* out, int* n, uint64_t* token) {
  if (depth == 0) {
    *n = memtrace::unwind::capture_walk_only(out, 64, token);  // within what a walk remembers
    return 0;
  }
  int r = recurse_walk(depth - 1, out, n, token);
  asm volatile("" : "+r"(r));
  return r + 1;
}

TEST_CASE("capture: on other threads, each with its own table", "[capture]") {
#if defined(__SANITIZE_THREAD__)
  struct Seen {
    std::vector<uintptr_t> pcs = std::vector<uintptr_t>(300);
    int n = -2, in_recurse = 0;
    uint64_t first = 0, last = 0;
  };
  std::vector<Seen> seen(4);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < seen.size(); ++t)
    threads.emplace_back([&seen, t] {
      Seen& s = seen[t];
      for (int i = 0; i < 50; ++i) recurse_walk(static_cast<int>(t * 10), s.pcs.data(), &s.n, i == 0 ? &s.first : &s.last);
      const uintptr_t rec = reinterpret_cast<uintptr_t>(&recurse_walk);
      for (int i = 0; i < s.n; ++i) s.in_recurse += owner_index(s.pcs[static_cast<size_t>(i)], {rec}) == 0;
    });
  for (auto& th : threads) th.join();
  for (size_t t = 0; t < seen.size(); ++t) {
    CHECK(seen[t].n > static_cast<int>(t * 10));
    CHECK(seen[t].in_recurse == static_cast<int>(t * 10) + 1);
    CHECK(seen[t].first != 0);
    CHECK(seen[t].last == seen[t].first);
  }
#else
  std::vector<Both> results(4);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < results.size(); ++t)
    threads.emplace_back([&results, t] {
      for (int i = 0; i < 50; ++i) recurse_both(static_cast<int>(t * 10 + i % 7), results[t], 300);
    });
  for (auto& th : threads) th.join();
  for (const Both& b : results) check_same(b);
#endif
}

TEST_CASE("capture: in a signal handler, on the thread's stack and on an alternate one", "[capture]") {
  Both b;
  g_signal_both = &b;
  struct sigaction sa {}, old {};
  sa.sa_handler = capture_in_handler;
  sigaction(SIGUSR1, &sa, &old);
  raise(SIGUSR1);  // the signal frame has no rule the walk takes: libunwind answers
  check_same(b, false);

  std::vector<char> alt(1 << 16);
  stack_t ss {}, old_ss {};
  ss.ss_sp = alt.data();
  ss.ss_size = alt.size();
  sigaltstack(&ss, &old_ss);
  sa.sa_flags = SA_ONSTACK;
  sigaction(SIGUSR1, &sa, nullptr);
  Both on_alt;
  g_signal_both = &on_alt;
  raise(SIGUSR1);  // outside the thread's stack: the walk declines
  check_same(on_alt, false);
  sigaltstack(&old_ss, nullptr);
  sigaction(SIGUSR1, &old, nullptr);
}

namespace {

struct Tokened {
  std::vector<uintptr_t> pcs = std::vector<uintptr_t>(300), lib = std::vector<uintptr_t>(300);
  int n = 0, n_lib = 0;
  uint64_t token = 0;
};

[[gnu::noipa]] void capture_tokened(Tokened& t) {
  t.n = capture(t.pcs.data(), 64, &t.token);
  t.n_lib = capture_libunwind(t.lib.data(), 64);
}

// Two different frames at the same depth: the stack pointer at capture is the same either way,
// only a return address deep down differs.
[[gnu::noipa]] int via_left(int depth, Tokened& t);
[[gnu::noipa]] int via_right(int depth, Tokened& t);
[[gnu::noipa]] int climb(int depth, Tokened& t) {
  if (depth == 0) {
    capture_tokened(t);
    return 0;
  }
  int r = climb(depth - 1, t);
  asm volatile("" : "+r"(r));
  return r + 1;
}
int via_left(int depth, Tokened& t) {
  int r = climb(depth, t);
  asm volatile("" : "+r"(r));
  return r + 1;
}
int via_right(int depth, Tokened& t) {
  int r = climb(depth, t);
  asm volatile("" : "+r"(r));
  return r + 2;
}

void check_tokened(const Tokened& t) {
  REQUIRE(t.n == t.n_lib);
  for (int i = 2; i < t.n; ++i) REQUIRE(t.pcs[static_cast<size_t>(i)] == t.lib[static_cast<size_t>(i)]);
}

}  // namespace

TEST_CASE("capture: a repeated stack is answered from the remembered walk, a changed one is not", "[capture]") {
  // One call site for all five (two sites would differ in the return address into this test).
  Tokened t[5];
  for (int i = 0; i < 5; ++i) (i == 2 || i == 3 ? via_right : via_left)(20, t[i]);
  const Tokened &a1 = t[0], &a2 = t[1], &b1 = t[2], &b2 = t[3], &a3 = t[4];
  for (const Tokened& x : t) check_tokened(x);
  CHECK(a1.token != 0);
  CHECK(a2.token == a1.token);  // same frames, same remembered walk
  CHECK(b1.token != 0);
  CHECK(b1.token != a1.token);  // a return address 20 frames down differs
  CHECK(b2.token == b1.token);
  CHECK(a3.token == a1.token);  // both walks are kept (the set has room)
  CHECK(a1.pcs[23] != b1.pcs[23]);  // via_left's frame, via_right's

  // Many different stacks through the same set: whatever is evicted, the frames stay right.
  for (int round = 0; round < 3; ++round)
    for (int depth = 0; depth < 12; ++depth) {
      Tokened lr[2];
      for (int i = 0; i < 2; ++i) (i == 0 ? via_left : via_right)(depth, lr[i]);
      check_tokened(lr[0]);
      check_tokened(lr[1]);
      CHECK(lr[0].token != lr[1].token);
    }
}

namespace {

// Sixteen call sites with the same frames above and below: at capture the pc and the stack
// pointer are the same for all, only the return address into via_site<I> differs.
template <int I>
[[gnu::noipa]] int via_site(Tokened& t) {
  int r = climb(6, t);
  asm volatile("" : "+r"(r));
  return r + I;
}
template <int... I>
constexpr std::array<int (*)(Tokened&), sizeof...(I)> site_table(std::integer_sequence<int, I...>) {
  return {&via_site<I>...};
}
constexpr auto kSites = site_table(std::make_integer_sequence<int, 16>{});

}  // namespace

TEST_CASE("capture: sixteen stacks taking turns at the same pc and sp are all remembered", "[capture]") {
  // Before the remembered walks were searched in full, the same pc and sp sent all of these to
  // one set of four: the second round walked again and each got a new token.
  // With room, as on a new thread: the tests before left their walks, unused, which a thread
  // replaces only slowly (docs/stack-capture.md, "When a thread has more stacks").
  memtrace::unwind::forget_remembered_walks();
  std::vector<Tokened> first(kSites.size()), second(kSites.size());
  for (int round = 0; round < 2; ++round)  // one call instruction for both rounds
    for (size_t i = 0; i < kSites.size(); ++i) kSites[i](round == 0 ? first[i] : second[i]);
  for (size_t i = 0; i < kSites.size(); ++i) {
    check_tokened(first[i]);
    check_tokened(second[i]);
    CHECK(first[i].token != 0);
    CHECK(second[i].token == first[i].token);
    for (size_t j = 0; j < i; ++j) CHECK(first[i].token != first[j].token);
  }
}

namespace {

// Sites whose own frame keeps its CFA in rbp (alloca, of a size that differs per site) with plain
// frames inside: the walk uses rbp as it found it, which differs between sites, so no walk joins
// another before it has passed the site's frame and reloaded rbp from the stack.
template <int I>
[[gnu::noipa]] int alloca_site(Tokened& t) {
  volatile char* buf = static_cast<volatile char*>(__builtin_alloca(static_cast<size_t>(32 + 48 * I)));
  buf[0] = 1;
  int r = climb(5, t);
  asm volatile("" : "+r"(r));
  return r + buf[0];
}
// Plain sites inside a frame that keeps its CFA in rbp: the walk joins one another's as soon as it
// has passed the site's own frame, and the shared frame uses rbp as the walk found it.
template <int I>
[[gnu::noipa]] int plain_site(Tokened& t) {
  int r = climb(3, t);
  asm volatile("" : "+r"(r));
  return r + I;
}
template <int... I>
constexpr std::array<int (*)(Tokened&), sizeof...(I)> alloca_sites(std::integer_sequence<int, I...>) {
  return {&alloca_site<I>...};
}
template <int... I>
constexpr std::array<int (*)(Tokened&), sizeof...(I)> plain_sites(std::integer_sequence<int, I...>) {
  return {&plain_site<I>...};
}
constexpr auto kAllocaSites = alloca_sites(std::make_integer_sequence<int, 16>{});
constexpr auto kPlainSites = plain_sites(std::make_integer_sequence<int, 100>{});

// 3 rounds over `sites` of the table, each in a shuffled order.
std::vector<int> rounds_shuffled(int sites) {
  std::vector<int> order;
  uint64_t x = 0x2545F4914F6CDD1Dull;
  for (int round = 0; round < 3; ++round) {
    std::vector<int> r(static_cast<size_t>(sites));
    for (int i = 0; i < sites; ++i) r[static_cast<size_t>(i)] = i;
    for (size_t i = r.size() - 1; i > 0; --i) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      std::swap(r[i], r[static_cast<size_t>((x >> 33) % (i + 1))]);
    }
    order.insert(order.end(), r.begin(), r.end());
  }
  return order;
}

// Calls table[i] for each i of order; checks every capture against libunwind and that a site's
// capture, once it had a token, keeps it (the same frames are the same remembered walk).
template <size_t N>
void run_sites(const std::array<int (*)(Tokened&), N>& table, const std::vector<int>& order, bool tokens_kept) {
  std::vector<uint64_t> token(N, 0);
  for (int i : order) {
    Tokened t;
    table[static_cast<size_t>(i)](t);
    INFO("site " << i);
    check_tokened(t);
    if (tokens_kept && token[static_cast<size_t>(i)] != 0) CHECK(t.token == token[static_cast<size_t>(i)]);
    if (token[static_cast<size_t>(i)] == 0) token[static_cast<size_t>(i)] = t.token;
  }
}

[[gnu::noipa]] int inside_alloca_frame(int n, const std::vector<int>& order, bool tokens_kept) {
  volatile char* buf = static_cast<volatile char*>(__builtin_alloca(static_cast<size_t>(n)));
  buf[0] = 1;
  run_sites(kPlainSites, order, tokens_kept);
  return buf[0];
}

}  // namespace

TEST_CASE("capture: stacks that share frames are joined where they meet, with libunwind's frames", "[capture]") {
  using memtrace::unwind::capture_counts;
  memtrace::unwind::forget_remembered_walks();
  SECTION("sites that keep their CFA in rbp, in shuffled order") {
    const auto before = capture_counts();
    run_sites(kAllocaSites, rounds_shuffled(16), true);
    CHECK(capture_counts().joined > before.joined);
  }
  SECTION("sites inside a frame that keeps its CFA in rbp, in shuffled order") {
    const auto before = capture_counts();
    const std::vector<int> order = rounds_shuffled(40);
    inside_alloca_frame(200, order, true);
    CHECK(capture_counts().joined > before.joined);
    // The same sites under a frame of another size: rbp differs, and so does every frame's sp.
    inside_alloca_frame(5000, order, true);
  }
  SECTION("more sites in turn than a thread remembers") {
    std::vector<int> order;
    for (int round = 0; round < 4; ++round)
      for (int i = 0; i < 100; ++i) order.push_back(i);
    const auto before = capture_counts();
    inside_alloca_frame(64, order, false);
    const auto after = capture_counts();
    CHECK(after.joined > before.joined);
    CHECK(after.walked - before.walked < 10);  // joined, not walked in full
  }
}
