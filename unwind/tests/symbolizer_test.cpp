#include <cxxabi.h>
#include <dlfcn.h>
#include <dwarf.h>
#include <fcntl.h>
#include <unistd.h>
#include <elfutils/libdwfl.h>
#include <link.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

#include "unwind/libdw_lock.hpp"
#include "unwind/module_map.hpp"
#include "unwind/symbolizer.hpp"
#include "unwind/tests/symtest_dwarf4.hpp"
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
  CHECK(base_name(f[0].file) == "symbolizer_test.cpp");
  CHECK(f[0].line == g_exe_line);
  CHECK(sym.module_of(pcs[1]) == unwind_test::exe_path());
  // Cached: the same vector again.
  CHECK(sym.frames(pcs[1]).data() == f.data());
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
  Symbolizer sym;
  uintptr_t in_lib = 0;
  for (uintptr_t pc : unwind_test::capture_via(symtest_debuglink_call))
    if (base_name(sym.module_of(pc - 1)) == "libunwind_symtest_debuglink.so") {
      in_lib = pc;
      break;
    }
  REQUIRE(in_lib != 0);
  const auto& f = sym.frames(in_lib);
  REQUIRE(f.size() == 1);
  CHECK(f[0].function == "symtest_debuglink_call");
  CHECK(base_name(f[0].file) == "symtest_debuglink.cpp");
  CHECK(f[0].line == symtest_debuglink_line());
}

