// The Symbolizer's libdwfl session: the modules it knows (the dynamic loader's list, plus objects
// recorded while loaded), re-read when an address falls outside them, and where an address is.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <unordered_map>

#include "unwind/symbolizer_impl.hpp"

namespace memtrace::unwind {

namespace {
// The files libdwfl opens stay open while the Symbolizer lives, and dumps keep it between them
// (symbolizer_reuse.hpp): close-on-exec, so that programs the profiled one runs inherit none.
int cloexec(int fd) {
  if (fd >= 0) {
    const int flags = fcntl(fd, F_GETFD);
    if (flags >= 0 && (flags & FD_CLOEXEC) == 0) fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
  }
  return fd;
}
int find_elf_cloexec(Dwfl_Module* mod, void** userdata, const char* modname, Dwarf_Addr base, char** file_name,
                     Elf** elfp) {
  return cloexec(dwfl_linux_proc_find_elf(mod, userdata, modname, base, file_name, elfp));
}
int find_debuginfo_cloexec(Dwfl_Module* mod, void** userdata, const char* modname, Dwarf_Addr base,
                           const char* file_name, const char* debuglink_file, GElf_Word debuglink_crc,
                           char** debuginfo_file_name) {
  return cloexec(find_debuginfo(mod, userdata, modname, base, file_name, debuglink_file, debuglink_crc,
                                debuginfo_file_name));
}
}  // namespace

Symbolizer::Impl::Impl() {
  callbacks.find_elf = find_elf_cloexec;
  callbacks.find_debuginfo = find_debuginfo_cloexec;
  callbacks.debuginfo_path = &debuginfo_path;
  dwfl = dwfl_begin(&callbacks);
  if (dwfl != nullptr) report();
}

Symbolizer::Impl::~Impl() {
  if (dwfl != nullptr) dwfl_end(dwfl);
}

void Symbolizer::Impl::report() {
  generation = loader_generation();
  scope_indexes.clear();
  unit_ranges.clear();
  units_by_range.clear();
  partials.clear();
  partial_units.clear();
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
  std::vector<LoadedObject> objects = offline ? std::vector<LoadedObject>{} : loaded_objects();
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

Dwfl_Module* Symbolizer::Impl::module_at(uintptr_t addr) {
  if (dwfl == nullptr) return nullptr;
  Dwfl_Module* mod = dwfl_addrmodule(dwfl, addr);
  if (mod == nullptr && loader_generation() != generation) {
    report();
    mod = dwfl_addrmodule(dwfl, addr);
  }
  return mod;
}

ModuleInfo* Symbolizer::Impl::info_of(Dwfl_Module* mod) {
  void** userdata = nullptr;
  dwfl_module_info(mod, &userdata, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr);
  return userdata != nullptr ? static_cast<ModuleInfo*>(*userdata) : nullptr;
}

auto Symbolizer::Impl::place_in(Dwfl_Module* mod, uintptr_t ret) -> Place {
  Place at;
  at.mod = mod;
  if (at.mod == nullptr) return at;
  at.info = info_of(at.mod);
  at.cudie = unit_at(at.mod, ret > 0 ? ret - 1 : 0, &at.bias, &at.found_by_ranges);
  return at;
}

auto Symbolizer::Impl::all_workers() -> std::vector<Worker*> {
  std::vector<Worker*> all{&main_worker};
  for (auto& w : workers) all.push_back(w.get());
  return all;
}

}  // namespace memtrace::unwind
