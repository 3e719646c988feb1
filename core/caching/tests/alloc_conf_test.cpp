// PYTORCH_CUDA_ALLOC_CONF parsing and request rounding (docs/caching-allocator.md, "Request rounding"
// and "Settings: MEMTRACE_ALLOC_CONF").
#include <catch2/catch.hpp>

#include "core/caching/alloc_conf.hpp"

using namespace memtrace::caching;

namespace {
constexpr size_t MiB = kMiB;

AllocConf parse(const char* s, std::vector<std::string>* w) { return parse_alloc_conf(s, w); }
AllocConf parse_ok(const char* s) {
  std::vector<std::string> w;
  AllocConf c = parse_alloc_conf(s, &w);
  INFO(s);
  REQUIRE(w.empty());
  return c;
}
AllocConf with_divisions(uint32_t d) {
  AllocConf c;
  c.roundup_power2_divisions.fill(d);
  return c;
}
}  // namespace

TEST_CASE("defaults", "[conf]") {
  AllocConf c = parse_ok("");
  CHECK(c.max_split_size == kNoMaxSplit);
  CHECK(c.max_non_split_rounding == 20 * MiB);
  CHECK(c.large_segment_size == 20 * MiB);
  CHECK(c.garbage_collection_threshold == 0);
  CHECK_FALSE(c.per_process_memory_fraction.has_value());
  CHECK_FALSE(c.expandable_segments);
  CHECK(c.policy == Policy::PyTorch);
  CHECK(c.deferred_free);
  for (uint32_t d : c.roundup_power2_divisions) CHECK(d == 0);
}

TEST_CASE("round_size: 512-byte rounding", "[conf][rounding]") {
  AllocConf c;
  CHECK(round_size(c, 0) == 512);
  CHECK(round_size(c, 1) == 512);
  CHECK(round_size(c, 512) == 512);
  CHECK(round_size(c, 513) == 1024);
  CHECK(round_size(c, 5000000) == 5000192);
  CHECK(round_size(c, 1 * MiB + 1) == 1 * MiB + 512);
}

// The worked examples of docs/caching-allocator.md, "Request rounding".
TEST_CASE("round_size: the documented examples", "[conf][rounding]") {
  // d = 4, s = 5,000,000: f = 4 MiB, step = 1 MiB.
  CHECK(round_size(with_divisions(4), 5000000) == 5242880);
  // d = 8 reaches interval 0, so a 600 KiB request becomes 640 KiB (step 64 KiB).
  CHECK(round_size(with_divisions(8), 600 * 1024) == 640 * 1024);
  // Powers of two are kept.
  CHECK(round_size(with_divisions(4), 8 * MiB) == 8 * MiB);
  // Small requests (s <= 512 * d) fall back to 512-byte rounding.
  CHECK(round_size(with_divisions(8), 3000) == 3072);
  CHECK(round_size(with_divisions(8), 4097) == 4608);
  // One division is the same as none.
  CHECK(round_size(with_divisions(1), 5000000) == 5000192);
}

TEST_CASE("roundup_interval clamps to 0..15", "[conf][rounding]") {
  CHECK(roundup_interval(1) == 0);
  CHECK(roundup_interval(2 * MiB - 1) == 0);
  CHECK(roundup_interval(2 * MiB) == 1);
  CHECK(roundup_interval(128 * MiB) == 7);
  CHECK(roundup_interval(size_t{64} << 30) == 15);
}

// The list form of docs/caching-allocator.md, "Settings: MEMTRACE_ALLOC_CONF".
TEST_CASE("roundup_power2_divisions: one value and the documented list", "[conf]") {
  AllocConf one = parse_ok("roundup_power2_divisions:4");
  for (uint32_t d : one.roundup_power2_divisions) CHECK(d == 4);

  AllocConf l = parse_ok("roundup_power2_divisions:[128:8,256:16,512:1,2048:8,>:2]");
  const auto& d = l.roundup_power2_divisions;
  for (int i = 0; i <= 7; ++i) CHECK(d[i] == 8);  // the first entry back-fills lower intervals
  CHECK(d[8] == 16);
  CHECK(d[9] == 1);
  CHECK(d[10] == 0);  // between listed keys, not listed
  CHECK(d[11] == 8);
  for (int i = 12; i < 16; ++i) CHECK(d[i] == 2);
  // 64 MiB -> 8 as in PyTorch's own test.
  CHECK(d[roundup_interval(64 * MiB)] == 8);
}

