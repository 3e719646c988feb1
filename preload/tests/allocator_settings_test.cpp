// MEMTRACE_ALLOC_CONF as the session parses it and describes it to snapshots
// (preload/allocator_settings.hpp).
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <variant>

#include "core/log.hpp"
#include "preload/allocator_settings.hpp"

using namespace memtrace;
using namespace memtrace::preload;

namespace {

std::string parse_and_log(const std::string& text, caching::AllocConf* out) {
  const std::string path = "/tmp/memtrace-preload-settings-log-" + std::to_string(getpid());
  std::remove(path.c_str());
  log::set_destination(path.c_str());
  *out = parse_allocator_settings(text);
  log::set_destination(nullptr);
  std::string got;
  if (FILE* f = std::fopen(path.c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) got.append(buf, n);
    std::fclose(f);
  }
  std::remove(path.c_str());
  return got;
}

const format::Setting* find(const format::Settings& list, const std::string& key) {
  for (const format::Setting& s : list)
    if (s.key == key) return &s;
  return nullptr;
}

}  // namespace

TEST_CASE("good settings are taken silently", "[allocator_settings]") {
  caching::AllocConf c;
  const std::string log = parse_and_log("expandable_segments:True,max_split_size_mb:128", &c);
  CHECK(log.empty());
  CHECK(c.expandable_segments);
  CHECK(c.max_split_size == 128 * caching::kMiB);
}

TEST_CASE("each bad piece costs one warning naming MEMTRACE_ALLOC_CONF and keeps its default", "[allocator_settings]") {
  caching::AllocConf c;
  const std::string log = parse_and_log("bogus:1,expandable_segments:True", &c);
  INFO(log);
  CHECK(std::count(log.begin(), log.end(), '\n') == 1);
  CHECK(log.find("memtrace: warning: MEMTRACE_ALLOC_CONF: ") == 0);
  CHECK(c.expandable_segments);
  CHECK(c.max_split_size == caching::kNoMaxSplit);
}

TEST_CASE("the description lists every setting under its snapshot key", "[allocator_settings]") {
  caching::AllocConf c = parse_allocator_settings("expandable_segments:True,memtrace_policy:remap");
  output::AllocatorSettings d;
  describe_allocator_settings(c, false, &d);
  for (const char* key : {"PYTORCH_CUDA_ALLOC_CONF", "max_split_size", "garbage_collection_threshold",
                          "expandable_segments", "release_lock_on_cudamalloc", "roundup_power2_divisions"})
    CHECK(find(d.pytorch, key) != nullptr);
  for (const char* key : {"policy", "deferred_free", "free_batch_bytes", "max_non_split_rounding",
                          "large_segment_size", "per_process_memory_fraction"})
    CHECK(find(d.memtrace, key) != nullptr);
  CHECK(std::get<std::string>(find(d.pytorch, "PYTORCH_CUDA_ALLOC_CONF")->value) ==
        "expandable_segments:True,memtrace_policy:remap");
  CHECK(std::get<int64_t>(find(d.pytorch, "max_split_size")->value) == -1);  // unlimited
  // As the allocators really run: here without virtual-memory support.
  CHECK(std::get<bool>(find(d.pytorch, "expandable_segments")->value) == false);
  CHECK(std::get<std::string>(find(d.memtrace, "policy")->value) == "remap");
  CHECK(std::holds_alternative<std::monostate>(find(d.memtrace, "per_process_memory_fraction")->value));
}
