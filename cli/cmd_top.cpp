// memtrace top [PID...] [--once] [--json]: what the processes running under memtrace hold now, read
// from their state files (docs/state-file.md) through a read-only mapping: the program is never
// stopped or slowed. Call sites are named by a memtrace-recover helper (cli/site_namer.hpp), since
// bin/memtrace links no symbolizer; without it they are their raw top frame (object + offset).
#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "cli/analysis/human_size.hpp"
#include "cli/commands.hpp"
#include "cli/running.hpp"
#include "cli/site_namer.hpp"
#include "state/state_paths.hpp"
#include "state/state_peek.hpp"

namespace memtrace::cli {

namespace {

constexpr int kTopSites = 5;

struct Watched {
  std::string path;
  std::unique_ptr<state::PeekMap> map;
  state::Peek now;
  uint64_t last_total = 0;
  std::chrono::steady_clock::time_point last_time;
  double events_per_s = 0;
  std::unique_ptr<SiteNamer> namer;
};

std::vector<Watched> find_watched(const std::vector<std::string>& dirs, const std::vector<long>& pids) {
  std::vector<Watched> out;
  for (Running& r : find_running(dirs, pids)) {
    Watched w;
    w.path = std::move(r.path);
    w.map = std::move(r.map);
    w.namer = std::make_unique<SiteNamer>(w.path);
    out.push_back(std::move(w));
  }
  return out;
}

void sample(Watched* w) {
  w->map->read(&w->now, true);
  const auto t = std::chrono::steady_clock::now();
  const double dt = std::chrono::duration<double>(t - w->last_time).count();
  if (w->last_total != 0 || w->now.ring_total != 0)
    w->events_per_s = dt > 0 ? static_cast<double>(w->now.ring_total - w->last_total) / dt : 0;
  w->last_total = w->now.ring_total;
  w->last_time = t;
}

void prime(Watched* w) {
  w->last_total = w->map->ring_total();
  w->last_time = std::chrono::steady_clock::now();
}

std::string frame_name(const state::Peek& p, uint32_t stack_id) {
  if (stack_id == 0 || stack_id > p.top_frame.size() || p.top_frame[stack_id - 1] == 0) return "(no stack)";
  const uintptr_t a = p.top_frame[stack_id - 1];
  for (const state::ModuleEntry& m : p.modules)
    if (a >= m.start && a < m.end) {
      const char* base = std::strrchr(m.path, '/');
      return fmt::format("{}+0x{:x}", base ? base + 1 : m.path, a - m.bias);
    }
  return fmt::format("0x{:x}", a);
}

// The owner's name as the process named it; an id not published yet shows as its number.
std::string owner_name(const state::Peek& p, uint16_t id) {
  return id < p.owner_names.size() && !p.owner_names[id].empty() ? p.owner_names[id] : fmt::format("owner {}", id);
}

// A call site by its function and line where the helper can name it, by its raw frame otherwise.
std::string site_name(Watched& w, uint32_t stack_id) {
  const std::string raw = frame_name(w.now, stack_id);
  if (stack_id == 0 || stack_id > w.now.top_frame.size() || w.now.top_frame[stack_id - 1] == 0) return raw;
  return w.namer->name(w.now.top_frame[stack_id - 1], raw);
}

struct Site {
  uint32_t stack_id = 0;
  uint64_t bytes = 0, count = 0;
};

struct DeviceView {
  int device = 0;
  UsageStats allocated, reserved;
  std::map<uint16_t, uint64_t> owners;  // owner id -> live bytes
  std::vector<Site> sites;
};

std::vector<DeviceView> devices_of(const state::Peek& p) {
  std::vector<DeviceView> out;
  const int n = std::clamp(p.counters.device_count, 0, kMaxDevices);
  for (int d = 0; d < n; ++d) {
    DeviceView v;
    v.device = d;
    v.allocated = p.counters.allocated[d];
    v.reserved = p.counters.reserved[d];
    std::map<uint32_t, Site> by_stack;
    for (const AllocRecord& r : p.live) {
      if (r.device != d || r.kind == MemKind::Cached) continue;
      v.owners[r.owner] += r.size;
      Site& s = by_stack[r.stack_id];
      s.stack_id = r.stack_id;
      s.bytes += r.size;
      ++s.count;
    }
    for (auto& [id, s] : by_stack) v.sites.push_back(s);
    std::sort(v.sites.begin(), v.sites.end(), [](const Site& a, const Site& b) { return a.bytes > b.bytes; });
    if (v.sites.size() > kTopSites) v.sites.resize(kTopSites);
    out.push_back(std::move(v));
  }
  return out;
}

std::string pct(uint64_t part, uint64_t whole) {
  return whole ? fmt::format("{:.1f}%", 100.0 * static_cast<double>(part) / static_cast<double>(whole)) : "-";
}

std::string text_frame(std::vector<Watched>& ws) {
  std::string s;
  for (Watched& w : ws) {
    const state::Peek& p = w.now;
    s += fmt::format("pid {}  {}{}{}  events/s {:.0f}\n", p.pid, p.program, p.rank.empty() ? "" : "  rank ",
                     p.rank, w.events_per_s);
    for (const DeviceView& v : devices_of(p)) {
      s += fmt::format("  device {}: allocated {} (peak {}), reserved {} (peak {})\n", v.device,
                       analysis::human_bytes(v.allocated.current), analysis::human_bytes(v.allocated.peak),
                       analysis::human_bytes(v.reserved.current), analysis::human_bytes(v.reserved.peak));
      uint64_t live = 0;
      for (const auto& [o, b] : v.owners) live += b;
      for (const auto& [o, b] : v.owners)
        s += fmt::format("    {:<24} {:>12} {:>6}\n", owner_name(p, o), analysis::human_bytes(b), pct(b, live));
      for (const Site& site : v.sites)
        s += fmt::format("    {:>12} in {:>6} blocks  {}\n", analysis::human_bytes(site.bytes), site.count,
                         site_name(w, site.stack_id));
    }
    if (!p.counters_steady) s += "  (counters changing too fast to copy whole; shown as last read)\n";
  }
  if (ws.empty()) s += "no process is running under memtrace\n";
  return s;
}

std::string json_string(const std::string& v) {
  std::string o = "\"";
  for (unsigned char c : v) {
    if (c == '"' || c == '\\') o += '\\', o += static_cast<char>(c);
    else if (c < 0x20) o += fmt::format("\\u{:04x}", c);
    else o += static_cast<char>(c);
  }
  return o + "\"";
}

std::string json_frame(std::vector<Watched>& ws) {
  std::string s = "{\"processes\": [";
  for (size_t i = 0; i < ws.size(); ++i) {
    const state::Peek& p = ws[i].now;
    s += fmt::format("{}{{\"pid\": {}, \"program\": {}, \"host\": {}, \"rank\": {}, \"state_file\": {}, "
                     "\"events_total\": {}, \"events_per_s\": {:.1f}, \"counters_steady\": {}, \"devices\": [",
                     i ? ", " : "", p.pid, json_string(p.program), json_string(p.host), json_string(p.rank),
                     json_string(ws[i].path), p.ring_total, ws[i].events_per_s, p.counters_steady);
    const auto devs = devices_of(p);
    for (size_t k = 0; k < devs.size(); ++k) {
      const DeviceView& v = devs[k];
      s += fmt::format("{}{{\"device\": {}, \"allocated\": {}, \"allocated_peak\": {}, \"reserved\": {}, "
                       "\"reserved_peak\": {}, \"owners\": [",
                       k ? ", " : "", v.device, v.allocated.current, v.allocated.peak, v.reserved.current,
                       v.reserved.peak);
      bool first = true;
      for (const auto& [o, b] : v.owners) {
        s += fmt::format("{}{{\"owner\": {}, \"id\": {}, \"bytes\": {}}}", first ? "" : ", ",
                         json_string(owner_name(p, o)), o, b);
        first = false;
      }
      s += "], \"sites\": [";
      for (size_t j = 0; j < v.sites.size(); ++j)
        s += fmt::format("{}{{\"bytes\": {}, \"blocks\": {}, \"top_frame\": {}, \"function\": {}}}", j ? ", " : "",
                         v.sites[j].bytes, v.sites[j].count, json_string(frame_name(p, v.sites[j].stack_id)),
                         json_string(site_name(ws[i], v.sites[j].stack_id)));
      s += "]}";
    }
    s += "]}";
  }
  return s + "]}\n";
}

// Raw terminal mode for `q`, restored at every way out (return, SIGINT, SIGTERM, SIGHUP).
termios g_saved;
bool g_raw = false;

void restore_terminal() {
  if (g_raw) tcsetattr(STDIN_FILENO, TCSANOW, &g_saved);
  g_raw = false;
}

void on_signal(int sig) {
  restore_terminal();
  signal(sig, SIG_DFL);
  raise(sig);
}

void enter_raw() {
  if (!isatty(STDIN_FILENO) || tcgetattr(STDIN_FILENO, &g_saved) != 0) return;
  termios t = g_saved;
  t.c_lflag &= ~static_cast<tcflag_t>(ICANON | ECHO);
  t.c_cc[VMIN] = 0;
  t.c_cc[VTIME] = 0;
  if (tcsetattr(STDIN_FILENO, TCSANOW, &t) != 0) return;
  g_raw = true;
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) signal(sig, on_signal);
}

// Waits up to one second for a key; true when it was `q` (or stdin ended).
bool quit_pressed() {
  pollfd pfd{STDIN_FILENO, POLLIN, 0};
  if (poll(&pfd, 1, 1000) <= 0) return false;
  char c = 0;
  const ssize_t n = ::read(STDIN_FILENO, &c, 1);
  return n == 0 || c == 'q' || c == 'Q';
}

void usage(std::FILE* out) {
  std::fprintf(out,
               "usage: memtrace top [PID...] [--once] [--json]\n"
               "  Every process running under memtrace (found through its state file, in\n"
               "  MEMTRACE_STATE_DIR or the default folders), or the ones named: per device,\n"
               "  current and peak bytes, owners' shares, the largest live call sites (function\n"
               "  and line of their top frame), events per second. Refreshed each second; q quits.\n"
               "  --once   print one frame and exit\n"
               "  --json   print one JSON document and exit\n");
}

}  // namespace

