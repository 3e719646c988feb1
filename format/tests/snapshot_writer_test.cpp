// The snapshot writer on its own: what python3's pickle reads back, and the rules it keeps
// (docs/snapshot-format.md, "The viewer's rules a writer must keep").
#include "format/snapshot_writer.hpp"

#include <catch2/catch.hpp>
#include <map>
#include <string>
#include <vector>

#include "test_util.hpp"

using namespace memtrace::format;
namespace t = memtrace::format::test;

namespace {

class MapStacks final : public StackSource {
 public:
  std::map<uint32_t, std::vector<Frame>> stacks;
  int calls = 0;
  void frames(uint32_t id, std::vector<Frame>* out) override {
    ++calls;
    auto it = stacks.find(id);
    if (it != stacks.end()) out->insert(out->end(), it->second.begin(), it->second.end());
  }
};

// Runs a python3 check on the pickle in w; the script sees it as `s`.
int check_with_python(const PickleWriter& w, const std::string& asserts, std::string* out) {
  t::TempDir dir;
  std::string path = dir / "snap.pickle";
  REQUIRE(t::write_text(path, w.bytes()));
  std::string script = "import pickle, sys\ns = pickle.load(open(sys.argv[1], 'rb'))\n" + asserts + "\nprint('ok')\n";
  int rc = t::run_python(dir, script, "'" + path + "'", out);
  if (rc == 0) rc = t::run(t::python() + " " + t::checker() + " '" + path + "' --quiet", out);
  return rc;
}

}  // namespace

TEST_CASE("one entry dict, shared frames, tiled blocks and the 'unknown' marker", "[snapshot_writer]") {
  MapStacks stacks;
  stacks.stacks[1] = {{"train.py", "forward", 42}, {"train.py", "<module>", 7}};
  stacks.stacks[2] = {{"train.py", "forward", 42}, {"train.py", "<module>", 7}};  // same frames as 1
  PickleWriter w;
  SnapshotWriter sw(w, stacks);
  const Category torch = sw.category("torch");
  CHECK(sw.category("torch") == torch);
  CHECK(sw.is_unknown(sw.category("")));
  CHECK_FALSE(sw.is_unknown(torch));

  UnknownMarkerPlan plan;
  plan.entry(0, 100);
  plan.entry(0, 101);
  REQUIRE(plan.list() == 0);

  sw.begin();
  sw.begin_top_list(Key::DeviceTraces);
  sw.begin_list();
  Entry seg_alloc{Action::SegmentAlloc, {}, 0x1000, 0x3000, 0, 100, 0, nullptr, torch, 1};
  Entry alloc{Action::Alloc, {}, 0x2000, 500, 0, 101, 0, "note", torch, 2};
  sw.entry(seg_alloc);
  sw.entry(alloc);
  sw.entry(Entry{Action::Alloc, {}, 0x2200, 256, 0, 101, 0, nullptr, torch, 0});
  sw.unknown_marker(512, plan.newest());
  sw.end_list();
  sw.end_list();
  sw.begin_top_list(Key::Segments);
  const Block blocks[] = {{0x2000, 512, 500, BlockState::ActiveAllocated, 2, nullptr},
                          {0x2200, 256, 256, BlockState::ActivePendingFree, 0, nullptr}};
  Segment seg;
  seg.address = 0x1000;
  seg.total_size = 0x3000;
  seg.segment_type = kLargePool;
  seg.pool_id = std::pair<int64_t, int64_t>{0, 0};
  seg.stack = 1;
  sw.segment(seg, blocks);
  sw.end_list();
  sw.allocator_settings(pytorch_settings({}), {{"pid", int64_t{7}}});
  sw.end();
  CHECK(w.depth() == 0);
  CHECK(sw.stats().frame_lists == 1);  // stacks 1 and 2 share one list
  CHECK(sw.stats().frame_dicts == 2);
  CHECK(stacks.calls == 2);

  std::string out;
  int rc = check_with_python(w,
                             "e = s['device_traces'][0]\n"
                             "assert [x['action'] for x in e] == ['segment_alloc', 'alloc', 'alloc', 'snapshot'], e\n"
                             "assert e[1]['frames'] is e[0]['frames']\n"
                             "assert e[1]['user_metadata'] == 'note' and e[1]['compile_context'] == ''\n"
                             "assert 'frames' not in e[2] and e[2]['user_metadata'] == ''\n"
                             "assert e[3]['category'] == 'unknown' and e[3]['size'] == 512 and 'frames' not in e[3]\n"
                             "assert e[3]['time_us'] == 101 and e[3]['user_metadata'] == 'snapshot written by memtrace'\n"
                             "g = s['segments'][0]\n"
                             "assert [(b['size'], b['state']) for b in g['blocks']] == [(0x1000, 'inactive'),"
                             " (512, 'active_allocated'), (256, 'active_pending_free'), (0x3000 - 0x1000 - 768,"
                             " 'inactive')], g['blocks']\n"
                             "assert (g['allocated_size'], g['active_size'], g['requested_size']) == (512, 768, 756)\n"
                             "assert g['segment_pool_id'] == (0, 0) and g['segment_type'] == 'large'\n"
                             "assert g['blocks'][0] is not g['blocks'][3]\n"
                             "assert s['allocator_settings']['max_split_size'] == -1\n"
                             "assert s['allocator_settings']['memtrace'] == {'pid': 7}\n"
                             "assert s['external_annotations'] == []",
                             &out);
  INFO(out);
  CHECK(rc == 0);
}

