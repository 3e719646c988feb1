// A streaming pickle emitter restricted to the opcode subset every PyTorch memory viewer parses
// (docs/snapshot-format.md, "The pickle subset memtrace writes"): PROTO 4 (no FRAME),
// EMPTY_DICT/EMPTY_LIST with MARK ... SETITEMS / APPENDS batches of at most 1000,
// SHORT_BINUNICODE/BINUNICODE (always valid UTF-8),
// BININT1/BININT2/BININT/LONG1 (minimal two's complement, never more than 8 bytes), BINFLOAT,
// NEWTRUE/NEWFALSE, NONE, TUPLE2, MEMOIZE + BINGET/LONG_BINGET, STOP.
//
// Bytes go into one growable buffer; once it has grown, writing allocates nothing. Growth that
// fails throws std::bad_alloc (the caller, dump_snapshot, catches everything).
// Containers are written as begin_*() ... end_*(); before every list item call item(), before every
// dict value call key() (or item() then the key yourself). The writer inserts MARK and the closing
// APPENDS/SETITEMS so no batch exceeds 1000 entries, as Python does.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "format/pickle_opcodes.hpp"
#include "format/utf8.hpp"

namespace memtrace::format {

class PickleWriter {
 public:
  static constexpr uint32_t kBatch = 1000;
  static constexpr int kMaxDepth = 64;

  explicit PickleWriter(size_t initial_capacity = 1 << 16);
  ~PickleWriter();
  PickleWriter(const PickleWriter&) = delete;
  PickleWriter& operator=(const PickleWriter&) = delete;

  // Whole stream.
  void begin() { put2(op::kProto, 4); }
  void end() { put1(op::kStop); }

  // Containers. Nesting deeper than kMaxDepth is a programming error: begin_list() and
  // begin_dict() then throw std::length_error, writing nothing (dump_snapshot catches it).
  void begin_list();
  void end_list();
  void begin_dict();
  void end_dict();
  // Announces the next list item / dict pair of the innermost open container.
  void item() {
    Level& l = levels_[depth_ - 1];
    if (l.pending == kBatch) {
      put1(l.dict ? op::kSetItems : op::kAppends);
      l.pending = 0;
    }
    if (l.pending == 0) put1(op::kMark);
    ++l.pending;
  }
  // item() followed by a string key.
  void key(std::string_view k) {
    item();
    str(k);
  }

  // Scalars.
  void none() { put1(op::kNone); }
  void boolean(bool b) { put1(b ? op::kNewTrue : op::kNewFalse); }
  void integer(int64_t v) {
    if (v >= 0 && v < 256) {
      put2(op::kBinInt1, static_cast<uint8_t>(v));
    } else if (v >= 0 && v < 65536) {
      ensure(3);
      uint8_t* p = end_ptr();
      p[0] = op::kBinInt2;
      p[1] = static_cast<uint8_t>(v);
      p[2] = static_cast<uint8_t>(v >> 8);
      len_ += 3;
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
      ensure(5);
      uint8_t* p = end_ptr();
      p[0] = op::kBinInt;
      uint32_t u = static_cast<uint32_t>(static_cast<int32_t>(v));
      p[1] = static_cast<uint8_t>(u);
      p[2] = static_cast<uint8_t>(u >> 8);
      p[3] = static_cast<uint8_t>(u >> 16);
      p[4] = static_cast<uint8_t>(u >> 24);
      len_ += 5;
    } else {
      long1(v);
    }
  }
  // The largest integer a JavaScript number (PyTorch's viewer) holds exactly: 2^53 - 1.
  static constexpr uint64_t kMaxExact = (uint64_t{1} << 53) - 1;
  // Unsigned values are written as Python ints, capped at kMaxExact so that the viewer never
  // rounds one; returns false when the value was capped (the caller then keeps the true value
  // beside it, see SnapshotWriter's `<key>_exact`).
  bool uinteger(uint64_t v) {
    integer(static_cast<int64_t>(v > kMaxExact ? kMaxExact : v));
    return v <= kMaxExact;
  }
  void float64(double d);
  // UTF-8 text. Invalid sequences are replaced by U+FFFD, one per maximal invalid subpart
  // (what Python's 'replace' handler and the browser's TextDecoder produce).
  void str(std::string_view s);
  // Pops two values and pushes a 2-tuple.
  void tuple2() { put1(op::kTuple2); }
  // Raw values written back as a reader found them (format/raw_value.hpp): an integer above
  // INT64_MAX exactly (LONG1), bytes, and the opcodes of tuples and sets (MARK ... TUPLE,
  // EMPTY_SET MARK ... ADDITEMS), which the caller balances itself.
  void big_unsigned(uint64_t v);
  void binbytes(std::string_view s);
  void opcode(uint8_t code) { put1(code); }

  // Memo: store the object on top of the stack; returns its index (0, 1, 2, ... in order).
  uint32_t memoize() {
    put1(op::kMemoize);
    return memo_next_++;
  }
  // Push a memoized object again (shared reference).
  void get(uint32_t index) {
    if (index < 256) {
      put2(op::kBinGet, static_cast<uint8_t>(index));
    } else {
      ensure(5);
      uint8_t* p = end_ptr();
      p[0] = op::kLongBinGet;
      p[1] = static_cast<uint8_t>(index);
      p[2] = static_cast<uint8_t>(index >> 8);
      p[3] = static_cast<uint8_t>(index >> 16);
      p[4] = static_cast<uint8_t>(index >> 24);
      len_ += 5;
    }
  }
  uint32_t memo_size() const { return memo_next_; }

  // Result.
  std::string_view bytes() const { return {reinterpret_cast<const char*>(buf_), len_}; }
  size_t size() const { return len_; }
  int depth() const { return depth_; }
  // Forget the content (keeps the capacity).
  void clear();

 private:
  struct Level {
    uint32_t pending = 0;  // items since the current MARK
    bool dict = false;
  };

  uint8_t* end_ptr() { return buf_ + len_; }
  void ensure(size_t n) {
    if (len_ + n > cap_) grow(n);
  }
  void grow(size_t n);
  void put1(uint8_t a) {
    ensure(1);
    buf_[len_++] = a;
  }
  void put2(uint8_t a, uint8_t b) {
    ensure(2);
    buf_[len_] = a;
    buf_[len_ + 1] = b;
    len_ += 2;
  }
  void long1(int64_t v);
  void open(bool dict, uint8_t opcode);
  void close(bool dict);

  uint8_t* buf_ = nullptr;
  size_t len_ = 0;
  size_t cap_ = 0;
  uint32_t memo_next_ = 0;
  int depth_ = 0;
  Level levels_[kMaxDepth];
};

}  // namespace memtrace::format
