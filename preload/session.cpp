#include "preload/session.hpp"

#include <dlfcn.h>
#include <link.h>
#include <sys/auxv.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <new>
#include <string>
#include <string_view>
#include <vector>

#include "core/log.hpp"
#include "output/dump.hpp"
#include "preload/caching_mode.hpp"
#include "preload/deep_bind.hpp"
#include "preload/dump_triggers.hpp"
#include "unwind/owner.hpp"
#include "unwind/python_frames.hpp"
#include "unwind/readable_memory.hpp"
#include "unwind/stack_capture.hpp"

namespace memtrace::preload {

__thread ThreadState t_state __attribute__((tls_model("initial-exec"))) = {false, nullptr};

namespace {

enum State : int { kUninitialised = 0, kInitialising = 1, kReady = 2, kOff = 3 };
std::atomic<int> g_state{kUninitialised};
std::atomic<uint64_t> g_dump_sequence{0};
alignas(Session) unsigned char g_storage[sizeof(Session)];
// Held while a snapshot is written (any thread's).
pthread_mutex_t g_dump_mutex = PTHREAD_MUTEX_INITIALIZER;
Session* g_session = nullptr;

uintptr_t g_self_lo = 0, g_self_hi = 0;

int find_self(dl_phdr_info* info, size_t, void* data) {
  auto me = reinterpret_cast<uintptr_t>(data);
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD) continue;
    uintptr_t lo = info->dlpi_addr + ph.p_vaddr, hi = lo + ph.p_memsz;
    if (me >= lo && me < hi) {
      // Whole object: every executable PT_LOAD of it.
      uintptr_t olo = UINTPTR_MAX, ohi = 0;
      for (int j = 0; j < info->dlpi_phnum; ++j) {
        const ElfW(Phdr)& q = info->dlpi_phdr[j];
        if (q.p_type != PT_LOAD || !(q.p_flags & PF_X)) continue;
        uintptr_t a = info->dlpi_addr + q.p_vaddr;
        if (a < olo) olo = a;
        if (a + q.p_memsz > ohi) ohi = a + q.p_memsz;
      }
      g_self_lo = olo;
      g_self_hi = ohi;
      return 1;
    }
  }
  return 0;
}

std::atomic<bool> g_exiting{false};

// Registered at the first CUDA call: the program is exiting, but handlers it registered before
// that call have yet to run, and they may free memory. The snapshot waits (before_exit_teardown).
void on_exit_begins() { g_exiting.store(true, std::memory_order_release); }

// Runs from _dl_fini, after every atexit handler and static destructor of the program.
__attribute__((destructor)) void exit_dump_from_fini() {
  if (g_state.load(std::memory_order_acquire) == kReady) dump_now("exit");
}

// As the library loads, before the program runs: memtrace's lines go to the stderr the process
// started with (or MEMTRACE_LOG), whatever the program later puts on fd 2.
__attribute__((constructor)) void take_log_destination() { log::set_destination(secure_getenv("MEMTRACE_LOG")); }

void fork_child() {
  // The child owns no device memory and cannot use the parent's context.
  if (!g_session) return;
  g_session->recorder.reset_after_fork();
  g_session->stacks.clear();
  g_session->owners.clear();
  unwind::safe_memory_reset();  // the parent may have been refreshing its table of mappings
  caching_mode::after_fork_child();
  g_dump_sequence.store(0);
  // Forked while another thread was writing a snapshot: that thread is not in the child,
  // and the child's own snapshot at exit must not wait for it.
  pthread_mutex_init(&g_dump_mutex, nullptr);
  t_state.in_hook = false;
  dump_triggers_after_fork();
}

