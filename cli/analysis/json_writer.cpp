#include "cli/analysis/json_writer.hpp"

#include <cinttypes>
#include <cmath>
#include <cstdio>

#include "format/utf8.hpp"

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

void JsonWriter::string(std::string_view s) {
  before_value();
  write_string(s);
}

void JsonWriter::write_string(std::string_view raw) {
  // Repaired first, so a lone surrogate or a stray byte becomes U+FFFD rather than text a strict
  // decoder rejects (Python strings from a snapshot may carry either).
  std::string repaired;
  bool valid;
  format::utf8_sanitized_size(raw, &valid);
  std::string_view s = raw;
  if (!valid) {
    format::utf8_sanitize_append(raw, repaired);
    s = repaired;
  }
  out_ += '"';
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out_ += '\\';
      out_ += ch;
    } else if (c == '\n' || c == '\t' || c == '\r') {
      out_ += c == '\n' ? "\\n" : c == '\t' ? "\\t" : "\\r";
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out_ += buf;
    } else {
      out_ += ch;
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
