// The one writer of snapshot dicts (docs/snapshot-format.md, "The snapshot dict"), on top of
// PickleWriter. output/snapshot_builder.cpp (the recorder's state) and `memtrace merge` (two
// snapshots read back) translate what they have into these calls; the viewer's rules that concern
// how a dict is written live here and nowhere else (docs/snapshot-format.md, "The viewer's rules a
// writer must keep"):
//
//  * Objects the viewer mutates are never shared: every trace entry, segment and block dict is
//    written afresh. Shared through the memo: dict keys and constant values ('', pool, state and
//    action names), file names (by content), notes (static strings, by address), categories,
//    frame dicts (by file, name and line), frame lists (by their frames, so two stack ids with the
//    same frames share one list), and the empty list (docs/snapshot-format.md, "Memo sharing with
//    BINGET and LONG_BINGET").
//  * Integers the viewer holds exactly: unsigned values are capped at 2^53 - 1, and a trace entry's
//    size and device_free keep their true value beside, in size_exact / device_free_exact.
//  * Blocks tile their segment: segment() writes every gap between the blocks it is given as an
//    'inactive' block, and computes the segment's allocated, active and requested sizes from them.
//  * The viewer's 'unknown' category: UnknownMarkerPlan decides whether the trace lists need the
//    marker entry and which list gets it; unknown_marker() writes it.
//  * Keys only the viewer writes (version, idx, categories) are never written.
//
// Call order: begin(), then the top-level lists (begin_top_list ... end_list), device_traces
// first and `frames` last in each entry so that the first entry memoizes every entry key before any
// frame (2-byte BINGETs), then allocator_settings(), then end(). Throws only what allocation and the
// StackSource throw (and PickleWriter's nesting errors, which these calls never reach).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "format/frame.hpp"
#include "format/keys.hpp"
#include "format/pickle_writer.hpp"
#include "format/raw_value.hpp"
#include "format/schema.hpp"
#include "format/setting.hpp"

namespace memtrace::format {

// A category (the owner of an entry), as SnapshotWriter::category() numbers them.
using Category = uint32_t;

// Keys a reader kept as they were (format/raw_value.hpp), written back into a dict: `dict` is a
// dict in `raw`, 0 for none. A kept key replaces what the writer would write under that name when
// the writer's own value is only a default (compile_context, user_metadata, segment_pool_id); the
// other keys are the caller's to leave out of the kept dict. `raw` must outlive the writer.
struct Kept {
  const RawValues* raw = nullptr;
  RawId dict = 0;
  bool has(std::string_view key) const { return raw && dict && raw->find(dict, key); }
};

struct Entry {
  Action action = Action::Alloc;
  std::string_view other_action;  // the name written for Action::Other (e.g. PyTorch's 'annotate')
  uint64_t addr = 0;              // not written on oom
  uint64_t size = 0;
  uint64_t stream = 0;
  int64_t time_us = 0;
  uint64_t device_free = 0;    // written on oom only
  const char* note = nullptr;  // user_metadata: a static string, or nullptr for ''
  Category category = 0;
  uint32_t stack = 0;  // 0: no stack, and no 'frames' key
  uint32_t ranges = 0;  // 0: no ranges, and no 'ranges' key (RangeSource)
  Kept kept;           // keys a reader kept as they were (merge), written before 'frames'
};

struct Block {
  uint64_t address = 0;
  uint64_t size = 0;
  uint64_t requested_size = 0;
  BlockState state = BlockState::ActiveAllocated;  // Other is not written: callers choose one of the three
  uint32_t stack = 0;
  const char* note = nullptr;  // user_metadata when set (a static string)
  Kept kept;
  uint32_t ranges = 0;  // 0: no ranges, and no 'ranges' key (RangeSource)
};

// The names of a range stack an Entry or Block names by id (docs/ranges.md), outermost first.
// Each id is asked for once: its list is shared by memo after that.
class RangeSource {
 public:
  virtual ~RangeSource() = default;
  virtual void names(uint32_t id, std::vector<std::string_view>* out) = 0;
};

struct Segment {
  int device = 0;  // -1 in host_segments
  uint64_t address = 0;
  uint64_t total_size = 0;
  uint64_t stream = 0;
  std::string_view segment_type;  // kLargePool, kSmallPool, or another name; "" leaves the key out
  std::optional<std::pair<int64_t, int64_t>> pool_id;  // segment_pool_id, when known
  bool is_expandable = false;
  uint32_t stack = 0;
  const char* note = nullptr;  // user_metadata when set (a static string)
  Kept kept;                   // written before 'blocks'
};

// The viewer's 'unknown' rule (docs/snapshot-format.md, "The viewer's 'unknown' category"): when
// device entries exist but none has category 'unknown', one marker entry is appended to the
// device list that holds the newest entry. Told of the device entries before any list is written,
// so that the caller can keep room for the marker in that list.
class UnknownMarkerPlan {
 public:
  // One device entry: its list, and how recent it is (larger is newer; on a tie the later call wins).
  void entry(int list, int64_t recency) {
    if (list_ < 0 || recency >= newest_) {
      newest_ = recency;
      list_ = list;
    }
  }
  // A device entry has category 'unknown': no marker is needed (further checks may stop).
  void unknown_seen() { unknown_ = true; }
  bool unknown() const { return unknown_; }
  // The list that gets the marker; -1 when none is needed.
  int list() const { return unknown_ ? -1 : list_; }
  int64_t newest() const { return newest_; }

