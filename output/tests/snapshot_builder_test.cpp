// Builds snapshots from hand-made StateCopy values and checks them with python3: the reusable
// checker (check_snapshot.py) plus assertions specific to each case.
#include <algorithm>
#include <catch2/catch.hpp>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/records.hpp"
#include "fake_source.hpp"
#include "format/atomic_file.hpp"
#include "output/snapshot_builder.hpp"
#include "test_util.hpp"

using namespace memtrace;
using namespace memtrace::output;
using memtrace::format::PickleWriter;
using memtrace::format::write_file_atomically;
namespace t = memtrace::output::test;

namespace {

constexpr uint64_t kT0 = 1767225600000000;

// Mirrors the recorder: an allocation pushes segment_alloc + alloc, a free pushes free_requested,
// free_completed, segment_free.
struct History {
  std::vector<TraceEntry> trace;
  std::map<uint64_t, AllocRecord> live;
  uint64_t now = kT0;

  AllocRecord alloc(uint64_t addr, uint64_t size, uint64_t req, int dev, uint32_t stack, MemKind kind = MemKind::Device,
                    uint64_t stream = 0, const char* note = nullptr) {
    AllocRecord r;
    r.addr = addr;
    r.size = size;
    r.requested = req;
    r.device = static_cast<int16_t>(dev);
    r.stack_id = stack;
    r.kind = kind;
    r.stream = stream;
    r.note = note;
    r.time_us = ++now;
    live[addr] = r;
    TraceEntry e;
    e.time_us = r.time_us;
    e.addr = addr;
    e.stream = stream;
    e.note = note;
    e.stack_id = stack;
    e.device = r.device;
    e.kind = kind;
    e.action = Action::SegmentAlloc;
    e.size = size;
    trace.push_back(e);
    e.action = Action::Alloc;
    e.size = req;
    trace.push_back(e);
    return r;
  }
  void free(uint64_t addr, uint32_t free_stack = 0) {
    AllocRecord r = live.at(addr);
    live.erase(addr);
    TraceEntry e;
    e.time_us = ++now;
    e.addr = addr;
    e.stream = r.stream;
    e.note = r.note;
    e.stack_id = free_stack ? free_stack : r.stack_id;
    e.device = r.device;
    e.kind = r.kind;
    e.size = r.requested;
    e.action = Action::FreeRequested;
    trace.push_back(e);
    e.action = Action::FreeCompleted;
    trace.push_back(e);
    e.action = Action::SegmentFree;
    e.size = r.size;
    trace.push_back(e);
  }
  void oom(int dev, uint64_t size, uint64_t device_free, uint32_t stack) {
    TraceEntry e;
    e.time_us = ++now;
    e.action = Action::Oom;
    e.size = size;
    e.device_free = device_free;
    e.device = static_cast<int16_t>(dev);
    e.stack_id = stack;
    trace.push_back(e);
  }
  // The state a dump sees when the ring holds only the newest `keep` entries and `skip` actions
  // were never recorded.
  StateCopy state(size_t keep = SIZE_MAX, uint32_t skip_mask = 0) const {
    StateCopy s;
    std::vector<TraceEntry> kept;
    for (const TraceEntry& e : trace)
      if (!(skip_mask & (1u << static_cast<int>(e.action)))) kept.push_back(e);
    s.total_entries = kept.size();
    if (kept.size() > keep) {
      s.dropped_entries = kept.size() - keep;
      kept.erase(kept.begin(), kept.begin() + static_cast<long>(kept.size() - keep));
    }
    s.trace = kept;
    s.ring_capacity = keep == SIZE_MAX ? 1000000 : keep;
    for (auto& [a, r] : live) {
      s.live.push_back(r);
      if (!is_host(r.kind) && r.device >= 0) {
        s.device_count = std::max(s.device_count, r.device + 1);
        s.device[r.device].current += r.size;
        s.device[r.device].peak += r.size;
        s.device[r.device].allocations += 1;
      }
    }
    for (const TraceEntry& e : trace)
      if (!is_host(e.kind) && e.device >= 0) s.device_count = std::max(s.device_count, e.device + 1);
    s.time_us = now + 1;
    return s;
  }
};

t::FakeFrameSource make_source() {
  t::FakeFrameSource src;
  src.set(1, {{"train.py", "forward", 42}, {"train.py", "<module>", 7}}, "torch");
  src.set(2, {{"nccl/enqueue.cc", "ncclAllReduce", 10}, {"train.py", "<module>", 7}}, "nccl");
  src.set(3, {{"train.py", "forward", 42}, {"train.py", "<module>", 7}}, "torch");  // same frames as 1
  src.set(4, {{"/usr/lib/libfoo.so", "pin_buffers", 0}}, "foo");
  src.set(5, {}, "app");  // every frame was memtrace's own
  src.set(6, {{"bad\xff.py", "f\xc3", 1}}, "app");
  return src;
}

std::string build_to_file(const StateCopy& s, FrameSource& src, const t::TempDir& dir, const std::string& name,
                          BuildStats* st = nullptr, bool frames = true) {
  PickleWriter w;
  BuildOptions o;
  o.include_frames = frames;
  o.meta.pid = 4242;
  o.meta.exe = "/usr/bin/python3";
  o.meta.host = "node1";
  o.meta.reason = "exit";
  o.meta.sequence = 3;
  build_snapshot(s, src, o, w, st);
  std::string path = dir / name;
  std::string err;
  REQUIRE(write_file_atomically(path, w.bytes(), &err));
  return path;
}

int check(const std::string& file, const std::string& expect_json, std::string* out) {
  std::string cmd = t::python() + " '" + t::checker() + "' '" + file + "'";
  if (!expect_json.empty()) cmd += " --expect-json '" + expect_json + "'";
  return t::run(cmd, out);
}

// One python process: the checker (with expectations), then case-specific assertions that find the
// path in sys.argv[1] (python starts slowly on the build machine).
int check_then(const t::TempDir& dir, const std::string& file, const std::string& expect_json, const char* extra,
               std::string* out) {
  std::string script = R"PY(
import json, sys
sys.path.insert(0, sys.argv[1])
import check_snapshot
path = sys.argv[2]
problems = check_snapshot.check_file(path, json.loads(sys.argv[3]) if sys.argv[3] else None)
for p in problems:
    print(p)
if problems:
    sys.exit(1)
sys.argv = [sys.argv[0], path]
)PY";
  script += extra;
  std::string checker_dir = t::checker().substr(0, t::checker().rfind('/'));
  return t::run_python(dir, script, "'" + checker_dir + "' '" + file + "' '" + expect_json + "'", out);
}

}  // namespace

