// Internal to the Symbolizer; not part of memtrace's interface. Its parts:
//   unwind/symbolizer.cpp          the public face, the libdw name and call-site readers,
//                                  the find_debuginfo callback
//   unwind/symbolizer_prepare.cpp  prepare(): a dump's addresses on several threads
//   unwind/symbolizer_modules.cpp  the libdwfl session and its module list: where an address is
//   unwind/symbolizer_units.cpp    compilation units: which covers an address, their line
//                                  tables, scope indexes and sections
//   unwind/symbolizer_names.cpp    function names: ELF symbols and DWARF names, demangled once
//   unwind/symbolizer_frames.cpp   one address's frames, and the blocks and strings they live in
#pragma once
#include <cxxabi.h>
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#include <gelf.h>
#include <libelf.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/addr_map.hpp"
#include "unwind/dwarf_unit_reader.hpp"
#include "unwind/libdw_lock.hpp"
#include "unwind/line_table.hpp"
#include "unwind/module_map.hpp"
#include "unwind/partial_copy.hpp"
#include "unwind/scope_index.hpp"
#include "unwind/symbol_index.hpp"
#include "unwind/symbolizer.hpp"

namespace memtrace::unwind {

namespace detail {

// The demangled spelling of name (itself when it is not a mangled C++ name), in buf: one
// buffer reused for every name, since __cxa_demangle's result would otherwise be a fresh
// allocation each time.
struct Demangler {
  char* buf = nullptr;
  size_t cap = 0;
  Demangler() = default;
  Demangler(const Demangler&) = delete;
  Demangler& operator=(const Demangler&) = delete;
  ~Demangler() { std::free(buf); }
  std::string_view operator()(std::string_view name);
};

inline std::string_view base_name(std::string_view p) {
  size_t s = p.rfind('/');
  return s == std::string_view::npos ? p : p.substr(s + 1);
}

// A DIE's function name, mangled (see symbolizer.cpp). Null when it has none.
const char* die_raw_name(Dwarf_Die* die);
// Where an inlined instance was called from (see symbolizer.cpp).
void call_site(Dwarf_Die* inlined, const LineTable* table, std::unordered_set<std::string>& names,
               const std::string*& file, int& line);
// libdwfl's find_debuginfo callback (see symbolizer.cpp).
int find_debuginfo(Dwfl_Module* mod, void** userdata, const char* modname, Dwarf_Addr base,
                   const char* file_name, const char* debuglink_file, GElf_Word debuglink_crc,
                   char** debuginfo_file_name);
}  // namespace detail

using detail::base_name;
using detail::call_site;
using detail::Demangler;
using detail::die_raw_name;
using detail::find_debuginfo;
using detail::libdw_mutex;
using detail::LibdwLock;
using detail::LineTable;
using detail::PartialCopy;
using detail::line_table_file;
using detail::ScopeIndex;
using detail::SymbolIndex;
using detail::UnitReader;

struct Symbolizer::Impl {
  Dwfl_Callbacks callbacks{};
  char* debuginfo_path = nullptr;  // null: libdwfl's default search path
  Dwfl* dwfl = nullptr;
  std::deque<ModuleInfo> modules;  // a deque: module_of() hands out views of paths
  // Frames of every address symbolized so far, by return address. They sit in blocks that
  // never move (a span per address), so one allocation serves thousands of addresses.
  // (Open addressing: the writer asks again for every frame of every stack it writes.)
  AddrMap<std::span<const SymFrame>> cache;  // keys are non-zero: address 0 is kept aside
  std::span<const SymFrame> zero_frames;
  bool have_zero = false;
  const std::span<const SymFrame>* cached(uintptr_t ret) {
    if (ret == 0) return have_zero ? &zero_frames : nullptr;
    return cache.find(ret);
  }
  void remember(uintptr_t ret, std::span<const SymFrame> frames) {
    if (ret == 0) {
      zero_frames = frames;
      have_zero = true;
    } else if (!cache.put(ret, frames)) {
      throw std::bad_alloc();
    }
  }
  // What one thread symbolizing needs for itself: its answer being built, the strings its
  // frames view and the caches of names it demangled. prepare()'s threads each have one and
  // share the rest of the Impl; they are kept, since the frames they made view them.
  struct Worker {
    std::vector<std::unique_ptr<SymFrame[]>> frame_blocks;
    SymFrame* block_next = nullptr;
    size_t block_left = 0;
    std::vector<SymFrame> out;  // symbolize()'s answer, reused

    // A lasting copy of frames, in the current block.
    std::span<const SymFrame> store(const std::vector<SymFrame>& frames);
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
    std::string_view offset_name(std::string_view name, uint64_t offset);

    std::deque<std::string> names;  // demangled names, each once (see below): no set needed