// False when MEMTRACE_RANKS leaves this process out, or in a secure-execution process: then
// nothing is recorded or written.
bool initialise() {
  // A setuid or file-capability program (memtrace put in /etc/ld.so.preload reaches those too)
  // runs with the rights of its owner, and its environment is its caller's: a MEMTRACE_OUTPUT
  // there would let any user overwrite files only the owner may. memtrace stays out of it.
  if (getauxval(AT_SECURE)) return false;
  GetEnvFn env = [](const char* n) -> const char* { return getenv(n); };
  Config cfg = parse_config(env);
  log::set_debug(cfg.debug);
  long rank = process_rank(env);
  if (!rank_selected(cfg, rank)) {
    // A process with no rank at all is most likely a launcher or a tool started beside the job:
    // not recording it is right, but silence would look like memtrace failing.
    if (rank < 0)
      log::warn("MEMTRACE_RANKS={} is set but this process has no rank (none of RANK, OMPI_COMM_WORLD_RANK, "
                "SLURM_PROCID, PMI_RANK): not recording it",
                cfg.ranks);
    else
      log::debug("rank {} is not in MEMTRACE_RANKS={}: not recording", rank, cfg.ranks);
    return false;
  }
  Session* s = new (g_storage) Session();
  s->config = cfg;
  s->recorder.configure(cfg.max_entries, cfg.skip_actions);
  s->stacks.limit_stacks(cfg.max_stacks);
  caching_mode::configure(cfg);
  dl_iterate_phdr(&find_self, reinterpret_cast<void*>(&find_self));
  unwind::set_python_read_mode(cfg.python == PythonMode::Off   ? unwind::PythonReadMode::Off
                               : cfg.python == PythonMode::Gil ? unwind::PythonReadMode::GilOnly
                                                               : unwind::PythonReadMode::Auto);
  g_session = s;
  pthread_atfork(nullptr, nullptr, &fork_child);
  atexit(&on_exit_begins);
  start_dump_triggers(cfg);
  log::debug("recording: stacks={} depth={} max_entries={} output={}",
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

void read_debug_flag_once() {
  static std::atomic<bool> done{false};
  if (done.load(std::memory_order_acquire)) return;
  bool on = false;
  if (const char* v = secure_getenv("MEMTRACE_DEBUG"); v && parse_bool(v, &on) && on) log::set_debug(true);
  done.store(true, std::memory_order_release);
}

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
}  // namespace

uint32_t capture_stack_id(Session& s, void* caller) {
  uintptr_t pcs[256 + 8];
  int n = 0;
  int skip = 0;
  if (s.config.stacks == StackMode::Native) {
    n = unwind::capture(pcs, s.config.stack_depth + 8);
    while (skip < n && pcs[skip] >= g_self_lo && pcs[skip] < g_self_hi) ++skip;
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
  if (uint32_t id = s.stacks.intern(pcs + skip, static_cast<uint32_t>(keep)); id != 0 || keep <= 0) return id;
  return stack_table_full(s, pcs + skip, keep);
}

namespace {
bool g_exit_dump_done = false;  // under g_dump_mutex

// Interval snapshots of a long job would fill the disk: only the last MEMTRACE_INTERVAL_KEEP stay,
// unless the template names each one itself (%n), which asks for them all. Under g_dump_mutex.
void keep_last_interval_dumps(const Session& s, const std::string& path) {
  static std::vector<std::string>* kept = new std::vector<std::string>();  // never destroyed: dumps at exit use it
  const int keep = s.config.interval_keep;
  if (keep <= 0 || s.config.output.find("%n") != std::string::npos) return;
  kept->push_back(path);
  while (static_cast<int>(kept->size()) > keep) {
    ::unlink(kept->front().c_str());
    kept->erase(kept->begin());
  }
}
std::atomic<bool> g_exit_dump_taken{false};
bool exit_dump_taken() { return g_exit_dump_taken.load(std::memory_order_acquire); }

// Dumps other than the exit one must not overwrite each other or the exit snapshot: a
// template without %n gets "-%n" before its extension.
std::string template_for(const std::string& tmpl, bool at_exit) {
  if (at_exit || tmpl.find("%n") != std::string::npos) return tmpl;
  size_t slash = tmpl.rfind('/');
  size_t dot = tmpl.rfind('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash) || dot == slash + 1)
    return tmpl + "-%n";
  return tmpl.substr(0, dot) + "-%n" + tmpl.substr(dot);
}
}  // namespace

void dump_now(const char* reason) {
  Session* s = session_if_active();
  if (!s) return;
  // An out-of-memory dump runs in the program's own thread, between its call and the result.
  const int saved_errno = errno;
  rebind_bypassing_objects();  // an object that bypasses memtrace is named before the snapshot misses it
  bool was = t_state.in_hook;
  t_state.in_hook = true;
  bool at_exit = std::string_view(reason) == "exit";
  if (at_exit) check_dump_signal(true);
  // One dump at a time; the exit dump waits for one in flight (its temporary file must not be
  // left behind), and none starts after it.
  pthread_mutex_lock(&g_dump_mutex);
  if (!g_exit_dump_done) {
    g_exit_dump_done = at_exit;
    if (at_exit) g_exit_dump_taken.store(true, std::memory_order_release);
    if (at_exit && caching_mode::any_allocator()) caching_mode::settle_pending_frees();
    StateCopy state = s->recorder.copy_state();
    state.distinct_stacks = s->stacks.size();
    state.stack_table_bytes = s->stacks.memory_bytes();
    state.owner_names = s->owners.names();
    if (unwind::python_present()) {
      state.python_support = std::string(unwind::python_support());
      state.python_direct = unwind::python_reads_directly();
      state.python_walks_failed = unwind::python_walks_failed();
    }
    output::DumpRequest req;
    req.path_template = template_for(s->config.output, at_exit);
    req.sequence = g_dump_sequence.fetch_add(1);
    // The stderr summary belongs to the end of the run; on-demand dumps say one line.
    req.print_summary = s->config.summary && at_exit;
    req.include_frames = s->config.stacks != StackMode::None;
    req.symbolize_threads = s->config.symbolize_threads;
    req.reason = reason;
    req.module_history = s->owners.module_history();
    req.allocator = caching_mode::settings();
    output::DumpReport rep = output::dump_snapshot(state, s->stacks, req);
    if (!at_exit && rep.written && s->config.summary)
      log::info("{} snapshot: {} ({} bytes, {:.2f} s)", reason, rep.path, rep.bytes, rep.seconds);
    if (rep.written && std::string_view(reason) == "interval") keep_last_interval_dumps(*s, rep.path);
  }
  pthread_mutex_unlock(&g_dump_mutex);
  t_state.in_hook = was;
  errno = saved_errno;
}

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
    if (base.starts_with("libc.so") || base.starts_with("ld-linux")) dump_now("exit");
    return;
  }
}

}  // namespace memtrace::preload