TEST_CASE("a hand-made state gives a consistent snapshot", "[builder]") {
  History h;
  // Before the kept history: allocations later freed (their allocs fall out of the ring).
  h.alloc(0x7f0000800000, 1 << 20, 1000000, 0, 1);
  h.alloc(0x7f0000a00000, 4096, 4000, 0, 1);
  h.alloc(0x7f0000000000, 2 << 20, 1500000, 0, 1);  // still alive, its alloc dropped
  size_t cut_from = h.trace.size() + 1;             // keep from the free_completed of the next free
  h.free(0x7f0000800000);
  h.free(0x7f0000a00000, 2);
  h.alloc(0x7f0000400000, 512, 400, 0, 2, MemKind::Device, 0x1234, "ncclAllReduce");
  h.alloc(0x7f1000000000, 4096, 4096, 1, 3, MemKind::Managed, 7);
  h.alloc(0x7f2000000000, 2 << 20, 2 << 20, 0, 2, MemKind::VmmMapping);
  h.alloc(0x555500000000, 8192, 8000, -1, 4, MemKind::HostPinned);
  h.alloc(0x555500100000, 65536, 65536, 0, 4, MemKind::HostRegistered);
  h.alloc(0x7f0000600000, 512, 100, 0, 5);
  h.free(0x7f0000600000);
  h.alloc(0x7f0000600000, 1024, 1000, 0, 6);  // address reused
  h.free(0x555500100000);
  h.oom(1, 1 << 30, 12345, 1);
  StateCopy s = h.state(h.trace.size() - cut_from);
  s.device_count = 2;
  HandleRecord hr;
  hr.handle = 99;
  hr.size = 2 << 20;
  s.handles.push_back(hr);
  // The recorder sorts; the builder must not rely on it.
  std::reverse(s.live.begin(), s.live.end());

  t::TempDir dir;
  auto src = make_source();
  BuildStats st;
  std::string file = build_to_file(s, src, dir, "snap.pickle", &st);
  CHECK(st.device_segments == 5);
  CHECK(st.host_segments == 1);
  CHECK(st.device_lists == 2);
  CHECK(st.repaired_frees == 1);  // the lone free_completed at the start of the ring
  CHECK(st.unknown_marker);  // every entry has a stack with a known owner

  const std::string expect =
      R"({"segments": 5, "segment_bytes": {"0": 4195840, "1": 4096}, "device_lists": 2,)"
      R"( "host_segments": 1, "categories": ["torch", "nccl", "unknown"],)"
      R"( "frame_names": ["forward", "ncclAllReduce"], "metadata": {"pid": 4242, "reason": "exit"}})";
  const char* script = R"PY(
import pickle, sys
s = pickle.load(open(sys.argv[1], 'rb'))
segs = s['segments']
assert [(x['device'], x['address']) for x in segs] == sorted((x['device'], x['address']) for x in segs)
by = {x['address']: x for x in segs}
a = by[0x7f0000400000]
assert a['total_size'] == 512 and a['requested_size'] == 400 and a['stream'] == 0x1234
assert a['segment_pool_id'] == (0, 0) and a['is_expandable'] is False and a['segment_type'] == 'large'
assert a['allocated_size'] == a['active_size'] == 512
b = a['blocks']
assert len(b) == 1 and b[0]['state'] == 'active_allocated' and b[0]['size'] == 512 and b[0]['requested_size'] == 400
assert b[0]['frames'] is a['frames'] and b[0]['user_metadata'] == 'ncclAllReduce'
assert a['frames'][0] == {'filename': 'nccl/enqueue.cc', 'line': 10, 'name': 'ncclAllReduce'}
# stack 1 and stack 3 have identical frames: one shared list
assert by[0x7f0000000000]['frames'] is by[0x7f1000000000]['frames']
# the '<module>' frame dict is shared between the torch and nccl stacks
assert by[0x7f0000000000]['frames'][1] is a['frames'][1]
# frames that were all memtrace's: the shared empty list
assert by[0x7f0000600000]['frames'] == [] or by[0x7f0000600000]['frames'][0]['name'].startswith('f')
# invalid UTF-8 in names was replaced
assert by[0x7f0000600000]['frames'][0]['filename'] == 'bad\ufffd.py', by[0x7f0000600000]['frames']
# host memory is never in device segments / traces
assert all(x['address'] < 0x555500000000 or x['address'] >= 0x600000000000 for x in segs)
hs = s['host_segments']
assert [x['address'] for x in hs] == [0x555500000000] and hs[0]['device'] == -1
ht = s['host_traces']
assert [e['action'] for e in ht] == ['segment_alloc', 'alloc', 'segment_alloc', 'alloc',
                                     'free_requested', 'free_completed', 'segment_free'], ht
assert all(e['category'] == 'foo' for e in ht)
dt = s['device_traces']
assert len(dt) == 2
for t in dt:
    for e in t:
        assert e['action'] == 'oom' or e['addr'] < 0x555500000000 or e['addr'] >= 0x600000000000 or e['addr'] == 0
d0 = dt[0]
# ring cut: the first kept entry was a free_completed; its free_requested was put back in front
assert d0[0]['action'] == 'free_requested' and d0[1]['action'] == 'free_completed'
assert d0[0]['addr'] == d0[1]['addr'] == 0x7f0000800000
# free entries carry the free's stack when there is one
fa = [e for e in d0 if e['addr'] == 0x7f0000a00000 and e['action'] == 'free_completed'][0]
assert fa['frames'][0]['name'] == 'ncclAllReduce' and fa['category'] == 'nccl'
oom = [e for e in dt[1] if e['action'] == 'oom'][0]
assert dt[1][-1]['action'] == 'snapshot' and dt[1][-1]['category'] == 'unknown'
assert oom['action'] == 'oom' and 'addr' not in oom and oom['device_free'] == 12345 and oom['size'] == 1 << 30
for t in dt:
    for e in t:
        assert e['compile_context'] == '' and isinstance(e['user_metadata'], str) and 'time_us' in e
        assert 'category' in e
cats = []
for t in dt:
    for e in t:
        if e['category'] not in cats: cats.append(e['category'])
assert 'unknown' in cats, cats
st = s['allocator_settings']
assert st['PYTORCH_CUDA_ALLOC_CONF'] == '' and st['max_split_size'] == -1
assert st['garbage_collection_threshold'] == 0.0 and st['expandable_segments'] is False
assert st['roundup_power2_divisions'] == {str(1 << i): 0 for i in range(16)}
assert st['trace_alloc_overflowed'] is True
m = st['memtrace']
assert m['pid'] == 4242 and m['exe'] == '/usr/bin/python3' and m['dump_sequence'] == 3 and m['host'] == 'node1'
assert m['entries_dropped'] > 0 and m['vmm_handles'] == 1 and m['vmm_device_bytes'] == 2 << 20
assert m['frees_completed_by_writer'] == 1
assert s['external_annotations'] == []
assert set(s) == {'segments', 'device_traces', 'allocator_settings', 'external_annotations',
                  'host_segments', 'host_traces'}, set(s)
print('ok')
)PY";
  std::string out;
  int rc = check_then(dir, file, expect, script, &out);
  INFO(out);
  CHECK(rc == 0);
}

