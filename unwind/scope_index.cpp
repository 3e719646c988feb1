#include "unwind/scope_index.hpp"

#include "unwind/libdw_lock.hpp"

#include <dwarf.h>
#include <elfutils/libdw.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace memtrace::unwind::detail {

ScopeIndex::ScopeIndex(Dwarf_Die* cudie, const UnitReader::Strings& strings) {
  unit.strings = strings;
  if (!unit.open(cudie)) {
    usable = false;
    return;
  }
  const char* producer = nullptr;
  {
    LibdwLock lock(libdw_mutex());
    Dwarf_Attribute attr;
    producer = dwarf_formstring(dwarf_attr(cudie, DW_AT_producer, &attr));
  }
  // GCC gives every DIE that has children a DW_AT_sibling, except the last child of its
  // parent (dwarf2out.cc, add_sibling_attributes). So in GCC's units a DIE with children
  // and no sibling ends where its parent's list does, and is stepped over without reading
  // its subtree. Other producers get the subtree read.
  gcc_ = producer != nullptr && std::strncmp(producer, "GNU ", 4) == 0;
  const unsigned char* p = static_cast<const unsigned char*>(cudie->addr);
  const UnitReader::Abbrev* a = unit.read_die(p);
  if (a == nullptr) {
    usable = false;
    return;
  }
  if (a->children) unit_slot = read_children(-1, p, unit.end(), 0);
}

int ScopeIndex::read_children(int parent, const unsigned char* p, const unsigned char* list_end,
                              int depth) {
  pending.clear();
  const unsigned char* after = read_list(parent, p, list_end, depth);
  if (after == nullptr) return -1;
  // A DIE's children end where its DW_AT_sibling (or, for GCC's last children, its parent's
  // end) says: anything else means the shortcut does not hold for this unit, and libdw
  // answers for it instead. (The unit's own list may be followed by padding.)
  if (parent >= 0 && list_end != nullptr && after != list_end) return fail();
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

const unsigned char* ScopeIndex::read_list(int parent, const unsigned char* p,
                                          const unsigned char* list_end, int depth) {
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
      LibdwLock lock(libdw_mutex());
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
      if (end != nullptr && p != end) return fail_list();
      continue;
    }
    p = end != nullptr ? end : unit.skip_children(p, depth + 1);
    if (p == nullptr) return fail_list();
  }
}

int ScopeIndex::innermost(Dwarf_Addr pc) {
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

}  // namespace memtrace::unwind::detail
