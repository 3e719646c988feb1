// Making a dead process's live slots and history agree (docs/state-file.md, "Recovery"): the two are
// written one after the other, under different locks, so a process that stopped in the middle of
// calls (one per thread at most) may leave a slot without its events, or events without their slot.
#pragma once
#include "core/records.hpp"

namespace memtrace::state {

// Rewrites c->live and drops the half-written tail of c->trace so that replaying the history
// backwards from the live set never meets a contradiction (what PyTorch's viewer does).
void reconcile(StateCopy* c);

}  // namespace memtrace::state
