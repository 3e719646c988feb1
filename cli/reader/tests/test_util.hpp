// Helpers for the reader tests: a temporary directory, running the fixture generator, building
// pickles byte by byte.
#pragma once
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>

namespace memtrace::reader::test {

class TempDir {
 public:
  TempDir() {
    const char* base = getenv("TMPDIR");
    std::string t = std::string(base && *base ? base : "/tmp") + "/memtrace_reader_test.XXXXXX";
    if (char* p = mkdtemp(t.data())) path_ = p;
  }
  ~TempDir() {
    if (!path_.empty()) {
      std::string cmd = "rm -rf '" + path_ + "'";
      if (system(cmd.c_str()) != 0) {
      }
    }
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string operator/(std::string_view name) const { return path_ + "/" + std::string(name); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline bool write_file(const std::string& path, std::string_view data) {
  std::ofstream f(path, std::ios::binary);
  f.write(data.data(), static_cast<std::streamsize>(data.size()));
  return static_cast<bool>(f);
}

// Runs make_pytorch_pickles.py into dir; true on success.
inline bool make_pytorch_pickles(const TempDir& dir) {
  std::string cmd = std::string(MEMTRACE_TEST_PYTHON) + " '" + MEMTRACE_TEST_PICKLES_SCRIPT + "' '" + dir.path() + "'";
  return system(cmd.c_str()) == 0;
}

// Little helpers to write pickle opcodes by hand.
inline std::string u32le(uint32_t v) {
  std::string s(4, '\0');
  for (int i = 0; i < 4; ++i) s[i] = static_cast<char>(v >> (8 * i));
  return s;
}
inline std::string u64le(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(v >> (8 * i));
  return s;
}
inline std::string sbu(std::string_view s) {  // SHORT_BINUNICODE
  return std::string("\x8c") + static_cast<char>(s.size()) + std::string(s);
}

}  // namespace memtrace::reader::test
