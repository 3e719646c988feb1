// The last compilation unit of libunwind_symtest_gz_big.so: a few hundred kilobytes of DWARF
// (nested template instances, each a type and its functions), and after them the function whose
// frame needs the unit inflated to its end.
#include "symtest_lib.hpp"

namespace {

template <int N>
struct Chain {
  int own[N % 5 + 1];
  double weight;
  Chain<N - 1> rest;
  [[gnu::noinline]] int sum() const { return own[0] + static_cast<int>(weight) + rest.sum(); }
  [[gnu::noinline]] int depth() const { return 1 + rest.depth(); }
};
template <>
struct Chain<0> {
  int sum() const { return 0; }
  int depth() const { return 0; }
};

template <int N, typename T>
struct Tree {
  T value;
  Tree<N - 1, T> left;
  Tree<N - 1, long> right;
  [[gnu::noinline]] long total() const { return static_cast<long>(value) + left.total() + right.total(); }
};
template <typename T>
struct Tree<0, T> {
  long total() const { return 0; }
};

int g_line;

}  // namespace

extern "C" SYMTEST_API int symtest_gz_last(symtest::Callback cb, void* arg) {
  static Chain<1500> chain{};
  static Tree<9, char> tree{};
  int r = cb(arg); g_line = __LINE__;
  return r + chain.sum() + chain.depth() + static_cast<int>(tree.total());
}

extern "C" SYMTEST_API int symtest_gz_last_line() { return g_line; }
