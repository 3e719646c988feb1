// The decoder behind decode_snapshot() (snapshot_decoder.hpp), shared by its files, one per part
// of a snapshot: snapshot_decoder.cpp (the run and the top level), snapshot_decoder_traces.cpp
// (trace entries, frames and stacks, made records as the pickle VM builds them),
// snapshot_decoder_segments.cpp (segments and blocks), snapshot_decoder_settings.cpp
// (allocator_settings and memtrace's metadata). Not for other users.
//
// Decisions (see also pickle_vm.hpp):
//
// * Trace entries are the bulk of a snapshot (1M of them in a big file). A dict whose first batch of
//   items has an 'action' key is made a TraceEntry right away, into a chunked pool, and its frames
//   list is interned as a stack at the same moment; the dict itself never gets item storage. The
//   final pass copies pool entries into device_traces list by list and frees each pool chunk once
//   nothing refers to it, so the pool and the result overlap by one list at most.
// * Frame dicts ('filename', 'name', 'line') become FrameIds the same way, deduplicated by content,
//   and a frames list becomes a StackId deduplicated by its frame ids, so identical stacks share one
//   id whether or not the pickle shared the objects.
// * A dict that does not convert cleanly (a wrong type inside) stays a plain dict; if it sits where
//   the final pass needs a trace entry, the final pass converts it again and reports the problem
//   with its path ("device_traces[0][17]: 'size' is a str, expected an int").
// * Required keys: top level 'segments' and 'device_traces'; segment 'address', 'total_size',
//   'blocks'; block 'size'; trace entry 'action'. Everything else defaults (0, "", empty stack):
//   those are what the analyses cannot do without. Keys the analyses do not read are kept as
//   they were (format::RawValues, snapshot_decoder_kept.cpp) for `memtrace merge` to write back:
//   a trace entry's unknown keys, and its user_metadata and compile_context unless '' (what
//   PyTorch writes on every entry), are made a small dict only when there is one, so an entry
//   that carries nothing new costs nothing; segments', blocks' and top-level keys likewise.
// * 'ranges' (memtrace's range stack, docs/ranges.md) is read into TraceEntry::range and
//   Block::range and also kept as it was, so `memtrace merge` writes it back from the kept dict
//   (the writer has no typed ranges: written from both, it would be there twice). A list shared
//   through the memo is read and kept once. Not a list, or an item not a str: the entry or block
//   does not convert ("'ranges' holds a int, expected a list of str"); deeper than
//   kMaxRangeDepth: the outermost names are kept. A file with no 'ranges' key anywhere gets its
//   ranges derived from external_annotations (range_derivation.hpp), unless memtrace wrote it:
//   memtrace writes 'ranges' itself, so their absence means no event was inside a range.
// * Legacy shapes: a bare list of segments (torch.cuda.memory_snapshot()) loads as segments only,
//   with no device_traces; blocks without 'frames' but with a 'history' list (pre-2023) take
//   history[0]['frames'] and history[0]['real_size'], as PyTorch's tools do.
// * Block addresses are recomputed as the viewer does: segment address + sizes of earlier blocks.
#pragma once
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "cli/reader/pickle_vm.hpp"
#include "cli/reader/range_table.hpp"
#include "cli/reader/snapshot.hpp"
#include "format/keys.hpp"

