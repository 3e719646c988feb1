#include "cli/analysis/human_size.hpp"

#include <cinttypes>
#include <cstdio>
#include <ctime>

namespace memtrace::analysis {

std::string human_delta(int64_t bytes) {
  if (bytes == 0) return "0 B";
  uint64_t mag = bytes < 0 ? static_cast<uint64_t>(-(bytes + 1)) + 1 : static_cast<uint64_t>(bytes);
  return (bytes < 0 ? "-" : "+") + human_bytes(mag);
}

std::string count_of(uint64_t n, const char* noun) {
  return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
}

std::string human_time_us(int64_t t) {
  if (t == 0) return "-";
  time_t secs = static_cast<time_t>(t / 1000000);
  int64_t micros = t % 1000000;
  if (micros < 0) {
    micros += 1000000;
    --secs;
  }
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02d %02d:%02d:%02d.%06" PRId64 " UTC", tm.tm_year + 1900, tm.tm_mon + 1,
                tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, micros);
  return buf;
}

}  // namespace memtrace::analysis
