#include "unwind/symbol_index.hpp"

#include "unwind/libdw_lock.hpp"

#include <elfutils/libdwfl.h>
#include <gelf.h>
#include <libelf.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

namespace memtrace::unwind::detail {

SymbolIndex::SymbolIndex(Dwfl_Module* mod) : mod_(mod) {
  {
    LibdwLock lock(libdw_mutex());
    int n = dwfl_module_getsymtab(mod);
    if (n < 0) return;
    first_global_ = dwfl_module_getsymtab_first_global(mod);
    if (first_global_ < 0) return;
    globals_.read(mod, first_global_ == 0 ? 1 : first_global_, n);
    if (first_global_ > 1) locals_.read(mod, 1, first_global_);
  }
  usable_ = true;
  globals_.index();
  locals_.index();
}

const char* SymbolIndex::lookup(GElf_Addr addr) const {
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

int SymbolIndex::binding_value(unsigned char info) {
  switch (GELF_ST_BIND(info)) {
    case STB_GLOBAL: return 3;
    case STB_WEAK: return 2;
    case STB_LOCAL: return 1;
    default: return 0;
  }
}

size_t SymbolIndex::section_of(GElf_Addr addr) const {
  LibdwLock lock(libdw_mutex());  // (a lookup may come from Symbolizer::prepare's threads)
  Dwarf_Addr a = addr, bias = 0;
  Elf_Scn* scn = dwfl_module_address_section(mod_, &a, &bias);
  return scn != nullptr ? elf_ndxscn(scn) : SHN_UNDEF;
}

void SymbolIndex::Table::read(Dwfl_Module* mod, int from, int to) {
  syms.reserve(static_cast<size_t>(to - from));
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
}

void SymbolIndex::Table::index() {
  // By (value, ndx): syms are in ndx order, so a stable sort of (value, position) keys
  // (small to move) gives it; the symbols are placed after.
  std::vector<std::pair<uint64_t, size_t>> keys(syms.size());
  for (size_t i = 0; i < syms.size(); ++i) keys[i] = {syms[i].value, i};
  radix_sort_by_first(keys);
  {
    std::vector<Sym> sorted;
    sorted.reserve(syms.size());
    for (const auto& k : keys) sorted.push_back(syms[k.second]);
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

void SymbolIndex::Table::build_segments() {
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

int SymbolIndex::Table::fold(const std::vector<int>& active) const {
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

const SymbolIndex::Sym* SymbolIndex::Table::last_sizeless(GElf_Addr m, GElf_Addr addr,
                                                         const SymbolIndex& index) const {
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

}  // namespace memtrace::unwind::detail
