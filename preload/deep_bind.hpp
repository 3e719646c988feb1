// Objects that bound memtrace's hooked names past memtrace (a library opened with RTLD_DEEPBIND
// resolves in its own dependencies first, libcuda.so.1 among them): found at rare trigger points
// and pointed back at memtrace's hooks, with one warning per object. See deep_bind.cpp.
#pragma once

namespace memtrace::preload {

// Cheap when no object was loaded or unloaded since the last call and none has an unresolved
// (lazy) slot for a hooked name. Does nothing until the session is recording. Safe from any
// thread and from inside a library constructor; not from a signal handler (never a trigger).
void rebind_bypassing_objects();

}  // namespace memtrace::preload