namespace {

// What libdw answers for one pc when asked directly, with no index in between: the
// Symbolizer's rules (ELF symbol name for the out-of-line function, DWARF scopes for inlined
// frames, line table for file:line) applied to dwfl_module_addrinfo, dwarf_getscopes and
// dwfl_module_getsrc.
std::string reference_demangle(const char* raw) {
  std::string s(raw);
  if (s.size() > 1 && s[0] == '_' && s[1] == 'Z') {
    int status = 0;
    char* d = abi::__cxa_demangle(s.c_str(), nullptr, nullptr, &status);
    if (d != nullptr && status == 0) s = d;
    std::free(d);
  }
  return s;
}

std::string reference_die_name(Dwarf_Die* die) {
  Dwarf_Attribute attr;
  const char* name = nullptr;
  if (dwarf_attr_integrate(die, DW_AT_linkage_name, &attr) != nullptr ||
      dwarf_attr_integrate(die, DW_AT_MIPS_linkage_name, &attr) != nullptr)
    name = dwarf_formstring(&attr);
  if (name == nullptr && dwarf_attr_integrate(die, DW_AT_name, &attr) != nullptr)
    name = dwarf_formstring(&attr);
  return name != nullptr ? reference_demangle(name) : std::string();
}

struct RefFrame {
  std::string function, file;
  int line = 0;
};

// Frames for pc in mod, or an empty vector when neither a symbol nor a scope names it (the
// Symbolizer prints module+0xoffset then, which is not compared).
std::vector<RefFrame> reference_frames(Dwfl_Module* mod, uintptr_t pc) {
  std::vector<RefFrame> out;
  GElf_Off off = 0;
  GElf_Sym sym;
  const char* raw = dwfl_module_addrinfo(mod, pc, &off, &sym, nullptr, nullptr, nullptr);
  std::string elf_name;
  if (raw != nullptr && raw[0] != '\0')
    elf_name = reference_demangle(std::string(raw, std::strcspn(raw, "@")).c_str());
  std::string file;
  int line = 0;
  Dwarf_Addr bias = 0;
  Dwarf_Die* cudie = dwfl_module_addrdie(mod, pc, &bias);
  if (cudie != nullptr && dwarf_haspc(cudie, pc - bias) <= 0) cudie = nullptr;
  // Units libdw cannot find by address (no .debug_aranges: Clang's default): every unit asked.
  bool scanned = false;
  if (cudie == nullptr && dwfl_module_addrdie(mod, pc, &bias) == nullptr) {
    for (Dwarf_Die* cu = nullptr; (cu = dwfl_module_nextcu(mod, cu, &bias)) != nullptr;)
      if (dwarf_haspc(cu, pc - bias) > 0) {
        cudie = cu;
        scanned = true;
        break;
      }
  }
  if (scanned) {
    if (Dwarf_Line* dl = dwarf_getsrc_die(cudie, pc - bias)) {
      if (const char* src = dwarf_linesrc(dl, nullptr, nullptr)) file = src;
      dwarf_lineno(dl, &line);
    }
  } else if (cudie != nullptr) {
    if (Dwfl_Line* l = dwfl_module_getsrc(mod, pc)) {
      Dwarf_Addr lb = 0;
      if (Dwarf_Line* dl = dwfl_dwarf_line(l, &lb)) {
        if (const char* src = dwarf_linesrc(dl, nullptr, nullptr)) file = src;
        dwarf_lineno(dl, &line);
      }
    }
  }
  bool have_function = false;
  Dwarf_Die* scopes = nullptr;
  int n = cudie != nullptr ? dwarf_getscopes(cudie, pc - bias, &scopes) : 0;
  if (n > 0) {
    Dwarf_Die innermost = scopes[0];
    std::free(scopes);
    scopes = nullptr;
    n = dwarf_getscopes_die(&innermost, &scopes);
    for (int i = 0; i < n; ++i) {
      Dwarf_Die* d = &scopes[i];
      int tag = dwarf_tag(d);
      if (tag == DW_TAG_inlined_subroutine) {
        out.push_back({reference_die_name(d), file, line});
        file.clear();
        line = 0;
        Dwarf_Attribute attr;
        Dwarf_Word v = 0;
        if (dwarf_formudata(dwarf_attr(d, DW_AT_call_line, &attr), &v) == 0) line = static_cast<int>(v);
        if (dwarf_formudata(dwarf_attr(d, DW_AT_call_file, &attr), &v) == 0) {
          Dwarf_Files* files = nullptr;
          size_t nfiles = 0;
          if (dwarf_getsrcfiles(cudie, &files, &nfiles) == 0 && v < nfiles)
            if (const char* f = dwarf_filesrc(files, v, nullptr, nullptr)) file = f;
        }
      } else if (tag == DW_TAG_subprogram || tag == DW_TAG_entry_point) {
        std::string fn = elf_name.empty() ? reference_die_name(d) : elf_name;
        if (!fn.empty()) {
          out.push_back({fn, file, line});
          have_function = true;
        }
        break;
      }
    }
  }
  std::free(scopes);
  if (!have_function) {
    if (elf_name.empty()) return {};
    out.push_back({elf_name, file, line});
  }
  return out;
}

struct Text {
  std::string name;
  uintptr_t base = 0;
  std::vector<std::pair<uintptr_t, uintptr_t>> ranges;
};

int collect_text(dl_phdr_info* info, size_t, void* arg) {
  auto* texts = static_cast<std::vector<Text>*>(arg);
  Text t;
  t.name = info->dlpi_name != nullptr ? info->dlpi_name : "";
  t.base = info->dlpi_addr;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const auto& ph = info->dlpi_phdr[i];
    if (ph.p_type == PT_LOAD && (ph.p_flags & PF_X))
      t.ranges.push_back({info->dlpi_addr + ph.p_vaddr, info->dlpi_addr + ph.p_vaddr + ph.p_memsz});
  }
  texts->push_back(std::move(t));
  return 0;
}

}  // namespace

