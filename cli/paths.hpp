// Where memtrace's own files are: everything is found relative to the running `memtrace`
// binary (<prefix>/bin/memtrace), so the build tree and an install tree work the same way.
#pragma once
#include <string>

namespace memtrace::cli {

// <prefix> = the directory above the one holding this executable; empty if unknown.
std::string install_prefix();
// <prefix>/lib/libmemtrace.so
std::string preload_library(const std::string& prefix);
// <prefix>/lib/memtrace/sim (simulated libcuda.so.1, libcudart.so.13, libnccl.so.2)
std::string sim_library_dir(const std::string& prefix);
// <prefix>/lib/memtrace/python (the pure-Python module memtrace, docs/api.md)
std::string python_module_dir(const std::string& prefix);

bool is_regular_file(const std::string& path);
bool is_directory(const std::string& path);

}  // namespace memtrace::cli
