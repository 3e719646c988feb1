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
//   those are what the analyses cannot do without. Unknown keys are ignored.
// * Legacy shapes: a bare list of segments (torch.cuda.memory_snapshot()) loads as segments only,
//   with no device_traces; blocks without 'frames' but with a 'history' list (pre-2023) take
//   history[0]['frames'] and history[0]['real_size'], as PyTorch's tools do.
// * Block addresses are recomputed as the viewer does: segment address + sizes of earlier blocks.
#include "cli/reader/snapshot_decoder.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <memory>
#include <unordered_map>

#include "cli/reader/pickle_vm.hpp"

namespace memtrace::reader {

namespace {

using pickle::ObjKind;
using pickle::Tag;
using pickle::Value;

enum RecordKind : uint8_t { kTraceRecord = 1, kFrameRecord = 2 };

// The trace-entry pool grows in chunks that are never moved: 1024, 1024, 2048, ... 32768 entries
// (so a small file costs a small pool), then 65536 entries (4 MiB, two huge pages) each.
constexpr uint32_t kFirstChunk = 1024;
constexpr uint32_t kChunk = 1 << 16;
constexpr uint32_t kSmallChunks = 7;  // chunks 0..6 hold entries 0..65535
uint32_t chunk_of(uint32_t i) {
  if (i >= kChunk) return kSmallChunks + (i - kChunk) / kChunk;
  uint32_t k = i / kFirstChunk;
  return k == 0 ? 0 : 32 - static_cast<uint32_t>(__builtin_clz(k));
}
uint32_t chunk_start(uint32_t c) {
  if (c >= kSmallChunks) return kChunk + (c - kSmallChunks) * kChunk;
  return c == 0 ? 0 : kFirstChunk << (c - 1);
}
uint32_t chunk_capacity(uint32_t c) { return c >= kSmallChunks ? kChunk : c == 0 ? kFirstChunk : kFirstChunk << (c - 1); }

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

// Python's repr of a float: the shortest digits that read back as the same double (to_chars,
// independent of the C locale), positional for exponents -4..15 (always with a '.'), scientific
// otherwise.
std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  size_t e = sci.find('e');
  int exp = std::atoi(sci.c_str() + e + 1);
  if (exp < -4 || exp >= 16) return sci;
  std::string sign = sci[0] == '-' ? "-" : "";
  std::string digits;
  for (size_t i = sign.size(); i < e; ++i)
    if (sci[i] != '.') digits += sci[i];
  std::string out;
  if (exp < 0) {
    out = "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
  } else {
    size_t whole = static_cast<size_t>(exp) + 1;
    if (digits.size() <= whole) {
      out = digits + std::string(whole - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, whole) + "." + digits.substr(whole);
    }
  }
  return sign + out;
}

class Decoder final : public pickle::DictHook {
 public:
  explicit Decoder(const std::string& name) : name_(name), vm_(this) {
    const char* keys[] = {"segments", "device_traces", "allocator_settings", "action", "addr", "size", "stream",
                          "time_us", "frames", "category", "device_free", "filename", "name", "line", "device",
                          "address", "total_size", "segment_type", "is_expandable", "blocks", "state",
                          "requested_size", "history", "real_size", "memtrace", "pid", "rank", "host", "exe",
                          "reason", "entries_dropped", "allocator_caching", "allocator", "size_exact",
                          "device_free_exact"};
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); ++i) {
      key_[i] = vm_.intern(keys[i]);
      if (key_[i] < kFieldTable) field_of_[key_[i]] = static_cast<uint8_t>(i + 1);
    }
    for (int i = 0; i < format::kActionCount; ++i) action_id_[i] = vm_.intern(format::kActionNames[i]);
    st_allocated_ = vm_.intern(format::block_state_name(BlockState::ActiveAllocated));
    st_pending_ = vm_.intern(format::block_state_name(BlockState::ActivePendingFree));
    st_awaiting_ = vm_.intern("active_awaiting_free");
    st_inactive_ = vm_.intern(format::block_state_name(BlockState::Inactive));
  }

  LoadResult run(std::string_view bytes, bool drop_consumed);

  bool take(pickle::Vm& vm, uint32_t obj, const Value* kv, size_t n_pairs) override;

 private:
  enum Key {
    kSegments, kDeviceTraces, kAllocatorSettings, kAction, kAddr, kSize, kStream, kTimeUs, kFrames, kCategory,
    kDeviceFree, kFilename, kName, kLine, kDevice, kAddress, kTotalSize, kSegmentType, kIsExpandable, kBlocks,
    kState, kRequestedSize, kHistory, kRealSize, kMemtrace, kPid, kRank, kHost, kExe, kReason, kEntriesDropped,
    kAllocatorCaching, kAllocator, kSizeExact, kDeviceFreeExact, kKeyCount
  };
  Value key(Key k) const { return Value::make(Tag::kStr, key_[k]); }
  // Which known key a dict key is (kKeyCount when none): one table look-up per key.
  Key field(Value k) const {
    if (!k.is_str() || k.payload() >= kFieldTable || field_of_[k.payload()] == 0) return kKeyCount;
    return static_cast<Key>(field_of_[k.payload()] - 1);
  }
  const char* key_text(Key k) const { return vm_.str(key_[k]).data(); }

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

  bool entry_from_pairs(const Value* kv, size_t n_pairs, TraceEntry* e, std::string* why);
  bool frame_from_pairs(const Value* kv, size_t n_pairs, FrameId* out, std::string* why);
  bool frame_of(Value v, FrameId* out, std::string* why);
  bool stack_of(Value v, StackId* out, std::string* why);
  StackId intern_stack(const std::vector<FrameId>& ids);
  TraceEntry& pool_at(uint32_t i) {
    uint32_t c = chunk_of(i);
    return pool_[c].get()[i - chunk_start(c)];
  }
  void account();

  bool decode_top(Value top, Problem* p);
  bool decode_traces(Value v, Problem* p);
  bool decode_segments(Value v, Problem* p);
  bool decode_segment(Value v, size_t index, Problem* p);
  void decode_settings(Value v);
  // Python-like repr; at most *budget items are shown in all (then "...").
  std::string repr(Value v, int depth, bool quote, size_t* budget);
  // Work and output budgets of the final pass, proportional to the input: containers shared through
  // the memo (one huge segment dict referred to 100,000 times, a device list repeated) could
  // otherwise make it quadratic in time or multiply the output. Real snapshots need a fraction.
  struct OverBudget {};
  const Value* find(uint32_t dict_obj, uint32_t key_id) {
    size_t n;
    vm_.items(dict_obj, &n);
    spend(n / 2 + 1);
    return vm_.find(dict_obj, key_id);
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
  uint32_t key_[kKeyCount];
  static constexpr uint64_t kFieldTable = 64;  // the known keys are interned first: small ids
  uint8_t field_of_[kFieldTable] = {};
  uint32_t action_id_[format::kActionCount];
  uint32_t st_allocated_, st_pending_, st_awaiting_, st_inactive_;

  Snapshot snap_;
  struct FreeChunk {
    void operator()(TraceEntry* p) const { std::free(p); }  // TraceEntry is trivially destructible
  };
  std::vector<std::unique_ptr<TraceEntry, FreeChunk>> pool_;
  uint32_t pool_size_ = 0;
  size_t pool_bytes_ = 0;
  std::unordered_map<FrameKey, FrameId, FrameKeyHash> frame_ids_;
  std::unordered_map<std::string_view, StackId> stack_ids_;  // views of snap_.stacks[i]'s ids
  std::vector<FrameId> ids_tmp_;
  size_t stack_frames_ = 0;
  size_t work_left_ = 0;
  size_t output_left_ = 0;
};

