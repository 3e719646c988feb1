// Internal to the Symbolizer (its parts: unwind/symbolizer_impl.hpp); not part of memtrace's interface.
#pragma once
#include <dwarf.h>
#include <elfutils/libdw.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

namespace memtrace::unwind::detail {

// Reads one unit's DIEs straight from the mapped .debug_info, for ScopeIndex's walk: the
// abbreviations come from libdw (once per code), but attribute values are skipped here by
// their forms, since walking a large C++ unit with dwarf_siblingof and asking dwarf_ranges
// of every DIE costs several times more. Anything it does not understand makes the walk
// give up, and the caller then asks libdw per address.
class UnitReader {
 public:
  struct Abbrev {
    unsigned code = 0;  // 0: the null entry ending a sibling list
    int tag = 0;
    bool children = false;
    bool may_have_pc = false;  // DW_AT_high_pc or DW_AT_ranges: dwarf_ranges may answer
    bool has_high = false;     // DW_AT_high_pc
    bool has_name = false;     // DW_AT_name, DW_AT_linkage_name or DW_AT_MIPS_linkage_name
    // When every form has a fixed size in this unit (most DIEs): the attributes' total size,
    // and where the ones the walk reads sit; else fixed_size is -1.
    int fixed_size = -1;
    struct Wanted {
      uint16_t name, form;
      int offset;
    };
    std::vector<Wanted> wanted;
    std::vector<std::pair<uint16_t, uint16_t>> attrs;  // (name, form)
    // How to step over a DIE whose values are not read, when some forms vary in size: each
    // step skips `before` fixed bytes, then one value of a variable form; `tail` bytes end it.
    // Empty (and `plan_ok` false) when a form needs the generic loop (DW_FORM_indirect).
    struct Step {
      uint32_t before;
      uint16_t form;
    };
    std::vector<Step> plan;
    uint32_t tail = 0;
    bool plan_ok = false;
  };
  // What the walk needs of one DIE's attribute values.
  struct Attrs {
    const unsigned char* sibling = nullptr;
    bool simple_pc = false;  // DW_FORM_addr low_pc with an address or offset high_pc
    Dwarf_Addr low = 0, high = 0;
    bool has_high = false;
    bool has_ranges_offset = false;  // DW_AT_ranges as DW_FORM_sec_offset
    uint64_t ranges_offset = 0;
    const unsigned char* origin = nullptr;  // DW_AT_abstract_origin within this unit
  };

  Dwarf_CU* cu = nullptr;

  bool open(Dwarf_Die* cudie);

  // Reads the DIE at p (its code and attributes) and leaves p after them; null on bad data.
  const Abbrev* read_die(const unsigned char*& p, Attrs* at = nullptr);

  // The ranges of a DW_AT_ranges list at `offset` in .debug_rnglists (DWARF 5) or
  // .debug_ranges, as dwarf_ranges would give them, appended to out; false (out unchanged)
  // for anything but the entry kinds a linked, non-split object uses: the caller then asks
  // libdw.
  bool range_list(uint64_t offset, std::vector<std::pair<Dwarf_Addr, Dwarf_Addr>>& out) const;

  const unsigned char* end() const { return end_; }

  // .debug_str and .debug_line_str, for the names naming() reads; null when absent or
  // compressed (then names in them are left to libdw).
  struct Strings {
    const unsigned char* str = nullptr;
    size_t str_size = 0;
    const unsigned char* line_str = nullptr;
    size_t line_str_size = 0;
    const unsigned char* abbrev = nullptr;  // .debug_abbrev, for read_abbrevs()
    size_t abbrev_size = 0;
  };
  Strings strings;

  // What naming a function needs from one DIE: the first value of each attribute below.
  struct Naming {
    const char* linkage = nullptr;  // DW_AT_linkage_name
    const char* mips = nullptr;     // DW_AT_MIPS_linkage_name
    const char* name = nullptr;     // DW_AT_name
    const unsigned char* origin = nullptr;  // DW_AT_abstract_origin, within this unit
    const unsigned char* spec = nullptr;    // DW_AT_specification, within this unit
    bool has_call_file = false, has_call_line = false;
    uint64_t call_file = 0, call_line = 0;
  };
  // Reads the DIE at die_addr; false when any of those attributes uses a form left to libdw
  // (string offsets tables, references out of the unit, implicit constants, ...).
  bool naming(const unsigned char* die_addr, Naming& out);

  // Skips the sibling list starting at p (a DIE's children); the position after its end.
  const unsigned char* skip_children(const unsigned char* p, int depth);

 private:
  const unsigned char* section_ = nullptr;  // .debug_info
  const unsigned char* unit_ = nullptr;     // this unit's header
  const unsigned char* end_ = nullptr;      // one past this unit
  unsigned version_ = 0;
  uint8_t addr_size_ = 0, offset_size_ = 0;
  Abbrev null_;
  // The unit's range-list section and base address (its DW_AT_low_pc); null when either is
  // missing, and then dwarf_ranges reads every list.
  const unsigned char* lists_ = nullptr;
  size_t lists_size_ = 0;
  Dwarf_Addr unit_base_ = 0;

  void find_range_lists(Dwarf_Die* cudie);

  std::vector<std::unique_ptr<Abbrev>> by_code_;  // small codes (GCC and Clang number from 1)
  Dwarf_Off abbrev_off_ = 0;
  bool own_abbrevs_ = false;  // by_code_ holds the whole table, read by read_abbrevs()
  std::unordered_map<uint64_t, std::unique_ptr<Abbrev>> other_codes_;

