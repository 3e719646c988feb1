#include <dlfcn.h>
#include <sys/mman.h>

#include <catch2/catch.hpp>
#include <cstdio>

#include "unwind/module_map.hpp"
#include "unwind/symbolizer.hpp"
#include "unwind/tests/test_util.hpp"

using memtrace::unwind::Symbolizer;
using unwind_test::base_name;

static int g_exe_line;

// A static function of the test program, which is linked without -rdynamic: only .symtab
// names it.
[[gnu::noipa]] static int exe_static_capture(uintptr_t* out, int max) {
  int n = memtrace::unwind::capture(out, max); g_exe_line = __LINE__;
  return n + 0;
}

namespace {

std::string hex(uintptr_t v) {
  char b[32];
  std::snprintf(b, sizeof b, "0x%lx", static_cast<unsigned long>(v));
  return b;
}

}  // namespace

TEST_CASE("symbolizer: static function of a program without -rdynamic", "[symbolizer]") {
  uintptr_t pcs[16];
  int n = exe_static_capture(pcs, 16);
  REQUIRE(n >= 2);
  Symbolizer sym;
  // pcs[0] is capture() itself.
  const auto& self = sym.frames(pcs[0]);
  REQUIRE(!self.empty());
  CHECK(self.back().function.rfind("memtrace::unwind::capture(", 0) == 0);

  const auto& f = sym.frames(pcs[1]);
  REQUIRE(f.size() == 1);
  INFO(f[0].function);
  CHECK(f[0].function == "exe_static_capture(unsigned long*, int)");
  CHECK(base_name(f[0].file) == "test_symbolizer.cpp");
  CHECK(f[0].line == g_exe_line);
  CHECK(sym.module_of(pcs[1]) == unwind_test::exe_path());
  // Cached: the same vector again.
  CHECK(&sym.frames(pcs[1]) == &f);
}

TEST_CASE("symbolizer: inlined frames, innermost first, demangled", "[symbolizer]") {
  auto pcs = unwind_test::capture_through_symtest();
  const symtest::Lines lines = symtest::lines();
  REQUIRE(lines.leaf > 0);
  Symbolizer sym;
  uintptr_t in_lib = 0;
  for (uintptr_t pc : pcs)
    if (base_name(sym.module_of(pc - 1)) == "libunwind_symtest.so") {
      in_lib = pc;
      break;
    }
  REQUIRE(in_lib != 0);
  const auto& f = sym.frames(in_lib);
  for (const auto& fr : f) UNSCOPED_INFO(fr.function << " " << fr.file << ":" << fr.line);
  REQUIRE(f.size() == 3);
  CHECK(f[0].function.rfind("symtest::detail::leaf(", 0) == 0);
  CHECK(f[0].line == lines.leaf);
  CHECK(f[1].function.rfind("symtest::detail::middle(", 0) == 0);
  CHECK(f[1].line == lines.middle);
  CHECK(f[2].function == "symtest::outer(int (*)(void*), void*)");
  CHECK(f[2].line == lines.outer);
  for (const auto& fr : f) CHECK(base_name(fr.file) == "symtest_lib.cpp");
}