bool Decoder::entry_from_pairs(const Value* kv, size_t n_pairs, TraceEntry* e, std::string* why) {
  bool have_action = false;
  uint64_t size_exact = 0, free_exact = 0;
  // A decimal string written by memtrace beside a value capped at 2^53 - 1; anything else is ignored.
  auto exact = [&](Value v, uint64_t* out) {
    if (!v.is_str()) return;
    std::string_view t = vm_.str(static_cast<uint32_t>(v.payload()));
    uint64_t n = 0;
    if (t.empty() || t.size() > 20) return;
    for (char c : t) {
      if (c < '0' || c > '9') return;
      uint64_t d = static_cast<uint64_t>(c - '0');
      if (n > (UINT64_MAX - d) / 10) return;
      n = n * 10 + d;
    }
    *out = n;
  };
  for (size_t i = 0; i < n_pairs; ++i) {
    Value v = kv[2 * i + 1];
    switch (field(kv[2 * i])) {
      case kAction:
        if (!v.is_str()) {
          *why = std::string("'action' is a ") + vm_.type_name(v) + ", expected a str";
          return false;
        }
        e->action_str = static_cast<StrId>(v.payload());
        e->action = Action::Other;
        for (int a = 0; a < format::kActionCount; ++a)
          if (action_id_[a] == e->action_str) e->action = static_cast<Action>(a);
        have_action = true;
        break;
      case kAddr:
        if (!v.is_none() && !u64(v, kAddr, &e->addr, why)) return false;
        break;
      case kSize:
        if (!v.is_none() && !u64(v, kSize, &e->size, why)) return false;
        break;
      case kStream:
        if (!v.is_none() && !u64(v, kStream, &e->stream, why)) return false;
        break;
      case kTimeUs:
        if (!v.is_none() && !i64(v, kTimeUs, &e->time_us, why)) return false;
        break;
      case kCategory:
        if (!str(v, kCategory, &e->category, why)) return false;
        break;
      case kDeviceFree:
        if (!v.is_none()) {
          uint64_t f;
          if (!u64(v, kDeviceFree, &f, why)) return false;
          e->device_free = f;
        }
        break;
      case kFrames:
        if (!stack_of(v, &e->stack, why)) return false;
        break;
      case kSizeExact:  // memtrace's true value of a size the viewer's numbers cannot hold
        exact(v, &size_exact);
        break;
      case kDeviceFreeExact:
        exact(v, &free_exact);
        break;
      default:
        break;
    }
  }
  if (size_exact) e->size = size_exact;
  if (free_exact) e->device_free = free_exact;
  if (!have_action) {
    *why = "no 'action' key";
    return false;
  }
  return true;
}

