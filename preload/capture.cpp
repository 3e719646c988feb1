#include "preload/capture.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>

#include "core/log.hpp"
#include "unwind/owner.hpp"
#include "unwind/own_code.hpp"
#include "unwind/python_frames.hpp"
#include "unwind/stack_capture.hpp"

namespace memtrace::preload {

namespace {
// The stack table is full (MEMTRACE_MAX_STACKS distinct stacks): later events are recorded with
// a stack of one address, the first outside memtrace, the driver and the runtime, moved to the
// start of its module so that one module is one stack. It names who asked, so owners stay right
// in the summary and the snapshot; the frame itself reads as "<module>+0x0".
uint32_t stack_table_full(Session& s, const uintptr_t* pcs, int n) {
  static std::atomic<bool> said{false};
  if (!said.exchange(true))
    log::warn("the stack table is full ({} distinct stacks, MEMTRACE_MAX_STACKS): later allocations are "
              "recorded with their owner's module instead of a stack",
              s.stacks.size());
  for (int i = 0; i < n; ++i) {
    if (unwind::is_python_frame(pcs[i])) continue;
    Dl_info info;
    if (!dladdr(reinterpret_cast<void*>(pcs[i] - 1), &info) || !info.dli_fname || !info.dli_fbase) continue;
    if (unwind::is_infrastructure(info.dli_fname)) continue;
    uintptr_t base = reinterpret_cast<uintptr_t>(info.dli_fbase) + 1;  // a "return address" inside it
    return s.stacks.intern_reserved(&base, 1);
  }
  return 0;
}

// Stack ids by the capture's token (unwind/stack_capture.hpp): a thread that allocates from the
// same stack again gets the id without dropping frames or interning again. Keyed too by the
// session and the table's generation (a forked child's table starts empty). Not under CPython,
// whose frames are read apart from the native walk.
struct IdMemo {
  uint64_t token;
  const Session* session;
  uint32_t generation;
  uint32_t id;
};
// As many as the walks a thread remembers: the live tokens then never share an entry. (1.5 KiB of
// static TLS; the library is preloaded, so the loader sizes the block for it.)
constexpr unsigned kIdMemos = unwind::kRememberedWalks;
__thread IdMemo t_ids[kIdMemos] __attribute__((tls_model("initial-exec")));
}  // namespace

uint32_t capture_stack_id(Session& s, void* caller) {
  uintptr_t pcs[256 + 8];
  int n = 0;
  int skip = 0;
  IdMemo* memo = nullptr;
  uint64_t token = 0;
  if (s.config.stacks == StackMode::Native) {
    n = unwind::capture(pcs, s.config.stack_depth + 8, &token);
    if (token != 0 && !unwind::python_present()) {
      memo = &t_ids[token % kIdMemos];
      if (memo->token == token && memo->session == &s && memo->generation == s.stacks.generation())
        return memo->id;
      memo->token = 0;
    }
    const unwind::CodeRange own = unwind::own_code();
    while (skip < n && own.contains(pcs[skip])) ++skip;
  }
  if (skip >= n) {
    pcs[0] = reinterpret_cast<uintptr_t>(caller);
    n = 1;
    skip = 0;
  }
  if (s.config.stacks == StackMode::Native && unwind::python_present()) {
    // Under CPython the interpreter's native frames are replaced by the Python frames they run.
    const int room = static_cast<int>(sizeof pcs / sizeof pcs[0]) - skip;
    n = skip + unwind::splice_python_frames(pcs + skip, n - skip, std::min(s.config.stack_depth, room));
    static std::atomic<bool> said{false};
    if (!said.load(std::memory_order_relaxed) && !said.exchange(true))
      log::debug("python: {}", unwind::python_support());
  }
  int keep = n - skip;
  if (keep > s.config.stack_depth) keep = s.config.stack_depth;
  const uint32_t generation = s.stacks.generation();
  if (uint32_t id = s.stacks.intern(pcs + skip, static_cast<uint32_t>(keep)); id != 0 || keep <= 0) {
    if (memo != nullptr && id != 0) *memo = {token, &s, generation, id};
    return id;
  }
  return stack_table_full(s, pcs + skip, keep);
}

}  // namespace memtrace::preload
