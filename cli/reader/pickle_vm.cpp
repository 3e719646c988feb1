// The pickle VM's interpreter: run()'s loop, the dispatch, the opcode groups of protocols 2-5 and the
// data they build. Protocol 0's text opcodes, GLOBAL and REDUCE are in pickle_vm_legacy.cpp, what the
// VM's users read and the memory it holds in pickle_vm_values.cpp, opcode names in
// pickle_vm_opcodes.cpp.
//
// Speed: the groups are members called from one switch, yet the loop must stay as fast as when it
// was one function of inlined lambdas (bench/bench_read). Hence the hot groups and helpers are
// always_inline (called, they made reading a snapshot about a third slower), the cursor is a local
// no call takes the address of (as a member it was reloaded after every call), the failure paths
// are cold (their string building had left no room to inline vector::push_back), and every opcode
// has its own case (see execute()).
#include "cli/reader/pickle_vm.hpp"

#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "format/pickle_opcodes.hpp"

namespace memtrace::reader::pickle {

namespace {

uint32_t le32(const uint8_t* p) { return p[0] | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 24); }
uint64_t le64(const uint8_t* p) { return le32(p) | (uint64_t{le32(p + 4)} << 32); }

}  // namespace

// ---- the VM's data: strings, containers, numbers, the memo ------------------------------------------