bool Decoder::frame_from_pairs(const Value* kv, size_t n_pairs, FrameId* out, std::string* why) {
  FrameKey f{0, 0, 0};
  for (size_t i = 0; i < n_pairs; ++i) {
    Value k = kv[2 * i], v = kv[2 * i + 1];
    if (!k.is_str()) continue;
    uint32_t id = static_cast<uint32_t>(k.payload());
    if (id == key_[kFilename]) {
      if (!str(v, kFilename, &f.file, why)) return false;
    } else if (id == key_[kName]) {
      if (!str(v, kName, &f.name, why)) return false;
    } else if (id == key_[kLine]) {
      if (!v.is_none() && !i64(v, kLine, &f.line, why)) return false;
    }
  }
  auto it = frame_ids_.find(f);
  if (it != frame_ids_.end()) {
    *out = it->second;
    return true;
  }
  FrameId fid = static_cast<FrameId>(snap_.frames.size());
  snap_.frames.push_back(Frame{f.file, f.name, f.line});
  frame_ids_.emplace(f, fid);
  *out = fid;
  return true;
}

bool Decoder::frame_of(Value v, FrameId* out, std::string* why) {
  if (v.is_obj()) {
    uint32_t o = static_cast<uint32_t>(v.payload());
    const pickle::Obj& ob = vm_.obj(o);
    if (ob.kind == ObjKind::kRecord && ob.record_kind == kFrameRecord) {
      *out = ob.payload;
      return true;
    }
    if (ob.kind == ObjKind::kDict) {
      size_t n;
      const Value* kv = vm_.items(o, &n);
      if (!frame_from_pairs(kv, n / 2, out, why)) return false;
      vm_.make_record(o, kFrameRecord, *out);
      return true;
    }
  }
  *why = std::string("a frame is a ") + vm_.type_name(v) + ", expected a dict";
  return false;
}