TEST_CASE("keys, values and whitespace", "[conf]") {
  AllocConf c = parse_ok(" max_split_size_mb : 200 , expandable_segments : True ,garbage_collection_threshold:0.6,"
                         "per_process_memory_fraction:0.5,max_non_split_rounding_mb:64,large_segment_size_mb:32,"
                         "release_lock_on_cudamalloc:True,backend:native");
  CHECK(c.max_split_size == 200 * MiB);
  CHECK(c.expandable_segments);
  CHECK(c.garbage_collection_threshold == Approx(0.6));
  REQUIRE(c.per_process_memory_fraction.has_value());
  CHECK(*c.per_process_memory_fraction == Approx(0.5));
  CHECK(c.max_non_split_rounding == 64 * MiB);
  CHECK(c.large_segment_size == 32 * MiB);
  CHECK(c.release_lock_on_cudamalloc);
}

TEST_CASE("pinned-host and capture keys are accepted and ignored", "[conf]") {
  AllocConf c = parse_ok("pinned_use_cuda_host_register:True,pinned_num_register_threads:8,"
                         "pinned_use_background_threads:True,pinned_reserve_segment_size_mb:64,"
                         "graph_capture_record_stream_reuse:True,max_split_size_mb:64");
  CHECK(c.max_split_size == 64 * MiB);
}

TEST_CASE("memtrace's own keys", "[conf]") {
  AllocConf c = parse_ok("memtrace_policy:remap,memtrace_deferred_free:False,memtrace_free_batch_mb:256");
  CHECK(c.policy == Policy::Remap);
  CHECK_FALSE(c.deferred_free);
  CHECK(c.free_batch_bytes == 256 * MiB);
  CHECK(std::string(policy_name(c.policy)) == "remap");
}

TEST_CASE("bad keys and values: a warning each, defaults kept, the rest still parsed", "[conf]") {
  struct Case {
    const char* text;
    size_t warnings;
  };
  const Case cases[] = {
      {"no_such_key:1", 1},
      {"max_split_size_mb:10", 1},          // below 20
      {"max_split_size_mb:abc", 1},
      {"max_split_size_mb:-5", 1},
      {"max_split_size_mb", 1},             // no value
      {"max_split_size_mb:", 1},
      {"expandable_segments:true", 1},      // booleans are exactly True / False
      {"garbage_collection_threshold:1.5", 1},
      {"garbage_collection_threshold:0", 1},
      {"per_process_memory_fraction:2", 1},
      {"roundup_power2_divisions:3", 1},    // not a power of two
      {"roundup_power2_divisions:[64:3]", 1},
      {"roundup_power2_divisions:[48:4]", 1},  // interval key not a power of two
      {"roundup_power2_divisions:[64:4", 1},   // list not closed
      {"roundup_power2_divisions:[64]", 1},
      {"max_split_size_mb:[64:4]", 1},      // a list where one value is expected
      {"backend:cudaMallocAsync", 1},
      {"backend:other", 1},
      {"memtrace_policy:best", 1},
      {"max_split_size_mb:20,large_segment_size_mb:40", 1},  // max split below the segment size
      {"::,,]", 2},
  };
  for (const Case& k : cases) {
    std::vector<std::string> w;
    AllocConf c = parse(k.text, &w);
    INFO(k.text);
    CHECK(w.size() == k.warnings);
    CHECK(c.max_split_size == kNoMaxSplit);
    CHECK_FALSE(c.expandable_segments);
    CHECK(c.garbage_collection_threshold == 0);
    CHECK(c.policy == Policy::PyTorch);
    for (uint32_t d : c.roundup_power2_divisions) CHECK(d == 0);
  }
  // A bad entry does not spoil the good ones around it.
  std::vector<std::string> w;
  AllocConf c = parse("max_split_size_mb:64,bogus:1,roundup_power2_divisions:[64:3],expandable_segments:True", &w);
  CHECK(w.size() == 2);
  CHECK(c.max_split_size == 64 * MiB);
  CHECK(c.expandable_segments);
  // Trailing garbage in an entry is warned about.
  w.clear();
  parse("max_split_size_mb:64 30", &w);
  CHECK(w.size() == 1);
  // Warnings may be dropped.
  CHECK(parse_alloc_conf("bogus:1", nullptr).max_split_size == kNoMaxSplit);
}
