// The report's model written as the page's data: the `window.MEMTRACE_REPORT` object of
// docs/report.md, "The page's data", one JSON document (valid UTF-8, as every memtrace JSON).
#pragma once
#include <string>

#include "cli/report/report_model.hpp"

namespace memtrace::report {

std::string report_data_json(const Model& m, const std::string& memtrace_version);

}  // namespace memtrace::report
