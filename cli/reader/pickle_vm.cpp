#include "cli/reader/pickle_vm.hpp"

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include <sys/mman.h>
#include <unistd.h>

namespace memtrace::reader::pickle {

namespace {

// Indices of the globals REDUCE may call (payload of a kCallable object).
enum Callable : uint32_t { kCodecsEncode, kBytes, kByteArray, kSet, kFrozenSet };

const char* op_name(uint8_t op) {
  switch (op) {
    case '(': return "MARK";
    case '.': return "STOP";
    case '0': return "POP";
    case '1': return "POP_MARK";
    case '2': return "DUP";
    case 'F': return "FLOAT";
    case 'I': return "INT";
    case 'J': return "BININT";
    case 'K': return "BININT1";
    case 'L': return "LONG";
    case 'M': return "BININT2";
    case 'N': return "NONE";
    case 'P': return "PERSID";
    case 'Q': return "BINPERSID";
    case 'R': return "REDUCE";
    case 'S': return "STRING";
    case 'T': return "BINSTRING";
    case 'U': return "SHORT_BINSTRING";
    case 'V': return "UNICODE";
    case 'X': return "BINUNICODE";
    case 'a': return "APPEND";
    case 'b': return "BUILD";
    case 'c': return "GLOBAL";
    case 'd': return "DICT";
    case '}': return "EMPTY_DICT";
    case 'e': return "APPENDS";
    case 'g': return "GET";
    case 'h': return "BINGET";
    case 'i': return "INST";
    case 'j': return "LONG_BINGET";
    case 'l': return "LIST";
    case ']': return "EMPTY_LIST";
    case 'o': return "OBJ";
    case 'p': return "PUT";
    case 'q': return "BINPUT";
    case 'r': return "LONG_BINPUT";
    case 's': return "SETITEM";
    case 't': return "TUPLE";
    case ')': return "EMPTY_TUPLE";
    case 'u': return "SETITEMS";
    case 'G': return "BINFLOAT";
    case 'B': return "BINBYTES";
    case 'C': return "SHORT_BINBYTES";
    case 0x80: return "PROTO";
    case 0x81: return "NEWOBJ";
    case 0x82: return "EXT1";
    case 0x83: return "EXT2";
    case 0x84: return "EXT4";
    case 0x85: return "TUPLE1";
    case 0x86: return "TUPLE2";
    case 0x87: return "TUPLE3";
    case 0x88: return "NEWTRUE";
    case 0x89: return "NEWFALSE";
    case 0x8a: return "LONG1";
    case 0x8b: return "LONG4";
    case 0x8c: return "SHORT_BINUNICODE";
    case 0x8d: return "BINUNICODE8";
    case 0x8e: return "BINBYTES8";
    case 0x8f: return "EMPTY_SET";
    case 0x90: return "ADDITEMS";
    case 0x91: return "FROZENSET";
    case 0x92: return "NEWOBJ_EX";
    case 0x93: return "STACK_GLOBAL";
    case 0x94: return "MEMOIZE";
    case 0x95: return "FRAME";
    case 0x96: return "BYTEARRAY8";
    case 0x97: return "NEXT_BUFFER";
    case 0x98: return "READONLY_BUFFER";
    default: return nullptr;
  }
}

}  // namespace

bool may_start_pickle(uint8_t op) {
  switch (op) {
    case 0x80: case 0x95:                                // PROTO, FRAME
    case '(': case '}': case ']': case ')': case 0x8f:   // MARK, EMPTY_DICT/LIST/TUPLE/SET
    case 'N': case 0x88: case 0x89:                      // NONE, NEWTRUE, NEWFALSE
    case 'F': case 'G': case 'I': case 'J': case 'K': case 'L': case 'M': case 0x8a: case 0x8b:
    case 'S': case 'T': case 'U': case 'V': case 'X': case 0x8c: case 0x8d:  // strings
    case 'B': case 'C': case 0x8e: case 0x96:            // bytes, BYTEARRAY8
    case 'c':                                            // GLOBAL (_codecs.encode, builtins.bytes, ...)
      return true;
    default:
      return false;
  }
}

std::string describe_opcode(uint8_t op) {
  char buf[48];
  if (const char* nm = op_name(op))
    std::snprintf(buf, sizeof(buf), "%s (0x%02x)", nm, op);
  else
    std::snprintf(buf, sizeof(buf), "0x%02x", op);
  return buf;
}

namespace {

uint32_t le32(const uint8_t* p) { return p[0] | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 24); }
uint64_t le64(const uint8_t* p) { return le32(p) | (uint64_t{le32(p + 4)} << 32); }

void put_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Protocol 0 UNICODE: raw-unicode-escape (bytes are Latin-1 code points except \uXXXX, \UXXXXXXXX).
bool raw_unicode_escape(std::string_view in, std::string* out) {
  out->clear();
  for (size_t i = 0; i < in.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(in[i]);
    if (c == '\\' && i + 1 < in.size() && (in[i + 1] == 'u' || in[i + 1] == 'U')) {
      size_t digits = in[i + 1] == 'u' ? 4 : 8;
      if (i + 2 + digits > in.size()) return false;
      uint32_t cp = 0;
      for (size_t k = 0; k < digits; ++k) {
        int d = hex_digit(in[i + 2 + k]);
        if (d < 0) return false;
        cp = cp * 16 + static_cast<uint32_t>(d);
      }
      if (cp > 0x10FFFF) return false;
      put_utf8(*out, cp);
      i += 1 + digits;
    } else {
      put_utf8(*out, c);
    }
  }
  return true;
}

// Protocol 0 STRING: a quoted Python repr of a byte string.
bool string_escape(std::string_view in, std::string* out) {
  if (in.size() < 2 || (in.front() != '\'' && in.front() != '"') || in.back() != in.front()) return false;
  in = in.substr(1, in.size() - 2);
  out->clear();
  for (size_t i = 0; i < in.size(); ++i) {
    char c = in[i];
    if (c != '\\' || i + 1 == in.size()) {
      out->push_back(c);
      continue;
    }
    char e = in[++i];
    switch (e) {
      case '\\': out->push_back('\\'); break;
      case '\'': out->push_back('\''); break;
      case '"': out->push_back('"'); break;
      case 'a': out->push_back('\a'); break;
      case 'b': out->push_back('\b'); break;
      case 'f': out->push_back('\f'); break;
      case 'n': out->push_back('\n'); break;
      case 'r': out->push_back('\r'); break;
      case 't': out->push_back('\t'); break;
      case 'v': out->push_back('\v'); break;
      case '\n': break;
      case 'x': {
        if (i + 2 >= in.size()) return false;
        int h = hex_digit(in[i + 1]);
        int l = hex_digit(in[i + 2]);
        if (h < 0 || l < 0) return false;
        out->push_back(static_cast<char>(h * 16 + l));
        i += 2;
        break;
      }
      default:
        if (e >= '0' && e <= '7') {
          int v = e - '0';
          for (int k = 0; k < 2 && i + 1 < in.size() && in[i + 1] >= '0' && in[i + 1] <= '7'; ++k) v = v * 8 + (in[++i] - '0');
          out->push_back(static_cast<char>(v & 0xFF));
        } else {
          out->push_back('\\');
          out->push_back(e);
        }
    }
  }
  return true;
}

// UTF-8 text whose code points are all < 256 -> those bytes (what _codecs.encode(s, 'latin1') does).
bool utf8_to_latin1(std::string_view in, std::string* out) {
  out->clear();
  for (size_t i = 0; i < in.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(in[i]);
    if (c < 0x80) {
      out->push_back(static_cast<char>(c));
    } else if ((c == 0xC2 || c == 0xC3) && i + 1 < in.size() &&
               (static_cast<unsigned char>(in[i + 1]) & 0xC0) == 0x80) {
      out->push_back(static_cast<char>(((c & 0x1F) << 6) | (static_cast<unsigned char>(in[i + 1]) & 0x3F)));
      ++i;
    } else {
      return false;
    }
  }
  return true;
}

}  // namespace