TEST_CASE("sizes the viewer cannot hold are capped, the true value kept beside", "[snapshot_writer]") {
  MapStacks stacks;
  PickleWriter w;
  SnapshotWriter sw(w, stacks, false);
  sw.begin();
  sw.begin_top_list(Key::DeviceTraces);
  sw.begin_list();
  Entry oom;
  oom.action = Action::Oom;
  oom.size = uint64_t{1} << 62;
  oom.device_free = UINT64_MAX;
  oom.category = sw.category("app");
  oom.stack = 5;  // frames left out: no 'frames' key, no question asked
  sw.entry(oom);
  Entry other;
  other.action = Action::Other;
  other.other_action = "annotate";
  other.category = sw.category("unknown");
  sw.entry(other);
  sw.end_list();
  sw.end_list();
  sw.begin_top_list(Key::Segments);
  sw.end_list();
  sw.allocator_settings({}, {});
  sw.end();
  CHECK(stacks.calls == 0);
  std::string out;
  int rc = check_with_python(w,
                             "e = s['device_traces'][0]\n"
                             "assert 'addr' not in e[0] and 'frames' not in e[0]\n"
                             "assert e[0]['size'] == 2**53 - 1 and e[0]['size_exact'] == str(1 << 62)\n"
                             "assert e[0]['device_free'] == 2**53 - 1 and e[0]['device_free_exact'] == str(2**64 - 1)\n"
                             "assert e[1]['action'] == 'annotate'",
                             &out);
  INFO(out);
  CHECK(rc == 0);
}

TEST_CASE("the 'unknown' marker goes to the newest entry's list, and only when needed", "[snapshot_writer]") {
  UnknownMarkerPlan none;
  CHECK(none.list() == -1);  // no entries: no categories, no marker
  UnknownMarkerPlan p;
  p.entry(0, 5);
  p.entry(1, 9);
  p.entry(0, 9);  // a tie goes to the later call
  CHECK(p.list() == 0);
  CHECK(p.newest() == 9);
  p.unknown_seen();
  CHECK(p.list() == -1);
}

TEST_CASE("PyTorch's settings: defaults in PyTorch's order, a described key replaces its default",
          "[snapshot_writer]") {
  Settings s = pytorch_settings({{"max_split_size", int64_t{1} << 30},
                                 {"policy_of_mine", std::string("x")},
                                 {"max_split_size", int64_t{5}},
                                 {"expandable_segments", true}});
  REQUIRE(s.size() == 10);
  CHECK(s[0].key == "PYTORCH_CUDA_ALLOC_CONF");
  CHECK(s[1].key == "max_split_size");
  CHECK(std::get<int64_t>(s[1].value) == int64_t{1} << 30);  // the first description wins
  CHECK(std::get<bool>(s[3].value));
  CHECK(s[8].key == "roundup_power2_divisions");
  CHECK(std::get<IntDict>(s[8].value).size() == 16);
  CHECK(s[9].key == "policy_of_mine");
}
