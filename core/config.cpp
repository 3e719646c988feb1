#include "core/config.hpp"

#include <csignal>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "core/cold_log.hpp"
#include "core/event.hpp"
#include "core/log.hpp"
#include "format/units.hpp"

namespace memtrace {

namespace {

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  return true;
}

bool parse_int(const char* s, long long lo, long long hi, long long* out) {
  if (!s || !*s) return false;
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(s, &end, 10);
  if (errno != 0 || end == s) return false;
  while (*end && std::isspace(static_cast<unsigned char>(*end))) ++end;
  if (*end != '\0' || v < lo || v > hi) return false;
  *out = v;
  return true;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

}  // namespace

bool parse_bool(const char* s, bool* out) {
  std::string_view v = trim(s ? s : "");
  if (v == "1" || iequals(v, "true") || iequals(v, "yes") || iequals(v, "on")) {
    *out = true;
    return true;
  }
  if (v == "0" || iequals(v, "false") || iequals(v, "no") || iequals(v, "off")) {
    *out = false;
    return true;
  }
  return false;
}

bool parse_size_bytes(const char* s, uint64_t* out) {
  if (!s) return false;
  std::optional<uint64_t> bytes = format::parse_size(s);
  if (!bytes) return false;
  *out = *bytes;
  return true;
}


namespace {
// Signals the kernel sends for a fault in the program itself (and abort()'s): taking them as a
// dump request would swallow the fault and re-run the faulting instruction forever.
bool is_fault_signal(long n) {
  return n == SIGSEGV || n == SIGBUS || n == SIGFPE || n == SIGILL || n == SIGTRAP || n == SIGABRT || n == SIGSYS;
}
}  // namespace

int parse_signal(const char* s) {
  if (!s) return -1;
  std::string_view v = trim(s);
  if (iequals(v, "none") || v == "0") return 0;
  long long n;
  std::string tmp(v);
  if (parse_int(tmp.c_str(), 1, 64, &n))
    return (n == SIGKILL || n == SIGSTOP) ? -1 : is_fault_signal(n) ? -2 : static_cast<int>(n);
  if (v.size() > 3 && iequals(v.substr(0, 3), "SIG")) v.remove_prefix(3);
  static constexpr struct {
    const char* name;
    int number;
  } kNames[] = {{"HUP", SIGHUP},   {"INT", SIGINT},   {"QUIT", SIGQUIT}, {"USR1", SIGUSR1}, {"USR2", SIGUSR2},
                {"ALRM", SIGALRM}, {"TERM", SIGTERM}, {"CONT", SIGCONT}, {"TSTP", SIGTSTP}, {"TTIN", SIGTTIN},
                {"TTOU", SIGTTOU}, {"URG", SIGURG},   {"XCPU", SIGXCPU}, {"VTALRM", SIGVTALRM},
                {"PROF", SIGPROF}, {"WINCH", SIGWINCH}, {"IO", SIGIO},   {"PWR", SIGPWR}};
  static constexpr struct {
    const char* name;
    int number;
  } kFaults[] = {{"SEGV", SIGSEGV}, {"BUS", SIGBUS},   {"FPE", SIGFPE}, {"ILL", SIGILL},
                 {"TRAP", SIGTRAP}, {"ABRT", SIGABRT}, {"IOT", SIGABRT}, {"SYS", SIGSYS}};
  for (const auto& k : kNames)
    if (iequals(v, k.name)) return k.number;
  for (const auto& k : kFaults)
    if (iequals(v, k.name)) return -2;
  if (v.size() > 5 && iequals(v.substr(0, 5), "RTMIN")) {
    std::string off(v.substr(5));
    if (parse_int(off.c_str(), 0, SIGRTMAX - SIGRTMIN, &n)) return SIGRTMIN + static_cast<int>(n);
  }
  return -1;
}

LauncherRank launcher_rank(GetEnvFn getenv_fn) {
  LauncherRank r;
  for (const char* var : {"RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID", "PMI_RANK"}) {
    const char* v = getenv_fn(var);
    if (!v || !*v) continue;
    r.text = v;
    long long n;
    if (parse_int(v, 0, 1LL << 40, &n)) r.number = static_cast<long>(n);
    return r;
  }
  return r;
}

bool rank_selected(const Config& c, long rank) {
  if (c.rank_list.empty()) return true;
  for (long r : c.rank_list)
    if (r == rank) return true;
  return false;
}

namespace {

// One parser per variable that takes more than a line or two, each given the variable's value
// (never null); each warns at most once and leaves the default in place on a bad value.

void parse_stacks(const char* v, Config* c) {
  std::string_view s = trim(v);
  if (iequals(s, "none"))
    c->stacks = StackMode::None;
  else if (iequals(s, "native"))
    c->stacks = StackMode::Native;
  else
    log::cold().warn("MEMTRACE_STACKS='{}' is not none or native; using native", v);
}

void parse_symbolize_threads(const char* v, Config* c) {
  long long n;
  if (iequals(trim(v), "auto"))
    c->symbolize_threads = 0;
  else if (parse_int(v, 1, 64, &n))
    c->symbolize_threads = static_cast<unsigned>(n);
  else
    log::cold().warn("MEMTRACE_SYMBOLIZE_THREADS='{}' is not auto or a whole number from 1 to 64; using auto", v);
}

void parse_python(const char* v, Config* c) {
  std::string_view m = v;
  if (m == "auto")
    c->python = PythonMode::Auto;
  else if (m == "gil")
    c->python = PythonMode::Gil;
  else if (m == "off" || m == "0")
    c->python = PythonMode::Off;
  else
    log::cold().warn("MEMTRACE_PYTHON='{}' is not auto, gil or off; using auto", v);
}

void parse_allocator(const char* v, Config* c) {
  std::string_view m = trim(v);
  if (iequals(m, "passthrough"))
    c->allocator = AllocatorMode::Passthrough;
  else if (iequals(m, "caching"))
    c->allocator = AllocatorMode::Caching;
  else
    log::cold().warn("MEMTRACE_ALLOCATOR='{}' is not passthrough or caching; using passthrough", v);
}

void parse_skip_actions(const char* v, Config* c) {
  uint32_t mask = 0;
  bool ok = true;
  std::string_view rest = v;
  while (!rest.empty()) {
    size_t comma = rest.find(',');
    std::string item(trim(rest.substr(0, comma)));
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    if (item.empty()) continue;
    Action a;
    if (!parse_action(item.c_str(), &a)) {
      ok = false;
      break;
    }
    mask |= 1u << static_cast<int>(a);
  }
  // Segment entries carry the only record of a segment's size: without them a snapshot
  // cannot satisfy the viewer's rules, so they are never skipped.
  constexpr uint32_t kSegmentMask = (1u << static_cast<int>(Action::SegmentAlloc)) |
                                    (1u << static_cast<int>(Action::SegmentFree)) |
                                    (1u << static_cast<int>(Action::SegmentMap)) |
                                    (1u << static_cast<int>(Action::SegmentUnmap));
  if (ok && (mask & kSegmentMask)) {
    log::cold().warn("MEMTRACE_SKIP_ACTIONS='{}': segment actions are always recorded (the viewer needs them); "
                     "skipping the others only",
                     v);
    c->skip_actions = mask & ~kSegmentMask;
  } else if (ok)
    c->skip_actions = mask;
  else
    log::cold().warn("MEMTRACE_SKIP_ACTIONS='{}' names an unknown action (known: alloc, free_requested, "
                     "free_completed, segment_alloc, segment_free, segment_map, segment_unmap, oom, snapshot); "
                     "skipping none",
                     v);
}

void parse_dump_signal(const char* v, Config* c) {
  int sig = parse_signal(v);
  if (sig == -2)
    log::cold().warn("MEMTRACE_SIGNAL='{}' is a signal that reports a fault in the program (SEGV, BUS, FPE, ILL, "
                     "TRAP, ABRT, SYS) and cannot ask for a snapshot; using USR2",
                     v);
  else if (sig < 0)
    log::cold().warn("MEMTRACE_SIGNAL='{}' names no signal memtrace can catch (e.g. USR2, SIGUSR1, 40, none); "
                     "using USR2",
                     v);
  else
    c->dump_signal = sig;
}

void parse_interval(const char* v, Config* c) {
  char* end = nullptr;
  errno = 0;
  double d = std::strtod(v, &end);
  bool ok = errno == 0 && end != v && trim(end).empty() && d >= 0 && d <= 1e7 && !std::isnan(d);
  if (ok && d > 0 && d < 0.01) {
    log::cold().warn("MEMTRACE_INTERVAL='{}' is below 10 ms; using 0.01 (a dump every 10 ms is already more than useful)", v);
    d = 0.01;
  }
  if (ok)
    c->interval_s = d;
  else
    log::cold().warn("MEMTRACE_INTERVAL='{}' is not a number of seconds; interval dumps stay off", v);
}

void parse_ranks(const char* v, Config* c) {
  std::vector<long> list;
  bool ok = true;
  std::string_view rest = v;
  while (ok && !rest.empty()) {
    size_t comma = rest.find(',');
    std::string item(trim(rest.substr(0, comma)));
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    if (item.empty()) continue;
    long long n;
    ok = parse_int(item.c_str(), 0, 1LL << 40, &n);
    if (ok) list.push_back(static_cast<long>(n));
  }
  if (ok) {
    c->ranks = v;
    c->rank_list = std::move(list);
  } else {
    log::cold().warn("MEMTRACE_RANKS='{}' is not a comma list of rank numbers; recording every rank", v);
  }
}

}  // namespace

log::Level log_level_setting(GetEnvFn getenv_fn, bool* bad) {
  bool debug = false;
  const char* d = getenv_fn("MEMTRACE_DEBUG");
  const log::Level fallback = d && parse_bool(d, &debug) && debug ? log::Level::debug : log::Level::info;
  const char* v = getenv_fn("MEMTRACE_LOG_LEVEL");
  log::Level l = fallback;
  const bool wrong = v && !log::parse_level(v, &l);
  if (bad) *bad = wrong;
  return wrong ? fallback : l;
}

std::string debug_cache_setting(const char* value, bool* bad) {
  const std::string dir(trim(value != nullptr ? value : ""));
  *bad = false;
  if (dir == "off" || dir == "none" || dir == "0") return "off";
  if (dir.empty() || dir[0] == '/') return dir;
  *bad = true;
  return "";
}

Config parse_config(GetEnvFn getenv_fn) {
  Config c;
  if (const char* v = getenv_fn("MEMTRACE_DEBUG")) {
    if (!parse_bool(v, &c.debug)) log::cold().warn("MEMTRACE_DEBUG='{}' is not 0 or 1; using 0", v);
  }
  bool bad_level = false;
  c.log_level = log_level_setting(getenv_fn, &bad_level);
  if (bad_level)
    log::cold().warn("MEMTRACE_LOG_LEVEL='{}' is not trace, debug, info, warn, error or off; using {}",
                     getenv_fn("MEMTRACE_LOG_LEVEL"), log::level_name(c.log_level));
  if (const char* v = getenv_fn("MEMTRACE_OUTPUT")) {
    if (*v == '\0')
      log::cold().warn("MEMTRACE_OUTPUT is empty; using {}", c.output);
    else
      c.output = v;
  }
  if (const char* v = getenv_fn("MEMTRACE_SUMMARY")) {
    if (!parse_bool(v, &c.summary)) log::cold().warn("MEMTRACE_SUMMARY='{}' is not 0 or 1; using 1", v);
  }
  if (const char* v = getenv_fn("MEMTRACE_REPORT")) {
    if (!parse_bool(v, &c.report)) log::warn("MEMTRACE_REPORT='{}' is not 0 or 1; using 0", v);
  }
  if (const char* v = getenv_fn("MEMTRACE_STACKS")) parse_stacks(v, &c);
  if (const char* v = getenv_fn("MEMTRACE_STACK_DEPTH")) {
    long long d;
    if (parse_int(v, 1, 256, &d))
      c.stack_depth = static_cast<int>(d);
    else
      log::cold().warn("MEMTRACE_STACK_DEPTH='{}' is not a whole number from 1 to 256; using {}", v, c.stack_depth);
  }
  if (const char* v = getenv_fn("MEMTRACE_SYMBOLIZE_THREADS")) parse_symbolize_threads(v, &c);
  if (const char* v = getenv_fn("MEMTRACE_FREE_STACKS")) {
    if (!parse_bool(v, &c.free_stacks)) log::cold().warn("MEMTRACE_FREE_STACKS='{}' is not 0 or 1; using 0", v);
  }
  if (const char* v = getenv_fn("MEMTRACE_PYTHON")) parse_python(v, &c);
  if (const char* v = getenv_fn("MEMTRACE_ALLOCATOR")) parse_allocator(v, &c);
  if (const char* v = getenv_fn("MEMTRACE_ALLOC_CONF")) c.alloc_conf = v;
  if (const char* v = getenv_fn("MEMTRACE_MAX_ENTRIES")) {
    long long n;
    if (parse_int(v, 0, 100000000, &n))
      c.max_entries = static_cast<size_t>(n);
    else
      log::cold().warn("MEMTRACE_MAX_ENTRIES='{}' is not a whole number from 0 to 100000000; using {}", v,
                       c.max_entries);
  }
  if (const char* v = getenv_fn("MEMTRACE_SKIP_ACTIONS")) parse_skip_actions(v, &c);
  if (const char* v = getenv_fn("MEMTRACE_STATE_DIR")) c.state_dir = v;  // checked when the file is made
  if (const char* v = getenv_fn("MEMTRACE_DEBUG_CACHE")) {
    bool bad = false;
    c.debug_cache = debug_cache_setting(v, &bad);
    if (bad) log::cold().warn("MEMTRACE_DEBUG_CACHE='{}' is not an absolute folder or 'off'; using the default", v);
  }
  if (const char* v = getenv_fn("MEMTRACE_RANGE_HISTORY")) {
    long long n;
    if (parse_int(v, 0, 16777216, &n))
      c.range_history = static_cast<size_t>(n);
    else
      log::cold().warn("MEMTRACE_RANGE_HISTORY='{}' is not a whole number from 0 to 16777216; using {}", v,
                       c.range_history);
  }
  if (const char* v = getenv_fn("MEMTRACE_NVTX")) {
    if (!parse_bool(v, &c.nvtx)) log::cold().warn("MEMTRACE_NVTX='{}' is not 0 or 1; using 1", v);
  }
  if (const char* v = getenv_fn("MEMTRACE_SIGNAL")) parse_dump_signal(v, &c);
  if (const char* v = getenv_fn("MEMTRACE_INTERVAL")) parse_interval(v, &c);
  if (const char* v = getenv_fn("MEMTRACE_MAX_STACKS")) {
    long long n;
    std::string tmp(trim(v));
    if (parse_int(tmp.c_str(), 64, 1LL << 20, &n))
      c.max_stacks = static_cast<uint32_t>(n);
    else
      log::cold().warn("MEMTRACE_MAX_STACKS='{}' is not a whole number from 64 to 1048576; using {}", v, c.max_stacks);
  }
  if (const char* v = getenv_fn("MEMTRACE_INTERVAL_KEEP")) {
    long long n;
    std::string tmp(trim(v));
    if (parse_int(tmp.c_str(), 0, 100000, &n))
      c.interval_keep = static_cast<int>(n);
    else
      log::cold().warn("MEMTRACE_INTERVAL_KEEP='{}' is not a whole number from 0 to 100000; keeping the last {}", v,
                       c.interval_keep);
  }
  if (const char* v = getenv_fn("MEMTRACE_DUMP_ON_OOM")) {
    if (!parse_bool(v, &c.dump_on_oom)) log::cold().warn("MEMTRACE_DUMP_ON_OOM='{}' is not 0 or 1; using 1", v);
  }
  if (const char* v = getenv_fn("MEMTRACE_RANKS")) parse_ranks(v, &c);
  return c;
}

}  // namespace memtrace