void advise_huge_pages(const void* p, size_t bytes) {
#ifdef MADV_HUGEPAGE
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  uintptr_t from = (reinterpret_cast<uintptr_t>(p) + kHuge - 1) & ~(kHuge - 1);
  uintptr_t to = (reinterpret_cast<uintptr_t>(p) + bytes) & ~(kHuge - 1);
  if (p && to > from) madvise(reinterpret_cast<void*>(from), to - from, MADV_HUGEPAGE);
#else
  (void)p;
  (void)bytes;
#endif
}

uint32_t Vm::intern(std::string_view s) {
  auto it = string_ids_.find(s);
  if (it != string_ids_.end()) return it->second;
  strings_.emplace_back(s);
  string_bytes_ += s.size() + 96;  // the text, the std::string, the deque slot and the map node
  uint32_t id = static_cast<uint32_t>(strings_.size() - 1);
  string_ids_.emplace(strings_.back(), id);
  return id;
}

std::vector<std::string> Vm::take_strings() {
  string_ids_.clear();
  std::vector<std::string> out;
  out.reserve(strings_.size());
  for (auto& s : strings_) out.push_back(std::move(s));
  strings_.clear();
  return out;
}

bool Vm::as_i64(Value v, int64_t* out) const {
  if (v.tag() == Tag::kInt) {
    *out = static_cast<int64_t>(v.bits) >> 3;
    return true;
  }
  if (v.tag() == Tag::kNum && numbers_[v.payload()].kind == 0) {
    *out = static_cast<int64_t>(numbers_[v.payload()].bits);
    return true;
  }
  return false;
}

