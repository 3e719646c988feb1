// UTF-8 repair shared by every writer of text for other programs (the pickle writer, the CLI's JSON):
// invalid sequences, UTF-16 surrogates (what a Python str with a lone surrogate pickles to) and
// overlong forms become U+FFFD, one per maximal invalid subpart, as Python's 'replace' handler and
// the browser's TextDecoder do, so every consumer reads the same text.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace memtrace::format {

// Bytes needed to write s with invalid sequences replaced; *valid is set when s needs no change.
size_t utf8_sanitized_size(std::string_view s, bool* valid);
// Writes the sanitized form of s into out (which has utf8_sanitized_size(s) bytes).
void utf8_sanitize_into(std::string_view s, char* out);
// Appends the sanitized form of s to out.
void utf8_sanitize_append(std::string_view s, std::string& out);

}  // namespace memtrace::format
