// allocator_settings, kept as display text, and memtrace's metadata in allocator_settings['memtrace']
// (docs/snapshot-format.md, "allocator_settings and memtrace's metadata").
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <string>

#include "cli/reader/snapshot_decoder_internal.hpp"

namespace memtrace::reader::detail {

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
  const Value* m = find(o, Key::Memtrace);
  if (!m || !vm_.is_kind(*m, ObjKind::kDict)) return;
  snap_.producer = Producer::kMemtrace;
  decode_memtrace_info(static_cast<uint32_t>(m->payload()));
}

// allocator_settings['memtrace']: the dict's presence marks the file as memtrace's.
void Decoder::decode_memtrace_info(uint32_t mo) {
  MemtraceInfo& info = snap_.memtrace;
  int64_t i;
  if (const Value* f = find(mo, Key::Pid); f && vm_.as_i64(*f, &i)) info.pid = i;
  if (const Value* f = find(mo, Key::EntriesDropped); f && vm_.as_i64(*f, &i)) info.entries_dropped = i;
  // memtrace writes 'allocator': "passthrough" (driver allocations as they were), "caching" (its
  // caching allocator served them), or "passthrough+memtrace_malloc" (the caching allocator served
  // PyTorch's pluggable-allocator calls): all but the first record through a cache.
  if (const Value* f = find(mo, Key::Allocator); f && f->is_str())
    info.allocator_caching = vm_.str(static_cast<uint32_t>(f->payload())) != format::kAllocatorPassthrough;
  if (const Value* f = find(mo, Key::AllocatorCaching); f && f->is_bool()) info.allocator_caching = f->payload() == 2;
  size_t budget = 16;
  auto text = [&](Key k, std::string* out) {
    const Value* f = find(mo, k);
    if (!f || f->is_none()) return;
    if (f->is_str())
      *out = std::string(vm_.str(static_cast<uint32_t>(f->payload())));
    else if (f->is_int())
      *out = repr(*f, 0, false, &budget);
  };
  text(Key::Rank, &info.rank);
  text(Key::Host, &info.host);
  text(Key::Exe, &info.exe);
  text(Key::Reason, &info.reason);
  text(Key::MergedPytorchSnapshot, &info.merged_pytorch);
  text(Key::MergedMemtraceSnapshot, &info.merged_memtrace);
}

}  // namespace memtrace::reader::detail