// The Symbolizer answers from its own indexes (symbol table, DIE tree read straight from
// .debug_info, line tables read straight from .debug_line, cached names); libdw, asked per
// address, is the reference. Covered: the test program (DWARF 5 from GCC, C++ with many
// inlined templates, memtrace's own code), the test library with always_inline chains, and
// the DWARF 4 library (line table version 4, .debug_ranges, code in several sections).
TEST_CASE("symbolizer: same frames as libdw asked per address", "[symbolizer]") {
  std::vector<Text> texts;
  dl_iterate_phdr(collect_text, &texts);
  std::vector<std::pair<const Text*, size_t>> plan;  // module, number of addresses
  for (const Text& t : texts) {
    // The program: few addresses, since dwarf_getscopes walks a whole unit each time. The
    // library: about every other byte of its small text.
    if (t.name.empty()) plan.push_back({&t, 300});
    if (base_name(t.name) == "libunwind_symtest.so") plan.push_back({&t, 3000});
    if (base_name(t.name) == "libunwind_symtest_dwarf4.so") plan.push_back({&t, 2000});
    // A large symbol table with many aliases (symbols sharing an address) and nested sized
    // symbols: the symbol index's order and segments.
    if (base_name(t.name).rfind("libstdc++.so", 0) == 0) plan.push_back({&t, 2000});
  }
  REQUIRE(plan.size() == 4);

  Dwfl_Callbacks cb{};
  char* debuginfo_path = nullptr;
  cb.find_elf = dwfl_linux_proc_find_elf;
  cb.find_debuginfo = dwfl_build_id_find_debuginfo;
  cb.debuginfo_path = &debuginfo_path;
  Dwfl* dwfl = dwfl_begin(&cb);
  REQUIRE(dwfl != nullptr);
  REQUIRE(dwfl_linux_proc_report(dwfl, getpid()) == 0);
  REQUIRE(dwfl_report_end(dwfl, nullptr, nullptr) == 0);

  // The reference for every sampled address first; then two Symbolizers answer, one in
  // address order and one in reverse, since a unit's DIEs are read as addresses reach them.
  struct Sample {
    uintptr_t pc;
    std::vector<RefFrame> ref;
    const Text* text;
  };
  std::vector<Sample> samples;
  size_t compared = 0, inlined = 0, with_line = 0, dwarf4_inlined = 0;
  for (auto [t, want] : plan) {
    uintptr_t total = 0;
    for (auto [s, e] : t->ranges) total += e - s;
    REQUIRE(total > 0);
    const uintptr_t stride = total / want > 0 ? total / want : 1;
    size_t k = 0;
    for (auto [s, e] : t->ranges)
      for (uintptr_t pc = s + (stride / 3); pc < e; pc += stride, ++k) {
        const uintptr_t p = pc + k % 5;  // not all at one alignment
        Dwfl_Module* mod = dwfl_addrmodule(dwfl, p);
        REQUIRE(mod != nullptr);
        auto ref = reference_frames(mod, p);
        if (ref.empty()) continue;
        ++compared;
        inlined += ref.size() > 1;
        if (base_name(t->name) == "libunwind_symtest_dwarf4.so") dwarf4_inlined += ref.size() > 1;
        with_line += ref[0].line > 0;
        samples.push_back({p, std::move(ref), t});
      }
  }
  auto check = [](Symbolizer& sym, const Sample& s) {
    const auto got = sym.frames(s.pc + 1);  // frames() takes return addresses
    INFO(s.text->name << " pc " << hex(s.pc) << " (offset " << hex(s.pc - s.text->base) << ")");
    REQUIRE(got.size() == s.ref.size());
    for (size_t i = 0; i < s.ref.size(); ++i) {
      INFO("frame " << i);
      CHECK(got[i].function == s.ref[i].function);
      CHECK(got[i].file == s.ref[i].file);
      CHECK(got[i].line == s.ref[i].line);
    }
  };
  // Both answered from memtrace's own reading of every unit (libdw walking one would give the
  // same frames, so the comparison alone would not show it).
  {
    Symbolizer sym;
    for (const Sample& s : samples) check(sym, s);
    CHECK(sym.unit_counts().units >= 4);
    CHECK(sym.unit_counts().by_libdw == 0);
  }
  {
    Symbolizer sym;
    for (auto it = samples.rbegin(); it != samples.rend(); ++it) check(sym, *it);
    CHECK(sym.unit_counts().by_libdw == 0);
  }
  // All at once through prepare(), as a dump asks: units shared out among threads, each with
  // its own libdwfl session; the same frames. Duplicates and addresses in no module too.
  {
    std::vector<uintptr_t> rets;
    for (const Sample& s : samples) rets.push_back(s.pc + 1);
    for (size_t i = 0; i < samples.size(); i += 7) rets.push_back(samples[i].pc + 1);
    const uintptr_t nowhere[] = {0, 1, 0x10, ~uintptr_t{0}};
    rets.insert(rets.end(), std::begin(nowhere), std::end(nowhere));
    Symbolizer serial;
    Symbolizer sym;
    const auto rep = sym.prepare(rets, 4);
    CHECK(rep.addresses == samples.size() + 4);
    CHECK(rep.tasks >= 5);  // the program's units, the libraries' units, libstdc++, nowhere
    CHECK(rep.threads == 4);
    for (const Sample& s : samples) check(sym, s);
    for (uintptr_t r : nowhere) {
      INFO("return address " << hex(r));
      const auto a = serial.frames(r);
      const auto b = sym.frames(r);
      REQUIRE(a.size() == b.size());
      CHECK(a[0].function == b[0].function);
    }
    CHECK(sym.unit_counts().units >= 4);
    CHECK(sym.unit_counts().by_libdw == 0);
    // Asked again, nothing is left to do.
    CHECK(sym.prepare(rets, 4).addresses == 0);
    // One thread, or too few addresses to share out: done on the calling thread.
    Symbolizer one;
    CHECK(one.prepare(rets, 1).threads == 1);
    for (const Sample& s : samples) check(one, s);
    Symbolizer few;
    const auto small = few.prepare(std::span(rets).first(100), 4);
    CHECK(small.threads == 1);
    CHECK(small.addresses == 100);
    for (size_t i = 0; i < 100; ++i) check(few, samples[i]);
  }
  dwfl_end(dwfl);
  INFO("compared " << compared << ", with inlined frames " << inlined << ", with a line " << with_line);
  // The sample must exercise what the indexes replace.
  CHECK(compared > 400);
  CHECK(inlined > 100);
  CHECK(with_line > 250);
  CHECK(dwarf4_inlined > 50);
}