StackId Decoder::intern_stack(const std::vector<FrameId>& ids) {
  if (ids.empty()) return 0;
  std::string_view key(reinterpret_cast<const char*>(ids.data()), ids.size() * sizeof(FrameId));
  auto it = stack_ids_.find(key);
  if (it != stack_ids_.end()) return it->second;
  StackId id = static_cast<StackId>(snap_.stacks.size());
  snap_.stacks.push_back(ids);
  const std::vector<FrameId>& stored = snap_.stacks.back();
  stack_ids_.emplace(std::string_view(reinterpret_cast<const char*>(stored.data()), stored.size() * sizeof(FrameId)),
                     id);
  stack_frames_ += ids.size();
  if ((id & 1023) == 0) account();
  return id;
}

bool Decoder::stack_of(Value v, StackId* out, std::string* why) {
  if (v.is_none()) {
    *out = 0;
    return true;
  }
  if (v.is_obj()) {
    uint32_t o = static_cast<uint32_t>(v.payload());
    const pickle::Obj& ob = vm_.obj(o);
    if (ob.kind == ObjKind::kList || ob.kind == ObjKind::kTuple) {
      if (ob.flags & pickle::Obj::kCached) {
        *out = ob.payload;
        return true;
      }
      size_t n;
      const Value* it = vm_.items(o, &n);
      ids_tmp_.clear();
      for (size_t i = 0; i < n; ++i) {
        FrameId f;
        if (!frame_of(it[i], &f, why)) {
          *why = "'frames': " + *why;
          return false;
        }
        ids_tmp_.push_back(f);
      }
      *out = intern_stack(ids_tmp_);
      vm_.cache(o, *out, true);
      return true;
    }
  }
  *why = std::string("'frames' is a ") + vm_.type_name(v) + ", expected a list";
  return false;
}

void Decoder::account() {
  vm_.set_hook_bytes(pool_bytes_ + snap_.frames.size() * (sizeof(Frame) + 64) +
                     snap_.stacks.size() * 112 + stack_frames_ * sizeof(FrameId));
}

bool Decoder::take(pickle::Vm& vm, uint32_t obj, const Value* kv, size_t n_pairs) {
  bool action = false, file = false, name = false;
  for (size_t i = 0; i < n_pairs; ++i) {
    Key k = field(kv[2 * i]);
    action |= k == kAction;
    file |= k == kFilename;
    name |= k == kName;
  }
  std::string why;
  if (action) {
    TraceEntry e;
    if (pool_size_ >= UINT32_MAX - kChunk || !entry_from_pairs(kv, n_pairs, &e, &why)) return false;
    if (pool_size_ == chunk_start(static_cast<uint32_t>(pool_.size()))) {
      size_t bytes = chunk_capacity(static_cast<uint32_t>(pool_.size())) * sizeof(TraceEntry);
      void* p = bytes >= (size_t{2} << 20) ? std::aligned_alloc(size_t{2} << 20, bytes) : std::malloc(bytes);
      if (!p) throw std::bad_alloc();
      pickle::advise_huge_pages(p, bytes);
      pool_.emplace_back(static_cast<TraceEntry*>(p));
      pool_bytes_ += bytes;
      account();
    }
    uint32_t idx = pool_size_++;
    new (&pool_at(idx)) TraceEntry(e);
    vm.make_record(obj, kTraceRecord, idx);
    return true;
  }
  if (file && name) {
    FrameId f;
    if (!frame_from_pairs(kv, n_pairs, &f, &why)) return false;
    vm.make_record(obj, kFrameRecord, f);
    if ((snap_.frames.size() & 1023) == 0) account();
    return true;
  }
  return false;
}

