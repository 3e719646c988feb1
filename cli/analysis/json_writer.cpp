#include "cli/analysis/json_writer.hpp"

#include <cinttypes>
#include <cmath>
#include <cstdio>

namespace memtrace::analysis {

void JsonWriter::before_value() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (!first_.empty()) {
    if (!first_.back()) out_ += ',';
    first_.back() = false;
  }
}

void JsonWriter::begin_object() {
  before_value();
  out_ += '{';
  first_.push_back(true);
}

void JsonWriter::end_object() {
  out_ += '}';
  first_.pop_back();
}

void JsonWriter::begin_array() {
  before_value();
  out_ += '[';
  first_.push_back(true);
}

void JsonWriter::end_array() {
  out_ += ']';
  first_.pop_back();
}

JsonWriter& JsonWriter::key(std::string_view k) {
  before_value();
  write_string(k);
  out_ += ':';
  after_key_ = true;
  return *this;
}

namespace {
// Length of the valid UTF-8 sequence starting at s[i], or 0 when it is not one.
size_t utf8_len(std::string_view s, size_t i) {
  auto c = static_cast<unsigned char>(s[i]);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k)
    if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return 0;
  if (n == 2 && c < 0xC2) return 0;  // overlong
  return n;
}
}  // namespace

void JsonWriter::string(std::string_view s) {
  before_value();
  write_string(s);
}

void JsonWriter::write_string(std::string_view s) {
  out_ += '"';
  for (size_t i = 0; i < s.size();) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\') {
      out_ += '\\';
      out_ += static_cast<char>(c);
      ++i;
    } else if (c == '\n' || c == '\t' || c == '\r') {
      out_ += c == '\n' ? "\\n" : c == '\t' ? "\\t" : "\\r";
      ++i;
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out_ += buf;
      ++i;
    } else if (c < 0x80) {
      out_ += static_cast<char>(c);
      ++i;
    } else if (size_t n = utf8_len(s, i)) {
      out_.append(s.substr(i, n));
      i += n;
    } else {
      out_ += "\\ufffd";
      ++i;
    }
  }
  out_ += '"';
}

void JsonWriter::integer(int64_t v) {
  before_value();
  char buf[32];
  std::snprintf(buf, sizeof buf, "%" PRId64, v);
  out_ += buf;
}

void JsonWriter::uinteger(uint64_t v) {
  before_value();
  char buf[32];
  std::snprintf(buf, sizeof buf, "%" PRIu64, v);
  out_ += buf;
}

void JsonWriter::boolean(bool b) {
  before_value();
  out_ += b ? "true" : "false";
}

void JsonWriter::null() {
  before_value();
  out_ += "null";
}

void JsonWriter::number(double v) {
  if (!std::isfinite(v)) return null();
  before_value();
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  out_ += buf;
}

}  // namespace memtrace::analysis
