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

std::vector<std::string> root_frames(const reader::Snapshot& s, const LiveAlloc& a, GroupBy root) {
  std::vector<std::string> out;
  if (root == GroupBy::kOwner) {
    out.emplace_back(owner_name(s, a.category));
  } else if (root == GroupBy::kRange) {
    if (a.range == 0) out.emplace_back(kNoRange);
    for (reader::StrId name : s.range_path(a.range)) out.emplace_back(s.str(name));
  }
  return out;
}

std::vector<FoldedLine> fold_allocs(const reader::Snapshot& s, const std::vector<LiveAlloc>& allocs, StackView* view,
                                    GroupBy root) {
  const bool short_frames = view && view->mode() == FrameMode::kShort;
  // By (stack, root id): the category or range id beside the stack, cheap keys; texts once each.
  std::unordered_map<uint64_t, uint64_t> by_id;
  std::unordered_map<uint64_t, const LiveAlloc*> example;
  for (const LiveAlloc& a : allocs) {
    uint64_t extra = root == GroupBy::kOwner ? a.category : root == GroupBy::kRange ? a.range : 0;
    uint64_t key = uint64_t{a.stack} << 32 | extra;
    by_id[key] += a.bytes;
    example.try_emplace(key, &a);
  }
  std::map<std::string, uint64_t> by_text;
  for (const auto& [key, bytes] : by_id) {
    if (!bytes) continue;
    const auto id = static_cast<reader::StackId>(key >> 32);
    std::string text;
    for (const std::string& f : root_frames(s, *example.at(key), root)) append_field(text, f);
    std::string stack = short_frames ? folded_shown(s, *view, id) : folded_stack(s, id);
    text += text.empty() ? stack : ";" + stack;
    by_text[text] += bytes;
  }
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
