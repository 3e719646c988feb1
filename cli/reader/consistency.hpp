// Facts about a decoded snapshot that no allocator can produce: a segment's blocks adding up to
// more than the segment, two segments holding the same bytes, a held size that is negative (or
// beyond 2^63, which is how a negative integer reaches an unsigned field). The decoder accepts such
// a file because every value has the right type; the analyses would then print figures that mean
// nothing, so the commands refuse it unless told --lenient (see command_line.hpp).
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "cli/reader/snapshot.hpp"

namespace memtrace::reader {

struct Inconsistency {
  std::string what;  // one line naming the place: "segments[3] (device 0, 0x7f0000000000): ..."
};

// Every inconsistency, in file order (segments, then each device's trace), at most `limit` of them
// (0: no limit); *total, when given, receives how many there are in all.
std::vector<Inconsistency> find_inconsistencies(const Snapshot& s, size_t limit = 0, size_t* total = nullptr);

}  // namespace memtrace::reader
