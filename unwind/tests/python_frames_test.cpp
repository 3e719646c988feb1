// The CPython location-table decoder on hand-made tables (one entry of every kind), and the
// contract of the capture side in a process that runs no Python.
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "unwind/python_frames.hpp"

using namespace memtrace::unwind;

TEST_CASE("location table: every entry kind moves the line as CPython's table says") {
  // first line 10
  const std::vector<uint8_t> t = {
      0xE8, 0x04,              // code 13 (no columns), 1 unit, delta +2          -> unit 0: 12
      0xF9,                    // code 15 (no location), 2 units                  -> units 1-2: -1
      0xDA, 0x05, 0x09,        // code 11 (one line, +1), 3 units, two columns    -> units 3-5: 13
      0xF0, 0x03, 0x00, 0x01, 0x02,  // code 14 (long), 1 unit, delta -1, columns -> unit 6: 12
      0x81, 0x10,              // code 0 (short form, same line), 2 units         -> units 7-8: 12
      0xE0, 0x0A,              // code 12 (one line, +2), 1 unit, one column byte -> unit 9: 14
  };
  auto line = [&](int unit) { return python_line_from_location_table(t.data(), t.size(), 10, unit); };
  CHECK(line(0) == 12);
  CHECK(line(1) == -1);
  CHECK(line(2) == -1);
  CHECK(line(3) == 13);
  CHECK(line(5) == 13);
  CHECK(line(6) == 12);
  CHECK(line(7) == 12);
  CHECK(line(8) == 12);
  CHECK(line(9) == 14);
  CHECK(line(10) == -1);  // past the end
}

TEST_CASE("location table: multi-byte varints and truncated tables") {
  // code 13, delta +100: zig-zag 200 = 0b11001000 -> low 6 bits 0b001000 with continuation, then 3
  const std::vector<uint8_t> t = {0xE8, 0x48, 0x03};
  CHECK(python_line_from_location_table(t.data(), t.size(), 1, 0) == 101);
  const std::vector<uint8_t> cut = {0xE8};
  CHECK(python_line_from_location_table(cut.data(), cut.size(), 1, 0) == 1);
  CHECK(python_line_from_location_table(nullptr, 0, 1, 0) == -1);
}

TEST_CASE("no Python in this process: nothing captured, nothing described") {
  uintptr_t out[8];
  CHECK_FALSE(python_present());
  CHECK(capture_python(out, 8) == 0);
  PythonFrameInfo info;
  CHECK_FALSE(describe_python_frame(kPythonFrameTag | (uintptr_t{1} << 32) | 7, &info));
  CHECK_FALSE(describe_python_frame(0x401000, &info));
  CHECK(python_support() == "none");
}

// ---------------------------------------------------------------------------------------------
// The direct walk over hand-built frames: right names and lines on a good chain, and a failed
// walk (never a crash, never a hang) on every kind of broken one.
// ---------------------------------------------------------------------------------------------

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <memory>
#include <string>

#include "unwind/python_debug_offsets.h"
#include "unwind/python_layout.hpp"
#include "unwind/python_walk.hpp"
#include "unwind/readable_memory.hpp"

namespace {

// Objects laid out as the given PythonLayout says, in memory the test owns.
struct FakeInterpreter {
  PythonLayout l;
  PythonTypes types;
  alignas(16) char code_type[64] = {}, str_type[64] = {}, bytes_type[64] = {};
  std::vector<std::unique_ptr<uint64_t[]>> blocks;

  explicit FakeInterpreter(const PythonLayout& layout) : l(layout) {
    types.code = reinterpret_cast<uintptr_t>(code_type);
    types.unicode = reinterpret_cast<uintptr_t>(str_type);
    types.bytes = reinterpret_cast<uintptr_t>(bytes_type);
  }
  uint8_t* block(size_t bytes) {
    blocks.emplace_back(new uint64_t[(bytes + 7) / 8 + 1]());
    return reinterpret_cast<uint8_t*>(blocks.back().get());
  }
  template <class T>
  static void put(uint8_t* base, uint32_t off, T v) { std::memcpy(base + off, &v, sizeof v); }

