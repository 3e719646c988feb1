// Internal to the Symbolizer (its parts: unwind/symbolizer_impl.hpp); not part of memtrace's interface.
#pragma once
#include <elfutils/libdwfl.h>
#include <gelf.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace memtrace::unwind::detail {

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
class SymbolIndex {
 public:
  explicit SymbolIndex(Dwfl_Module* mod);

  // The name dwfl_module_addrinfo would give addr, or null.
  const char* lookup(GElf_Addr addr) const;

 private:
  struct Sym {
    GElf_Addr value;
    GElf_Xword size;
    const char* name;
    GElf_Word shndx;  // as dwfl_module_getsym_info gives it: -1 for a non-allocated section
    int ndx;          // index in the module's symbol table: the scan order
    int bind;         // binding_value()
  };

  static int binding_value(unsigned char info);

  // libdwfl's section of an address (its find_section, through the public entry point that
  // uses it): the section index, or SHN_UNDEF.
  size_t section_of(GElf_Addr addr) const;

  struct Table {
    std::vector<Sym> syms;            // eligible symbols, by (value, ndx)
    std::vector<GElf_Addr> values;    // syms[i].value
    std::vector<GElf_Addr> max_ends;  // max of value + size (wrapping as libdwfl's) over syms[0..i]
    std::vector<int> sizeless;        // indices into syms of the st_size == 0 ones (same order)
    std::vector<GElf_Addr> seg_start; // stretches of addresses with one sized winner
    std::vector<int> seg_winner;      // index into syms, or -1

    // Reads symbols [from, to) through libdwfl (under the elfutils lock: Symbolizer::prepare's
    // threads may build indexes of several modules at once), then index() sorts them.
    void read(Dwfl_Module* mod, int from, int to);
    void index();

    // Sweep over the sized symbols' starts and ends; between two consecutive boundaries the
    // set of containing symbols is fixed, and libdwfl's fold over it (in table order) gives
    // the winner.
    void build_segments();

    // try_sym_value's choice among sized symbols containing the address, in table order.
    int fold(const std::vector<int>& active) const;

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
    const Sym* last_sizeless(GElf_Addr m, GElf_Addr addr, const SymbolIndex& index) const;
  };

  Dwfl_Module* mod_;
  bool usable_ = false;
  int first_global_ = 0;
  Table globals_, locals_;
};

}  // namespace memtrace::unwind::detail
