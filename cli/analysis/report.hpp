// Pieces of output several commands print the same way: the line that names a snapshot, and a list
// of groups as text rows or JSON objects. What each command prints around them lives in its
// cli/cmd_<name>.cpp.
#pragma once
#include <cstddef>
#include <cstdio>
#include <string>
#include <vector>

#include "cli/analysis/grouping.hpp"
#include "cli/analysis/json_writer.hpp"
#include "cli/analysis/oom.hpp"
#include "cli/analysis/stack_view.hpp"
#include "cli/reader/snapshot.hpp"

namespace memtrace::analysis {

// "memtrace snapshot (pid 4242, rank 0, reason exit)" / "PyTorch snapshot".
std::string describe_producer(const reader::Snapshot& s);
// JSON: "producer": "memtrace"|"pytorch" and, for memtrace, "memtrace": {pid, rank, host, exe, reason,
// entries_dropped}.
void producer_json(JsonWriter& j, const reader::Snapshot& s);

// Text rows "  <bytes> <count>x <owner> <stack>", at most `limit` (0 = all), then "  ... N more
// (<bytes>)" when some were left out.
// The stack is the view's line for the group's stack, cut so the row fits `width` (0: no limit).
void print_groups(std::FILE* out, const std::vector<Group>& groups, size_t limit, bool show_owner, bool show_stack,
                  StackView* view = nullptr, size_t width = 0);
// JSON array of {bytes, count, owner, frames[]} (frames innermost first, as frame texts).
void groups_json(JsonWriter& j, const reader::Snapshot& s, const std::vector<Group>& groups, size_t limit,
                 bool with_stack);

// Groups by range (GroupBy::kRange) as text rows "  <bytes> <count>x  <range stack>" (the stack
// cut to `width`, its innermost names kept), at most `limit` (0 = all), then "  ... N more".
void print_range_groups(std::FILE* out, const std::vector<Group>& groups, size_t limit, size_t width = 0);
// JSON array of {bytes, count, range: "a > b", ranges: [names, outermost first], owner}.
void range_groups_json(JsonWriter& j, const reader::Snapshot& s, const std::vector<Group>& groups, size_t limit);
// Where the snapshot's ranges came from, for the line above range rows: "" when read from
// 'ranges' keys, "derived from external_annotations", "the file has no ranges".
std::string ranges_origin(const reader::Snapshot& s);
// The same as a JSON value: "ranges", "external_annotations", "none".
const char* ranges_from_name(const reader::Snapshot& s);

// The recorded out-of-memory failures of one device, as text (nothing when there are none): when,
// the request, the driver's free bytes, the state at that moment, the verdict and the stack, the
// stack cut to `width` (docs/reports.md, "Out of memory").
void print_ooms(std::FILE* out, const std::vector<OomReport>& ooms, StackView& view, size_t width);
// JSON array of the same, the whole stack as frame texts.
void ooms_json(JsonWriter& j, const reader::Snapshot& s, const std::vector<OomReport>& ooms);
// The verdict line's text.
std::string oom_verdict(const OomReport& r);

}  // namespace memtrace::analysis
