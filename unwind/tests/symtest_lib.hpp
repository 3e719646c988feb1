// Test library for the symbolizer: built with -g -O2, calls back through two always_inline
// functions so that the callback's return address sits in three nested frames.
#pragma once
#include <cstdint>

#define SYMTEST_API __attribute__((visibility("default")))

namespace symtest {

using Callback = int (*)(void*);

struct Lines {
  int leaf = 0;    // line of cb(arg) in detail::leaf
  int middle = 0;  // line of leaf(...) in detail::middle
  int outer = 0;   // line of middle(...) in outer
};

// outer -> detail::middle (inlined) -> detail::leaf (inlined) -> cb(arg).
SYMTEST_API int outer(Callback cb, void* arg);
// Lines of the three calls; filled in by outer().
SYMTEST_API Lines lines();

}  // namespace symtest

// From the stripped library (no .symtab, no DWARF): an address inside a function that has
// no symbol at all, and a way to call that function.
extern "C" SYMTEST_API uintptr_t symtest_stripped_address();
extern "C" SYMTEST_API int symtest_stripped_call(int x);

// From the library whose DWARF is in a separate file named by .gnu_debuglink.
extern "C" SYMTEST_API int symtest_debuglink_call(symtest::Callback cb, void* arg);
extern "C" SYMTEST_API int symtest_debuglink_line();  // line of the cb call

// From the library whose separate DWARF file is compressed (read through the debug cache).
extern "C" SYMTEST_API int symtest_gz_call(symtest::Callback cb, void* arg);
extern "C" SYMTEST_API int symtest_gz_line();  // line of the cb call
// libunwind_symtest_gz_big.so: the same split, with much DWARF between its first unit and its last.
extern "C" SYMTEST_API int symtest_gz_first(symtest::Callback cb, void* arg);
extern "C" SYMTEST_API int symtest_gz_first_line();
extern "C" SYMTEST_API int symtest_gz_last(symtest::Callback cb, void* arg);
extern "C" SYMTEST_API int symtest_gz_last_line();
