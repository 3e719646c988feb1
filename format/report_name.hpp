// Where a snapshot's HTML report goes when nobody says: beside it, FILE.pickle -> FILE.html. One rule
// for `memtrace report` and for MEMTRACE_REPORT=1 (docs/report.md).
#pragma once
#include <string>
#include <string_view>

namespace memtrace::format {

inline std::string report_path_for(const std::string& snapshot_path) {
  std::string base = snapshot_path;
  for (std::string_view ext : {".pickle", ".pkl"}) {
    if (base.size() > ext.size() && std::string_view(base).ends_with(ext)) {
      base.resize(base.size() - ext.size());
      break;
    }
  }
  return base + ".html";
}

}  // namespace memtrace::format
