#include "unwind/line_table.hpp"

#include "unwind/libdw_lock.hpp"

#include <dwarf.h>
#include <elfutils/libdw.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace memtrace::unwind::detail {

bool LineTable::entry_value(Cursor& c, uint64_t form, unsigned offset_size, const char** str,
                            uint64_t* num) const {
  switch (form) {
    case DW_FORM_string: {
      const char* s = c.cstr();
      if (str != nullptr) *str = s;
      return !c.bad;
    }
    case DW_FORM_line_strp:
    case DW_FORM_strp: {
      const uint64_t off = c.u(offset_size);
      if (c.bad) return false;
      if (str != nullptr) {
        auto [data, size] = form == DW_FORM_line_strp ? sections_.line_str : sections_.str;
        if (data == nullptr || off >= size ||
            std::memchr(data + off, 0, size - static_cast<size_t>(off)) == nullptr)
          return false;
        *str = reinterpret_cast<const char*>(data + off);
      }
      return true;
    }
    case DW_FORM_udata: {
      uint64_t v = c.uleb();
      if (num != nullptr) *num = v;
      return !c.bad;
    }
    case DW_FORM_data1: case DW_FORM_data2: case DW_FORM_data4: case DW_FORM_data8: {
      const unsigned n = form == DW_FORM_data1 ? 1 : form == DW_FORM_data2 ? 2
                         : form == DW_FORM_data4 ? 4 : 8;
      uint64_t v = c.u(n);
      if (num != nullptr) *num = v;
      return !c.bad;
    }
    case DW_FORM_data16:
      c.u(8);
      c.u(8);
      return !c.bad && str == nullptr && num == nullptr;
    case DW_FORM_block: {
      uint64_t n = c.uleb();
      if (c.bad || n > static_cast<uint64_t>(c.end - c.p)) return false;
      c.p += n;
      return str == nullptr && num == nullptr;
    }
    default:
      return false;
  }
}

bool LineTable::read_formats(Cursor& c, std::vector<Format>& formats) {
  const uint64_t n = c.u(1);
  for (uint64_t i = 0; i < n && !c.bad; ++i) {
    Format f;
    f.content = c.uleb();
    f.form = c.uleb();
    formats.push_back(f);
  }
  return !c.bad;
}

bool LineTable::read(Dwarf_Die* cudie, const unsigned char* section, size_t size) {
  Dwarf_CU* cu = cudie->cu;
  Dwarf_Half cu_version = 0;
  uint8_t unit_type = 0, addr_size = 0, cu_offset_size = 0;
  Dwarf_Word stmt_list = 0;
  const char* comp_dir = nullptr;
  {
    LibdwLock lock(libdw_mutex());
    if (dwarf_cu_info(cu, &cu_version, &unit_type, nullptr, nullptr, nullptr, &addr_size,
                      &cu_offset_size) != 0 ||
        (unit_type != DW_UT_compile && unit_type != DW_UT_partial) ||
        (addr_size != 4 && addr_size != 8))
      return false;
    Dwarf_Attribute attr;
    if (dwarf_formudata(dwarf_attr(cudie, DW_AT_stmt_list, &attr), &stmt_list) != 0 ||
        stmt_list >= size)
      return false;
    comp_dir = dwarf_formstring(dwarf_attr(cudie, DW_AT_comp_dir, &attr));
  }

  Header header;
  if (!read_header(section + stmt_list, section + size, cu_offset_size, addr_size, header)) return false;
  Cursor h{header.entries, header.program};
  if (!(header.version < 5 ? read_files_v4(h, comp_dir) : read_files_v5(h, header.offset_size)))
    return false;
  if (h.bad || h.p != header.program) return false;

  std::vector<Seq> seqs;
  std::vector<Row> read_rows;
  if (!run_program(header, read_rows, seqs)) return false;
  put_in_order(read_rows, seqs);
  return true;
}