bool Vm::as_u64(Value v, uint64_t* out) const {
  int64_t i;
  if (as_i64(v, &i)) {
    *out = static_cast<uint64_t>(i);
    return true;
  }
  if (v.tag() == Tag::kNum && numbers_[v.payload()].kind == 1) {
    *out = numbers_[v.payload()].bits;
    return true;
  }
  return false;
}

bool Vm::as_double(Value v, double* out) const {
  if (v.tag() == Tag::kFloat) {
    *out = floats_[v.payload()];
    return true;
  }
  int64_t i;
  uint64_t u;
  if (as_i64(v, &i)) {
    *out = static_cast<double>(i);
    return true;
  }
  if (as_u64(v, &u)) {
    *out = static_cast<double>(u);
    return true;
  }
  return false;
}

const char* Vm::type_name(Value v) const {
  switch (v.tag()) {
    case Tag::kInt:
    case Tag::kNum: return "int";
    case Tag::kStr: return "str";
    case Tag::kFloat: return "float";
    case Tag::kBytes: return "bytes";
    case Tag::kSpecial: return v.is_none() ? "None" : "bool";
    case Tag::kObj:
      switch (objs_[v.payload()].kind) {
        case ObjKind::kList: return "list";
        case ObjKind::kDict:
        case ObjKind::kRecord: return "dict";
        case ObjKind::kTuple: return "tuple";
        case ObjKind::kSet: return "set";
        case ObjKind::kCallable: return "global";
        case ObjKind::kPending: return "object";
      }
  }
  return "object";
}

uint32_t Vm::new_obj(ObjKind k) {
  // Object indices are 32-bit; no snapshot comes near 4 billion containers.
  if (objs_.size() >= UINT32_MAX - 1) throw std::length_error("more than 4 billion containers; not a snapshot");
  Obj o;
  o.kind = k;
  o.offset_lo = static_cast<uint32_t>(offset_);
  o.offset_hi = static_cast<uint8_t>(offset_ >> 32);
  objs_.push_back(o);
  return static_cast<uint32_t>(objs_.size() - 1);
}

std::vector<Value>& Vm::storage_of(uint32_t obj) {
  Obj& o = objs_[obj];
  if (o.storage == 0) {
    if (!free_storage_.empty()) {
      o.storage = free_storage_.back() + 1;
      free_storage_.pop_back();
    } else {
      storage_.emplace_back();
      o.storage = static_cast<uint32_t>(storage_.size());
    }
  }
  return storage_[o.storage - 1];
}

void Vm::release_storage(uint32_t obj) {
  Obj& o = objs_[obj];
  if (o.storage == 0) return;
  std::vector<Value>& v = storage_[o.storage - 1];
  if (v.capacity() > 256) {
    storage_bytes_ -= v.capacity() * sizeof(Value);
    std::vector<Value>().swap(v);
  } else {
    v.clear();  // kept with its capacity for the next small container
  }
  free_storage_.push_back(o.storage - 1);
  o.storage = 0;
}

const Value* Vm::items(uint32_t obj, size_t* n) const {
  const Obj& o = objs_[obj];
  if (o.storage == 0) {
    *n = 0;
    return nullptr;
  }
  const std::vector<Value>& v = storage_[o.storage - 1];
  *n = v.size();
  return v.data();
}

const Value* Vm::find(uint32_t dict_obj, uint32_t key_id) const {
  size_t n;
  const Value* kv = items(dict_obj, &n);
  Value key = Value::make(Tag::kStr, key_id);
  for (size_t i = n; i >= 2; i -= 2)
    if (kv[i - 2].bits == key.bits) return &kv[i - 1];
  return nullptr;
}

void Vm::make_record(uint32_t obj, uint8_t record_kind, uint32_t payload) {
  release_storage(obj);  // a record's content lives with the hook
  Obj& o = objs_[obj];
  o.kind = ObjKind::kRecord;
  o.record_kind = record_kind;
  o.payload = payload;
  o.flags |= Obj::kSealed;
}

void Vm::cache(uint32_t obj, uint32_t id, bool release_items) {
  Obj& o = objs_[obj];
  o.flags |= Obj::kSealed | Obj::kCached;
  o.payload = id;
  if (release_items) release_storage(obj);
}

size_t Vm::memory_bytes() const {
  return stack_.capacity() * sizeof(Value) + marks_.capacity() * sizeof(size_t) +
         memo_.capacity() * sizeof(Value) + memo_far_.size() * 48 + objs_.capacity() * sizeof(Obj) +
         storage_.capacity() * sizeof(std::vector<Value>) + storage_bytes_ + numbers_.capacity() * sizeof(Number) +
         floats_.capacity() * sizeof(double) + string_bytes_ + hook_bytes_;
}