uint32_t Vm::intern(std::string_view s) {
  auto it = string_ids_.find(s);
  if (it != string_ids_.end()) return it->second;
  strings_.emplace_back(s);
  string_bytes_ += s.size() + 96;  // the text, the std::string, the deque slot and the map node
  uint32_t id = static_cast<uint32_t>(strings_.size() - 1);
  string_ids_.emplace(strings_.back(), id);
  return id;
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

// ---- helpers of the opcode groups -----------------------------------------------------------------

bool Vm::fail(const std::string& what) {
  char where[64];
  std::snprintf(where, sizeof(where), " at byte %llu", static_cast<unsigned long long>(offset_));
  *error_ = what + where;
  return false;
}

std::string Vm::opname() const { return describe_opcode(input_[offset_]); }

bool Vm::truncated(uint64_t need, size_t left) {
  return fail("truncated: " + opname() + " needs " + std::to_string(need) + " bytes, " + std::to_string(left) +
              " left");
}

bool Vm::sealed_error() {
  return fail(opname() + " changes a container after it was read (not a snapshot as Python writes them)");
}

[[gnu::always_inline]] inline bool Vm::pop(Value* v) {
  if (stack_.size() <= stack_floor()) return false;
  *v = stack_.back();
  stack_.pop_back();
  return true;
}

[[gnu::always_inline]] inline bool Vm::pop_mark(size_t* k) {
  if (marks_.empty()) return false;
  *k = marks_.back();
  marks_.pop_back();
  return true;
}

[[gnu::always_inline]] inline void Vm::push_str(const uint8_t* p, size_t len, Tag t) {
  stack_.push_back(Value::make(t, intern(std::string_view(reinterpret_cast<const char*>(p), len))));
}

// Appends items [from, stack end) to a container's storage and drops them from the stack.
[[gnu::always_inline]] inline void Vm::extend(uint32_t obj, size_t from) {
  std::vector<Value>& v = storage_of(obj);
  size_t cap0 = v.capacity();
  v.insert(v.end(), stack_.begin() + static_cast<std::ptrdiff_t>(from), stack_.end());
  storage_bytes_ += (v.capacity() - cap0) * sizeof(Value);
  stack_.resize(from);
}

// A new container of the items [from, stack end), pushed in their place.
[[gnu::always_inline]] inline void Vm::push_container(ObjKind k, size_t from) {
  uint32_t o = new_obj(k);
  if (from < stack_.size()) extend(o, from);
  stack_.push_back(Value::make(Tag::kObj, o));
}

// A dict's items arrive: offered to the hook first if the dict is still empty.
[[gnu::always_inline]] inline bool Vm::fill_dict(uint32_t obj, size_t from) {
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
}

// ---- the opcode groups (protocol 0's text opcodes, GLOBAL and REDUCE: pickle_vm_legacy.cpp) -------

// Ends the run: returns false as a failure does, with in.stopped set.
[[gnu::always_inline]] inline bool Vm::stop(Input& in, Value* result) {
  Value v;
  if (!pop(&v)) return fail("STOP with an empty stack");
  *result = v;
  in.stopped = true;
  return false;
}

[[gnu::always_inline]] inline bool Vm::stack_op(uint8_t code) {
  namespace op = format::op;
  switch (code) {
    case op::kMark:
      if (marks_.size() >= kMaxMarks) return fail("nesting deeper than " + std::to_string(kMaxMarks) + " marks");
      marks_.push_back(stack_.size());
      return true;
    case op::kPop: {
      Value v;
      size_t k;
      if (!pop(&v) && !pop_mark(&k)) return fail("POP with an empty stack");
      return true;
    }
    case op::kPopMark: {
      size_t k;
      if (!pop_mark(&k)) return fail("POP_MARK without MARK");
      stack_.resize(k);
      return true;
    }
    default:  // DUP
      if (stack_.size() <= stack_floor()) return fail("DUP with an empty stack");
      stack_.push_back(stack_.back());
      return true;
  }
}

[[gnu::always_inline]] inline bool Vm::binary_number(Input& in, uint8_t code) {
  namespace op = format::op;
  const uint8_t* const p = in.base + in.pos;
  const size_t left = in.left();
  switch (code) {
    case op::kBinInt:
      if (left < 4) return truncated(4, left);
      stack_.push_back(push_number(static_cast<int32_t>(le32(p))));
      in.pos += 4;
      return true;
    case op::kBinInt1:
      if (left < 1) return truncated(1, left);
      stack_.push_back(push_number(p[0]));
      in.pos += 1;
      return true;
    case op::kBinInt2:
      if (left < 2) return truncated(2, left);
      stack_.push_back(push_number(p[0] | (p[1] << 8)));
      in.pos += 2;
      return true;
    case op::kLong1:
    case op::kLong4: {
      size_t hdr = code == op::kLong1 ? 1 : 4;
      if (left < hdr) return truncated(hdr, left);
      int64_t len = code == op::kLong1 ? p[0] : static_cast<int32_t>(le32(p));
      if (len < 0) return fail("LONG4 with a negative length");
      in.pos += hdr;
      if (static_cast<uint64_t>(len) > in.left()) return truncated(static_cast<uint64_t>(len), in.left());
      stack_.push_back(make_int_from_le(in.base + in.pos, static_cast<size_t>(len)));
      in.pos += static_cast<size_t>(len);
      return true;
    }
    default: {  // BINFLOAT: big-endian IEEE 754
      if (left < 8) return truncated(8, left);
      uint64_t u = 0;
      for (int i = 0; i < 8; ++i) u = (u << 8) | p[i];
      double d;
      std::memcpy(&d, &u, sizeof(d));
      floats_.push_back(d);
      stack_.push_back(Value::make(Tag::kFloat, floats_.size() - 1));
      in.pos += 8;
      return true;
    }
  }
}

[[gnu::always_inline]] inline bool Vm::constant(uint8_t code) {
  namespace op = format::op;
  stack_.push_back(code == op::kNone ? Value::none() : Value::boolean(code == op::kNewTrue));
  return true;
}

// Length-prefixed strings and bytes. Python 3 decodes BINSTRING as text; so do we.
[[gnu::always_inline]] inline bool Vm::counted_string(Input& in, uint8_t code) {
  namespace op = format::op;
  const uint8_t c = code;
  const size_t hdr = (c == op::kShortBinString || c == op::kShortBinBytes || c == op::kShortBinUnicode) ? 1
                     : (c == op::kBinUnicode8 || c == op::kBinBytes8 || c == op::kByteArray8)        ? 8
                                                                                                      : 4;
  if (in.left() < hdr) return truncated(hdr, in.left());
  const uint8_t* p = in.base + in.pos;
  uint64_t len = hdr == 1 ? p[0] : hdr == 4 ? le32(p) : le64(p);
  if (c == op::kBinString && static_cast<int32_t>(len) < 0) return fail("BINSTRING with a negative length");
  in.pos += hdr;
  if (len > in.left()) return truncated(len, in.left());
  bool is_bytes = c == op::kBinBytes || c == op::kShortBinBytes || c == op::kBinBytes8 || c == op::kByteArray8;
  push_str(in.base + in.pos, static_cast<size_t>(len), is_bytes ? Tag::kBytes : Tag::kStr);
  in.pos += static_cast<size_t>(len);
  return true;
}

[[gnu::always_inline]] inline bool Vm::new_container(uint8_t code) {
  namespace op = format::op;
  switch (code) {
    case op::kEmptyDict: push_container(ObjKind::kDict, stack_.size()); return true;
    case op::kEmptyList: push_container(ObjKind::kList, stack_.size()); return true;
    case op::kEmptyTuple: push_container(ObjKind::kTuple, stack_.size()); return true;
    case op::kEmptySet: push_container(ObjKind::kSet, stack_.size()); return true;
    case op::kTuple1:
    case op::kTuple2:
    case op::kTuple3: {
      size_t cnt = size_t{1} + code - op::kTuple1;
      if (stack_.size() < stack_floor() + cnt)
        return fail(opname() + " needs " + std::to_string(cnt) + " items on the stack");
      push_container(ObjKind::kTuple, stack_.size() - cnt);
      return true;
    }
    default: {  // LIST, TUPLE, FROZENSET, DICT: the items since the last MARK
      size_t k;
      if (!pop_mark(&k)) return fail(opname() + " without MARK");
      if (code == op::kDict) {
        uint32_t o = new_obj(ObjKind::kDict);
        if (!fill_dict(o, k)) return false;
        stack_.push_back(Value::make(Tag::kObj, o));
      } else {
        push_container(code == op::kList ? ObjKind::kList : code == op::kTuple ? ObjKind::kTuple : ObjKind::kSet, k);
      }
      return true;
    }
  }
}

[[gnu::always_inline]] inline bool Vm::fill_container(uint8_t code) {
  namespace op = format::op;
  switch (code) {
    case op::kAppend: {
      if (stack_.size() < stack_floor() + 2) return fail("APPEND needs a list and an item");
      Value list = stack_[stack_.size() - 2];
      if (!is_kind(list, ObjKind::kList)) return fail(std::string("APPEND to a ") + type_name(list));
      if (objs_[list.payload()].flags & Obj::kSealed) return sealed_error();
      extend(static_cast<uint32_t>(list.payload()), stack_.size() - 1);
      return true;
    }
    case op::kAppends:
    case op::kAddItems: {
      size_t k;
      if (!pop_mark(&k)) return fail(opname() + " without MARK");
      if (k == 0 || k - 1 < stack_floor()) return fail(opname() + " with nothing to append to");
      Value target = stack_[k - 1];
      ObjKind want = code == op::kAppends ? ObjKind::kList : ObjKind::kSet;
      if (!is_kind(target, want)) return fail(opname() + " to a " + type_name(target));
      if (objs_[target.payload()].flags & Obj::kSealed) return sealed_error();
      extend(static_cast<uint32_t>(target.payload()), k);
      return true;
    }
    case op::kSetItem: {
      if (stack_.size() < stack_floor() + 3) return fail("SETITEM needs a dict, a key and a value");
      Value d = stack_[stack_.size() - 3];
      if (!is_kind(d, ObjKind::kDict)) {
        if (is_kind(d, ObjKind::kRecord)) return sealed_error();
        return fail(std::string("SETITEM on a ") + type_name(d));
      }
      if (objs_[d.payload()].flags & Obj::kSealed) return sealed_error();
      // Single pairs are never offered to the hook: protocol 0 fills a dict one SETITEM at a time.
      extend(static_cast<uint32_t>(d.payload()), stack_.size() - 2);
      return true;
    }
    default: {  // SETITEMS
      size_t k;
      if (!pop_mark(&k)) return fail("SETITEMS without MARK");
      if (k == 0 || k - 1 < stack_floor()) return fail("SETITEMS with no dict to fill");
      Value d = stack_[k - 1];
      if (!is_kind(d, ObjKind::kDict)) {
        if (is_kind(d, ObjKind::kRecord)) return sealed_error();
        return fail(std::string("SETITEMS on a ") + type_name(d));
      }
      if (objs_[d.payload()].flags & Obj::kSealed) return sealed_error();
      return fill_dict(static_cast<uint32_t>(d.payload()), k);
    }
  }
}

// The index argument of PUT/GET (a decimal line) or of their binary forms (1 byte, or 4 for the
// LONG_ forms).
[[gnu::always_inline]] inline bool Vm::memo_index(Input& in, uint8_t code, uint8_t text_op, uint8_t byte_op,
                                                  const char* bad_index, uint64_t* idx) {
  if (code == text_op) {
    std::string_view line;
    if (!readline(in, &line)) return truncated(1, in.left());
    Value v;
    int64_t i;
    if (!parse_decimal(line, &v) || !as_i64(v, &i) || i < 0) return fail(bad_index);
    *idx = static_cast<uint64_t>(i);
    return true;
  }
  size_t w = code == byte_op ? 1 : 4;
  if (in.left() < w) return truncated(w, in.left());
  *idx = w == 1 ? in.base[in.pos] : le32(in.base + in.pos);
  in.pos += w;
  return true;
}

[[gnu::always_inline]] inline bool Vm::memo_store(Input& in, uint8_t code) {
  namespace op = format::op;
  if (code == op::kMemoize) {
    if (stack_.size() <= stack_floor()) return fail("MEMOIZE with an empty stack");
    // Python stores at len(memo); after PUTs to scattered indices that slot may be taken.
    if (memo_count_ == memo_.size()) {
      memo_.push_back(stack_.back());
      ++memo_count_;
    } else {
      Value old;
      bool taken = memo_get(memo_count_, &old);
      memo_put(memo_count_, stack_.back());
      if (!taken) ++memo_count_;
    }
    return true;
  }
  uint64_t idx = 0;
  if (!memo_index(in, code, op::kPut, op::kBinPut, "PUT with a bad index", &idx)) return false;
  if (stack_.size() <= stack_floor()) return fail(opname() + " with an empty stack");
  Value old;
  if (!memo_get(idx, &old)) ++memo_count_;
  memo_put(idx, stack_.back());
  return true;
}

[[gnu::always_inline]] inline bool Vm::memo_load(Input& in, uint8_t code) {
  namespace op = format::op;
  uint64_t idx = 0;
  if (!memo_index(in, code, op::kGet, op::kBinGet, "GET with a bad index", &idx)) return false;
  Value v;
  if (!memo_get(idx, &v)) return fail(opname() + " of memo index " + std::to_string(idx) + ", which was never stored");
  stack_.push_back(v);
  return true;
}

[[gnu::always_inline]] inline bool Vm::framing(Input& in, uint8_t code) {
  if (code == format::op::kProto) {
    if (in.left() < 1) return truncated(1, in.left());
    if (in.base[in.pos] > 5) return fail("unsupported pickle protocol " + std::to_string(in.base[in.pos]));
    in.pos += 1;
    return true;
  }
  // FRAME
  if (in.left() < 8) return truncated(8, in.left());
  in.pos += 8;  // frame length: only a read-ahead hint
  return true;
}

// ---- the loop and the dispatch ----------------------------------------------------------------------

// The rare groups run out of line on a copy of the cursor: were its address to escape, the loop
// could not keep it in registers.
[[gnu::always_inline]] inline bool Vm::out_of_line(Input& in, uint8_t code, bool (Vm::*group)(Input&, uint8_t)) {
  Input copy = in;
  bool ok = (this->*group)(copy, code);
  in.pos = copy.pos;
  return ok;
}

// One switch over the opcode byte. Every opcode has a case of its own that hands its group the
// opcode as a constant, so that the group's own tests of it fold away once inlined (a test left to
// run, BINGET against LONG_BINGET, mispredicted often enough to slow the loop down). False ends the
// run: STOP (in.stopped) or a failure.
[[gnu::always_inline]] inline bool Vm::execute(Input& in, uint8_t code, Value* result) {
  namespace op = format::op;
  switch (code) {
    case op::kStop: return stop(in, result);
    case op::kMark: return stack_op(op::kMark);
    case op::kPop: return stack_op(op::kPop);
    case op::kPopMark: return stack_op(op::kPopMark);
    case op::kDup: return stack_op(op::kDup);
    case op::kFloat: return out_of_line(in, op::kFloat, &Vm::decimal_number);
    case op::kInt: return out_of_line(in, op::kInt, &Vm::decimal_number);
    case op::kLong: return out_of_line(in, op::kLong, &Vm::decimal_number);
    case op::kBinInt: return binary_number(in, op::kBinInt);
    case op::kBinInt1: return binary_number(in, op::kBinInt1);
    case op::kBinInt2: return binary_number(in, op::kBinInt2);
    case op::kLong1: return binary_number(in, op::kLong1);
    case op::kLong4: return binary_number(in, op::kLong4);
    case op::kBinFloat: return binary_number(in, op::kBinFloat);
    case op::kNone: return constant(op::kNone);
    case op::kNewTrue: return constant(op::kNewTrue);
    case op::kNewFalse: return constant(op::kNewFalse);
    case op::kString: return out_of_line(in, op::kString, &Vm::quoted_string);
    case op::kUnicode: return out_of_line(in, op::kUnicode, &Vm::quoted_string);
    case op::kBinString: return counted_string(in, op::kBinString);
    case op::kShortBinString: return counted_string(in, op::kShortBinString);
    case op::kBinUnicode: return counted_string(in, op::kBinUnicode);
    case op::kShortBinUnicode: return counted_string(in, op::kShortBinUnicode);
    case op::kBinUnicode8: return counted_string(in, op::kBinUnicode8);
    case op::kBinBytes: return counted_string(in, op::kBinBytes);
    case op::kShortBinBytes: return counted_string(in, op::kShortBinBytes);
    case op::kBinBytes8: return counted_string(in, op::kBinBytes8);
    case op::kByteArray8: return counted_string(in, op::kByteArray8);
    case op::kEmptyDict: return new_container(op::kEmptyDict);
    case op::kEmptyList: return new_container(op::kEmptyList);
    case op::kEmptyTuple: return new_container(op::kEmptyTuple);
    case op::kEmptySet: return new_container(op::kEmptySet);
    case op::kList: return new_container(op::kList);
    case op::kTuple: return new_container(op::kTuple);
    case op::kFrozenSet: return new_container(op::kFrozenSet);
    case op::kDict: return new_container(op::kDict);
    case op::kTuple1: return new_container(op::kTuple1);
    case op::kTuple2: return new_container(op::kTuple2);
    case op::kTuple3: return new_container(op::kTuple3);
    case op::kAppend: return fill_container(op::kAppend);
    case op::kAppends: return fill_container(op::kAppends);
    case op::kAddItems: return fill_container(op::kAddItems);
    case op::kSetItem: return fill_container(op::kSetItem);
    case op::kSetItems: return fill_container(op::kSetItems);
    case op::kMemoize: return memo_store(in, op::kMemoize);
    case op::kPut: return memo_store(in, op::kPut);
    case op::kBinPut: return memo_store(in, op::kBinPut);
    case op::kLongBinPut: return memo_store(in, op::kLongBinPut);
    case op::kGet: return memo_load(in, op::kGet);
    case op::kBinGet: return memo_load(in, op::kBinGet);
    case op::kLongBinGet: return memo_load(in, op::kLongBinGet);
    case op::kGlobal: return out_of_line(in, op::kGlobal, &Vm::global);
    case op::kReduce: return reduce();
    case op::kProto: return framing(in, op::kProto);
    case op::kFrame: return framing(in, op::kFrame);
    // Object construction, persistent ids, extension codes, out-of-band buffers.
    case op::kPersId: case op::kBinPersId: case op::kBuild: case op::kInst: case op::kObj: case op::kNewObj:
    case op::kExt1: case op::kExt2: case op::kExt4: case op::kNewObjEx: case op::kStackGlobal:
    case op::kNextBuffer: case op::kReadonlyBuffer:
      return fail("refusing " + opname() + " (snapshots hold only plain data)");
    default:
      return fail("not a pickle: unknown opcode " + opname());
  }
}

bool Vm::run(std::string_view bytes, Value* result, std::string* error, bool drop_consumed) {
  // The cursor is a local the opcode groups get by reference: inlined, they keep it in registers.
  Input in{reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()};
  input_ = in.base;
  error_ = error;
  memo_count_ = 0;
  // What the VM may hold: generous for real snapshots (they need about 1-2x their size), and it
  // stops a small hostile file from growing without end.
  const size_t memory_cap = (size_t{64} << 20) + 16 * in.size;
  // Real snapshots make about one container and one memo entry per 60-100 input bytes; reserving
  // that up front (address space only until used) saves the copies of growing these arrays.
  objs_.reserve(in.size / 32 + 16);
  memo_.reserve(in.size / 32 + 16);
  advise_huge_pages(objs_.data(), objs_.capacity() * sizeof(Obj));
  advise_huge_pages(memo_.data(), memo_.capacity() * sizeof(Value));
  size_t dropped_to = 0;  // input bytes before this were handed back (drop_consumed)
  uint64_t ops = 0;
  while (true) {
    offset_ = in.pos;
    if (in.pos >= in.size) return fail(in.pos == 0 ? "empty file" : "truncated: no STOP opcode");
    const uint8_t code = in.base[in.pos++];
    if ((++ops & 0x3FFF) == 0 && !check_memory(memory_cap, drop_consumed, in.pos, &dropped_to)) return false;
    if (!execute(in, code, result)) return in.stopped;
  }
}

}  // namespace memtrace::reader::pickle
