#include "cli/analysis/stack_text.hpp"

namespace memtrace::analysis {

std::string frame_text(const reader::Snapshot& s, reader::FrameId f) {
  const reader::Frame& fr = s.frames[f];
  std::string out{s.str(fr.name)};
  if (out.empty()) out = "??";
  std::string_view file = s.str(fr.filename);
  if (!file.empty()) {
    out += " (";
    out += file;
    if (fr.line != 0) {
      out += ':';
      out += std::to_string(fr.line);
    }
    out += ')';
  }
  return out;
}

std::string stack_text(const reader::Snapshot& s, reader::StackId id) {
  const auto& frames = s.stacks[id];
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

std::string_view owner_name(const reader::Snapshot& s, reader::StrId category) {
  std::string_view c = s.str(category);
  return c.empty() ? std::string_view("unknown") : c;
}

}  // namespace memtrace::analysis