Value Vm::push_number(int64_t v) {
  constexpr int64_t kLim = int64_t{1} << 60;
  if (v >= -kLim && v < kLim) return Value{(static_cast<uint64_t>(v) << 3) | static_cast<uint64_t>(Tag::kInt)};
  numbers_.push_back(Number{static_cast<uint64_t>(v), 0, v < 0});
  return Value::make(Tag::kNum, numbers_.size() - 1);
}

Value Vm::push_unsigned(uint64_t v) {
  if (v <= static_cast<uint64_t>(INT64_MAX)) return push_number(static_cast<int64_t>(v));
  numbers_.push_back(Number{v, 1, false});
  return Value::make(Tag::kNum, numbers_.size() - 1);
}

Value Vm::push_out_of_range(bool negative) {
  numbers_.push_back(Number{0, 2, negative});
  return Value::make(Tag::kNum, numbers_.size() - 1);
}

Value Vm::make_int_from_le(const uint8_t* p, size_t n) {
  if (n == 0) return push_number(0);
  bool neg = (p[n - 1] & 0x80) != 0;
  if (n <= 8) {
    uint64_t u = 0;
    for (size_t i = 0; i < n; ++i) u |= uint64_t{p[i]} << (8 * i);
    if (neg && n < 8) u |= ~uint64_t{0} << (8 * n);
    return push_number(static_cast<int64_t>(u));
  }
  // More than 8 bytes: fits only if the extra bytes are pure sign extension (or, for a positive
  // number, zero padding above a uint64).
  uint8_t fill = neg ? 0xFF : 0x00;
  for (size_t i = 8; i < n; ++i)
    if (p[i] != fill) return push_out_of_range(neg);
  uint64_t u = le64(p);
  if (neg) {
    if (!(u >> 63)) return push_out_of_range(true);
    return push_number(static_cast<int64_t>(u));
  }
  return push_unsigned(u);
}

bool Vm::parse_decimal(std::string_view t, Value* out) {
  while (!t.empty() && (t.back() == 'L' || t.back() == ' ' || t.back() == '\r')) t.remove_suffix(1);
  while (!t.empty() && t.front() == ' ') t.remove_prefix(1);
  bool neg = false;
  if (!t.empty() && (t.front() == '-' || t.front() == '+')) {
    neg = t.front() == '-';
    t.remove_prefix(1);
  }
  if (t.empty()) return false;
  unsigned __int128 acc = 0;
  bool overflow = false;
  for (char c : t) {
    if (c == '_') continue;
    if (c < '0' || c > '9') return false;
    if (!overflow) {
      acc = acc * 10 + static_cast<unsigned>(c - '0');
      if (acc > (static_cast<unsigned __int128>(1) << 65)) overflow = true;
    }
  }
  if (overflow) {
    *out = push_out_of_range(neg);
  } else if (neg) {
    if (acc > (static_cast<unsigned __int128>(1) << 63))
      *out = push_out_of_range(true);
    else
      *out = push_number(static_cast<int64_t>(-static_cast<__int128>(acc)));
  } else if (acc > UINT64_MAX) {
    *out = push_out_of_range(false);
  } else {
    *out = push_unsigned(static_cast<uint64_t>(acc));
  }
  return true;
}

bool Vm::memo_put(uint64_t idx, Value v) {
  if (idx < memo_.size()) {
    memo_[idx] = v;
    return true;
  }
  // Dense growth for the indices writers use (0, 1, 2, ...); a far index goes to the side map so
  // that "LONG_BINPUT 4000000000" costs one entry, not 4 billion.
  if (idx < memo_.size() + 65536) {
    memo_.resize(idx + 1, kUnset);
    memo_[idx] = v;
    return true;
  }
  memo_far_[idx] = v;
  return true;
}

bool Vm::memo_get(uint64_t idx, Value* v) {
  if (idx < memo_.size()) {
    *v = memo_[idx];
    return v->bits != kUnset.bits;
  }
  auto it = memo_far_.find(idx);
  if (it == memo_far_.end()) return false;
  *v = it->second;
  return true;
}

