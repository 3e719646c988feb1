// What only pickles of protocols 0-3 use: the opcodes whose argument is a line of text (FLOAT,
// INT, LONG, STRING, UNICODE, and PUT/GET's decimal index), and the globals Python pickles bytes
// and sets with (GLOBAL and REDUCE of _codecs.encode, builtins.bytes, bytearray, set, frozenset),
// which are evaluated here, never imported.
#include <charconv>
#include <string>
#include <string_view>

#include "cli/reader/pickle_vm.hpp"
#include "format/pickle_opcodes.hpp"

namespace memtrace::reader::pickle {

namespace {

// Indices of the globals REDUCE may call (payload of a kCallable object).
enum Callable : uint32_t { kCodecsEncode, kBytes, kByteArray, kSet, kFrozenSet };

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

bool Vm::decimal_number(Input& in, uint8_t code) {
  namespace op = format::op;
  std::string_view line;
  if (!readline(in, &line)) return truncated(1, in.left());
  if (code == op::kFloat) {
    while (!line.empty() && (line.back() == ' ' || line.back() == '\r')) line.remove_suffix(1);
    if (!line.empty() && line.front() == '+') line.remove_prefix(1);
    double d = 0;
    auto res = std::from_chars(line.data(), line.data() + line.size(), d);  // not locale-dependent
    if (res.ec != std::errc() || res.ptr != line.data() + line.size()) return fail("FLOAT with a bad argument");
    floats_.push_back(d);
    stack_.push_back(Value::make(Tag::kFloat, floats_.size() - 1));
    return true;
  }
  if (code == op::kInt && (line == "01" || line == "00")) {  // protocol 0's True and False
    stack_.push_back(Value::boolean(line == "01"));
    return true;
  }
  Value v;
  if (!parse_decimal(line, &v)) return fail(code == op::kInt ? "INT with a bad argument" : "LONG with a bad argument");
  stack_.push_back(v);
  return true;
}

bool Vm::quoted_string(Input& in, uint8_t code) {
  std::string_view line;
  if (!readline(in, &line)) return truncated(1, in.left());
  if (code == format::op::kString) {
    if (!string_escape(line, &scratch_)) return fail("STRING with a badly quoted argument");
  } else if (!raw_unicode_escape(line, &scratch_)) {
    return fail("UNICODE with a bad escape");
  }
  stack_.push_back(Value::make(Tag::kStr, intern(scratch_)));
  return true;
}

bool Vm::global(Input& in, uint8_t /*code: GLOBAL*/) {
  std::string_view mod, name;
  if (!readline(in, &mod) || !readline(in, &name)) return truncated(1, in.left());
  bool builtins = mod == "__builtin__" || mod == "builtins";
  int which = -1;
  if (mod == "_codecs" && name == "encode") which = kCodecsEncode;
  else if (builtins && name == "bytes") which = kBytes;
  else if (builtins && name == "bytearray") which = kByteArray;
  else if (builtins && name == "set") which = kSet;
  else if (builtins && name == "frozenset") which = kFrozenSet;
  if (which < 0)
    return fail("refusing to load global " + std::string(mod.substr(0, 64)) + "." + std::string(name.substr(0, 64)) +
                " (snapshots hold only plain data)");
  uint32_t o = new_obj(ObjKind::kCallable);
  objs_[o].payload = static_cast<uint32_t>(which);
  objs_[o].flags |= Obj::kSealed;
  stack_.push_back(Value::make(Tag::kObj, o));
  return true;
}

bool Vm::reduce() {
  if (stack_.size() < stack_floor() + 2) return fail("REDUCE needs a callable and arguments");
  Value args = stack_.back();
  Value fn = stack_[stack_.size() - 2];
  if (!is_kind(fn, ObjKind::kCallable))
    return fail("refusing REDUCE of a " + std::string(type_name(fn)) + " (snapshots hold only plain data)");
  if (!is_kind(args, ObjKind::kTuple)) return fail("REDUCE with arguments that are not a tuple");
  size_t na;
  const Value* a = items(static_cast<uint32_t>(args.payload()), &na);
  uint32_t which = objs_[fn.payload()].payload;
  Value out;
  if (which == kCodecsEncode) {
    if (na != 2 || !a[0].is_str() || !a[1].is_str()) return fail("REDUCE of _codecs.encode with unexpected arguments");
    std::string_view enc = str(static_cast<uint32_t>(a[1].payload()));
    if (enc != "latin1" && enc != "latin-1") return fail("REDUCE of _codecs.encode with an encoding other than latin1");
    if (!utf8_to_latin1(str(static_cast<uint32_t>(a[0].payload())), &scratch2_))
      return fail("REDUCE of _codecs.encode of text that is not Latin-1");
    out = Value::make(Tag::kBytes, intern(scratch2_));
  } else if (which == kBytes || which == kByteArray) {
    if (na == 0) {
      out = Value::make(Tag::kBytes, 0);
    } else if (na == 1 && a[0].tag() == Tag::kBytes) {
      out = a[0];
    } else {
      return fail("REDUCE of bytes/bytearray with unexpected arguments");
    }
  } else {  // set, frozenset
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
  return true;
}

}  // namespace memtrace::reader::pickle
