// Internal to the Symbolizer (its parts: unwind/symbolizer_impl.hpp); not part of memtrace's interface.
#pragma once
#include <elfutils/libdw.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace memtrace::unwind::detail {

// A unit's line table read straight from .debug_line, answering what dwfl_module_getsrc +
// dwarf_linesrc + dwarf_lineno (elfutils 0.188) would, and the file names dwarf_getsrcfiles +
// dwarf_filesrc give DW_AT_call_file. libdw decodes a whole line program with a malloc per
// row and sorts every row; here rows go into one compact array, and the sequences (usually
// each in address order already) are put in order instead of the rows. libdw's rules kept:
//  - Rows are ordered by address, an end_sequence row before a normal one at the same
//    address, else in the order they were read; a lookup takes the last row at or below the
//    address and answers nothing when that row ends a sequence. The last row of the whole
//    table counts as ending a sequence even when the program does not say so.
//  - File names: an absolute name as it is; else its directory, "/", the name. DWARF < 5:
//    directory 0 is the unit's DW_AT_comp_dir (no directory and no "/" without one), file 0
//    is "???", and files count from 1. DWARF 5: both tables as written, file 0 included.
//  - A file index past the table gives no name (""), the line still counts.
// Anything else (DW_LNE_define_file, vendor extended opcodes, more than one operation per
// instruction, values libdw would reject or truncate, entry forms other than string, strp,
// line_strp and constants, compressed sections, 64-bit line tables in 32-bit units) leaves
// the table unusable, and the caller asks libdw.
class LineTable {
 public:
  // A module's sections the tables are read from; a null line section: none usable.
  struct Sections {
    std::pair<const unsigned char*, size_t> line, line_str, str, abbrev;
  };
  bool usable = false;

  LineTable(Dwarf_Die* cudie, const Sections& sections) : sections_(sections) {
    usable = sections.line.first != nullptr &&
             read(cudie, sections.line.first, sections.line.second);
    if (!usable) {
      rows_.clear();
      files_.clear();
    }
  }

  // The file and line for a unit-relative address; false where libdw has no line.
  bool lookup(Dwarf_Addr pc, const std::string*& file, int& line) const {
    auto it = std::upper_bound(rows_.begin(), rows_.end(), pc,
                               [](Dwarf_Addr v, const Row& r) { return v < r.addr; });
    if (it == rows_.begin()) return false;
    const Row& r = *--it;
    if (r.end) return false;
    file = r.file < files_.size() ? &files_[r.file] : &empty_;
    line = r.line;
    return true;
  }

  // dwarf_filesrc's name for a file index, or null past the table.
  const std::string* file(uint64_t index) const {
    return index < files_.size() ? &files_[index] : nullptr;
  }

 private:
  struct Row {
    Dwarf_Addr addr;
    int line;
    uint32_t file : 31;
    uint32_t end : 1;
  };
  std::vector<Row> rows_;
  std::vector<std::string> files_;
  const std::string empty_;
  Sections sections_;

  static uint64_t fixed(const unsigned char* v, unsigned n) {
    uint64_t x = 0;
    std::memcpy(&x, v, n);  // little-endian host: the data describes this process's code
    return x;
  }

  // Bounds-checked reader over [p, end).
  struct Cursor {
    const unsigned char* p;
    const unsigned char* end;
    bool bad = false;
    uint64_t u(unsigned n) {
      if (static_cast<size_t>(end - p) < n) {
        bad = true;
        return 0;
      }
      uint64_t v = fixed(p, n);
      p += n;
      return v;
    }
    uint64_t uleb() {
      uint64_t v = 0;
      for (unsigned shift = 0;; shift += 7) {
        if (p >= end || shift > 63) {
          bad = true;
          return 0;
        }
        unsigned char b = *p++;
        v |= static_cast<uint64_t>(b & 0x7f) << shift;
        if ((b & 0x80) == 0) return v;
      }
    }
    int64_t sleb() {
      int64_t v = 0;
      unsigned shift = 0;
      unsigned char b = 0;
      do {
        if (p >= end || shift > 63) {
          bad = true;
          return 0;
        }
        b = *p++;
        v |= static_cast<int64_t>(static_cast<uint64_t>(b & 0x7f) << shift);
        shift += 7;
      } while ((b & 0x80) != 0);
      if (shift < 64 && (b & 0x40) != 0) v |= -(int64_t{1} << shift);
      return v;
    }
    const char* cstr() {
      const void* nul = std::memchr(p, 0, static_cast<size_t>(end - p));
      if (nul == nullptr) {
        bad = true;
        return nullptr;
      }
      const char* s = reinterpret_cast<const char*>(p);
      p = static_cast<const unsigned char*>(nul) + 1;
      return s;
    }
  };

  static std::string join(const char* dir, const char* name) {
    if (name[0] == '/' || dir == nullptr) return name;
    std::string s(dir);
    s += '/';
    s += name;
    return s;
  }

  // DWARF 5 directory/file entry formats: (content type, form) pairs.
  struct Format {
    uint64_t content, form;
  };

  // Reads one entry's value of a form; string for DW_LNCT_path, number for the rest.
  bool entry_value(Cursor& c, uint64_t form, unsigned offset_size, const char** str,
                   uint64_t* num) const;

  static bool read_formats(Cursor& c, std::vector<Format>& formats);

  // What the line program needs of its header.
  struct Header {
    unsigned version = 0;
    unsigned offset_size = 4;
    unsigned addr_size = 0;
    unsigned min_len = 0;
    int line_base = 0;
    unsigned line_range = 0;
    unsigned opcode_base = 0;
    const unsigned char* std_lengths = nullptr;  // argument counts, indexed by opcode from 1
    const unsigned char* entries = nullptr;      // the directory and file tables
    const unsigned char* program = nullptr;      // the line program, up to end
    const unsigned char* end = nullptr;
  };
  // A sequence of rows as read: [begin, end) of the rows, its first address.
  struct Seq {
    Dwarf_Addr start;
    size_t begin, end;
  };

  bool read(Dwarf_Die* cudie, const unsigned char* section, size_t size);
  // The unit's header fields, from [at, end) of .debug_line; false where libdw must answer.
  static bool read_header(const unsigned char* at, const unsigned char* end, unsigned cu_offset_size,
                          unsigned addr_size, Header& h);
  // files_ from the directory and file tables (DWARF 2 to 4; DWARF 5).
  bool read_files_v4(Cursor& h, const char* comp_dir);
  bool read_files_v5(Cursor& h, unsigned offset_size);
  // The rows of the line program, in the order read, and where each sequence lies in them.
  static bool run_program(const Header& h, std::vector<Row>& rows, std::vector<Seq>& seqs);
  // rows_: the rows read, in libdw's order.
  void put_in_order(std::vector<Row>& read_rows, std::vector<Seq>& seqs);
};

const std::string* line_table_file(const LineTable* table, uint64_t index);

}  // namespace memtrace::unwind::detail
