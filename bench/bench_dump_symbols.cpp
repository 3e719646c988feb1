// What a dump pays to symbolize, next to what the throughput comparison with addr2line says:
//
//   bench_dump_symbols [CPU [SCALE [REPEAT]]]   (defaults: the CPU it starts on, 1.0, 3)
//
// Pins itself (and so its children) to one CPU, then prints, in one run:
//  - the first dump of a program whose stacks hold 10 distinct return addresses (this program's
//    own call chain, libc's start-up frames and _start): the calling thread's CPU time and the
//    growth in resident memory of getting the process's dump Symbolizer and symbolizing them, as
//    dump_snapshot() does (unwind/symbolizer_reuse.hpp), and whether libc's separate debug file
//    (Debian's libc6-dbg, by build id under /usr/lib/debug/.build-id) is installed; each in a
//    fresh child process on the same CPU: with the debug cache off (MEMTRACE_DEBUG_CACHE=off:
//    libc's compressed DWARF inflated in memory as far as its units need), with an empty cache
//    (the same; whether a copy was kept is printed), then a program whose stacks also hold a
//    second thread's (start_thread and clone3 lie deep in libc's DWARF: the whole copy is made
//    and kept), and with that cache again (the whole copy read: what every later program pays);
//  - the tenth interval dump of the unchanged program: with the Symbolizer kept between dumps
//    (what dumps do) and, side by side, with a fresh one each time (what they did before);
//  - bench_symbolize's one-thread throughput against addr2line on its benchmark set (libstdc++,
//    its own code, a large CUDA library), run as a child on the same pinned CPU with
//    MEMTRACE_BENCH_THREADS=1: its TOTAL and CPU lines.
// The load average before and after is printed: on a shared machine, read the figures with it.
#include <dirent.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "unwind/debug_cache.hpp"
#include "unwind/stack_capture.hpp"
#include "unwind/symbolizer.hpp"
#include "unwind/symbolizer_reuse.hpp"

namespace {

double thread_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

long resident_kb() {
  long pages = 0, resident = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

std::string load_average() {
  char buf[128] = {};
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fgets(buf, sizeof buf, f) == nullptr) buf[0] = '\0';
    std::fclose(f);
  }
  std::string s(buf);
  while (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

std::vector<uintptr_t> g_stack;

// A call chain deep enough that, with main, libc's two start-up frames and _start, the stack
// holds 10 distinct return addresses (printed, with their frames, so that it can be checked).
[[gnu::noipa]] void level7() {
  uintptr_t pcs[64];
  const int n = memtrace::unwind::capture(pcs, 64);
  g_stack.assign(pcs, pcs + n);
}
[[gnu::noipa]] void level6() { level7(); asm volatile(""); }
[[gnu::noipa]] void level5() { level6(); asm volatile(""); }
[[gnu::noipa]] void level4() { level5(); asm volatile(""); }
[[gnu::noipa]] void level3() { level4(); asm volatile(""); }

// A second thread's stack: its libc frames (start_thread, clone3) lie deep in libc's DWARF.
std::vector<uintptr_t> thread_stack() {
  std::vector<uintptr_t> out;
  std::thread t([&out] {
    uintptr_t pcs[64];
    const int n = memtrace::unwind::capture(pcs, 64);
    out.assign(pcs, pcs + n);
  });
  t.join();
  return out;
}

// One dump's symbolization, as dump_snapshot() does it: the lease, prepare(), each frame.
size_t symbolize(memtrace::unwind::SymbolizerReuse& reuse, bool* reused) {
  auto lease = reuse.acquire({});
  lease.symbolizer().prepare(g_stack, 1);
  size_t frames = 0;
  for (uintptr_t pc : g_stack) frames += lease.symbolizer().frames(pc).size();
  *reused = lease.reused();
  return frames;
}

bool libc_debug_installed(std::string* where) {
  memtrace::unwind::Symbolizer sym;
  for (const auto& m : sym.modules()) {
    if (m.path.find("/libc.so") == std::string::npos || m.build_id.size() < 3) continue;
    *where = "/usr/lib/debug/.build-id/" + m.build_id.substr(0, 2) + "/" + m.build_id.substr(2) + ".debug";
    return access(where->c_str(), R_OK) == 0;
  }
  *where = "(libc's build id not found)";
  return false;
}

}  // namespace

// The copies a cache folder holds.
size_t copies_in(const std::string& dir) {
  size_t n = 0;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) n += std::strstr(e->d_name, ".debug") != nullptr;
    closedir(d);
  }
  return n;
}

