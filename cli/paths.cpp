#include "cli/paths.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <vector>

namespace memtrace::cli {

namespace {

std::string self_exe() {
  std::vector<char> buf(PATH_MAX + 1);
  for (;;) {
    ssize_t n = ::readlink("/proc/self/exe", buf.data(), buf.size());
    if (n < 0) return {};
    if (static_cast<size_t>(n) < buf.size()) return std::string(buf.data(), static_cast<size_t>(n));
    buf.resize(buf.size() * 2);
  }
}

std::string dir_name(const std::string& path) {
  size_t end = path.size();
  while (end > 1 && path[end - 1] == '/') --end;  // trailing slashes
  size_t slash = path.rfind('/', end - 1);
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace

std::string install_prefix() {
  std::string exe = self_exe();
  if (exe.empty()) return {};
  return dir_name(dir_name(exe));
}

std::string preload_library(const std::string& prefix) { return prefix + "/lib/libmemtrace.so"; }

std::string sim_library_dir(const std::string& prefix) { return prefix + "/lib/memtrace/sim"; }

std::string python_module_dir(const std::string& prefix) { return prefix + "/lib/memtrace/python"; }

bool is_regular_file(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool is_directory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace memtrace::cli
