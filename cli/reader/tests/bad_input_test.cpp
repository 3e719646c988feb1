// Every class of bad input becomes one LoadError line that names the file and (for pickle-level
// problems) the byte offset; nothing crashes, hangs or allocates without bound.
#include <catch2/catch.hpp>
#include <string>

#include "cli/reader/snapshot.hpp"
#include "test_util.hpp"

using namespace std::string_literals;

using namespace memtrace::reader;
namespace t = memtrace::reader::test;

namespace {

std::string error_of(std::string_view bytes) {
  LoadResult r = load_snapshot_bytes(bytes, "bad.pickle");
  if (!r.error) return "<no error>";
  CHECK_FALSE(r.snapshot.has_value());
  CHECK(r.error->message.find('\n') == std::string::npos);
  CHECK(r.error->message.rfind("bad.pickle: ", 0) == 0);
  return r.error->message;
}

// {'segments': [], 'device_traces': [[<entry>]]} with the given entry dict body (pairs).
std::string with_entry(const std::string& pairs) {
  return "\x80\x04}(" + t::sbu("segments") + "]" + t::sbu("device_traces") + "]]}(" + pairs + "ua" + "a" + "u.";
}

}  // namespace

TEST_CASE("a minimal snapshot loads (the baseline the bad cases below break)") {
  std::string ok = with_entry(t::sbu("action") + t::sbu("alloc") + t::sbu("size") + "K\x05");
  LoadResult r = load_snapshot_bytes(ok, "ok.pickle");
  REQUIRE_FALSE(r.error.has_value());
  REQUIRE(r.snapshot->device_traces.size() == 1);
  REQUIRE(r.snapshot->device_traces[0].size() == 1);
  CHECK(r.snapshot->device_traces[0][0].size == 5);
}

TEST_CASE("truncated files: every prefix of a snapshot is an error") {
  t::TempDir dir;
  REQUIRE(t::make_pytorch_pickles(dir));
  for (int p : {0, 2, 4}) {
    std::string full = t::read_file(dir / ("pytorch_p" + std::to_string(p) + ".pickle"));
    REQUIRE(full.size() > 100);
    for (size_t n = 0; n < full.size(); ++n) {
      LoadResult r = load_snapshot_bytes(std::string_view(full).substr(0, n), "cut.pickle");
      if (!r.error) FAIL("protocol " << p << ": prefix of " << n << " bytes loaded");
    }
  }
  CHECK_THAT(error_of(""), Catch::Contains("empty file"));
  CHECK_THAT(error_of("\x80\x04]"), Catch::Contains("truncated: no STOP opcode at byte 3"));
  CHECK_THAT(error_of("\x80\x04X" + t::u32le(16) + "abc"), Catch::Contains("truncated: BINUNICODE (0x58) needs 16 bytes, 3 left at byte 2"));
}

TEST_CASE("not a pickle, or a pickle of something else") {
  CHECK_THAT(error_of("xhello world\n"), Catch::Contains("unknown opcode 0x78 at byte 0"));
  CHECK_THAT(error_of("{\"segments\": []}"), Catch::Contains("not a pickle"));
  CHECK_THAT(error_of("\x80\x06}."), Catch::Contains("unsupported pickle protocol 6"));
  // A pickled int, a string.
  CHECK_THAT(error_of("\x80\x04K\x07."), Catch::Contains("not a snapshot: the pickle holds a int"));
  CHECK_THAT(error_of("\x80\x04" + t::sbu("x") + "."), Catch::Contains("not a snapshot: the pickle holds a str"));
  // A list of ints reads as a legacy segment list whose first item is not a segment.
  CHECK_THAT(error_of("\x80\x04](K\x01K\x02" "e."), Catch::Contains("segments[0] is a int, expected a segment dict"));
  // A dict without the snapshot keys.
  CHECK_THAT(error_of("\x80\x04}(" + t::sbu("a") + "K\x01u."), Catch::Contains("no 'segments' and no 'device_traces' key"));
  CHECK_THAT(error_of("\x80\x04}(" + t::sbu("segments") + "]u."), Catch::Contains("has no 'device_traces' key"));
  CHECK_THAT(error_of("\x80\x04}(" + t::sbu("device_traces") + "]u."), Catch::Contains("has no 'segments' key"));
}

