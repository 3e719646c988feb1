// A frame as a snapshot holds it, and where the snapshot writer gets a stack's frames from
// (docs/snapshot-format.md, "Frames").
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>

namespace memtrace::format {

// One frame as the viewer shows it: filename:line:name.
struct Frame {
  std::string_view filename;  // source file, else the module path
  std::string_view name;      // function
  int64_t line = 0;
};

// Where the writer gets a stack's frames, the first time it writes that stack. Stack ids are the
// caller's, small and dense (table indices: the writer keeps a vector indexed by them); 0 is the
// empty stack and is never asked for. The views must stay valid until the writer is done.
class StackSource {
 public:
  virtual ~StackSource() = default;
  // Appends the frames of `stack`, innermost first.
  virtual void frames(uint32_t stack, std::vector<Frame>* out) = 0;
};

}  // namespace memtrace::format