bool Decoder::decode_traces(Value v, Problem* p) {
  if (!vm_.is_kind(v, ObjKind::kList) && !vm_.is_kind(v, ObjKind::kTuple)) {
    p->what = std::string("'device_traces' is a ") + vm_.type_name(v) + ", expected a list of lists";
    p->offset = offset_of(v, 0);
    return false;
  }
  size_t nd;
  const Value* dev = vm_.items(static_cast<uint32_t>(v.payload()), &nd);
  // Pool chunks still referred to by the lists not yet copied (freed as soon as none is).
  std::vector<uint32_t> refs(pool_.size(), 0);
  for (size_t d = 0; d < nd; ++d) {
    if (!vm_.is_kind(dev[d], ObjKind::kList) && !vm_.is_kind(dev[d], ObjKind::kTuple)) {
      p->what = "device_traces[" + std::to_string(d) + "] is a " + vm_.type_name(dev[d]) + ", expected a list";
      p->offset = offset_of(dev[d], offset_of(v, 0));
      return false;
    }
    size_t ne;
    const Value* it = vm_.items(static_cast<uint32_t>(dev[d].payload()), &ne);
    spend(ne + 1);
    for (size_t i = 0; i < ne; ++i) {
      if (!it[i].is_obj()) continue;
      const pickle::Obj& ob = vm_.obj(static_cast<uint32_t>(it[i].payload()));
      if (ob.kind == ObjKind::kRecord && ob.record_kind == kTraceRecord) ++refs[chunk_of(ob.payload)];
    }
  }
  for (size_t c = 0; c < pool_.size(); ++c)
    if (refs[c] == 0) pool_[c].reset();

  produce(nd);
  snap_.device_traces.resize(nd);
  for (size_t d = 0; d < nd; ++d) {
    size_t ne;
    const Value* it = vm_.items(static_cast<uint32_t>(dev[d].payload()), &ne);
    std::vector<TraceEntry>& out = snap_.device_traces[d];
    produce(ne);
    out.reserve(ne);
    pickle::advise_huge_pages(out.data(), ne * sizeof(TraceEntry));
    for (size_t i = 0; i < ne; ++i) {
      Value e = it[i];
      std::string why;
      if (e.is_obj()) {
        uint32_t o = static_cast<uint32_t>(e.payload());
        const pickle::Obj& ob = vm_.obj(o);
        if (ob.kind == ObjKind::kRecord && ob.record_kind == kTraceRecord) {
          out.push_back(pool_at(ob.payload));
          // Give back a pool chunk as soon as no list still to be copied refers to it.
          uint32_t c = chunk_of(ob.payload);
          if (--refs[c] == 0) pool_[c].reset();
          continue;
        }
        if (ob.kind == ObjKind::kDict) {
          size_t n;
          const Value* kv = vm_.items(o, &n);
          TraceEntry te;
          if (entry_from_pairs(kv, n / 2, &te, &why)) {
            out.push_back(te);
            continue;
          }
        }
      }
      if (why.empty()) why = std::string("is a ") + vm_.type_name(e) + ", expected a trace entry dict";
      p->what = "device_traces[" + std::to_string(d) + "][" + std::to_string(i) + "]: " + why;
      p->offset = offset_of(e, offset_of(dev[d], 0));
      return false;
    }
  }
  return true;
}

