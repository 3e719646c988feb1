// Internal to the Symbolizer (its parts: unwind/symbolizer_impl.hpp) and its readers.
#pragma once
#include <mutex>

namespace memtrace::unwind::detail {

// elfutils 0.188 is built without its thread-safety option: libdwfl and libdw keep lazily
// filled state (a module's symbol table and debug data, a Dwarf's unit tree, a unit's
// abbreviations) that two threads must not fill at once. Symbolizer::prepare's threads share
// one libdwfl session, so code they run holds this lock around every call into elfutils;
// their own readers of the mapped sections (units, line tables, symbol indexes) run without
// it. Recursive, since a locked fallback may reach another locked call. One for the process:
// a lock per session would have to be passed down to every reader.
//
// A child forked while another thread held it gets it back unlocked (the holder does not
// exist there), so that the child's own snapshot at exit does not wait forever.
std::recursive_mutex& libdw_mutex();
using LibdwLock = std::lock_guard<std::recursive_mutex>;

}  // namespace memtrace::unwind::detail
