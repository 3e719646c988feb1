#include "cli/analysis/rank_table.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>

namespace memtrace::analysis {

namespace {

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
}

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

std::string rank_from_filename(std::string_view filename) {
  size_t slash = filename.find_last_of('/');
  std::string_view name = slash == std::string_view::npos ? filename : filename.substr(slash + 1);
  std::string lower(name);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (size_t pos = lower.find("rank"); pos != std::string::npos; pos = lower.find("rank", pos + 1)) {
    size_t i = pos + 4;
    if (i < lower.size() && (lower[i] == '-' || lower[i] == '_' || lower[i] == '=')) ++i;
    size_t j = i;
    while (j < lower.size() && std::isdigit(static_cast<unsigned char>(lower[j]))) ++j;
    if (j > i) return std::string(name.substr(i, j - i));
  }
  size_t dot = name.find('.');
  std::string_view stem = name.substr(0, dot);
  if (all_digits(stem)) return std::string(stem);
  return "";
}

OutlierVerdict find_outliers(const std::vector<uint64_t>& peaks) {
  OutlierVerdict v;
  v.flag.assign(peaks.size(), 0);
  std::vector<double> x(peaks.begin(), peaks.end());
  v.median = median_of(x);
  std::vector<double> dev;
  dev.reserve(x.size());
  for (double p : x) dev.push_back(std::fabs(p - v.median));
  v.mad = 1.4826 * median_of(dev);
  if (peaks.size() < 3) return v;
  for (size_t i = 0; i < x.size(); ++i) {
    double d = x[i] - v.median;
    if (std::fabs(d) > 0.2 * v.median && std::fabs(d) > 3 * v.mad) v.flag[i] = d > 0 ? 1 : -1;
  }
  return v;
}

bool rank_less(const std::string& a, const std::string& b) {
  if (a.empty() != b.empty()) return b.empty();
  bool na = all_digits(a), nb = all_digits(b);
  if (na != nb) return na;
  if (na) {
    std::string_view sa = a, sb = b;
    while (sa.size() > 1 && sa[0] == '0') sa.remove_prefix(1);
    while (sb.size() > 1 && sb[0] == '0') sb.remove_prefix(1);
    if (sa.size() != sb.size()) return sa.size() < sb.size();
    if (sa != sb) return sa < sb;
  }
  return a < b;
}

}  // namespace memtrace::analysis
