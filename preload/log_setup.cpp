#include "preload/log_setup.hpp"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

#include "core/config.hpp"
#include "core/log.hpp"
#include "preload/immortal.hpp"

namespace memtrace::preload {

namespace {

struct LogFile {
  std::string tmpl;              // MEMTRACE_LOG as given; "" when memtrace writes to stderr
  output::PathContext at_load;   // what the template was expanded with
  std::string path;              // the file lines go to now
};
constinit Immortal<LogFile> g_log;

// Runs in the child, which has one thread. It allocates, as the session's own child handler does
// (glibc's fork hands the child a usable malloc before running these handlers).
void reopen_in_child() {
  LogFile& f = g_log.value;
  if (f.tmpl.empty()) return;
  const int64_t pid = static_cast<int64_t>(::getpid());
  std::string path = child_log_path(f.tmpl, f.at_load, pid);
  if (path == f.path) return;  // no %p: parent and child append to one file
  if (int err = log::use_file(path.c_str())) {
    log::warn("cannot open MEMTRACE_LOG='{}' for child process {} ({}); its lines go on into {}", path, pid,
              std::strerror(err), f.path);
    return;
  }
  f.path = std::move(path);
  f.at_load.pid = pid;
}

// As the library loads, before the program runs: the level, and where lines go (MEMTRACE_LOG, or
// the stderr the process started with, whatever the program later puts on fd 2). In a
// secure-execution process secure_getenv gives nothing: the defaults, and stderr.
__attribute__((constructor)) void set_up_log() {
  read_log_level_once();
  LogFile& f = g_log.value;
  if (const char* t = secure_getenv("MEMTRACE_LOG"); t && *t) {
    f.tmpl = t;
    f.at_load = output::path_context_from_process(0);
    f.path = log_path(f.tmpl, f.at_load);
  }
  if (!log::set_destination(f.path.empty() ? nullptr : f.path.c_str())) {
    f.tmpl.clear();  // its children stay on stderr too, without a warning each
    f.path.clear();
  }
  pthread_atfork(nullptr, nullptr, &reopen_in_child);
}

}  // namespace

void read_log_level_once() {
  static std::atomic<bool> done{false};
  if (done.load(std::memory_order_acquire)) return;
  log::set_level(log_level_setting([](const char* n) -> const char* { return secure_getenv(n); }));
  done.store(true, std::memory_order_release);
}

std::string log_path(std::string_view tmpl, output::PathContext ctx) {
  ctx.sequence = 0;
  return output::expand_output_path(tmpl, ctx);
}

std::string child_log_path(std::string_view tmpl, const output::PathContext& at_load, int64_t child_pid) {
  output::PathContext c = at_load;
  c.pid = child_pid;
  return log_path(tmpl, c);
}

}  // namespace memtrace::preload
