// RTLD_DEEPBIND: a library opened with it looks its undefined symbols up in its own dependency
// scope first (the libcuda.so.1 it links), ahead of the global scope where LD_PRELOAD put
// libmemtrace.so; its cuMemAlloc_v2 calls, and its dlsym (libc's, not memtrace's), bypass
// memtrace. memtrace does not interpose dlopen to prevent it: glibc's dlopen judges the caller's
// RUNPATH/$ORIGIN and namespace by its return address, which a wrapper would replace with its own.
//
// Instead, at rare points (memtrace's cuGetProcAddress[_v2] and cuDevicePrimaryCtxRetain hooks,
// its dlsym hook for a hooked name, the start of every snapshot, the exit snapshot included),
// rebind_bypassing_objects() looks at the GOT slots (x86-64 and aarch64 JUMP_SLOT / GLOB_DAT
// relocations) that every loaded object holds for memtrace's exported names. A slot that holds
// exactly the function memtrace itself forwards to (the driver's, libc's dlsym) while a global
// lookup of that name finds another (memtrace's hook) was bound past memtrace: it is rewritten
// to what the global lookup finds, as without RTLD_DEEPBIND (a read-only RELRO page is made
// writable for the write and read-only again), and the library is named once in a warning.
// Slots that hold anything else are left alone: bound through memtrace already, not yet resolved
// (lazy binding: looked at again at every trigger until resolved), not yet relocated (an object
// another thread is loading), or bound to some other copy of the function.
//
// Each object's symbol and relocation tables are read in place (loaded_elf.cpp).
//
// Skipped: memtrace itself (unwind/own_code.hpp), the vdso, the dynamic linker, objects outside
// the base namespace (dlmopen: their driver is another copy, which memtrace's hooks would not
// reach; see README), and every object that defines one of the hooked names itself (the driver,
// NCCL, interposers).
//
// Limits: what a bypassing library does between its dlopen (or, lazily bound, its first call of
// a name) and the next trigger is not seen: those allocations are missing from snapshots, their
// later frees are forwarded as unknown. Function pointers it obtained itself before (dlsym through
// libc's) keep bypassing. A slot whose page cannot be made writable stays as it is; the warning
// says so. At most 64 objects / 512 unresolved slots are followed between full scans. A forked
// child does not look (see before_fork below).
//
// Cost: one dl_iterate_phdr whose first callback compares the loader's load/unload counters
// (dlpi_adds, dlpi_subs) with the last scan's; a full scan only after objects came or went,
// otherwise only the unresolved slots. Concurrency: one scan at a time (a try-lock: a trigger that
// finds a scan running asks it to go once more; a fork waits for a scan in progress). The
// loader's list lock, held during dl_iterate_phdr's callbacks, keeps every object mapped while its
// slots are read and written; no memtrace lock is taken under it, and warnings are written after
// it is released. No allocation here, apart from what glibc's dlsym/dlopen(RTLD_NOLOAD) do when
// the tables are rebuilt after objects came or went (the dlerror state is left clear) and one
// pthread_atfork; no trigger runs in a signal handler.
#include "preload/deep_bind.hpp"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <pthread.h>
#include <sched.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "core/log.hpp"
#include "preload/hook_list.hpp"
#include "preload/loaded_elf.hpp"
#include "preload/hook_table.hpp"
#include "preload/real_dlsym.hpp"
#include "preload/session.hpp"
#include "unwind/own_code.hpp"