 private:
  int list_ = -1;
  int64_t newest_ = 0;
  bool unknown_ = false;
};

struct WriterStats {
  size_t frame_lists = 0;  // distinct frame lists written (shared by memo after that)
  size_t frame_dicts = 0;  // distinct frame dicts written
};

// PyTorch's allocator_settings keys with their defaults, in the order PyTorch writes them; a
// described setting of the same key replaces its default, and the described keys PyTorch does not
// have follow.
Settings pytorch_settings(const Settings& described);

class SnapshotWriter {
 public:
  // include_frames false: every frames list is empty and no trace entry carries one.
  SnapshotWriter(PickleWriter& w, StackSource& stacks, bool include_frames = true);
  SnapshotWriter(const SnapshotWriter&) = delete;
  SnapshotWriter& operator=(const SnapshotWriter&) = delete;

  // The stream and the top-level dict.
  void begin();
  // external_annotations ([] unless `annotations` is a list in raw), the kept top-level keys
  // (`top`, a dict in raw), then the end of the dict and the stream.
  void end();
  void end(const RawValues& raw, RawId annotations, RawId top);

  // A top-level list (device_traces, segments, host_segments, host_traces); inside device_traces,
  // begin_list() opens one device's list. end_list() closes either.
  void begin_top_list(Key key);
  void begin_list();
  void end_list();

  // Numbers a category by its name; "" is 'unknown'.
  Category category(std::string_view name);
  bool is_unknown(Category c) const { return c == unknown_; }

  // One item of the open list.
  void entry(const Entry& e);
  // The 'unknown' marker (see UnknownMarkerPlan): action 'snapshot', addr 0, the live bytes of its
  // device, stream 0, category 'unknown', no frames.
  void unknown_marker(uint64_t live_bytes, int64_t time_us);
  // A segment with its blocks, lowest address first; the gaps between them are written as
  // 'inactive' blocks.
  void segment(const Segment& s, std::span<const Block> blocks);

  // allocator_settings: `top` as given, then 'memtrace': the metadata dict.
  void allocator_settings(const Settings& top, const Settings& memtrace);
  // The same with the top keys as a reader kept them (a dict in raw; its 'memtrace' key is
  // replaced by `memtrace`).
  void allocator_settings(const RawValues& raw, RawId top, const Settings& memtrace);

  const WriterStats& stats() const { return stats_; }
  // Where Entry::ranges and Block::ranges are resolved; without one, neither is written.
  void set_ranges(RangeSource* r) { ranges_ = r; }

 private:
  struct FrameKey {
    std::string_view file;
    std::string_view name;
    int64_t line;
    bool operator==(const FrameKey& o) const { return line == o.line && file == o.file && name == o.name; }
  };
  struct FrameKeyHash {
    size_t operator()(const FrameKey& k) const;
  };
  struct TextHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>()(s); }
  };

  // Memoized constants: every key, then '', the two pool names, the block states and the actions.
  static constexpr int kConstantCount = kKeyCount + 3 + kBlockStateCount + kActionCount;
  void constant(int id) {
    if (const_memo_[id] != kNotYet)
      w_.get(const_memo_[id]);
    else
      first_constant(id);
  }
  void first_constant(int id);
  void key(Key k);
  void shared_str(std::string_view s);
  void note(const char* n);
  void write_category(Category c);
  void empty_list();
  void frames(uint32_t stack);
  void frame_list(uint32_t stack);
  void frame_dict(const Frame& f);
  void exact_beside(Key exact_key, uint64_t v);
  void entry_dict(const Entry& e, std::string_view unshared_note);
  void block(const Block& b);
  void setting_value(const Setting& st);
  // allocator_settings['memtrace']: the metadata dict, as the last key of allocator_settings.
  void memtrace_settings(const Settings& memtrace);
  void raw_value(const RawValues& raw, RawId id, int depth);
  // The pairs of a kept dict (keys equal to `skip` left out).
  void kept_pairs(const Kept& k, std::string_view skip = {});
  std::string ids_key() const;
  // An entry's or block's 'ranges' list, and its user_metadata when it has no note of its own.
  void range_list(uint32_t id);
  void range_text(uint32_t id);
  void resolve_ranges(uint32_t id);

  PickleWriter& w_;
  StackSource& stacks_;
  const bool include_frames_;
  WriterStats stats_;

  static constexpr uint32_t kNotYet = UINT32_MAX;  // a memo slot not written yet
  uint32_t const_memo_[kConstantCount];
  std::unordered_map<std::string_view, uint32_t> text_memo_;
  std::unordered_map<const char*, uint32_t> note_memo_;
  std::vector<uint32_t> stack_memo_;  // by stack id
  std::unordered_map<FrameKey, uint32_t, FrameKeyHash> frame_memo_;
  std::unordered_map<std::string, uint32_t> list_memo_;
  int64_t empty_memo_ = -1;
  std::vector<Frame> tmp_;
  RangeSource* ranges_ = nullptr;
  struct RangeMemo {
    uint32_t list = kNotYet;
    uint32_t text = kNotYet;
  };
  std::unordered_map<uint32_t, RangeMemo> range_memo_;
  std::vector<std::string_view> range_names_;
  std::vector<uint32_t> ids_;

  std::vector<std::string> categories_;
  std::vector<int64_t> category_memo_;
  std::unordered_map<std::string, Category, TextHash, std::equal_to<>> category_index_;
  Category unknown_ = 0;
};

}  // namespace memtrace::format
