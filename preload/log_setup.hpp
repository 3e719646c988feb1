// Where memtrace's lines go and from which level, set as the library loads (docs/logging.md):
// MEMTRACE_LOG_LEVEL (or MEMTRACE_DEBUG), and MEMTRACE_LOG, a template with MEMTRACE_OUTPUT's keys
// (output/output_path.hpp) expanded then. A forked child whose expanded path differs (the
// template holds %p) gets its own file.
#pragma once
#include <string>
#include <string_view>

#include "output/output_path.hpp"

namespace memtrace::preload {

// Applies memtrace's log level once, without starting the session: the dlsym hook may run before
// the library's constructors, and its substitutions should obey the level from the first lookup.
void read_log_level_once();

// MEMTRACE_LOG's file for a process in `ctx`: the template expanded with MEMTRACE_OUTPUT's keys; %n
// (the dump number) is 0, there being one log per process.
std::string log_path(std::string_view tmpl, output::PathContext ctx);

// The path a child forked from a process whose log template and load-time context these are
// writes to: the same context with the child's pid.
std::string child_log_path(std::string_view tmpl, const output::PathContext& at_load, int64_t child_pid);

}  // namespace memtrace::preload
