#include "preload/dump_triggers.hpp"

#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <time.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "core/log.hpp"
#include "preload/session.hpp"

namespace memtrace::preload {

std::atomic<bool> g_restart_in_child{false};

namespace {

constexpr int kMaxOomDumps = 3;

sem_t g_wake;
std::atomic<bool> g_sem_ready{false};
std::atomic<unsigned> g_pending{0};
std::atomic<bool> g_thread_started{false};
std::atomic<int> g_oom_dumps{0};
double g_interval_s = 0;
bool g_dump_on_oom = true;
struct sigaction g_previous;
int g_signal = 0;
constexpr unsigned kDieAfterDump = 1u << 8;  // beside DumpReason's bits

bool default_is_fatal(int sig) {
  switch (sig) {
    case SIGTERM: case SIGINT: case SIGHUP: case SIGALRM: case SIGQUIT: case SIGXCPU: case SIGXFSZ:
    case SIGVTALRM: case SIGPROF: case SIGPWR: case SIGIO: case SIGPIPE:
      return true;
    default:
      return false;  // USR1, USR2 and the real-time signals: a request for a snapshot, nothing more
  }
}

void wait_for_work() {
  if (g_interval_s <= 0) {
    while (sem_wait(&g_wake) != 0 && errno == EINTR) {
    }
    return;
  }
  timespec deadline;
  clock_gettime(CLOCK_MONOTONIC, &deadline);
  double whole = static_cast<double>(static_cast<long>(g_interval_s));
  deadline.tv_sec += static_cast<time_t>(whole);
  deadline.tv_nsec += static_cast<long>((g_interval_s - whole) * 1e9);
  if (deadline.tv_nsec >= 1000000000L) {
    deadline.tv_sec += 1;
    deadline.tv_nsec -= 1000000000L;
  }
  for (;;) {
    if (sem_clockwait(&g_wake, CLOCK_MONOTONIC, &deadline) == 0) return;
    if (errno == ETIMEDOUT) {
      g_pending.fetch_or(kDumpInterval);
      return;
    }
    if (errno != EINTR) return;
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

void* dump_thread(void*) {
  t_state.in_hook = true;  // nothing this thread does is the program's memory traffic
  for (;;) {
    wait_for_work();
    unsigned why = g_pending.exchange(0);
    // One dump answers every request that arrived meanwhile.
    if (why & kDumpSignal)
      dump_now("signal");
    else if (why & kDumpInterval)
      dump_now("interval");
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

}  // namespace

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
  if (g_signal > 0 || g_interval_s > 0) ensure_thread();
}

void request_dump(DumpReason why) {
  g_pending.fetch_or(why);
  ensure_thread();
  if (g_sem_ready.load()) sem_post(&g_wake);
}

void note_oom_for_dump() {
  if (!g_dump_on_oom) return;
  if (g_oom_dumps.fetch_add(1) >= kMaxOomDumps) return;
  // Taken right here, in the thread that hit the error: a program that runs out of memory often
  // dies moments later, and this snapshot is the one its user needs.
  dump_now("oom");
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