bool Decoder::decode_segment(Value v, size_t index, Problem* p) {
  std::string where = "segments[" + std::to_string(index) + "]";
  if (!vm_.is_kind(v, ObjKind::kDict)) {
    p->what = where + " is a " + (vm_.is_kind(v, ObjKind::kRecord) ? std::string("trace entry or frame")
                                                                  : std::string(vm_.type_name(v))) +
              ", expected a segment dict";
    p->offset = offset_of(v, 0);
    return false;
  }
  uint32_t o = static_cast<uint32_t>(v.payload());
  p->offset = vm_.obj(o).offset();
  Segment seg;
  std::string why;
  auto need = [&](Key k) -> const Value* {
    const Value* f = find(o, key_[k]);
    if (!f) p->what = where + ": no '" + key_text(k) + "' key";
    return f;
  };
  const Value* address = need(kAddress);
  if (!address) return false;
  const Value* total = need(kTotalSize);
  if (!total) return false;
  const Value* blocks = need(kBlocks);
  if (!blocks) return false;
  bool ok = u64(*address, kAddress, &seg.address, &why) && u64(*total, kTotalSize, &seg.total_size, &why);
  int64_t dev = 0;
  if (ok) {
    if (const Value* f = find(o, key_[kDevice])) ok = i64(*f, kDevice, &dev, &why);
  }
  if (ok && (dev < -1 || dev > 1 << 20)) {
    why = "'device' is " + std::to_string(dev) + ", not a device index";
    ok = false;
  }
  seg.device = static_cast<int>(dev);
  if (ok) {
    if (const Value* f = find(o, key_[kStream]); f && !f->is_none()) ok = u64(*f, kStream, &seg.stream, &why);
  }
  if (ok) {
    if (const Value* f = find(o, key_[kSegmentType])) ok = str(*f, kSegmentType, &seg.segment_type, &why);
  }
  if (ok) {
    if (const Value* f = find(o, key_[kIsExpandable])) {
      if (f->is_bool()) {
        seg.is_expandable = f->payload() == 2;
      } else if (!f->is_none()) {
        why = std::string("'is_expandable' is a ") + vm_.type_name(*f) + ", expected a bool";
        ok = false;
      }
    }
  }
  if (ok) {
    if (const Value* f = find(o, key_[kFrames])) ok = stack_of(*f, &seg.stack, &why);
  }
  if (!ok) {
    p->what = where + ": " + why;
    return false;
  }
  if (!vm_.is_kind(*blocks, ObjKind::kList) && !vm_.is_kind(*blocks, ObjKind::kTuple)) {
    p->what = where + ": 'blocks' is a " + vm_.type_name(*blocks) + ", expected a list";
    return false;
  }
  size_t nb;
  const Value* b = vm_.items(static_cast<uint32_t>(blocks->payload()), &nb);
  produce(nb + 1);
  seg.blocks.reserve(nb);
  uint64_t addr = seg.address;
  for (size_t i = 0; i < nb; ++i) {
    std::string bwhere = where + ".blocks[" + std::to_string(i) + "]";
    if (!vm_.is_kind(b[i], ObjKind::kDict)) {
      p->what = bwhere + " is a " + vm_.type_name(b[i]) + ", expected a block dict";
      p->offset = offset_of(b[i], p->offset);
      return false;
    }
    uint32_t bo = static_cast<uint32_t>(b[i].payload());
    Block blk;
    const Value* size = find(bo, key_[kSize]);
    if (!size) {
      p->what = bwhere + ": no 'size' key";
      p->offset = vm_.obj(bo).offset();
      return false;
    }
    ok = u64(*size, kSize, &blk.size, &why);
    if (ok) {
      if (const Value* f = find(bo, key_[kRequestedSize]); f && !f->is_none())
        ok = u64(*f, kRequestedSize, &blk.requested_size, &why);
    }
    if (ok) {
      blk.state = BlockState::Other;
      if (const Value* f = find(bo, key_[kState])) {
        StrId s = 0;
        ok = str(*f, kState, &s, &why);
        if (s == st_allocated_) blk.state = BlockState::ActiveAllocated;
        else if (s == st_pending_ || s == st_awaiting_) blk.state = BlockState::ActivePendingFree;
        else if (s == st_inactive_) blk.state = BlockState::Inactive;
      }
    }
    if (ok) {
      if (const Value* f = find(bo, key_[kFrames])) {
        ok = stack_of(*f, &blk.stack, &why);
      } else if (const Value* h = find(bo, key_[kHistory])) {
        // Pre-2023 files: the block's newest history record carries its frames and real size.
        size_t nh = 0;
        const Value* hv = (vm_.is_kind(*h, ObjKind::kList)) ? vm_.items(static_cast<uint32_t>(h->payload()), &nh) : nullptr;
        if (nh > 0 && vm_.is_kind(hv[0], ObjKind::kDict)) {
          uint32_t ho = static_cast<uint32_t>(hv[0].payload());
          if (const Value* f = find(ho, key_[kFrames])) ok = stack_of(*f, &blk.stack, &why);
          if (ok) {
            if (const Value* r = find(ho, key_[kRealSize]); r && !r->is_none())
              ok = u64(*r, kRealSize, &blk.requested_size, &why);
          }
        }
      }
    }
    if (!ok) {
      p->what = bwhere + ": " + why;
      p->offset = vm_.obj(bo).offset();
      return false;
    }
    blk.address = addr;
    addr += blk.size;
    seg.blocks.push_back(blk);
  }
  snap_.segments.push_back(std::move(seg));
  return true;
}

