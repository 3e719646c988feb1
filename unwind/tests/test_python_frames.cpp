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
