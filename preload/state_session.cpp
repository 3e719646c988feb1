#include "preload/state_session.hpp"

#include <sys/mman.h>

#include <new>
#include <string>

#include "core/cold_log.hpp"
#include "output/output_path.hpp"
#include "preload/session.hpp"
#include "preload/state_signals.hpp"
#include "state/state_file.hpp"

namespace memtrace::preload {

namespace {

alignas(state::StateFile) unsigned char g_storage[sizeof(state::StateFile)];
state::StateFile* g_file = nullptr;

void modules_changed() {
  if (g_file) g_file->record_modules();
}

}  // namespace

void start_state_file(Session& s) {
  if (s.config.state_dir == "off") return;
  state::CreateOptions o;
  o.dir = s.config.state_dir;
  o.dir_is_default = s.config.state_dir.empty();
  o.ring_entries = s.config.max_entries;
  o.program = output::executable_path();
  const output::PathContext ctx = output::path_context_from_process(0);
  o.host = ctx.host;
  o.rank = ctx.rank;
  auto* f = new (g_storage) state::StateFile();
  std::string why;
  if (!f->create(o, &why)) {
    log::cold().warn("no state file ({}): a crash or a kill will lose the record; set MEMTRACE_STATE_DIR to a "
                     "folder you can write, or to off",
                     why);
    f->~StateFile();
    return;
  }
  s.recorder.attach_state(f->memory());
  s.owners.attach_state(f->memory().owner_names, f->memory().owners_published);
  unwind::StackMirror* m = f->stack_mirror();
  m->on_new_stack = &modules_changed;
  s.stacks.set_mirror(m);
  g_file = f;
  // The dump signal is noted once its handler is installed (note_dump_signal_armed): until
  // then `memtrace snap` must not send it, since its default action ends the program.
  f->record_modules();
  log::cold().debug("state file: {}", f->path());
}

void watch_fatal_signals() {
  if (g_file) install_state_signal_handlers(g_file);
}

void end_state_file(bool snapshot_written) {
  if (!g_file) return;
  if (snapshot_written) {
    g_file->remove();
  } else if (!g_file->path().empty()) {
    log::cold().warn("the state file stays for 'memtrace recover {}'", g_file->path());
  }
}

void state_file_after_fork() {
  if (!g_file) return;
  g_file->forget();
  g_file = nullptr;
  forget_state_signal_handlers();
}

void note_dump_signal_armed(int sig) {
  if (g_file) g_file->note_dump_signal(sig);
}

void note_dump_signal_off() {
  if (g_file) g_file->note_dump_signal(0);
}

void note_snapshot_written(const std::string& path) {
  if (g_file) g_file->note_snapshot(path);
}

const char* state_file_path() { return g_file && !g_file->path().empty() ? g_file->path().c_str() : ""; }

}  // namespace memtrace::preload
