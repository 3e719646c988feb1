// Address -> frames with elfutils libdwfl over this process's own mappings.
//
// Names: the ELF symbol table (dwfl_module_addrinfo prefers .symtab, so static functions of
// a program built without -rdynamic have names), demangled. Source lines and inlined frames:
// DWARF, when the module (or its separate debug file, found by build id or .gnu_debuglink)
// has it. Never asks debuginfod: a profiler must not reach the network while writing.
#include "unwind/symbolizer.hpp"

#include <cxxabi.h>
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwelf.h>
#include <elfutils/libdwfl.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "unwind/module_map.hpp"

namespace memtrace::unwind {

namespace {

// The demangled spelling of name (itself when it is not a mangled C++ name), in buf: one
// buffer reused for every name, since __cxa_demangle's result would otherwise be a fresh
// allocation each time.
struct Demangler {
  char* buf = nullptr;
  size_t cap = 0;
  ~Demangler() { std::free(buf); }
  std::string_view operator()(std::string_view name) {
    if (name.size() > 2 && name[0] == '_' && name[1] == 'Z') {
      int status = 0;
      // __cxa_demangle wants a terminated string; names from symbol tables are, but a
      // version-stripped one ("f@@V") is not.
      std::string copy;
      const char* z = name.data();
      if (z[name.size()] != '\0') z = (copy = name).c_str();
      char* d = abi::__cxa_demangle(z, buf, &cap, &status);
      if (d != nullptr) buf = d;
      if (d != nullptr && status == 0) return buf;
    }
    return name;
  }
};

std::string_view base_name(std::string_view p) {
  size_t s = p.rfind('/');
  return s == std::string_view::npos ? p : p.substr(s + 1);
}

// A DIE's function name, mangled: the linkage name when there is one, else DW_AT_name;
// both looked up through abstract origins/specifications. Null when it has neither.
// This is dwarf_attr_integrate (elfutils 0.188) asked for DW_AT_linkage_name, then
// DW_AT_MIPS_linkage_name, then DW_AT_name, done in one walk of the origin chain with one
// pass over each DIE's attributes instead of three per DIE and name: each of those searches
// visits the same DIEs (the DIE, then its DW_AT_abstract_origin or else DW_AT_specification,
// at most 16 hops) and takes the first DIE along it that has the attribute.
const char* die_raw_name(Dwarf_Die* die) {
  struct Seen {
    Dwarf_Attribute linkage, mips, name, origin, spec;
    bool has_linkage = false, has_mips = false, has_name = false, has_origin = false,
         has_spec = false;
  };
  Dwarf_Attribute linkage{}, mips{}, name{};
  bool has_linkage = false, has_mips = false, has_name = false;
  Dwarf_Die* const start = die;
  Dwarf_Die mem;
  int chain = 16;
  do {
    Seen seen;
    dwarf_getattrs(
        die,
        [](Dwarf_Attribute* a, void* arg) -> int {
          auto* s = static_cast<Seen*>(arg);
          auto keep = [a](Dwarf_Attribute& slot, bool& has) {
            if (!has) {
              slot = *a;
              has = true;
            }
          };
          switch (dwarf_whatattr(a)) {
            case DW_AT_linkage_name: keep(s->linkage, s->has_linkage); break;
            case DW_AT_MIPS_linkage_name: keep(s->mips, s->has_mips); break;
            case DW_AT_name: keep(s->name, s->has_name); break;
            case DW_AT_abstract_origin: keep(s->origin, s->has_origin); break;
            case DW_AT_specification: keep(s->spec, s->has_spec); break;
            default: break;
          }
          return DWARF_CB_OK;
        },
        &seen, 0);
    if (seen.has_linkage) {
      linkage = seen.linkage;
      has_linkage = true;
      break;  // the first search ends here, and its answer is taken
    }
    if (seen.has_mips && !has_mips) {
      mips = seen.mips;
      has_mips = true;
    }
    if (seen.has_name && !has_name) {
      name = seen.name;
      has_name = true;
    }
    Dwarf_Attribute* next = seen.has_origin ? &seen.origin : seen.has_spec ? &seen.spec : nullptr;
    if (next == nullptr) break;
    die = dwarf_formref_die(next, &mem);
  } while (die != nullptr && chain-- != 0);
  const char* raw = nullptr;
  if (has_linkage) {
    raw = dwarf_formstring(&linkage);
    // An unreadable linkage name: DW_AT_name along the whole chain, which the walk above
    // stopped short of.
    if (raw == nullptr && dwarf_attr_integrate(start, DW_AT_name, &name) != nullptr)
      raw = dwarf_formstring(&name);
    return raw;
  }
  if (has_mips) raw = dwarf_formstring(&mips);
  if (raw == nullptr && has_name) raw = dwarf_formstring(&name);
  return raw;
}

class LineTable;
const std::string* line_table_file(const LineTable* table, uint64_t index);

// Where an inlined instance was called from: DW_AT_call_file (an index into its unit's
// file table, the unit's line table when it is usable, else libdw's, whose names are kept in
// `names`) and DW_AT_call_line. file stays null when unknown.
void call_site(Dwarf_Die* inlined, const LineTable* table, std::unordered_set<std::string>& names,
               const std::string*& file, int& line) {
  file = nullptr;
  line = 0;
  Dwarf_Attribute attr;
  Dwarf_Word v = 0;
  if (dwarf_formudata(dwarf_attr(inlined, DW_AT_call_line, &attr), &v) == 0)
    line = static_cast<int>(v);
  if (dwarf_formudata(dwarf_attr(inlined, DW_AT_call_file, &attr), &v) == 0) {
    if (table != nullptr) {
      file = line_table_file(table, v);
      return;
    }
    Dwarf_Die cu;
    Dwarf_Files* files = nullptr;
    size_t nfiles = 0;
    if (dwarf_diecu(inlined, &cu, nullptr, nullptr) != nullptr &&
        dwarf_getsrcfiles(&cu, &files, &nfiles) == 0 && v < nfiles) {
      if (const char* f = dwarf_filesrc(files, v, nullptr, nullptr)) file = &*names.emplace(f).first;
    }
  }
}

bool same_file(const char* a, const char* b) {
  struct stat sa, sb;
  return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

// find_debuginfo callback: build-id directories first (what distributions install), then
// the .gnu_debuglink places GDB also looks in. A debuglink candidate must carry the same
// build id as the module when the module has one. Unlike dwfl_standard_find_debuginfo,
// this never falls back to debuginfod.
int find_debuginfo(Dwfl_Module* mod, void** userdata, const char* modname, Dwarf_Addr base,
                   const char* file_name, const char* debuglink_file, GElf_Word debuglink_crc,
                   char** debuginfo_file_name) {
  int fd = dwfl_build_id_find_debuginfo(mod, userdata, modname, base, file_name, debuglink_file,
                                        debuglink_crc, debuginfo_file_name);
  if (fd >= 0 || debuglink_file == nullptr || file_name == nullptr || file_name[0] != '/')
    return fd;
  const unsigned char* want = nullptr;
  GElf_Addr vaddr = 0;
  int want_len = dwfl_module_build_id(mod, &want, &vaddr);
  std::string_view path(file_name);
  std::string dir(path.substr(0, path.rfind('/')));
  const std::string candidates[] = {dir + "/" + debuglink_file, dir + "/.debug/" + debuglink_file,
                                    "/usr/lib/debug" + dir + "/" + debuglink_file};
  for (const std::string& c : candidates) {
    if (same_file(c.c_str(), file_name)) continue;
    int cfd = open(c.c_str(), O_RDONLY | O_CLOEXEC);
    if (cfd < 0) continue;
    bool ok = true;
    if (want_len > 0) {
      ok = false;
      if (Elf* elf = elf_begin(cfd, ELF_C_READ_MMAP, nullptr)) {
        const void* got = nullptr;
        ssize_t got_len = dwelf_elf_gnu_build_id(elf, &got);
        ok = got_len == want_len && std::memcmp(got, want, static_cast<size_t>(want_len)) == 0;
        elf_end(elf);
      }
    }
    if (ok) {
      if (debuginfo_file_name != nullptr) *debuginfo_file_name = strdup(c.c_str());
      return cfd;
    }
    close(cfd);
  }
  return -1;
}


// Reads one unit's DIEs straight from the mapped .debug_info, for the walk below: the
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

  bool open(Dwarf_Die* cudie) {
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

  // Reads the DIE at p (its code and attributes) and leaves p after them; null on bad data.
  const Abbrev* read_die(const unsigned char*& p, Attrs* at = nullptr) {
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

  // The ranges of a DW_AT_ranges list at `offset` in .debug_rnglists (DWARF 5) or
  // .debug_ranges, as dwarf_ranges would give them, appended to out; false (out unchanged)
  // for anything but the entry kinds a linked, non-split object uses: the caller then asks
  // libdw.
  bool range_list(uint64_t offset, std::vector<std::pair<Dwarf_Addr, Dwarf_Addr>>& out) const {
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
  bool naming(const unsigned char* die_addr, Naming& out) {
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

  // Skips the sibling list starting at p (a DIE's children); the position after its end.
  const unsigned char* skip_children(const unsigned char* p, int depth) {
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

  void find_range_lists(Dwarf_Die* cudie) {
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

  bool skip(const unsigned char*& p, unsigned form) const {
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

  const Abbrev* abbrev(uint64_t code, const unsigned char* die_addr) {
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

  // What the walk works out once per abbreviation, from its (name, form) list.
  void finish(Abbrev& abbrev) const {
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

  // The unit's whole abbreviation table, read from .debug_abbrev in one pass into by_code_
  // (libdw's parse, code by code, costs several times more). False, with nothing kept, when
  // the section is not at hand or holds something unexpected: libdw parses then.
  bool read_abbrevs() {
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
};

// A compilation unit's address-bearing DIE tree, walked once (with UnitReader), answering what
// dwarf_getscopes(cu, pc)[0] followed by dwarf_getscopes_die() would: the innermost DIE
// containing pc and its physical parents. It mirrors libdw's scope walk: children are
// visited in DIE order, a DIE without a range containing pc is pruned, and only DIEs that
// may own scopes (lexical blocks, subprograms, inlined subroutines, namespaces, classes...)
// are descended; the first child containing pc at each level is taken. DIEs that have no
// address ranges can never contain pc, so they (and everything below them) are left out.
// A unit that imports partial units (dwz) is marked unusable; the caller then asks libdw.
bool may_have_scopes(int tag) {
  switch (tag) {
    case DW_TAG_compile_unit:
    case DW_TAG_module:
    case DW_TAG_lexical_block:
    case DW_TAG_with_stmt:
    case DW_TAG_catch_block:
    case DW_TAG_try_block:
    case DW_TAG_entry_point:
    case DW_TAG_inlined_subroutine:
    case DW_TAG_subprogram:
    case DW_TAG_namespace:
    case DW_TAG_class_type:
    case DW_TAG_structure_type:
      return true;
    default:
      return false;
  }
}

struct ScopeIndex {
  struct Range {
    Dwarf_Addr low, high;
    int node;  // by DIE order among its siblings
  };
  struct Slot {
    uint32_t begin, end;  // one sibling list's ranges: [begin, end) of ranges/max_high
  };
  static constexpr int kNotRead = -2;
  // Small (no Dwarf_Die): a large unit has tens of thousands.
  struct Node {
    const unsigned char* die;  // in .debug_info; die() makes a Dwarf_Die of it
    // The abstract origin, when the DIE names nothing itself: its name is the origin's, so
    // the many inlined instances of one function look it up once.
    const unsigned char* origin;
    // Its children's sibling list, read the first time an address falls inside the DIE;
    // null when it has none worth reading.
    const unsigned char* kids;
    const unsigned char* end;  // one past its subtree; null when unknown
    int parent;    // -1: a child of the unit
    int children;  // slot of its children's ranges; -1 none; kNotRead until kids is read
    int tag;
    int depth;
    int call_line = 0;
    const std::string* name = nullptr;       // demangled, once looked up
    const std::string* call_file = nullptr;  // null: unknown
    bool have_call = false;
  };
  Dwarf_Die die(const Node& n) const {
    return Dwarf_Die{const_cast<unsigned char*>(n.die), unit.cu, nullptr, 0};
  }
  UnitReader unit;  // kept: children, names and call sites are read through it later
  bool usable = true;
  std::vector<Node> nodes;
  std::vector<Range> ranges;
  std::vector<Dwarf_Addr> max_high;  // running maximum of high within a slot
  std::vector<Slot> slots;
  int unit_slot = -1;
  std::vector<Range> pending;                               // one sibling list's ranges
  std::vector<std::pair<Dwarf_Addr, Dwarf_Addr>> scratch;  // one DIE's ranges

  // Only the unit's own children are read here: a DIE's children are read when an address
  // first falls inside it, so a unit costs in proportion to the code asked about (a
  // function's parameters, variables and inlined calls are most of a unit's DIEs).
  ScopeIndex(Dwarf_Die* cudie, const UnitReader::Strings& strings) {
    unit.strings = strings;
    if (!unit.open(cudie)) {
      usable = false;
      return;
    }
    // GCC gives every DIE that has children a DW_AT_sibling, except the last child of its
    // parent (dwarf2out.cc, add_sibling_attributes). So in GCC's units a DIE with children
    // and no sibling ends where its parent's list does, and is stepped over without reading
    // its subtree. Other producers get the subtree read.
    Dwarf_Attribute attr;
    const char* producer = dwarf_formstring(dwarf_attr(cudie, DW_AT_producer, &attr));
    gcc_ = producer != nullptr && std::strncmp(producer, "GNU ", 4) == 0;
    const unsigned char* p = static_cast<const unsigned char*>(cudie->addr);
    const UnitReader::Abbrev* a = unit.read_die(p);
    if (a == nullptr) {
      usable = false;
      return;
    }
    if (a->children) unit_slot = read_children(-1, p, unit.end(), 0);
  }

  bool gcc_ = false;

  // Reads the sibling list at p, children of parent: a node and ranges for each DIE with
  // address ranges, their subtrees stepped over. The new slot, or -1 when none has ranges.
  // list_end: one past the list's null entry, when known (else null).
  int read_children(int parent, const unsigned char* p, const unsigned char* list_end, int depth) {
    pending.clear();
    if (read_list(parent, p, list_end, depth) == nullptr) return -1;
    if (pending.empty()) return -1;
    // By (low, node): mostly in that order already.
    auto by_low = [](const Range& x, const Range& y) {
      return x.low != y.low ? x.low < y.low : x.node < y.node;
    };
    if (!std::is_sorted(pending.begin(), pending.end(), by_low)) std::sort(pending.begin(), pending.end(), by_low);
    const auto begin = static_cast<uint32_t>(ranges.size());
    Dwarf_Addr m = 0;
    for (const Range& r : pending) {
      ranges.push_back(r);
      max_high.push_back(m = std::max(m, r.high));
    }
    slots.push_back({begin, static_cast<uint32_t>(ranges.size())});
    return static_cast<int>(slots.size()) - 1;
  }

  int fail() {
    usable = false;
    return -1;
  }
  const unsigned char* fail_list() {
    usable = false;
    return nullptr;
  }

  // read_children's walk of one list, appending to pending: the position after the list's
  // null entry, or null when the data cannot be read.
  const unsigned char* read_list(int parent, const unsigned char* p, const unsigned char* list_end,
                                 int depth) {
    if (depth > 256) return fail_list();
    for (;;) {
      const unsigned char* die_addr = p;
      UnitReader::Attrs at;
      const UnitReader::Abbrev* a = unit.read_die(p, &at);
      if (a == nullptr) return fail_list();
      if (a->code == 0) return p;
      if (a->tag == DW_TAG_imported_unit) return fail_list();
      // Where this DIE's subtree ends, when known without reading it.
      const unsigned char* end = nullptr;
      if (a->children) {
        if (at.sibling != nullptr) {
          end = at.sibling;
        } else if (gcc_ && list_end != nullptr && list_end - 1 >= p && list_end[-1] == 0) {
          end = list_end - 1;  // the last child: its parent's null entry follows
        }
      }
      int node = -1;
      auto add_node = [&] {
        node = static_cast<int>(nodes.size());
        const bool descend = a->children && may_have_scopes(a->tag);
        nodes.push_back({die_addr, a->has_name ? nullptr : at.origin, descend ? p : nullptr, end,
                         parent, descend ? kNotRead : -1, a->tag, depth});
      };
      if (at.simple_pc) {
        // dwarf_ranges' answer for a low_pc/high_pc pair, read directly.
        add_node();
        if (at.low < at.high) pending.push_back({at.low, at.high, node});
      } else if (a->may_have_pc && !at.has_high && at.has_ranges_offset &&
                 unit.range_list(at.ranges_offset, (scratch.clear(), scratch))) {
        for (auto [start, end] : scratch) {
          if (node < 0) add_node();
          if (start < end) pending.push_back({start, end, node});
        }
      } else if (a->may_have_pc) {
        Dwarf_Addr base = 0, start = 0, end = 0;
        ptrdiff_t off = 0;
        Dwarf_Die die{const_cast<unsigned char*>(die_addr), unit.cu, nullptr, 0};
        while ((off = dwarf_ranges(&die, off, &base, &start, &end)) > 0) {
          if (node < 0) add_node();
          if (start < end) pending.push_back({start, end, node});
        }
        if (off < 0) return fail_list();
      }
      if (!a->children) continue;
      if (node < 0 && !gcc_ && a->tag == DW_TAG_namespace) {
        // Clang defines functions inside their namespace's DIE (GCC at the unit's level, with
        // DW_AT_specification); a namespace has no ranges, so its children count as the
        // list's own. (libdw 0.188's scope walk prunes them: it finds no scope there at all.)
        p = read_list(parent, p, end, depth + 1);
        if (p == nullptr) return nullptr;
        continue;
      }
      p = end != nullptr ? end : unit.skip_children(p, depth + 1);
      if (p == nullptr) return fail_list();
    }
  }


  // The first child (in DIE order) in slot containing pc, or -1.
  int first_containing(int slot, Dwarf_Addr pc) const {
    const size_t b = slots[slot].begin, e = slots[slot].end;
    auto it = std::upper_bound(ranges.begin() + static_cast<ptrdiff_t>(b),
                               ranges.begin() + static_cast<ptrdiff_t>(e), pc,
                               [](Dwarf_Addr v, const Range& r) { return v < r.low; });
    int best = -1;
    for (size_t i = static_cast<size_t>(it - ranges.begin()); i-- > b;) {
      if (max_high[i] <= pc) break;
      const Range& r = ranges[i];
      if (r.high > pc && (best < 0 || r.node < best)) best = r.node;
    }
    return best;
  }

  // The innermost DIE containing pc, or -1; reads children as it goes down. When the data
  // turns out unreadable, usable becomes false and the caller asks libdw instead.
  int innermost(Dwarf_Addr pc) {
    int found = -1;
    for (int slot = unit_slot; slot >= 0;) {
      int n = first_containing(slot, pc);
      if (n < 0) break;
      found = n;
      if (nodes[n].children == kNotRead) {
        int read = read_children(n, nodes[n].kids, nodes[n].end, nodes[n].depth + 1);
        if (!usable) return -1;
        nodes[n].children = read;
      }
      slot = nodes[n].children;
    }
    return found;
  }
};

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

  static bool read_formats(Cursor& c, std::vector<Format>& formats) {
    const uint64_t n = c.u(1);
    for (uint64_t i = 0; i < n && !c.bad; ++i) {
      Format f;
      f.content = c.uleb();
      f.form = c.uleb();
      formats.push_back(f);
    }
    return !c.bad;
  }

  bool read(Dwarf_Die* cudie, const unsigned char* section, size_t size) {
    Dwarf_CU* cu = cudie->cu;
    Dwarf_Half cu_version = 0;
    uint8_t unit_type = 0, addr_size = 0, cu_offset_size = 0;
    if (dwarf_cu_info(cu, &cu_version, &unit_type, nullptr, nullptr, nullptr, &addr_size,
                      &cu_offset_size) != 0 ||
        (unit_type != DW_UT_compile && unit_type != DW_UT_partial) ||
        (addr_size != 4 && addr_size != 8))
      return false;
    Dwarf_Attribute attr;
    Dwarf_Word stmt_list = 0;
    if (dwarf_formudata(dwarf_attr(cudie, DW_AT_stmt_list, &attr), &stmt_list) != 0 ||
        stmt_list >= size)
      return false;
    const char* comp_dir = dwarf_formstring(dwarf_attr(cudie, DW_AT_comp_dir, &attr));

    // Header.
    Cursor c{section + stmt_list, section + size};
    uint64_t unit_length = c.u(4);
    unsigned offset_size = 4;
    if (unit_length == 0xffffffff) {
      unit_length = c.u(8);
      offset_size = 8;
    }
    if (c.bad || offset_size != cu_offset_size || unit_length > static_cast<uint64_t>(c.end - c.p))
      return false;
    c.end = c.p + unit_length;
    const unsigned version = static_cast<unsigned>(c.u(2));
    if (c.bad || version < 2 || version > 5) return false;
    if (version >= 5) {
      if (c.u(1) != addr_size || c.u(1) != 0) return false;
    }
    const uint64_t header_length = c.u(offset_size);
    if (c.bad || header_length > static_cast<uint64_t>(c.end - c.p)) return false;
    const unsigned char* program = c.p + header_length;
    const unsigned min_len = static_cast<unsigned>(c.u(1));
    unsigned max_ops = 1;
    if (version >= 4) max_ops = static_cast<unsigned>(c.u(1));
    const unsigned default_is_stmt = static_cast<unsigned>(c.u(1));
    const int line_base = static_cast<int8_t>(c.u(1));
    const unsigned line_range = static_cast<unsigned>(c.u(1));
    const unsigned opcode_base = static_cast<unsigned>(c.u(1));
    // Only the common case: one operation per instruction (every target but VLIW ones).
    if (c.bad || max_ops != 1 || line_range == 0 || opcode_base == 0) return false;
    (void)default_is_stmt;
    if (static_cast<size_t>(c.end - c.p) < opcode_base - 1) return false;
    const unsigned char* std_lengths = c.p - 1;  // indexed by opcode, from 1
    c.p += opcode_base - 1;
    // libdw checks the argument counts it relies on for the standard opcodes it knows.
    static const unsigned char expected[13] = {0, 0, 1, 1, 1, 1, 0, 0, 0, 1, 0, 0, 1};
    for (unsigned op = 1; op < 13 && op < opcode_base; ++op)
      if (std_lengths[op] != expected[op]) return false;

    // Directories and files.
    Cursor h{c.p, program};
    std::vector<const char*> dirs;
    if (version < 5) {
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
    } else {
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
    }
    if (h.bad || h.p != program) return false;

    // The line program.
    Cursor p{program, c.end};
    struct Seq {
      Dwarf_Addr start;
      size_t begin, end;
    };
    std::vector<Seq> seqs;
    std::vector<Row> read_rows;
    read_rows.reserve(static_cast<size_t>(c.end - program) / 3);  // GCC's: about 3 bytes a row
    size_t seq_begin = 0;
    Dwarf_Addr addr = 0;
    int64_t line = 1;
    uint64_t file = 1;
    auto emit = [&](bool end) {
      if (line < INT32_MIN || line > INT32_MAX || file >= (1u << 31)) return false;
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
    return true;
  }

};

const std::string* line_table_file(const LineTable* table, uint64_t index) {
  return table->file(index);
}

// A module's ELF symbol table, read once, answering exactly what dwfl_module_addrinfo(mod,
// addr) answers (elfutils 0.188, libdwfl/dwfl_module_addrsym.c) without its per-address scan
// of every symbol. The rules it reproduces:
//  - Eligible: a non-empty name, st_shndx != SHN_UNDEF, value <= addr, type not STT_SECTION,
//    STT_FILE or STT_TLS (objects and untyped labels count, not only functions).
//  - Two passes: the globals [first_global, n) first (from 1 when first_global is 0); the
//    locals [1, first_global) only when the globals gave no sized symbol containing addr and
//    no sizeless global sits exactly at addr.
//  - A sized symbol containing addr (addr - value < st_size) always wins over sizeless ones.
//    Within a pass they are folded in table order: a candidate replaces the current one if
//    its value is higher or its binding (GLOBAL 3 > WEAK 2 > LOCAL 1 > other 0) is better;
//    at an equal value a smaller size with a binding no worse also replaces. The fold is
//    order dependent, so it is run here too, once per stretch of addresses covered by the
//    same set of containing symbols.
//  - Otherwise a sizeless symbol: with M the highest value + st_size over the eligible
//    symbols of the passes run, the last one (in scan order) of the sizeless ones at value M
//    that lie in addr's section (by libdwfl's section lookup; for SHN_ABS and other reserved
//    indices, or non-allocated sections, only value == addr). Nothing at all when none does:
//    an address past a sized symbol's end with no label after it gets no name.
// Symbol values are not "resolved" (function descriptors, ppc64 ELFv1 .opd): libdwfl does
// that only for ppc64; elsewhere dwfl_module_addrinfo sees the values dwfl_module_getsym_info
// returns, as this index does.
// Sorts by .first, stably: a radix sort a byte at a time, skipping the bytes every key shares
// (a module's addresses differ in their low few bytes only). std::sort's comparisons cost
// several times more on a symbol table.
template <class T>
void radix_sort_by_first(std::vector<std::pair<uint64_t, T>>& v) {
  if (v.size() < 2) return;
  uint64_t any = 0, all = ~uint64_t{0};
  for (const auto& e : v) {
    any |= e.first;
    all &= e.first;
  }
  const uint64_t varying = any ^ all;
  std::vector<std::pair<uint64_t, T>> out(v.size());
  for (unsigned shift = 0; shift < 64; shift += 8) {
    if (((varying >> shift) & 0xff) == 0) continue;
    size_t at[257] = {};
    for (const auto& e : v) ++at[((e.first >> shift) & 0xff) + 1];
    for (size_t b = 1; b < 257; ++b) at[b] += at[b - 1];
    for (const auto& e : v) out[at[(e.first >> shift) & 0xff]++] = e;
    v.swap(out);
  }
}

class SymbolIndex {
 public:
  explicit SymbolIndex(Dwfl_Module* mod) : mod_(mod) {
    int n = dwfl_module_getsymtab(mod);
    if (n < 0) return;
    first_global_ = dwfl_module_getsymtab_first_global(mod);
    if (first_global_ < 0) return;
    usable_ = true;
    globals_.build(mod, first_global_ == 0 ? 1 : first_global_, n);
    if (first_global_ > 1) locals_.build(mod, 1, first_global_);
  }

  // The name dwfl_module_addrinfo would give addr, or null.
  const char* lookup(GElf_Addr addr) const {
    if (!usable_) return nullptr;
    if (const Sym* s = globals_.sized_at(addr)) return s->name;
    const bool locals = first_global_ > 1 && !globals_.sizeless_at(addr);
    if (locals) {
      if (const Sym* s = locals_.sized_at(addr)) return s->name;
    }
    GElf_Addr m = globals_.max_end(addr);
    if (locals) m = std::max(m, locals_.max_end(addr));
    // Later in scan order wins: the locals pass comes after the globals pass.
    if (locals) {
      if (const Sym* s = locals_.last_sizeless(m, addr, *this)) return s->name;
    }
    if (const Sym* s = globals_.last_sizeless(m, addr, *this)) return s->name;
    return nullptr;
  }

 private:
  struct Sym {
    GElf_Addr value;
    GElf_Xword size;
    const char* name;
    GElf_Word shndx;  // as dwfl_module_getsym_info gives it: -1 for a non-allocated section
    int ndx;          // index in the module's symbol table: the scan order
    int bind;         // binding_value()
  };

  static int binding_value(unsigned char info) {
    switch (GELF_ST_BIND(info)) {
      case STB_GLOBAL: return 3;
      case STB_WEAK: return 2;
      case STB_LOCAL: return 1;
      default: return 0;
    }
  }

  // libdwfl's section of an address (its find_section, through the public entry point that
  // uses it): the section index, or SHN_UNDEF.
  size_t section_of(GElf_Addr addr) const {
    Dwarf_Addr a = addr, bias = 0;
    Elf_Scn* scn = dwfl_module_address_section(mod_, &a, &bias);
    return scn != nullptr ? elf_ndxscn(scn) : SHN_UNDEF;
  }

  struct Table {
    std::vector<Sym> syms;            // eligible symbols, by (value, ndx)
    std::vector<GElf_Addr> values;    // syms[i].value
    std::vector<GElf_Addr> max_ends;  // max of value + size (wrapping as libdwfl's) over syms[0..i]
    std::vector<int> sizeless;        // indices into syms of the st_size == 0 ones (same order)
    std::vector<GElf_Addr> seg_start; // stretches of addresses with one sized winner
    std::vector<int> seg_winner;      // index into syms, or -1

    void build(Dwfl_Module* mod, int from, int to) {
      for (int i = from; i < to; ++i) {
        GElf_Sym sym;
        GElf_Addr value = 0;
        GElf_Word shndx = 0;
        const char* name = dwfl_module_getsym_info(mod, i, &sym, &value, &shndx, nullptr, nullptr);
        if (name == nullptr || name[0] == '\0' || sym.st_shndx == SHN_UNDEF) continue;
        int type = GELF_ST_TYPE(sym.st_info);
        if (type == STT_SECTION || type == STT_FILE || type == STT_TLS) continue;
        syms.push_back({value, sym.st_size, name, shndx, i, binding_value(sym.st_info)});
      }
      // By (value, ndx): syms are in ndx order, so a stable sort of (value, position) keys
      // (small to move) gives it; the symbols are placed after.
      std::vector<std::pair<uint64_t, size_t>> keys(syms.size());
      for (size_t i = 0; i < syms.size(); ++i) keys[i] = {syms[i].value, i};
      radix_sort_by_first(keys);
      {
        std::vector<Sym> sorted(syms.size());
        for (size_t i = 0; i < keys.size(); ++i) sorted[i] = syms[keys[i].second];
        syms = std::move(sorted);
      }
      values.reserve(syms.size());
      max_ends.reserve(syms.size());
      GElf_Addr m = 0;
      for (size_t i = 0; i < syms.size(); ++i) {
        values.push_back(syms[i].value);
        GElf_Addr end = syms[i].value + syms[i].size;
        if (end > m) m = end;
        max_ends.push_back(m);
        if (syms[i].size == 0) sizeless.push_back(static_cast<int>(i));
      }
      build_segments();
    }

    // Sweep over the sized symbols' starts and ends; between two consecutive boundaries the
    // set of containing symbols is fixed, and libdwfl's fold over it (in table order) gives
    // the winner.
    void build_segments() {
      struct Event {
        GElf_Addr at;
        bool start;
        int sym;
      };
      // Starts come in syms order, already by address; only the ends are sorted, then the
      // two merged. Among events at one address the order does not matter (all are applied
      // before the fold), except that a start goes first.
      std::vector<std::pair<uint64_t, int>> ends;
      size_t sized = 0;
      for (size_t i = 0; i < syms.size(); ++i) {
        if (syms[i].size == 0) continue;
        ++sized;
        GElf_Addr end = syms[i].value + syms[i].size;
        if (end < syms[i].value) end = ~GElf_Addr{0};  // wraps: covers the rest of the space
        ends.push_back({end, static_cast<int>(i)});
      }
      radix_sort_by_first(ends);
      std::vector<Event> events;
      events.reserve(2 * sized);
      {
        size_t e = 0;
        for (size_t i = 0; i < syms.size(); ++i) {
          if (syms[i].size == 0) continue;
          for (; e < ends.size() && ends[e].first < syms[i].value; ++e)
            events.push_back({ends[e].first, false, ends[e].second});
          events.push_back({syms[i].value, true, static_cast<int>(i)});
        }
        for (; e < ends.size(); ++e) events.push_back({ends[e].first, false, ends[e].second});
      }
      std::vector<int> active;  // indices into syms, by ndx (table order)
      auto by_ndx = [this](int a, int b) { return syms[a].ndx < syms[b].ndx; };
      for (size_t e = 0; e < events.size();) {
        GElf_Addr at = events[e].at;
        for (; e < events.size() && events[e].at == at; ++e) {
          int s = events[e].sym;
          auto pos = std::lower_bound(active.begin(), active.end(), s, by_ndx);
          if (events[e].start) {
            active.insert(pos, s);
          } else {
            active.erase(pos);
          }
        }
        int winner = fold(active);
        if (seg_winner.empty() || seg_winner.back() != winner) {
          seg_start.push_back(at);
          seg_winner.push_back(winner);
        }
      }
    }

    // try_sym_value's choice among sized symbols containing the address, in table order.
    int fold(const std::vector<int>& active) const {
      int best = -1;
      for (int i : active) {
        const Sym& s = syms[i];
        if (best < 0) {
          best = i;
          continue;
        }
        const Sym& b = syms[best];
        if (b.value < s.value || b.bind < s.bind) {
          best = i;
        } else if (b.value == s.value && ((b.size > s.size && b.bind <= s.bind) ||
                                          (b.size >= s.size && b.bind < s.bind))) {
          best = i;
        }
      }
      return best;
    }

    const Sym* sized_at(GElf_Addr addr) const {
      auto it = std::upper_bound(seg_start.begin(), seg_start.end(), addr);
      if (it == seg_start.begin()) return nullptr;
      int w = seg_winner[(it - seg_start.begin()) - 1];
      return w >= 0 ? &syms[w] : nullptr;
    }

    // Whether an eligible sizeless symbol sits exactly at addr.
    bool sizeless_at(GElf_Addr addr) const {
      auto it = std::lower_bound(sizeless.begin(), sizeless.end(), addr,
                                 [this](int i, GElf_Addr a) { return syms[i].value < a; });
      return it != sizeless.end() && syms[*it].value == addr;
    }

    // libdwfl's min_label after scanning this table for addr: 0 when nothing is eligible.
    GElf_Addr max_end(GElf_Addr addr) const {
      auto it = std::upper_bound(values.begin(), values.end(), addr);
      return it == values.begin() ? 0 : max_ends[(it - values.begin()) - 1];
    }

    // The last (highest ndx) eligible sizeless symbol at value m in addr's section.
    const Sym* last_sizeless(GElf_Addr m, GElf_Addr addr, const SymbolIndex& index) const {
      if (m > addr) return nullptr;
      auto lo = std::lower_bound(sizeless.begin(), sizeless.end(), m,
                                 [this](int i, GElf_Addr a) { return syms[i].value < a; });
      auto hi = lo;
      while (hi != sizeless.end() && syms[*hi].value == m) ++hi;
      std::optional<size_t> addr_section;
      for (auto it = hi; it != lo;) {
        const Sym& s = syms[*--it];
        bool same;
        if (s.shndx >= SHN_LORESERVE) {
          same = s.value == addr;
        } else {
          if (!addr_section) addr_section = index.section_of(addr);
          same = *addr_section == index.section_of(s.value);
        }
        if (same) return &s;
      }
      return nullptr;
    }
  };

  Dwfl_Module* mod_;
  bool usable_ = false;
  int first_global_ = 0;
  Table globals_, locals_;
};

}  // namespace

struct Symbolizer::Impl {
  Dwfl_Callbacks callbacks{};
  char* debuginfo_path = nullptr;  // null: libdwfl's default search path
  Dwfl* dwfl = nullptr;
  std::deque<ModuleInfo> modules;  // a deque: module_of() hands out views of paths
  // Frames of every address symbolized so far, by return address. They sit in blocks that
  // never move (a span per address), so one allocation serves thousands of addresses.
  std::unordered_map<uintptr_t, std::span<const SymFrame>> cache;
  std::vector<std::unique_ptr<SymFrame[]>> frame_blocks;
  SymFrame* block_next = nullptr;
  size_t block_left = 0;
  std::vector<SymFrame> out;  // symbolize()'s answer, reused

  std::span<const SymFrame> store(const std::vector<SymFrame>& frames) {
    if (frames.size() > block_left) {
      block_left = std::max<size_t>(4096, frames.size());
      frame_blocks.push_back(std::make_unique<SymFrame[]>(block_left));
      block_next = frame_blocks.back().get();
    }
    SymFrame* at = block_next;
    std::copy(frames.begin(), frames.end(), at);
    block_next += frames.size();
    block_left -= frames.size();
    return {at, frames.size()};
  }
  // Per compilation unit (keyed by the address of its DIE in the mapped debug data), the
  // scope index; cleared whenever the module list is re-read, since modules may have gone.
  std::unordered_map<const void*, std::unique_ptr<ScopeIndex>> scope_indexes;
  // Per module, its symbol index (built on first use); cleared with the scope indexes.
  std::unordered_map<Dwfl_Module*, std::unique_ptr<SymbolIndex>> symbol_indexes;
  uint64_t generation = 0;
  std::vector<LoadedObject> unloaded;  // add_unloaded_modules()
  // Every string a SymFrame views (names, file names, module+0xoffset), kept for the
  // Symbolizer's lifetime: frames handed out stay valid when the module list is re-read.
  // A node-based set, so that its strings never move.
  std::unordered_set<std::string> text;
  const std::string* keep(std::string_view s) { return &*text.emplace(s).first; }

  // "NAME+0xOFFSET", in blocks of characters: each is one address's own (no sharing to
  // look for), and stripped libraries give most addresses such a name.
  std::vector<std::unique_ptr<char[]>> char_blocks;
  char* chars_next = nullptr;
  size_t chars_left = 0;

  std::string_view offset_name(std::string_view name, uint64_t offset) {
    char digits[16];
    size_t n = 0;
    do {
      digits[n++] = "0123456789abcdef"[offset & 15];
      offset >>= 4;
    } while (offset != 0);
    const size_t size = name.size() + 3 + n;  // "+0x"
    if (size > chars_left) {
      chars_left = std::max<size_t>(size, 64 * 1024);
      char_blocks.push_back(std::make_unique<char[]>(chars_left));
      chars_next = char_blocks.back().get();
    }
    char* at = chars_next;
    std::memcpy(at, name.data(), name.size());
    std::memcpy(at + name.size(), "+0x", 3);
    for (size_t i = 0; i < n; ++i) at[name.size() + 3 + i] = digits[n - 1 - i];
    chars_next += size;
    chars_left -= size;
    return {at, size};
  }
  std::deque<std::string> names;  // demangled names, each once (see below): no set needed
  const std::string empty_name;

  // Demangled names: first by the address of the mangled string in the module's mapped
  // symbol table or debug data, then by its content, since one name often sits at two
  // addresses (.strtab and .debug_str); each distinct name is demangled once, as
  // __cxa_demangle dominates the cost of a lookup. The maps view mapped data, so they are
  // cleared whenever the module list is re-read.
  Demangler demangler;
  std::unordered_map<const char*, const std::string*> elf_names, dwarf_names;
  std::unordered_map<std::string_view, const std::string*> by_mangled;

  const std::string* demangled(std::string_view mangled) {
    auto [it, fresh] = by_mangled.try_emplace(mangled);
    if (fresh) it->second = &names.emplace_back(demangler(mangled));
    return it->second;
  }

  const std::string& elf_name_of(const char* raw) {
    auto [it, fresh] = elf_names.try_emplace(raw);
    if (fresh) {
      // Debug-file symbol tables may spell versions in: "__libc_start_main@@GLIBC_2.34".
      const char* at = std::strchr(raw, '@');
      it->second = demangled(at != nullptr ? std::string_view(raw, at - raw) : std::string_view(raw));
    }
    return *it->second;
  }

  // The demangled name of a DIE (see die_raw_name); "" when it has none.
  const std::string& dwarf_name_of(Dwarf_Die* die) {
    const char* raw = die_raw_name(die);
    if (raw == nullptr) return empty_name;
    auto [it, fresh] = dwarf_names.try_emplace(raw);
    if (fresh) it->second = demangled(raw);
    return *it->second;
  }

  // Per compilation unit, its line table (see LineTable); retired with the indexes.
  std::unordered_map<const void*, std::unique_ptr<LineTable>> line_tables;
  std::vector<std::unique_ptr<LineTable>> retired_line_tables;
  // Per Dwarf (a module's debug data), its .debug_line bytes; null when compressed or absent.
  std::unordered_map<Dwarf*, LineTable::Sections> line_sections;

  // The module's .debug_line, .debug_line_str and .debug_str, found once.
  const LineTable::Sections& sections_of(Dwarf* dbg) {
    auto [it, fresh] = line_sections.try_emplace(dbg);
    if (fresh) {
      Elf* elf = dwarf_getelf(dbg);
      it->second.line = section_data(elf, ".debug_line");
      it->second.line_str = section_data(elf, ".debug_line_str");
      it->second.str = section_data(elf, ".debug_str");
      it->second.abbrev = section_data(elf, ".debug_abbrev");
    }
    return it->second;
  }

  // The unit's line table, or null where libdw must answer.
  const LineTable* line_table(Dwarf_Die* cudie) {
    auto& slot = line_tables[cudie->addr];
    if (slot == nullptr) slot = std::make_unique<LineTable>(cudie, sections_of(dwarf_cu_getdwarf(cudie->cu)));
    return slot->usable ? slot.get() : nullptr;
  }

  static std::pair<const unsigned char*, size_t> section_data(Elf* elf, const char* want) {
    size_t shstrndx = 0;
    if (elf == nullptr || elf_getshdrstrndx(elf, &shstrndx) != 0) return {nullptr, 0};
    for (Elf_Scn* scn = nullptr; (scn = elf_nextscn(elf, scn)) != nullptr;) {
      GElf_Shdr sh;
      if (gelf_getshdr(scn, &sh) == nullptr || sh.sh_type == SHT_NOBITS) continue;
      const char* name = elf_strptr(elf, shstrndx, sh.sh_name);
      if (name == nullptr || std::strcmp(name, want) != 0) continue;
      if ((sh.sh_flags & SHF_COMPRESSED) != 0) return {nullptr, 0};  // left to libdw
      Elf_Data* d = elf_getdata(scn, nullptr);
      if (d == nullptr || d->d_buf == nullptr) return {nullptr, 0};
      return {static_cast<const unsigned char*>(d->d_buf), d->d_size};
    }
    return {nullptr, 0};
  }

  // Names by abstract origin (see ScopeIndex::Node::origin); cleared with the indexes.
  std::unordered_map<const void*, const std::string*> origin_names;

  const std::string& node_name(ScopeIndex& index, ScopeIndex::Node& node) {
    if (node.origin == nullptr) return index_name(index, node);
    auto [it, fresh] = origin_names.try_emplace(node.origin);
    if (fresh) it->second = &index_name(index, node);
    return *it->second;
  }

  // die_raw_name's answer read through the unit's own reader (libdw's attribute calls cost
  // several times more), or from libdw where the reader leaves a form to it.
  const std::string& index_name(ScopeIndex& index, const ScopeIndex::Node& node) {
    const char* linkage = nullptr;
    const char* mips = nullptr;
    const char* name = nullptr;
    const unsigned char* die = node.die;
    bool ok = true;
    for (int chain = 17; die != nullptr && chain-- > 0;) {
      UnitReader::Naming n;
      if (!index.unit.naming(die, n)) {
        ok = false;
        break;
      }
      if (n.linkage != nullptr) {
        linkage = n.linkage;
        break;
      }
      if (mips == nullptr) mips = n.mips;
      if (name == nullptr) name = n.name;
      die = n.origin != nullptr ? n.origin : n.spec;
    }
    if (!ok) {
      Dwarf_Die d = index.die(node);
      return dwarf_name_of(&d);
    }
    const char* raw = linkage != nullptr ? linkage : mips != nullptr ? mips : name;
    if (raw == nullptr) return empty_name;
    auto [it, fresh] = dwarf_names.try_emplace(raw);
    if (fresh) it->second = demangled(raw);
    return *it->second;
  }

  // DW_AT_call_file and DW_AT_call_line of an inlined instance, through the unit's reader
  // where it can (see call_site for libdw's way).
  void node_call_site(ScopeIndex& index, ScopeIndex::Node& node, const LineTable* table) {
    UnitReader::Naming n;
    if (table != nullptr && index.unit.naming(node.die, n)) {
      node.call_line = n.has_call_line ? static_cast<int>(n.call_line) : 0;
      node.call_file = n.has_call_file ? line_table_file(table, n.call_file) : nullptr;
    } else {
      Dwarf_Die d = index.die(node);
      call_site(&d, table, text, node.call_file, node.call_line);
    }
    node.have_call = true;
  }

  const SymbolIndex& symbol_index(Dwfl_Module* mod) {
    auto& slot = symbol_indexes[mod];
    if (slot == nullptr) slot = std::make_unique<SymbolIndex>(mod);
    return *slot;
  }

  // Per compilation unit, its address ranges sorted, so that "does the unit cover pc" is a
  // binary search rather than dwarf_haspc's walk of the unit's range list every time.
  struct UnitRanges {
    bool ok = true;  // false: reading the list failed; dwarf_haspc answers instead
    std::vector<std::pair<Dwarf_Addr, Dwarf_Addr>> ranges;  // [low, high), by low
    std::vector<Dwarf_Addr> max_high;  // running maximum of high
  };
  std::unordered_map<const void*, UnitRanges> unit_ranges;

  bool unit_has_pc(Dwarf_Die* cudie, Dwarf_Addr pc) {
    auto [it, fresh] = unit_ranges.try_emplace(cudie->addr);
    UnitRanges& u = it->second;
    if (fresh) {
      Dwarf_Addr base = 0, low = 0, high = 0;
      ptrdiff_t off = 0;
      while ((off = dwarf_ranges(cudie, off, &base, &low, &high)) > 0)
        if (low < high) u.ranges.push_back({low, high});
      u.ok = off == 0;
      std::sort(u.ranges.begin(), u.ranges.end());
      Dwarf_Addr m = 0;
      for (auto& r : u.ranges) u.max_high.push_back(m = std::max(m, r.second));
    }
    if (!u.ok) return dwarf_haspc(cudie, pc) > 0;
    auto at = std::upper_bound(u.ranges.begin(), u.ranges.end(), pc,
                               [](Dwarf_Addr v, const auto& r) { return v < r.first; });
    for (size_t i = static_cast<size_t>(at - u.ranges.begin()); i-- > 0;) {
      if (u.max_high[i] <= pc) return false;
      if (u.ranges[i].second > pc) return true;
    }
    return false;
  }

  // Units by their DIE's address ranges, for modules whose debug data has no .debug_aranges
  // (Clang writes none by default, and libdw then finds no unit by address): built on the
  // first address such a module has. Cleared with the indexes.
  struct UnitsByRange {
    Dwarf_Addr bias = 0;
    std::vector<std::pair<std::pair<Dwarf_Addr, Dwarf_Addr>, Dwarf_Die>> ranges;  // by low
  };
  std::unordered_map<Dwfl_Module*, UnitsByRange> units_by_range;

  Dwarf_Die* unit_by_ranges(Dwfl_Module* mod, Dwarf_Addr pc, Dwarf_Addr* bias) {
    auto [it, fresh] = units_by_range.try_emplace(mod);
    UnitsByRange& u = it->second;
    if (fresh) {
      Dwarf* dbg = dwfl_module_getdwarf(mod, &u.bias);
      Dwarf_Aranges* aranges = nullptr;
      size_t count = 0;
      // Only where the section is missing: elsewhere libdw's lookup stands (an address it
      // places in no unit is in none).
      if (dbg == nullptr || (dwarf_getaranges(dbg, &aranges, &count) == 0 && count > 0)) return nullptr;
      Dwarf_Addr b = 0;
      for (Dwarf_Die* cu = nullptr; (cu = dwfl_module_nextcu(mod, cu, &b)) != nullptr;) {
        Dwarf_Addr base = 0, low = 0, high = 0;
        for (ptrdiff_t off = 0; (off = dwarf_ranges(cu, off, &base, &low, &high)) > 0;)
          if (low < high) u.ranges.push_back({{low, high}, *cu});
      }
      std::sort(u.ranges.begin(), u.ranges.end(),
                [](const auto& x, const auto& y) { return x.first < y.first; });
    }
    if (u.ranges.empty()) return nullptr;
    const Dwarf_Addr at = pc - u.bias;
    auto r = std::upper_bound(u.ranges.begin(), u.ranges.end(), at,
                              [](Dwarf_Addr v, const auto& e) { return v < e.first.first; });
    if (r == u.ranges.begin() || (--r)->first.second <= at) return nullptr;
    *bias = u.bias;
    return &r->second;
  }

  ScopeIndex* scope_index(Dwarf_Die* cudie) {
    auto& slot = scope_indexes[cudie->addr];
    if (slot == nullptr) {
      const LineTable::Sections& sec = sections_of(dwarf_cu_getdwarf(cudie->cu));
      UnitReader::Strings strings{sec.str.first, sec.str.second, sec.line_str.first,
                                  sec.line_str.second, sec.abbrev.first, sec.abbrev.second};
      slot = std::make_unique<ScopeIndex>(cudie, strings);
    }
    return slot->usable ? slot.get() : nullptr;
  }

  Impl() {
    callbacks.find_elf = dwfl_linux_proc_find_elf;
    callbacks.find_debuginfo = find_debuginfo;
    callbacks.debuginfo_path = &debuginfo_path;
    dwfl = dwfl_begin(&callbacks);
    if (dwfl != nullptr) report();
  }
  ~Impl() {
    if (dwfl != nullptr) dwfl_end(dwfl);
  }

  // (Re)reads the dynamic loader's list. Only loaded objects are reported, with their
  // PT_LOAD spans: not data files the program maps (nor libelf's own mappings of the files
  // it reads for us), which /proc/self/maps would also show. Modules still loaded keep their
  // Dwfl_Module (and its ELF/DWARF); new ones get a ModuleInfo through the userdata slot.
  void report() {
    generation = loader_generation();
    scope_indexes.clear();
    unit_ranges.clear();
    units_by_range.clear();
    symbol_indexes.clear();
    elf_names.clear();
    dwarf_names.clear();
    origin_names.clear();
    by_mangled.clear();
    // Frames handed out view the tables' file names: the tables are kept, unused.
    for (auto& [cu, table] : line_tables) retired_line_tables.push_back(std::move(table));
    line_tables.clear();
    line_sections.clear();
    char vdso_name[32];  // this spelling makes libdwfl read the vDSO from our memory
    std::snprintf(vdso_name, sizeof vdso_name, "[vdso: %d]", static_cast<int>(getpid()));
    dwfl_report_begin(dwfl);
    std::vector<LoadedObject> objects = loaded_objects();
    for (const LoadedObject& o : objects) {
      if (o.path == "[vdso]") {
        dwfl_report_module(dwfl, vdso_name, o.start, o.end);
      } else if (o.path[0] == '/') {
        dwfl_report_module(dwfl, o.path.c_str(), o.start, o.end);
      }
    }
    // Objects unloaded since they were recorded, reported from their files at their old
    // addresses, where nothing loaded now has taken that place.
    const size_t live = objects.size();
    for (const LoadedObject& u : unloaded) {
      if (u.path.empty() || u.path[0] != '/') continue;
      bool taken = false;
      for (size_t i = 0; i < live && !taken; ++i)
        taken = (objects[i].start < u.end && u.start < objects[i].end) || objects[i].path == u.path;
      if (!taken && dwfl_report_module(dwfl, u.path.c_str(), u.start, u.end) != nullptr)
        objects.push_back(u);
    }
    dwfl_report_end(dwfl, nullptr, nullptr);
    // Load bias and build id as the loader's list gives them (from the loaded image), so that
    // no file is opened before an address in it is symbolized.
    struct Arg {
      Impl* self;
      std::unordered_map<uintptr_t, const LoadedObject*> by_start;
    } arg{this, {}};
    for (const LoadedObject& o : objects) arg.by_start.emplace(o.start, &o);
    dwfl_getmodules(
        dwfl,
        [](Dwfl_Module* mod, void** userdata, const char* name, Dwarf_Addr start,
           void* arg) -> int {
          if (*userdata == nullptr) {
            auto* a = static_cast<Arg*>(arg);
            Impl* self = a->self;
            ModuleInfo info;
            info.path = name != nullptr ? name : "";
            if (info.path.starts_with("[vdso")) info.path = "[vdso]";
            Dwarf_Addr low = 0, high = 0;
            dwfl_module_info(mod, nullptr, &low, &high, nullptr, nullptr, nullptr, nullptr);
            info.start = low;
            info.end = high;
            GElf_Addr bias = 0;
            auto known = a->by_start.find(low);
            if (known != a->by_start.end()) {
              info.bias = known->second->bias;
              info.build_id = known->second->build_id;
            } else if (dwfl_module_getelf(mod, &bias) != nullptr) {
              info.bias = bias;
              const unsigned char* bits = nullptr;
              GElf_Addr vaddr = 0;
              int len = dwfl_module_build_id(mod, &bits, &vaddr);
              for (int i = 0; i < len; ++i) {
                char b[3];
                std::snprintf(b, sizeof b, "%02x", bits[i]);
                info.build_id += b;
              }
            } else {
              info.bias = low;
            }
            self->modules.push_back(std::move(info));
            *userdata = &self->modules.back();
          }
          return DWARF_CB_OK;
        },
        &arg, 0);
  }

  // The module holding addr; re-reads the loader's list once if it changed since.
  Dwfl_Module* module_at(uintptr_t addr) {
    if (dwfl == nullptr) return nullptr;
    Dwfl_Module* mod = dwfl_addrmodule(dwfl, addr);
    if (mod == nullptr && loader_generation() != generation) {
      report();
      mod = dwfl_addrmodule(dwfl, addr);
    }
    return mod;
  }

  static ModuleInfo* info_of(Dwfl_Module* mod) {
    void** userdata = nullptr;
    dwfl_module_info(mod, &userdata, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr);
    return userdata != nullptr ? static_cast<ModuleInfo*>(*userdata) : nullptr;
  }

  // Fills out.
  void symbolize(uintptr_t ret) {
    out.clear();
    // A return address points after the call; the call itself is one byte earlier.
    const uintptr_t pc = ret > 0 ? ret - 1 : 0;
    Dwfl_Module* mod = module_at(pc);
    if (mod == nullptr) {
      out.push_back({offset_name("[unknown]", ret), "", 0});
      return;
    }
    ModuleInfo* info = info_of(mod);

    // ELF symbol (the real, out-of-line function).
    // (What dwfl_module_addrinfo would answer; a sized symbol is only ever chosen when it
    // contains pc, so past its st_size there is no name and module+0xoffset is printed.)
    const char* name = symbol_index(mod).lookup(pc);
    const std::string& elf_name =
        name != nullptr && name[0] != '\0' ? elf_name_of(name) : empty_name;

    // Source line at pc, when a compilation unit covers it (a line table alone would answer
    // for code without debug info, such as _start, with the nearest row below).
    const std::string* file = &empty_name;  // points into a line table or text
    int line = 0;
    Dwarf_Addr bias = 0;
    Dwarf_Die* cudie = dwfl_module_addrdie(mod, pc, &bias);
    bool found_by_ranges = false;
    if (cudie == nullptr) {
      cudie = unit_by_ranges(mod, pc, &bias);
      found_by_ranges = cudie != nullptr;
    }
    if (cudie != nullptr && !unit_has_pc(cudie, pc - bias)) cudie = nullptr;
    const LineTable* table = cudie != nullptr ? line_table(cudie) : nullptr;
    if (table != nullptr) {
      const std::string* src = nullptr;
      if (table->lookup(pc - bias, src, line)) file = src;
    } else if (cudie != nullptr) {
      // libdw's answer: through the unit found here when its own lookup by address has none.
      Dwarf_Line* dl = nullptr;
      Dwarf_Addr line_bias = 0;
      if (found_by_ranges) {
        dl = dwarf_getsrc_die(cudie, pc - bias);
      } else if (Dwfl_Line* l = dwfl_module_getsrc(mod, pc)) {
        dl = dwfl_dwarf_line(l, &line_bias);
      }
      if (dl != nullptr) {
        if (const char* src = dwarf_linesrc(dl, nullptr, nullptr)) file = keep(src);
        dwarf_lineno(dl, &line);
      }
    }

    // Inlined frames: the DIE nesting around the innermost scope at pc.
    bool have_function = false;
    ScopeIndex* index = cudie != nullptr ? scope_index(cudie) : nullptr;
    int innermost = -1;
    if (index != nullptr) {
      innermost = index->innermost(pc - bias);
      if (!index->usable) index = nullptr;  // unreadable further down: libdw answers
    }
    if (index != nullptr) {
      for (int i = innermost; i >= 0; i = index->nodes[i].parent) {
        ScopeIndex::Node& node = index->nodes[i];
        if (node.tag == DW_TAG_inlined_subroutine) {
          if (node.name == nullptr) node.name = &node_name(*index, node);
          out.push_back({*node.name, *file, line});
          if (!node.have_call) node_call_site(*index, node, table);
          file = node.call_file != nullptr ? node.call_file : &empty_name;
          line = node.call_line;
        } else if (node.tag == DW_TAG_subprogram || node.tag == DW_TAG_entry_point) {
          if (elf_name.empty() && node.name == nullptr) node.name = &node_name(*index, node);
          const std::string& fn = elf_name.empty() ? *node.name : elf_name;
          if (!fn.empty()) {
            out.push_back({fn, *file, line});
            have_function = true;
          }
          break;
        }
      }
    } else if (cudie != nullptr) {
      Dwarf_Die* scopes = nullptr;
      int n = dwarf_getscopes(cudie, pc - bias, &scopes);
      if (n > 0) {
        Dwarf_Die innermost = scopes[0];
        std::free(scopes);
        scopes = nullptr;
        n = dwarf_getscopes_die(&innermost, &scopes);
        for (int i = 0; i < n; ++i) {
          Dwarf_Die* d = &scopes[i];
          int tag = dwarf_tag(d);
          if (tag == DW_TAG_inlined_subroutine) {
            out.push_back({dwarf_name_of(d), *file, line});
            call_site(d, table, text, file, line);
            if (file == nullptr) file = &empty_name;
          } else if (tag == DW_TAG_subprogram || tag == DW_TAG_entry_point) {
            const std::string& fn = elf_name.empty() ? dwarf_name_of(d) : elf_name;
            if (!fn.empty()) {
              out.push_back({fn, *file, line});
              have_function = true;
            }
            break;
          }
        }
      }
      std::free(scopes);
    }
    if (!have_function) {
      std::string_view fn = elf_name;
      if (fn.empty()) {
        std::string_view mod_path = info != nullptr ? std::string_view(info->path) : "";
        uintptr_t base = info != nullptr ? info->bias : 0;
        fn = offset_name(base_name(mod_path), ret - base);
      }
      out.push_back({fn, *file, line});
    }
  }
};

Symbolizer::Symbolizer() : impl_(std::make_unique<Impl>()) {}
Symbolizer::~Symbolizer() = default;

std::span<const SymFrame> Symbolizer::frames(uintptr_t return_address) {
  auto [it, fresh] = impl_->cache.try_emplace(return_address);
  if (fresh) {
    impl_->symbolize(return_address);
    it->second = impl_->store(impl_->out);
  }
  return it->second;
}

std::string_view Symbolizer::module_of(uintptr_t address) {
  Dwfl_Module* mod = impl_->module_at(address);
  if (mod == nullptr) return {};
  if (ModuleInfo* info = Impl::info_of(mod)) return info->path;
  return {};
}

void Symbolizer::add_unloaded_modules(const std::vector<LoadedObject>& seen) {
  if (impl_->dwfl == nullptr) return;
  const std::vector<LoadedObject> now = loaded_objects();
  bool added = false;
  for (const LoadedObject& o : seen) {
    bool loaded = std::any_of(now.begin(), now.end(), [&](const LoadedObject& n) {
      return n.start == o.start && n.path == o.path;
    });
    if (!loaded) {
      impl_->unloaded.push_back(o);
      added = true;
    }
  }
  if (added) impl_->report();
}

std::vector<ModuleInfo> Symbolizer::modules() const {
  return {impl_->modules.begin(), impl_->modules.end()};
}

namespace {
void self_anchor() {}
}  // namespace

std::string_view self_module() {
  // Found the way the module maps name objects, so it compares equal to module_of() and
  // ModuleMap::path_of() of memtrace's own addresses.
  static const std::string path = [] {
    const uintptr_t self = reinterpret_cast<uintptr_t>(&self_anchor);
    for (const LoadedObject& o : loaded_objects())
      for (const auto& [s, e] : o.segments)
        if (self >= s && self < e) return o.path;
    return std::string();
  }();
  return path;
}

}  // namespace memtrace::unwind
