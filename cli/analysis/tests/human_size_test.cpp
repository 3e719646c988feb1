#include "cli/analysis/human_size.hpp"

#include <catch2/catch.hpp>

using namespace memtrace::analysis;

TEST_CASE("binary units with two decimals") {
  CHECK(human_bytes(0) == "0 B");
  CHECK(human_bytes(1023) == "1023 B");
  CHECK(human_bytes(1024) == "1.00 KiB");
  CHECK(human_bytes(1536) == "1.50 KiB");
  CHECK(human_bytes(9ull << 20) == "9.00 MiB");
  CHECK(human_bytes(5ull << 29) == "2.50 GiB");
  CHECK(human_bytes(3ull << 40) == "3.00 TiB");
  CHECK(human_delta(0) == "0 B");
  CHECK(human_delta(-512) == "-512 B");
  CHECK(human_delta(2048) == "+2.00 KiB");
  CHECK(human_delta(INT64_MIN).substr(0, 1) == "-");
}

TEST_CASE("times are UTC with microseconds; absent is '-'") {
  CHECK(human_time_us(0) == "-");
  CHECK(human_time_us(1767225600000010) == "2026-01-01 00:00:00.000010 UTC");
}

TEST_CASE("counts with their noun") {
  CHECK(count_of(0, "segment") == "0 segments");
  CHECK(count_of(1, "allocation") == "1 allocation");
}