// The DWARF 4 library really is what the comparison above relies on it to be: version 4 units
// whose ranges come from .debug_ranges. And a call through a header's inline function, from
// a cold path, resolves with the header as the inlined frame's file.
TEST_CASE("symbolizer: DWARF 4 library", "[symbolizer]") {
  struct Out {
    uintptr_t pcs[64];
    int n = 0;
  } out;
  symtest_dwarf4::run(
      [](void* arg) -> int {
        auto* o = static_cast<Out*>(arg);
        if (o->n == 0) o->n = memtrace::unwind::capture(o->pcs, 64);
        return 1;
      },
      &out, 2);
  REQUIRE(out.n > 0);
  Symbolizer sym;
  std::span<const memtrace::unwind::SymFrame> in_lib;
  uintptr_t pc = 0;
  for (int i = 0; i < out.n && in_lib.empty(); ++i)
    if (base_name(sym.module_of(out.pcs[i] - 1)) == "libunwind_symtest_dwarf4.so") {
      pc = out.pcs[i] - 1;
      in_lib = sym.frames(out.pcs[i]);
    }
  REQUIRE(!in_lib.empty());
  const auto f = in_lib;
  std::string shown;
  for (const auto& fr : f) shown += std::string(fr.function) + " " + std::string(fr.file) + ":" + std::to_string(fr.line) + "\n";
  INFO(shown);
  // header_step (inlined, in the header) <- twice (inlined) <- run.
  REQUIRE(f.size() == 3);
  CHECK(f[0].function.rfind("symtest_dwarf4::header_step(", 0) == 0);
  CHECK(base_name(f[0].file) == "symtest_dwarf4.hpp");
  CHECK(f[1].function == "twice");  // internal linkage: DW_AT_name only
  CHECK(base_name(f[1].file) == "symtest_dwarf4.cpp");
  CHECK(f[2].function == "symtest_dwarf4::run(int (*)(void*), void*, int)");
  CHECK(base_name(f[2].file) == "symtest_dwarf4.cpp");
  for (const auto& fr : f) CHECK(fr.line > 0);

  // Every unit of the library's file: version 4, and one with DW_AT_ranges.
  const std::string path(sym.module_of(pc));
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  Dwarf* dbg = dwarf_begin(fd, DWARF_C_READ);
  REQUIRE(dbg != nullptr);
  int units = 0, with_ranges = 0;
  Dwarf_Off off = 0, next = 0;
  size_t header = 0;
  Dwarf_Half version = 0;
  while (dwarf_next_unit(dbg, off, &next, &header, &version, nullptr, nullptr, nullptr, nullptr,
                         nullptr) == 0) {
    ++units;
    CHECK(version == 4);
    Dwarf_Die cudie;
    Dwarf_Attribute attr;
    if (dwarf_offdie(dbg, off + header, &cudie) != nullptr &&
        dwarf_attr(&cudie, DW_AT_ranges, &attr) != nullptr)
      ++with_ranges;
    off = next;
  }
  CHECK(units > 0);
  CHECK(with_ranges > 0);
  dwarf_end(dbg);
  close(fd);
}

