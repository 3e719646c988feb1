// A small streaming JSON writer for the commands' --json output: objects, arrays, strings (escaped,
// invalid UTF-8 replaced so the output always parses), integers, booleans. Output is one line per
// document, keys in the order written, so golden files compare byte for byte.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace memtrace::analysis {

// The version of the commands' JSON documents: raised when a key is renamed or removed or its
// meaning changes (adding a key does not raise it). Naming: byte quantities end in _bytes, times in
// _us, counts are plain nouns (docs/reports.md, "JSON output").
inline constexpr int kJsonSchemaVersion = 1;

class JsonWriter {
 public:
  // The top-level object of a command's output, opened with its schema_version.
  void begin_document() {
    begin_object();
    field_int("schema_version", kJsonSchemaVersion);
  }
  void begin_object();
  void end_object();
  void begin_array();
  void end_array();
  // Inside an object: the next value's key.
  JsonWriter& key(std::string_view k);
  void string(std::string_view s);
  void integer(int64_t v);
  void uinteger(uint64_t v);
  void boolean(bool b);
  void null();
  void number(double v);  // finite values only; non-finite ones are written as null

  // Shorthands for key + value.
  void field(std::string_view k, std::string_view v) { key(k).string(v); }
  void field(std::string_view k, const char* v) { key(k).string(v); }
  void field_int(std::string_view k, int64_t v) { key(k).integer(v); }
  void field_uint(std::string_view k, uint64_t v) { key(k).uinteger(v); }
  void field_bool(std::string_view k, bool v) { key(k).boolean(v); }

  const std::string& text() const { return out_; }

 private:
  void before_value();
  void write_string(std::string_view s);
  std::string out_;
  std::vector<bool> first_;  // per open container: no element written yet
  bool after_key_ = false;
};

}  // namespace memtrace::analysis