bool Decoder::decode_segments(Value v, Problem* p) {
  if (!vm_.is_kind(v, ObjKind::kList) && !vm_.is_kind(v, ObjKind::kTuple)) {
    p->what = std::string("'segments' is a ") + vm_.type_name(v) + ", expected a list";
    p->offset = offset_of(v, 0);
    return false;
  }
  size_t n;
  const Value* it = vm_.items(static_cast<uint32_t>(v.payload()), &n);
  snap_.segments.reserve(n);
  for (size_t i = 0; i < n; ++i)
    if (!decode_segment(it[i], i, p)) return false;
  return true;
}

std::string Decoder::repr(Value v, int depth, bool quote, size_t* budget) {
  switch (v.tag()) {
    case Tag::kInt:
    case Tag::kNum: {
      int64_t i;
      uint64_t u;
      if (vm_.as_i64(v, &i)) return std::to_string(i);
      if (vm_.as_u64(v, &u)) return std::to_string(u);
      return "<integer out of range>";
    }
    case Tag::kFloat: {
      double d = 0;
      vm_.as_double(v, &d);
      return float_repr(d);
    }
    case Tag::kStr: {
      std::string s(vm_.str(static_cast<uint32_t>(v.payload())));
      return quote ? "'" + s + "'" : s;
    }
    case Tag::kBytes: return "b'" + std::string(vm_.str(static_cast<uint32_t>(v.payload()))) + "'";
    case Tag::kSpecial: return v.is_none() ? "None" : v.payload() == 2 ? "True" : "False";
    case Tag::kObj: break;
  }
  uint32_t o = static_cast<uint32_t>(v.payload());
  const pickle::Obj& ob = vm_.obj(o);
  const char* open = "[";
  const char* close = "]";
  bool dict = false;
  switch (ob.kind) {
    case ObjKind::kDict: open = "{"; close = "}"; dict = true; break;
    case ObjKind::kTuple: open = "("; close = ")"; break;
    case ObjKind::kSet: open = "{"; close = "}"; break;
    case ObjKind::kRecord: return "{...}";
    case ObjKind::kCallable:
    case ObjKind::kPending: return "<object>";
    case ObjKind::kList: break;
  }
  if (depth >= 6 || *budget == 0) return std::string(open) + "..." + close;
  size_t n;
  const Value* it = vm_.items(o, &n);
  std::string s = open;
  size_t step = dict ? 2 : 1, shown = 0;
  for (size_t i = 0; i + step <= n; i += step) {
    if (shown) s += ", ";
    if (++shown > 32 || *budget == 0) {
      s += "...";
      break;
    }
    --*budget;
    spend(1);
    s += repr(it[i], depth + 1, true, budget);
    if (dict) s += ": " + repr(it[i + 1], depth + 1, true, budget);
  }
  if (ob.kind == ObjKind::kTuple && shown == 1) s += ",";
  return s + close;
}

