// A pickle virtual machine for data-only pickles (dicts, lists, tuples, sets, str, bytes, int,
// float, bool, None) as Python's pickle protocols 0-5, the TorchScript pickler and memtrace's
// writer produce them. It builds no Python-like object tree of its own: values are 8-byte tagged
// words, strings are interned once, containers are small headers whose items live in recycled
// vectors, and a DictHook may turn a dict into a typed record the moment its items arrive (that is
// how 1M trace entries cost ~70 bytes each instead of a generic dict each).
//
// Safety: every length is checked against the bytes left before anything is allocated, nesting
// and memo indices are bounded, the memory the VM holds is capped at a multiple of the input size,
// and object construction (GLOBAL, REDUCE, NEWOBJ, BUILD, persistent ids, extension codes,
// out-of-band buffers) is refused — except the two globals Python uses to pickle `bytes` at
// protocols 0-2 (_codecs.encode and builtins.bytes), which are evaluated here, never imported.
//
// Integers: anything in [INT64_MIN, UINT64_MAX] is exact. A LONG/LONG1/LONG4 outside that range
// is kept as an "out of range" integer: reading it as a number fails (with the field's name), so a
// huge value in a field nobody needs does not reject the file.
//
// Containers are sealed once a hook or the decoder has read them (a trace entry's frames list,
// a record); changing a sealed container afterwards is an error. Python's pickler never does that
// for acyclic data: children are complete before their parent is filled.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace memtrace::reader::pickle {

enum class Tag : uint8_t {
  kInt = 0,      // payload: signed 61-bit integer
  kStr = 1,      // payload: string id
  kObj = 2,      // payload: object index
  kSpecial = 3,  // payload: 0 None, 1 False, 2 True
  kNum = 4,      // payload: index into the boxed-number table (64-bit or out-of-range ints)
  kFloat = 5,    // payload: index into the float table
  kBytes = 6,    // payload: string id (the raw bytes)
};

struct Value {
  uint64_t bits = 3;  // None
  Tag tag() const { return static_cast<Tag>(bits & 7); }
  uint64_t payload() const { return bits >> 3; }
  static Value make(Tag t, uint64_t payload) { return Value{(payload << 3) | static_cast<uint64_t>(t)}; }
  static Value none() { return make(Tag::kSpecial, 0); }
  static Value boolean(bool b) { return make(Tag::kSpecial, b ? 2 : 1); }
  bool is_none() const { return bits == none().bits; }
  bool is_bool() const { return tag() == Tag::kSpecial && payload() != 0; }
  bool is_str() const { return tag() == Tag::kStr; }
  bool is_obj() const { return tag() == Tag::kObj; }
  bool is_int() const { return tag() == Tag::kInt || tag() == Tag::kNum; }
};

enum class ObjKind : uint8_t {
  kList,
  kDict,      // items: key, value, key, value ... (a later equal key wins)
  kTuple,
  kSet,       // set or frozenset, items as a list
  kRecord,    // a dict a DictHook took over; payload() is the hook's index
  kCallable,  // one of the whitelisted globals (payload: which)
  kPending,   // placeholder of the whitelisted REDUCE result before it is known (never visible)
};

struct Obj {
  uint32_t payload = 0;   // kRecord: hook's index; kList with kCached: a cached id
  uint32_t storage = 0;   // 1 + index into the item vectors; 0 = no items
  uint32_t offset_lo = 0;  // byte offset of the opcode that created it
  uint8_t offset_hi = 0;
  ObjKind kind = ObjKind::kList;
  uint8_t flags = 0;
  uint8_t record_kind = 0;  // kRecord: which kind of record (the hook's choice)
  static constexpr uint8_t kSealed = 1;
  static constexpr uint8_t kCached = 2;  // payload holds an id the decoder computed from the items
  uint64_t offset() const { return (uint64_t{offset_hi} << 32) | offset_lo; }
};

class Vm;

// Whether `op` can be the first byte of a pickle this VM accepts: the opcodes that run on an empty
// stack with no MARK (PROTO, FRAME, MARK, the empty containers, every push of a scalar, GLOBAL for
// the whitelisted callables). Anything else (0x00, STOP, APPEND, GET, a refused or unknown opcode)
// makes Vm::run fail at byte 0, so a reader of a stream can stop after one byte; running the VM on
// that byte alone gives the same message the whole input would, except for the memo opcodes (GET,
// PUT and their binary forms), which read their argument first and so report a truncation.
bool may_start_pickle(uint8_t op);
// "GET (0x67)", or "0x00" for a byte that is no opcode: as Vm::run's messages name opcodes.
std::string describe_opcode(uint8_t op);

