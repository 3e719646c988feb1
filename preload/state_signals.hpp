// What memtrace does when a signal is about to end the program (SIGTERM, SIGINT, SIGABRT, SIGSEGV,
// SIGBUS, SIGFPE): the record is in the state file already, so its handler only notes the signal
// there (one store: async-signal-safe), then hands the signal on exactly as if memtrace were not
// there: to the handler the program had installed, or to the default action (docs/state-file.md).
#pragma once

namespace memtrace::state {
class StateFile;
}

namespace memtrace::preload {

// Installs the handlers, keeping the program's current ones to chain to.
void install_state_signal_handlers(const state::StateFile* file);
// A forked child: nothing to note any more (the handlers stay and only chain).
void forget_state_signal_handlers();

}  // namespace memtrace::preload
