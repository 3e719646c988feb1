#include "cli/analysis/stack_text.hpp"

#include "format/stack_line.hpp"

namespace memtrace::analysis {

std::string frame_text(const reader::Snapshot& s, reader::FrameId f) {
  const reader::Frame& fr = s.frames[f];
  return format::frame_label({s.str(fr.name), s.str(fr.filename), fr.line});
}

std::string stack_text(const reader::Snapshot& s, reader::StackId id) { return frames_text(s, s.stacks[id]); }

std::string frames_text(const reader::Snapshot& s, const std::vector<reader::FrameId>& frames) {
  if (frames.empty()) return "[no stack]";
  std::string out;
  for (size_t i = 0; i < frames.size(); ++i) {
    if (i) out += " < ";
    out += frame_text(s, frames[i]);
  }
  return out;
}

std::string folded_stack(const reader::Snapshot& s, reader::StackId id) {
  const auto& frames = s.stacks[id];
  if (frames.empty()) return "[no stack]";
  std::string out;
  for (size_t i = frames.size(); i-- > 0;) {
    std::string f = frame_text(s, frames[i]);
    for (char& c : f)
      if (c == ';') c = ',';
      else if (c == '\n' || c == '\r') c = ' ';
    if (!out.empty()) out += ';';
    out += f;
  }
  return out;
}

std::string range_text(const reader::Snapshot& s, reader::RangeId id) {
  if (id == 0) return std::string(kNoRange);
  std::string out;
  for (reader::StrId name : s.range_path(id)) {
    if (!out.empty()) out += " > ";
    out += s.str(name);
  }
  return out;
}

std::string_view owner_name(const reader::Snapshot& s, reader::StrId category) {
  std::string_view c = s.str(category);
  return c.empty() ? std::string_view("unknown") : c;
}

}  // namespace memtrace::analysis