// Asks for transparent huge pages on the 2 MiB-aligned part of [p, p + bytes) (fewer page faults
// when a large fresh buffer is filled); a no-op where unsupported.
void advise_huge_pages(const void* p, size_t bytes);

// Offered every dict's first batch of items (SETITEMS on an empty dict, or DICT). Returning true
// means the hook has made a record of them: the dict becomes a sealed kRecord whose record_kind
// and payload the hook set through Vm::make_record. Returning false keeps it a plain dict.
class DictHook {
 public:
  virtual ~DictHook() = default;
  virtual bool take(Vm& vm, uint32_t obj, const Value* kv, size_t n_pairs) = 0;
};

struct Number {
  uint64_t bits = 0;
  uint8_t kind = 0;  // 0: int64 in bits; 1: uint64 above INT64_MAX; 2: out of range (bits = 0)
  bool negative = false;  // kind 2 only
};

class Vm {
 public:
  explicit Vm(DictHook* hook = nullptr) : hook_(hook) {}

  // Runs the pickle in `bytes` up to its STOP; bytes after STOP are ignored (as Python does).
  // On failure returns false with *error set to one line that names the byte offset.
  // drop_consumed: `bytes` is a private read-only file mapping whose pages behind the read
  // position may be given back (madvise DONTNEED) as decoding proceeds.
  bool run(std::string_view bytes, Value* result, std::string* error, bool drop_consumed = false);

  // ---- strings ----
  uint32_t intern(std::string_view s);
  std::string_view str(uint32_t id) const { return strings_[id]; }
  // Moves the string table out (index = id; 0 is ""). The VM must not be used afterwards.
  std::vector<std::string> take_strings();

  // ---- values ----
  bool as_i64(Value v, int64_t* out) const;   // ints that fit int64
  bool as_u64(Value v, uint64_t* out) const;  // ints in [INT64_MIN, UINT64_MAX]; negatives wrap
  bool as_double(Value v, double* out) const;  // floats and ints
  const Number* number(Value v) const { return v.tag() == Tag::kNum ? &numbers_[v.payload()] : nullptr; }
  // "int", "str", "dict", ... for messages.
  const char* type_name(Value v) const;

  // ---- objects ----
  Obj& obj(uint32_t i) { return objs_[i]; }
  const Obj& obj(uint32_t i) const { return objs_[i]; }
  ObjKind kind(Value v) const { return objs_[v.payload()].kind; }
  bool is_kind(Value v, ObjKind k) const { return v.is_obj() && objs_[v.payload()].kind == k; }
  // Items of a list/tuple/set, or key/value pairs of a dict (2 * pairs values).
  const Value* items(uint32_t obj, size_t* n) const;
  // Looks a string key up in a dict (last occurrence wins); nullptr when absent.
  const Value* find(uint32_t dict_obj, uint32_t key_id) const;
  // Turns a dict (items not yet stored) into a sealed record; for DictHook::take.
  void make_record(uint32_t obj, uint8_t record_kind, uint32_t payload);
  // Frees a sealed container's items once the caller has cached what it needs (kCached + payload).
  void cache(uint32_t obj, uint32_t id, bool release_items);

  // The byte offset of the opcode being executed (for hooks' messages).
  uint64_t offset() const { return offset_; }
  // Bytes of memory the VM holds (approximate); capped during run().
  size_t memory_bytes() const;
  // Extra bytes a hook holds on the VM's behalf (counted against the same cap).
  void set_hook_bytes(size_t b) { hook_bytes_ = b; }

  static constexpr size_t kMaxMarks = 10000;

 private:
  // run()'s cursor in the pickle, handed to the opcode groups.
  struct Input {
    const uint8_t* base = nullptr;
    size_t size = 0;
    size_t pos = 0;        // the next byte to read
    bool stopped = false;  // STOP was executed
    size_t left() const { return size - pos; }
  };

