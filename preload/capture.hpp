// The stack an event is recorded with: captured, memtrace's own frames removed, Python frames
// spliced in, interned in the session's stack table.
#pragma once
#include <cstdint>

#include "preload/session.hpp"

namespace memtrace::preload {

// Captures the caller's stack (memtrace's own frames removed) and interns it. With
// MEMTRACE_STACKS=none only the immediate caller is kept, enough to name the owner.
// Must be called directly from the exported wrapper.
uint32_t capture_stack_id(Session& s, void* caller);

}  // namespace memtrace::preload
