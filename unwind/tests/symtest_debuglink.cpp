// Built with -g, then split: its DWARF moves to libunwind_symtest_debuglink.so.debug beside
// it, found through .gnu_debuglink (the library keeps only its symbol table).
#include "symtest_lib.hpp"

namespace {
int g_line;
}

extern "C" SYMTEST_API int symtest_debuglink_call(symtest::Callback cb, void* arg) {
  int r = cb(arg); g_line = __LINE__;
  return r + 1;
}

extern "C" SYMTEST_API int symtest_debuglink_line() { return g_line; }
