#include "preload/dump_triggers.hpp"

#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <time.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "core/log.hpp"
#include "preload/dumps.hpp"
#include "preload/session.hpp"
#include "preload/state_session.hpp"

namespace memtrace::preload {

std::atomic<bool> g_restart_in_child{false};

namespace {

constexpr int kMaxOomDumps = 3;

// What the dump thread is asked to do, as bits of g_pending: requests that arrive while it is busy
// are answered by one dump.
constexpr unsigned kDumpSignal = 1, kDumpInterval = 2;
constexpr unsigned kDieAfterDump = 1u << 8;

sem_t g_wake;
std::atomic<bool> g_sem_ready{false};
std::atomic<unsigned> g_pending{0};
std::atomic<bool> g_thread_started{false};
std::atomic<int> g_oom_dumps{0};
double g_interval_s = 0;
bool g_dump_on_oom = true;
struct sigaction g_previous;
int g_signal = 0;

bool default_is_fatal(int sig) {
  switch (sig) {
    case SIGTERM: case SIGINT: case SIGHUP: case SIGALRM: case SIGQUIT: case SIGXCPU: case SIGXFSZ:
    case SIGVTALRM: case SIGPROF: case SIGPWR: case SIGIO: case SIGPIPE:
      return true;
    default:
      return false;  // USR1, USR2 and the real-time signals: a request for a snapshot, nothing more
  }
}

timespec after(const timespec& t, double seconds) {
  timespec r = t;
  double whole = static_cast<double>(static_cast<long>(seconds));
  r.tv_sec += static_cast<time_t>(whole);
  r.tv_nsec += static_cast<long>((seconds - whole) * 1e9);
  if (r.tv_nsec >= 1000000000L) {
    r.tv_sec += 1;
    r.tv_nsec -= 1000000000L;
  }
  return r;
}
bool earlier(const timespec& a, const timespec& b) {
  return a.tv_sec < b.tv_sec || (a.tv_sec == b.tv_sec && a.tv_nsec < b.tv_nsec);
}

// How often the dump thread looks at the dump signal's handler and pending set.
constexpr double kSignalCheckS = 1.0;

void wait_for_work() {
  if (g_interval_s <= 0 && g_signal <= 0) {
    while (sem_wait(&g_wake) != 0 && errno == EINTR) {
    }
    return;
  }
  timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  const timespec interval_due = after(now, g_interval_s);
  for (;;) {
    timespec deadline = interval_due;
    bool checking = g_signal > 0;
    if (checking) {
      timespec check_due = after(now, kSignalCheckS);
      if (g_interval_s <= 0 || earlier(check_due, deadline)) deadline = check_due;
    }
    if (sem_clockwait(&g_wake, CLOCK_MONOTONIC, &deadline) == 0) return;
    if (errno == ETIMEDOUT) {
      clock_gettime(CLOCK_MONOTONIC, &now);
      if (g_interval_s > 0 && !earlier(now, interval_due)) {
        g_pending.fetch_or(kDumpInterval);
        return;
      }
      if (checking) check_dump_signal(false);
      continue;
    }
    if (errno != EINTR) return;
    clock_gettime(CLOCK_MONOTONIC, &now);
  }
}

// The signal's default action is taken after its snapshot: a TERM from a scheduler still ends
// the job, now with a record of what it held.
void die_by_default(int sig) {
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(sig, &dfl, nullptr);
  sigset_t one;
  sigemptyset(&one);
  sigaddset(&one, sig);
  pthread_sigmask(SIG_UNBLOCK, &one, nullptr);
  raise(sig);
}

bool dump_waiting() { return g_pending.load(std::memory_order_relaxed) != 0; }

void* dump_thread(void*) {
  t_state.in_hook = true;  // nothing this thread does is the program's memory traffic
  // The thread is idle at first: it takes the first touches of the history ring's pages, which
  // the program's events would pay otherwise (docs/design.md, "The trace ring"). A dump asked for
  // meanwhile comes first; the pages left are paid as the ring fills.
  if (Session* s = session_if_active()) s->recorder.warm_ring(&dump_waiting);
  for (;;) {
    wait_for_work();
    unsigned why = g_pending.exchange(0);
    // One dump answers every request that arrived meanwhile.
    if (why & kDumpSignal)
      dump_now(output::DumpKind::Signal);
    else if (why & kDumpInterval)
      dump_now(output::DumpKind::Interval);
    if (why & kDieAfterDump) die_by_default(g_signal);
  }
  return nullptr;
}

void ensure_thread() {
  if (g_thread_started.exchange(true)) return;
  // The thread must not take the program's signals: block them all while it is created.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_t tid;
  int rc = pthread_create(&tid, &attr, &dump_thread, nullptr);
  pthread_attr_destroy(&attr);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (rc != 0) {
    g_thread_started.store(false);
    log::warn("cannot start the dump thread ({}); snapshots on signal, interval and out-of-memory are off", rc);
    return;
  }
  pthread_setname_np(tid, "memtrace-dump");
}

void on_signal(int sig, siginfo_t* info, void* uctx) {
  int saved = errno;
  g_pending.fetch_or(kDumpSignal);
  if (g_sem_ready.load()) sem_post(&g_wake);
  errno = saved;
  // The program's own handler, if it had one, still runs. Without one, a signal whose default
  // action ends the process (TERM, INT, HUP, ALRM, QUIT, ...) ends it after the snapshot; the
  // signals people send only to ask for a snapshot (USR1, USR2, real-time ones) are not fatal.
  if (g_previous.sa_flags & SA_SIGINFO) {
    if (g_previous.sa_sigaction) g_previous.sa_sigaction(sig, info, uctx);
  } else if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN) {
    g_previous.sa_handler(sig);
  } else if (g_previous.sa_handler == SIG_DFL && default_is_fatal(sig)) {
    g_pending.fetch_or(kDieAfterDump);
    if (g_sem_ready.load()) sem_post(&g_wake);
  }
}

std::atomic<bool> g_warned_replaced{false};
std::atomic<bool> g_warned_blocked{false};
int g_pending_checks = 0;  // consecutive checks that found the signal pending (dump thread only)

}  // namespace

