#include "preload/state_signals.hpp"

#include <signal.h>

#include <atomic>

#include "state/state_file.hpp"

namespace memtrace::preload {

namespace {

constexpr int kSignals[] = {SIGTERM, SIGINT, SIGABRT, SIGSEGV, SIGBUS, SIGFPE};
constexpr int kMaxSignal = 65;

// The program's actions as they were when memtrace installed its own: written before the handler
// is installed, read only by it.
struct sigaction g_previous[kMaxSignal];
std::atomic<const state::StateFile*> g_file{nullptr};

void on_fatal_signal(int sig, siginfo_t* info, void* ctx) {
  if (const state::StateFile* f = g_file.load(std::memory_order_relaxed)) f->note_signal(sig);
  const struct sigaction& prev = g_previous[sig];
  if (prev.sa_flags & SA_SIGINFO) {
    if (prev.sa_sigaction) {
      if (prev.sa_flags & SA_RESETHAND) signal(sig, SIG_DFL);
      prev.sa_sigaction(sig, info, ctx);
      return;
    }
  } else if (prev.sa_handler == SIG_IGN) {
    return;  // the program ignores it: so does memtrace
  } else if (prev.sa_handler != SIG_DFL) {
    if (prev.sa_flags & SA_RESETHAND) signal(sig, SIG_DFL);
    prev.sa_handler(sig);
    return;
  }
  // The default action, with the same signal: blocked while this handler runs, the raised one is
  // delivered as it returns (a fault's instruction is not run again first).
  signal(sig, SIG_DFL);
  raise(sig);
}

}  // namespace

void install_state_signal_handlers(const state::StateFile* file) {
  g_file.store(file, std::memory_order_relaxed);
  for (int sig : kSignals) {
    struct sigaction now;
    if (sigaction(sig, nullptr, &now) != 0) continue;
    // An ignored SIGINT or SIGTERM (nohup, a shell's background job) stays ignored, untouched.
    if (!(now.sa_flags & SA_SIGINFO) && now.sa_handler == SIG_IGN) continue;
    g_previous[sig] = now;
    struct sigaction mine = {};
    mine.sa_sigaction = &on_fatal_signal;
    // The program's own flags decide how its calls see an interrupting signal; with the default
    // action there is no return, and the alternate stack (if any) lets a stack overflow be noted.
    const bool dfl = !(now.sa_flags & SA_SIGINFO) && now.sa_handler == SIG_DFL;
    mine.sa_flags = SA_SIGINFO | (dfl ? SA_ONSTACK : 0) | (now.sa_flags & (SA_ONSTACK | SA_RESTART | SA_NODEFER));
    mine.sa_mask = now.sa_mask;
    sigaction(sig, &mine, nullptr);
  }
}

void forget_state_signal_handlers() { g_file.store(nullptr, std::memory_order_relaxed); }

}  // namespace memtrace::preload
