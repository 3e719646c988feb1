// One object as the loader mapped it, read in place from its program headers and its dynamic
// section: where it lies, its RELRO pages, its dynamic symbol table with either hash table, and
// its relocation tables (RELA only: x86-64, aarch64). For the deep-bind scan (deep_bind.cpp),
// which runs under the loader's list lock: nothing here allocates, locks or calls the loader.
#pragma once
#include <link.h>

#include <cstddef>
#include <cstdint>

namespace memtrace::preload {

struct LoadedElf {
  const dl_phdr_info* info;
  uintptr_t base, lo, hi;          // load bias; mapped range
  uintptr_t dynamic;               // its PT_DYNAMIC, as the loader's link_map has it (l_ld)
  uintptr_t relro_lo, relro_hi;    // the pages the loader made read-only after relocation
  const ElfW(Sym)* symtab = nullptr;
  const char* strtab = nullptr;
  const uint32_t* gnu_hash = nullptr;
  const uint32_t* sysv_hash = nullptr;
  const ElfW(Rela)* jmprel = nullptr;
  size_t jmprel_n = 0;
  const ElfW(Rela)* rela = nullptr;
  size_t rela_n = 0;

  bool contains(uintptr_t a) const { return a >= lo && a < hi; }
};

// Reads the object `info` describes; false when it has no dynamic section, no mapped segment or no
// symbol table. `page`: the page size (RELRO ends are rounded down to a page, as the loader does).
bool read_loaded_elf(const dl_phdr_info* info, uintptr_t page, LoadedElf* o);

// Whether the object's dynamic symbol table defines `name` (not merely refers to it).
bool defines(const LoadedElf& o, const char* name);

}  // namespace memtrace::preload
