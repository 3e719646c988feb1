// Copies of separate debug files whose DWARF sections are compressed (Debian's libc6-dbg,
// objcopy --compress-debug-sections). libdw inflates every compressed debug section of a file
// when it opens it, whatever few addresses are asked, with zlib (libc's: 10 MB, 30-80 ms on this
// project's machines). It is handed a copy with the sections stored inflated instead: a partial
// copy in memory, inflated only as far as the units asked need (unwind/partial_copy.hpp), or a
// whole copy made with libdeflate, kept in a folder by build id when there is one and then mapped
// by every later symbolizer in any process for only the pages read (docs/symbolization.md).
#pragma once
#include <string>
#include <vector>

namespace memtrace::unwind {

// The folder ("" = none: each symbolizer inflates a compressed debug file in memory). Thread-safe; read at each open, so a
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
// The debug file for build id id[0..id_len): the cache's copy when there is a cache holding one,
// else the distribution's /usr/lib/debug/.build-id file (through debug_file_or_copy). Its fd, and
// its path in *path (malloc'd, for libdwfl); -1 when neither is there. (Looked up here rather than by libdwfl's build-id lookup, which keeps
// the file it found open inside the module whatever the callback returns.)
int open_by_build_id(const unsigned char* id, int id_len, char** path);
// fd is an open debug file at path, whose build id is id[0..id_len). When its debug sections are
// compressed: an fd for an inflated copy, fd then closed. With a cache folder holding the copy,
// that copy, its path in *copy_path (malloc'd, for libdwfl); else this process's partial copy (a
// memory file; *copy_path unchanged). A file no partial copy can serve gets the whole copy: in
// the cache (made now), else, or when the folder cannot take it, in a memory file. fd itself when
// the file is not compressed or does not inflate (one warning).
int debug_file_or_copy(int fd, const char* path, const unsigned char* id, int id_len, char** copy_path);
}  // namespace detail

}  // namespace memtrace::unwind
