// Decompressed copies of separate debug files whose DWARF sections are compressed (Debian's
// libc6-dbg, objcopy --compress-debug-sections), kept in a folder by build id. libdw inflates
// every compressed debug section of a file when it opens it, whatever few addresses are asked
// (libc's: 10 MB, 40-80 ms on this project's machines); a copy with the sections stored
// uncompressed is mapped instead, and costs only the pages read. Made the first time a file is
// opened, then used by every later symbolizer in any process (docs/symbolization.md).
#pragma once
#include <string>
#include <vector>

namespace memtrace::unwind {

// The folder ("" = none: debug files are used as they are). Thread-safe; read at each open, so a
// change applies to the next debug file opened. Default: none (memtrace's library sets it from
// MEMTRACE_DEBUG_CACHE, core/config.hpp).
void set_debug_cache_dir(std::string dir);
std::string debug_cache_dir();

// $XDG_CACHE_HOME/memtrace/debug, else $HOME/.cache/memtrace/debug; "" when neither is set.
std::string default_debug_cache_dir();
// From MEMTRACE_DEBUG_CACHE as core/config.cpp keeps it: "off" = none, "" = the default, else
// that folder.
void set_debug_cache_setting(const std::string& setting);

// What the cache could not do since the last call (a folder not writable, a file that would not
// convert), each said once per process: for the dump to log. The file was used as it is.
std::vector<std::string> take_debug_cache_warnings();

namespace detail {
// With the cache on, the debug file for build id id[0..id_len): the cache's copy when it holds
// one, else the distribution's /usr/lib/debug/.build-id file (through a copy made now when its
// DWARF is compressed). Its fd, and its path in *path (malloc'd, for libdwfl); -1 when the cache
// is off or neither is there. (Looked up here rather than by libdwfl's build-id lookup, which keeps
// the file it found open inside the module whatever the callback returns.)
int open_by_build_id(const unsigned char* id, int id_len, char** path);
// fd is an open debug file at path, whose build id is id[0..id_len). When its debug sections are
// compressed and a cache folder is set: an fd for the decompressed copy (made now if missing) and
// its path in *copy_path (malloc'd, for libdwfl); fd is then closed. Otherwise fd itself.
int debug_file_or_copy(int fd, const char* path, const unsigned char* id, int id_len, char** copy_path);
}  // namespace detail

}  // namespace memtrace::unwind
