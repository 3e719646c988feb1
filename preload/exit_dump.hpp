// When the exit snapshot is taken. As late as it can be while still telling the program's story:
// after the program's own exit-time frees (atexit handlers and static destructors registered
// before its first CUDA call run after memtrace's atexit), from memtrace's destructor; or earlier,
// just before the first free or context teardown that the CUDA runtime makes on its own during
// exit, which would otherwise make everything look freed (docs/interposition.md, "The exit
// snapshot and the order of exit-time frees").
#pragma once

namespace memtrace::preload {

// At the session's start (its first CUDA call): registers the atexit handler that marks the
// process as exiting.
void watch_for_exit();

// Called by the free and teardown hooks: takes the exit snapshot now if the process is exiting
// and the runtime's own teardown is the caller.
void before_exit_teardown();

}  // namespace memtrace::preload
