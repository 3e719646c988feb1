// What a forked child does before it runs on (pthread_atfork's child handler, registered as the
// session starts). The child owns no device memory and cannot use the parent's contexts (CUDA does
// not survive fork), and of the parent's threads only the forking one is in it: it starts with an
// empty record, abandons the parent's allocators, and takes over every lock another parent thread
// may have held at the fork.
#pragma once

#include "preload/session.hpp"

namespace memtrace::preload {

void reset_in_forked_child(Session& s);

}  // namespace memtrace::preload
