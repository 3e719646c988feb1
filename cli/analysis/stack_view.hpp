// A snapshot's stacks as the text reports show them: by default only the frames that tell stacks
// apart, each shortened, the line cut to a width (format/stack_line.hpp; docs/reports.md,
// "Readable stacks"); with --frames all, every frame in full, as the file has it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "cli/reader/snapshot.hpp"
#include "format/stack_line.hpp"

namespace memtrace::analysis {

enum class FrameMode { kShort, kAll };

class StackView {
 public:
  StackView(const reader::Snapshot& s, FrameMode mode);

  FrameMode mode() const { return mode_; }
  // The frames shown, innermost first.
  std::vector<reader::FrameId> shown(reader::StackId id);
  // The text that identifies the shown stack: rows with the same key are one row. In kAll mode,
  // stack_text().
  std::string key(reader::StackId id);
  // The stack in one line of at most `width` characters (0: no limit; kAll mode never cuts).
  std::string line(reader::StackId id, size_t width);
  format::FrameKind kind(reader::FrameId f);

 private:
  const reader::Snapshot& s_;
  FrameMode mode_;
  std::vector<int8_t> kinds_;  // per frame id; -1 until classified
};

}  // namespace memtrace::analysis
