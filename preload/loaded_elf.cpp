#include "preload/loaded_elf.hpp"

#include <elf.h>

#include <cstring>

namespace memtrace::preload {

namespace {

// A d_ptr as an address: the loader relocates the in-memory dynamic section in place where it
// is writable (x86-64, aarch64), but not where it is read-only.
uintptr_t dyn_addr(const LoadedElf& o, ElfW(Addr) p) {
  uintptr_t a = static_cast<uintptr_t>(p);
  return o.contains(a) ? a : a + o.base;
}

uint32_t gnu_hash_of(const char* s) {
  uint32_t h = 5381;
  for (; *s; ++s) h = h * 33 + static_cast<unsigned char>(*s);
  return h;
}

uint32_t sysv_hash_of(const char* s) {
  uint32_t h = 0;
  for (; *s; ++s) {
    h = (h << 4) + static_cast<unsigned char>(*s);
    uint32_t g = h & 0xf0000000u;
    if (g) h ^= g >> 24;
    h &= ~g;
  }
  return h;
}

bool defined_here(const ElfW(Sym)& s) { return s.st_shndx != SHN_UNDEF && s.st_value != 0; }

}  // namespace

bool read_loaded_elf(const dl_phdr_info* info, uintptr_t page, LoadedElf* o) {
  o->info = info;
  o->base = info->dlpi_addr;
  o->lo = UINTPTR_MAX;
  o->hi = 0;
  o->dynamic = 0;
  o->relro_lo = o->relro_hi = 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    uintptr_t a = o->base + ph.p_vaddr;
    if (ph.p_type == PT_LOAD) {
      if (a < o->lo) o->lo = a;
      if (a + ph.p_memsz > o->hi) o->hi = a + ph.p_memsz;
    } else if (ph.p_type == PT_DYNAMIC) {
      o->dynamic = a;
    } else if (ph.p_type == PT_GNU_RELRO) {
      // As glibc's _dl_protect_relro: both ends rounded down to a page.
      o->relro_lo = a & ~(page - 1);
      o->relro_hi = (a + ph.p_memsz) & ~(page - 1);
    }
  }
  if (!o->dynamic || o->lo >= o->hi) return false;
  size_t jmprel_sz = 0, rela_sz = 0, rela_count = 0;
  bool plt_rela = true;
  ElfW(Addr) symtab = 0, strtab = 0, gnu = 0, sysv = 0, jmprel = 0, rela = 0;
  for (auto* d = reinterpret_cast<const ElfW(Dyn)*>(o->dynamic); d->d_tag != DT_NULL; ++d) {
    switch (d->d_tag) {
      case DT_SYMTAB: symtab = d->d_un.d_ptr; break;
      case DT_STRTAB: strtab = d->d_un.d_ptr; break;
      case DT_GNU_HASH: gnu = d->d_un.d_ptr; break;
      case DT_HASH: sysv = d->d_un.d_ptr; break;
      case DT_JMPREL: jmprel = d->d_un.d_ptr; break;
      case DT_PLTRELSZ: jmprel_sz = d->d_un.d_val; break;
      case DT_PLTREL: plt_rela = d->d_un.d_val == DT_RELA; break;
      case DT_RELA: rela = d->d_un.d_ptr; break;
      case DT_RELASZ: rela_sz = d->d_un.d_val; break;
      case DT_RELACOUNT: rela_count = d->d_un.d_val; break;
      default: break;
    }
  }
  if (!symtab || !strtab) return false;
  o->symtab = reinterpret_cast<const ElfW(Sym)*>(dyn_addr(*o, symtab));
  o->strtab = reinterpret_cast<const char*>(dyn_addr(*o, strtab));
  if (gnu) o->gnu_hash = reinterpret_cast<const uint32_t*>(dyn_addr(*o, gnu));
  if (sysv) o->sysv_hash = reinterpret_cast<const uint32_t*>(dyn_addr(*o, sysv));
  if (jmprel && plt_rela) {
    o->jmprel = reinterpret_cast<const ElfW(Rela)*>(dyn_addr(*o, jmprel));
    o->jmprel_n = jmprel_sz / sizeof(ElfW(Rela));
  }
  if (rela) {
    uintptr_t r = dyn_addr(*o, rela);
    // Some linkers count .rela.plt in DT_RELASZ when it follows .rela.dyn (glibc skips it too).
    if (o->jmprel && r + rela_sz == reinterpret_cast<uintptr_t>(o->jmprel) + jmprel_sz && rela_sz >= jmprel_sz)
      rela_sz -= jmprel_sz;
    size_t n = rela_sz / sizeof(ElfW(Rela));
    size_t skip = rela_count <= n ? rela_count : n;  // the leading R_*_RELATIVE ones name no symbol
    o->rela = reinterpret_cast<const ElfW(Rela)*>(r) + skip;
    o->rela_n = n - skip;
  }
  return true;
}

bool defines(const LoadedElf& o, const char* name) {
  if (o.gnu_hash) {
    const uint32_t* h = o.gnu_hash;
    uint32_t nbuckets = h[0], symoffset = h[1], bloom_size = h[2], bloom_shift = h[3];
    if (!nbuckets || !bloom_size) return false;
    auto* bloom = reinterpret_cast<const ElfW(Addr)*>(h + 4);
    auto* buckets = reinterpret_cast<const uint32_t*>(bloom + bloom_size);
    const uint32_t* chain = buckets + nbuckets;
    constexpr uint32_t kBits = sizeof(ElfW(Addr)) * 8;
    uint32_t hash = gnu_hash_of(name);
    ElfW(Addr) word = bloom[(hash / kBits) % bloom_size];
    ElfW(Addr) mask = (ElfW(Addr)(1) << (hash % kBits)) | (ElfW(Addr)(1) << ((hash >> bloom_shift) % kBits));
    if ((word & mask) != mask) return false;
    uint32_t i = buckets[hash % nbuckets];
    if (i < symoffset) return false;
    for (;; ++i) {
      uint32_t h2 = chain[i - symoffset];
      if ((h2 | 1) == (hash | 1) && std::strcmp(o.strtab + o.symtab[i].st_name, name) == 0 &&
          defined_here(o.symtab[i]))
        return true;
      if (h2 & 1) return false;
    }
  }
  if (o.sysv_hash) {
    const uint32_t* h = o.sysv_hash;
    uint32_t nbucket = h[0];
    if (!nbucket) return false;
    const uint32_t* bucket = h + 2;
    const uint32_t* chain = bucket + nbucket;
    for (uint32_t i = bucket[sysv_hash_of(name) % nbucket]; i != STN_UNDEF; i = chain[i])
      if (std::strcmp(o.strtab + o.symtab[i].st_name, name) == 0 && defined_here(o.symtab[i])) return true;
  }
  return false;
}

}  // namespace memtrace::preload
