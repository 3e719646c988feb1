// memtrace's own code, found once (unwind/own_code.hpp): what a stack capture drops and the
// deep-bind scan leaves alone. In this test program it is the program itself.
#include <catch2/catch.hpp>

#include <dlfcn.h>

#include <cstdint>

#include "preload/capture.hpp"
#include "preload/deep_bind.hpp"
#include "unwind/own_code.hpp"

using namespace memtrace;

TEST_CASE("memtrace's own code holds the preload's functions and nothing of libc's", "[own_code]") {
  const unwind::CodeRange own = unwind::own_code();
  REQUIRE_FALSE(own.empty());
  CHECK(own.contains(reinterpret_cast<uintptr_t>(&preload::capture_stack_id)));
  CHECK(own.contains(reinterpret_cast<uintptr_t>(&preload::rebind_bypassing_objects)));
  CHECK(own.contains(reinterpret_cast<uintptr_t>(&unwind::code_range_of)));
  // Asked of the loader: &getpid could be a stub in this program.
  const uintptr_t in_libc = reinterpret_cast<uintptr_t>(dlsym(RTLD_DEFAULT, "getpid"));
  REQUIRE(in_libc != 0);
  CHECK_FALSE(own.contains(in_libc));
  const unwind::CodeRange libc = unwind::code_range_of(in_libc);
  CHECK(libc.contains(in_libc));
  CHECK((libc.hi <= own.lo || own.hi <= libc.lo));
  // Found once: the same answer every time.
  CHECK(unwind::own_code().lo == own.lo);
  CHECK(unwind::own_code().hi == own.hi);
}

TEST_CASE("an address in no loaded object has no code range", "[own_code]") {
  CHECK(unwind::code_range_of(0).empty());
  CHECK(unwind::code_range_of(1).empty());
}
