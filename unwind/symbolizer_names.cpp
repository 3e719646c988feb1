// Function names: ELF symbols through each module's SymbolIndex, DWARF names through each unit's
// reader (libdw where it cannot), each mangled string demangled once per thread.
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "unwind/symbolizer_impl.hpp"

namespace memtrace::unwind {

std::string_view detail::Demangler::operator()(std::string_view name) {
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

const std::string* Symbolizer::Impl::Worker::demangled(std::string_view mangled) {
  return &names.emplace_back(demangler(mangled));
}

const std::string& Symbolizer::Impl::Worker::elf_name_of(const char* raw) {
  return name_by(elf_names, raw, [&] {
    // Debug-file symbol tables may spell versions in: "__libc_start_main@@GLIBC_2.34".
    const char* at = std::strchr(raw, '@');
    return demangled(at != nullptr ? std::string_view(raw, at - raw) : std::string_view(raw));
  });
}

const std::string& Symbolizer::Impl::Worker::dwarf_name_of(Dwarf_Die* die) {
  const char* raw = nullptr;
  {
    LibdwLock lock(libdw_mutex());
    raw = die_raw_name(die);
  }
  if (raw == nullptr) return empty_name;
  return name_by(dwarf_names, raw, [&] { return demangled(raw); });
}

const std::string& Symbolizer::Impl::node_name(Worker& w, ScopeIndex& index, ScopeIndex::Node& node) {
  if (node.origin == nullptr) return index_name(w, index, node);
  return Worker::name_by(w.origin_names, node.origin, [&] { return &index_name(w, index, node); });
}

const std::string& Symbolizer::Impl::index_name(Worker& w, ScopeIndex& index, const ScopeIndex::Node& node) {
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

// (Sorting a large symbol table takes a while: not under the elfutils lock, which the
// index takes only to read the table.)
const SymbolIndex& Symbolizer::Impl::symbol_index(Dwfl_Module* mod) {
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

}  // namespace memtrace::unwind