    // Demangled names by the address of the mangled string in the module's mapped symbol
    // table or debug data: each is demangled once, as __cxa_demangle dominates the cost of a
    // lookup. (Not also by content: a name at two addresses, .strtab and .debug_str, was 1% of
    // the names in bench_symbolize, less than hashing every name costs.) The maps view mapped
    // data, so they are cleared whenever the module list is re-read.
    Demangler demangler;
    // (Open addressing keyed by the pointer: a node-based map cost a cache miss per step.)
    using NameMap = AddrMap<const std::string*>;
    NameMap elf_names, dwarf_names;

    const std::string* demangled(std::string_view mangled);

    // The name cached under key, or the one make() gives, cached.
    template <typename Make>
    static const std::string& name_by(NameMap& map, const void* key, Make&& make) {
      const auto k = reinterpret_cast<uint64_t>(key);
      if (const std::string** known = map.find(k)) return **known;
      const std::string* got = make();
      if (!map.put(k, got)) throw std::bad_alloc();
      return *got;
    }

    // The demangled name of a symbol table entry, version suffix dropped.
    const std::string& elf_name_of(const char* raw);
    // The demangled name of a DIE (see die_raw_name); "" when it has none.
    const std::string& dwarf_name_of(Dwarf_Die* die);

    // Names by abstract origin (see ScopeIndex::Node::origin); cleared with the indexes.
    NameMap origin_names;

    // The symbol index of the module asked about last (a task's addresses share one).
    Dwfl_Module* symbols_mod = nullptr;
    const SymbolIndex* symbols_index = nullptr;
    const SymbolIndex& symbols(Dwfl_Module* mod, Impl& impl) {
      if (mod != symbols_mod) {
        symbols_index = &impl.symbol_index(mod);
        symbols_mod = mod;
      }
      return *symbols_index;
    }
  };
  Worker main_worker;
  std::vector<std::unique_ptr<Worker>> workers;  // prepare()'s other threads'
  static inline const std::string empty_name{};

  // Per compilation unit (keyed by the address of its DIE in the mapped debug data), the
  // scope index; cleared whenever the module list is re-read, since modules may have gone.
  std::unordered_map<const void*, std::unique_ptr<ScopeIndex>> scope_indexes;
  // Per module, its symbol index (built on first use); cleared with the scope indexes.
  // Built once however many of prepare()'s threads ask; the map itself under symbols_mutex.
  struct SymbolSlot {
    std::once_flag once;
    std::unique_ptr<SymbolIndex> index;
  };
  std::unordered_map<Dwfl_Module*, std::unique_ptr<SymbolSlot>> symbol_indexes;
  std::mutex symbols_mutex;
  uint64_t generation = 0;
  std::vector<LoadedObject> unloaded;  // add_unloaded_modules()
  bool offline = false;  // another process's objects only (Symbolizer(objects)): none of ours
  // Per compilation unit, its line table (see LineTable); retired with the indexes.
  std::unordered_map<const void*, std::unique_ptr<LineTable>> line_tables;
  std::vector<std::unique_ptr<LineTable>> retired_line_tables;
  // Per Dwarf (a module's debug data), its .debug_line bytes; null when compressed or absent.
  std::unordered_map<Dwarf*, LineTable::Sections> line_sections;

  // ---- units (symbolizer_units.cpp) ----

  // The module's .debug_line, .debug_line_str and .debug_str, found once.
  const LineTable::Sections& sections_of(Dwarf* dbg);
  // The unit's line table, or null where libdw must answer.
  // slot: the unit's entry in line_tables, when the caller has it (prepare()'s threads do:
  // they never look in the map, which the routing thread may be adding to).
  const LineTable* line_table(Dwarf_Die* cudie, std::unique_ptr<LineTable>* known = nullptr);

  template <typename Map>
  static typename Map::mapped_type& unit_slot(Map& map, Dwarf_Die* cudie) {
    auto it = map.find(cudie->addr);
    return it != map.end() ? it->second : map[cudie->addr];
  }

  static std::pair<const unsigned char*, size_t> section_data(Elf* elf, const char* want);

  // Per compilation unit, its address ranges sorted, so that "does the unit cover pc" is a
  // binary search rather than dwarf_haspc's walk of the unit's range list every time.
  struct UnitRanges {
    bool ok = true;  // false: reading the list failed; dwarf_haspc answers instead
    std::vector<std::pair<Dwarf_Addr, Dwarf_Addr>> ranges;  // [low, high), by low
    std::vector<Dwarf_Addr> max_high;  // running maximum of high
  };
  std::unordered_map<const void*, UnitRanges> unit_ranges;
  bool unit_has_pc(Dwarf_Die* cudie, Dwarf_Addr pc);