// A program that installs its own handler for the dump signal, or blocks it in every thread, turns
// signal snapshots off without a word: the user sends the signal and nothing happens. Said once
// each, from the dump thread's periodic look and again at exit. Pending is read from the dump
// thread, which blocks every signal, so a process-wide signal that no thread accepts shows there;
// it must be seen twice in a row (a signal in flight to a thread that accepts it is pending for a
// moment). At exit one look is enough: a deliverable signal would have been taken by then.
void check_dump_signal(bool at_exit) {
  if (g_signal <= 0) return;
  struct sigaction cur {};
  if (!g_warned_replaced.load(std::memory_order_relaxed) && sigaction(g_signal, nullptr, &cur) == 0) {
    bool ours = (cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == &on_signal;
    if (!ours && !g_warned_replaced.exchange(true)) {
      note_dump_signal_off();
      log::warn("MEMTRACE_SIGNAL: the program replaced memtrace's handler for signal {}; snapshots on that "
                "signal are off (choose one the program leaves alone with MEMTRACE_SIGNAL)",
                g_signal);
    }
  }
  if (g_warned_blocked.load(std::memory_order_relaxed)) return;
  sigset_t pending;
  sigemptyset(&pending);
  if (sigpending(&pending) == 0 && sigismember(&pending, g_signal) == 1) {
    if ((at_exit || ++g_pending_checks >= 2) && !g_warned_blocked.exchange(true))
      log::warn("MEMTRACE_SIGNAL: signal {} was sent but every thread of the program blocks it; its snapshot "
                "waits until one unblocks it (choose another signal with MEMTRACE_SIGNAL)",
                g_signal);
  } else if (!at_exit) {
    g_pending_checks = 0;
  }
}

void start_dump_triggers(const Config& c) {
  g_interval_s = c.interval_s;
  g_dump_on_oom = c.dump_on_oom;
  if (!g_sem_ready.load()) {
    sem_init(&g_wake, 0, 0);
    g_sem_ready.store(true);
  }
  if (c.dump_signal > 0) {
    struct sigaction sa = {};
    sa.sa_sigaction = &on_signal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    if (sigaction(c.dump_signal, &sa, &g_previous) != 0) {
      log::warn("MEMTRACE_SIGNAL: cannot install a handler for signal {} ({}); snapshots on signal are off",
                c.dump_signal, std::strerror(errno));
    } else {
      g_signal = c.dump_signal;
    }
  }
  note_dump_signal_armed(g_signal);  // the signal, or 0 (none, or no handler): snap stops waiting
  if (g_signal > 0 || g_interval_s > 0) ensure_thread();
}

void note_oom_for_dump() {
  if (!g_dump_on_oom) return;
  if (g_oom_dumps.fetch_add(1) >= kMaxOomDumps) return;
  // Taken right here, in the thread that hit the error: a program that runs out of memory often
  // dies moments later, and this snapshot is the one its user needs.
  dump_now(output::DumpKind::Oom);
}

void dump_triggers_after_fork() {
  g_thread_started.store(false);
  g_pending.store(0);
  g_oom_dumps.store(0);
  sem_init(&g_wake, 0, 0);
  // Not started here: most forked children exec at once or never touch CUDA. The child's
  // first hooked call starts it (resume_dump_thread_after_fork).
  if (g_signal > 0 || g_interval_s > 0) g_restart_in_child.store(true, std::memory_order_relaxed);
}

void resume_dump_thread_after_fork_slow() {
  if (g_restart_in_child.exchange(false)) ensure_thread();
}

}  // namespace memtrace::preload
