// The decoder's trace-entry pool layout (snapshot_decoder_internal.hpp): chunks tile the entry
// indices with no gap or overlap, a full-size chunk fills whole huge pages (no page of the pool is
// resident while half of it is unused), and a chunk is a mapping of its own that is gone the
// moment it is released.
#include <catch2/catch.hpp>

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <vector>

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

TEST_CASE("entry pool: a chunk is its own mapping, aligned for huge pages, gone once released") {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> vec(1);
  // A released chunk is unmapped at once (a chunk from malloc could stay resident in the heap).
  auto mapped = [&](const void* p) { return mincore(const_cast<void*>(p), page, vec.data()) == 0; };
  d::EntryChunk big(d::kChunk * sizeof(memtrace::reader::TraceEntry));
  REQUIRE(big.get() != nullptr);
  CHECK(reinterpret_cast<uintptr_t>(big.get()) % (uintptr_t{2} << 20) == 0);
  CHECK(big.bytes() >= d::kChunk * sizeof(memtrace::reader::TraceEntry));
  for (uint32_t i = 0; i < d::kChunk; i += 1000) big.get()[i].size = i;  // writable throughout
  big.get()[d::kChunk - 1].size = 7;
  const void* first = big.get();
  const void* last = reinterpret_cast<const char*>(big.get()) + big.bytes() - page;
  CHECK(mapped(first));
  CHECK(mapped(last));
  d::EntryChunk moved(std::move(big));
  CHECK(big.get() == nullptr);
  CHECK(moved.get()[d::kChunk - 1].size == 7);
  moved.reset();
  CHECK(moved.get() == nullptr);
  CHECK_FALSE(mapped(first));
  CHECK_FALSE(mapped(last));

  d::EntryChunk small(d::kFirstChunk * sizeof(memtrace::reader::TraceEntry));  // below 2 MiB: no slack
  small.get()[d::kFirstChunk - 1].size = 1;
  CHECK(small.bytes() % page == 0);
}
