// Helpers shared by the format and output tests: temporary directories, running python3, reading files.
#pragma once
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <string_view>

namespace memtrace::format::test {

// A fresh directory under $TMPDIR (or /tmp), removed with its content at scope exit.
class TempDir {
 public:
  TempDir() {
    const char* base = getenv("TMPDIR");
    std::string t = std::string(base && *base ? base : "/tmp") + "/memtrace_test.XXXXXX";
    char* p = mkdtemp(t.data());
    if (p) path_ = p;
  }
  ~TempDir() {
    if (!path_.empty()) {
      std::string cmd = "chmod -R u+rwx '" + path_ + "' 2>/dev/null; rm -rf '" + path_ + "'";
      if (system(cmd.c_str()) != 0) {
      }
    }
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(std::string_view name) const { return path_ + "/" + std::string(name); }

 private:
  std::string path_;
};

inline bool write_text(const std::string& path, std::string_view text) {
  std::ofstream f(path, std::ios::binary);
  f.write(text.data(), static_cast<std::streamsize>(text.size()));
  return static_cast<bool>(f);
}

inline std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline bool exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

// Runs a shell command; returns its exit status (-1 if it could not run) and its stdout+stderr.
inline int run(const std::string& cmd, std::string* out) {
  std::string full = cmd + " 2>&1";
  FILE* f = popen(full.c_str(), "r");
  if (!f) return -1;
  char buf[4096];
  size_t n;
  if (out) out->clear();
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
    if (out) out->append(buf, n);
  int st = pclose(f);
  if (st == -1) return -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

inline std::string python() { return MEMTRACE_TEST_PYTHON; }
inline std::string checker() { return MEMTRACE_TEST_CHECKER; }

// Runs python3 on a script file written into dir; returns the exit status, output in *out.
inline int run_python(const TempDir& dir, std::string_view script, const std::string& args, std::string* out) {
  std::string path = dir / "script.py";
  write_text(path, script);
  return run(python() + " '" + path + "' " + args, out);
}

inline std::string hex(std::string_view b) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (unsigned char c : b) {
    s.push_back(d[c >> 4]);
    s.push_back(d[c & 15]);
  }
  return s;
}

}  // namespace memtrace::format::test
