// memtrace snap PID [-o OUT] [--timeout SECONDS]: asks a running process for a snapshot now and
// prints its path once the file is complete. The process's state file (docs/state-file.md, "Asking
// for a snapshot") says which signal takes a snapshot and counts the snapshots written, with the
// last one's path; snap sends the signal and waits for the count to move. The snapshot is written
// where the process's own MEMTRACE_OUTPUT puts it; with -o it is also copied to OUT (atomically).
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "cli/commands.hpp"
#include "cli/running.hpp"
#include "format/atomic_file.hpp"

namespace memtrace::cli {

namespace {

void usage(std::FILE* out) {
  std::fprintf(out,
               "usage: memtrace snap PID [-o OUT] [--timeout SECONDS]\n"
               "  Asks a process running under memtrace for a snapshot now (through the signal its\n"
               "  MEMTRACE_SIGNAL names, USR2 by default) and prints the snapshot's path once the\n"
               "  file is complete.\n"
               "  -o OUT      also copy the snapshot to OUT\n"
               "  --timeout   seconds to wait for it (default 60)\n");
}

// Signals whose default action is only to ask (memtrace's handler takes the snapshot): snap never
// sends one that would end the program when its handler is gone.
bool only_asks(int sig) { return sig == SIGUSR1 || sig == SIGUSR2 || (sig >= SIGRTMIN && sig <= SIGRTMAX); }

// "0.5 s", "60 s": the timeout as the user typed it, not to_string's six decimals.
std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", s);
  return buf;
}

int fail(const std::string& line) {
  std::fprintf(stderr, "memtrace snap: %s\n", line.c_str());
  return 1;
}

}  // namespace

int cmd_snap(int argc, char** argv) {
  long pid = 0;
  std::string out;
  double timeout_s = 60;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") return usage(stdout), 0;
    if ((a == "-o" || a == "--timeout") && i + 1 < argc) {
      const std::string v = argv[++i];
      if (a == "--timeout") {
        char* end = nullptr;
        timeout_s = std::strtod(v.c_str(), &end);
        if (v.empty() || *end != '\0' || !(timeout_s > 0)) {
          std::fprintf(stderr, "memtrace snap: --timeout wants a number of seconds above 0, not '%s'\n", v.c_str());
          return kExitUsage;
        }
      } else {
        out = v;
      }
    } else if (pid == 0 && !a.empty() && a.size() < 10 && a.find_first_not_of("0123456789") == std::string::npos) {
      pid = std::stol(a);
    } else {
      std::fprintf(stderr, "memtrace snap: unexpected argument '%s'\n", a.c_str());
      usage(stderr);
      return kExitUsage;
    }
  }
  if (pid <= 0) {
    usage(stderr);
    return kExitUsage;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  const std::vector<std::string> dirs = state_dirs_for({pid});
  std::vector<Running> found = find_running(dirs, {pid});
  // The file is there by name a moment before its header is complete (docs/state-file.md): a
  // process that has just started is waited for, one that is not under memtrace is not.
  while (found.empty() && process_alive(pid) && has_state_file_in_making(dirs, pid) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    found = find_running(dirs, {pid});
  }
  if (found.empty()) {
    std::fprintf(stderr, "memtrace snap: %s\n", not_running(pid).c_str());
    return kExitUsage;
  }
  const state::PeekMap& map = *found.front().map;
  // A process that has just started makes its state file a moment before its signal handler is
  // in place; until then the file says so, and the signal would end it.
  int sig = map.dump_signal();
  for (; sig == state::Header::kSignalNotArmed; sig = map.dump_signal()) {
    if (!process_alive(pid)) return fail("process " + std::to_string(pid) + " ended before it could take a snapshot");
    if (std::chrono::steady_clock::now() > deadline)
      return fail("process " + std::to_string(pid) + " did not get ready for a snapshot within " + seconds(timeout_s));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (sig <= 0)
    return fail("process " + std::to_string(pid) +
                " takes no snapshot on a signal (MEMTRACE_SIGNAL=none, or the program took the signal over)");
  if (!only_asks(sig))
    return fail("process " + std::to_string(pid) + "'s MEMTRACE_SIGNAL is " + std::to_string(sig) + " (" +
                strsignal(sig) + "), which ends the program after its snapshot; snap sends only USR1, USR2 or a real-time signal");
  std::string path;
  const uint64_t before = map.snapshots(&path);
  if (kill(static_cast<pid_t>(pid), sig) != 0)
    return fail("cannot signal process " + std::to_string(pid) + ": " + std::strerror(errno));
  for (;;) {
    if (map.snapshots(&path) > before) break;
    if (!process_alive(pid)) return fail("process " + std::to_string(pid) + " ended before its snapshot was complete");
    if (std::chrono::steady_clock::now() > deadline)
      return fail("no snapshot from process " + std::to_string(pid) + " within " + seconds(timeout_s) +
                  " (does every thread of it block signal " + std::to_string(sig) + "?)");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (path.empty()) return fail("process " + std::to_string(pid) + " wrote a snapshot whose path it could not note");
  if (!out.empty()) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream bytes;
    bytes << in.rdbuf();
    std::string why;
    if (!in || !format::write_file_atomically(out, bytes.str(), &why))
      return fail(in ? why : "cannot read " + path + ": " + std::strerror(errno));
    path = out;
  }
  std::printf("%s\n", path.c_str());
  return 0;
}

}  // namespace memtrace::cli