struct FirstDump {
  double ms = -1;
  size_t frames = 0;
  long rss_kb = 0;
  size_t warnings = 0;
};

// A process's first dump into kept: its CPU time, frames and growth in resident memory.
FirstDump first_dump(memtrace::unwind::SymbolizerReuse& kept) {
  bool reused = false;
  FirstDump d;
  const long rss0 = resident_kb();
  const double c0 = thread_cpu_ms();
  d.frames = symbolize(kept, &reused);
  d.ms = thread_cpu_ms() - c0;
  d.rss_kb = resident_kb() - rss0;
  d.warnings = memtrace::unwind::take_debug_cache_warnings().size();
  return d;
}

// The child's part: the first dump alone, under MEMTRACE_DEBUG_CACHE as given; one line out.
// with_thread: the stacks also hold a second thread's.
int first_dump_only(bool with_thread) {
  const char* cache = std::getenv("MEMTRACE_DEBUG_CACHE");
  memtrace::unwind::set_debug_cache_setting(cache != nullptr ? cache : "off");
  level3();
  if (with_thread)
    for (uintptr_t pc : thread_stack()) g_stack.push_back(pc);
  memtrace::unwind::SymbolizerReuse kept;
  const FirstDump d = first_dump(kept);
  std::printf("first %.3f %zu %ld %zu\n", d.ms, d.frames, d.rss_kb, d.warnings);
  return 0;
}

FirstDump first_dump_in_child(const char* self, const std::string& cache, bool with_thread = false) {
  FirstDump d;
  const std::string cmd = std::string("MEMTRACE_BENCH_FIRST_DUMP_ONLY=") + (with_thread ? "thread" : "1") +
                          " MEMTRACE_DEBUG_CACHE='" + cache + "' '" + self + "'";
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char line[256];
    while (std::fgets(line, sizeof line, p) != nullptr)
      if (std::sscanf(line, "first %lf %zu %ld %zu", &d.ms, &d.frames, &d.rss_kb, &d.warnings) == 4) break;
    pclose(p);
  }
  return d;
}

