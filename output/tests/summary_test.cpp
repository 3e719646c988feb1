#include <catch2/catch.hpp>
#include <string>

#include "fake_source.hpp"
#include "format/units.hpp"
#include "output/summary.hpp"

using namespace memtrace;
using namespace memtrace::output;
namespace t = memtrace::output::test;

// The summary prints sizes with format/units.hpp's human_bytes, as the CLI does.
TEST_CASE("human units", "[summary]") {
  using format::human_bytes;
  CHECK(human_bytes(0) == "0 B");
  CHECK(human_bytes(1023) == "1023 B");
  CHECK(human_bytes(1024) == "1.00 KiB");
  CHECK(human_bytes(1536) == "1.50 KiB");
  CHECK(human_bytes(3u << 20) == "3.00 MiB");
  CHECK(human_bytes(uint64_t{5} << 30) == "5.00 GiB");
  CHECK(human_bytes((uint64_t{5} << 40) + (uint64_t{1} << 38)) == "5.25 TiB");
}

namespace {
AllocRecord rec(uint64_t addr, uint64_t size, uint32_t stack, int dev = 0, MemKind kind = MemKind::Device) {
  AllocRecord r;
  r.addr = addr;
  r.size = size;
  r.requested = size;
  r.stack_id = stack;
  r.device = static_cast<int16_t>(dev);
  r.kind = kind;
  return r;
}
}  // namespace

TEST_CASE("summary lists devices, host, VMM, owners, history and the path", "[summary]") {
  t::FakeFrameSource src;
  src.set(1, {{"a.py", "f", 1}}, "torch");
  src.set(2, {{"b.cc", "g", 2}}, "nccl");
  StateCopy s;
  s.device_count = 2;
  s.device[0] = UsageStats{3u << 20, 8u << 20, 12};
  s.device[1] = UsageStats{1024, 2048, 1};
  s.host = UsageStats{4096, 65536, 3};
  s.live = {rec(0x1000, 2u << 20, 1), rec(0x2000, 1u << 20, 2), rec(0x3000, 1024, 1, 1),
            rec(0x555500000000, 4096, 0, -1, MemKind::HostPinned)};
  HandleRecord h;
  h.size = 2u << 20;
  s.handles.push_back(h);
  s.trace.resize(10);
  s.dropped_entries = 90;
  s.ring_capacity = 10;
  s.unknown_frees = 2;
  SummaryInfo info;
  info.program = "/usr/bin/app";
  info.pid = 77;
  info.written = true;
  info.path = "/tmp/memtrace-77.pickle";
  info.bytes = 123456;
  info.seconds = 0.25;
  std::string text = format_summary(s, src, info);
  INFO(text);
  CHECK(text.rfind("memtrace: summary of /usr/bin/app (pid 77)\n", 0) == 0);
  CHECK(text.find("  device 0: current 3.00 MiB, peak 8.00 MiB, 12 allocations\n") != std::string::npos);
  CHECK(text.find("  device 1: current 1.00 KiB, peak 2.00 KiB, 1 allocation\n") != std::string::npos);
  CHECK(text.find("  host pinned: current 4.00 KiB, peak 64.00 KiB, 3 allocations\n") != std::string::npos);
  CHECK(text.find("  VMM physical memory still alive: 1 handle, 2.00 MiB on devices\n") != std::string::npos);
  CHECK(text.find("  live at exit: 4 allocations, 3.00 MiB\n") != std::string::npos);
  // largest owner first
  size_t torch = text.find("    torch  ");
  size_t nccl = text.find("    nccl   ");
  size_t unknown = text.find("    unknown");
  CHECK(torch != std::string::npos);
  CHECK(nccl != std::string::npos);
  CHECK(unknown != std::string::npos);
  CHECK(torch < nccl);
  CHECK(nccl < unknown);
  CHECK(text.find("2.00 MiB\n", torch) < nccl);
  CHECK(text.find("  history: 10 events kept, 90 dropped (ring holds 10)\n") != std::string::npos);
  CHECK(text.find("  frees of pointers memtrace never saw allocated: 2\n") != std::string::npos);
  CHECK(text.find("  snapshot: /tmp/memtrace-77.pickle (120.56 KiB, 0.25 s)\n") != std::string::npos);
  CHECK(text.back() == '\n');
  int lines = 0;
  for (char c : text) lines += c == '\n';
  CHECK(lines <= 24);  // one screen
}

TEST_CASE("summary of an empty run and of a failed write", "[summary]") {
  NullFrameSource none;
  StateCopy s;
  SummaryInfo info;
  info.pid = 1;
  info.why_not = "see the error above";
  std::string text = format_summary(s, none, info);
  INFO(text);
  CHECK(text.find("memtrace: summary (pid 1)\n") == 0);
  CHECK(text.find("  device memory: none seen\n") != std::string::npos);
  CHECK(text.find("  live at exit: nothing\n") != std::string::npos);
  CHECK(text.find("  history: not kept") != std::string::npos);
  CHECK(text.find("  snapshot: not written (see the error above)\n") != std::string::npos);
}