namespace memtrace::preload {

#if defined(__x86_64__)
#define MEMTRACE_GOT_RELOCS 1
constexpr unsigned kRelJumpSlot = R_X86_64_JUMP_SLOT;
constexpr unsigned kRelGlobDat = R_X86_64_GLOB_DAT;
#elif defined(__aarch64__)
#define MEMTRACE_GOT_RELOCS 1
constexpr unsigned kRelJumpSlot = R_AARCH64_JUMP_SLOT;
constexpr unsigned kRelGlobDat = R_AARCH64_GLOB_DAT;
#endif

#ifndef MEMTRACE_GOT_RELOCS
void rebind_bypassing_objects() {}
#else

namespace {

constexpr int kDlsym = kHookCount;  // the dlsym hook, after the Hook indices
constexpr int kNames = kHookCount + 1;
static_assert(kNames <= 64, "a report keeps its names in a 64-bit mask");
constexpr int kDlsymVersions = 3;
const char* const kDlsymVersion[kDlsymVersions] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17"};

// Everything below is used under the scan lock only.
struct Tables {
  const char* name[kNames];      // null: not a name memtrace exports
  uintptr_t hook[kNames];        // memtrace's own function
  uintptr_t global[kNames];      // what a global lookup finds (memtrace's hook, or an interposer before it)
  uintptr_t target[kNames];      // what memtrace forwards to: the driver's (NCCL's) function
  uintptr_t dlsym_target[kDlsymVersions];  // libc's dlsym, by version
  const link_map* base_head;     // the base namespace's first object (the program)
};
Tables g_t;
bool g_tables_built = false;
unsigned long long g_built_adds = 0, g_built_subs = 0;
unsigned long long g_scanned_adds = 0, g_scanned_subs = 0;
bool g_scanned = false;

// Slots not resolved yet (lazy binding, an object still being relocated): looked at again at
// every trigger. Identified by their object (load bias and program headers).
struct PendingObject {
  uintptr_t base;
  const void* phdr;
  int first, count;  // into the slot array
};
struct PendingSlot {
  uintptr_t slot;
  int name;
};
constexpr int kMaxPendingObjects = 64;
constexpr int kMaxPendingSlots = 512;
struct PendingSet {
  PendingObject obj[kMaxPendingObjects];
  PendingSlot slot[kMaxPendingSlots];
  int nobj = 0, nslot = 0;
  bool overflow = false;
};
PendingSet g_pending[2];
int g_pending_cur = 0;

// Objects already named in a warning, by a hash of their path: once per library, however often
// it is loaded again.
constexpr int kMaxWarned = 64;
uint64_t g_warned[kMaxWarned];
int g_nwarned = 0;  // a ring once full

// What one scan found, written out after the loader's lock is released.
struct Report {
  char path[384];
  uint64_t names;  // the names found bound past memtrace (bit per name index)
  int patched;     // slots rewritten
  int error;       // errno of a slot that could not be rewritten, or 0
};
constexpr int kMaxReports = 16;

uintptr_t g_self_marker = 0;  // an address of memtrace's own code
uintptr_t g_vdso = 0, g_ldso = 0;
uintptr_t g_page = 4096;

bool defines_a_hooked_name(const LoadedElf& o) {
  for (int i = 0; i < kNames; ++i)
    if (g_t.name[i] && defines(o, g_t.name[i])) return true;
  return false;
}

int hooked_index(const char* n) {
  if (n[0] == 'd') return std::strcmp(n, "dlsym") == 0 ? kDlsym : -1;
  return classify_wrapped_name(n);
}

bool is_target(int i, uintptr_t v) {
  if (!v) return false;
  if (i != kDlsym) return v == g_t.target[i];
  for (uintptr_t t : g_t.dlsym_target)
    if (t && v == t) return true;
  return false;
}

bool in_base_namespace(uintptr_t dynamic, const link_map** cursor) {
  // dl_iterate_phdr walks the base namespace first, in list order: the cursor is nearly always right.
  if (*cursor && reinterpret_cast<uintptr_t>((*cursor)->l_ld) == dynamic) {
    *cursor = (*cursor)->l_next;
    return true;
  }
  for (const link_map* l = g_t.base_head; l; l = l->l_next)
    if (reinterpret_cast<uintptr_t>(l->l_ld) == dynamic) {
      *cursor = l->l_next;
      return true;
    }
  return false;
}

uint64_t path_key(const LoadedElf& o) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (const char* p = o.info->dlpi_name ? o.info->dlpi_name : ""; *p; ++p)
    h = (h ^ static_cast<unsigned char>(*p)) * 1099511628211ull;
  return h;
}

bool warned_before(const LoadedElf& o) {
  int n = g_nwarned < kMaxWarned ? g_nwarned : kMaxWarned;
  uint64_t key = path_key(o);
  for (int i = 0; i < n; ++i)
    if (g_warned[i] == key) return true;
  return false;
}

// Rewrites one slot; 0 or the errno that prevented it.
int rewrite(const LoadedElf& o, uintptr_t slot, uintptr_t value) {
  uintptr_t page = slot & ~(g_page - 1);
  bool relro = page >= o.relro_lo && page < o.relro_hi;
  if (!relro) {
    bool writable = false;
    for (int i = 0; i < o.info->dlpi_phnum; ++i) {
      const ElfW(Phdr)& ph = o.info->dlpi_phdr[i];
      uintptr_t a = o.base + ph.p_vaddr;
      if (ph.p_type == PT_LOAD && slot >= a && slot + sizeof(uintptr_t) <= a + ph.p_memsz)
        writable = (ph.p_flags & PF_W) != 0;
    }
    if (!writable) return EACCES;
  }
  if (relro && mprotect(reinterpret_cast<void*>(page), g_page, PROT_READ | PROT_WRITE) != 0) return errno;
  __atomic_store_n(reinterpret_cast<uintptr_t*>(slot), value, __ATOMIC_RELEASE);
  if (relro) mprotect(reinterpret_cast<void*>(page), g_page, PROT_READ);  // as the loader left it
  return 0;
}

struct Scan {
  bool full;                   // every object; else only those with pending slots
  const PendingSet* old;       // the pending slots of the last scan
  PendingSet* next;            // those of this one
  const link_map* cursor;
  Report reports[kMaxReports];
  int nreports = 0;
  int dropped_reports = 0;
  int patched = 0;
  int visited = 0;  // pending objects seen so far
};

void add_pending(Scan& s, const LoadedElf& o, uintptr_t slot, int name) {
  PendingSet& p = *s.next;
  if (p.nslot >= kMaxPendingSlots) {
    p.overflow = true;
    return;
  }
  if (p.nobj == 0 || p.obj[p.nobj - 1].base != o.base || p.obj[p.nobj - 1].phdr != o.info->dlpi_phdr) {
    if (p.nobj >= kMaxPendingObjects) {
      p.overflow = true;
      return;
    }
    p.obj[p.nobj++] = {o.base, o.info->dlpi_phdr, p.nslot, 0};
  }
  p.slot[p.nslot++] = {slot, name};
  ++p.obj[p.nobj - 1].count;
}

// One slot of one object: rewritten, left, or kept for the next trigger.
void examine(Scan& s, const LoadedElf& o, uintptr_t slot, int name, Report** report) {
  uintptr_t v = __atomic_load_n(reinterpret_cast<const uintptr_t*>(slot), __ATOMIC_ACQUIRE);
  uintptr_t want = g_t.global[name];
  if (v == want || v == g_t.hook[name]) return;  // reaches memtrace
  if (!want || !is_target(name, v)) {
    // Lazy binding not yet resolved (the object's own PLT), an object not yet relocated (a link-time
    // address, or 0), or another copy of the function (left alone for good).
    if (o.contains(v) || v < o.hi - o.base) add_pending(s, o, slot, name);
    return;
  }
  int err = rewrite(o, slot, want);
  if (!*report) {
    if (warned_before(o)) {
      static Report ignored;
      *report = &ignored;
    } else if (s.nreports < kMaxReports) {
      Report& r = s.reports[s.nreports++];
      const char* path = o.info->dlpi_name && o.info->dlpi_name[0] ? o.info->dlpi_name : "the program";
      std::strncpy(r.path, path, sizeof r.path - 1);
      r.path[sizeof r.path - 1] = '\0';
      r.names = 0;
      r.patched = r.error = 0;
      *report = &r;
      g_warned[g_nwarned++ % kMaxWarned] = path_key(o);
    } else {
      ++s.dropped_reports;
      static Report ignored;
      *report = &ignored;
    }
  }
  (*report)->names |= uint64_t(1) << name;
  if (err == 0) {
    ++(*report)->patched;
    ++s.patched;
  } else if (!(*report)->error) {
    (*report)->error = err;
  }
}

void examine_relocations(Scan& s, const LoadedElf& o, const ElfW(Rela)* rel, size_t n, Report** report) {
  for (size_t k = 0; k < n; ++k) {
    unsigned type = static_cast<unsigned>(ELF64_R_TYPE(rel[k].r_info));
    if (type != kRelJumpSlot && type != kRelGlobDat) continue;
    size_t sym = ELF64_R_SYM(rel[k].r_info);
    if (sym == STN_UNDEF || rel[k].r_addend != 0) continue;
    const ElfW(Sym)& es = o.symtab[sym];
    if (es.st_shndx != SHN_UNDEF) continue;
    const char* nm = o.strtab + es.st_name;
    if (nm[0] != 'c' && nm[0] != 'n' && nm[0] != 'd') continue;
    int name = hooked_index(nm);
    if (name < 0 || !g_t.name[name]) continue;
    examine(s, o, o.base + rel[k].r_offset, name, report);
  }
}

bool skipped(const dl_phdr_info* info, const LoadedElf& o) {
  if (o.contains(g_self_marker)) return true;
  if (g_vdso && reinterpret_cast<uintptr_t>(info->dlpi_phdr) - g_vdso < g_page) return true;
  if (g_ldso && info->dlpi_addr == g_ldso) return true;
  return false;
}

// Runs under the loader's list lock: reads and writes slots, takes no memtrace lock, writes nothing out.
int scan_object(dl_phdr_info* info, size_t, void* data) {
  Scan& s = *static_cast<Scan*>(data);
  LoadedElf o;
  if (s.full) {
    if (!read_loaded_elf(info, g_page, &o) || skipped(info, o)) return 0;
    if (!in_base_namespace(o.dynamic, &s.cursor) || defines_a_hooked_name(o)) return 0;
    Report* report = nullptr;
    examine_relocations(s, o, o.jmprel, o.jmprel_n, &report);
    examine_relocations(s, o, o.rela, o.rela_n, &report);
    return 0;
  }
  for (int i = 0; i < s.old->nobj; ++i) {
    const PendingObject& p = s.old->obj[i];
    if (p.base != info->dlpi_addr || p.phdr != info->dlpi_phdr) continue;
    if (!read_loaded_elf(info, g_page, &o)) return 0;
    Report* report = nullptr;
    for (int k = p.first; k < p.first + p.count; ++k) examine(s, o, s.old->slot[k].slot, s.old->slot[k].name, &report);
    return ++s.visited == s.old->nobj ? 1 : 0;  // the rest holds none
  }
  return 0;
}

struct Counters {
  unsigned long long adds = 0, subs = 0;
};
int read_counters(dl_phdr_info* info, size_t size, void* data) {
  auto* c = static_cast<Counters*>(data);
  if (size >= offsetof(dl_phdr_info, dlpi_subs) + sizeof(info->dlpi_subs)) {
    c->adds = info->dlpi_adds;
    c->subs = info->dlpi_subs;
  }
  return 1;
}

// The names, memtrace's hooks, what a global lookup finds and what memtrace forwards to. With
// dlsym and dlopen(RTLD_NOLOAD): outside the loader's list lock, only after objects came or went.
void build_tables() {
  DlsymFn next = next_dlsym();
  g_page = getauxval(AT_PAGESZ) ? getauxval(AT_PAGESZ) : 4096;
  g_vdso = getauxval(AT_SYSINFO_EHDR);
  g_ldso = getauxval(AT_BASE);
  g_self_marker = unwind::own_code().lo;
  void* self = dlopen(nullptr, RTLD_LAZY | RTLD_NOLOAD);
  link_map* head = nullptr;
  if (self && dlinfo(self, RTLD_DI_LINKMAP, &head) != 0) head = nullptr;
  if (self) dlclose(self);  // the program's own link_map, which lives as long as the process
  g_t.base_head = head;
  // Only a driver (NCCL) already loaded is asked for its functions: a scan never loads one.
  bool cuda = false, nccl = false;
  if (void* h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD)) cuda = true, dlclose(h);
  if (void* h = dlopen("libnccl.so.2", RTLD_LAZY | RTLD_NOLOAD)) nccl = true, dlclose(h);
  for (int i = 0; i < kHookCount; ++i) {
    Hook h = static_cast<Hook>(i);
    void* w = hook_wrapper(h);
    g_t.name[i] = w ? hook_name(h) : nullptr;
    g_t.hook[i] = reinterpret_cast<uintptr_t>(w);
    g_t.global[i] = w ? reinterpret_cast<uintptr_t>(next(RTLD_DEFAULT, hook_name(h))) : 0;
    bool loaded = is_nccl_hook(h) ? nccl : cuda;
    g_t.target[i] = w && loaded ? reinterpret_cast<uintptr_t>(real_pointer(h)) : 0;
  }
  g_t.name[kDlsym] = "dlsym";
  g_t.hook[kDlsym] = reinterpret_cast<uintptr_t>(&::dlsym);
  g_t.global[kDlsym] = reinterpret_cast<uintptr_t>(next(RTLD_DEFAULT, "dlsym"));
  g_t.target[kDlsym] = 0;
  for (int v = 0; v < kDlsymVersions; ++v)
    g_t.dlsym_target[v] = reinterpret_cast<uintptr_t>(dlvsym(RTLD_NEXT, "dlsym", kDlsymVersion[v]));
  // A lookup that failed above left its message for dlerror(); the program's next dlerror() must
  // not find it.
  dlerror();
}

