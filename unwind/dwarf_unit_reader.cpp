#include "unwind/dwarf_unit_reader.hpp"

#include "unwind/libdw_lock.hpp"

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <gelf.h>
#include <libelf.h>

#include <cstring>
#include <memory>
#include <utility>
#include <vector>

namespace memtrace::unwind::detail {

bool UnitReader::open(Dwarf_Die* cudie) {
  LibdwLock lock(libdw_mutex());
  cu = cudie->cu;
  Dwarf_Die tmp;
  Dwarf_Half version = 0;
  Dwarf_Off abbrev_off = 0;
  if (dwarf_cu_die(cu, &tmp, &version, &abbrev_off, &addr_size_, &offset_size_, nullptr,
                   nullptr) == nullptr)
    return false;
  abbrev_off_ = abbrev_off;
  own_abbrevs_ = read_abbrevs();
  version_ = version;
  if ((addr_size_ != 4 && addr_size_ != 8) || (offset_size_ != 4 && offset_size_ != 8))
    return false;
  const Dwarf_Off die_off = dwarf_dieoffset(cudie);
  const Dwarf_Off unit_off = die_off - dwarf_cuoffset(cudie);
  section_ = static_cast<const unsigned char*>(cudie->addr) - die_off;
  Dwarf_Off next = 0;
  size_t header = 0;
  if (dwarf_next_unit(dwarf_cu_getdwarf(cu), unit_off, &next, &header, nullptr, nullptr, nullptr,
                      nullptr, nullptr, nullptr) != 0)
    return false;
  unit_ = section_ + unit_off;
  end_ = section_ + next;
  find_range_lists(cudie);
  return static_cast<const unsigned char*>(cudie->addr) < end_;
}

const UnitReader::Abbrev* UnitReader::read_die(const unsigned char*& p, Attrs* at) {
  const unsigned char* die_addr = p;
  uint64_t code = 0;
  if (!uleb(p, code)) return nullptr;
  if (code == 0) return &null_;
  const Abbrev* a = abbrev(code, die_addr);
  if (a == nullptr) return nullptr;
  // A DIE with neither children nor an address range (parameters, variables, members:
  // most DIEs) is only stepped over, so none of its values are read.
  if (!a->children && !a->may_have_pc) at = nullptr;
  bool have_low = false, have_high = false, high_is_offset = false;
  Dwarf_Addr low = 0, high = 0;
  // Reads one of the attributes the walk wants, its value at v.
  auto take = [&](unsigned name, unsigned form, const unsigned char* v) __attribute__((always_inline)) {
    if (name == DW_AT_sibling) {
      const unsigned char* target = ref_target(form, v);
      if (target == nullptr || target < die_addr || target > end_) return false;
      at->sibling = target;
    } else if (name == DW_AT_abstract_origin) {
      const unsigned char* target = ref_target(form, v);
      if (target != nullptr && target >= unit_ && target < end_) at->origin = target;
    } else if (name == DW_AT_ranges && form == DW_FORM_sec_offset) {
      at->ranges_offset = fixed(v, offset_size_);
      at->has_ranges_offset = true;
    } else if (name == DW_AT_low_pc && form == DW_FORM_addr) {
      low = fixed(v, addr_size_);
      have_low = true;
    } else if (name == DW_AT_high_pc) {
      switch (form) {
        case DW_FORM_addr: high = fixed(v, addr_size_); have_high = true; break;
        case DW_FORM_data1: high = fixed(v, 1); have_high = high_is_offset = true; break;
        case DW_FORM_data2: high = fixed(v, 2); have_high = high_is_offset = true; break;
        case DW_FORM_data4: high = fixed(v, 4); have_high = high_is_offset = true; break;
        case DW_FORM_data8: high = fixed(v, 8); have_high = high_is_offset = true; break;
        case DW_FORM_udata: uleb(v, high); have_high = high_is_offset = true; break;
        default: break;
      }
    }
    return true;
  };
  if (at == nullptr && a->fixed_size < 0 && a->plan_ok) {
    for (const Abbrev::Step& st : a->plan) {
      if (st.before > static_cast<size_t>(end_ - p)) return nullptr;
      p += st.before;
      if (!skip_variable(p, st.form)) return nullptr;
    }
    if (a->tail > static_cast<size_t>(end_ - p)) return nullptr;
    p += a->tail;
  } else if (a->fixed_size >= 0) {
    if (a->fixed_size > end_ - p) return nullptr;
    if (at != nullptr)
      for (const Abbrev::Wanted& w : a->wanted)
        if (!take(w.name, w.form, p + w.offset)) return nullptr;
    p += a->fixed_size;
  } else {
    for (auto [name, form] : a->attrs) {
      const unsigned char* v = p;
      if (!skip(p, form)) return nullptr;
      if (at != nullptr && !take(name, form, v)) return nullptr;
    }
  }
  if (at != nullptr && a->has_high) at->has_high = true;
  if (at != nullptr && have_low && have_high) {
    at->simple_pc = true;
    at->low = low;
    at->high = high_is_offset ? low + high : high;
  }
  return a;
}

bool UnitReader::range_list(uint64_t offset,
                            std::vector<std::pair<Dwarf_Addr, Dwarf_Addr>>& out) const {
  if (lists_ == nullptr || offset >= lists_size_) return false;
  const unsigned char* p = lists_ + offset;
  const unsigned char* end = lists_ + lists_size_;
  const size_t first = out.size();
  Dwarf_Addr base = unit_base_;
  auto fail = [&] {
    out.resize(first);
    return false;
  };
  auto addr = [&](Dwarf_Addr& v) {
    if (static_cast<size_t>(end - p) < addr_size_) return false;
    v = fixed(p, addr_size_);
    p += addr_size_;
    return true;
  };
  auto leb = [&](uint64_t& v) {
    v = 0;
    for (unsigned shift = 0; p < end; shift += 7) {
      unsigned char b = *p++;
      if (shift < 64) v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return true;
    }
    return false;
  };
  for (int n = 0; n < 1 << 20; ++n) {
    Dwarf_Addr a = 0, b = 0;
    if (version_ < 5) {
      if (!addr(a) || !addr(b)) return fail();
      const Dwarf_Addr all_ones = addr_size_ == 8 ? ~Dwarf_Addr{0} : 0xffffffffu;
      if (a == 0 && b == 0) return true;
      if (a == all_ones) {
        base = b;
        continue;
      }
      out.push_back({base + a, base + b});
      continue;
    }
    if (p >= end) return fail();
    switch (*p++) {
      case DW_RLE_end_of_list:
        return true;
      case DW_RLE_offset_pair:
        if (!leb(a) || !leb(b)) return fail();
        out.push_back({base + a, base + b});
        break;
      case DW_RLE_base_address:
        if (!addr(base)) return fail();
        break;
      case DW_RLE_start_end:
        if (!addr(a) || !addr(b)) return fail();
        out.push_back({a, b});
        break;
      case DW_RLE_start_length:
        if (!addr(a) || !leb(b)) return fail();
        out.push_back({a, a + b});
        break;
      default:  // the *x kinds index .debug_addr
        return fail();
    }
  }
  return fail();
}

bool UnitReader::naming(const unsigned char* die_addr, Naming& out) {
  const unsigned char* p = die_addr;
  uint64_t code = 0;
  if (!uleb(p, code) || code == 0) return false;
  const Abbrev* a = abbrev(code, die_addr);
  if (a == nullptr) return false;
  for (auto [name, form] : a->attrs) {
    const unsigned char* v = p;
    if (!skip(p, form)) return false;
    switch (name) {
      case DW_AT_linkage_name:
        if (out.linkage == nullptr && (out.linkage = string_at(form, v)) == nullptr) return false;
        break;
      case DW_AT_MIPS_linkage_name:
        if (out.mips == nullptr && (out.mips = string_at(form, v)) == nullptr) return false;
        break;
      case DW_AT_name:
        if (out.name == nullptr && (out.name = string_at(form, v)) == nullptr) return false;
        break;
      case DW_AT_abstract_origin:
      case DW_AT_specification: {
        const unsigned char*& slot = name == DW_AT_abstract_origin ? out.origin : out.spec;
        if (slot != nullptr) break;
        slot = ref_target(form, v);
        if (slot == nullptr || slot < unit_ || slot >= end_) return false;
        break;
      }
      case DW_AT_call_file:
        if (!out.has_call_file && !(out.has_call_file = constant(form, v, out.call_file))) return false;
        break;
      case DW_AT_call_line:
        if (!out.has_call_line && !(out.has_call_line = constant(form, v, out.call_line))) return false;
        break;
      default:
        break;
    }
  }
  return true;
}

const unsigned char* UnitReader::skip_children(const unsigned char* p, int depth) {
  if (depth > 256) return nullptr;
  for (;;) {
    Attrs at;
    const Abbrev* a = read_die(p, &at);
    if (a == nullptr) return nullptr;
    if (a->code == 0) return p;
    if (!a->children) continue;
    p = at.sibling != nullptr ? at.sibling : skip_children(p, depth + 1);
    if (p == nullptr) return nullptr;
  }
}

void UnitReader::find_range_lists(Dwarf_Die* cudie) {
  Dwarf_Addr base = 0;
  if (dwarf_lowpc(cudie, &base) != 0) return;
  Elf* elf = dwarf_getelf(dwarf_cu_getdwarf(cu));
  size_t shstrndx = 0;
  if (elf == nullptr || elf_getshdrstrndx(elf, &shstrndx) != 0) return;
  const char* want = version_ >= 5 ? ".debug_rnglists" : ".debug_ranges";
  for (Elf_Scn* scn = nullptr; (scn = elf_nextscn(elf, scn)) != nullptr;) {
    GElf_Shdr sh;
    if (gelf_getshdr(scn, &sh) == nullptr) continue;
    const char* name = elf_strptr(elf, shstrndx, sh.sh_name);
    if (name == nullptr || std::strcmp(name, want) != 0) continue;
    if ((sh.sh_flags & SHF_COMPRESSED) != 0) return;  // left to libdw
    Elf_Data* d = elf_getdata(scn, nullptr);
    if (d == nullptr || d->d_buf == nullptr) return;
    lists_ = static_cast<const unsigned char*>(d->d_buf);
    lists_size_ = d->d_size;
    unit_base_ = base;
    return;
  }
}

bool UnitReader::skip(const unsigned char*& p, unsigned form) const {
  uint64_t n = 0;
  switch (form) {
    case DW_FORM_flag_present:
    case DW_FORM_implicit_const:
      return true;
    case DW_FORM_addr:
      return advance(p, addr_size_);
    case DW_FORM_data1: case DW_FORM_ref1: case DW_FORM_flag: case DW_FORM_strx1:
    case DW_FORM_addrx1:
      return advance(p, 1);
    case DW_FORM_data2: case DW_FORM_ref2: case DW_FORM_strx2: case DW_FORM_addrx2:
      return advance(p, 2);
    case DW_FORM_strx3: case DW_FORM_addrx3:
      return advance(p, 3);
    case DW_FORM_data4: case DW_FORM_ref4: case DW_FORM_ref_sup4: case DW_FORM_strx4:
    case DW_FORM_addrx4:
      return advance(p, 4);
    case DW_FORM_data8: case DW_FORM_ref8: case DW_FORM_ref_sig8: case DW_FORM_ref_sup8:
      return advance(p, 8);
    case DW_FORM_data16:
      return advance(p, 16);
    case DW_FORM_strp: case DW_FORM_line_strp: case DW_FORM_sec_offset: case DW_FORM_strp_sup:
    case DW_FORM_GNU_ref_alt: case DW_FORM_GNU_strp_alt:
      return advance(p, offset_size_);
    case DW_FORM_ref_addr:
      return advance(p, version_ <= 2 ? addr_size_ : offset_size_);
    case DW_FORM_sdata: case DW_FORM_udata: case DW_FORM_ref_udata: case DW_FORM_strx:
    case DW_FORM_addrx: case DW_FORM_loclistx: case DW_FORM_rnglistx:
    case DW_FORM_GNU_addr_index: case DW_FORM_GNU_str_index:
      return uleb(p, n);
    case DW_FORM_string: {
      // Compilers inline only short strings (a parameter's "this", "n"): a plain loop over the
      // first bytes costs less than memchr's set-up, which takes the rest.
      for (int i = 0; i < 16 && p < end_; ++i)
        if (*p++ == 0) return true;
      if (p >= end_) return false;
      const void* nul = std::memchr(p, 0, static_cast<size_t>(end_ - p));
      if (nul == nullptr) return false;
      p = static_cast<const unsigned char*>(nul) + 1;
      return true;
    }
    case DW_FORM_block1:
      if (!advance(p, 0) || p >= end_) return false;
      n = *p++;
      return advance(p, n);
    case DW_FORM_block2:
      if (end_ - p < 2) return false;
      n = fixed(p, 2);
      p += 2;
      return advance(p, n);
    case DW_FORM_block4:
      if (end_ - p < 4) return false;
      n = fixed(p, 4);
      p += 4;
      return advance(p, n);
    case DW_FORM_block: case DW_FORM_exprloc:
      return uleb(p, n) && advance(p, n);
    case DW_FORM_indirect:
      return uleb(p, n) && n != DW_FORM_indirect && n <= 0xffff && skip(p, static_cast<unsigned>(n));
    default:
      return false;
  }
}

const UnitReader::Abbrev* UnitReader::abbrev(uint64_t code, const unsigned char* die_addr) {
  if (own_abbrevs_) return code < by_code_.size() && by_code_[code] != nullptr ? by_code_[code].get() : nullptr;
  std::unique_ptr<Abbrev>* slot;
  if (code < 65536) {
    if (by_code_.size() <= code) by_code_.resize(code + 1);
    slot = &by_code_[code];
  } else {
    slot = &other_codes_[code];
  }
  if (*slot != nullptr) return slot->get();
  // First DIE with this code: libdw parses the abbreviation.
  LibdwLock lock(libdw_mutex());
  Dwarf_Die die{const_cast<unsigned char*>(die_addr), cu, nullptr, 0};
  dwarf_tag(&die);
  Dwarf_Abbrev* da = die.abbrev;
  if (da == nullptr || da == reinterpret_cast<Dwarf_Abbrev*>(-1l) || dwarf_getabbrevcode(da) != code)
    return nullptr;
  auto a = std::make_unique<Abbrev>();
  a->code = static_cast<unsigned>(code);
  a->tag = static_cast<int>(dwarf_getabbrevtag(da));
  a->children = dwarf_abbrevhaschildren(da) > 0;
  // (Read until libdw reports the end: for some declarations GCC 12 emits, elfutils 0.188's
  // dwarf_getattrcnt counts one more than dwarf_getabbrevattr_data returns.)
  for (size_t i = 0;; ++i) {
    unsigned name = 0, form = 0;
    Dwarf_Sword data = 0;
    if (dwarf_getabbrevattr_data(da, i, &name, &form, &data, nullptr) != 0) break;
    if (name > 0xffff || form > 0xffff) return nullptr;
    a->attrs.push_back({static_cast<uint16_t>(name), static_cast<uint16_t>(form)});
  }
  finish(*a);
  *slot = std::move(a);
  return slot->get();
}

void UnitReader::finish(Abbrev& abbrev) const {
  Abbrev* a = &abbrev;
  for (auto [name, form] : a->attrs) {
    if (name == DW_AT_high_pc || name == DW_AT_ranges) a->may_have_pc = true;
    if (name == DW_AT_high_pc) a->has_high = true;
    if (name == DW_AT_name || name == DW_AT_linkage_name || name == DW_AT_MIPS_linkage_name)
      a->has_name = true;
  }
  int offset = 0;
  for (auto [name, form] : a->attrs) {
    if (name == DW_AT_sibling || name == DW_AT_abstract_origin || name == DW_AT_ranges ||
        name == DW_AT_low_pc || name == DW_AT_high_pc)
      a->wanted.push_back({name, form, offset});
    int size = fixed_form_size(form);
    if (size < 0) {
      offset = -1;
      break;
    }
    offset += size;
  }
  a->fixed_size = offset;
  if (offset < 0) {
    uint32_t run = 0;
    a->plan_ok = true;
    for (auto [name, form] : a->attrs) {
      int size = fixed_form_size(form);
      if (size >= 0) {
        run += static_cast<uint32_t>(size);
      } else if (form == DW_FORM_indirect) {
        a->plan_ok = false;
        break;
      } else {
        a->plan.push_back({run, form});
        run = 0;
      }
    }
    a->tail = run;
  }
}

bool UnitReader::read_abbrevs() {
  if (strings.abbrev == nullptr || abbrev_off_ >= strings.abbrev_size) return false;
  const unsigned char* p = strings.abbrev + abbrev_off_;
  const unsigned char* end = strings.abbrev + strings.abbrev_size;
  auto leb = [&](uint64_t& v) {
    v = 0;
    for (unsigned shift = 0; p < end; shift += 7) {
      const unsigned char b = *p++;
      if (shift < 64) v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return true;
    }
    return false;
  };
  std::vector<std::unique_ptr<Abbrev>> table;
  for (;;) {
    uint64_t code = 0, tag = 0;
    if (!leb(code)) return false;
    if (code == 0) break;
    if (code >= 65536 || !leb(tag) || tag > 0xffff || p >= end) return false;
    auto a = std::make_unique<Abbrev>();
    a->code = static_cast<unsigned>(code);
    a->tag = static_cast<int>(tag);
    a->children = *p++ != 0;
    for (;;) {
      uint64_t name = 0, form = 0, unused = 0;
      if (!leb(name) || !leb(form)) return false;
      if (name == 0 && form == 0) break;
      if (name > 0xffff || form > 0xffff) return false;
      if (form == DW_FORM_implicit_const && !leb(unused)) return false;  // an sleb: same bytes
      a->attrs.push_back({static_cast<uint16_t>(name), static_cast<uint16_t>(form)});
    }
    finish(*a);
    if (table.size() <= code) table.resize(code + 1);
    if (table[code] != nullptr) return false;  // a code twice: libdw decides
    table[code] = std::move(a);
  }
  by_code_ = std::move(table);
  return true;
}

}  // namespace memtrace::unwind::detail