TEST_CASE("'unknown' is always among the categories", "[builder]") {
  t::TempDir dir;
  auto src = make_source();
  SECTION("every entry has a known owner: a snapshot marker carries 'unknown'") {
    History h;
    h.alloc(0x7f0000000000, 4096, 4096, 0, 1);
    h.alloc(0x7f1000000000, 4096, 4096, 1, 2);
    h.alloc(0x7f0000100000, 4096, 4096, 0, 1);
    StateCopy s = h.state();
    BuildStats st;
    std::string file = build_to_file(s, src, dir, "marker.pickle", &st);
    CHECK(st.unknown_marker);
    // The marker sits at the end of the list holding the newest entry (device 0 here).
    const char* script = R"PY(
import pickle, sys
s = pickle.load(open(sys.argv[1], 'rb'))
last = s['device_traces'][0][-1]
assert last['action'] == 'snapshot' and last['category'] == 'unknown' and last['addr'] == 0, last
assert last['size'] == 8192, last
assert all(e['action'] != 'snapshot' for e in s['device_traces'][1])
print('ok')
)PY";
    std::string out;
    int rc = check_then(dir, file, R"({"actions": {"snapshot": 1, "alloc": 3}, "categories": ["torch", "nccl", "unknown"]})",
                        script, &out);
    INFO(out);
    CHECK(rc == 0);
  }
  SECTION("an entry without a stack is 'unknown' already: no marker") {
    History h;
    h.alloc(0x7f0000000000, 4096, 4096, 0, 1);
    h.alloc(0x7f0000100000, 4096, 4096, 0, 0);
    BuildStats st;
    std::string file = build_to_file(h.state(), src, dir, "nomarker.pickle", &st);
    CHECK_FALSE(st.unknown_marker);
    std::string out;
    CHECK(check(file, R"({"actions": {"snapshot": 0}})", &out) == 0);
    INFO(out);
  }
  SECTION("no device entries: no categories, no marker") {
    History h;
    h.alloc(0x555500000000, 4096, 4096, -1, 1, MemKind::HostPinned);
    StateCopy s = h.state();
    BuildStats st;
    std::string file = build_to_file(s, src, dir, "hostonly.pickle", &st);
    CHECK_FALSE(st.unknown_marker);
    CHECK(st.device_lists == 1);
    std::string out;
    CHECK(check(file, R"({"entries": 0, "host_segments": 1, "host_entries": 2, "device_lists": 1})", &out) == 0);
    INFO(out);
  }
}