bool LineTable::read_header(const unsigned char* at, const unsigned char* end, unsigned cu_offset_size,
                            unsigned addr_size, Header& h) {
  Cursor c{at, end};
  uint64_t unit_length = c.u(4);
  h.offset_size = 4;
  if (unit_length == 0xffffffff) {
    unit_length = c.u(8);
    h.offset_size = 8;
  }
  if (c.bad || h.offset_size != cu_offset_size || unit_length > static_cast<uint64_t>(c.end - c.p))
    return false;
  c.end = c.p + unit_length;
  h.end = c.end;
  h.addr_size = addr_size;
  h.version = static_cast<unsigned>(c.u(2));
  if (c.bad || h.version < 2 || h.version > 5) return false;
  if (h.version >= 5) {
    if (c.u(1) != addr_size || c.u(1) != 0) return false;
  }
  const uint64_t header_length = c.u(h.offset_size);
  if (c.bad || header_length > static_cast<uint64_t>(c.end - c.p)) return false;
  h.program = c.p + header_length;
  h.min_len = static_cast<unsigned>(c.u(1));
  unsigned max_ops = 1;
  if (h.version >= 4) max_ops = static_cast<unsigned>(c.u(1));
  c.u(1);  // default_is_stmt: only file and line are kept
  h.line_base = static_cast<int8_t>(c.u(1));
  h.line_range = static_cast<unsigned>(c.u(1));
  h.opcode_base = static_cast<unsigned>(c.u(1));
  // Only the common case: one operation per instruction (every target but VLIW ones).
  if (c.bad || max_ops != 1 || h.line_range == 0 || h.opcode_base == 0) return false;
  if (static_cast<size_t>(c.end - c.p) < h.opcode_base - 1) return false;
  h.std_lengths = c.p - 1;  // indexed by opcode, from 1
  c.p += h.opcode_base - 1;
  // libdw checks the argument counts it relies on for the standard opcodes it knows.
  static const unsigned char expected[13] = {0, 0, 1, 1, 1, 1, 0, 0, 0, 1, 0, 0, 1};
  for (unsigned op = 1; op < 13 && op < h.opcode_base; ++op)
    if (h.std_lengths[op] != expected[op]) return false;
  h.entries = c.p;
  return true;
}

bool LineTable::read_files_v4(Cursor& h, const char* comp_dir) {
  std::vector<const char*> dirs;
  dirs.push_back(comp_dir);
  while (h.p < h.end && *h.p != 0) dirs.push_back(h.cstr());
  h.u(1);
  files_.emplace_back("???");
  while (!h.bad && h.p < h.end && *h.p != 0) {
    const char* name = h.cstr();
    const uint64_t dir = h.uleb();
    h.uleb();  // mtime
    h.uleb();  // length
    if (h.bad || dir >= dirs.size()) return false;
    files_.push_back(join(dirs[dir], name));
  }
  h.u(1);
  return true;
}

bool LineTable::read_files_v5(Cursor& h, unsigned offset_size) {
  std::vector<const char*> dirs;
  std::vector<Format> formats;
  if (!read_formats(h, formats)) return false;
  const uint64_t ndirs = h.uleb();
  if (h.bad || (!formats.empty() && ndirs > static_cast<uint64_t>(h.end - h.p) / formats.size()) ||
      (formats.empty() && ndirs != 0))
    return false;
  for (uint64_t i = 0; i < ndirs; ++i) {
    const char* dir = nullptr;
    for (const Format& f : formats) {
      const bool path = f.content == DW_LNCT_path;
      if (!entry_value(h, f.form, offset_size, path ? &dir : nullptr, nullptr)) return false;
    }
    if (dir == nullptr) return false;
    dirs.push_back(dir);
  }
  formats.clear();
  if (!read_formats(h, formats)) return false;
  const uint64_t nfiles = h.uleb();
  if (h.bad || (!formats.empty() && nfiles > static_cast<uint64_t>(h.end - h.p) / formats.size()) ||
      (formats.empty() && nfiles != 0))
    return false;
  for (uint64_t i = 0; i < nfiles; ++i) {
    const char* name = nullptr;
    uint64_t dir = ~uint64_t{0};
    bool have_dir = false;
    for (const Format& f : formats) {
      if (f.content == DW_LNCT_path) {
        if (!entry_value(h, f.form, offset_size, &name, nullptr)) return false;
      } else if (f.content == DW_LNCT_directory_index) {
        if (!entry_value(h, f.form, offset_size, nullptr, &dir)) return false;
        have_dir = true;
      } else if (!entry_value(h, f.form, offset_size, nullptr, nullptr)) {
        return false;
      }
    }
    if (name == nullptr || !have_dir || dir >= dirs.size()) return false;
    files_.push_back(join(dirs[dir], name));
  }
  if (files_.empty()) files_.emplace_back("???");
  return true;
}

