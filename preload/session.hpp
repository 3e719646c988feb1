// The process-wide recording session and its life cycle: configuration (the MEMTRACE_* variables
// and the allocator settings, each parsed once), recorder, stack table and owners, created on the
// first hooked call (never in a constructor), immortal (other libraries free memory after our
// destructors run), reset in a forked child (fork_child.cpp).
#pragma once
#include <cstdint>

#include "core/caching/alloc_conf.hpp"
#include "core/config.hpp"
#include "core/recorder.hpp"
#include "preload/owners.hpp"
#include "unwind/stack_table.hpp"

namespace memtrace::preload {

struct Session {
  Config config;
  caching::AllocConf alloc_conf;  // MEMTRACE_ALLOC_CONF, parsed once as the session starts
  Recorder recorder;
  unwind::StackTable stacks;
  OwnerTable owners;
};

// The session if recording is on, else null. Safe to call from any thread, any time.
Session* session_if_active();
// Whether the session is recording now; never starts it.
bool session_ready();
// Whether no hooked call has happened yet (the session was never asked for).
bool session_untouched();

// The caching allocator's settings: the session's. A process that does not record (MEMTRACE_RANKS
// leaves it out, secure execution) still serves memtrace_malloc: its settings are parsed from the
// same Config the first time they are needed. Call after a HookScope has started the session.
const caching::AllocConf& allocator_conf();

// Per-thread state. initial-exec TLS: a preloaded library has static TLS, and this keeps
// every access a single instruction.
struct ThreadState {
  bool in_hook;
  const char* note;  // NCCL call in progress on this thread, shown as user_metadata
};
extern __thread ThreadState t_state __attribute__((tls_model("initial-exec")));

// Guards one hooked call: re-entry (memtrace's own work reaching a hook) and calls made
// before initialisation finished pass straight through.
class HookScope {
 public:
  HookScope() noexcept {
    if (t_state.in_hook) return;
    s_ = session_if_active();
    if (s_) t_state.in_hook = true;
  }
  ~HookScope() {
    if (s_) t_state.in_hook = false;
  }
  HookScope(const HookScope&) = delete;
  HookScope& operator=(const HookScope&) = delete;
  Session* session() const { return s_; }

 private:
  Session* s_ = nullptr;
};

}  // namespace memtrace::preload