TEST_CASE("empty state: one empty device list and nothing else", "[builder]") {
  t::TempDir dir;
  StateCopy s;
  NullFrameSource none;
  std::string file = build_to_file(s, none, dir, "empty.pickle");
  const char* script = R"PY(
import pickle, sys
s = pickle.load(open(sys.argv[1], 'rb'))
assert s['segments'] == [] and s['device_traces'] == [[]], s
assert 'host_segments' not in s and 'host_traces' not in s
print('ok')
)PY";
  std::string out;
  int rc = check_then(dir, file, R"({"segments": 0, "entries": 0, "device_lists": 1})", script, &out);
  INFO(out);
  CHECK(rc == 0);
}

TEST_CASE("without frames: empty frames everywhere, categories kept", "[builder]") {
  t::TempDir dir;
  auto src = make_source();
  History h;
  h.alloc(0x7f0000000000, 4096, 4096, 0, 1);
  h.alloc(0x7f0000100000, 4096, 4096, 0, 2);
  h.free(0x7f0000100000);
  std::string file = build_to_file(h.state(), src, dir, "noframes.pickle", nullptr, false);
  const char* script = R"PY(
import pickle, sys
s = pickle.load(open(sys.argv[1], 'rb'))
for x in s['segments']:
    assert x['frames'] == [] and x['blocks'][0]['frames'] == []
for t in s['device_traces']:
    for e in t:
        assert 'frames' not in e
assert s['allocator_settings']['memtrace']['frames_included'] is False
print('ok')
)PY";
  std::string out;
  int rc = check_then(dir, file, R"({"categories": ["torch", "nccl", "unknown"]})", script, &out);
  INFO(out);
  CHECK(rc == 0);
}