void scan() {
  Counters c;
  dl_iterate_phdr(&read_counters, &c);
  bool changed = !g_scanned || c.adds != g_scanned_adds || c.subs != g_scanned_subs;
  const PendingSet& old = g_pending[g_pending_cur];
  if (!changed && old.nslot == 0) return;
  if (!g_tables_built || c.adds != g_built_adds || c.subs != g_built_subs) {
    build_tables();
    g_tables_built = true;
    g_built_adds = c.adds;
    g_built_subs = c.subs;
  }
  PendingSet& next = g_pending[1 - g_pending_cur];
  next.nobj = next.nslot = 0;
  next.overflow = false;
  static Scan s;  // under the scan lock; too large for the stack of a small thread
  s.full = changed;
  s.old = &old;
  s.next = &next;
  s.cursor = g_t.base_head;
  s.nreports = s.dropped_reports = s.patched = s.visited = 0;
  dl_iterate_phdr(&scan_object, &s);
  g_pending_cur = 1 - g_pending_cur;
  // The counters read before the scan: an object loaded during it is looked at again next time.
  g_scanned = true;
  g_scanned_adds = c.adds;
  g_scanned_subs = c.subs;

  for (int i = 0; i < s.nreports; ++i) {
    const Report& r = s.reports[i];
    char names[512];
    size_t len = 0;
    names[0] = '\0';
    for (int k = 0; k < kNames; ++k) {
      if (!(r.names & (uint64_t(1) << k))) continue;
      int n = std::snprintf(names + len, sizeof names - len, "%s%s", len ? ", " : "", g_t.name[k]);
      if (n < 0 || static_cast<size_t>(n) >= sizeof names - len) break;
      len += static_cast<size_t>(n);
    }
    if (r.error == 0)
      log::warn("{} bound {} past memtrace (opened with RTLD_DEEPBIND?): its driver calls before now were not "
                "seen; they are seen from here on",
                r.path, names);
    else
      log::warn("{} bound {} past memtrace (opened with RTLD_DEEPBIND?) and its table cannot be rewritten ({}): "
                "{}its driver calls are not seen",
                r.path, names, std::strerror(r.error), r.patched ? "some of " : "");
  }
  if (s.dropped_reports) log::warn("{} more objects bound memtrace's names past it", s.dropped_reports);
  if (s.patched || next.nslot || next.overflow)
    log::debug("deep-bind scan ({}): {} slots rewritten, {} unresolved slots in {} objects{}",
               s.full ? "all objects" : "unresolved slots", s.patched, next.nslot, next.nobj,
               next.overflow ? " (more not followed)" : "");
}

