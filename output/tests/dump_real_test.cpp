// dump_snapshot() end to end with the real stack table and symbolizer (built only when unwind/
// provides its library). In a test binary memtrace's "own module" is the binary itself, so its
// frames must all be left out; what remains comes from libc and the loader.
#include <catch2/catch.hpp>
#include <string>

#include "output/dump.hpp"
#include "test_util.hpp"
#include "unwind/stack_capture.hpp"
#include "unwind/stack_table.hpp"

using namespace memtrace;
using namespace memtrace::output;
namespace t = memtrace::output::test;

TEST_CASE("dump_snapshot symbolizes, drops memtrace's own frames and writes", "[dump][unwind]") {
  unwind::StackTable table;
  uintptr_t pcs[64];
  int n = unwind::capture(pcs, 64);
  REQUIRE(n > 0);
  uint32_t id = table.intern(pcs, static_cast<uint32_t>(n));
  REQUIRE(id > 0);

  StateCopy s;
  AllocRecord r;
  r.addr = 0x7f0000000000;
  r.size = 1 << 20;
  r.requested = 1000000;
  r.stack_id = id;
  s.live.push_back(r);
  TraceEntry e;
  e.addr = r.addr;
  e.stack_id = id;
  e.time_us = 1767225600000000;
  e.action = Action::SegmentAlloc;
  e.size = r.size;
  s.trace.push_back(e);
  e.action = Action::Alloc;
  e.size = r.requested;
  s.trace.push_back(e);
  s.device_count = 1;
  s.ring_capacity = 16;

  t::TempDir dir;
  DumpRequest req;
  req.path_template = dir / "real-%p-%n.pickle";
  req.sequence = 7;
  req.print_summary = false;
  req.kind = DumpKind::Signal;
  DumpReport rep = dump_snapshot(s, table, req);
  INFO(rep.error);
  REQUIRE(rep.written);
  CHECK(rep.path == dir / ("real-" + std::to_string(getpid()) + "-7.pickle"));
  std::string out;
  int rc = t::run(t::python() + " '" + t::checker() + "' '" + rep.path +
                      "' --expect-json '{\"segments\": 1, \"no_frame_files\": [\"output_tests\"], "
                      "\"metadata\": {\"reason\": \"signal\", \"dump_sequence\": 7}}'",
                  &out);
  INFO(out);
  CHECK(rc == 0);

  // The next dump of the unchanged process symbolizes with the same Symbolizer (nothing was
  // loaded or unloaded in between), and its frames pass the same checks.
  req.sequence = 8;
  DumpReport again = dump_snapshot(s, table, req);
  INFO(again.error);
  REQUIRE(again.written);
  CHECK(again.symbolizer_reused);
  rc = t::run(t::python() + " '" + t::checker() + "' '" + again.path +
                  "' --expect-json '{\"segments\": 1, \"no_frame_files\": [\"output_tests\"], "
                  "\"metadata\": {\"reason\": \"signal\", \"dump_sequence\": 8}}'",
              &out);
  INFO(out);
  CHECK(rc == 0);
}