TEST_CASE("wrong types") {
  CHECK_THAT(error_of(with_entry(t::sbu("action") + t::sbu("alloc") + t::sbu("size") + t::sbu("big"))), Catch::Contains("device_traces[0][0]: 'size' is a str, expected an int"));
  CHECK_THAT(error_of(with_entry(t::sbu("action") + "K\x01")), Catch::Contains("'action' is a int, expected a str"));
  CHECK_THAT(error_of(with_entry(t::sbu("size") + "K\x01" + t::sbu("addr") + "K\x01")), Catch::Contains("no 'action' key"));
  CHECK_THAT(error_of(with_entry(t::sbu("action") + t::sbu("alloc") + t::sbu("frames") + "K\x01")), Catch::Contains("'frames' is a int, expected a list"));
  CHECK_THAT(error_of(with_entry(t::sbu("action") + t::sbu("alloc") + t::sbu("frames") + "](K\x01K\x02" "e")), Catch::Contains("'frames': a frame is a int, expected a dict"));
  // 2**64 in 'addr' is out of range; 2**64 - 1 is fine.
  CHECK_THAT(error_of(with_entry(t::sbu("action") + t::sbu("alloc") + t::sbu("addr") +
                                     std::string("\x8a\x09\0\0\0\0\0\0\0\0\x01", 11))), Catch::Contains("'addr' is an integer out of range"));
  std::string top = "\x80\x04}(" + t::sbu("segments") + "K\x01" + t::sbu("device_traces") + "]u.";
  CHECK_THAT(error_of(top), Catch::Contains("'segments' is a int, expected a list"));
  top = "\x80\x04}(" + t::sbu("segments") + "]" + t::sbu("device_traces") + "](K\x01" "eu.";
  CHECK_THAT(error_of(top), Catch::Contains("device_traces[0] is a int, expected a list"));
  // A segment without 'blocks', and a block whose size is a float.
  std::string seg = "}(" + t::sbu("address") + "K\x00"s + t::sbu("total_size") + "K\x10u";
  top = "\x80\x04}(" + t::sbu("segments") + "](" + seg + "e" + t::sbu("device_traces") + "]u.";
  CHECK_THAT(error_of(top), Catch::Contains("segments[0]: no 'blocks' key"));
  seg = "}(" + t::sbu("address") + "K\x00"s + t::sbu("total_size") + "K\x10" + t::sbu("blocks") + "]}(" +
        t::sbu("size") + "G" + std::string(8, '\0') + t::sbu("state") + t::sbu("inactive") + "uau";
  top = "\x80\x04}(" + t::sbu("segments") + "](" + seg + "e" + t::sbu("device_traces") + "]u.";
  CHECK_THAT(error_of(top), Catch::Contains("segments[0].blocks[0]: 'size' is a float, expected an int"));
}

TEST_CASE("hostile sizes are checked before anything is allocated") {
  CHECK_THAT(error_of("\x80\x04\x8d" + t::u64le(uint64_t{1} << 60) + "abc."), Catch::Contains("truncated: BINUNICODE8"));
  CHECK_THAT(error_of("\x80\x04\x8e" + t::u64le(~uint64_t{0}) + "abc."), Catch::Contains("truncated: BINBYTES8"));
  CHECK_THAT(error_of("\x80\x04\x8b" + t::u32le(0x7fffffff) + "abc."), Catch::Contains("truncated: LONG4"));
  CHECK_THAT(error_of("\x80\x04\x8b" + t::u32le(0x80000000) + "abc."), Catch::Contains("LONG4 with a negative length"));
  CHECK_THAT(error_of("\x80\x04T" + t::u32le(0x80000000) + "abc."), Catch::Contains("negative length"));
  CHECK_THAT(error_of("\x80\x04X" + t::u32le(0xffffffff) + "abc."), Catch::Contains("truncated: BINUNICODE"));
  // A huge LONG4 that is present in full is only "out of range", not an allocation.
  std::string big = "\x80\x04\x8b" + t::u32le(1 << 20) + std::string(1 << 20, '\x7f') + ".";
  CHECK_THAT(error_of(big), Catch::Contains("the pickle holds a int"));
}

TEST_CASE("hostile depth: a million nested lists or marks") {
  const size_t n = 1000000;
  std::string nested = "\x80\x04" + std::string(n, ']') + std::string(n - 1, 'a') + ".";
  CHECK_THAT(error_of(nested), Catch::Contains("segments[0] is a list, expected a segment dict"));
  std::string marks = "\x80\x04" + std::string(n, '(') + ".";
  CHECK_THAT(error_of(marks), Catch::Contains("nesting deeper than 10000 marks"));
  // A list that contains itself.
  CHECK_THAT(error_of("\x80\x04]\x94h\x00"s "a."), Catch::Contains("segments[0] is a list"));
}

TEST_CASE("memo and stack misuse") {
  CHECK_THAT(error_of("\x80\x04h\x05."), Catch::Contains("BINGET (0x68) of memo index 5, which was never stored at byte 2"));
  CHECK_THAT(error_of("\x80\x04j" + t::u32le(0xfffffff0) + "."), Catch::Contains("memo index 4294967280, which was never stored"));
  CHECK_THAT(error_of("\x80\x02g12\n."), Catch::Contains("GET (0x67) of memo index 12"));
  // A far LONG_BINPUT costs one entry, and the value can be fetched back.
  CHECK_THAT(error_of("\x80\x04K\x01r" + t::u32le(0xfffffff0) + "0j" + t::u32le(0xfffffff0) + "."), Catch::Contains("the pickle holds a int"));
  // MEMOIZE after a far PUT: Python's len(memo) is then beyond the dense memo (a fuzzer find).
  CHECK_THAT(error_of("\x80\x04K\x01r" + t::u32le(0xfffffff0) + "\x94h\x01."), Catch::Contains("the pickle holds a int"));
  CHECK_THAT(error_of("\x80\x04."), Catch::Contains("STOP with an empty stack"));
  CHECK_THAT(error_of("\x80\x04" "e."), Catch::Contains("APPENDS (0x65) without MARK"));
  CHECK_THAT(error_of("\x80\x04(K\x01u."), Catch::Contains("SETITEMS with no dict to fill"));
  CHECK_THAT(error_of("\x80\x04}(K\x01u."), Catch::Contains("odd number of items"));
  CHECK_THAT(error_of("\x80\x04K\x01K\x02" "a."), Catch::Contains("APPEND to a int"));
  CHECK_THAT(error_of("\x80\x04(\x86."), Catch::Contains("TUPLE2 (0x86) needs 2 items"));
}