bool Vm::run(std::string_view bytes, Value* result, std::string* error, bool drop_consumed) {
  const uint8_t* const base = reinterpret_cast<const uint8_t*>(bytes.data());
  const size_t n = bytes.size();
  size_t pos = 0;
  // What the VM may hold: generous for real snapshots (they need about 1-2x their size), and it
  // stops a small hostile file from growing without end.
  const size_t memory_cap = (size_t{64} << 20) + 16 * n;
  uint64_t ops = 0;
  uint64_t memo_count = 0;
  // Real snapshots make about one container and one memo entry per 60-100 input bytes; reserving
  // that up front (address space only until used) saves the copies of growing these arrays.
  objs_.reserve(n / 32 + 16);
  memo_.reserve(n / 32 + 16);
  advise_huge_pages(objs_.data(), objs_.capacity() * sizeof(Obj));
  advise_huge_pages(memo_.data(), memo_.capacity() * sizeof(Value));
  size_t dropped_to = 0;  // input bytes before this were handed back (drop_consumed)  // len(memo) as Python counts it (MEMOIZE's index)
  std::string scratch, scratch2;
  uint8_t op = 0;

  auto fail = [&](const std::string& what) {
    char where[64];
    std::snprintf(where, sizeof(where), " at byte %llu", static_cast<unsigned long long>(offset_));
    *error = what + where;
    return false;
  };
  auto opname = [&]() {
    const char* nm = op_name(op);
    char buf[64];
    if (nm)
      std::snprintf(buf, sizeof(buf), "%s (0x%02x)", nm, op);
    else
      std::snprintf(buf, sizeof(buf), "0x%02x", op);
    return std::string(buf);
  };
  auto truncated = [&](uint64_t need) {
    return fail("truncated: " + opname() + " needs " + std::to_string(need) + " bytes, " +
                std::to_string(n - pos) + " left");
  };
  auto floor = [&]() -> size_t { return marks_.empty() ? 0 : marks_.back(); };
  auto pop = [&](Value* v) {
    if (stack_.size() <= floor()) return false;
    *v = stack_.back();
    stack_.pop_back();
    return true;
  };
  auto pop_mark = [&](size_t* k) {
    if (marks_.empty()) return false;
    *k = marks_.back();
    marks_.pop_back();
    return true;
  };
  auto readline = [&](std::string_view* line) {
    const void* nl = std::memchr(base + pos, '\n', n - pos);
    if (!nl) return false;
    size_t end = static_cast<size_t>(static_cast<const uint8_t*>(nl) - base);
    *line = std::string_view(reinterpret_cast<const char*>(base + pos), end - pos);
    pos = end + 1;
    return true;
  };
  auto sealed_error = [&]() {
    return fail(opname() + " changes a container after it was read (not a snapshot as Python writes them)");
  };
  auto push_str = [&](const uint8_t* p, size_t len, Tag t) {
    stack_.push_back(Value::make(t, intern(std::string_view(reinterpret_cast<const char*>(p), len))));
  };
  // Appends items [from, stack end) to a container's storage and drops them from the stack.
  auto extend = [&](uint32_t obj, size_t from) {
    std::vector<Value>& v = storage_of(obj);
    size_t cap0 = v.capacity();
    v.insert(v.end(), stack_.begin() + static_cast<std::ptrdiff_t>(from), stack_.end());
    storage_bytes_ += (v.capacity() - cap0) * sizeof(Value);
    stack_.resize(from);
  };
  auto new_container = [&](ObjKind k, size_t from) {
    uint32_t o = new_obj(k);
    if (from < stack_.size()) extend(o, from);
    stack_.push_back(Value::make(Tag::kObj, o));
    return o;
  };
  // A dict's items arrive: offered to the hook first if the dict is still empty.
  auto fill_dict = [&](uint32_t obj, size_t from) -> bool {
    Obj& o = objs_[obj];
    size_t count = stack_.size() - from;
    if (count % 2) return fail(opname() + " with an odd number of items (a key without a value)");
    if (o.storage == 0 && hook_ && count > 0) {
      if (hook_->take(*this, obj, stack_.data() + from, count / 2)) {
        stack_.resize(from);
        return true;
      }
    }
    extend(obj, from);
    return true;
  };

  while (true) {
    if (pos >= n) {
      offset_ = pos;
      return fail(pos == 0 ? "empty file" : "truncated: no STOP opcode");
    }
    offset_ = pos;
    op = base[pos++];
    if ((++ops & 0x3FFF) == 0) {
      if (memory_bytes() > memory_cap)
        return fail("decoding needs more than " + std::to_string(memory_cap >> 20) +
                    " MiB (16x the file size + 64 MiB); not a snapshot");
      // Everything read so far has been copied out (strings are interned): the mapped file's
      // pages behind us can go, so the file does not count in full on top of the decoded data.
      if (drop_consumed && pos > dropped_to + (size_t{8} << 20)) {
        size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
        uintptr_t from = (reinterpret_cast<uintptr_t>(base) + dropped_to + page - 1) & ~(page - 1);
        uintptr_t to = (reinterpret_cast<uintptr_t>(base) + pos) & ~(page - 1);
        if (to > from) madvise(reinterpret_cast<void*>(from), to - from, MADV_DONTNEED);
        dropped_to = pos;
      }
    }
    switch (op) {
      case '(':
        if (marks_.size() >= kMaxMarks) return fail("nesting deeper than " + std::to_string(kMaxMarks) + " marks");
        marks_.push_back(stack_.size());
        break;
      case '.': {
        Value v;
        if (!pop(&v)) return fail("STOP with an empty stack");
        *result = v;
        return true;
      }
      case '0': {
        Value v;
        if (!pop(&v)) {
          size_t k;
          if (!pop_mark(&k)) return fail("POP with an empty stack");
        }
        break;
      }
      case '1': {
        size_t k;
        if (!pop_mark(&k)) return fail("POP_MARK without MARK");
        stack_.resize(k);
        break;
      }
      case '2':
        if (stack_.size() <= floor()) return fail("DUP with an empty stack");
        stack_.push_back(stack_.back());
        break;
      case 'F': {
        std::string_view line;
        if (!readline(&line)) return truncated(1);
        while (!line.empty() && (line.back() == ' ' || line.back() == '\r')) line.remove_suffix(1);
        if (!line.empty() && line.front() == '+') line.remove_prefix(1);
        double d = 0;
        auto res = std::from_chars(line.data(), line.data() + line.size(), d);  // not locale-dependent
        if (res.ec != std::errc() || res.ptr != line.data() + line.size()) return fail("FLOAT with a bad argument");
        floats_.push_back(d);
        stack_.push_back(Value::make(Tag::kFloat, floats_.size() - 1));
        break;
      }
      case 'I': {
        std::string_view line;
        if (!readline(&line)) return truncated(1);
        if (line == "01" || line == "00") {
          stack_.push_back(Value::boolean(line == "01"));
        } else {
          Value v;
          if (!parse_decimal(line, &v)) return fail("INT with a bad argument");
          stack_.push_back(v);
        }
        break;
      }
      case 'L': {
        std::string_view line;
        if (!readline(&line)) return truncated(1);
        Value v;
        if (!parse_decimal(line, &v)) return fail("LONG with a bad argument");
        stack_.push_back(v);
        break;
      }
      case 'J':
        if (n - pos < 4) return truncated(4);
        stack_.push_back(push_number(static_cast<int32_t>(le32(base + pos))));
        pos += 4;
        break;
      case 'K':
        if (n - pos < 1) return truncated(1);
        stack_.push_back(push_number(base[pos]));
        pos += 1;
        break;
      case 'M':
        if (n - pos < 2) return truncated(2);
        stack_.push_back(push_number(base[pos] | (base[pos + 1] << 8)));
        pos += 2;
        break;
      case 0x8a:
      case 0x8b: {
        size_t hdr = op == 0x8a ? 1 : 4;
        if (n - pos < hdr) return truncated(hdr);
        int64_t len = op == 0x8a ? base[pos] : static_cast<int32_t>(le32(base + pos));
        if (len < 0) return fail("LONG4 with a negative length");
        pos += hdr;
        if (static_cast<uint64_t>(len) > n - pos) return truncated(static_cast<uint64_t>(len));
        stack_.push_back(make_int_from_le(base + pos, static_cast<size_t>(len)));
        pos += static_cast<size_t>(len);
        break;
      }
      case 'G': {
        if (n - pos < 8) return truncated(8);
        uint64_t u = 0;
        for (int i = 0; i < 8; ++i) u = (u << 8) | base[pos + i];
        double d;
        std::memcpy(&d, &u, sizeof(d));
        floats_.push_back(d);
        stack_.push_back(Value::make(Tag::kFloat, floats_.size() - 1));
        pos += 8;
        break;
      }
      case 'N': stack_.push_back(Value::none()); break;
      case 0x88: stack_.push_back(Value::boolean(true)); break;
      case 0x89: stack_.push_back(Value::boolean(false)); break;
      case 'S': {
        std::string_view line;
        if (!readline(&line)) return truncated(1);
        if (!string_escape(line, &scratch)) return fail("STRING with a badly quoted argument");
        stack_.push_back(Value::make(Tag::kStr, intern(scratch)));
        break;
      }
      case 'V': {
        std::string_view line;
        if (!readline(&line)) return truncated(1);
        if (!raw_unicode_escape(line, &scratch)) return fail("UNICODE with a bad escape");
        stack_.push_back(Value::make(Tag::kStr, intern(scratch)));
        break;
      }
      // Length-prefixed strings and bytes. Python 3 decodes BINSTRING as text; so do we.
      case 'T':
      case 'U':
      case 'X':
      case 'B':
      case 'C':
      case 0x8c:
      case 0x8d:
      case 0x8e:
      case 0x96: {
        size_t hdr = (op == 'U' || op == 'C' || op == 0x8c) ? 1 : (op == 0x8d || op == 0x8e || op == 0x96) ? 8 : 4;
        if (n - pos < hdr) return truncated(hdr);
        uint64_t len = hdr == 1 ? base[pos] : hdr == 4 ? le32(base + pos) : le64(base + pos);
        if (op == 'T' && static_cast<int32_t>(len) < 0) return fail("BINSTRING with a negative length");
        pos += hdr;
        if (len > n - pos) return truncated(len);
        bool is_bytes = op == 'B' || op == 'C' || op == 0x8e || op == 0x96;
        push_str(base + pos, static_cast<size_t>(len), is_bytes ? Tag::kBytes : Tag::kStr);
        pos += static_cast<size_t>(len);
        break;
      }
      case '}': new_container(ObjKind::kDict, stack_.size()); break;
      case ']': new_container(ObjKind::kList, stack_.size()); break;
      case ')': new_container(ObjKind::kTuple, stack_.size()); break;
      case 0x8f: new_container(ObjKind::kSet, stack_.size()); break;
      case 'l':
      case 't':
      case 0x91:
      case 'd': {
        size_t k;
        if (!pop_mark(&k)) return fail(opname() + " without MARK");
        if (op == 'd') {
          uint32_t o = new_obj(ObjKind::kDict);
          if (!fill_dict(o, k)) return false;
          stack_.push_back(Value::make(Tag::kObj, o));
        } else {
          new_container(op == 'l' ? ObjKind::kList : op == 't' ? ObjKind::kTuple : ObjKind::kSet, k);
        }
        break;
      }
      case 0x85:
      case 0x86:
      case 0x87: {
        size_t cnt = op - 0x84u;
        if (stack_.size() < floor() + cnt) return fail(opname() + " needs " + std::to_string(cnt) + " items on the stack");
        new_container(ObjKind::kTuple, stack_.size() - cnt);
        break;
      }
      case 'a': {
        if (stack_.size() < floor() + 2) return fail("APPEND needs a list and an item");
        Value list = stack_[stack_.size() - 2];
        if (!is_kind(list, ObjKind::kList)) return fail(std::string("APPEND to a ") + type_name(list));
        if (objs_[list.payload()].flags & Obj::kSealed) return sealed_error();
        extend(static_cast<uint32_t>(list.payload()), stack_.size() - 1);
        break;
      }
      case 'e':
      case 0x90: {
        size_t k;
        if (!pop_mark(&k)) return fail(opname() + " without MARK");
        if (k == 0 || k - 1 < floor()) return fail(opname() + " with nothing to append to");
        Value target = stack_[k - 1];
        ObjKind want = op == 'e' ? ObjKind::kList : ObjKind::kSet;
        if (!is_kind(target, want)) return fail(opname() + " to a " + type_name(target));
        if (objs_[target.payload()].flags & Obj::kSealed) return sealed_error();
        extend(static_cast<uint32_t>(target.payload()), k);
        break;
      }
      case 's': {
        if (stack_.size() < floor() + 3) return fail("SETITEM needs a dict, a key and a value");
        Value d = stack_[stack_.size() - 3];
        if (!is_kind(d, ObjKind::kDict)) {
          if (is_kind(d, ObjKind::kRecord)) return sealed_error();
          return fail(std::string("SETITEM on a ") + type_name(d));
        }
        if (objs_[d.payload()].flags & Obj::kSealed) return sealed_error();
        // Single pairs are never offered to the hook: protocol 0 fills a dict one SETITEM at a time.
        extend(static_cast<uint32_t>(d.payload()), stack_.size() - 2);
        break;
      }
      case 'u': {
        size_t k;
        if (!pop_mark(&k)) return fail("SETITEMS without MARK");
        if (k == 0 || k - 1 < floor()) return fail("SETITEMS with no dict to fill");
        Value d = stack_[k - 1];
        if (!is_kind(d, ObjKind::kDict)) {
          if (is_kind(d, ObjKind::kRecord)) return sealed_error();
          return fail(std::string("SETITEMS on a ") + type_name(d));
        }
        if (objs_[d.payload()].flags & Obj::kSealed) return sealed_error();
        if (!fill_dict(static_cast<uint32_t>(d.payload()), k)) return false;
        break;
      }
      case 0x94:
        if (stack_.size() <= floor()) return fail("MEMOIZE with an empty stack");
        // Python stores at len(memo); after PUTs to scattered indices that slot may be taken.
        if (memo_count == memo_.size()) {
          memo_.push_back(stack_.back());
          ++memo_count;
        } else {
          Value old;
          bool taken = memo_get(memo_count, &old);
          memo_put(memo_count, stack_.back());
          if (!taken) ++memo_count;
        }
        break;
      case 'p':
      case 'q':
      case 'r': {
        uint64_t idx;
        if (op == 'p') {
          std::string_view line;
          if (!readline(&line)) return truncated(1);
          Value v;
          int64_t i;
          if (!parse_decimal(line, &v) || !as_i64(v, &i) || i < 0) return fail("PUT with a bad index");
          idx = static_cast<uint64_t>(i);
        } else {
          size_t w = op == 'q' ? 1 : 4;
          if (n - pos < w) return truncated(w);
          idx = w == 1 ? base[pos] : le32(base + pos);
          pos += w;
        }
        if (stack_.size() <= floor()) return fail(opname() + " with an empty stack");
        Value old;
        if (!memo_get(idx, &old)) ++memo_count;
        memo_put(idx, stack_.back());
        break;
      }
      case 'g':
      case 'h':
      case 'j': {
        uint64_t idx;
        if (op == 'g') {
          std::string_view line;
          if (!readline(&line)) return truncated(1);
          Value v;
          int64_t i;
          if (!parse_decimal(line, &v) || !as_i64(v, &i) || i < 0) return fail("GET with a bad index");
          idx = static_cast<uint64_t>(i);
        } else {
          size_t w = op == 'h' ? 1 : 4;
          if (n - pos < w) return truncated(w);
          idx = w == 1 ? base[pos] : le32(base + pos);
          pos += w;
        }
        Value v;
        if (!memo_get(idx, &v)) return fail(opname() + " of memo index " + std::to_string(idx) + ", which was never stored");
        stack_.push_back(v);
        break;
      }
      case 0x80:
        if (n - pos < 1) return truncated(1);
        if (base[pos] > 5) return fail("unsupported pickle protocol " + std::to_string(base[pos]));
        pos += 1;
        break;
      case 0x95:
        if (n - pos < 8) return truncated(8);
        pos += 8;  // frame length: only a read-ahead hint
        break;
      case 'c': {
        std::string_view mod, name;
        if (!readline(&mod) || !readline(&name)) return truncated(1);
        bool builtins = mod == "__builtin__" || mod == "builtins";
        int which = -1;
        if (mod == "_codecs" && name == "encode") which = kCodecsEncode;
        else if (builtins && name == "bytes") which = kBytes;
        else if (builtins && name == "bytearray") which = kByteArray;
        else if (builtins && name == "set") which = kSet;
        else if (builtins && name == "frozenset") which = kFrozenSet;
        if (which < 0)
          return fail("refusing to load global " + std::string(mod.substr(0, 64)) + "." +
                      std::string(name.substr(0, 64)) + " (snapshots hold only plain data)");
        uint32_t o = new_obj(ObjKind::kCallable);
        objs_[o].payload = static_cast<uint32_t>(which);
        objs_[o].flags |= Obj::kSealed;
        stack_.push_back(Value::make(Tag::kObj, o));
        break;
      }
      case 'R': {
        if (stack_.size() < floor() + 2) return fail("REDUCE needs a callable and arguments");
        Value args = stack_.back();
        Value fn = stack_[stack_.size() - 2];
        if (!is_kind(fn, ObjKind::kCallable)) return fail("refusing REDUCE of a " + std::string(type_name(fn)) + " (snapshots hold only plain data)");
        if (!is_kind(args, ObjKind::kTuple)) return fail("REDUCE with arguments that are not a tuple");
        size_t na;
        const Value* a = items(static_cast<uint32_t>(args.payload()), &na);
        uint32_t which = objs_[fn.payload()].payload;
        Value out;
        if (which == kCodecsEncode) {
          if (na != 2 || !a[0].is_str() || !a[1].is_str()) return fail("REDUCE of _codecs.encode with unexpected arguments");
          std::string_view enc = str(static_cast<uint32_t>(a[1].payload()));
          if (enc != "latin1" && enc != "latin-1") return fail("REDUCE of _codecs.encode with an encoding other than latin1");
          if (!utf8_to_latin1(str(static_cast<uint32_t>(a[0].payload())), &scratch2))
            return fail("REDUCE of _codecs.encode of text that is not Latin-1");
          out = Value::make(Tag::kBytes, intern(scratch2));
        } else if (which == kBytes || which == kByteArray) {
          if (na == 0) {
            out = Value::make(Tag::kBytes, 0);
          } else if (na == 1 && a[0].tag() == Tag::kBytes) {
            out = a[0];
          } else {
            return fail("REDUCE of bytes/bytearray with unexpected arguments");
          }
        } else {
          uint32_t o = new_obj(ObjKind::kSet);
          if (na == 1 && a[0].is_obj()) {
            ObjKind k = objs_[a[0].payload()].kind;
            if (k != ObjKind::kList && k != ObjKind::kTuple && k != ObjKind::kSet)
              return fail("REDUCE of set with unexpected arguments");
            size_t ni;
            const Value* it = items(static_cast<uint32_t>(a[0].payload()), &ni);
            if (ni) {
              std::vector<Value>& v = storage_of(o);
              size_t cap0 = v.capacity();
              v.assign(it, it + ni);
              storage_bytes_ += (v.capacity() - cap0) * sizeof(Value);
            }
          } else if (na != 0) {
            return fail("REDUCE of set with unexpected arguments");
          }
          out = Value::make(Tag::kObj, o);
        }
        stack_.resize(stack_.size() - 2);
        stack_.push_back(out);
        break;
      }
      case 'P':
      case 'Q':
      case 'b':
      case 'i':
      case 'o':
      case 0x81:
      case 0x82:
      case 0x83:
      case 0x84:
      case 0x92:
      case 0x93:
      case 0x97:
      case 0x98:
        return fail("refusing " + opname() + " (snapshots hold only plain data)");
      default:
        return fail("not a pickle: unknown opcode " + opname());
    }
  }
}

}  // namespace memtrace::reader::pickle