  uintptr_t str(const std::string& s) {
    uint8_t* o = block(l.str_ascii_data + s.size() + 1);
    put<uintptr_t>(o, l.ob_type, types.unicode);
    put<int64_t>(o, l.str_length, static_cast<int64_t>(s.size()));
    put<uint32_t>(o, l.str_state, (1u << 2) | (1u << 5) | (1u << 6));  // kind 1, compact, ascii
    std::memcpy(o + l.str_ascii_data, s.data(), s.size());
    return reinterpret_cast<uintptr_t>(o);
  }
  uintptr_t bytes(const std::vector<uint8_t>& b) {
    uint8_t* o = block(l.bytes_data + b.size() + 1);
    put<uintptr_t>(o, l.ob_type, types.bytes);
    put<int64_t>(o, l.bytes_size, static_cast<int64_t>(b.size()));
    std::memcpy(o + l.bytes_data, b.data(), b.size());
    return reinterpret_cast<uintptr_t>(o);
  }
  // A code object named `name` starting at `first_line`, whose location table says: code unit i
  // is on line first_line + i (one one-unit entry "one line down" per unit, after the first).
  uintptr_t code(const std::string& file, const std::string& name, int first_line) {
    uint8_t* o = block(l.code_adaptive + 64);
    put<uintptr_t>(o, l.ob_type, types.code);
    put<uintptr_t>(o, l.code_filename, str(file));
    put<uintptr_t>(o, l.code_qualname, str(name));
    std::vector<uint8_t> table = {0x80 | (10 << 3)};  // unit 0: same line (short form, code 10)
    table.push_back(0);
    for (int i = 1; i < 16; ++i) table.push_back(0x80 | (11 << 3));  // one line down each
    put<uintptr_t>(o, l.code_linetable, bytes(table));
    put<int>(o, l.code_firstlineno, first_line);
    if (l.code_firsttraceable >= 0) put<int>(o, static_cast<uint32_t>(l.code_firsttraceable), 0);
    return reinterpret_cast<uintptr_t>(o);
  }
  // A frame running `code` at code unit `unit`, called from `previous`.
  uintptr_t frame(uintptr_t code, int unit, uintptr_t previous, int owner = 0) {
    uint8_t* o = block(l.frame_span() + 8);
    put<uintptr_t>(o, l.frame_code, code);
    put<uintptr_t>(o, l.frame_previous, previous);
    // prev_instr (3.11/3.12) points at the last instruction run; instr_ptr at the current one.
    put<uintptr_t>(o, l.frame_instr, code + l.code_adaptive + 2 * static_cast<uintptr_t>(unit));
    put<char>(o, l.frame_owner, static_cast<char>(owner));
    return reinterpret_cast<uintptr_t>(o);
  }
};

struct TestNamer final : CodeNamer {
  const FakeInterpreter& fi;
  std::map<uintptr_t, uint32_t> ids;
  std::map<uint32_t, std::pair<std::string, std::string>> names;
  explicit TestNamer(const FakeInterpreter& f) : fi(f) {}
  uint32_t id_for(const CodeFacts& f) override {
    auto it = ids.find(f.code);
    if (it != ids.end()) return it->second;
    uint32_t id = static_cast<uint32_t>(ids.size() + 1);
    ids[f.code] = id;
    std::string file, name;
    read_python_str(fi.l, fi.types, f.filename, &file);
    read_python_str(fi.l, fi.types, f.qualname, &name);
    names[id] = {file, name};
    return id;
  }
  int line_for(uint32_t, const CodeFacts& f, int index) override {
    uintptr_t data = 0;
    size_t size = 0;
    if (!python_bytes_span(fi.l, fi.types, f.linetable, &data, &size)) return 0;
    return python_line_from_location_table(reinterpret_cast<const uint8_t*>(data), size, f.first_line, index);
  }
  std::string name_of(uintptr_t tagged) {
    return names[static_cast<uint32_t>((tagged & ~kPythonFrameTag) >> 32)].second;
  }
};

int line_of(uintptr_t tagged) { return static_cast<int>(static_cast<uint32_t>(tagged)); }

// A page nothing may read: the walk must refuse pointers into it.
uintptr_t forbidden_page() {
  static void* p = mmap(nullptr, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return reinterpret_cast<uintptr_t>(p);
}

PythonLayout layout(int minor) {
  PythonLayout l;
  REQUIRE(python_table_layout(minor, &l));
  return l;
}

}  // namespace

TEST_CASE("direct walk: names and lines of a good chain, innermost first (3.11 and 3.12 layouts)") {
  for (int minor : {11, 12}) {
    FakeInterpreter fi(layout(minor));
    uintptr_t main_code = fi.code("/app/train.py", "<module>", 1);
    uintptr_t fn_code = fi.code("/app/train.py", "Model.build", 20);
    uintptr_t f0 = fi.frame(main_code, 4, 0);
    uintptr_t f1 = fi.frame(fn_code, 2, f0);
    TestNamer namer(fi);
    uintptr_t out[8];
    PythonWalk w = walk_python_frames(fi.l, fi.types, f1, namer, out, 8);
    REQUIRE_FALSE(w.failed);
    REQUIRE(w.frames == 2);
    CHECK(namer.name_of(out[0]) == "Model.build");
    CHECK(line_of(out[0]) == 22);
    CHECK(namer.name_of(out[1]) == "<module>");
    CHECK(line_of(out[1]) == 5);
    CHECK(w.groups == 1);
  }
}

TEST_CASE("direct walk: entry shims split eval calls into groups; 3.14's tagged executables") {
  PythonLayout l = layout(12);
  FakeInterpreter fi(l);
  uintptr_t a = fi.code("/app/a.py", "outer", 1), b = fi.code("/app/a.py", "callback", 10);
  uintptr_t outer = fi.frame(a, 1, 0);
  uintptr_t shim = fi.frame(0, 0, outer, 3);  // FRAME_OWNED_BY_CSTACK
  uintptr_t inner = fi.frame(b, 0, shim);
  TestNamer namer(fi);
  uintptr_t out[8];
  PythonWalk w = walk_python_frames(fi.l, fi.types, inner, namer, out, 8);
  REQUIRE(w.frames == 2);
  REQUIRE(w.groups == 2);
  CHECK(w.group_end[0] == 1);
  CHECK(w.group_end[1] == 2);

  // 3.14 keeps tag bits in the low bits of f_executable, and may run frames whose executable is
  // not code (skipped, not a failure).
  l.minor = 14;
  l.executable_tagged = true;
  l.code_firsttraceable = -1;
  FakeInterpreter f14(l);
  uintptr_t c = f14.code("/app/b.py", "step", 5);
  uintptr_t none_obj = f14.str("None");  // an executable that is not a code object
  uintptr_t base = f14.frame(c, 3, 0);
  uintptr_t odd = f14.frame(none_obj, 0, base);
  uintptr_t top = f14.frame(c | 1, 1, odd);
  TestNamer n14(f14);
  PythonWalk w14 = walk_python_frames(f14.l, f14.types, top, n14, out, 8);
  REQUIRE_FALSE(w14.failed);
  REQUIRE(w14.frames == 2);
  CHECK(line_of(out[0]) == 6);
  CHECK(line_of(out[1]) == 8);
}

TEST_CASE("direct walk: a broken chain fails the walk and nothing is kept") {
  FakeInterpreter fi(layout(12));
  uintptr_t code = fi.code("/app/a.py", "f", 1);
  TestNamer namer(fi);
  uintptr_t out[64];

  SECTION("a loop") {
    uintptr_t f0 = fi.frame(code, 0, 0);
    uintptr_t f1 = fi.frame(code, 0, f0);
    std::memcpy(reinterpret_cast<void*>(f0 + fi.l.frame_previous), &f1, sizeof f1);  // f0 -> f1 -> f0
    PythonWalk w = walk_python_frames(fi.l, fi.types, f1, namer, out, 64);
    CHECK(w.failed);
    CHECK(w.frames == 0);
  }
  SECTION("a frame pointer into unreadable memory") {
    uintptr_t f0 = fi.frame(code, 0, forbidden_page() + 64);
    PythonWalk w = walk_python_frames(fi.l, fi.types, f0, namer, out, 64);
    CHECK(w.failed);
  }
  SECTION("a code pointer into unreadable memory, or to something that is not code") {
    PythonWalk w = walk_python_frames(fi.l, fi.types, fi.frame(forbidden_page() + 8, 0, 0), namer, out, 64);
    CHECK(w.failed);
    PythonWalk w2 = walk_python_frames(fi.l, fi.types, fi.frame(fi.str("x"), 0, 0), namer, out, 64);
    CHECK(w2.failed);
  }
  SECTION("a misaligned or wild frame pointer") {
    CHECK(walk_python_frames(fi.l, fi.types, fi.frame(code, 0, 0) + 3, namer, out, 64).failed);
    CHECK(walk_python_frames(fi.l, fi.types, 0x10, namer, out, 64).failed);
    CHECK(walk_python_frames(fi.l, fi.types, uintptr_t{0x7ff0} << 32, namer, out, 64).failed);
  }
  SECTION("a chain longer than any real one") {
    uintptr_t f = 0;
    for (int i = 0; i < kMaxPythonSteps + 10; ++i) f = fi.frame(code, 0, f);
    PythonWalk w = walk_python_frames(fi.l, fi.types, f, namer, out, 64);
    CHECK(w.truncated);  // 64 frames written, the walk stops there: bounded either way
    CHECK(w.frames == 64);
    PythonWalk all = walk_python_frames(fi.l, fi.types, f, namer, out, 0);
    CHECK((all.truncated || all.failed));
  }
  SECTION("names that are not str objects are refused, not read") {
    std::string s;
    CHECK_FALSE(read_python_str(fi.l, fi.types, forbidden_page(), &s));
    CHECK_FALSE(read_python_str(fi.l, fi.types, fi.bytes({1, 2, 3}), &s));
    uintptr_t huge = fi.str("abc");
    int64_t len = int64_t{1} << 40;
    std::memcpy(reinterpret_cast<void*>(huge + fi.l.str_length), &len, sizeof len);
    CHECK_FALSE(read_python_str(fi.l, fi.types, huge, &s));
  }
}

TEST_CASE("safe_read: readable memory copied, unreadable and unmapped refused, new mappings seen") {
  uint64_t v = 0x1122334455667788ull, got = 0;
  CHECK(safe_read(reinterpret_cast<uintptr_t>(&v), &got, sizeof got));
  CHECK(got == v);
  CHECK_FALSE(safe_read(forbidden_page(), &got, sizeof got));
  CHECK_FALSE(safe_read(0, &got, sizeof got));
  CHECK_FALSE(safe_read(UINTPTR_MAX - 3, &got, sizeof got));
  void* m = mmap(nullptr, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(m != MAP_FAILED);
  static_cast<uint64_t*>(m)[1] = 42;
  CHECK(safe_read(reinterpret_cast<uintptr_t>(m) + 8, &got, sizeof got));  // mapped after the table
  CHECK(got == 42);
  munmap(m, 8192);
  safe_memory_reset();
  CHECK_FALSE(safe_read(reinterpret_cast<uintptr_t>(m) + 8, &got, sizeof got));
}

namespace {
// A _Py_DebugOffsets table of 3.13's shape with the values a real 3.13 interpreter publishes for
// the fields memtrace reads.
std::vector<uint8_t> debug_table_313() {
  std::vector<uint8_t> t(MT_PYDBG313_SIZE, 0);
  auto put = [&](size_t at, uint64_t v) { std::memcpy(t.data() + at, &v, sizeof v); };
  std::memcpy(t.data(), "xdebugpy", 8);
  put(MT_PYDBG_VERSION, 0x030D05F0);
  put(MT_PYDBG313_TS_CURRENT_FRAME, 72);
  put(MT_PYDBG313_FRAME_PREVIOUS, 8);
  put(MT_PYDBG313_FRAME_EXECUTABLE, 0);
  put(MT_PYDBG313_FRAME_INSTR_PTR, 56);
  put(MT_PYDBG313_FRAME_OWNER, 70);
  put(MT_PYDBG313_CODE_FILENAME, 112);
  put(MT_PYDBG313_CODE_QUALNAME, 128);
  put(MT_PYDBG313_CODE_LINETABLE, 136);
  put(MT_PYDBG313_CODE_FIRSTLINENO, 68);
  put(MT_PYDBG313_CODE_ADAPTIVE, 200);
  put(MT_PYDBG313_OB_TYPE, 8);
  put(MT_PYDBG313_BYTES_SIZE, 16);
  put(MT_PYDBG313_BYTES_DATA, 32);
  put(MT_PYDBG313_STR_STATE, 32);
  put(MT_PYDBG313_STR_LENGTH, 16);
  put(MT_PYDBG313_STR_ASCII_SIZE, 40);
  return t;
}
}  // namespace

TEST_CASE("_Py_DebugOffsets: a sane table is used, a damaged one refused with its reason") {
  PythonLayout l;
  const char* why = nullptr;
  auto t = debug_table_313();
  REQUIRE(python_debug_offsets_layout(t.data(), t.size(), 13, &l, &why));
  CHECK(l.ts_frame == 72);
  CHECK(l.frame_instr == 56);
  CHECK(l.str_compact_data == 56);
  CHECK_FALSE(l.free_threaded);
  CHECK_FALSE(l.via_cframe);

  auto refused = [&](std::vector<uint8_t> bad, int minor, const char* reason_part) {
    PythonLayout x;
    const char* r = nullptr;
    bool ok = python_debug_offsets_layout(bad.data(), bad.size(), minor, &x, &r);
    CHECK_FALSE(ok);
    REQUIRE(r != nullptr);
    CHECK(std::string(r).find(reason_part) != std::string::npos);
  };
  auto with = [&](size_t at, uint64_t v) {
    auto b = debug_table_313();
    std::memcpy(b.data() + at, &v, sizeof v);
    return b;
  };
  refused(with(0, 0x6d7564626578ull), 13, "cookie");
  refused(with(MT_PYDBG_VERSION, 0x030E00F0), 13, "another Python version");
  refused(debug_table_313(), 14, "could not be read whole");  // 3.14's table is larger
  refused(with(MT_PYDBG313_TS_CURRENT_FRAME, 1 << 20), 13, "out of bounds");
  refused(with(MT_PYDBG313_FRAME_PREVIOUS, 13), 13, "out of bounds");  // a misaligned pointer field
  refused(with(MT_PYDBG313_CODE_QUALNAME, 112), 13, "overlap");
  refused(with(MT_PYDBG313_CODE_ADAPTIVE, 16), 13, "before its header");
  refused(with(MT_PYDBG_FREE_THREADED, 7), 13, "free_threaded");
  auto ft = with(MT_PYDBG_FREE_THREADED, 1);
  REQUIRE(python_debug_offsets_layout(ft.data(), ft.size(), 13, &l, &why));
  CHECK(l.free_threaded);  // recognised; python_frames.cpp then keeps to the GIL-only path
  CHECK(python_debug_offsets_size(15) == 0);
}