TEST_CASE("many owners fold into one line", "[summary]") {
  t::FakeFrameSource src;
  StateCopy s;
  for (uint32_t i = 1; i <= 20; ++i) {
    src.set(i, {}, "lib" + std::to_string(i));
    s.live.push_back(rec(0x1000 * i, 1000 * i, i));
  }
  SummaryInfo info;
  info.max_owner_rows = 5;
  std::string text = format_summary(s, src, info);
  INFO(text);
  CHECK(text.find("lib20") != std::string::npos);
  CHECK(text.find("lib15") == std::string::npos);
  CHECK(text.find("(15 more)") != std::string::npos);
}

TEST_CASE("largest live call sites fold the CUDA API and process-start frames and read innermost first",
          "[summary]") {
  t::FakeFrameSource src;
  src.set(1, {{"/src/rt/memory.cpp", "cudaMalloc", 10}, {"/app/model.cc", "load_weights", 42},
              {"/app/main.cc", "main", 7}, {"/app/main.cc", "_start", 1}},
          "app");
  src.set(2, {{"/app/cache.cc", "grow_cache", 9}}, "app");
  StateCopy s;
  s.device_count = 1;
  s.live = {rec(0x1000, 64u << 20, 1), rec(0x9000000, 1u << 20, 2), rec(0xa000000, 1u << 20, 2)};
  SummaryInfo info;
  std::string text = format_summary(s, src, info);
  INFO(text);
  size_t weights = text.find("load_weights (model.cc:42) < main (main.cc:7)\n");
  size_t cache = text.find("2x  grow_cache (cache.cc:9)");
  CHECK(text.find("largest live call sites:") != std::string::npos);
  CHECK(weights != std::string::npos);
  CHECK(cache != std::string::npos);
  CHECK(weights < cache);  // largest first
  CHECK(text.find("cudaMalloc") == std::string::npos);
  CHECK(text.find("_start") == std::string::npos);  // docs/reports.md, "Readable stacks"

  info.max_site_rows = 0;
  CHECK(format_summary(s, src, info).find("largest live call sites") == std::string::npos);
}

TEST_CASE("summary reports memtrace's own memory", "[summary]") {
  t::FakeFrameSource src;
  StateCopy s;
  s.distinct_stacks = 12;
  s.stack_table_bytes = 3u << 20;
  s.ring_bytes = 28000000;
  std::string text = format_summary(s, src, SummaryInfo{});
  INFO(text);
  CHECK(text.find("memtrace's own memory: 12 distinct stacks (3.00 MiB), history ring 26.70 MiB reserved") !=
        std::string::npos);
}

TEST_CASE("summary gives each owner's device bytes now and at its peak", "[summary]") {
  t::FakeFrameSource src;
  StateCopy s;
  s.owner_names = {"unknown", "torch", "nccl"};
  s.owner_device[1] = UsageStats{1u << 20, 64u << 20, 40};
  s.owner_device[2] = UsageStats{0, 128u << 20, 3};
  std::string text = format_summary(s, src, SummaryInfo{});
  INFO(text);
  size_t nccl = text.find("nccl                     0 B / 128.00 MiB  in 3 allocations");
  size_t torch = text.find("torch               1.00 MiB /  64.00 MiB  in 40 allocations");
  CHECK(text.find("device memory by owner (now / peak):") != std::string::npos);
  CHECK(nccl != std::string::npos);
  CHECK(torch != std::string::npos);
  CHECK(nccl < torch);  // largest peak first
  CHECK(text.find("unknown   ") == std::string::npos);  // owners that never held memory are left out
}

TEST_CASE("summary says how Python frames were read and counts the stacks whose walk failed", "[summary]") {
  t::FakeFrameSource src;
  StateCopy s;
  CHECK(format_summary(s, src, SummaryInfo{}).find("python:") == std::string::npos);  // no Python
  s.python_support = "CPython 3.13: frames read without the GIL (_Py_DebugOffsets)";
  s.python_direct = true;
  s.python_walks_failed = 3;
  std::string text = format_summary(s, src, SummaryInfo{});
  INFO(text);
  CHECK(text.find("  python: CPython 3.13: frames read without the GIL (_Py_DebugOffsets); 3 stacks without "
                  "Python frames (frame chain unreadable)\n") != std::string::npos);
  s.python_support = "CPython 3.15: no layout known for this version; frames from the C API while the GIL is held";
  s.python_direct = false;
  text = format_summary(s, src, SummaryInfo{});
  CHECK(text.find("  python: CPython 3.15: no layout known for this version; frames from the C API while the "
                  "GIL is held\n") != std::string::npos);
  CHECK(text.find("without Python frames") == std::string::npos);
}
