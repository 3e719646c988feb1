// Pickle values kept as they were (format::RawValues): the keys the analyses do not read, for
// `memtrace merge` to write back unchanged (docs/snapshot-format.md, "Keys kept as they were").
#include <string>

#include "cli/reader/snapshot_decoder_internal.hpp"

namespace memtrace::reader::detail {

// Deeper than this, a kept value is cut to None (real snapshots nest a few levels).
constexpr int kMaxKeptDepth = 32;

format::RawId Decoder::to_raw(Value v, int depth) {
  format::RawValues& raw = snap_.raw;
  // Values shared through the memo (or a list holding itself) could make the copy huge: past the
  // budget, what is left is cut to None rather than refusing a file for keys nobody reads.
  if (kept_left_ == 0) return raw.none();
  --kept_left_;
  switch (v.tag()) {
    case Tag::kInt:
    case Tag::kNum: {
      int64_t i;
      uint64_t u;
      if (vm_.as_i64(v, &i)) return raw.integer(i);
      if (vm_.as_u64(v, &u)) return raw.uinteger(u);
      return raw.none();  // an integer beyond 64 bits: the VM kept no digits
    }
    case Tag::kFloat: {
      double d = 0;
      vm_.as_double(v, &d);
      return raw.real(d);
    }
    case Tag::kStr: return raw.str(vm_.str(static_cast<uint32_t>(v.payload())));
    case Tag::kBytes: return raw.bytes(vm_.str(static_cast<uint32_t>(v.payload())));
    case Tag::kSpecial: return v.is_none() ? raw.none() : raw.boolean(v.payload() == 2);
    case Tag::kObj: break;
  }
  uint32_t o = static_cast<uint32_t>(v.payload());
  const pickle::Obj& ob = vm_.obj(o);
  if (depth >= kMaxKeptDepth) return raw.none();
  format::RawKind k;
  switch (ob.kind) {
    case ObjKind::kList: k = format::RawKind::kList; break;
    case ObjKind::kTuple: k = format::RawKind::kTuple; break;
    case ObjKind::kSet: k = format::RawKind::kSet; break;
    case ObjKind::kDict: k = format::RawKind::kDict; break;
    case ObjKind::kRecord:
      if (ob.record_kind == kFrameRecord && ob.payload < snap_.frames.size()) {
        // A frame dict the decoder made a record of: written back with its three keys.
        const Frame& f = snap_.frames[ob.payload];
        format::RawId kids[6] = {raw.str(key_text(Key::Filename)), raw.str(vm_.str(f.filename)),
                                 raw.str(key_text(Key::Line)),     raw.integer(f.line),
                                 raw.str(key_text(Key::Name)),     raw.str(vm_.str(f.name))};
        return raw.container(format::RawKind::kDict, kids, 6);
      }
      return raw.none();  // a trace entry where no trace list is: not kept
    default: return raw.none();
  }
  if (ob.flags & pickle::Obj::kCached) {
    // A frames list the decoder interned (its items were given back): rebuilt from the stack.
    std::vector<format::RawId> kids;
    if (ob.payload < snap_.stacks.size())
      for (FrameId f : snap_.stacks[ob.payload]) {
        const Frame& fr = snap_.frames[f];
        format::RawId d[6] = {raw.str(key_text(Key::Filename)), raw.str(vm_.str(fr.filename)),
                              raw.str(key_text(Key::Line)),     raw.integer(fr.line),
                              raw.str(key_text(Key::Name)),     raw.str(vm_.str(fr.name))};
        kids.push_back(raw.container(format::RawKind::kDict, d, 6));
      }
    return raw.container(k, kids.data(), kids.size());
  }
  size_t n;
  const Value* it = vm_.items(o, &n);
  std::vector<format::RawId> kids(n);
  for (size_t i = 0; i < n; ++i) kids[i] = to_raw(it[i], depth + 1);
  return raw.container(k, kids.data(), kids.size());
}

format::RawId Decoder::kept_pairs(uint32_t dict_obj, const uint32_t* known, size_t n_known) {
  size_t n;
  const Value* kv = vm_.items(dict_obj, &n);
  size_t from = kept_tmp_.size();
  for (size_t i = 0; i + 1 < n; i += 2) {
    Value k = kv[i];
    bool is_known = false;
    for (size_t j = 0; j < n_known && !is_known; ++j) is_known = k.is_str() && k.payload() == known[j];
    if (is_known) continue;
    kept_tmp_.push_back(to_raw(k, 1));
    kept_tmp_.push_back(to_raw(kv[i + 1], 1));
  }
  format::RawId id = 0;
  if (kept_tmp_.size() > from)
    id = snap_.raw.container(format::RawKind::kDict, kept_tmp_.data() + from, kept_tmp_.size() - from);
  kept_tmp_.resize(from);
  return id;
}

}  // namespace memtrace::reader::detail
