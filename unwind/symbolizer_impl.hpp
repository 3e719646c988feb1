// Internal to the Symbolizer: its session (unwind/symbolizer.cpp) and prepare()'s threads
// (unwind/symbolizer_prepare.cpp); not part of memtrace's interface.
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

    // Demangled names by the address of the mangled string in the module's mapped symbol
    // table or debug data: each is demangled once, as __cxa_demangle dominates the cost of a
    // lookup. (Not also by content: a name at two addresses, .strtab and .debug_str, was 1% of
    // the names in bench_symbolize, less than hashing every name costs.) The maps view mapped
    // data, so they are cleared whenever the module list is re-read.
    Demangler demangler;
    // (Open addressing keyed by the pointer: a node-based map cost a cache miss per step.)
    using NameMap = AddrMap<const std::string*>;
    NameMap elf_names, dwarf_names;

    const std::string* demangled(std::string_view mangled) { return &names.emplace_back(demangler(mangled)); }

    // The name cached under key, or the one make() gives, cached.
    template <typename Make>
    static const std::string& name_by(NameMap& map, const void* key, Make&& make) {
      const auto k = reinterpret_cast<uint64_t>(key);
      if (const std::string** known = map.find(k)) return **known;
      const std::string* got = make();
      if (!map.put(k, got)) throw std::bad_alloc();
      return *got;
    }

    const std::string& elf_name_of(const char* raw) {
      return name_by(elf_names, raw, [&] {
        // Debug-file symbol tables may spell versions in: "__libc_start_main@@GLIBC_2.34".
        const char* at = std::strchr(raw, '@');
        return demangled(at != nullptr ? std::string_view(raw, at - raw) : std::string_view(raw));
      });
    }

    // The demangled name of a DIE (see die_raw_name); "" when it has none.
    const std::string& dwarf_name_of(Dwarf_Die* die) {
      const char* raw = nullptr;
      {
        LibdwLock lock(libdw_mutex());
        raw = die_raw_name(die);
      }
      if (raw == nullptr) return empty_name;
      return name_by(dwarf_names, raw, [&] { return demangled(raw); });
    }

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
  // Per compilation unit, its line table (see LineTable); retired with the indexes.
  std::unordered_map<const void*, std::unique_ptr<LineTable>> line_tables;
  std::vector<std::unique_ptr<LineTable>> retired_line_tables;
  // Per Dwarf (a module's debug data), its .debug_line bytes; null when compressed or absent.
  std::unordered_map<Dwarf*, LineTable::Sections> line_sections;

  // The module's .debug_line, .debug_line_str and .debug_str, found once.
  const LineTable::Sections& sections_of(Dwarf* dbg) {
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

  // The unit's line table, or null where libdw must answer.
  // slot: the unit's entry in line_tables, when the caller has it (prepare()'s threads do:
  // they never look in the map, which the routing thread may be adding to).
  const LineTable* line_table(Dwarf_Die* cudie, std::unique_ptr<LineTable>* known = nullptr) {
    auto& slot = known != nullptr ? *known : unit_slot(line_tables, cudie);
    if (slot == nullptr) slot = std::make_unique<LineTable>(cudie, sections_of(dwarf_cu_getdwarf(cudie->cu)));
    return slot->usable ? slot.get() : nullptr;
  }

  template <typename Map>
  static typename Map::mapped_type& unit_slot(Map& map, Dwarf_Die* cudie) {
    auto it = map.find(cudie->addr);
    return it != map.end() ? it->second : map[cudie->addr];
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

  const std::string& node_name(Worker& w, ScopeIndex& index, ScopeIndex::Node& node) {
    if (node.origin == nullptr) return index_name(w, index, node);
    return Worker::name_by(w.origin_names, node.origin, [&] { return &index_name(w, index, node); });
  }

  // die_raw_name's answer read through the unit's own reader (libdw's attribute calls cost
  // several times more), or from libdw where the reader leaves a form to it.
  const std::string& index_name(Worker& w, ScopeIndex& index, const ScopeIndex::Node& node) {
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
      return w.dwarf_name_of(&d);
    }
    const char* raw = linkage != nullptr ? linkage : mips != nullptr ? mips : name;
    if (raw == nullptr) return empty_name;
    return Worker::name_by(w.dwarf_names, raw, [&] { return w.demangled(raw); });
  }

  // DW_AT_call_file and DW_AT_call_line of an inlined instance, through the unit's reader
  // where it can (see call_site for libdw's way).
  void node_call_site(Worker& w, ScopeIndex& index, ScopeIndex::Node& node, const LineTable* table) {
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

  // (Sorting a large symbol table takes a while: not under the elfutils lock, which the
  // index takes only to read the table.)
  const SymbolIndex& symbol_index(Dwfl_Module* mod) {
    SymbolSlot* slot = nullptr;
    {
      std::lock_guard lock(symbols_mutex);
      auto& s = symbol_indexes[mod];
      if (s == nullptr) s = std::make_unique<SymbolSlot>();
      slot = s.get();
    }
    std::call_once(slot->once, [&] { slot->index = std::make_unique<SymbolIndex>(mod); });
    return *slot->index;
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

  ScopeIndex* scope_index(Dwarf_Die* cudie, std::unique_ptr<ScopeIndex>* known = nullptr) {
    auto& slot = known != nullptr ? *known : unit_slot(scope_indexes, cudie);
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
    for (Worker* w : all_workers()) {
      w->elf_names.clear();
      w->dwarf_names.clear();
      w->origin_names.clear();
      w->symbols_mod = nullptr;
    }
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

  // The compilation unit covering pc in mod, or null.
  Dwarf_Die* unit_at(Dwfl_Module* mod, uintptr_t pc, Dwarf_Addr* bias, bool* found_by_ranges) {
    Dwarf_Die* cudie = dwfl_module_addrdie(mod, pc, bias);
    *found_by_ranges = false;
    if (cudie == nullptr) {
      cudie = unit_by_ranges(mod, pc, bias);
      *found_by_ranges = cudie != nullptr;
    }
    if (cudie != nullptr && !unit_has_pc(cudie, pc - *bias)) cudie = nullptr;
    return cudie;
  }

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
  Place place_in(Dwfl_Module* mod, uintptr_t ret) {
    Place at;
    at.mod = mod;
    if (at.mod == nullptr) return at;
    at.info = info_of(at.mod);
    at.cudie = unit_at(at.mod, ret > 0 ? ret - 1 : 0, &at.bias, &at.found_by_ranges);
    return at;
  }

  std::vector<Worker*> all_workers() {
    std::vector<Worker*> all{&main_worker};
    for (auto& w : workers) all.push_back(w.get());
    return all;
  }

  std::span<const SymFrame> frames(uintptr_t ret) {
    if (const auto* known = cached(ret)) return *known;
    symbolize(main_worker, ret, place_of(ret));
    const std::span<const SymFrame> got = main_worker.store(main_worker.out);
    remember(ret, got);
    return got;
  }

  // Fills w.out. Runs on prepare()'s threads too: what it reads that they share is either
  // read-only by then or taken under the libdw lock.
  void symbolize(Worker& w, uintptr_t ret, const Place& at) {
    std::vector<SymFrame>& out = w.out;
    out.clear();
    // A return address points after the call; the call itself is one byte earlier.
    const uintptr_t pc = ret > 0 ? ret - 1 : 0;
    Dwfl_Module* mod = at.mod;
    if (mod == nullptr) {
      out.push_back({w.offset_name("[unknown]", ret), "", 0});
      return;
    }
    const ModuleInfo* info = at.info;

    // ELF symbol (the real, out-of-line function).
    // (What dwfl_module_addrinfo would answer; a sized symbol is only ever chosen when it
    // contains pc, so past its st_size there is no name and module+0xoffset is printed.)
    const char* name = w.symbols(mod, *this).lookup(pc);
    const std::string& elf_name =
        name != nullptr && name[0] != '\0' ? w.elf_name_of(name) : empty_name;

    // Source line at pc, when a compilation unit covers it (a line table alone would answer
    // for code without debug info, such as _start, with the nearest row below).
    const std::string* file = &empty_name;  // points into a line table or text
    int line = 0;
    const Dwarf_Addr bias = at.bias;
    const bool found_by_ranges = at.found_by_ranges;
    Dwarf_Die* cudie = at.cudie;
    const LineTable* table = cudie != nullptr ? line_table(cudie, at.line_slot) : nullptr;
    if (table != nullptr) {
      const std::string* src = nullptr;
      if (table->lookup(pc - bias, src, line)) file = src;
    } else if (cudie != nullptr) {
      // libdw's answer: through the unit found here when its own lookup by address has none.
      LibdwLock lock(libdw_mutex());
      Dwarf_Line* dl = nullptr;
      Dwarf_Addr line_bias = 0;
      if (found_by_ranges) {
        dl = dwarf_getsrc_die(cudie, pc - bias);
      } else if (Dwfl_Line* l = dwfl_module_getsrc(mod, pc)) {
        dl = dwfl_dwarf_line(l, &line_bias);
      }
      if (dl != nullptr) {
        if (const char* src = dwarf_linesrc(dl, nullptr, nullptr)) file = w.keep(src);
        dwarf_lineno(dl, &line);
      }
    }

    // Inlined frames: the DIE nesting around the innermost scope at pc.
    bool have_function = false;
    ScopeIndex* index = cudie != nullptr ? scope_index(cudie, at.scope_slot) : nullptr;
    int innermost = -1;
    if (index != nullptr) {
      innermost = index->innermost(pc - bias);
      if (!index->usable) index = nullptr;  // unreadable further down: libdw answers
    }
    if (index != nullptr) {
      for (int i = innermost; i >= 0; i = index->nodes[i].parent) {
        ScopeIndex::Node& node = index->nodes[i];
        if (node.tag == DW_TAG_inlined_subroutine) {
          if (node.name == nullptr) node.name = &node_name(w, *index, node);
          out.push_back({*node.name, *file, line});
          if (!node.have_call) node_call_site(w, *index, node, table);
          file = node.call_file != nullptr ? node.call_file : &empty_name;
          line = node.call_line;
        } else if (node.tag == DW_TAG_subprogram || node.tag == DW_TAG_entry_point) {
          if (elf_name.empty() && node.name == nullptr) node.name = &node_name(w, *index, node);
          const std::string& fn = elf_name.empty() ? *node.name : elf_name;
          if (!fn.empty()) {
            out.push_back({fn, *file, line});
            have_function = true;
          }
          break;
        }
      }
    } else if (cudie != nullptr) {
      LibdwLock lock(libdw_mutex());
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
            out.push_back({w.dwarf_name_of(d), *file, line});
            call_site(d, table, w.text, file, line);
            if (file == nullptr) file = &empty_name;
          } else if (tag == DW_TAG_subprogram || tag == DW_TAG_entry_point) {
            const std::string& fn = elf_name.empty() ? w.dwarf_name_of(d) : elf_name;
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
        fn = w.offset_name(base_name(mod_path), ret - base);
      }
      out.push_back({fn, *file, line});
    }
  }
};

}  // namespace memtrace::unwind
