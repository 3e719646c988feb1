#include "cli/analysis/folded.hpp"

#include <map>
#include <unordered_map>

#include "cli/analysis/stack_text.hpp"

namespace memtrace::analysis {

namespace {

// One frame as a folded field: ';' separates fields and a newline ends the line.
void append_field(std::string& out, std::string f) {
  for (char& c : f)
    if (c == ';') c = ',';
    else if (c == '\n' || c == '\r') c = ' ';
  if (!out.empty()) out += ';';
  out += f;
}

std::string folded_shown(const reader::Snapshot& s, StackView& view, reader::StackId id) {
  std::vector<reader::FrameId> frames = view.shown(id);
  if (frames.empty()) return "[no stack]";
  std::string out;
  for (size_t i = frames.size(); i-- > 0;) {
    const reader::Frame& fr = s.frames[frames[i]];
    append_field(out, format::short_frame_label({s.str(fr.name), s.str(fr.filename), fr.line}));
  }
  return out;
}

}  // namespace

std::vector<FoldedLine> fold_allocs(const reader::Snapshot& s, const std::vector<LiveAlloc>& allocs, StackView* view) {
  const bool short_frames = view && view->mode() == FrameMode::kShort;
  std::unordered_map<reader::StackId, uint64_t> by_id;
  for (const LiveAlloc& a : allocs) by_id[a.stack] += a.bytes;
  std::map<std::string, uint64_t> by_text;
  for (const auto& [id, bytes] : by_id)
    if (bytes) by_text[short_frames ? folded_shown(s, *view, id) : folded_stack(s, id)] += bytes;
  std::vector<FoldedLine> out;
  out.reserve(by_text.size());
  for (auto& [text, bytes] : by_text) out.push_back({text, bytes});
  return out;
}

std::string folded_text(const std::vector<FoldedLine>& lines) {
  std::string out;
  for (const FoldedLine& l : lines) {
    out += l.stack;
    out += ' ';
    out += std::to_string(l.bytes);
    out += '\n';
  }
  return out;
}

}  // namespace memtrace::analysis
