// A FrameSource with hand-made frames, for tests that must not depend on the unwinder.
#pragma once
#include <deque>
#include <stdexcept>
#include <map>
#include <string>
#include <vector>

#include "output/frame_source.hpp"

namespace memtrace::output::test {

class FakeFrameSource final : public FrameSource {
 public:
  struct F {
    std::string file, name;
    int line;
  };
  void set(uint32_t id, std::vector<F> frames, std::string owner) {
    auto& st = stacks_[id];
    st.owner = std::move(owner);
    st.frames.clear();
    for (auto& f : frames) {
      strings_.push_back(f.file);
      std::string_view file = strings_.back();
      strings_.push_back(f.name);
      std::string_view name = strings_.back();
      st.frames.push_back(FrameRef{file, name, f.line});
    }
  }
  void frames(uint32_t id, std::vector<FrameRef>* out) override {
    ++frame_calls;
    auto it = stacks_.find(id);
    if (it == stacks_.end()) return;
    out->insert(out->end(), it->second.frames.begin(), it->second.frames.end());
  }
  std::string owner(uint32_t id) override {
    ++owner_calls;
    auto it = stacks_.find(id);
    return it == stacks_.end() ? std::string("unknown") : it->second.owner;
  }
  int frame_calls = 0;
  int owner_calls = 0;

 private:
  struct Stack {
    std::vector<FrameRef> frames;
    std::string owner;
  };
  std::map<uint32_t, Stack> stacks_;
  std::deque<std::string> strings_;  // stable storage for the views
};

// A throwing source: the dump must survive it.
class ThrowingFrameSource final : public FrameSource {
 public:
  void frames(uint32_t, std::vector<FrameRef>*) override { throw std::runtime_error("symbolizer exploded"); }
  std::string owner(uint32_t) override { throw std::runtime_error("symbolizer exploded"); }
};

}  // namespace memtrace::output::test