// One scan at a time, held as the scanning process's id: a child forked during a scan finds the
// parent's id there and takes the lock over.
std::atomic<pid_t> g_scanner{0};
std::atomic<bool> g_again{false};

bool try_lock_scan() {
  pid_t me = getpid();
  pid_t cur = 0;
  if (g_scanner.compare_exchange_strong(cur, me, std::memory_order_acquire)) return true;
  if (cur == me) return false;  // another thread of this process is scanning
  return g_scanner.compare_exchange_strong(cur, me, std::memory_order_acquire);
}

// glibc's fork resets the loader's main lock in the child but not the lock dl_iterate_phdr holds:
// a fork while any thread holds it (a scan inside dl_iterate_phdr, the program's own dlopen or
// dlclose) leaves the child hanging in its next dl_iterate_phdr. So a fork waits for a scan in
// progress (for a bounded time: the scanning thread might wait for a lock the forking one holds),
// and a forked child never scans (a child of a process that has used CUDA cannot use CUDA anyway).
bool g_held_for_fork = false;  // written by the forking thread only
std::atomic<bool> g_forked_child{false};
void before_fork() {
  timespec start, now;
  clock_gettime(CLOCK_MONOTONIC, &start);
  for (;;) {
    if (try_lock_scan()) {
      g_held_for_fork = true;
      return;
    }
    clock_gettime(CLOCK_MONOTONIC, &now);
    if ((now.tv_sec - start.tv_sec) * 1000000000L + (now.tv_nsec - start.tv_nsec) > 200000000L) return;
    sched_yield();
  }
}
void after_fork() {
  if (!g_held_for_fork) return;
  g_held_for_fork = false;
  g_scanner.store(0, std::memory_order_release);
}
void after_fork_child() {
  g_forked_child.store(true, std::memory_order_relaxed);
  after_fork();
}
std::atomic<bool> g_fork_handlers{false};

}  // namespace

void rebind_bypassing_objects() {
  if (!session_ready() || g_forked_child.load(std::memory_order_relaxed)) return;
  int saved = errno;
  if (!g_fork_handlers.exchange(true)) pthread_atfork(&before_fork, &after_fork, &after_fork_child);
  g_again.store(true, std::memory_order_release);
  while (g_again.load(std::memory_order_acquire)) {
    // A scan in progress (another thread's; or this thread's, reached from inside it) is asked to
    // go once more instead: waiting here could deadlock with a loader lock this thread holds.
    if (!try_lock_scan()) break;
    g_again.store(false, std::memory_order_relaxed);
    scan();
    g_scanner.store(0, std::memory_order_release);
  }
  errno = saved;
}

#endif  // MEMTRACE_GOT_RELOCS

}  // namespace memtrace::preload
