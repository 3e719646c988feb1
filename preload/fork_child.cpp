#include "preload/fork_child.hpp"

#include "preload/caching_mode.hpp"
#include "preload/dump_triggers.hpp"
#include "preload/dumps.hpp"
#include "preload/ranges.hpp"
#include "preload/state_session.hpp"
#include "unwind/readable_memory.hpp"

namespace memtrace::preload {

void reset_in_forked_child(Session& s) {
  state_file_after_fork();
  s.recorder.reset_after_fork();
  s.stacks.clear();
  s.owners.clear();
  unwind::safe_memory_reset();  // the parent may have been refreshing its table of mappings
  caching_mode::after_fork_child();
  dumps_after_fork_child();
  ranges::after_fork_child();
  t_state.in_hook = false;
  dump_triggers_after_fork();
}

}  // namespace memtrace::preload