TEST_CASE("object construction is refused") {
  CHECK_THAT(error_of("cos\nsystem\n(S'echo hi'\ntR."), Catch::Contains("refusing to load global os.system"));
  CHECK_THAT(error_of("\x80\x04" + t::sbu("os") + t::sbu("system") + "\x93."), Catch::Contains("refusing STACK_GLOBAL"));
  CHECK_THAT(error_of("\x80\x04K\x01)R."), Catch::Contains("refusing REDUCE of a int"));
  CHECK_THAT(error_of("\x80\x02" "cbuiltins\nbytes\n(K\x01tR."), Catch::Contains("bytes/bytearray with unexpected arguments"));
  CHECK_THAT(error_of("\x80\x04" "P1\n."), Catch::Contains("refusing PERSID"));
  CHECK_THAT(error_of("\x80\x05\x97."), Catch::Contains("refusing NEXT_BUFFER"));
}

TEST_CASE("a sealed container changed after it was read is refused") {
  // The frames list of an entry gets one more frame after the entry consumed it.
  std::string frame = "}(" + t::sbu("filename") + t::sbu("a.py") + t::sbu("name") + t::sbu("f") + t::sbu("line") + "K\x01u";
  std::string p = "\x80\x04}(" + t::sbu("segments") + "]" + t::sbu("device_traces") + "]]}(" + t::sbu("action") +
                  t::sbu("alloc") + t::sbu("frames") + "]\x94" + frame + "a" + "ua" + "ah\x00"s + frame + "a" + "u.";
  CHECK_THAT(error_of(p), Catch::Contains("APPEND (0x61) changes a container after it was read"));
}

TEST_CASE("load_snapshot errors name the path") {
  LoadResult r = load_snapshot("/nonexistent/dir/snap.pickle");
  REQUIRE(r.error.has_value());
  CHECK(r.error->message == "/nonexistent/dir/snap.pickle: cannot open: No such file or directory");
  t::TempDir dir;
  r = load_snapshot(dir.path());
  REQUIRE(r.error.has_value());
  CHECK_THAT(r.error->message, Catch::Contains("is a directory"));
  t::write_file(dir / "empty.pickle", "");
  r = load_snapshot(dir / "empty.pickle");
  REQUIRE(r.error.has_value());
  CHECK(r.error->message == dir / "empty.pickle" + ": empty file");
}

TEST_CASE("containers shared through the memo cannot make decoding quadratic or multiply the output") {
  // One segment dict with 20,000 unknown keys, listed 20,000 times by BINGET: 4e8 key visits.
  std::string seg = "}\x94(";
  for (int i = 0; i < 20000; ++i) seg += "J" + t::u32le(static_cast<uint32_t>(i)) + "K\x01";
  seg += t::sbu("address") + "K\x01" + t::sbu("total_size") + "K\x01" + t::sbu("blocks") + "]u";
  std::string segs = "](" + seg;
  for (int i = 0; i < 20000; ++i) segs += "h\x00"s;
  segs += "e";
  std::string p = "\x80\x04}(" + t::sbu("segments") + segs + t::sbu("device_traces") + "]u.";
  CHECK_THAT(error_of(p), Catch::Contains("decode to far more than its size"));
  // One 10,000-entry device list repeated 10,000 times: 1e8 entries from 300 kB.
  std::string entry = "}(" + t::sbu("action") + t::sbu("alloc") + "u";
  std::string list = "]\x94(";
  for (int i = 0; i < 10000; ++i) list += entry;
  list += "e";
  std::string dev = "](" + list;
  for (int i = 0; i < 10000; ++i) dev += "h\x00"s;
  dev += "e";
  p = "\x80\x04}(" + t::sbu("segments") + "]" + t::sbu("device_traces") + dev + "u.";
  CHECK_THAT(error_of(p), Catch::Contains("decode to far more than its size"));
  // A list holding itself 32 times, shown in allocator_settings: the repr stops early.
  std::string self = "]\x94(";
  for (int i = 0; i < 32; ++i) self += "h\x00"s;
  self += "e";
  p = "\x80\x04}(" + t::sbu("segments") + "]" + t::sbu("device_traces") + "]" + t::sbu("allocator_settings") + "}(" +
      t::sbu("x") + self + "uu.";
  LoadResult r = load_snapshot_bytes(p, "self.pickle");
  REQUIRE_FALSE(r.error.has_value());
  REQUIRE(r.snapshot->settings.size() == 1);
  CHECK(r.snapshot->settings[0].second.size() < 4096);
}
