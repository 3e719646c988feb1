#include "symtest_dwarf4.hpp"

#include <cstdio>

namespace symtest_dwarf4 {

namespace {

volatile int g_sink;

template <typename T>
[[gnu::noinline]] T accumulate(Callback cb, void* arg, T start, int n) {
  T total = start;
  for (int i = 0; i < n; ++i) {
    total += static_cast<T>(header_step(cb, arg, i));
    g_sink = static_cast<int>(total);
  }
  return total;
}

[[gnu::always_inline]] inline int twice(Callback cb, void* arg) {
  int a = header_step(cb, arg, 1);
  g_sink = a;
  int b = header_step(cb, arg, 2);
  return a + b;
}

// Defined at the end of this file under a relative #line name: DWARF 4 then gives it
// directory 0, which stands for the unit's DW_AT_comp_dir.
[[gnu::always_inline]] inline int relative_step(Callback cb, void* arg, int n);

[[gnu::cold, gnu::noinline]] int rare(Callback cb, void* arg, int n) {
  std::fprintf(stderr, "symtest_dwarf4: rare path %d\n", n);
  return twice(cb, arg) - n;
}

}  // namespace

int run(Callback cb, void* arg, int n) {
  int r = twice(cb, arg);
  g_sink = r;
  // A branch GCC moves to .text.unlikely: run() becomes two ranges.
  if (__builtin_expect(n < 0, 0)) {
    g_sink = rare(cb, arg, n);
    std::fprintf(stderr, "symtest_dwarf4: negative %d\n", n);
    r += g_sink;
  }
  r += static_cast<int>(accumulate<long>(cb, arg, 3L, n));
  r += static_cast<int>(accumulate<double>(cb, arg, 0.5, n));
  r += relative_step(cb, arg, n);
  return r;
}

namespace {

#line 1000 "symtest_dwarf4_relative.cpp"
[[gnu::always_inline]] inline int relative_step(Callback cb, void* arg, int n) {
  int r = header_step(cb, arg, n);
  g_sink = r;
  return r + twice(cb, arg);
}

}  // namespace

}  // namespace symtest_dwarf4