TEST_CASE("random histories cut by the ring stay consistent", "[builder]") {
  t::TempDir dir;
  auto src = make_source();
  std::mt19937_64 rng(12345);
  std::string files;
  for (int round = 0; round < 6; ++round) {
    History h;
    std::vector<uint64_t> live;
    uint64_t next = 0x7f0000000000;
    std::vector<uint64_t> freed;  // addresses available for reuse
    for (int i = 0; i < 1200; ++i) {
      bool do_alloc = live.empty() || rng() % 100 < 55;
      if (do_alloc) {
        uint64_t addr;
        if (!freed.empty() && rng() % 3 == 0) {
          addr = freed.back();
          freed.pop_back();
        } else {
          addr = next;
          next += 0x200000;
        }
        int dev = static_cast<int>(rng() % 3);
        uint64_t size = 512 * (1 + rng() % 4096);
        uint32_t stack = static_cast<uint32_t>(rng() % 7);  // 0..6, 0 = no stack
        MemKind kind = rng() % 10 == 0 ? MemKind::HostPinned : MemKind::Device;
        h.alloc(addr, size, size - rng() % 512, kind == MemKind::HostPinned ? -1 : dev, stack, kind, rng() % 3);
        live.push_back(addr);
      } else {
        size_t k = rng() % live.size();
        uint64_t addr = live[k];
        live.erase(live.begin() + static_cast<long>(k));
        h.free(addr, rng() % 2 ? static_cast<uint32_t>(1 + rng() % 6) : 0);
        freed.push_back(addr);
      }
      if (rng() % 200 == 0) h.oom(static_cast<int>(rng() % 3), 1 << 30, 1 << 20, 1);
    }
    // Ring sizes that cut inside alloc and free groups, and skip masks that drop one half of the
    // free pairs (the builder completes them). Skipping segment_alloc or segment_free alone is not
    // repairable (the segment size is gone) and makes files that break the rule of
    // docs/snapshot-format.md, "Segment entries bracket the blocks inside them".
    size_t keep = 500 + static_cast<size_t>(round) * 331;
    uint32_t skip = round == 4   ? (1u << static_cast<int>(Action::FreeCompleted))
                    : round == 5 ? (1u << static_cast<int>(Action::FreeRequested)) | (1u << static_cast<int>(Action::Oom))
                                 : 0;
    StateCopy s = h.state(keep, skip);
    files += " '" + build_to_file(s, src, dir, "random" + std::to_string(round) + ".pickle") + "'";
  }
  std::string out;
  int rc = t::run(t::python() + " '" + t::checker() + "'" + files, &out);
  INFO(out);
  CHECK(rc == 0);
}