void Decoder::decode_settings(Value v) {
  if (!vm_.is_kind(v, ObjKind::kDict)) return;
  uint32_t o = static_cast<uint32_t>(v.payload());
  size_t n;
  const Value* kv = vm_.items(o, &n);
  for (size_t i = 0; i + 1 < n; i += 2) {
    size_t budget = 256;
    spend(1);
    std::string k = repr(kv[i], 1, false, &budget);
    snap_.settings.emplace_back(std::move(k), repr(kv[i + 1], 1, false, &budget));
  }
  const Value* m = find(o, key_[kMemtrace]);
  if (!m || !vm_.is_kind(*m, ObjKind::kDict)) return;
  snap_.producer = Producer::kMemtrace;
  uint32_t mo = static_cast<uint32_t>(m->payload());
  MemtraceInfo& info = snap_.memtrace;
  int64_t i;
  if (const Value* f = find(mo, key_[kPid]); f && vm_.as_i64(*f, &i)) info.pid = i;
  if (const Value* f = find(mo, key_[kEntriesDropped]); f && vm_.as_i64(*f, &i)) info.entries_dropped = i;
  // memtrace writes 'allocator': "passthrough" (driver allocations as they were), "caching" (its
  // caching allocator served them), or "passthrough+memtrace_malloc" (the caching allocator served
  // PyTorch's pluggable-allocator calls): all but the first record through a cache.
  if (const Value* f = find(mo, key_[kAllocator]); f && f->is_str())
    info.allocator_caching = vm_.str(static_cast<uint32_t>(f->payload())) != "passthrough";
  if (const Value* f = find(mo, key_[kAllocatorCaching]); f && f->is_bool()) info.allocator_caching = f->payload() == 2;
  size_t budget = 16;
  auto text = [&](Key k, std::string* out) {
    const Value* f = find(mo, key_[k]);
    if (!f || f->is_none()) return;
    if (f->is_str())
      *out = std::string(vm_.str(static_cast<uint32_t>(f->payload())));
    else if (f->is_int())
      *out = repr(*f, 0, false, &budget);
  };
  text(kRank, &info.rank);
  text(kHost, &info.host);
  text(kExe, &info.exe);
  text(kReason, &info.reason);
}

bool Decoder::decode_top(Value top, Problem* p) {
  if (vm_.is_kind(top, ObjKind::kList)) {
    // Legacy: torch.cuda.memory_snapshot() returned the segment list alone.
    return decode_segments(top, p);
  }
  if (!vm_.is_kind(top, ObjKind::kDict)) {
    p->what = std::string("not a snapshot: the pickle holds a ") +
              (vm_.is_kind(top, ObjKind::kRecord) ? "trace entry or frame dict" : vm_.type_name(top)) +
              ", expected a dict with 'segments' and 'device_traces'";
    p->offset = offset_of(top, 0);
    return false;
  }
  uint32_t o = static_cast<uint32_t>(top.payload());
  const Value* seg = find(o, key_[kSegments]);
  const Value* tr = find(o, key_[kDeviceTraces]);
  if (!seg || !tr) {
    p->what = std::string("not a snapshot: the top-level dict has no ") +
              (!seg && !tr ? "'segments' and no 'device_traces'" : !seg ? "'segments'" : "'device_traces'") + " key";
    p->offset = vm_.obj(o).offset();
    return false;
  }
  if (!decode_traces(*tr, p)) return false;
  if (!decode_segments(*seg, p)) return false;
  if (const Value* s = find(o, key_[kAllocatorSettings])) decode_settings(*s);
  return true;
}

LoadResult Decoder::run(std::string_view bytes, bool drop_consumed) {
  LoadResult r;
  Value top;
  std::string err;
  if (!vm_.run(bytes, &top, &err, drop_consumed)) {
    r.error = LoadError{name_ + ": " + err};
    return r;
  }
  Problem p;
  work_left_ = 16 * bytes.size() + (size_t{1} << 20);
  output_left_ = bytes.size() / 4 + 4096;
  bool ok;
  try {
    ok = decode_top(top, &p);
  } catch (const OverBudget&) {
    r.error = LoadError{name_ + ": containers shared through the memo make this pickle decode to far more than "
                                "its size (not a snapshot)"};
    return r;
  }
  if (!ok) {
    char where[64];
    std::snprintf(where, sizeof(where), " (object at byte %llu)", static_cast<unsigned long long>(p.offset));
    r.error = LoadError{name_ + ": " + p.what + where};
    return r;
  }
  pool_.clear();
  frame_ids_.clear();
  stack_ids_.clear();
  snap_.strings = vm_.take_strings();
  r.snapshot = std::move(snap_);
  return r;
}

}  // namespace

LoadResult decode_snapshot(std::string_view bytes, const std::string& name_for_errors, bool drop_consumed) {
  auto d = std::make_unique<Decoder>(name_for_errors);
  return d->run(bytes, drop_consumed);
}

}  // namespace memtrace::reader
