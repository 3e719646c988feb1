#include "cli/analysis/speedscope.hpp"

#include <catch2/catch.hpp>
#include <regex>

#include "cli/analysis/folded.hpp"
#include "snapshot_maker.hpp"

using namespace memtrace::analysis;
using namespace memtrace::analysis::test;

namespace {

// The numbers of every "weights" array of the document, in order.
uint64_t weights_sum(const std::string& json) {
  uint64_t sum = 0;
  std::regex arrays(R"re("weights":\[([0-9,]*)\])re");
  for (auto it = std::sregex_iterator(json.begin(), json.end(), arrays); it != std::sregex_iterator(); ++it) {
    std::string list = (*it)[1];
    for (size_t at = 0; at < list.size();) {
      size_t comma = list.find(',', at);
      sum += std::stoull(list.substr(at, comma - at));
      at = comma == std::string::npos ? list.size() : comma + 1;
    }
  }
  return sum;
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("speedscope: shared frames once, samples outermost first, bytes per distinct stack") {
  SnapshotMaker m;
  auto s1 = m.stack({"leaf@/src/a.c:3", "mid@/src/a.c:2", "main@/src/a.c:1"});
  auto s2 = m.stack({"leaf@/src/a.c:3", "mid@/src/a.c:2", "main@/src/a.c:1"});  // same frames, other id
  auto s3 = m.stack({"other@/src/b.c:9", "main@/src/a.c:1"});
  std::vector<LiveAlloc> v = {{1, 10, s1, 0}, {2, 5, s2, 0}, {3, 8, s3, 0}, {4, 0, s3, 0}, {5, 4, 0, 0}};
  SpeedscopeFile f = speedscope_file(m.s, {{"device 0: requested bytes live at the end", v}}, nullptr, "snap.pickle");
  CHECK(f.json ==
        R"j({"$schema":"https://www.speedscope.app/file-format-schema.json","name":"snap.pickle",)j"
        R"j("exporter":"memtrace flamegraph","activeProfileIndex":0,"shared":{"frames":[{"name":"[no stack]"},)j"
        R"j({"name":"main (/src/a.c:1)","file":"/src/a.c","line":1},{"name":"mid (/src/a.c:2)","file":"/src/a.c","line":2},)j"
        R"j({"name":"leaf (/src/a.c:3)","file":"/src/a.c","line":3},{"name":"other (/src/b.c:9)","file":"/src/b.c","line":9}]},)j"
        R"j("profiles":[{"type":"sampled","name":"device 0: requested bytes live at the end","unit":"bytes",)j"
        R"j("startValue":0,"endValue":27,"samples":[[0],[1,2,3],[1,4]],"weights":[4,15,8]}]})j");
  CHECK(f.samples == 3);
  CHECK(f.bytes == 27);
}

TEST_CASE("speedscope: one profile per device, one frame table for all of them") {
  SnapshotMaker m;
  auto a = m.stack({"alloc_a@x.c:1", "main@x.c:9"});
  auto b = m.stack({"alloc_b@x.c:2", "main@x.c:9"});
  SpeedscopeFile f = speedscope_file(m.s, {{"device 0", {{1, 100, a, 0}}}, {"device 1", {{1, 7, a, 0}, {2, 3, b, 0}}}, {"device 2", {}}},
                                     nullptr, "x");
  CHECK(count(f.json, R"j("name":"main (x.c:9)")j") == 1);
  CHECK(count(f.json, R"j("name":"alloc_a (x.c:1)")j") == 1);
  CHECK(count(f.json, R"j("type":"sampled")j") == 3);
  CHECK(count(f.json, R"j("unit":"bytes")j") == 3);
  CHECK(f.json.find(R"j("name":"device 0","unit":"bytes","startValue":0,"endValue":100,"samples":[[0,1]],"weights":[100]})j") !=
        std::string::npos);
  CHECK(f.json.find(R"j("name":"device 1","unit":"bytes","startValue":0,"endValue":10,"samples":[[0,1],[0,2]],"weights":[7,3]})j") !=
        std::string::npos);
  // A device with nothing live is an empty profile, which speedscope shows as such.
  CHECK(f.json.find(R"j("name":"device 2","unit":"bytes","startValue":0,"endValue":0,"samples":[],"weights":[]})j") !=
        std::string::npos);
  CHECK(f.samples == 3);
  CHECK(f.bytes == 110);
}

TEST_CASE("speedscope: --frames short shows the folded output's frames and labels, --frames all every frame") {
  SnapshotMaker m;
  auto s1 = m.stack({"c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(int)@??:0",
                     "at::native::add_out(at::Tensor const&, at::Tensor const&)@/src/aten/BinaryOps.cpp:40",
                     "forward@/home/me/model.py:30", "_PyEval_EvalFrameDefault@??:0"});
  auto s2 = m.stack({"c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::allocate(unsigned long)@??:0",
                     "at::native::add_out(at::Tensor const&, at::Tensor const&)@/src/aten/BinaryOps.cpp:40",
                     "forward@/home/me/model.py:30", "PyObject_Call@??:0"});
  std::vector<LiveAlloc> v = {{1, 100, s1, 0}, {2, 50, s2, 0}};

  StackView shortv(m.s, FrameMode::kShort);
  SpeedscopeFile f = speedscope_file(m.s, {{"d0", v}}, &shortv, "x");
  // The two stacks differ only inside the allocator: one sample, as one folded line.
  CHECK(f.json.find(R"j("frames":[{"name":"forward (model.py:30)","file":"/home/me/model.py","line":30},)j"
                    R"j({"name":"at::native::add_out (BinaryOps.cpp:40)","file":"/src/aten/BinaryOps.cpp","line":40}])j") !=
        std::string::npos);
  CHECK(f.json.find(R"j("samples":[[0,1]],"weights":[150])j") != std::string::npos);
  StackView shortv2(m.s, FrameMode::kShort);
  auto folded = fold_allocs(m.s, v, &shortv2);
  REQUIRE(folded.size() == 1);
  CHECK(folded[0].stack == "forward (model.py:30);at::native::add_out (BinaryOps.cpp:40)");

  StackView all(m.s, FrameMode::kAll);
  SpeedscopeFile fa = speedscope_file(m.s, {{"d0", v}}, &all, "x");
  CHECK(fa.samples == 2);
  CHECK(count(fa.json, R"j("name":"forward (/home/me/model.py:30)")j") == 1);  // shared by both stacks
  CHECK(count(fa.json, R"j("name":"at::native::add_out(at::Tensor const&, at::Tensor const&) (/src/aten/BinaryOps.cpp:40)")j") == 1);
  // As the folded output labels it; PyTorch's "??" is no file.
  CHECK(count(fa.json, R"j({"name":"_PyEval_EvalFrameDefault (??)"})j") == 1);
  CHECK(count(fa.json, R"j("file":"??")j") == 0);
  CHECK(fa.json == speedscope_file(m.s, {{"d0", v}}, nullptr, "x").json);
  CHECK(fa.bytes == f.bytes);
}

TEST_CASE("speedscope: the weights add up to the folded output's bytes, in both frame modes") {
  SnapshotMaker m;
  std::vector<LiveAlloc> v;
  for (int i = 0; i < 40; ++i) {
    auto s = m.stack({"torch::unwind::unwind()@??:0", "alloc" + std::to_string(i % 7) + "@lib.cpp:" + std::to_string(i % 3 + 1),
                      "layer" + std::to_string(i % 5) + "@/home/me/net.py:" + std::to_string(10 + i % 4), "main@app.c:1"});
    v.push_back({static_cast<uint64_t>(i) * 4096, static_cast<uint64_t>(i * 1000 + 1), i % 9 ? s : 0, 0});
  }
  for (FrameMode mode : {FrameMode::kShort, FrameMode::kAll}) {
    StackView a(m.s, mode), b(m.s, mode);
    SpeedscopeFile f = speedscope_file(m.s, {{"d0", v}}, &a, "x");
    uint64_t folded_bytes = 0;
    auto lines = fold_allocs(m.s, v, &b);
    for (const FoldedLine& l : lines) folded_bytes += l.bytes;
    CHECK(weights_sum(f.json) == folded_bytes);
    CHECK(f.bytes == folded_bytes);
    CHECK(f.samples == lines.size());
  }
}

TEST_CASE("speedscope: frame text is kept as it is, escaped for JSON (no folded separators to avoid)") {
  SnapshotMaker m;
  auto s = m.stack({"op<a;b> \"q\"@t.h:7"});
  SpeedscopeFile f = speedscope_file(m.s, {{"d0", {{1, 8, s, 0}}}}, nullptr, "x");
  CHECK(f.json.find(R"j({"name":"op<a;b> \"q\" (t.h:7)","file":"t.h","line":7})j") != std::string::npos);
}
