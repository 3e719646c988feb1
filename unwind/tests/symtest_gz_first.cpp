// The first compilation unit of libunwind_symtest_gz_big.so, whose compressed separate DWARF puts
// a bulk of units after this one (symtest_gz_bulk.cpp): a partial copy
// (unwind/partial_copy.hpp) answers for this unit having inflated little of the rest.
#include "symtest_lib.hpp"

namespace {
int g_line;
}

extern "C" SYMTEST_API int symtest_gz_first(symtest::Callback cb, void* arg) {
  int r = cb(arg); g_line = __LINE__;
  return r + 3;
}

extern "C" SYMTEST_API int symtest_gz_first_line() { return g_line; }
