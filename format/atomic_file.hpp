// Write a whole file so that readers see either the old content or the complete new one.
#pragma once
#include <string>
#include <string_view>

namespace memtrace::format {

// Creates missing parent directories (mode 0700 for the new ones), writes bytes to a temporary
// file in the target directory (O_CREAT|O_EXCL|O_NOFOLLOW|O_CLOEXEC, mode 0600), fsyncs it and
// renames it over path. On any failure the temporary file is removed, an existing target is left
// untouched, false is returned and *error (if given) holds one line naming the path, the step that
// failed and strerror. Only a regular file (or a symbolic link) is ever replaced. Temporary files
// that earlier writers on this host left in the directory when they were killed are removed once
// their process is gone and they are a minute old. Never throws.
bool write_file_atomically(const std::string& path, std::string_view bytes, std::string* error);

// mkdir -p with mode 0700 for directories it creates. False with *error set on failure.
bool make_directories(const std::string& dir, std::string* error);

}  // namespace memtrace::format
