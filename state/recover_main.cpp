// memtrace-recover STATE_FILE [-o OUT]: a dead process's state file (docs/state-file.md) becomes a
// snapshot, written by the same dump as a live process's (output/dump.hpp) and symbolized from the
// files of the objects it had loaded. `memtrace recover` and `memtrace run` start it.
// Exit status: 0 written, 1 the snapshot could not be written, 2 bad command line or bad input.
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "core/config.hpp"
#include "output/dump.hpp"
#include "state/site_names.hpp"
#include "state/state_reader.hpp"
#include "unwind/debug_cache.hpp"
#include "unwind/stack_table.hpp"
#include "unwind/symbolizer.hpp"

namespace {

constexpr int kWriteFailed = 1;
constexpr int kBadInput = 2;

void usage(std::FILE* out) {
  std::fputs("usage: memtrace recover STATE_FILE [-o OUT]\n"
             "\n"
             "Writes the snapshot of the process that wrote STATE_FILE (MEMTRACE_STATE_DIR, default\n"
             "$XDG_RUNTIME_DIR/memtrace, /dev/shm/memtrace-UID or /tmp/memtrace-UID) and ended without\n"
             "writing its own: killed,\n"
             "crashed, or gone by _exit. Its stacks are symbolized from the files of the objects it had\n"
             "loaded. A file that is not a state file, of another version, truncated or another user's\n"
             "gets one line and exit status 2.\n"
             "\n"
             "options:\n"
             "  -o, --output PATH     the snapshot to write (default: MEMTRACE_OUTPUT's name for that\n"
             "                        process, memtrace-PID.pickle)\n"
             "  -h, --help            show this help\n",
             out);
}

std::string base_name(const std::string& p) {
  const size_t slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

// The recorded stack ids, renumbered into a table of this process: one intern per recorded stack,
// in id order, so equal ids stay equal. Stacks the file had no room for become 0 (no stack).
void renumber_stacks(memtrace::state::Recovered* r, memtrace::unwind::StackTable* table) {
  std::vector<uint32_t> ids(r->stacks.size() + 1, 0);
  for (size_t i = 0; i < r->stacks.size(); ++i) {
    const auto& pcs = r->stacks[i];
    ids[i + 1] = table->intern(pcs.data(), static_cast<uint32_t>(pcs.size()));
  }
  auto map = [&ids](uint32_t id) { return id < ids.size() ? ids[id] : 0u; };
  for (memtrace::TraceEntry& e : r->state.trace) e.stack_id = map(e.stack_id);
  for (memtrace::AllocRecord& a : r->state.live) a.stack_id = map(a.stack_id);
  r->state.distinct_stacks = table->size();
  r->state.stack_table_bytes = table->memory_bytes();
}

// Owner names come from the file; an id it had not published yet (the process stopped while
// naming it) is named again from the stack of a live record that carries it (the owner of a stack
// does not change). Ids no live record carries stay unnamed.
void name_owners(memtrace::state::Recovered* r, memtrace::output::FrameSource& frames) {
  std::vector<std::string>& names = r->state.owner_names;
  names.resize(memtrace::kMaxOwners);
  for (const memtrace::AllocRecord& a : r->state.live)
    if (a.owner < names.size() && names[a.owner].empty() && a.stack_id) names[a.owner] = frames.owner(a.stack_id);
  while (!names.empty() && names.back().empty()) names.pop_back();
}

}  // namespace

int main(int argc, char** argv) {
  std::string input, out;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a == "-h" || a == "--help") {
      usage(stdout);
      return 0;
    }
    // memtrace top's helper protocol (state/site_names.hpp), not a user's option: left out of --help.
    if (a == "--names" && i + 1 < argc) return memtrace::state::serve_site_names(argv[i + 1], stdin, stdout);
    if ((a == "-o" || a == "--output") && i + 1 < argc) {
      out = argv[++i];
    } else if (a.starts_with("-") && a != "-") {
      std::fprintf(stderr, "memtrace recover: unknown option '%s'\n", argv[i]);
      usage(stderr);
      return kBadInput;
    } else if (input.empty()) {
      input = argv[i];
    } else {
      std::fprintf(stderr, "memtrace recover: one state file at a time\n");
      return kBadInput;
    }
  }
  if (input.empty()) {
    usage(stderr);
    return kBadInput;
  }
  memtrace::state::Recovered rec;
  std::string why;
  if (!memtrace::state::read_state_file(input, &rec, &why)) {
    std::fprintf(stderr, "memtrace recover: %s\n", why.c_str());
    return kBadInput;
  }
  if (rec.pid > 0 && rec.pid != getpid() && kill(static_cast<pid_t>(rec.pid), 0) == 0 && !rec.ended_cleanly)
    std::fprintf(stderr, "memtrace recover: note: process %lld is still running; this is its record so far\n",
                 static_cast<long long>(rec.pid));

  memtrace::unwind::StackTable table;
  renumber_stacks(&rec, &table);
  // The debug-file cache as the library would use it (MEMTRACE_DEBUG_CACHE: "off", a folder, or
  // the default).
  bool bad_cache = false;
  const char* cache = std::getenv("MEMTRACE_DEBUG_CACHE");
  memtrace::unwind::set_debug_cache_setting(memtrace::debug_cache_setting(cache, &bad_cache));
  if (bad_cache)
    std::fprintf(stderr, "memtrace recover: warning: MEMTRACE_DEBUG_CACHE='%s' is not an absolute folder or 'off'; "
                 "using the default\n", cache);
  memtrace::unwind::Symbolizer sym(rec.modules);  // the dead process's objects, at its addresses
  memtrace::output::SymbolizedFrameSource frames(table, sym, rec.program);
  name_owners(&rec, frames);

  memtrace::output::PathContext ctx;
  ctx.pid = rec.pid;
  ctx.host = rec.host;
  ctx.rank = rec.rank;
  ctx.unix_time = static_cast<int64_t>(rec.state.time_us / 1000000);
  ctx.exe_name = base_name(rec.program);
  memtrace::output::DumpRequest req;
  const char* tmpl = std::getenv("MEMTRACE_OUTPUT");
  req.path_template = !out.empty() ? out : (tmpl && *tmpl ? tmpl : "memtrace-%p.pickle");
  req.print_summary = false;
  req.kind = memtrace::output::DumpKind::Recover;
  memtrace::output::DumpReport rep = memtrace::output::dump_with_source(rec.state, frames, req, ctx, rec.program);
  if (!rep.written) {
    std::fprintf(stderr, "memtrace recover: %s\n", rep.error.c_str());
    return kWriteFailed;
  }
  std::string how = rec.fatal_signal ? fmt::format(", ended by SIG{}", sigabbrev_np(rec.fatal_signal) ? sigabbrev_np(rec.fatal_signal) : "?") : "";
  std::fprintf(stderr, "memtrace: recovered the snapshot of pid %lld (%s%s): %s (%zu live allocations, %zu entries)\n",
               static_cast<long long>(rec.pid), base_name(rec.program).c_str(), how.c_str(), rep.path.c_str(),
               rec.state.live.size(), rec.state.trace.size());
  if (rec.live_unrecorded)
    std::fprintf(stderr, "memtrace recover: warning: %llu live allocations did not fit in the state file and are missing\n",
                 static_cast<unsigned long long>(rec.live_unrecorded));
  if (!rec.same_boot) std::fprintf(stderr, "memtrace recover: warning: the file is from another boot; times are estimates\n");
  for (const std::string& w : memtrace::unwind::take_debug_cache_warnings())
    std::fprintf(stderr, "memtrace recover: warning: %s\n", w.c_str());
  std::fflush(stdout);
  return 0;
}
