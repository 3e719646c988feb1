// Byte counts as people write and read them: the one size parser (MEMTRACE_* variables, `memtrace
// replay --capacity`) and the one printer (the exit summary, every command's text output), so that
// "16G" means the same everywhere and a size reads the same on stderr at exit and in `memtrace
// summary`. Every unit is a power of 1024, whatever its spelling (K, KB, KiB), because GPU memory is
// quoted that way.
#pragma once
#include <cctype>
#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

namespace memtrace::format {

namespace units_detail {

inline std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

inline bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  return true;
}

}  // namespace units_detail

// "4096", "16G", "512M", "1.5K", "2GiB", "2GB", "80 GiB": a non-negative number as strtod reads it
// (so "1e3" and "0x1p10" too), then optionally a unit K, M, G, T or B in either case, itself
// optionally followed by "B" or "iB"; blanks around the number and the unit are ignored. The byte
// count is the product rounded down. nullopt for anything else: no number, a negative, infinite
// or out-of-range number, an unknown unit, or 2^64 bytes and more. Callers add their own bounds
// (zero, a maximum).
inline std::optional<uint64_t> parse_size(std::string_view text) {
  using units_detail::iequals;
  using units_detail::trim;
  text = trim(text);
  if (text.empty()) return std::nullopt;
  const std::string number(text);  // strtod needs the terminating NUL
  char* end = nullptr;
  errno = 0;
  const double d = std::strtod(number.c_str(), &end);
  if (errno != 0 || end == number.c_str() || !(d >= 0) || std::isinf(d)) return std::nullopt;
  const std::string_view unit = trim(std::string_view(end));
  double scale = 1;
  if (!unit.empty()) {
    switch (std::toupper(static_cast<unsigned char>(unit[0]))) {
      case 'K': scale = 0x1p10; break;
      case 'M': scale = 0x1p20; break;
      case 'G': scale = 0x1p30; break;
      case 'T': scale = 0x1p40; break;
      case 'B': scale = 1; break;
      default: return std::nullopt;
    }
    const std::string_view rest = unit.substr(1);
    if (!(rest.empty() || iequals(rest, "B") || iequals(rest, "iB"))) return std::nullopt;
  }
  const double bytes = d * scale;
  if (bytes >= 0x1p64) return std::nullopt;
  return static_cast<uint64_t>(bytes);
}

// "512 B", "1.50 KiB", "8.00 MiB", "2.25 GiB", "1.00 TiB", "3.00 PiB": bytes below 1024 as they
// are, else binary units with two decimals.
inline std::string human_bytes(uint64_t bytes) {
  static const char* const kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  char buf[48];
  if (bytes < 1024) {
    std::snprintf(buf, sizeof buf, "%" PRIu64 " B", bytes);
    return buf;
  }
  double v = static_cast<double>(bytes) / 1024.0;
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  std::snprintf(buf, sizeof buf, "%.2f %s", v, kUnits[u]);
  return buf;
}

}  // namespace memtrace::format