  static uint64_t fixed(const unsigned char* v, unsigned n) {
    uint64_t x = 0;
    std::memcpy(&x, v, n);  // little-endian host; the data was loaded into this process
    return x;
  }

  // A string attribute's value (at v); null for forms left to libdw or a bad offset.
  const char* string_at(unsigned form, const unsigned char* v) const {
    auto in = [&](const unsigned char* sec, size_t size) -> const char* {
      uint64_t off = fixed(v, offset_size_);
      if (sec == nullptr || off >= size) return nullptr;
      // Terminated inside the section, as libdw checks.
      if (std::memchr(sec + off, 0, size - off) == nullptr) return nullptr;
      return reinterpret_cast<const char*>(sec + off);
    };
    switch (form) {
      case DW_FORM_string: return reinterpret_cast<const char*>(v);  // skip() found its end
      case DW_FORM_strp: return in(strings.str, strings.str_size);
      case DW_FORM_line_strp: return in(strings.line_str, strings.line_str_size);
      default: return nullptr;
    }
  }

  // An unsigned constant as dwarf_formudata reads it, for the forms GCC and Clang use.
  bool constant(unsigned form, const unsigned char* v, uint64_t& out) const {
    switch (form) {
      case DW_FORM_data1: out = fixed(v, 1); return true;
      case DW_FORM_data2: out = fixed(v, 2); return true;
      case DW_FORM_data4: out = fixed(v, 4); return true;
      case DW_FORM_data8: out = fixed(v, 8); return true;
      case DW_FORM_udata: return uleb(v, out);
      default: return false;
    }
  }

  // Where a reference attribute's value (at v) points; null for forms not handled.
  const unsigned char* ref_target(unsigned form, const unsigned char* v) const {
    uint64_t off = 0;
    switch (form) {
      case DW_FORM_ref_addr:
        return version_ >= 3 ? section_ + fixed(v, offset_size_) : nullptr;
      case DW_FORM_ref1: return unit_ + fixed(v, 1);
      case DW_FORM_ref2: return unit_ + fixed(v, 2);
      case DW_FORM_ref4: return unit_ + fixed(v, 4);
      case DW_FORM_ref8: return unit_ + fixed(v, 8);
      case DW_FORM_ref_udata: uleb(v, off); return unit_ + off;
      default: return nullptr;
    }
  }

  bool uleb(const unsigned char*& p, uint64_t& out) const {
    out = 0;
    for (unsigned shift = 0; p < end_; shift += 7) {
      unsigned char b = *p++;
      if (shift < 64) out |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return true;
    }
    return false;
  }

  // A form's size when it is fixed in this unit, else -1.
  int fixed_form_size(unsigned form) const {
    switch (form) {
      case DW_FORM_flag_present: case DW_FORM_implicit_const:
        return 0;
      case DW_FORM_addr:
        return addr_size_;
      case DW_FORM_data1: case DW_FORM_ref1: case DW_FORM_flag: case DW_FORM_strx1:
      case DW_FORM_addrx1:
        return 1;
      case DW_FORM_data2: case DW_FORM_ref2: case DW_FORM_strx2: case DW_FORM_addrx2:
        return 2;
      case DW_FORM_strx3: case DW_FORM_addrx3:
        return 3;
      case DW_FORM_data4: case DW_FORM_ref4: case DW_FORM_ref_sup4: case DW_FORM_strx4:
      case DW_FORM_addrx4:
        return 4;
      case DW_FORM_data8: case DW_FORM_ref8: case DW_FORM_ref_sig8: case DW_FORM_ref_sup8:
        return 8;
      case DW_FORM_data16:
        return 16;
      case DW_FORM_strp: case DW_FORM_line_strp: case DW_FORM_sec_offset: case DW_FORM_strp_sup:
      case DW_FORM_GNU_ref_alt: case DW_FORM_GNU_strp_alt:
        return offset_size_;
      case DW_FORM_ref_addr:
        return version_ <= 2 ? addr_size_ : offset_size_;
      default:
        return -1;
    }
  }

  bool advance(const unsigned char*& p, uint64_t n) const {
    if (n > static_cast<uint64_t>(end_ - p)) return false;
    p += n;
    return true;
  }

  // Steps over one value of a form whose size varies (see Abbrev::plan).
  bool skip_variable(const unsigned char*& p, unsigned form) const {
    switch (form) {
      case DW_FORM_sdata: case DW_FORM_udata: case DW_FORM_ref_udata: case DW_FORM_strx:
      case DW_FORM_addrx: case DW_FORM_loclistx: case DW_FORM_rnglistx:
      case DW_FORM_GNU_addr_index: case DW_FORM_GNU_str_index:
        while (p < end_)
          if ((*p++ & 0x80) == 0) return true;
        return false;
      case DW_FORM_exprloc: case DW_FORM_block: {
        uint64_t n = 0;
        return uleb(p, n) && advance(p, n);
      }
      default:
        return skip(p, form);
    }
  }

  bool skip(const unsigned char*& p, unsigned form) const;

  const Abbrev* abbrev(uint64_t code, const unsigned char* die_addr);

  // What the walk works out once per abbreviation, from its (name, form) list.
  void finish(Abbrev& abbrev) const;

  // The unit's whole abbreviation table, read from .debug_abbrev in one pass into by_code_
  // (libdw's parse, code by code, costs several times more). False, with nothing kept, when
  // the section is not at hand or holds something unexpected: libdw parses then.
  bool read_abbrevs();
};

}  // namespace memtrace::unwind::detail