namespace memtrace::reader::detail {

using format::Key;
using pickle::ObjKind;
using pickle::Tag;
using pickle::Value;

enum RecordKind : uint8_t { kTraceRecord = 1, kFrameRecord = 2 };

// The trace-entry pool grows in chunks that are never moved: 1024, 1024, 2048, ... 65536 entries
// (so a small file costs a small pool), then 131072 entries each: 6 MiB at 48 bytes an entry,
// exactly three huge pages. (At 65536 entries a chunk was 3 MiB in two huge pages, and the
// second page's unused half was resident too: a third of the pool wasted.)
inline constexpr uint32_t kFirstChunk = 1024;
inline constexpr uint32_t kChunk = 1 << 17;
inline constexpr uint32_t kSmallChunks = 8;  // chunks 0..7 hold entries 0..131071
static_assert(kFirstChunk << (kSmallChunks - 2) == kChunk / 2, "the small chunks must end where kChunk-sized ones start");
inline uint32_t chunk_of(uint32_t i) {
  if (i >= kChunk) return kSmallChunks + (i - kChunk) / kChunk;
  uint32_t k = i / kFirstChunk;
  return k == 0 ? 0 : 32 - static_cast<uint32_t>(__builtin_clz(k));
}
inline uint32_t chunk_start(uint32_t c) {
  if (c >= kSmallChunks) return kChunk + (c - kSmallChunks) * kChunk;
  return c == 0 ? 0 : kFirstChunk << (c - 1);
}
inline uint32_t chunk_capacity(uint32_t c) {
  return c >= kSmallChunks ? kChunk : c == 0 ? kFirstChunk : kFirstChunk << (c - 1);
}

// One chunk of the trace-entry pool, in a mapping of its own, so that the pages go back to the
// system the moment the chunk is released. (Chunks from malloc did not: glibc raises its mmap
// threshold as large blocks are freed, later chunks then came from the heap, and the final pass's
// releases left them resident while the device lists grew: a 5M-entry file peaked at 2.07x its
// size instead of 1.5x.) A chunk of 2 MiB or more starts on a 2 MiB boundary, for huge pages.
class EntryChunk {
 public:
  // Throws std::bad_alloc when the mapping fails.
  explicit EntryChunk(size_t bytes);
  EntryChunk(EntryChunk&& o) noexcept : p_(o.p_), bytes_(o.bytes_) { o.p_ = nullptr; }
  EntryChunk& operator=(EntryChunk&&) = delete;
  EntryChunk(const EntryChunk&) = delete;
  ~EntryChunk() { reset(); }
  TraceEntry* get() const { return p_; }
  size_t bytes() const { return bytes_; }
  void reset();  // TraceEntry is trivially destructible: the pages are simply unmapped

 private:
  TraceEntry* p_ = nullptr;
  size_t bytes_ = 0;
};

struct FrameKey {
  StrId file, name;
  int64_t line;
  bool operator==(const FrameKey& o) const { return file == o.file && name == o.name && line == o.line; }
};
struct FrameKeyHash {
  size_t operator()(const FrameKey& k) const {
    uint64_t h = (uint64_t{k.file} << 32 | k.name) * 0x9E3779B97F4A7C15ull;
    return static_cast<size_t>(h ^ (static_cast<uint64_t>(k.line) * 0xC2B2AE3D27D4EB4Full) ^ (h >> 29));
  }
};

// A failure in the final pass: a path and what is wrong, plus the byte offset of the nearest object.
struct Problem {
  std::string what;
  uint64_t offset = 0;
};

// Python's repr of a float (snapshot_decoder_settings.cpp).
std::string float_repr(double d);

class Decoder final : public pickle::DictHook {
 public:
  explicit Decoder(const std::string& name);

  LoadResult run(std::string_view bytes, bool drop_consumed);

  bool take(pickle::Vm& vm, uint32_t obj, const Value* kv, size_t n_pairs) override;

 private:
  // A dict key that is none of the known ones.
  static constexpr Key kUnknownKey = static_cast<Key>(format::kKeyCount);
  Value key(Key k) const { return Value::make(Tag::kStr, key_id(k)); }
  uint32_t key_id(Key k) const { return key_[static_cast<int>(k)]; }
  // Which known key a dict key is (kUnknownKey when none): one table look-up per key.
  Key field(Value k) const {
    if (!k.is_str() || k.payload() >= kFieldTable || field_of_[k.payload()] == 0) return kUnknownKey;
    return static_cast<Key>(field_of_[k.payload()] - 1);
  }
  const char* key_text(Key k) const { return format::key_name(k); }
  // A key as the messages name it: 'segments'.
  static std::string quoted(Key k) { return std::string("'") + format::key_name(k) + "'"; }

  // ---- field readers: false with *why set ("'size' is a str, expected an int") ----
  bool u64(Value v, Key k, uint64_t* out, std::string* why) const {
    if (vm_.as_u64(v, out)) return true;
    *why = bad_int(v, k);
    return false;
  }
  bool i64(Value v, Key k, int64_t* out, std::string* why) const {
    if (vm_.as_i64(v, out)) return true;
    *why = bad_int(v, k);
    return false;
  }
  std::string bad_int(Value v, Key k) const {
    if (vm_.number(v)) return std::string("'") + key_text(k) + "' is an integer out of range";
    return std::string("'") + key_text(k) + "' is a " + vm_.type_name(v) + ", expected an int";
  }
  bool str(Value v, Key k, StrId* out, std::string* why) const {
    if (v.is_str()) {
      *out = static_cast<StrId>(v.payload());
      return true;
    }
    if (v.is_none()) {
      *out = 0;
      return true;
    }
    *why = std::string("'") + key_text(k) + "' is a " + vm_.type_name(v) + ", expected a str";
    return false;
  }

