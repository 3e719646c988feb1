// The process-wide recording session: configuration, recorder and stack table, created on
// the first hooked call (never in a constructor), immortal (other libraries free memory
// after our destructors run), reset in a forked child.
#pragma once
#include <cstdint>

#include "core/config.hpp"
#include "core/recorder.hpp"
#include "preload/owners.hpp"
#include "unwind/stack_table.hpp"

namespace memtrace::preload {

struct Session {
  Config config;
  Recorder recorder;
  unwind::StackTable stacks;
  OwnerTable owners;
};

// The session if recording is on, else null. Safe to call from any thread, any time.
Session* session_if_active();
// Whether the session is recording now; never starts it.
bool session_ready();

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

// Captures the caller's stack (memtrace's own frames removed) and interns it. With
// MEMTRACE_STACKS=none only the immediate caller is kept, enough to name the owner.
// Must be called directly from the exported wrapper.
uint32_t capture_stack_id(Session& s, void* caller);

// Reads MEMTRACE_DEBUG once, without starting the session: the dlsym hook must stay light
// but its substitutions should be visible in the debug log from the very first lookup.
void read_debug_flag_once();

// Writes a snapshot now (used at exit).
void dump_now(const char* reason);

// The exit snapshot is taken as late as it can be while still telling the program's story: after
// the program's own exit-time frees (atexit handlers and static destructors registered before its
// first CUDA call run after memtrace's atexit), from memtrace's destructor; or earlier, just
// before the first free or context teardown that the CUDA runtime makes on its own during exit,
// which would otherwise make everything look freed. Called by the free and teardown hooks.
void before_exit_teardown();

}  // namespace memtrace::preload