int cmd_top(int argc, char** argv) {
  bool once = false, json = false;
  std::vector<long> pids;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--once") once = true;
    else if (a == "--json") json = true;
    else if (a == "-h" || a == "--help") return usage(stdout), 0;
    else if (!a.empty() && a.find_first_not_of("0123456789") == std::string::npos && a.size() < 10)
      pids.push_back(std::stol(a));
    else {
      std::fprintf(stderr, "memtrace top: unexpected argument '%s' (PIDs, --once, --json)\n", a.c_str());
      return kExitUsage;
    }
  }
  const std::vector<std::string> dirs = state_dirs_for(pids);
  std::vector<Watched> ws = find_watched(dirs, pids);
  for (long pid : pids) {
    if (std::any_of(ws.begin(), ws.end(), [&](const Watched& w) { return w.now.pid == pid || w.map->header().pid == pid; }))
      continue;
    std::fprintf(stderr, "memtrace top: %s\n", not_running(pid).c_str());
    return kExitUsage;
  }
  for (Watched& w : ws) prime(&w);
  if (once || json) {
    // Events per second need two reads of the ring's sequence number: half a second apart.
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    for (Watched& w : ws) sample(&w);
    const std::string out = json ? json_frame(ws) : text_frame(ws);
    std::fputs(out.c_str(), stdout);
    return 0;
  }
  enter_raw();
  for (;;) {
    for (Watched& w : ws) sample(&w);
    const std::string out = text_frame(ws);
    std::printf("\033[H\033[2J%s(q quits)\n", out.c_str());
    std::fflush(stdout);
    if (quit_pressed()) break;
    // Processes that ended leave; new ones are picked up when no PID was named.
    if (pids.empty()) {
      std::vector<Watched> fresh = find_watched(dirs, pids);
      for (Watched& f : fresh)
        for (Watched& w : ws)
          if (w.path == f.path) f = std::move(w);
      for (Watched& f : fresh)
        if (f.last_time.time_since_epoch().count() == 0) prime(&f);
      ws = std::move(fresh);
    } else {
      ws.erase(std::remove_if(ws.begin(), ws.end(), [](const Watched& w) { return !process_alive(w.map->header().pid); }),
               ws.end());
      if (ws.empty()) break;
    }
  }
  restore_terminal();
  return 0;
}

}  // namespace memtrace::cli
