// Built with -g, then split: its DWARF moves to libunwind_symtest_gz.so.debug beside it,
// compressed (objcopy --compress-debug-sections), found through .gnu_debuglink. The symbolizer
// reads it through a decompressed copy in the debug cache (unwind/debug_cache.hpp).
#include "symtest_lib.hpp"

namespace {
int g_line;
}

extern "C" SYMTEST_API int symtest_gz_call(symtest::Callback cb, void* arg) {
  int r = cb(arg); g_line = __LINE__;
  return r + 2;
}

extern "C" SYMTEST_API int symtest_gz_line() { return g_line; }