TEST_CASE("no list exceeds the ring's capacity, completed halves and the marker included", "[builder]") {
  t::TempDir dir;
  auto src = make_source();
  History h;
  for (int i = 0; i < 60; ++i) {
    h.alloc(0x7f0000000000 + 0x1000 * static_cast<uint64_t>(i % 4), 4096, 4000, 0, 1);
    h.free(0x7f0000000000 + 0x1000 * static_cast<uint64_t>(i % 4));
  }
  // Five entries per cycle: keeping 102 starts the ring on a lone free_completed (the writer adds
  // its free_requested), and no entry is 'unknown' (the writer adds the marker): 104 unbounded.
  StateCopy s = h.state(102);
  REQUIRE(s.trace.size() == 102);
  REQUIRE(s.trace.front().action == Action::FreeCompleted);
  BuildStats st;
  std::string file = build_to_file(s, src, dir, "bounded.pickle", &st);
  CHECK(st.unknown_marker);
  CHECK(st.trimmed_entries == 1);  // the lone half goes, and no more than needed
  CHECK(st.device_entries == 102);
  std::string out;
  CHECK(check_then(dir, file, "", R"PY(
import pickle
snap = pickle.load(open(path, 'rb'))
t = snap['device_traces'][0]
assert len(t) == 102, len(t)
assert t[0]['action'] == 'segment_free', t[0]['action']
assert snap['allocator_settings']['trace_alloc_overflowed'] is True
assert snap['allocator_settings']['memtrace']['entries_trimmed_by_writer'] == 1
)PY", &out) == 0);
  INFO(out);
}

TEST_CASE("long traces are batched and a 2500-entry list loads", "[builder]") {
  t::TempDir dir;
  auto src = make_source();
  History h;
  for (int i = 0; i < 1250; ++i) {
    h.alloc(0x7f0000000000 + 0x1000 * static_cast<uint64_t>(i % 10), 4096, 4000, 0, 1 + i % 3);
    h.free(0x7f0000000000 + 0x1000 * static_cast<uint64_t>(i % 10));
  }
  StateCopy s = h.state();
  REQUIRE(s.trace.size() == 6250);
  BuildStats st;
  std::string file = build_to_file(s, src, dir, "long.pickle", &st);
  CHECK(st.frame_lists == 2);  // stacks 1 and 3 share one list; stack 2 has its own
  std::string out;
  CHECK(check(file, R"({"entries": 6251, "actions": {"alloc": 1250, "free_completed": 1250}})", &out) == 0);
  INFO(out);
}

TEST_CASE("the checker reports broken snapshots", "[builder][checker]") {
  std::string dir = t::checker().substr(0, t::checker().rfind('/'));
  std::string out;
  int rc = t::run(t::python() + " '" + dir + "/checker_selftest.py' '" + dir + "'", &out);
  INFO(out);
  CHECK(rc == 0);
}

TEST_CASE("caching allocator records: segments tiled by their blocks, gaps inactive", "[builder][caching]") {
  // Two caching segments as the recorder keeps them: segment records apart from block records
  // (one starting at its segment's address), one block freed and waiting for a synchronize.
  const uint64_t s1 = 0x7f0000000000, s2 = 0x7f0000200000;
  auto rec = [](uint64_t addr, uint64_t size, uint64_t req, CacheRole role, uint8_t flags, uint32_t stack) {
    AllocRecord r;
    r.addr = addr;
    r.size = size;
    r.requested = req;
    r.kind = MemKind::Cached;
    r.cache = role;
    r.cache_flags = flags;
    r.stack_id = stack;
    r.time_us = kT0;
    return r;
  };
  StateCopy s;
  s.live = {
      rec(s1, 2 << 20, 0, CacheRole::Segment, kCacheSmallPool, 1),
      rec(s1, 512, 100, CacheRole::Block, 0, 1),
      rec(s1 + 1024, 4096, 4000, CacheRole::Block, kCachePendingFree, 3),
      rec(s2, 20 << 20, 0, CacheRole::Segment, 0, 2),
      rec(s2 + (2 << 20), 5 << 20, 5 << 20, CacheRole::Block, 0, 2),
      rec(0x7f0009000000, 512, 512, CacheRole::Block, 0, 1),  // in no segment: written on its own
  };
  std::reverse(s.live.begin(), s.live.end());
  auto entry = [](Action a, uint64_t addr, uint64_t size, uint32_t stack) {
    TraceEntry e;
    e.time_us = kT0;
    e.action = a;
    e.addr = addr;
    e.size = size;
    e.stack_id = stack;
    e.kind = MemKind::Cached;
    return e;
  };
  s.trace = {entry(Action::SegmentAlloc, s1, 2 << 20, 1), entry(Action::Alloc, s1, 100, 1),
             entry(Action::Alloc, s1 + 512, 300, 1), entry(Action::FreeRequested, s1 + 512, 300, 1),
             entry(Action::FreeCompleted, s1 + 512, 300, 1), entry(Action::Alloc, s1 + 1024, 4000, 3),
             entry(Action::SegmentAlloc, s2, 20 << 20, 2), entry(Action::Alloc, s2 + (2 << 20), 5 << 20, 2),
             entry(Action::SegmentAlloc, 0x7f0009000000, 512, 1), entry(Action::Alloc, 0x7f0009000000, 512, 1)};
  s.total_entries = s.trace.size();
  s.ring_capacity = 100;
  s.device_count = 1;
  s.time_us = kT0 + 1;

  t::TempDir dir;
  auto src = make_source();
  BuildStats st;
  std::string file = build_to_file(s, src, dir, "cached.pickle", &st);
  CHECK(st.device_segments == 3);
  CHECK(st.orphan_blocks == 1);
  const char* script = R"PY(
import pickle, sys
s = pickle.load(open(sys.argv[1], 'rb'))
by = {x['address']: x for x in s['segments']}
a = by[0x7f0000000000]
assert a['total_size'] == 2 << 20 and a['segment_type'] == 'small'
assert [(b['size'], b['state'], b['requested_size']) for b in a['blocks']] == [
    (512, 'active_allocated', 100), (512, 'inactive', 0), (4096, 'active_pending_free', 4000),
    ((2 << 20) - 5120, 'inactive', 0)], a['blocks']
assert a['allocated_size'] == 512 and a['active_size'] == 4608 and a['requested_size'] == 4100
assert a['blocks'][0]['frames'][0]['name'] == 'forward' and a['blocks'][1]['frames'] == []
b = by[0x7f0000200000]
assert b['segment_type'] == 'large' and [(x['size'], x['state']) for x in b['blocks']] == [
    (2 << 20, 'inactive'), (5 << 20, 'active_allocated'), (13 << 20, 'inactive')], b['blocks']
assert by[0x7f0009000000]['total_size'] == 512
)PY";
  std::string out;
  int rc = check_then(dir, file, R"({"segments": 3})", script, &out);
  INFO(out);
  CHECK(rc == 0);
}
