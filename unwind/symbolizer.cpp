// Address -> frames with elfutils libdwfl over this process's own mappings.
//
// Names: the ELF symbol table (dwfl_module_addrinfo prefers .symtab, so static functions of
// a program built without -rdynamic have names), demangled. Source lines and inlined frames:
// DWARF, when the module (or its separate debug file, found by build id or .gnu_debuglink)
// has it. Never asks debuginfod: a profiler must not reach the network while writing.
#include <elfutils/libdwelf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "unwind/debug_cache.hpp"
#include "unwind/own_code.hpp"
#include "unwind/symbolizer_impl.hpp"

namespace memtrace::unwind {

namespace detail {

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
  const unsigned char* want = nullptr;
  GElf_Addr vaddr = 0;
  const int want_len = dwfl_module_build_id(mod, &want, &vaddr);
  // With the debug cache on, by build id through it (unwind/debug_cache.hpp).
  int fd = open_by_build_id(want, want_len, debuginfo_file_name);
  if (fd >= 0) return fd;
  fd = dwfl_build_id_find_debuginfo(mod, userdata, modname, base, file_name, debuglink_file, debuglink_crc,
                                    debuginfo_file_name);
  if (fd >= 0 || debuglink_file == nullptr || file_name == nullptr || file_name[0] != '/') return fd;
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
      return debug_file_or_copy(cfd, c.c_str(), want, want_len, debuginfo_file_name);
    }
    close(cfd);
  }
  return -1;
}

}  // namespace detail

Symbolizer::Symbolizer() : impl_(std::make_unique<Impl>()) {}
Symbolizer::Symbolizer(const std::vector<LoadedObject>& objects) : impl_(std::make_unique<Impl>()) {
  if (impl_->dwfl == nullptr) return;
  impl_->offline = true;
  impl_->unloaded = objects;
  impl_->report();
}
Symbolizer::~Symbolizer() = default;

std::span<const SymFrame> Symbolizer::frames(uintptr_t return_address) {
  return impl_->frames(return_address);
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

Symbolizer::UnitCounts Symbolizer::unit_counts() const {
  UnitCounts c;
  for (const auto& [cu, index] : impl_->scope_indexes) {
    if (index == nullptr) continue;  // a slot prepare() made for a task that failed
    ++c.units;
    c.by_libdw += !index->usable;
  }
  return c;
}

std::vector<ModuleInfo> Symbolizer::modules() const {
  return {impl_->modules.begin(), impl_->modules.end()};
}

std::string_view self_module() {
  // Found the way the module maps name objects, so it compares equal to module_of() and
  // ModuleMap::path_of() of memtrace's own addresses. Never destroyed: the exit dump reads it,
  // and a static's destructor, registered after memtrace's atexit handler, would run first.
  static const std::string* const path = new std::string([] {
    const uintptr_t self = own_code().lo;
    for (const LoadedObject& o : loaded_objects())
      for (const auto& [s, e] : o.segments)
        if (self >= s && self < e) return o.path;
    return std::string();
  }());
  return *path;
}

}  // namespace memtrace::unwind
