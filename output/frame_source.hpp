// Where the snapshot builder gets frames and owners for a stack id. One implementation is backed by
// the stack table and the symbolizer (the real thing); tests pass their own.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "format/frame.hpp"

namespace memtrace::unwind {
class StackTable;
class Symbolizer;
}  // namespace memtrace::unwind

namespace memtrace::output {

// One frame as the viewer shows it (filename:line:name), as the snapshot writer takes it.
using FrameRef = format::Frame;

class FrameSource {
 public:
  virtual ~FrameSource() = default;
  // Appends the frames of a stack to *out, innermost first, memtrace's own frames left out.
  // Nothing for stack id 0 or an unknown id. The views stay valid for the source's lifetime.
  virtual void frames(uint32_t stack_id, std::vector<FrameRef>* out) = 0;
  // Who asked for the memory (nccl, torch, the program's name, ...); "unknown" for stack 0.
  virtual std::string owner(uint32_t stack_id) = 0;
};

// No stacks at all: every owner is "unknown".
class NullFrameSource final : public FrameSource {
 public:
  void frames(uint32_t, std::vector<FrameRef>*) override {}
  std::string owner(uint32_t) override { return "unknown"; }
};

// StackTable + Symbolizer. Frames whose module is memtrace itself (unwind::self_module()) are
// dropped; a frame without a source file is named by its module path. Not thread-safe.
class SymbolizedFrameSource final : public FrameSource {
 public:
  SymbolizedFrameSource(const unwind::StackTable& table, unwind::Symbolizer& sym, std::string exe_path);
  void frames(uint32_t stack_id, std::vector<FrameRef>* out) override;
  std::string owner(uint32_t stack_id) override;

 private:
  std::string_view intern(std::string_view s);

  const unwind::StackTable& table_;
  unwind::Symbolizer& sym_;
  std::string exe_;
  std::string self_;
  std::unordered_set<std::string> strings_;  // node-based: views into it stay valid
};

}  // namespace memtrace::output