  // ---- run(): the loop, the dispatch and one member per opcode group ----
  // A group executes `code`, one of its opcodes (whose byte is at offset_), reads its arguments
  // from `in` when it has any, and returns false after fail(). The ones declared inline are
  // defined in pickle_vm.cpp and inlined into the dispatch, which keeps the loop as fast as one
  // function; the rare others are in pickle_vm_legacy.cpp.
  inline bool execute(Input& in, uint8_t code, Value* result);  // the dispatch
  inline bool out_of_line(Input& in, uint8_t code, bool (Vm::*group)(Input&, uint8_t));
  inline bool stop(Input& in, Value* result);           // STOP
  inline bool stack_op(uint8_t code);                   // MARK, POP, POP_MARK, DUP
  bool decimal_number(Input& in, uint8_t code);         // FLOAT, INT, LONG (protocol 0: a line of text)
  inline bool binary_number(Input& in, uint8_t code);   // BININT, BININT1, BININT2, LONG1, LONG4, BINFLOAT
  inline bool constant(uint8_t code);                   // NONE, NEWTRUE, NEWFALSE
  bool quoted_string(Input& in, uint8_t code);          // STRING, UNICODE (protocol 0: a line of text)
  inline bool counted_string(Input& in, uint8_t code);  // BINSTRING ... BYTEARRAY8: a length, then the bytes
  inline bool new_container(uint8_t code);              // EMPTY_*, LIST, TUPLE, FROZENSET, DICT, TUPLE1-3
  inline bool fill_container(uint8_t code);             // APPEND, APPENDS, ADDITEMS, SETITEM, SETITEMS
  inline bool memo_store(Input& in, uint8_t code);      // MEMOIZE, PUT, BINPUT, LONG_BINPUT
  inline bool memo_load(Input& in, uint8_t code);       // GET, BINGET, LONG_BINGET
  bool global(Input& in, uint8_t code);                 // GLOBAL: only the whitelisted callables
  bool reduce();                                        // REDUCE of a whitelisted callable
  inline bool framing(Input& in, uint8_t code);         // PROTO, FRAME
  // Every 16K opcodes (pickle_vm_values.cpp): the memory cap, and the input before `pos` given
  // back (drop_consumed).
  bool check_memory(size_t cap, bool drop_consumed, size_t pos, size_t* dropped_to);

  // ---- helpers of the opcode groups ----
  // The failures are cold: kept out of the loop's way.
  [[gnu::cold]] bool fail(const std::string& what);  // sets *error_ to what + " at byte N"; returns false
  [[gnu::cold]] bool truncated(uint64_t need, size_t left);
  [[gnu::cold]] bool sealed_error();
  std::string opname() const;  // the opcode at offset_, as describe_opcode names it
  size_t stack_floor() const { return marks_.empty() ? 0 : marks_.back(); }
  inline bool pop(Value* v);
  inline bool pop_mark(size_t* k);
  // The text up to the next newline (protocol 0's arguments); false when there is none.
  static bool readline(Input& in, std::string_view* line) {
    const void* nl = std::memchr(in.base + in.pos, '\n', in.left());
    if (!nl) return false;
    size_t end = static_cast<size_t>(static_cast<const uint8_t*>(nl) - in.base);
    *line = std::string_view(reinterpret_cast<const char*>(in.base + in.pos), end - in.pos);
    in.pos = end + 1;
    return true;
  }
  inline bool memo_index(Input& in, uint8_t code, uint8_t text_op, uint8_t byte_op, const char* bad_index,
                         uint64_t* idx);
  inline void push_str(const uint8_t* p, size_t len, Tag t);
  inline void extend(uint32_t obj, size_t from);
  inline void push_container(ObjKind k, size_t from);
  inline bool fill_dict(uint32_t obj, size_t from);

  uint32_t new_obj(ObjKind k);
  std::vector<Value>& storage_of(uint32_t obj);
  void release_storage(uint32_t obj);
  Value push_number(int64_t v);
  Value push_unsigned(uint64_t v);
  Value push_out_of_range(bool negative);
  Value make_int_from_le(const uint8_t* p, size_t n);
  bool parse_decimal(std::string_view text, Value* out);
  bool memo_put(uint64_t idx, Value v);
  bool memo_get(uint64_t idx, Value* v);

  DictHook* hook_;
  std::deque<std::string> strings_{std::string()};
  std::unordered_map<std::string_view, uint32_t> string_ids_{{std::string_view(), 0}};
  std::vector<Number> numbers_;
  std::vector<double> floats_;
  std::vector<Obj> objs_;
  std::vector<std::vector<Value>> storage_;
  std::vector<uint32_t> free_storage_;
  size_t storage_bytes_ = 0;
  size_t string_bytes_ = 0;
  size_t hook_bytes_ = 0;
  std::vector<Value> stack_;
  std::vector<size_t> marks_;
  static constexpr Value kUnset{7};  // a memo slot never stored (tag 7 is no value)
  std::vector<Value> memo_;
  std::unordered_map<uint64_t, Value> memo_far_;  // PUT indices far beyond the dense range
  uint64_t memo_count_ = 0;  // len(memo) as Python counts it (MEMOIZE's index)
  uint64_t offset_ = 0;
  const uint8_t* input_ = nullptr;  // run()'s bytes (for messages: the opcode at offset_)
  std::string* error_ = nullptr;
  std::string scratch_, scratch2_;
};

}  // namespace memtrace::reader::pickle
