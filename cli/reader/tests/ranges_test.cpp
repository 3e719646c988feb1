// Range stacks (docs/ranges.md, "What a snapshot carries"): 'ranges' read from entries and blocks,
// kept once for merge, bounded in depth; ranges derived from external_annotations when a PyTorch
// file has no 'ranges' keys; wrong types refused with the entry's path. The files are
// make_range_pickles.py's.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "cli/reader/range_table.hpp"
#include "cli/reader/snapshot.hpp"
#include "test_util.hpp"

using namespace memtrace::reader;
namespace t = memtrace::reader::test;

namespace {

const t::TempDir& range_pickles() {
  static t::TempDir dir;
  static bool made = [] {
    std::string cmd = std::string(MEMTRACE_TEST_PYTHON) + " '" + MEMTRACE_TEST_RANGE_PICKLES_SCRIPT + "' '" +
                      dir.path() + "'";
    return system(cmd.c_str()) == 0;
  }();
  REQUIRE(made);
  return dir;
}

Snapshot load(const std::string& name) {
  LoadResult r = load_snapshot(range_pickles() / name);
  if (r.error) FAIL(r.error->message);
  return std::move(*r.snapshot);
}

// "a > b", "" for no range.
std::string path(const Snapshot& s, RangeId id) {
  std::string out;
  for (StrId n : s.range_path(id)) out += (out.empty() ? "" : " > ") + std::string(s.str(n));
  return out;
}

// How many keys named `key` the kept dict has.
size_t kept_count(const Snapshot& s, memtrace::format::RawId dict, std::string_view key) {
  if (dict == 0) return 0;
  size_t n = 0;
  const auto& node = s.raw.node(dict);
  const memtrace::format::RawId* kids = s.raw.children(dict);
  for (uint32_t i = 0; i + 1 < node.count; i += 2) n += s.raw.is_str(kids[i], key);
  return n;
}

}  // namespace

TEST_CASE("ranges: 'ranges' keys on entries and blocks") {
  Snapshot s = load("keys.pickle");
  CHECK(s.ranges_from == RangesFrom::kKeys);
  const auto& d0 = s.device_traces.at(0);
  REQUIRE(d0.size() == 8 + 1000);
  CHECK(path(s, d0[0].range) == "step > forward");
  CHECK(d0[1].range == d0[0].range);  // the same list object
  CHECK(d0[2].range == d0[0].range);  // an equal list: one id
  CHECK(d0[3].range == 0);            // None
  CHECK(d0[4].range == 0);            // []
  CHECK(path(s, d0[5].range) == "step > backward");  // a tuple
  // An outer part is shared: 'step' is the parent of both.
  CHECK(s.ranges[d0[5].range].parent == s.ranges[d0[0].range].parent);
  // 300 deep: the outermost kMaxRangeDepth names.
  std::vector<StrId> deep = s.range_path(d0[6].range);
  REQUIRE(deep.size() == kMaxRangeDepth);
  CHECK(s.str(deep.front()) == "r0");
  CHECK(s.str(deep.back()) == "r" + std::to_string(kMaxRangeDepth - 1));
  CHECK(d0[7].range == 0);  // no key
  // 100,000 names shared by 1000 entries: read once, one id.
  for (size_t i = 8; i < d0.size(); ++i) REQUIRE(d0[i].range == d0[8].range);
  CHECK(s.range_path(d0[8].range).size() == kMaxRangeDepth);

  const auto& blocks = s.segments.at(0).blocks;
  CHECK(blocks[0].range == d0[0].range);
  CHECK(blocks[1].range == 0);
  CHECK(path(s, blocks[2].range) == "step");
  CHECK(blocks[3].range == 0);
}

TEST_CASE("ranges: 'ranges' is kept as it was, once, for merge to write back") {
  Snapshot s = load("keys.pickle");
  const auto& d0 = s.device_traces.at(0);
  memtrace::format::RawId k0 = s.kept_entry(0, 0);
  CHECK(kept_count(s, k0, "ranges") == 1);
  CHECK(kept_count(s, k0, "user_metadata") == 1);
  const memtrace::format::RawId* v = s.raw.find(k0, "ranges");
  REQUIRE(v);
  REQUIRE(s.raw.node(*v).kind == memtrace::format::RawKind::kList);
  REQUIRE(s.raw.node(*v).count == 2);
  CHECK(s.raw.text_of(s.raw.children(*v)[0]) == "step");
  CHECK(s.raw.text_of(s.raw.children(*v)[1]) == "forward");
  // The tuple stays a tuple, None stays None, and an entry without the key keeps nothing.
  const memtrace::format::RawId* tup = s.raw.find(s.kept_entry(0, 5), "ranges");
  REQUIRE(tup);
  CHECK(s.raw.node(*tup).kind == memtrace::format::RawKind::kTuple);
  const memtrace::format::RawId* none = s.raw.find(s.kept_entry(0, 3), "ranges");
  REQUIRE(none);
  CHECK(s.raw.node(*none).kind == memtrace::format::RawKind::kNone);
  CHECK(kept_count(s, s.kept_entry(0, 7), "ranges") == 0);
  // A list shared by 1000 entries is one kept copy.
  CHECK(*s.raw.find(s.kept_entry(0, 8), "ranges") == *s.raw.find(s.kept_entry(0, 9), "ranges"));
  CHECK(d0[8].has_kept);
  // Blocks keep it among their kept keys too.
  CHECK(kept_count(s, s.segments[0].blocks[0].kept, "ranges") == 1);
  CHECK(kept_count(s, s.segments[0].blocks[1].kept, "ranges") == 0);
}

