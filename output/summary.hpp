// One screen of text for stderr at the end of a run.
#pragma once
#include <cstdint>
#include <string>

#include "core/records.hpp"
#include "output/frame_source.hpp"

namespace memtrace::output {

struct SummaryInfo {
  std::string program;  // shown in the header (executable path or name)
  int64_t pid = 0;
  bool written = false;
  std::string path;   // snapshot path when written
  std::string why_not;  // reason it was not written (error, or "disabled")
  size_t bytes = 0;   // snapshot size
  double seconds = 0;
  bool report_follows = false;  // MEMTRACE_REPORT=1: its HTML report is written next
  size_t max_owner_rows = 8;  // owners listed before "others"
  size_t max_site_rows = 5;   // largest live call sites listed (0: none)
};

// Every line ends with '\n'; the first starts with "memtrace: ". owners resolves stack ids to
// owner names (NullFrameSource: all "unknown").
std::string format_summary(const StateCopy& state, FrameSource& owners, const SummaryInfo& info);

}  // namespace memtrace::output
