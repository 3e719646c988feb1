// Byte counts and Unix-microsecond times as people read them in the text output of the commands.
#pragma once
#include <cstdint>
#include <string>

#include "format/units.hpp"

namespace memtrace::analysis {

// "512 B", "1.50 KiB", "8.00 MiB", "2.25 GiB", "1.00 TiB": the printer memtrace's exit summary uses too.
using format::human_bytes;
// Signed variant for differences: "+1.50 MiB", "-512 B", "0 B".
std::string human_delta(int64_t bytes);
// "1 segment", "3 segments".
std::string count_of(uint64_t n, const char* noun);
// "2026-11-30 10:54:38.123456 UTC"; "-" when t is 0 (absent).
std::string human_time_us(int64_t t);

}  // namespace memtrace::analysis
