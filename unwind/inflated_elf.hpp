// Writing an ELF file with its compressed sections stored inflated: what the debug cache keeps
// (unwind/debug_cache.hpp) and what a partial copy starts from (unwind/partial_copy.hpp).
#pragma once
#include <gelf.h>
#include <libelf.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace memtrace::unwind::detail {

// A zlib-compressed section's payload: its bytes after the compression header, and the header.
struct Compressed {
  const unsigned char* in = nullptr;
  size_t in_size = 0;
  GElf_Chdr ch{};
};
// The payload of scn, a zlib-compressed section; false (and *err) when it has no header.
bool compressed_payload(Elf* elf, Elf_Scn* scn, Compressed* out, std::string* err);

// Inflates c into out[0..c.ch.ch_size) in one call (libdeflate, told the size up front, is well
// ahead of zlib's inflate, the one libelf and libdw use: docs/symbolization.md). False (and
// *err) when the bytes do not inflate to exactly that size.
bool inflate_whole(const Compressed& c, unsigned char* out, std::string* err);

// A section write_inflated left for its caller to fill: where it lies in the file written.
struct Deferred {
  std::string name;
  size_t index = 0;
  uint64_t offset = 0;
  Compressed payload;
};

// Writes src to out with every compressed section inflated; the layout is the source's order,
// each section at its alignment, then the section headers. A zlib-compressed section for which
// defer(name) is true is not written: it gets its room past the section headers, its header
// says what it will hold, and *deferred says where (the file is extended to hold it, as a hole:
// its pages cost nothing until written). Deferring needs the file in this machine's byte order.
// An error's text, or "" when written.
std::string write_inflated(Elf* src, int out, const std::function<bool(const char*)>& defer = {},
                           std::vector<Deferred>* deferred = nullptr);

}  // namespace memtrace::unwind::detail
