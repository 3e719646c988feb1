// Internal to the Symbolizer (its parts: unwind/symbolizer_impl.hpp); not part of memtrace's interface.
#pragma once
#include <dwarf.h>
#include <elfutils/libdw.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "unwind/dwarf_unit_reader.hpp"

namespace memtrace::unwind::detail {

// A compilation unit's address-bearing DIE tree, walked once (with UnitReader), answering what
// dwarf_getscopes(cu, pc)[0] followed by dwarf_getscopes_die() would: the innermost DIE
// containing pc and its physical parents. It mirrors libdw's scope walk: children are
// visited in DIE order, a DIE without a range containing pc is pruned, and only DIEs that
// may own scopes (lexical blocks, subprograms, inlined subroutines, namespaces, classes...)
// are descended; the first child containing pc at each level is taken. DIEs that have no
// address ranges can never contain pc, so they (and everything below them) are left out.
// A unit that imports partial units (dwz) is marked unusable; the caller then asks libdw.
inline bool may_have_scopes(int tag) {
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
  ScopeIndex(Dwarf_Die* cudie, const UnitReader::Strings& strings);

  bool gcc_ = false;

  // Reads the sibling list at p, children of parent: a node and ranges for each DIE with
  // address ranges, their subtrees stepped over. The new slot, or -1 when none has ranges.
  // list_end: one past the list's null entry, when known (else null).
  int read_children(int parent, const unsigned char* p, const unsigned char* list_end, int depth);

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
                                 int depth);

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
  int innermost(Dwarf_Addr pc);
};

}  // namespace memtrace::unwind::detail