TEST_CASE("ranges: derived from external_annotations in a PyTorch file") {
  Snapshot s = load("markers.pickle");
  REQUIRE(s.ranges_from == RangesFrom::kAnnotations);
  const auto& d0 = s.device_traces.at(0);
  REQUIRE(d0.size() == 9);
  CHECK(path(s, d0[0].range) == "");                       // before every marker
  CHECK(path(s, d0[1].range) == "outer");                  // the microsecond it starts: inside
  CHECK(path(s, d0[2].range) == "outer > inner");
  CHECK(path(s, d0[3].range) == "outer > inner > cross");  // markers out of list order, sorted by time
  CHECK(path(s, d0[4].range) == "outer > cross");          // inner ended, cross (opened inside it) stays
  CHECK(path(s, d0[5].range) == "cross");                  // the microsecond outer ends: outside
  CHECK(path(s, d0[6].range) == "open");                   // a START and an END in one microsecond
  CHECK(path(s, d0[7].range) == "open");
  CHECK(path(s, d0[8].range) == "open > no device");       // a marker without a device is device 0
  CHECK(path(s, s.device_traces.at(1).at(0).range) == "d1");

  const auto& b = s.segments.at(0).blocks;
  REQUIRE(b.size() == 8);
  CHECK(b[0].range == 0);
  for (size_t i = 1; i < 6; ++i) CHECK(b[i].range == d0[i].range);
  CHECK(b[6].range == d0[8].range);  // the last alloc at its address, not the freed one
  CHECK(b[7].range == 0);            // inactive
  CHECK(s.segments.at(1).blocks.at(0).range == s.device_traces[1][0].range);

  CHECK(s.range_derivation.markers == 10);
  CHECK(s.range_derivation.ignored == 6);  // no stage, no time, a name not a str, another stage, device 9, not a dict
  CHECK(s.range_derivation.unmatched_ends == 1);
  CHECK(s.range_derivation.unclosed == 3);
  // Derived ranges are not 'ranges' keys: nothing is added to what merge writes back.
  for (size_t i = 0; i < d0.size(); ++i) CHECK(kept_count(s, s.kept_entry(0, i), "ranges") == 0);
}

TEST_CASE("ranges: nothing is derived for memtrace's own files, or when 'ranges' keys exist") {
  Snapshot mt = load("memtrace_markers.pickle");
  CHECK(mt.producer == Producer::kMemtrace);
  CHECK(mt.ranges_from == RangesFrom::kNone);
  for (const auto& e : mt.device_traces.at(0)) CHECK(e.range == 0);

  Snapshot both = load("keys_and_markers.pickle");
  CHECK(both.ranges_from == RangesFrom::kKeys);
  const auto& d0 = both.device_traces.at(0);
  CHECK(path(both, d0[1].range) == "from key");
  for (size_t i = 0; i < d0.size(); ++i)
    if (i != 1) CHECK(d0[i].range == 0);
  CHECK(both.range_derivation.markers == 0);
}

TEST_CASE("ranges: a 'ranges' value of the wrong type is refused with its path") {
  auto error_of = [](const std::string& name) {
    LoadResult r = load_snapshot(range_pickles() / name);
    REQUIRE(r.error);
    CHECK(r.error->message.find('\n') == std::string::npos);
    return r.error->message;
  };
  CHECK_THAT(error_of("bad_not_list.pickle"),
             Catch::Contains("device_traces[0][2]: 'ranges' is a int, expected a list of str"));
  CHECK_THAT(error_of("bad_item.pickle"),
             Catch::Contains("device_traces[0][2]: 'ranges' holds a int, expected a list of str"));
  CHECK_THAT(error_of("bad_block.pickle"),
             Catch::Contains("segments[0].blocks[1]: 'ranges' is a str, expected a list of str"));
}

TEST_CASE("ranges: RangeTable interns (parent, name) pairs, parents before children") {
  std::vector<RangeNode> nodes;
  RangeTable t(&nodes);
  REQUIRE(nodes.size() == 1);  // node 0: no range
  StrId ab[] = {5, 6};
  RangeId x = t.stack(ab, 2);
  CHECK(t.stack(ab, 2) == x);
  CHECK(t.stack(ab, 1) == nodes[x].parent);
  CHECK(nodes[x].parent < x);
  CHECK(t.stack(ab, 0) == 0);
  // A table made over existing nodes finds them.
  RangeTable again(&nodes);
  CHECK(again.stack(ab, 2) == x);
  CHECK(nodes.size() == 3);
}
