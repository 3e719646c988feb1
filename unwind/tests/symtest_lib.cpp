#include "symtest_lib.hpp"

namespace symtest {

namespace {
Lines g_lines;
}  // namespace

// Each __LINE__ is on the same line as the call it names; the store after each call also
// keeps the calls from becoming tail calls.
namespace detail {

[[gnu::always_inline]] inline int leaf(Callback cb, void* arg) {
  int r = cb(arg); g_lines.leaf = __LINE__;
  return r + 1;
}

[[gnu::always_inline]] inline int middle(Callback cb, void* arg) {
  int r = leaf(cb, arg) * 3; g_lines.middle = __LINE__;
  return r;
}

}  // namespace detail

int outer(Callback cb, void* arg) {
  int r = detail::middle(cb, arg) + 7; g_lines.outer = __LINE__;
  return r;
}

Lines lines() { return g_lines; }

}  // namespace symtest
