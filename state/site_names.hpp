// Names for a running process's call sites, for `memtrace top` (bin/memtrace links no symbolizer):
// `memtrace-recover --names STATE_FILE` reads return addresses, one hex number per line, and
// answers each with one line, "function (file:line)" or "module+0xoffset", from the objects the
// state file lists, read again when an address lies outside all of them (a library loaded since).
#pragma once
#include <cstdio>
#include <string>

namespace memtrace::state {

// Serves until `in` ends. Exit status: 0, or 2 when the file is not a readable state file.
int serve_site_names(const std::string& state_file, std::FILE* in, std::FILE* out);

}  // namespace memtrace::state
