#include "preload/dumps.hpp"
#include "preload/ranges.hpp"

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <string>
#include <vector>

#include "core/cold_log.hpp"
#include "output/output_path.hpp"
#include "preload/caching_mode.hpp"
#include "preload/deep_bind.hpp"
#include "preload/dump_triggers.hpp"
#include "preload/immortal.hpp"
#include "preload/report_after_dump.hpp"
#include "preload/session.hpp"
#include "preload/state_session.hpp"
#include "unwind/python_frames.hpp"
#include "unwind/symbolizer_reuse.hpp"

namespace memtrace::preload {

namespace {

using output::DumpKind;

// Held while a snapshot is written (any thread's).
pthread_mutex_t g_dump_mutex = PTHREAD_MUTEX_INITIALIZER;
bool g_exit_dump_done = false;  // under g_dump_mutex
std::atomic<bool> g_exit_dump_taken{false};
std::atomic<uint64_t> g_dump_sequence{0};
// Paths of the interval snapshots still on disk, oldest first; under g_dump_mutex.
constinit Immortal<std::vector<std::string>> g_interval_dumps;

// Interval snapshots of a long job would fill the disk: only the last MEMTRACE_INTERVAL_KEEP stay,
// unless the template names each one itself (%n), which asks for them all. Under g_dump_mutex.
void keep_last_interval_dumps(const Session& s, const std::string& path) {
  std::vector<std::string>& kept = g_interval_dumps.value;
  const int keep = s.config.interval_keep;
  if (keep <= 0 || output::numbers_each_dump(s.config.output)) return;
  kept.push_back(path);
  while (static_cast<int>(kept.size()) > keep) {
    ::unlink(kept.front().c_str());
    kept.erase(kept.begin());
  }
}

// The recorder's state with what the snapshot says besides: stack table, owners, Python.
StateCopy state_of(Session& s) {
  StateCopy state = s.recorder.copy_state();
  state.distinct_stacks = s.stacks.size();
  state.stack_table_bytes = s.stacks.memory_bytes();
  state.owner_names = s.owners.names();
  ranges::copy_table(&state);
  if (unwind::python_present()) {
    state.python_support = std::string(unwind::python_support());
    state.python_direct = unwind::python_reads_directly();
    state.python_walks_failed = unwind::python_walks_failed();
  }
  return state;
}

output::DumpRequest request_for(Session& s, DumpKind kind) {
  const bool at_exit = kind == DumpKind::Exit;
  output::DumpRequest req;
  req.path_template = output::dump_path_template(s.config.output, kind);
  req.sequence = g_dump_sequence.fetch_add(1);
  // The stderr summary belongs to the end of the run; on-demand dumps say one line.
  req.print_summary = s.config.summary && at_exit;
  req.report_follows = s.config.report;
  req.include_frames = s.config.stacks != StackMode::None;
  req.symbolize_threads = s.config.symbolize_threads;
  req.kind = kind;
  req.module_history = s.owners.module_history();
  req.allocator = caching_mode::settings();
  return req;
}

}  // namespace

namespace {

// '%' in a path the program chose is its own character, not a template's.
std::string literal_template(std::string_view path) {
  std::string t;
  for (char c : path) {
    t += c;
    if (c == '%') t += '%';
  }
  return t;
}

// One snapshot of `kind`, at `explicit_path` when not empty. False when none was taken (the exit
// snapshot came first); *rep says how the write went.
bool take_dump(Session& s, DumpKind kind, std::string_view explicit_path, output::DumpReport* rep) {
  // An out-of-memory dump runs in the program's own thread, between its call and the result.
  const int saved_errno = errno;
  rebind_bypassing_objects();  // an object that bypasses memtrace is named before the snapshot misses it
  bool was = t_state.in_hook;
  t_state.in_hook = true;
  const bool at_exit = kind == DumpKind::Exit;
  if (at_exit) check_dump_signal(true);
  // One dump at a time; the exit dump waits for one in flight (its temporary file must not be
  // left behind), and none starts after it.
  pthread_mutex_lock(&g_dump_mutex);
  std::string report_of;  // the snapshot to write a report of, once the lock is given back
  const bool taken = !g_exit_dump_done;
  if (taken) {
    g_exit_dump_done = at_exit;
    if (at_exit) g_exit_dump_taken.store(true, std::memory_order_release);
    if (at_exit && caching_mode::any_allocator()) caching_mode::settle_pending_frees();
    StateCopy state = state_of(s);
    output::DumpRequest req = request_for(s, kind);
    if (!explicit_path.empty()) req.path_template = literal_template(explicit_path);
    *rep = output::dump_snapshot(state, s.stacks, req);
    if (at_exit) end_state_file(rep->written || req.path_template.empty());
    if (!at_exit && rep->written && s.config.summary)
      log::cold().info("{} snapshot: {} ({} bytes, {:.2f} s)", output::dump_kind_name(kind), rep->path,
                       rep->bytes, rep->seconds);
    if (rep->written && !at_exit) note_snapshot_written(rep->path);
    if (rep->written && kind == DumpKind::Interval) keep_last_interval_dumps(s, rep->path);
    if (rep->written && s.config.report) report_of = rep->path;
  }
  pthread_mutex_unlock(&g_dump_mutex);
  if (!report_of.empty()) write_report(report_of);
  t_state.in_hook = was;
  errno = saved_errno;
  return taken;
}

}  // namespace

void dump_now(DumpKind kind) {
  Session* s = session_if_active();
  if (!s) return;
  output::DumpReport rep;
  take_dump(*s, kind, {}, &rep);
}

RequestedDump dump_requested(std::string_view path) {
  RequestedDump out;
  const int saved_errno = errno;
  Session* s = session_if_active();
  errno = saved_errno;
  if (!s) return out;
  output::DumpReport rep;
  if (!take_dump(*s, DumpKind::Api, path, &rep)) {
    out.outcome = RequestedDump::AfterExit;
    return out;
  }
  out.path = rep.path;
  if (rep.written) {
    out.outcome = RequestedDump::Written;
  } else {
    out.outcome = RequestedDump::Failed;
    out.error = rep.error.empty() ? std::string("MEMTRACE_OUTPUT is empty") : rep.error;
  }
  return out;
}

bool exit_dump_taken() { return g_exit_dump_taken.load(std::memory_order_acquire); }

void dumps_after_fork_child() {
  g_dump_sequence.store(0);
  pthread_mutex_init(&g_dump_mutex, nullptr);
  unwind::dump_symbolizers().after_fork_child();
}

}  // namespace memtrace::preload