#ifdef MEMTRACE_HAVE_CLANG_SYMTEST
extern "C" int symtest_clang_run(int (*cb)(void*), void* arg, int n);

// A stack through the Clang-built library: inlined member function and template frames named
// and placed in its source, the out-of-line template instance named by its symbol.
// (libdw 0.188 finds neither the unit, as Clang writes no .debug_aranges, nor any scope in
// it, since Clang defines functions inside their namespace's DIE.)
TEST_CASE("symbolizer: Clang-built library", "[symbolizer]") {
  struct Out {
    uintptr_t pcs[64];
    int n = 0;
  } out;
  symtest_clang_run(
      [](void* arg) -> int {
        auto* o = static_cast<Out*>(arg);
        if (o->n == 0) o->n = memtrace::unwind::capture(o->pcs, 64);
        return 1;
      },
      &out, 2);
  REQUIRE(out.n > 0);
  Symbolizer sym;
  std::string shown;
  bool bump = false, run_typed = false;
  for (int i = 0; i < out.n; ++i) {
    if (base_name(sym.module_of(out.pcs[i] - 1)) != "libunwind_symtest_clang.so") continue;
    for (const auto& fr : sym.frames(out.pcs[i])) {
      shown += std::string(fr.function) + " " + std::string(fr.file) + ":" + std::to_string(fr.line) + "\n";
      if (fr.function.find("Counter::bump") != std::string_view::npos) {
        bump = true;
        CHECK(base_name(fr.file) == "symtest_clang.cpp");
        CHECK(fr.line > 0);
      }
      if (fr.function.rfind("long symtest_clang::run_typed<long>(", 0) == 0) run_typed = true;
    }
  }
  INFO(shown);
  CHECK(bump);
  CHECK(run_typed);
}
#endif

