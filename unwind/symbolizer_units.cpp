// Compilation units: which one covers an address (libdw's lookup, or the units' own ranges where
// a module has no .debug_aranges), and each unit's line table and scope index, read from the
// module's sections.
#include <algorithm>
#include <cstring>

#include "unwind/symbolizer_impl.hpp"

namespace memtrace::unwind {

const LineTable::Sections& Symbolizer::Impl::sections_of(Dwarf* dbg) {
  LibdwLock lock(libdw_mutex());  // (libelf's, and the map shared by prepare()'s threads)
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

const LineTable* Symbolizer::Impl::line_table(Dwarf_Die* cudie, std::unique_ptr<LineTable>* known) {
  auto& slot = known != nullptr ? *known : unit_slot(line_tables, cudie);
  if (slot == nullptr) slot = std::make_unique<LineTable>(cudie, sections_of(dwarf_cu_getdwarf(cudie->cu)));
  return slot->usable ? slot.get() : nullptr;
}

std::pair<const unsigned char*, size_t> Symbolizer::Impl::section_data(Elf* elf, const char* want) {
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

bool Symbolizer::Impl::unit_has_pc(Dwarf_Die* cudie, Dwarf_Addr pc) {
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

Dwarf_Die* Symbolizer::Impl::unit_by_ranges(Dwfl_Module* mod, Dwarf_Addr pc, Dwarf_Addr* bias) {
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

ScopeIndex* Symbolizer::Impl::scope_index(Dwarf_Die* cudie, std::unique_ptr<ScopeIndex>* known) {
  auto& slot = known != nullptr ? *known : unit_slot(scope_indexes, cudie);
  if (slot == nullptr) {
    const LineTable::Sections& sec = sections_of(dwarf_cu_getdwarf(cudie->cu));
    UnitReader::Strings strings{sec.str.first, sec.str.second, sec.line_str.first,
                                sec.line_str.second, sec.abbrev.first, sec.abbrev.second};
    slot = std::make_unique<ScopeIndex>(cudie, strings);
  }
  return slot->usable ? slot.get() : nullptr;
}

PartialCopy* Symbolizer::Impl::partial_of(Dwfl_Module* mod) {
  auto [it, fresh] = partials.try_emplace(mod);
  if (fresh) {
    Dwarf_Addr b = 0;
    const char* debugfile = nullptr;
    const unsigned char* id = nullptr;
    GElf_Addr vaddr = 0;
    if (dwfl_module_getdwarf(mod, &b) != nullptr) {  // (which opens the debug file, if any)
      dwfl_module_info(mod, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, &debugfile);
      const int len = dwfl_module_build_id(mod, &id, &vaddr);
      if (debugfile != nullptr && len > 0) it->second = PartialCopy::find(id, len, debugfile);
    }
  }
  return it->second.get();
}

Dwarf_Die* Symbolizer::Impl::unit_in_partial(Dwfl_Module* mod, PartialCopy& copy, uintptr_t pc, Dwarf_Addr* bias) {
  Dwarf_Addr b = 0;
  Dwarf* dbg = dwfl_module_getdwarf(mod, &b);
  uint64_t cu = 0;
  if (dbg == nullptr || !copy.unit_of(pc - b, &cu)) return nullptr;
  auto [it, fresh] = partial_units.try_emplace({dbg, cu});
  PartialUnit& u = it->second;
  if (fresh) {
    // Inflated as far as this unit before libdw reads it; then its line program.
    Dwarf_Off next = 0;
    size_t header = 0;
    Dwarf_Attribute attr;
    Dwarf_Word stmt_list = 0;
    u.ok = copy.prepare_unit(cu) && dwarf_nextcu(dbg, cu, &next, &header, nullptr, nullptr, nullptr) == 0 &&
           dwarf_offdie(dbg, cu + header, &u.die) != nullptr;
    if (u.ok && dwarf_formudata(dwarf_attr(&u.die, DW_AT_stmt_list, &attr), &stmt_list) == 0)
      u.ok = copy.prepare_lines(stmt_list);
  }
  if (!u.ok) return nullptr;
  *bias = b;
  return &u.die;
}

Dwarf_Die* Symbolizer::Impl::unit_at(Dwfl_Module* mod, uintptr_t pc, Dwarf_Addr* bias, bool* found_by_ranges) {
  Dwarf_Die* cudie = nullptr;
  *found_by_ranges = false;
  if (PartialCopy* copy = partial_of(mod)) {
    // Never libdw's lookup by address here: it reads every unit's header, all of .debug_info.
    // (found_by_ranges: where the line table must come from libdw, through this unit too.)
    cudie = unit_in_partial(mod, *copy, pc, bias);
    *found_by_ranges = cudie != nullptr;
  } else {
    cudie = dwfl_module_addrdie(mod, pc, bias);
    if (cudie == nullptr) {
      cudie = unit_by_ranges(mod, pc, bias);
      *found_by_ranges = cudie != nullptr;
    }
  }
  if (cudie != nullptr && !unit_has_pc(cudie, pc - *bias)) cudie = nullptr;
  return cudie;
}

void Symbolizer::Impl::node_call_site(Worker& w, ScopeIndex& index, ScopeIndex::Node& node, const LineTable* table) {
  UnitReader::Naming n;
  if (table != nullptr && index.unit.naming(node.die, n)) {
    node.call_line = n.has_call_line ? static_cast<int>(n.call_line) : 0;
    node.call_file = n.has_call_file ? line_table_file(table, n.call_file) : nullptr;
  } else {
    Dwarf_Die d = index.die(node);
    LibdwLock lock(libdw_mutex());
    call_site(&d, table, w.text, node.call_file, node.call_line);
  }
  node.have_call = true;
}

}  // namespace memtrace::unwind
