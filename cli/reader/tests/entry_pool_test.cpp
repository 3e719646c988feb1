// The decoder's trace-entry pool layout (snapshot_decoder_internal.hpp): chunks tile the entry
// indices with no gap or overlap, and a full-size chunk fills whole huge pages, so no page of the
// pool is resident while half of it is unused.
#include <catch2/catch.hpp>

#include "cli/reader/snapshot_decoder_internal.hpp"

namespace d = memtrace::reader::detail;

TEST_CASE("entry pool: every index lies in one chunk, chunks follow each other") {
  uint32_t expect_chunk = 0;
  for (uint32_t i = 0; i < 5 * d::kChunk; ++i) {
    uint32_t c = d::chunk_of(i);
    if (c != expect_chunk) {
      REQUIRE(c == expect_chunk + 1);
      REQUIRE(d::chunk_start(c) == i);  // the next chunk starts right after the last one ends
      expect_chunk = c;
    }
    REQUIRE(i >= d::chunk_start(c));
    REQUIRE(i < d::chunk_start(c) + d::chunk_capacity(c));
  }
  CHECK(expect_chunk == d::kSmallChunks + 3);
  CHECK(d::chunk_capacity(0) == d::kFirstChunk);
}

TEST_CASE("entry pool: a full-size chunk is a whole number of 2 MiB pages") {
  // If TraceEntry changes size, pick kChunk again so that this holds (a 4 MiB chunk holding 3 MiB
  // of entries made a third of a 5M-entry pool resident and unused).
  constexpr size_t kHuge = size_t{2} << 20;
  CHECK(d::kChunk * sizeof(memtrace::reader::TraceEntry) % kHuge == 0);
}
