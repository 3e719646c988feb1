#pragma once
#include <unistd.h>

#include <climits>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "unwind/stack_capture.hpp"
#include "unwind/tests/symtest_lib.hpp"

namespace unwind_test {

inline std::string exe_path() {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

inline std::string_view base_name(std::string_view p) {
  size_t s = p.rfind('/');
  return s == std::string_view::npos ? p : p.substr(s + 1);
}

// A stack captured from the callback of `call`, one of the test libraries' entry points that take
// (Callback, void*): its return address into that library is among the frames.
inline std::vector<uintptr_t> capture_via(int (*call)(symtest::Callback, void*)) {
  struct Out {
    uintptr_t pcs[64];
    int n = 0;
  } out;
  call(
      [](void* arg) -> int {
        auto* o = static_cast<Out*>(arg);
        o->n = memtrace::unwind::capture(o->pcs, 64);
        return 0;
      },
      &out);
  return {out.pcs, out.pcs + out.n};
}

// A stack captured from inside the test library's inlined chain.
inline std::vector<uintptr_t> capture_through_symtest() {
  struct Out {
    uintptr_t pcs[64];
    int n = 0;
  } out;
  symtest::outer(
      [](void* arg) -> int {
        auto* o = static_cast<Out*>(arg);
        o->n = memtrace::unwind::capture(o->pcs, 64);
        return o->n;
      },
      &out);
  return {out.pcs, out.pcs + out.n};
}

}  // namespace unwind_test