  // snapshot_decoder_traces.cpp
  // *kept (when not null) receives the dict of the entry's kept keys, 0 for none.
  bool entry_from_pairs(const Value* kv, size_t n_pairs, TraceEntry* e, std::string* why, format::RawId* kept);
  bool frame_from_pairs(const Value* kv, size_t n_pairs, FrameId* out, std::string* why);
  bool frame_of(Value v, FrameId* out, std::string* why);
  bool stack_of(Value v, StackId* out, std::string* why);
  // A 'ranges' list (of str, outermost first; None: no range) as a node of snap_.ranges.
  bool range_of(Value v, RangeId* out, std::string* why);
  StackId intern_stack(const std::vector<FrameId>& ids);
  TraceEntry& pool_at(uint32_t i) {
    uint32_t c = chunk_of(i);
    return pool_[c].get()[i - chunk_start(c)];
  }
  void account();
  // device_traces (a list of lists) and, when present, host_traces (one flat list).
  bool decode_traces(Value v, const Value* host, Problem* p);

  // snapshot_decoder.cpp
  bool decode_top(Value top, Problem* p);

  // snapshot_decoder_kept.cpp: values kept as they were, into snap_.raw.
  format::RawId to_raw(Value v, int depth);
  // The pairs of a dict whose key is not one of `known` (string ids), as a kept dict; 0 if none.
  format::RawId kept_pairs(uint32_t dict_obj, const uint32_t* known, size_t n_known);

  // snapshot_decoder_segments.cpp
  bool decode_segments(Value v, Key key, std::vector<Segment>* out, Problem* p);
  bool decode_segment(Value v, Key key, size_t index, std::vector<Segment>* out, Problem* p);
  bool decode_block(Value v, const std::string& where, Block* blk, Problem* p);

  // snapshot_decoder_settings.cpp
  void decode_settings(Value v);
  void decode_memtrace_info(uint32_t mo);
  // Python-like repr; at most *budget items are shown in all (then "...").
  std::string repr(Value v, int depth, bool quote, size_t* budget);

  // Work and output budgets of the final pass, proportional to the input: containers shared through
  // the memo (one huge segment dict referred to 100,000 times, a device list repeated) could
  // otherwise make it quadratic in time or multiply the output. Real snapshots need a fraction.
  struct OverBudget {};
  const Value* find(uint32_t dict_obj, Key k) {
    size_t n;
    vm_.items(dict_obj, &n);
    spend(n / 2 + 1);
    return vm_.find(dict_obj, key_id(k));
  }
  void spend(size_t work) {
    if (work > work_left_) throw OverBudget{};
    work_left_ -= work;
  }
  void produce(size_t items) {
    if (items > output_left_) throw OverBudget{};
    output_left_ -= items;
  }
  uint64_t offset_of(Value v, uint64_t fallback) const {
    return v.is_obj() ? vm_.obj(static_cast<uint32_t>(v.payload())).offset() : fallback;
  }

  const std::string& name_;
  pickle::Vm vm_;
  uint32_t key_[format::kKeyCount] = {};
  static constexpr uint64_t kFieldTable = 64;  // the known keys are interned first: small ids
  uint8_t field_of_[kFieldTable] = {};
  uint32_t action_id_[format::kActionCount];
  uint32_t st_allocated_, st_pending_, st_awaiting_, st_inactive_;

  Snapshot snap_;
  RangeTable ranges_{&snap_.ranges};
  std::unordered_map<uint32_t, RangeId> range_ids_;       // 'ranges' list object -> node
  std::unordered_map<uint64_t, StreamId> stream_ids_;     // stream value -> Snapshot::streams index
  StreamId stream_id(uint64_t value);
  std::unordered_map<uint32_t, format::RawId> ranges_raw_;  // 'ranges' list object -> its kept copy
  std::vector<StrId> names_tmp_;
  bool saw_ranges_ = false;  // some entry or block has a 'ranges' key
  std::vector<EntryChunk> pool_;
  uint32_t pool_size_ = 0;
  size_t pool_bytes_ = 0;
  std::unordered_map<FrameKey, FrameId, FrameKeyHash> frame_ids_;
  std::unordered_map<std::string_view, StackId> stack_ids_;  // views of snap_.stacks[i]'s ids
  std::vector<FrameId> ids_tmp_;
  std::vector<format::RawId> kept_tmp_;
  std::vector<std::pair<uint32_t, format::RawId>> pool_kept_;  // by pool index, ascending
  size_t stack_frames_ = 0;
  size_t work_left_ = 0;
  size_t output_left_ = 0;
  size_t kept_left_ = 0;  // values to_raw() may still copy (snapshot_decoder_kept.cpp)
};

}  // namespace memtrace::reader::detail