#if defined(MEMTRACE_HAVE_CLANG_SYMTEST) && defined(MEMTRACE_LLVM_SYMBOLIZER)
// On Clang's DWARF, where libdw finds nothing, llvm-symbolizer is the reference: every frame
// (inlined ones included) with the same linkage name, file and line, at every byte of the
// library's code.
TEST_CASE("symbolizer: same frames as llvm-symbolizer on Clang's DWARF", "[symbolizer]") {
  std::vector<Text> texts;
  dl_iterate_phdr(collect_text, &texts);
  const Text* lib = nullptr;
  for (const Text& t : texts)
    if (base_name(t.name) == "libunwind_symtest_clang.so") lib = &t;
  REQUIRE(lib != nullptr);
  std::vector<uintptr_t> pcs;
  for (auto [s, e] : lib->ranges)
    for (uintptr_t pc = s; pc < e; ++pc) pcs.push_back(pc);
  REQUIRE(pcs.size() > 1000);

  // One llvm-symbolizer run over every address (file offsets = runtime address - load bias).
  char in_path[] = "/tmp/memtrace_llvmsym_XXXXXX";
  const int fd = mkstemp(in_path);
  REQUIRE(fd >= 0);
  {
    std::string text;
    for (uintptr_t pc : pcs) text += hex(pc - lib->base) + "\n";
    REQUIRE(write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()));
    close(fd);
  }
  const std::string cmd = "'" + std::string(MEMTRACE_LLVM_SYMBOLIZER) + "' '--obj=" + lib->name +
                          "' --inlining --functions=linkage --no-demangle < '" + in_path + "'";
  FILE* pipe = popen(cmd.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::vector<std::vector<RefFrame>> refs(1);
  {
    char buf[4096];
    std::string name;
    bool have_name = false;
    while (std::fgets(buf, sizeof buf, pipe) != nullptr) {
      std::string line(buf, std::strcspn(buf, "\n"));
      if (line.empty()) {
        refs.emplace_back();
        continue;
      }
      if (!have_name) {
        name = line;
        have_name = true;
        continue;
      }
      have_name = false;
      // FILE:LINE:COLUMN
      const size_t c2 = line.rfind(':');
      const size_t c1 = c2 == std::string::npos || c2 == 0 ? std::string::npos : line.rfind(':', c2 - 1);
      RefFrame f;
      f.function = name == "??" ? "" : reference_demangle(name.c_str());
      if (c1 != std::string::npos) {
        f.file = line.substr(0, c1);
        f.line = std::atoi(line.c_str() + c1 + 1);
      }
      if (f.file == "??") f.file.clear();
      refs.back().push_back(f);
    }
  }
  pclose(pipe);
  unlink(in_path);
  while (!refs.empty() && refs.back().empty()) refs.pop_back();
  REQUIRE(refs.size() == pcs.size());

  Symbolizer sym;
  size_t compared = 0, inlined = 0;
  for (size_t i = 0; i < pcs.size(); ++i) {
    const auto& ref = refs[i];
    // Only the library's own code: the C runtime's objects have no DWARF, and llvm-symbolizer
    // names their source from STT_FILE symbols.
    if (ref.empty() || ref.back().function.empty() || !ref.back().file.ends_with("symtest_clang.cpp")) continue;
    const auto got = sym.frames(pcs[i] + 1);
    INFO("offset " << hex(pcs[i] - lib->base));
    REQUIRE(got.size() == ref.size());
    for (size_t k = 0; k < ref.size(); ++k) {
      INFO("frame " << k);
      CHECK(got[k].function == ref[k].function);
      CHECK(got[k].file == ref[k].file);
      CHECK(got[k].line == ref[k].line);
    }
    ++compared;
    inlined += ref.size() > 1;
  }
  INFO("compared " << compared << ", with inlined frames " << inlined);
  CHECK(compared > 300);
  CHECK(inlined > 100);
  CHECK(sym.unit_counts().units >= 1);
  CHECK(sym.unit_counts().by_libdw == 0);
}
#endif

// prepare()'s threads share one lock around elfutils. A child forked while another thread
// of the parent held it (a snapshot being written) must still be able to symbolize: its own
// snapshot at exit would otherwise wait forever.
TEST_CASE("symbolizer: a child forked while the elfutils lock is held symbolizes", "[symbolizer]") {
  std::mutex m;
  std::condition_variable cv;
  bool held = false, release = false;
  std::thread holder([&] {
    memtrace::unwind::detail::LibdwLock lock(memtrace::unwind::detail::libdw_mutex());
    std::unique_lock g(m);
    held = true;
    cv.notify_all();
    cv.wait(g, [&] { return release; });
  });
  {
    std::unique_lock g(m);
    cv.wait(g, [&] { return held; });
  }
  uintptr_t pcs[16];
  const int n = exe_static_capture(pcs, 16);
  REQUIRE(n >= 2);
  const pid_t pid = fork();
  if (pid == 0) {
    alarm(30);  // a child that waits for the lock dies of SIGALRM: the test fails, not hangs
    Symbolizer sym;
    const auto f = sym.frames(pcs[1]);
    _exit(f.size() == 1 && f[0].function == "exe_static_capture(unsigned long*, int)" ? 0 : 3);
  }
  {
    std::lock_guard g(m);
    release = true;
  }
  cv.notify_all();
  holder.join();
  REQUIRE(pid > 0);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  INFO("status " << status);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}
