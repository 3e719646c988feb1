// format/units.hpp, the one size parser and printer of the whole project (format/ has no test
// program of its own; the CLI is its main user).
#include "format/units.hpp"

#include <catch2/catch.hpp>

using memtrace::format::human_bytes;
using memtrace::format::parse_size;

TEST_CASE("sizes: every unit is a power of 1024, however it is spelled") {
  CHECK(parse_size("4096") == 4096u);
  CHECK(parse_size("16G") == 16ull << 30);
  CHECK(parse_size("512M") == 512ull << 20);
  CHECK(parse_size("1.5K") == 1536u);
  CHECK(parse_size("2GiB") == 2ull << 30);
  CHECK(parse_size("2GB") == 2ull << 30);
  CHECK(parse_size("2gb") == 2ull << 30);
  CHECK(parse_size("1KB") == 1024u);
  CHECK(parse_size("1kib") == 1024u);
  CHECK(parse_size("3T") == 3ull << 40);
  CHECK(parse_size("24576MiB") == 24576ull << 20);
  CHECK(parse_size("100B") == 100u);
  CHECK(parse_size(" 80 GiB ") == 80ull << 30);
  CHECK(parse_size("1e3") == 1000u);
  CHECK(parse_size("0") == 0u);
  CHECK(parse_size("0.4") == 0u);  // rounded down; callers reject zero where it means nothing
  CHECK(parse_size("1.9") == 1u);
}

TEST_CASE("sizes: what is not one") {
  for (const char* bad : {"", " ", "-1", "-1K", "12Q", "1P", "K", "lots", "1KiBs", "1Ki", "1 K B", "inf", "nan",
                          "1e400", "16777216T", "18446744073709551616"})
    CHECK_FALSE(parse_size(bad));
}

TEST_CASE("human sizes: bytes below 1024, else binary units with two decimals") {
  CHECK(human_bytes(0) == "0 B");
  CHECK(human_bytes(1023) == "1023 B");
  CHECK(human_bytes(1024) == "1.00 KiB");
  CHECK(human_bytes(123456) == "120.56 KiB");
  CHECK(human_bytes((1u << 20) - 1) == "1024.00 KiB");  // rounded, not carried to the next unit
  CHECK(human_bytes(1u << 20) == "1.00 MiB");
  CHECK(human_bytes(28000000) == "26.70 MiB");
  CHECK(human_bytes(5ull << 50) == "5.00 PiB");
  CHECK(human_bytes(UINT64_MAX) == "16384.00 PiB");
}
