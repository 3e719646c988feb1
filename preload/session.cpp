#include "preload/session.hpp"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/auxv.h>

#include <atomic>
#include <mutex>
#include <new>
#include <string>

#include "core/cold_log.hpp"
#include "preload/allocator_settings.hpp"
#include "preload/caching_mode.hpp"
#include "preload/dump_triggers.hpp"
#include "preload/exit_dump.hpp"
#include "preload/fork_child.hpp"
#include "preload/immortal.hpp"
#include "preload/state_session.hpp"
#include "unwind/debug_cache.hpp"
#include "unwind/own_code.hpp"
#include "unwind/python_frames.hpp"

namespace memtrace::preload {

__thread ThreadState t_state __attribute__((tls_model("initial-exec"))) = {false, nullptr};

namespace {

enum State : int { kUninitialised = 0, kInitialising = 1, kReady = 2, kOff = 3 };
std::atomic<int> g_state{kUninitialised};
alignas(Session) unsigned char g_storage[sizeof(Session)];
Session* g_session = nullptr;

// The allocator settings of a process that does not record: MEMTRACE_ALLOC_CONF as its Config
// read it (nothing in secure execution), parsed on first use.
struct Unrecorded {
  std::once_flag once;
  std::string alloc_conf_text;
  caching::AllocConf alloc_conf;
};
constinit Immortal<Unrecorded> g_unrecorded;

void in_forked_child() {
  if (g_session) reset_in_forked_child(*g_session);
}

// False when MEMTRACE_RANKS leaves this process out, or in a secure-execution process: then
// nothing is recorded or written.
bool initialise() {
  // A setuid or file-capability program (memtrace put in /etc/ld.so.preload reaches those too)
  // runs with the rights of its owner, and its environment is its caller's: a MEMTRACE_OUTPUT
  // there would let any user overwrite files only the owner may. memtrace stays out of it.
  if (getauxval(AT_SECURE)) return false;
  GetEnvFn env = [](const char* n) -> const char* { return getenv(n); };
  // The log level was set as the library loaded (preload/log_setup.cpp); cfg.log_level is the
  // same reading, and a bad value's warning comes from here, with every other variable's.
  Config cfg = parse_config(env);
  const long rank = launcher_rank(env).number;
  if (!rank_selected(cfg, rank)) {
    // A process with no rank at all is most likely a launcher or a tool started beside the job:
    // not recording it is right, but silence would look like memtrace failing.
    if (rank < 0)
      log::cold().warn("MEMTRACE_RANKS={} is set but this process has no rank (none of RANK, "
                       "OMPI_COMM_WORLD_RANK, SLURM_PROCID, PMI_RANK): not recording it",
                       cfg.ranks);
    else
      log::cold().debug("rank {} is not in MEMTRACE_RANKS={}: not recording", rank, cfg.ranks);
    g_unrecorded.value.alloc_conf_text = cfg.alloc_conf;
    return false;
  }
  Session* s = new (g_storage) Session();
  s->config = cfg;
  s->recorder.configure(cfg.max_entries, cfg.skip_actions, cfg.range_history);
  s->stacks.limit_stacks(cfg.max_stacks);
  s->alloc_conf = parse_allocator_settings(cfg.alloc_conf);
  caching_mode::configure(cfg);
  unwind::set_debug_cache_setting(cfg.debug_cache);
  unwind::own_code();  // found now rather than in the first stack capture
  unwind::set_python_read_mode(cfg.python == PythonMode::Off   ? unwind::PythonReadMode::Off
                               : cfg.python == PythonMode::Gil ? unwind::PythonReadMode::GilOnly
                                                               : unwind::PythonReadMode::Auto);
  start_state_file(*s);
  g_session = s;
  pthread_atfork(nullptr, nullptr, &in_forked_child);
  watch_for_exit();
  start_dump_triggers(cfg);
  watch_fatal_signals();
  log::cold().debug("recording: stacks={} depth={} max_entries={} output={}",
                    cfg.stacks == StackMode::Native ? "native" : "none", cfg.stack_depth, cfg.max_entries,
                    cfg.output);
  return true;
}

}  // namespace

Session* session_if_active() {
  int st = g_state.load(std::memory_order_acquire);
  if (st == kReady) {
    resume_dump_thread_after_fork();
    return g_session;
  }
  if (st == kOff) return nullptr;
  int expected = kUninitialised;
  if (g_state.compare_exchange_strong(expected, kInitialising, std::memory_order_acq_rel)) {
    t_state.in_hook = true;  // anything initialisation triggers passes straight through
    bool on = initialise();
    t_state.in_hook = false;
    g_state.store(on ? kReady : kOff, std::memory_order_release);
    return on ? g_session : nullptr;
  }
  // Another thread is initialising: it takes microseconds and calls no hook.
  while ((st = g_state.load(std::memory_order_acquire)) == kInitialising) sched_yield();
  return st == kReady ? g_session : nullptr;
}

bool session_ready() { return g_state.load(std::memory_order_acquire) == kReady; }
bool session_untouched() { return g_state.load(std::memory_order_acquire) == kUninitialised; }

const caching::AllocConf& allocator_conf() {
  if (g_session) return g_session->alloc_conf;
  Unrecorded& u = g_unrecorded.value;
  std::call_once(u.once, [&u] { u.alloc_conf = parse_allocator_settings(u.alloc_conf_text); });
  return u.alloc_conf;
}

}  // namespace memtrace::preload
