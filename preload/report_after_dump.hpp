// MEMTRACE_REPORT=1: the HTML report of each snapshot, written beside it by `memtrace report`
// (docs/report.md), run as a child of the program once the snapshot is complete.
#pragma once
#include <string>

namespace memtrace::preload {

// Runs `memtrace report SNAPSHOT -o FILE.html` (format/report_name.hpp) and waits for it; says on
// memtrace's log where the page is, or why there is none. The child gets the program's
// environment without LD_PRELOAD and memtrace's own settings, so it is neither profiled nor
// configured by them, and its standard output goes to /dev/null (the program's is not memtrace's).
// Never throws; leaves errno as it was.
void write_report(const std::string& snapshot_path);

}  // namespace memtrace::preload
