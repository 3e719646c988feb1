// Test library built with Clang (see CMakeLists.txt), for the symbolizer's DWARF readers on
// another producer's output: Clang 14 writes no DW_AT_sibling, names through
// .debug_str_offsets (DW_FORM_strx*) and addresses through .debug_addr (DW_FORM_addrx), so
// the readers take their general paths and hand the rest to libdw.
#include <cstdio>

namespace symtest_clang {

volatile int g_sink;

template <typename T>
[[gnu::always_inline]] inline T scale(T v, int k) {
  T r = v;
  for (int i = 0; i < k; ++i) {
    r = r * 3 + static_cast<T>(i);
    g_sink = static_cast<int>(r);
  }
  return r;
}

struct Counter {
  int n = 0;
  [[gnu::always_inline]] int bump(int (*cb)(void*), void* arg) {
    n += cb(arg);
    {
      // A lexical block with its own variable.
      int local = n * 7;
      g_sink = local;
      n += scale(local, 2) & 3;
    }
    return n;
  }
};

template <typename T>
[[gnu::noinline]] T run_typed(int (*cb)(void*), void* arg, int n) {
  Counter c;
  T total{};
  for (int i = 0; i < n; ++i) {
    auto step = [&](int k) { return scale(static_cast<T>(c.bump(cb, arg)), k); };
    total += step(i % 3);
    g_sink = static_cast<int>(total);
  }
  return total;
}

[[gnu::cold, gnu::noinline]] int rare(int n) {
  std::fprintf(stderr, "symtest_clang: rare %d\n", n);
  return n - 1;
}

}  // namespace symtest_clang

extern "C" __attribute__((visibility("default"))) int symtest_clang_run(int (*cb)(void*), void* arg, int n) {
  int r = static_cast<int>(symtest_clang::run_typed<long>(cb, arg, n));
  r += static_cast<int>(symtest_clang::run_typed<double>(cb, arg, n));
  if (n < 0) r += symtest_clang::rare(n);
  return r;
}