int main(int argc, char** argv) {
  if (const char* only = std::getenv("MEMTRACE_BENCH_FIRST_DUMP_ONLY"); only != nullptr && only[0] != '\0')
    return first_dump_only(std::strcmp(only, "thread") == 0);
  int cpu = argc > 1 ? std::atoi(argv[1]) : sched_getcpu();
  const char* scale = argc > 2 ? argv[2] : "1.0";
  const char* repeat = argc > 3 ? argv[3] : "3";
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof set, &set) != 0) {
    std::perror("bench_dump_symbols: sched_setaffinity");
    return 1;
  }
  std::printf("pinned to CPU %d of %ld online; load average before: %s\n", cpu, sysconf(_SC_NPROCESSORS_ONLN),
              load_average().c_str());
  std::string debug_file;
  const bool have_debug = libc_debug_installed(&debug_file);

  level3();
  std::vector<uintptr_t> distinct = g_stack;
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  std::printf("stack: %zu return addresses, %zu distinct; libc's debug file %s: %s\n", g_stack.size(),
              distinct.size(), have_debug ? "installed" : "NOT installed", debug_file.c_str());

  // The first dump of a fresh process: cache off, empty, and holding the copy.
  char tmpl[] = "/tmp/memtrace-bench-debug-cache-XXXXXX";
  const std::string cache_dir = mkdtemp(tmpl) != nullptr ? tmpl : "/tmp/memtrace-bench-debug-cache";
  const FirstDump off = first_dump_in_child(argv[0], "off");
  const FirstDump cold = first_dump_in_child(argv[0], cache_dir);
  const bool kept_cold = copies_in(cache_dir) > 0;
  // A program whose stacks reach deep into libc: the whole copy is made, and kept.
  const FirstDump deep = first_dump_in_child(argv[0], cache_dir, true);
  const bool kept_deep = copies_in(cache_dir) > 0;
  const FirstDump warm = first_dump_in_child(argv[0], cache_dir);
  // This process's dumps below read the copy, as a program's would once it is made.
  memtrace::unwind::set_debug_cache_dir(cache_dir);

  // The first dump of this process. (libc_debug_installed's Symbolizer read no DWARF: only the
  // loader's list.)
  memtrace::unwind::SymbolizerReuse kept;
  bool reused = false;
  const FirstDump here = first_dump(kept);
  {
    auto lease = kept.acquire({});
    for (uintptr_t pc : g_stack)
      for (const auto& f : lease.symbolizer().frames(pc))
        std::printf("  %.60s  %.*s:%d\n", std::string(f.function).c_str(), static_cast<int>(f.file.size()),
                    f.file.data(), f.line);
  }

  // Nine more interval dumps of the unchanged program: kept, and fresh each time.
  double tenth_kept = 0;
  for (int i = 2; i <= 10; ++i) {
    const double t = thread_cpu_ms();
    symbolize(kept, &reused);
    tenth_kept = thread_cpu_ms() - t;
  }
  const bool tenth_reused = reused;
  double tenth_fresh = 0;
  for (int i = 1; i <= 10; ++i) {
    memtrace::unwind::SymbolizerReuse fresh;
    const double t = thread_cpu_ms();
    symbolize(fresh, &reused);
    tenth_fresh = thread_cpu_ms() - t;
  }

  std::printf("\n%-58s %12s\n", "", "CPU ms");
  const struct {
    const char* what;
    const FirstDump& d;
  } firsts[] = {{"first dump, debug cache off (libc's units inflated as needed)", off},
                {kept_cold ? "first dump, empty debug cache (a copy kept)" : "first dump, empty debug cache (no copy kept)",
                 cold},
                {kept_deep ? "same, with a thread's stack too (the whole copy kept)"
                           : "same, with a thread's stack too (NO copy kept)",
                 deep},
                {"first dump, the whole copy in the cache", warm}};
  for (const auto& f : firsts)
    std::printf("%-58s %12.3f   (%zu frames; resident memory +%ld KB; %zu cache warnings)\n", f.what, f.d.ms,
                f.d.frames, f.d.rss_kb, f.d.warnings);
  std::printf("%-58s %12.3f   (%zu frames; resident memory +%ld KB)\n", "first dump in this process (copy in the cache)",
              here.ms, here.frames, here.rss_kb);
  std::printf("%-58s %12.3f   (the last dump's Symbolizer: %s)\n", "tenth interval dump, Symbolizer kept between dumps",
              tenth_kept, tenth_reused ? "yes" : "NO");
  std::printf("%-58s %12.3f\n", "tenth interval dump, a fresh Symbolizer each dump", tenth_fresh);
  std::printf("targets: first dump under 10 ms with libc's debug package: %s with the copy in the cache, %s with "
              "the cache empty, %s with the cache off; tenth interval dump under 5 ms (%s)\n",
              warm.ms >= 0 && warm.ms < 10 ? "met" : "MISSED", cold.ms >= 0 && cold.ms < 10 ? "met" : "MISSED",
              off.ms >= 0 && off.ms < 10 ? "met" : "MISSED", tenth_kept < 5 ? "met" : "MISSED");
  for (const std::string& f : {cache_dir}) {
    const std::string rm = "rm -rf '" + f + "'";
    if (std::system(rm.c_str()) != 0) std::printf("(could not remove %s)\n", f.c_str());
  }
  std::fflush(stdout);

  // Throughput against addr2line, on the same CPU.
  std::string cmd = std::string("MEMTRACE_BENCH_THREADS=1 '") + BENCH_SYMBOLIZE_PATH + "' " + scale + " " + repeat;
  std::printf("\nthroughput on one pinned CPU: %s\n", cmd.c_str());
  std::fflush(stdout);
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char line[1024];
    while (std::fgets(line, sizeof line, p) != nullptr)
      if (std::strncmp(line, "TOTAL", 5) == 0 || std::strncmp(line, "CPU seconds", 11) == 0 ||
          std::strncmp(line, "module", 6) == 0 || std::strstr(line, " a/s") != nullptr ||
          std::strncmp(line, "memtrace as a dump", 18) == 0 || std::strncmp(line, "lib", 3) == 0 ||
          std::strncmp(line, "this program", 12) == 0)
        std::fputs(line, stdout);
    if (pclose(p) != 0) std::printf("bench_symbolize failed\n");
  }
  std::printf("load average after: %s\n", load_average().c_str());
  return 0;
}
