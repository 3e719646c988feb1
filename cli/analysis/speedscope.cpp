#include "cli/analysis/speedscope.hpp"

#include <map>
#include <tuple>
#include <unordered_map>

#include "cli/analysis/folded.hpp"
#include "cli/analysis/json_writer.hpp"
#include "format/stack_line.hpp"

namespace memtrace::analysis {

namespace {

struct FrameKey {
  std::string label;
  std::string_view file;  // "" when the snapshot has none
  int64_t line = 0;       // 0 when unknown
  bool operator<(const FrameKey& o) const {
    return std::tie(label, file, line) < std::tie(o.label, o.file, o.line);
  }
};

using Sample = std::vector<FrameKey>;  // outermost first

// The frames the folded output shows for a stack, with its labels (cli/analysis/folded.cpp), but
// without the ';' and newline substitutions folded text needs: JSON strings carry any text.
Sample sample_of(const reader::Snapshot& s, StackView* view, reader::StackId id) {
  const bool short_frames = view && view->mode() == FrameMode::kShort;
  std::vector<reader::FrameId> frames = short_frames ? view->shown(id) : s.stacks[id];
  if (frames.empty()) return {{"[no stack]", {}, 0}};
  Sample out;
  out.reserve(frames.size());
  for (size_t i = frames.size(); i-- > 0;) {
    const reader::Frame& fr = s.frames[frames[i]];
    format::FrameText t{s.str(fr.name), s.str(fr.filename), fr.line};
    std::string label = short_frames ? format::short_frame_label(t) : format::frame_label(t);
    std::string_view file = t.file == "??" ? std::string_view() : t.file;  // PyTorch's unknown file
    out.push_back({std::move(label), file, fr.line > 0 ? fr.line : 0});
  }
  return out;
}

// One profile's samples: distinct stacks (by what is shown, under their root frames) and their
// bytes, sorted.
std::map<Sample, uint64_t> samples_of(const reader::Snapshot& s, StackView* view, const std::vector<LiveAlloc>& allocs,
                                      GroupBy root) {
  std::map<Sample, uint64_t> out;
  for (const RootedStack& g : group_by_stack_and_root(allocs, root)) {
    Sample sample;
    for (std::string& f : root_frames(s, *g.example, root)) sample.push_back({std::move(f), {}, 0});
    Sample stack = sample_of(s, view, g.stack);
    sample.insert(sample.end(), std::make_move_iterator(stack.begin()), std::make_move_iterator(stack.end()));
    out[std::move(sample)] += g.bytes;
  }
  return out;
}

}  // namespace

SpeedscopeFile speedscope_file(const reader::Snapshot& s, const std::vector<SpeedscopeProfile>& profiles,
                               StackView* view, std::string_view name, GroupBy root) {
  std::vector<std::map<Sample, uint64_t>> per_profile;
  per_profile.reserve(profiles.size());
  for (const SpeedscopeProfile& p : profiles) per_profile.push_back(samples_of(s, view, p.allocs, root));

  // The shared table, in the order frames first appear (profiles in order, samples sorted).
  std::map<FrameKey, size_t> index;
  std::vector<const FrameKey*> table;
  for (const auto& samples : per_profile)
    for (const auto& [sample, bytes] : samples)
      for (const FrameKey& f : sample)
        if (auto [it, added] = index.emplace(f, table.size()); added) table.push_back(&it->first);

  SpeedscopeFile out;
  JsonWriter j;
  j.begin_object();
  j.field("$schema", "https://www.speedscope.app/file-format-schema.json");
  j.field("name", name);
  j.field("exporter", "memtrace flamegraph");
  j.field_uint("activeProfileIndex", 0);
  j.key("shared").begin_object();
  j.key("frames").begin_array();
  for (const FrameKey* f : table) {
    j.begin_object();
    j.field("name", f->label);
    if (!f->file.empty()) j.field("file", f->file);
    if (f->line) j.field_int("line", f->line);
    j.end_object();
  }
  j.end_array();
  j.end_object();
  j.key("profiles").begin_array();
  for (size_t p = 0; p < profiles.size(); ++p) {
    uint64_t total = 0;
    for (const auto& [sample, bytes] : per_profile[p]) total += bytes;
    j.begin_object();
    j.field("type", "sampled");
    j.field("name", profiles[p].name);
    j.field("unit", "bytes");
    j.field_uint("startValue", 0);
    j.field_uint("endValue", total);
    j.key("samples").begin_array();
    for (const auto& [sample, bytes] : per_profile[p]) {
      j.begin_array();
      for (const FrameKey& f : sample) j.uinteger(index.at(f));
      j.end_array();
    }
    j.end_array();
    j.key("weights").begin_array();
    for (const auto& [sample, bytes] : per_profile[p]) j.uinteger(bytes);
    j.end_array();
    j.end_object();
    out.samples += per_profile[p].size();
    out.bytes += total;
  }
  j.end_array();
  j.end_object();
  out.json = j.text();
  return out;
}

}  // namespace memtrace::analysis