bool LineTable::run_program(const Header& h, std::vector<Row>& read_rows, std::vector<Seq>& seqs) {
  Cursor p{h.program, h.end};
  const unsigned min_len = h.min_len;
  const unsigned opcode_base = h.opcode_base;
  const unsigned line_range = h.line_range;
  const int line_base = h.line_base;
  const unsigned addr_size = h.addr_size;
  const unsigned char* std_lengths = h.std_lengths;
  read_rows.reserve(static_cast<size_t>(h.end - h.program) / 3);  // GCC's: about 3 bytes a row
  size_t seq_begin = 0;
  Dwarf_Addr addr = 0;
  int64_t line = 1;
  uint64_t file = 1;
  auto emit = [&](bool end) {
    if (line < INT32_MIN || line > INT32_MAX || file >= (1u << 31)) return false;
    // A row that repeats the file and line of the row before it in its sequence changes no
    // answer (a lookup takes the last row at or below an address, and only file and line are
    // kept): it is left out, which spares a good part of the rows (columns, views and
    // is_stmt changes make most of the repeats).
    if (!end && read_rows.size() > seq_begin) {
      const Row& last = read_rows.back();
      if (!last.end && last.line == line && last.file == file && last.addr <= addr) return true;
    }
    read_rows.push_back({addr, static_cast<int>(line), static_cast<uint32_t>(file), end ? 1u : 0u});
    return true;
  };
  auto advance = [&](uint64_t ops) {
    if (ops > 0xffffffffu) return false;  // libdw reads it into 32 bits
    addr += static_cast<uint32_t>(min_len * static_cast<uint32_t>(ops));  // and multiplies so
    return true;
  };
  // Each special opcode's line and address steps, worked out once: a row costs a table
  // lookup instead of a division.
  struct Special {
    int line;
    uint32_t addr;  // as advance() adds it: 32 bits, as libdw does
  } special[256] = {};
  for (unsigned op = opcode_base; op < 256; ++op) {
    const unsigned adj = op - opcode_base;
    special[op] = {line_base + static_cast<int>(adj % line_range),
                   static_cast<uint32_t>(min_len * (adj / line_range))};
  }
  while (p.p < p.end) {
    const unsigned op = *p.p++;
    if (op >= opcode_base) {
      line += special[op].line;
      addr += special[op].addr;
      if (!emit(false)) return false;
    } else if (op == 0) {
      if (p.end - p.p < 2) return false;
      const unsigned len = *p.p++;
      if (len >= 0x80 || static_cast<size_t>(p.end - p.p) < len) return false;
      const unsigned sub = *p.p++;
      switch (sub) {
        case DW_LNE_end_sequence:
          if (!emit(true)) return false;
          seqs.push_back({read_rows[seq_begin].addr, seq_begin, read_rows.size()});
          seq_begin = read_rows.size();
          addr = 0;
          line = 1;
          file = 1;
          break;
        case DW_LNE_set_address:
          addr = p.u(addr_size);
          break;
        case DW_LNE_set_discriminator:
          if (p.uleb() >= (1u << 24)) return false;
          break;
        case DW_LNE_define_file:
          return false;
        default:
          if (sub >= 0x80) return false;  // vendor extensions libdw may interpret
          if (len == 0 || static_cast<size_t>(p.end - p.p) < len - 1) return false;
          p.p += len - 1;
          break;
      }
    } else if (op <= DW_LNS_set_isa) {
      switch (op) {
        case DW_LNS_copy:
          if (!emit(false)) return false;
          break;
        case DW_LNS_advance_pc:
          if (!advance(p.uleb())) return false;
          break;
        case DW_LNS_advance_line: {
          const int64_t d = p.sleb();
          if (d < INT32_MIN || d > INT32_MAX) return false;
          line += d;
          break;
        }
        case DW_LNS_set_file: {
          const uint64_t f = p.uleb();
          if (f > 0xffffffffu) return false;
          file = f;
          break;
        }
        case DW_LNS_set_column:
          if (p.uleb() > 0xffff) return false;  // libdw keeps 16 bits and rejects more
          break;
        case DW_LNS_const_add_pc:
          advance((255 - opcode_base) / line_range);
          break;
        case DW_LNS_fixed_advance_pc:
          addr += p.u(2);
          break;
        case DW_LNS_set_isa:
          if (p.uleb() > 0xff) return false;
          break;
        default:  // negate_stmt, basic_block, prologue_end, epilogue_begin: no effect here
          break;
      }
    } else {
      for (unsigned n = std_lengths[op]; n > 0; --n) p.uleb();
    }
    if (p.bad) return false;
  }
  // Rows after the last end_sequence still count (libdw keeps them).
  if (seq_begin < read_rows.size()) seqs.push_back({read_rows[seq_begin].addr, seq_begin, read_rows.size()});
  return true;
}

