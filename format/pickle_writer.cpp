#include "format/pickle_writer.hpp"

#include <cstdlib>
#include <new>
#include <stdexcept>

namespace memtrace::format {

PickleWriter::PickleWriter(size_t initial_capacity) {
  if (initial_capacity < 64) initial_capacity = 64;
  buf_ = static_cast<uint8_t*>(std::malloc(initial_capacity));
  if (!buf_) throw std::bad_alloc();
  cap_ = initial_capacity;
}

PickleWriter::~PickleWriter() { std::free(buf_); }

void PickleWriter::clear() {
  len_ = 0;
  memo_next_ = 0;
  depth_ = 0;
}

void PickleWriter::grow(size_t n) {
  size_t want = cap_ * 2;
  if (want < len_ + n) want = len_ + n;
  void* p = std::realloc(buf_, want);
  if (!p) {
    // Doubling may be too greedy near the end of memory: try the exact need once.
    want = len_ + n;
    p = std::realloc(buf_, want);
    if (!p) throw std::bad_alloc();
  }
  buf_ = static_cast<uint8_t*>(p);
  cap_ = want;
}

void PickleWriter::open(bool dict, uint8_t opcode) {
  if (depth_ >= kMaxDepth) throw std::length_error("pickle nesting too deep");
  levels_[depth_].pending = 0;
  levels_[depth_].dict = dict;
  ++depth_;
  put1(opcode);
}

void PickleWriter::close(bool dict) {
  if (depth_ <= 0 || levels_[depth_ - 1].dict != dict) throw std::logic_error("unbalanced pickle containers");
  --depth_;
  if (levels_[depth_].pending) put1(dict ? op::kSetItems : op::kAppends);
}

void PickleWriter::begin_list() { open(false, op::kEmptyList); }
void PickleWriter::end_list() { close(false); }
void PickleWriter::begin_dict() { open(true, op::kEmptyDict); }
void PickleWriter::end_dict() { close(true); }

void PickleWriter::long1(int64_t v) {
  // Smallest n with -2^(8n-1) <= v < 2^(8n-1): Python's encode_long gives the same bytes.
  int n = 1;
  while (n < 8) {
    int64_t lim = int64_t{1} << (8 * n - 1);
    if (v >= -lim && v < lim) break;
    ++n;
  }
  ensure(2 + static_cast<size_t>(n));
  uint8_t* p = end_ptr();
  p[0] = op::kLong1;
  p[1] = static_cast<uint8_t>(n);
  uint64_t u = static_cast<uint64_t>(v);
  for (int i = 0; i < n; ++i) p[2 + i] = static_cast<uint8_t>(u >> (8 * i));
  len_ += 2 + static_cast<size_t>(n);
}

void PickleWriter::big_unsigned(uint64_t v) {
  if (v <= static_cast<uint64_t>(INT64_MAX)) {
    integer(static_cast<int64_t>(v));
    return;
  }
  // Nine bytes, little-endian, the last 0: positive in two's complement.
  ensure(11);
  uint8_t* p = end_ptr();
  p[0] = op::kLong1;
  p[1] = 9;
  for (int i = 0; i < 8; ++i) p[2 + i] = static_cast<uint8_t>(v >> (8 * i));
  p[10] = 0;
  len_ += 11;
}

void PickleWriter::binbytes(std::string_view s) {
  size_t n = s.size() > (size_t{1} << 30) ? size_t{1} << 30 : s.size();
  if (n < 256) {
    put2(op::kShortBinBytes, static_cast<uint8_t>(n));
  } else {
    put1(op::kBinBytes);
    for (int i = 0; i < 4; ++i) put1(static_cast<uint8_t>(n >> (8 * i)));
  }
  ensure(n);
  if (n) std::memcpy(end_ptr(), s.data(), n);
  len_ += n;
}

void PickleWriter::float64(double d) {
  uint64_t u;
  std::memcpy(&u, &d, sizeof(u));
  ensure(9);
  uint8_t* p = end_ptr();
  p[0] = op::kBinFloat;
  for (int i = 0; i < 8; ++i) p[1 + i] = static_cast<uint8_t>(u >> (8 * (7 - i)));
  len_ += 9;
}

void PickleWriter::str(std::string_view s) {
  // BINUNICODE carries a 32-bit length; nothing memtrace writes comes near it.
  constexpr size_t kMaxString = size_t{1} << 30;
  if (s.size() > kMaxString) s = s.substr(0, kMaxString);
  bool valid = true;
  size_t n = utf8_sanitized_size(s, &valid);
  uint8_t* p;
  if (n < 256) {
    ensure(2 + n);
    p = end_ptr();
    p[0] = op::kShortBinUnicode;
    p[1] = static_cast<uint8_t>(n);
    p += 2;
    len_ += 2;
  } else {
    ensure(5 + n);
    p = end_ptr();
    p[0] = op::kBinUnicode;
    p[1] = static_cast<uint8_t>(n);
    p[2] = static_cast<uint8_t>(n >> 8);
    p[3] = static_cast<uint8_t>(n >> 16);
    p[4] = static_cast<uint8_t>(n >> 24);
    p += 5;
    len_ += 5;
  }
  if (valid) {
    if (n) std::memcpy(p, s.data(), n);
  } else {
    utf8_sanitize_into(s, reinterpret_cast<char*>(p));
  }
  len_ += n;
}

}  // namespace memtrace::format
