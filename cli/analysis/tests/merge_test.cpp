#include "cli/analysis/merge.hpp"

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <unistd.h>

#include "snapshot_maker.hpp"

using namespace memtrace::analysis;
using namespace memtrace::analysis::test;

namespace {

constexpr uint64_t kTorchBase = 0x7f0000000000;
constexpr uint64_t kNccl = 0x7e0000000000;
constexpr uint64_t kCublas = 0x7e0000800000;

// PyTorch: one 2 MiB segment with a live 400-byte tensor; a second segment released by
// empty_cache() during the run.
SnapshotMaker pytorch_side() {
  SnapshotMaker p;
  auto st = p.stack({"forward@train.py:42", "<module>@train.py:7"});
  p.entry(0, Action::SegmentAlloc, kTorchBase, 2 << 20, 100, st);
  p.entry(0, Action::Alloc, kTorchBase, 400, 101, st);
  p.entry(0, Action::SegmentAlloc, kTorchBase + (4 << 20), 2 << 20, 140, st);
  p.entry(0, Action::SegmentFree, kTorchBase + (4 << 20), 2 << 20, 160, st);
  p.segment(0, kTorchBase, {{512, 400, BlockState::ActiveAllocated, st}, {(2 << 20) - 512, 0, BlockState::Inactive}},
            st);
  p.s.device_traces.resize(1);
  return p;
}

// memtrace: PyTorch's two cudaMallocs seen at the driver, an NCCL buffer still live, a cuBLAS
// workspace made and freed.
SnapshotMaker memtrace_side() {
  SnapshotMaker m;
  m.s.producer = memtrace::reader::Producer::kMemtrace;
  m.s.memtrace.pid = 77;
  auto torch = m.stack({"cudaMalloc@libtorch_cuda.so:0"});
  auto nccl = m.stack({"ncclMemAlloc@libnccl.so.2:0", "init@train.py:3"});
  auto cublas = m.stack({"cublasCreate@libcublas.so:0"});
  m.mt_alloc(0, kTorchBase, 2 << 20, 99, torch, "torch");
  m.mt_alloc(0, kCublas, 1 << 20, 120, cublas, "cublas");
  m.mt_free(0, kCublas, 1 << 20, 130, cublas, "cublas");
  m.mt_alloc(0, kTorchBase + (4 << 20), 2 << 20, 139, torch, "torch");
  m.mt_alloc(0, kNccl, 4 << 20, 150, nccl, "nccl");
  m.mt_free(0, kTorchBase + (4 << 20), 2 << 20, 161, torch, "torch");
  m.entry(0, Action::Snapshot, 0, 0, 170, 0, "unknown");
  m.segment(0, kTorchBase, {{2 << 20, 2 << 20, BlockState::ActiveAllocated, torch}}, torch);
  m.segment(0, kNccl, {{4 << 20, 4 << 20, BlockState::ActiveAllocated, nccl}}, nccl);
  return m;
}

std::string write_temp(std::string_view bytes) {
  char path[] = "/tmp/memtrace-merge-test-XXXXXX";
  int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  close(fd);
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return path;
}

}  // namespace

TEST_CASE("merge keeps PyTorch's segments, adds memtrace's outside them, drops the duplicates") {
  SnapshotMaker p = pytorch_side(), m = memtrace_side();
  memtrace::format::PickleWriter w;
  MergeStats st = merge_snapshots(p.s, m.s, MergeOptions{std::nullopt, "torch.pickle", "mt.pickle"}, w);
  CHECK(st.pytorch_segments == 1);
  CHECK(st.memtrace_segments_kept == 1);
  CHECK(st.memtrace_segments_dropped == 1);
  CHECK(st.memtrace_bytes_kept == 4u << 20);
  CHECK(st.pytorch_entries == 4);
  CHECK(st.memtrace_entries_kept == 5 + 2);  // cublas alloc+free, nccl alloc
  CHECK(st.memtrace_entries_dropped == 2 + 2 + 3 + 1);  // both torch cudaMallocs, one free, the marker

  std::string path = write_temp(w.bytes());
  // The consistency rules (docs/snapshot-format.md, "Consistency rules for a writer") and the
  // viewer-safe pickle subset, plus what the merged file must hold.
  std::string cmd = std::string(MEMTRACE_TEST_PYTHON) + " " + MEMTRACE_TEST_CHECKER + " " + path +
                    " --quiet --expect-json '{\"segments\": 2, \"segment_bytes\": {\"0\": 6291456},"
                    " \"entries\": 12, \"actions\": {\"segment_alloc\": 4, \"alloc\": 3, \"segment_free\": 2,"
                    " \"free_requested\": 1, \"free_completed\": 1, \"snapshot\": 1},"
                    " \"categories\": [\"torch\", \"cublas\", \"nccl\", \"unknown\"],"
                    " \"frame_names\": [\"forward\", \"ncclMemAlloc\"], \"metadata\": {\"pid\": 77}}'";
  CHECK(std::system(cmd.c_str()) == 0);
  // Entries interleave by time: the cuBLAS workspace (t=120..130) sits between PyTorch's events.
  std::string order = std::string(MEMTRACE_TEST_PYTHON) + " -c \"import pickle,sys; s=pickle.load(open('" + path +
                      "','rb')); t=[e.get('time_us',0) for e in s['device_traces'][0]];"
                      " sys.exit(0 if t==sorted(t) and s['device_traces'][0][2]['category']=='cublas' else 1)\"";
  CHECK(std::system(order.c_str()) == 0);
  std::remove(path.c_str());
}

TEST_CASE("merge --device keeps one device and still writes a list for every index") {
  SnapshotMaker p = pytorch_side(), m = memtrace_side();
  m.mt_alloc(1, 0x1000, 4096, 200, 0, "app");
  m.segment(1, 0x1000, {{4096, 4096, BlockState::ActiveAllocated}});
  memtrace::format::PickleWriter w;
  MergeStats st = merge_snapshots(p.s, m.s, MergeOptions{1, "a", "b"}, w);
  CHECK(st.devices == 2);
  CHECK(st.pytorch_segments == 0);
  CHECK(st.memtrace_segments_kept == 1);
  std::string path = write_temp(w.bytes());
  std::string cmd = std::string(MEMTRACE_TEST_PYTHON) + " " + MEMTRACE_TEST_CHECKER + " " + path +
                    " --quiet --expect-json '{\"segments\": 1, \"device_lists\": 2, \"entries\": 3}'";
  CHECK(std::system(cmd.c_str()) == 0);
  std::remove(path.c_str());
}