void LineTable::put_in_order(std::vector<Row>& read_rows, std::vector<Seq>& seqs) {
  // libdw's order is by (address, end_sequence rows first, read order). A sequence's rows
  // usually come in that order already, but for its end row, which must go before the rows
  // just above it at its own address; with that moved, sequences sorted by start address
  // and laid end to end are in libdw's order wherever each neighbouring pair is, which one
  // pass checks (across sequences, read order is the sequences'). Otherwise all rows are
  // sorted by the rule.
  for (const Seq& q : seqs) {
    if (!read_rows[q.end - 1].end) continue;
    size_t k = q.end - 1;
    while (k > q.begin && read_rows[k - 1].addr == read_rows[q.end - 1].addr &&
           !read_rows[k - 1].end)
      --k;
    if (k < q.end - 1)
      std::rotate(read_rows.begin() + static_cast<ptrdiff_t>(k),
                  read_rows.begin() + static_cast<ptrdiff_t>(q.end - 1),
                  read_rows.begin() + static_cast<ptrdiff_t>(q.end));
  }
  const bool seqs_in_read_order = std::is_sorted(
      seqs.begin(), seqs.end(), [](const Seq& a, const Seq& b) { return a.start < b.start; });
  if (!seqs_in_read_order)
    std::stable_sort(seqs.begin(), seqs.end(),
                     [](const Seq& a, const Seq& b) { return a.start < b.start; });
  auto before = [](const Row& a, const Row& b) {  // libdw's order, read order aside
    return a.addr != b.addr ? a.addr < b.addr : a.end > b.end;
  };
  bool in_order = true;
  for (size_t n = 0; n < seqs.size() && in_order; ++n) {
    const Seq& q = seqs[n];
    for (size_t i = q.begin + 1; i < q.end && in_order; ++i)
      in_order = !before(read_rows[i], read_rows[i - 1]);
    if (n > 0 && in_order) {
      const Row& a = read_rows[seqs[n - 1].end - 1];
      const Row& b = read_rows[q.begin];
      in_order = before(a, b) || (!before(b, a) && seqs[n - 1].begin < q.begin);
    }
  }
  if (in_order && seqs_in_read_order) {
    rows_ = std::move(read_rows);
  } else if (in_order) {
    rows_.reserve(read_rows.size());
    for (const Seq& q : seqs)
      rows_.insert(rows_.end(), read_rows.begin() + static_cast<ptrdiff_t>(q.begin),
                   read_rows.begin() + static_cast<ptrdiff_t>(q.end));
  } else {
    rows_ = std::move(read_rows);
    std::stable_sort(rows_.begin(), rows_.end(), before);
  }
  if (!rows_.empty()) rows_.back().end = 1;
}

const std::string* line_table_file(const LineTable* table, uint64_t index) {
  return table->file(index);
}

}  // namespace memtrace::unwind::detail
