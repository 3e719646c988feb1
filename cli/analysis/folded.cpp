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

std::vector<RootedStack> group_by_stack_and_root(const std::vector<LiveAlloc>& allocs, GroupBy root) {
  std::unordered_map<uint64_t, size_t> index;  // (stack << 32 | root id) -> position in out
  std::vector<RootedStack> out;
  for (const LiveAlloc& a : allocs) {
    const uint64_t extra = root == GroupBy::kOwner ? a.category : root == GroupBy::kRange ? a.range : 0;
    auto [it, added] = index.try_emplace(uint64_t{a.stack} << 32 | extra, out.size());
    if (added) out.push_back({a.stack, 0, &a});
    out[it->second].bytes += a.bytes;
  }
  std::erase_if(out, [](const RootedStack& g) { return g.bytes == 0; });
  return out;
}

std::vector<FoldedLine> fold_allocs(const reader::Snapshot& s, const std::vector<LiveAlloc>& allocs, StackView* view,
                                    GroupBy root) {
  const bool short_frames = view && view->mode() == FrameMode::kShort;
  std::map<std::string, uint64_t> by_text;
  for (const RootedStack& g : group_by_stack_and_root(allocs, root)) {
    std::string text;
    for (const std::string& f : root_frames(s, *g.example, root)) append_field(text, f);
    std::string stack = short_frames ? folded_shown(s, *view, g.stack) : folded_stack(s, g.stack);
    text += text.empty() ? stack : ";" + stack;
    by_text[text] += g.bytes;
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