  // Units by their DIE's address ranges, for modules whose debug data has no .debug_aranges
  // (Clang writes none by default, and libdw then finds no unit by address): built on the
  // first address such a module has. Cleared with the indexes.
  struct UnitsByRange {
    Dwarf_Addr bias = 0;
    std::vector<std::pair<std::pair<Dwarf_Addr, Dwarf_Addr>, Dwarf_Die>> ranges;  // by low
  };
  std::unordered_map<Dwfl_Module*, UnitsByRange> units_by_range;
  Dwarf_Die* unit_by_ranges(Dwfl_Module* mod, Dwarf_Addr pc, Dwarf_Addr* bias);

  // Modules whose debug file is a partial copy (unwind/partial_copy.hpp), and the units found in
  // them (by .debug_aranges, made readable before libdw reads them). Cleared with the indexes.
  std::unordered_map<Dwfl_Module*, std::shared_ptr<PartialCopy>> partials;
  struct PartialUnit {
    bool ok = false;
    Dwarf_Die die{};
  };
  std::map<std::pair<Dwarf*, uint64_t>, PartialUnit> partial_units;
  PartialCopy* partial_of(Dwfl_Module* mod);
  Dwarf_Die* unit_in_partial(Dwfl_Module* mod, PartialCopy& copy, uintptr_t pc, Dwarf_Addr* bias);

  // The unit's scope index, or null where libdw must answer (slot: as for line_table).
  ScopeIndex* scope_index(Dwarf_Die* cudie, std::unique_ptr<ScopeIndex>* known = nullptr);
  // The compilation unit covering pc in mod, or null.
  Dwarf_Die* unit_at(Dwfl_Module* mod, uintptr_t pc, Dwarf_Addr* bias, bool* found_by_ranges);
  // DW_AT_call_file and DW_AT_call_line of an inlined instance, through the unit's reader
  // where it can (see call_site for libdw's way).
  void node_call_site(Worker& w, ScopeIndex& index, ScopeIndex::Node& node, const LineTable* table);

  // ---- names (symbolizer_names.cpp) ----

  // An inlined or out-of-line function's name in the unit's scope index, cached by abstract
  // origin where it has one.
  const std::string& node_name(Worker& w, ScopeIndex& index, ScopeIndex::Node& node);
  // die_raw_name's answer read through the unit's own reader (libdw's attribute calls cost
  // several times more), or from libdw where the reader leaves a form to it.
  const std::string& index_name(Worker& w, ScopeIndex& index, const ScopeIndex::Node& node);
  // The module's symbol index, built once however many threads ask.
  const SymbolIndex& symbol_index(Dwfl_Module* mod);

  // ---- the session and its modules (symbolizer_modules.cpp) ----

  Impl();
  ~Impl();

  // (Re)reads the dynamic loader's list. Only loaded objects are reported, with their
  // PT_LOAD spans: not data files the program maps (nor libelf's own mappings of the files
  // it reads for us), which /proc/self/maps would also show. Modules still loaded keep their
  // Dwfl_Module (and its ELF/DWARF); new ones get a ModuleInfo through the userdata slot.
  void report();
  // The module holding addr; re-reads the loader's list once if it changed since.
  Dwfl_Module* module_at(uintptr_t addr);
  static ModuleInfo* info_of(Dwfl_Module* mod);

  // Where an address is: its module and compilation unit, found through libdwfl (so by one
  // thread: prepare() finds every address's place before its threads start).
  struct Place {
    Dwfl_Module* mod = nullptr;  // null: in no module
    const ModuleInfo* info = nullptr;
    Dwarf_Die* cudie = nullptr;  // null: no unit covers it
    Dwarf_Addr bias = 0;
    bool found_by_ranges = false;
    std::unique_ptr<LineTable>* line_slot = nullptr;    // the unit's entries in line_tables
    std::unique_ptr<ScopeIndex>* scope_slot = nullptr;  // and scope_indexes, when known
  };
  Place place_of(uintptr_t ret) { return place_in(module_at(ret > 0 ? ret - 1 : 0), ret); }
  Place place_in(Dwfl_Module* mod, uintptr_t ret);

  std::vector<Worker*> all_workers();

  // ---- frames (symbolizer_frames.cpp) ----

  // (The cached answer inline: the snapshot writer asks again for every frame of every
  // stack it writes, so that lookup stays in Symbolizer::frames itself.)
  std::span<const SymFrame> frames(uintptr_t ret) {
    if (const auto* known = cached(ret)) return *known;
    return frames_first(ret);
  }
  // An address not symbolized before: symbolized, stored and remembered.
  std::span<const SymFrame> frames_first(uintptr_t ret);
  // Fills w.out. Runs on prepare()'s threads too: what it reads that they share is either
  // read-only by then or taken under the libdw lock.
  void symbolize(Worker& w, uintptr_t ret, const Place& at);

  // prepare()'s threads and the tasks they share (symbolizer_prepare.cpp).
  struct Parallel;
};

}  // namespace memtrace::unwind
