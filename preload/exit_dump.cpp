#include "preload/exit_dump.hpp"

#include <dlfcn.h>
#include <sys/auxv.h>
#include <unistd.h>
#include <stdlib.h>

#include <atomic>
#include <cstdint>
#include <string_view>

#include "core/log.hpp"
#include "preload/dumps.hpp"
#include "preload/session.hpp"
#include "unwind/owner.hpp"
#include "unwind/stack_capture.hpp"

namespace memtrace::preload {

namespace {

std::atomic<bool> g_exiting{false};

// Registered at the first CUDA call: the program is exiting, but handlers it registered before
// that call have yet to run, and they may free memory. The snapshot waits (before_exit_teardown).
void on_exit_begins() { g_exiting.store(true, std::memory_order_release); }

// The program `memtrace run` started (it execs the program in its own process, and says which
// pid in MEMTRACE_RUN_PID), so that a user who sees nothing can tell memtrace was there. Its
// children and a plain LD_PRELOAD stay silent: a shell's every helper would print a line.
bool started_by_memtrace_run() {
  if (getauxval(AT_SECURE)) return false;  // that environment belongs to the caller
  const char* v = getenv("MEMTRACE_RUN_PID");
  const char* quiet = getenv("MEMTRACE_SUMMARY");
  if (!v || (quiet && std::string_view(quiet) == "0")) return false;
  char* end = nullptr;
  long pid = strtol(v, &end, 10);
  return end != v && *end == '\0' && pid == static_cast<long>(getpid());
}

// Runs from _dl_fini, after every atexit handler and static destructor of the program.
__attribute__((destructor)) void exit_dump_from_fini() {
  if (session_ready()) {
    dump_now(output::DumpKind::Exit);
  } else if (session_untouched() && started_by_memtrace_run()) {
    log::info("no CUDA memory call seen: nothing recorded, no snapshot written");
  }
}

}  // namespace

void watch_for_exit() { atexit(&on_exit_begins); }

void before_exit_teardown() {
  if (!g_exiting.load(std::memory_order_acquire) || exit_dump_taken()) return;
  // Who is freeing: the innermost frame outside memtrace, the driver and the runtime. The C
  // library's exit code or the loader calling the runtime's own teardown means the runtime is
  // taking everything down: the snapshot goes first. Anything else is the program's own free.
  uintptr_t pcs[32];
  int n = unwind::capture(pcs, 32);
  for (int i = 0; i < n; ++i) {
    Dl_info info;
    uintptr_t pc = pcs[i];
    if (!dladdr(reinterpret_cast<void*>(pc > 0 ? pc - 1 : 0), &info) || !info.dli_fname) continue;
    std::string_view path = info.dli_fname;
    if (unwind::is_infrastructure(path)) continue;
    std::string_view base = path.substr(path.rfind('/') == std::string_view::npos ? 0 : path.rfind('/') + 1);
    if (base.starts_with("libc.so") || base.starts_with("ld-linux")) dump_now(output::DumpKind::Exit);
    return;
  }
}

}  // namespace memtrace::preload
