// Built with -g0 and linked with -s: no .symtab, no DWARF; only exported functions are in
// .dynsym, so an address in hidden_work has no symbol at all.
#include "symtest_lib.hpp"

namespace {

[[gnu::noinline]] int hidden_work(int x) {
  int acc = 0;
  for (int i = 0; i < x; ++i) acc = acc * 31 + (i ^ x);
  return acc;
}

}  // namespace

extern "C" uintptr_t symtest_stripped_address() {
  // A few bytes in, as a return address would be.
  return reinterpret_cast<uintptr_t>(&hidden_work) + 4;
}

extern "C" int symtest_stripped_call(int x) { return hidden_work(x) + 1; }
