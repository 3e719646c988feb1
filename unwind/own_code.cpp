#include "unwind/own_code.hpp"

#include <link.h>

namespace memtrace::unwind {

namespace {

struct Query {
  uintptr_t addr;
  CodeRange found;
};

int find_object(dl_phdr_info* info, size_t, void* data) {
  auto* q = static_cast<Query*>(data);
  bool holds = false;
  CodeRange r{UINTPTR_MAX, 0};
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD || !(ph.p_flags & PF_X)) continue;
    uintptr_t a = info->dlpi_addr + ph.p_vaddr, b = a + ph.p_memsz;
    if (q->addr >= a && q->addr < b) holds = true;
    if (a < r.lo) r.lo = a;
    if (b > r.hi) r.hi = b;
  }
  if (!holds) return 0;
  q->found = r;
  return 1;
}

}  // namespace

CodeRange code_range_of(uintptr_t addr) {
  Query q{addr, {}};
  dl_iterate_phdr(&find_object, &q);
  return q.found;
}

CodeRange own_code() {
  // A trivially destructible static: nothing runs at exit, and the exit snapshot still reads it.
  // Any function of unwind/ lies in whatever holds memtrace's code.
  static const CodeRange own = code_range_of(reinterpret_cast<uintptr_t>(&code_range_of));
  return own;
}

}  // namespace memtrace::unwind