TEST_CASE("symbolizer: module+offset when nothing names the address", "[symbolizer]") {
  Symbolizer sym;
  SECTION("stripped library") {
    const uintptr_t addr = symtest_stripped_address();
    Dl_info info{};
    REQUIRE(dladdr(reinterpret_cast<void*>(&symtest_stripped_address), &info) != 0);
    const uintptr_t base = reinterpret_cast<uintptr_t>(info.dli_fbase);
    CHECK(base_name(sym.module_of(addr)) == "libunwind_symtest_stripped.so");
    const auto& f = sym.frames(addr);
    REQUIRE(f.size() == 1);
    CHECK(f[0].function == "libunwind_symtest_stripped.so+" + hex(addr - base));
    CHECK(f[0].file.empty());
    CHECK(f[0].line == 0);
    // An exported function of the same library is named from .dynsym.
    CHECK(sym.frames(reinterpret_cast<uintptr_t>(&symtest_stripped_call) + 1)[0].function ==
          "symtest_stripped_call");
  }
  SECTION("anonymous executable memory") {
    void* p = mmap(nullptr, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(p != MAP_FAILED);
    const uintptr_t addr = reinterpret_cast<uintptr_t>(p) + 64;
    CHECK(sym.module_of(addr).empty());
    const auto& f = sym.frames(addr);
    REQUIRE(f.size() == 1);
    CHECK(f[0].function == "[unknown]+" + hex(addr));
    munmap(p, 4096);
  }
  SECTION("null") {
    CHECK(sym.frames(0).size() == 1);
    CHECK(sym.module_of(0).empty());
  }
}

TEST_CASE("symbolizer: module map and self module", "[symbolizer]") {
  Symbolizer sym;
  const std::string exe = unwind_test::exe_path();
  CHECK(memtrace::unwind::self_module() == exe);  // unwind is linked into the test program
  bool saw_exe = false, saw_lib = false;
  for (const auto& m : sym.modules()) {
    if (m.path == exe) saw_exe = true;
    if (base_name(m.path) == "libunwind_symtest.so") {
      saw_lib = true;
      CHECK(m.build_id.size() == 40);  // GNU build id (sha1)
      CHECK(m.start <= reinterpret_cast<uintptr_t>(&symtest::outer));
      CHECK(reinterpret_cast<uintptr_t>(&symtest::outer) < m.end);
    }
  }
  CHECK(saw_exe);
  CHECK(saw_lib);
}

TEST_CASE("module map: dl_iterate_phdr lookups", "[module_map]") {
  memtrace::unwind::ModuleMap map;
  const std::string exe = unwind_test::exe_path();
  CHECK(map.module_count() > 3);
  CHECK(map.path_of(reinterpret_cast<uintptr_t>(&exe_static_capture)) == exe);
  CHECK(base_name(map.path_of(reinterpret_cast<uintptr_t>(&symtest::outer))) ==
        "libunwind_symtest.so");
  CHECK(map.path_of(0).empty());
  CHECK(memtrace::unwind::mapped_path(reinterpret_cast<uintptr_t>(&symtest::outer)) ==
        map.path_of(reinterpret_cast<uintptr_t>(&symtest::outer)));
  CHECK_FALSE(map.refresh_if_changed());
}

TEST_CASE("symbolizer and module map: a library loaded afterwards", "[symbolizer][module_map]") {
  Symbolizer sym;
  memtrace::unwind::ModuleMap map;
  void* h = dlopen(UNWIND_SYMTEST_DL_PATH, RTLD_NOW | RTLD_LOCAL);
  REQUIRE(h != nullptr);
  auto fn = reinterpret_cast<int (*)(int)>(dlsym(h, "symtest_dl_fn"));
  REQUIRE(fn != nullptr);
  CHECK(fn(2) == 15);
  const uintptr_t addr = reinterpret_cast<uintptr_t>(fn);
  CHECK(base_name(sym.module_of(addr)) == "libunwind_symtest_dl.so");
  CHECK(sym.frames(addr + 1)[0].function == "symtest_dl_fn");
  CHECK(base_name(map.path_of(addr)) == "libunwind_symtest_dl.so");
  dlclose(h);
}

TEST_CASE("symbolizer: DWARF from a separate file named by .gnu_debuglink", "[symbolizer]") {
  struct Out {
    uintptr_t pcs[32];
    int n = 0;
  } out;
  symtest_debuglink_call(
      [](void* arg) -> int {
        auto* o = static_cast<Out*>(arg);
        o->n = memtrace::unwind::capture(o->pcs, 32);
        return 0;
      },
      &out);
  Symbolizer sym;
  uintptr_t in_lib = 0;
  for (int i = 0; i < out.n; ++i)
    if (base_name(sym.module_of(out.pcs[i] - 1)) == "libunwind_symtest_debuglink.so") {
      in_lib = out.pcs[i];
      break;
    }
  REQUIRE(in_lib != 0);
  const auto& f = sym.frames(in_lib);
  REQUIRE(f.size() == 1);
  CHECK(f[0].function == "symtest_debuglink_call");
  CHECK(base_name(f[0].file) == "symtest_debuglink.cpp");
  CHECK(f[0].line == symtest_debuglink_line());
}
