#include "format/snapshot_writer.hpp"

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <type_traits>
#include <variant>

namespace memtrace::format {

namespace {

// Memoized constants (SnapshotWriter::kConstantCount): every key, then the constant values,
// block states and actions.
enum : int {
  kEmptyValue = kKeyCount,
  kLargeValue,
  kSmallValue,
  kStateFirst,  // + BlockState
  kActionFirst = kStateFirst + kBlockStateCount,  // + Action
};

std::string_view constant_text(int id) {
  if (id < kKeyCount) return kKeyNames[id];
  if (id >= kActionFirst) return kActionNames[id - kActionFirst];
  if (id >= kStateFirst) return kBlockStateNames[id - kStateFirst];
  if (id == kLargeValue) return kLargePool;
  if (id == kSmallValue) return kSmallPool;
  return "";
}

int state_constant(BlockState s) {
  // A state no writer should be given is written as free space, which is what the viewer makes of it.
  return kStateFirst + static_cast<int>(s < BlockState::Other ? s : BlockState::Inactive);
}

}  // namespace

Settings pytorch_settings(const Settings& described) {
  IntDict divisions;
  for (int i = 0; i < 16; ++i) divisions.emplace_back(std::to_string(1 << i), 0);
  Settings out = {
      {"PYTORCH_CUDA_ALLOC_CONF", std::string()},
      {"max_split_size", int64_t{-1}},
      {"garbage_collection_threshold", 0.0},
      {"expandable_segments", false},
      {"pinned_num_register_threads", int64_t{1}},
      {"release_lock_on_cudamalloc", false},
      {"pinned_use_cuda_host_register", false},
      {"graph_capture_record_stream_reuse", false},
      {"roundup_power2_divisions", std::move(divisions)},
  };
  const size_t defaults = out.size();
  std::vector<bool> replaced(defaults, false);  // the first described setting of a key wins
  for (const Setting& st : described) {
    size_t i = 0;
    while (i < defaults && out[i].key != st.key) ++i;
    if (i == defaults) {
      out.push_back(st);
    } else if (!replaced[i]) {
      out[i] = st;
      replaced[i] = true;
    }
  }
  return out;
}

size_t SnapshotWriter::FrameKeyHash::operator()(const FrameKey& k) const {
  size_t h = std::hash<std::string_view>()(k.file);
  h ^= std::hash<std::string_view>()(k.name) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  h ^= static_cast<size_t>(k.line) * 0x100000001b3ull;
  return h;
}

SnapshotWriter::SnapshotWriter(PickleWriter& w, StackSource& stacks, bool include_frames)
    : w_(w), stacks_(stacks), include_frames_(include_frames) {
  static_assert(kActionFirst + kActionCount == kConstantCount);
  std::fill(std::begin(const_memo_), std::end(const_memo_), kNotYet);
  unknown_ = category(kUnknownCategory);
}

// ---- strings ----

void SnapshotWriter::first_constant(int id) {
  w_.str(constant_text(id));
  const_memo_[id] = w_.memoize();
}

void SnapshotWriter::key(Key k) {
  w_.item();
  constant(static_cast<int>(k));
}

// Strings that repeat with the same content (file names): memoized by content.
void SnapshotWriter::shared_str(std::string_view s) {
  auto it = text_memo_.find(s);
  if (it != text_memo_.end()) {
    w_.get(it->second);
    return;
  }
  w_.str(s);
  text_memo_.emplace(s, w_.memoize());
}

// Notes are static strings: memoized by address.
void SnapshotWriter::note(const char* n) {
  if (!n || !*n) {
    constant(kEmptyValue);
    return;
  }
  auto it = note_memo_.find(n);
  if (it != note_memo_.end()) {
    w_.get(it->second);
    return;
  }
  w_.str(n);
  note_memo_.emplace(n, w_.memoize());
}

Category SnapshotWriter::category(std::string_view name) {
  if (name.empty()) name = kUnknownCategory;
  auto it = category_index_.find(name);
  if (it != category_index_.end()) return it->second;
  Category c = static_cast<Category>(categories_.size());
  categories_.emplace_back(name);
  category_memo_.push_back(-1);
  category_index_.emplace(std::string(name), c);
  return c;
}

void SnapshotWriter::write_category(Category c) {
  if (category_memo_[c] >= 0) {
    w_.get(static_cast<uint32_t>(category_memo_[c]));
    return;
  }
  w_.str(categories_[c]);
  category_memo_[c] = w_.memoize();
}

// ---- frames ----

void SnapshotWriter::empty_list() {
  if (empty_memo_ >= 0) {
    w_.get(static_cast<uint32_t>(empty_memo_));
    return;
  }
  w_.begin_list();
  w_.end_list();
  empty_memo_ = w_.memoize();
}

void SnapshotWriter::frames(uint32_t stack) {
  if (!include_frames_ || stack == 0) {
    empty_list();
    return;
  }
  if (stack < stack_memo_.size() && stack_memo_[stack] != kNotYet) {
    w_.get(stack_memo_[stack]);
    return;
  }
  frame_list(stack);
}

void SnapshotWriter::frame_dict(const Frame& f) {
  w_.begin_dict();
  key(Key::Filename);
  shared_str(f.filename);
  key(Key::Line);
  w_.integer(f.line);
  key(Key::Name);
  w_.str(f.name);
  w_.end_dict();
}

// The first use of a stack: its frame list, unless the same frames were written as a list before.
void SnapshotWriter::frame_list(uint32_t stack) {
  if (stack >= stack_memo_.size()) stack_memo_.resize(size_t{stack} + 1, kNotYet);
  tmp_.clear();
  stacks_.frames(stack, &tmp_);
  if (tmp_.empty()) {
    empty_list();
    stack_memo_[stack] = static_cast<uint32_t>(empty_memo_);
    return;
  }
  // Two stack ids can give the same frames (they differed only inside memtrace): share the list.
  ids_.clear();
  bool all_known = true;
  for (const Frame& f : tmp_) {
    auto it = frame_memo_.find(FrameKey{f.filename, f.name, f.line});
    if (it == frame_memo_.end()) {
      ids_.push_back(UINT32_MAX);
      all_known = false;
    } else {
      ids_.push_back(it->second);
    }
  }
  if (all_known) {
    auto it = list_memo_.find(ids_key());
    if (it != list_memo_.end()) {
      stack_memo_[stack] = it->second;
      w_.get(it->second);
      return;
    }
  }
  w_.begin_list();
  for (size_t i = 0; i < tmp_.size(); ++i) {
    w_.item();
    if (ids_[i] == UINT32_MAX) {
      // Maybe written earlier in this same list (recursion).
      FrameKey k{tmp_[i].filename, tmp_[i].name, tmp_[i].line};
      auto it = frame_memo_.find(k);
      if (it != frame_memo_.end()) {
        ids_[i] = it->second;
      } else {
        frame_dict(tmp_[i]);
        ids_[i] = w_.memoize();
        frame_memo_.emplace(k, ids_[i]);
        ++stats_.frame_dicts;
        continue;
      }
    }
    w_.get(ids_[i]);
  }
  w_.end_list();
  uint32_t m = w_.memoize();
  list_memo_.emplace(ids_key(), m);
  stack_memo_[stack] = m;
  ++stats_.frame_lists;
}

std::string SnapshotWriter::ids_key() const {
  return std::string(reinterpret_cast<const char*>(ids_.data()), ids_.size() * sizeof(uint32_t));
}

// ---- the stream ----

void SnapshotWriter::begin() {
  w_.begin();
  w_.begin_dict();
}

void SnapshotWriter::end() {
  RawValues none;
  end(none, 0, 0);
}

void SnapshotWriter::end(const RawValues& raw, RawId annotations, RawId top) {
  w_.key(key_name(Key::ExternalAnnotations));
  if (annotations && raw.node(annotations).kind == RawKind::kList) {
    raw_value(raw, annotations, 0);
  } else {
    w_.begin_list();
    w_.end_list();
  }
  kept_pairs(Kept{&raw, top});
  w_.end_dict();
  w_.end();
}

// ---- values kept as a reader found them ----

void SnapshotWriter::raw_value(const RawValues& raw, RawId id, int depth) {
  const RawValues::Node& n = raw.node(id);
  const RawId* c = n.count ? raw.children(id) : nullptr;
  // Deeper than the pickle writer nests: what is left is written as None.
  bool too_deep = depth >= PickleWriter::kMaxDepth - 8;
  switch (n.kind) {
    case RawKind::kNone: w_.none(); return;
    case RawKind::kFalse: w_.boolean(false); return;
    case RawKind::kTrue: w_.boolean(true); return;
    case RawKind::kInt: w_.integer(static_cast<int64_t>(n.v)); return;
    case RawKind::kUInt: w_.big_unsigned(n.v); return;
    case RawKind::kFloat: w_.float64(raw.real_of(id)); return;
    case RawKind::kStr: shared_str(raw.text_of(id)); return;
    // The viewer's unpickler reads no bytes, sets or tuples other than pairs: those are written
    // as the nearest it reads (text, lists), a pair as a pair (docs/snapshot-format.md, "Keys kept
    // as they were").
    case RawKind::kBytes: w_.str(raw.text_of(id)); return;
    case RawKind::kTuple:
      if (n.count == 2) {
        raw_value(raw, c[0], depth + 1);
        raw_value(raw, c[1], depth + 1);
        w_.tuple2();
        return;
      }
      [[fallthrough]];
    case RawKind::kSet:
    case RawKind::kList:
      if (too_deep) break;
      w_.begin_list();
      for (uint32_t i = 0; i < n.count; ++i) {
        w_.item();
        raw_value(raw, c[i], depth + 1);
      }
      w_.end_list();
      return;
    case RawKind::kDict:
      if (too_deep) break;
      w_.begin_dict();
      for (uint32_t i = 0; i + 1 < n.count; i += 2) {
        w_.item();
        raw_value(raw, c[i], depth + 1);
        raw_value(raw, c[i + 1], depth + 1);
      }
      w_.end_dict();
      return;
  }
  w_.none();
}

void SnapshotWriter::kept_pairs(const Kept& k, std::string_view skip) {
  if (!k.raw || !k.dict || k.raw->node(k.dict).kind != RawKind::kDict) return;
  const RawValues::Node& n = k.raw->node(k.dict);
  const RawId* c = k.raw->children(k.dict);
  for (uint32_t i = 0; i + 1 < n.count; i += 2) {
    if (!skip.empty() && k.raw->is_str(c[i], skip)) continue;
    w_.item();
    raw_value(*k.raw, c[i], 1);
    raw_value(*k.raw, c[i + 1], 1);
  }
}

void SnapshotWriter::begin_top_list(Key k) {
  w_.key(key_name(k));
  w_.begin_list();
}

void SnapshotWriter::begin_list() {
  w_.item();
  w_.begin_list();
}

void SnapshotWriter::end_list() { w_.end_list(); }

// ---- trace entries ----

// Writes v (the key already written); a value the viewer cannot hold exactly (a failed request
// for 1 << 62 or SIZE_MAX bytes) is written capped at 2^53 - 1, and its true value follows
// under exact_key as a decimal string, which memtrace's reader prefers
// (docs/snapshot-format.md, "Integers the viewer holds exactly: size_exact and device_free_exact").
void SnapshotWriter::exact_beside(Key exact_key, uint64_t v) {
  if (w_.uinteger(v)) return;
  char digits[24];
  int n = std::snprintf(digits, sizeof digits, "%llu", static_cast<unsigned long long>(v));
  w_.key(key_name(exact_key));
  w_.str(std::string_view(digits, static_cast<size_t>(n)));
}

// The one place a trace-entry dict is written.
void SnapshotWriter::entry_dict(const Entry& e, std::string_view unshared_note) {
  w_.begin_dict();
  key(Key::Action);
  if (e.action == Action::Other)
    shared_str(e.other_action.empty() ? std::string_view(action_name(Action::Other)) : e.other_action);
  else
    constant(kActionFirst + static_cast<int>(e.action));
  if (e.action != Action::Oom) {
    key(Key::Addr);
    w_.uinteger(e.addr);
  }
  key(Key::Size);
  exact_beside(Key::SizeExact, e.size);
  key(Key::Stream);
  w_.uinteger(e.stream);
  key(Key::TimeUs);
  if (e.time_us >= 0)
    w_.uinteger(static_cast<uint64_t>(e.time_us));
  else
    w_.integer(e.time_us);
  if (!e.kept.has(key_name(Key::CompileContext))) {
    key(Key::CompileContext);
    constant(kEmptyValue);
  }
  const bool has_ranges = ranges_ && e.ranges != 0;
  if (!e.kept.has(key_name(Key::UserMetadata))) {
    key(Key::UserMetadata);
    if (!unshared_note.empty())
      w_.str(unshared_note);
    else if (has_ranges && (e.note == nullptr || *e.note == '\0'))
      range_text(e.ranges);
    else
      note(e.note);
  }
  key(Key::Category);
  write_category(e.category);
  if (e.action == Action::Oom) {
    key(Key::DeviceFree);
    exact_beside(Key::DeviceFreeExact, e.device_free);
  }
  if (has_ranges && !e.kept.has(key_name(Key::Ranges))) {
    key(Key::Ranges);
    range_list(e.ranges);
  }
  kept_pairs(e.kept);
  // Last, so that the first entry memoizes every key before any frame (small BINGET indices).
  if (include_frames_ && e.stack != 0) {
    key(Key::Frames);
    frames(e.stack);
  }
  w_.end_dict();
}

void SnapshotWriter::entry(const Entry& e) {
  w_.item();
  entry_dict(e, {});
}

void SnapshotWriter::unknown_marker(uint64_t live_bytes, int64_t time_us) {
  Entry m;
  m.action = Action::Snapshot;
  m.size = live_bytes;
  m.time_us = time_us;
  m.category = unknown_;
  w_.item();
  entry_dict(m, kMarkerNote);
}

// ---- segments ----

void SnapshotWriter::block(const Block& b) {
  w_.item();
  w_.begin_dict();
  key(Key::Address);
  w_.uinteger(b.address);
  key(Key::Size);
  w_.uinteger(b.size);
  key(Key::RequestedSize);
  w_.uinteger(b.requested_size);
  key(Key::State);
  constant(state_constant(b.state));
  key(Key::Frames);
  frames(b.stack);
  const bool has_ranges = ranges_ && b.ranges != 0;
  if (!b.kept.has(key_name(Key::UserMetadata))) {
    if (b.note && *b.note) {
      key(Key::UserMetadata);
      note(b.note);
    } else if (has_ranges) {
      key(Key::UserMetadata);
      range_text(b.ranges);
    }
  }
  if (has_ranges && !b.kept.has(key_name(Key::Ranges))) {
    key(Key::Ranges);
    range_list(b.ranges);
  }
  kept_pairs(b.kept);
  w_.end_dict();
}

void SnapshotWriter::segment(const Segment& s, std::span<const Block> blocks) {
  uint64_t allocated = 0, active = 0, requested = 0;
  for (const Block& b : blocks) {
    if (b.state == BlockState::ActiveAllocated) allocated += b.size;
    if (b.state == BlockState::ActiveAllocated || b.state == BlockState::ActivePendingFree) {
      active += b.size;
      requested += b.requested_size;
    }
  }
  w_.item();
  w_.begin_dict();
  key(Key::Device);
  w_.integer(s.device);
  key(Key::Address);
  w_.uinteger(s.address);
  key(Key::TotalSize);
  w_.uinteger(s.total_size);
  key(Key::AllocatedSize);
  w_.uinteger(allocated);
  key(Key::ActiveSize);
  w_.uinteger(active);
  key(Key::RequestedSize);
  w_.uinteger(requested);
  key(Key::Stream);
  w_.uinteger(s.stream);
  if (!s.segment_type.empty()) {
    key(Key::SegmentType);
    if (s.segment_type == kLargePool)
      constant(kLargeValue);
    else if (s.segment_type == kSmallPool)
      constant(kSmallValue);
    else
      shared_str(s.segment_type);
  }
  if (s.pool_id && !s.kept.has(key_name(Key::SegmentPoolId))) {
    key(Key::SegmentPoolId);
    w_.integer(s.pool_id->first);
    w_.integer(s.pool_id->second);
    w_.tuple2();
  }
  key(Key::IsExpandable);
  w_.boolean(s.is_expandable);
  key(Key::Frames);
  frames(s.stack);
  if (s.note && *s.note && !s.kept.has(key_name(Key::UserMetadata))) {
    key(Key::UserMetadata);
    note(s.note);
  }
  kept_pairs(s.kept);
  key(Key::Blocks);
  w_.begin_list();
  // Blocks tile their segment (docs/snapshot-format.md, "Blocks tile their segment"): what lies
  // between the blocks given is the allocator's free, cached space.
  const uint64_t end = s.address + s.total_size;
  uint64_t cursor = s.address;
  for (const Block& b : blocks) {
    if (b.address > cursor) block(Block{cursor, b.address - cursor, 0, BlockState::Inactive, 0, nullptr, {}});
    block(b);
    cursor = b.address + b.size;
  }
  if (cursor < end) block(Block{cursor, end - cursor, 0, BlockState::Inactive, 0, nullptr, {}});
  w_.end_list();
  w_.end_dict();
}

// ---- allocator_settings ----

// One described value, as the pickle writer spells it.
void SnapshotWriter::setting_value(const Setting& st) {
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::monostate>)
          w_.none();
        else if constexpr (std::is_same_v<T, bool>)
          w_.boolean(v);
        else if constexpr (std::is_same_v<T, int64_t>)
          w_.integer(v);
        else if constexpr (std::is_same_v<T, uint64_t>)
          w_.uinteger(v);
        else if constexpr (std::is_same_v<T, double>)
          w_.float64(v);
        else if constexpr (std::is_same_v<T, std::string>) {
          if (v.empty())
            constant(kEmptyValue);
          else
            w_.str(v);
        } else {
          w_.begin_dict();
          for (const auto& [k, n] : v) {
            w_.key(k);
            w_.integer(n);
          }
          w_.end_dict();
        }
      },
      st.value);
}

void SnapshotWriter::allocator_settings(const RawValues& raw, RawId top, const Settings& memtrace) {
  w_.key(key_name(Key::AllocatorSettings));
  w_.begin_dict();
  kept_pairs(Kept{&raw, top}, key_name(Key::Memtrace));
  memtrace_settings(memtrace);
  w_.end_dict();
}

void SnapshotWriter::allocator_settings(const Settings& top, const Settings& memtrace) {
  w_.key(key_name(Key::AllocatorSettings));
  w_.begin_dict();
  for (const Setting& st : top) {
    w_.key(st.key);
    setting_value(st);
  }
  memtrace_settings(memtrace);
  w_.end_dict();
}

void SnapshotWriter::memtrace_settings(const Settings& memtrace) {
  w_.key(key_name(Key::Memtrace));
  w_.begin_dict();
  for (const Setting& st : memtrace) {
    w_.key(st.key);
    setting_value(st);
  }
  w_.end_dict();
}

}  // namespace memtrace::format
