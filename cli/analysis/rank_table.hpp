// `memtrace ranks`: which rank a snapshot belongs to, and which ranks stand out.
//
// Outlier rule: a rank is an outlier when its peak allocated bytes differ from the median of all
// ranks by more than 20% of the median AND by more than 3 scaled MADs (1.4826 x the median absolute
// deviation, the robust stand-in for a standard deviation). The first condition ignores spreads
// too small to matter; the second ignores a rank that is merely at the edge of a wide but even
// spread. With fewer than 3 ranks nothing is an outlier (no majority to compare with). Both high
// (more memory: the usual OOM suspect) and low outliers are flagged.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace memtrace::analysis {

// The rank a file name states: the digits after "rank" (any case, optionally followed by '-', '_'
// or '='), else the whole stem when it is only digits ("3.pickle"); "" when the name says none.
std::string rank_from_filename(std::string_view filename);


struct OutlierVerdict {
  double median = 0;
  double mad = 0;        // scaled (x1.4826)
  std::vector<int> flag;  // per input row: +1 high outlier, -1 low, 0 none
};
OutlierVerdict find_outliers(const std::vector<uint64_t>& peaks);

// Orders rank labels: numbers numerically, then other labels as text, "" last.
bool rank_less(const std::string& a, const std::string& b);

}  // namespace memtrace::analysis
