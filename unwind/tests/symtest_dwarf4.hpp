// Test library for the symbolizer's DWARF 4 reading (-gdwarf-4 -O2 -ffunction-sections):
// .debug_line version 4 with a directory table, .debug_ranges lists (the unit's code in
// several sections; a function split into hot and cold parts), inlined calls from a header.
#pragma once

#define SYMTEST_DWARF4_API __attribute__((visibility("default")))

namespace symtest_dwarf4 {

using Callback = int (*)(void*);

// Calls cb through always_inline functions (one defined in this header), a template
// instantiated twice and a cold path; returns a value that depends on every call.
SYMTEST_DWARF4_API int run(Callback cb, void* arg, int n);

// Defined here, so that its inlined instances name this header as their file.
[[gnu::always_inline]] inline int header_step(Callback cb, void* arg, int k) {
  int r = cb(arg);
  return r * 5 + k;
}

}  // namespace symtest_dwarf4
