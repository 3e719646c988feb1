#include "cli/analysis/stack_view.hpp"

#include "cli/analysis/stack_text.hpp"

namespace memtrace::analysis {

StackView::StackView(const reader::Snapshot& s, FrameMode mode) : s_(s), mode_(mode), kinds_(s.frames.size(), -1) {}

format::FrameKind StackView::kind(reader::FrameId f) {
  if (kinds_[f] < 0) {
    const reader::Frame& fr = s_.frames[f];
    kinds_[f] = static_cast<int8_t>(format::classify_frame(s_.str(fr.name), s_.str(fr.filename)));
  }
  return static_cast<format::FrameKind>(kinds_[f]);
}

std::vector<reader::FrameId> StackView::shown(reader::StackId id) {
  const std::vector<reader::FrameId>& frames = s_.stacks[id];
  if (mode_ == FrameMode::kAll) return frames;
  std::vector<format::FrameKind> kinds;
  kinds.reserve(frames.size());
  for (reader::FrameId f : frames) kinds.push_back(kind(f));
  std::vector<reader::FrameId> out;
  for (size_t i : format::shown_frames(kinds)) out.push_back(frames[i]);
  return out;
}

std::string StackView::key(reader::StackId id) {
  if (mode_ == FrameMode::kAll) return stack_text(s_, id);
  return frames_text(s_, shown(id));
}

std::string StackView::line(reader::StackId id, size_t width) {
  if (mode_ == FrameMode::kAll) return stack_text(s_, id);
  std::vector<reader::FrameId> frames = shown(id);
  if (frames.empty()) return "[no stack]";
  std::vector<std::string> labels;
  labels.reserve(frames.size());
  for (reader::FrameId f : frames) {
    const reader::Frame& fr = s_.frames[f];
    labels.push_back(format::short_frame_label({s_.str(fr.name), s_.str(fr.filename), fr.line}));
  }
  return format::fit_stack_line(labels, width);
}

}  // namespace memtrace::analysis
