// Symbolization speed: memtrace's Symbolizer against binutils addr2line, on the same addresses.
//
//   bench_symbolize [PER_MODULE_SCALE [REPEAT [ONLY]]]   (defaults 1.0 and 5; 0.25 1 for a quick run)
//
// ONLY keeps the modules whose label contains it ("program", "libstdc++", "cublas"; "" for
// all), for profiling one module's share. MEMTRACE_BENCH_NO_ADDR2LINE=1 runs memtrace's side
// only (for a profiler; then no ratio is printed), with a 0.2 s pause between runs where
// addr2line's runs would be: on a shared VM, back-to-back runs measured 30-50% slower.
//
// Builds several thousand distinct return addresses in three modules of this process:
//   libstdc++.so.6        inside functions named by its symbol table, plus samples of its text
//   this program          inside every function its .symtab names (built with -g: DWARF, inlines)
//   a large shared object dlopened RTLD_LAZY: libcublasLt.so.13, else the next candidate that
//                         loads (printed); mostly samples of its text (it exports few symbols)
// Then times
//   (a) a fresh memtrace Symbolizer (construction included) over every address, one module
//       after the other, each module's addresses through prepare() on one thread, then asked
//       for each (the per-module rows);
//   (a') a fresh Symbolizer given every address at once through prepare(), as a dump does,
//       on default_symbolize_threads() threads (MEMTRACE_BENCH_THREADS=N to choose), then
//       asked for each; its frames are checked equal to (a)'s; and
//   (b) one `addr2line -a -f -C -i -e MODULE OFFSETS...` process per module, all of that
//       module's offsets on its command line (-a only marks where each address's frames begin).
// Both look up the same pc: the Symbolizer subtracts 1 from a return address itself (the call
// instruction), so addr2line is given (return address - 1 - load base).
// Each side is run REPEAT times, alternating (a fresh Symbolizer each time); a module's figure
// is its fastest run and a total is the fastest run's total, so that other load on the
// machine skews both sides alike. CPU seconds (this process for memtrace, the child's user +
// system time for addr2line) are printed too: they move less with load than wall time.
// Prints counts, seconds, addresses/second, the ratio, and how far the function names agree.
// Not a test: figures depend on the machine (and on the page cache: the first run reads the
// large library from disk for whichever tool goes first; the Symbolizer goes first here).
#include <dlfcn.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <link.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "unwind/symbolizer.hpp"

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
double cpu_now() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

struct Module {
  std::string label;
  std::string path;  // file given to addr2line
  uintptr_t base = 0;  // dlpi_addr: load bias
  std::vector<std::pair<uintptr_t, uintptr_t>> text;  // executable PT_LOAD ranges (runtime)
  std::vector<uintptr_t> rets;                        // return addresses (runtime)
  size_t from_symbols = 0, sampled = 0;
  double sym_seconds = 1e30, a2l_seconds = 1e30;  // fastest run
  double sym_cpu = 1e30, a2l_cpu = 1e30;          // least CPU time of a run
};

std::vector<Module>* g_mods;

// Executable segments and load bias of each module, matched by load bias.
int phdr_cb(dl_phdr_info* info, size_t, void*) {
  for (Module& m : *g_mods) {
    if (m.base != info->dlpi_addr) continue;
    if (!m.text.empty()) continue;
    for (int i = 0; i < info->dlpi_phnum; ++i) {
      const ElfW(Phdr)& p = info->dlpi_phdr[i];
      if (p.p_type == PT_LOAD && (p.p_flags & PF_X))
        m.text.push_back({info->dlpi_addr + p.p_vaddr, info->dlpi_addr + p.p_vaddr + p.p_memsz});
    }
  }
  return 0;
}

struct FindByName {
  const char* needle;
  uintptr_t base;
  std::string path;
  bool found;
};
int find_cb(dl_phdr_info* info, size_t, void* data) {
  auto* f = static_cast<FindByName*>(data);
  if (info->dlpi_name != nullptr && std::strstr(info->dlpi_name, f->needle) != nullptr) {
    f->base = info->dlpi_addr;
    f->path = info->dlpi_name;
    f->found = true;
    return 1;
  }
  return 0;
}

// Defined functions (value, size) of an ELF file: .symtab when present, else .dynsym.
std::vector<std::pair<uint64_t, uint64_t>> elf_functions(const std::string& path) {
  std::vector<std::pair<uint64_t, uint64_t>> out;
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  Elf* elf = elf_begin(fd, ELF_C_READ_MMAP, nullptr);
  if (elf == nullptr) {
    close(fd);
    return out;
  }
  Elf_Scn* chosen = nullptr;
  for (Elf_Scn* scn = nullptr; (scn = elf_nextscn(elf, scn)) != nullptr;) {
    GElf_Shdr sh;
    if (gelf_getshdr(scn, &sh) == nullptr) continue;
    if (sh.sh_type == SHT_SYMTAB) chosen = scn;
    if (sh.sh_type == SHT_DYNSYM && chosen == nullptr) chosen = scn;
  }
  if (chosen != nullptr) {
    GElf_Shdr sh;
    gelf_getshdr(chosen, &sh);
    Elf_Data* data = elf_getdata(chosen, nullptr);
    size_t n = sh.sh_entsize ? sh.sh_size / sh.sh_entsize : 0;
    for (size_t i = 0; data != nullptr && i < n; ++i) {
      GElf_Sym s;
      if (gelf_getsym(data, static_cast<int>(i), &s) == nullptr) continue;
      if (GELF_ST_TYPE(s.st_info) != STT_FUNC || s.st_shndx == SHN_UNDEF || s.st_size < 2) continue;
      out.push_back({s.st_value, s.st_size});
    }
  }
  elf_end(elf);
  close(fd);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end(), [](auto& a, auto& b) { return a.first == b.first; }), out.end());
  return out;
}

uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  return x ^ (x >> 33);
}

// Up to `want` functions evenly spread over the table, one return address inside each
// (pc = ret - 1 lies within the function), then text samples until `want_total`.
void pick(Module& m, size_t want_syms, size_t want_total) {
  std::set<uintptr_t> seen;
  auto fns = elf_functions(m.path);
  size_t take = std::min(want_syms, fns.size());
  for (size_t k = 0; k < take; ++k) {
    auto [value, size] = fns[k * fns.size() / take];
    uintptr_t ret = m.base + value + 1 + mix(value) % (size - 1);
    if (seen.insert(ret).second) {
      m.rets.push_back(ret);
      ++m.from_symbols;
    }
  }
  uint64_t total_text = 0;
  for (auto& [s, e] : m.text) total_text += e - s;
  size_t need = want_total > m.rets.size() ? want_total - m.rets.size() : 0;
  if (need == 0 || total_text == 0) return;
  uint64_t stride = std::max<uint64_t>(1, total_text / need);
  uint64_t k = 0;
  for (auto& [s, e] : m.text)
    for (uintptr_t a = s + stride / 2 + 1; a < e && m.sampled < need; a += stride, ++k) {
      uintptr_t ret = a + mix(k) % 16;  // not all at one alignment
      if (ret < e && seen.insert(ret).second) {
        m.rets.push_back(ret);
        ++m.sampled;
      }
    }
}

// addr2line output per address: frames (function) innermost first.
using Frames = std::vector<std::string>;

bool is_addr_line(const std::string& l) {
  if (l.size() != 18 || l[0] != '0' || l[1] != 'x') return false;
  for (size_t i = 2; i < l.size(); ++i)
    if (!std::isxdigit(static_cast<unsigned char>(l[i]))) return false;
  return true;
}

// Runs addr2line over the module's addresses; returns frames per address, in order.
std::vector<Frames> run_addr2line(const Module& m, double* seconds, double* cpu_seconds) {
  std::vector<std::string> args = {"/usr/bin/addr2line", "-a", "-f", "-C", "-i", "-e", m.path};
  char buf[32];
  for (uintptr_t r : m.rets) {
    std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(r - 1 - m.base));
    args.push_back(buf);
  }
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  auto t0 = Clock::now();
  int pipefd[2];
  if (pipe(pipefd) != 0) std::abort();
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, pipefd[1], 1);
  posix_spawn_file_actions_addclose(&fa, pipefd[0]);
  pid_t pid = 0;
  int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  close(pipefd[1]);
  std::string out;
  if (rc == 0) {
    char chunk[1 << 16];
    ssize_t n;
    while ((n = read(pipefd[0], chunk, sizeof chunk)) > 0) out.append(chunk, static_cast<size_t>(n));
    int status = 0;
    rusage ru{};
    wait4(pid, &status, 0, &ru);
    *cpu_seconds = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                   static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
  } else {
    std::fprintf(stderr, "bench_symbolize: cannot run addr2line: %s\n", std::strerror(rc));
  }
  close(pipefd[0]);
  *seconds = since(t0);

  // Parse: address line, then (function, file:line) pairs.
  std::vector<Frames> res;
  size_t pos = 0;
  std::vector<std::string> lines;
  while (pos < out.size()) {
    size_t nl = out.find('\n', pos);
    if (nl == std::string::npos) nl = out.size();
    lines.push_back(out.substr(pos, nl - pos));
    pos = nl + 1;
  }
  for (size_t i = 0; i < lines.size();) {
    if (!is_addr_line(lines[i])) {
      ++i;
      continue;
    }
    Frames f;
    ++i;
    while (i < lines.size() && !is_addr_line(lines[i])) {
      f.push_back(lines[i]);
      i += 2;  // skip file:line
    }
    res.push_back(std::move(f));
  }
  return res;
}

// "ns::f<int>(int, char) const" -> "ns::f<int>": drops the final top-level parameter list.
std::string without_params(std::string s) {
  while (!s.empty() && s.back() == ' ') s.pop_back();
  for (const char* q : {" const", " volatile", " &&", " &"})
    if (s.size() > std::strlen(q) && s.compare(s.size() - std::strlen(q), std::string::npos, q) == 0)
      s.erase(s.size() - std::strlen(q));
  if (s.empty() || s.back() != ')') return s;
  int depth = 0;
  for (size_t i = s.size(); i-- > 0;) {
    if (s[i] == ')') ++depth;
    if (s[i] == '(' && --depth == 0) return s.substr(0, i);
  }
  return s;
}

// Looser still: also drops " [clone .cold]"-style suffixes, ".cold" and the qualification
// ("ns::C<T>::f" -> "f"), since addr2line names DWARF-described functions by DW_AT_name.
std::string loose(const std::string& full) {
  std::string s = full;
  size_t c = s.find(" [clone ");
  if (c != std::string::npos) s.erase(c);
  for (const char* suf : {".cold", ".part.0", ".isra.0", ".constprop.0"}) {
    size_t n = std::strlen(suf);
    if (s.size() > n && s.compare(s.size() - n, n, suf) == 0) s.erase(s.size() - n);
  }
  s = without_params(s);
  int depth = 0;
  for (size_t i = s.size(); i-- > 1;) {
    if (s[i] == '>') ++depth;
    if (s[i] == '<') --depth;
    if (depth == 0 && s[i] == ':' && s[i - 1] == ':') return s.substr(i + 1);
  }
  return s;
}

bool memtrace_unnamed(const std::string& fn) {
  return fn.rfind("[unknown]", 0) == 0 || fn.find("+0x") != std::string::npos;
}

}  // namespace

int main(int argc, char** argv) {
  double scale = argc > 1 ? std::atof(argv[1]) : 1.0;
  if (scale <= 0) scale = 1.0;
  int repeat = argc > 2 ? std::atoi(argv[2]) : 5;
  if (repeat < 1) repeat = 1;
  elf_version(EV_CURRENT);

  // The large library.
  const char* candidates[] = {
      "/usr/local/cuda/lib64/libcublasLt.so.13",
      "/usr/local/cuda/lib64/libcudnn_engines_precompiled.so.9",
      "/usr/local/cuda/lib64/libcudnn_adv.so.9",
      "/usr/local/cuda/lib64/libcusparse.so.12",
      "/usr/local/cuda/lib64/libcufft.so.12",
      "/usr/lib/x86_64-linux-gnu/libdw.so.1",
  };
  void* big = nullptr;
  std::string big_path;
  for (const char* c : candidates) {
    big = dlopen(c, RTLD_LAZY | RTLD_LOCAL);
    if (big != nullptr) {
      big_path = c;
      break;
    }
    std::printf("dlopen %s failed: %s (trying the next candidate)\n", c, dlerror());
  }

  std::vector<Module> mods;
  {
    FindByName f{"libstdc++.so", 0, {}, false};
    dl_iterate_phdr(find_cb, &f);
    if (f.found) mods.push_back({"libstdc++", f.path, f.base, {}, {}, 0, 0, 0, 0});
  }
  {
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[n > 0 ? n : 0] = '\0';
    link_map* lm = nullptr;
    void* self = dlopen(nullptr, RTLD_LAZY);
    dlinfo(self, RTLD_DI_LINKMAP, &lm);
    mods.push_back({"this program", exe, lm != nullptr ? lm->l_addr : 0, {}, {}, 0, 0, 0, 0});
  }
  if (big != nullptr) {
    link_map* lm = nullptr;
    dlinfo(big, RTLD_DI_LINKMAP, &lm);
    std::string label = big_path.substr(big_path.rfind('/') + 1);
    mods.push_back({label, lm->l_name, lm->l_addr, {}, {}, 0, 0, 0, 0});
  }
  const bool no_addr2line = std::getenv("MEMTRACE_BENCH_NO_ADDR2LINE") != nullptr;
  if (argc > 3)
    mods.erase(std::remove_if(mods.begin(), mods.end(),
                              [&](const Module& m) { return m.label.find(argv[3]) == std::string::npos; }),
               mods.end());
  g_mods = &mods;
  dl_iterate_phdr(phdr_cb, nullptr);

  auto n = [&](double v) { return static_cast<size_t>(v * scale); };
  for (Module& m : mods) {
    if (m.label == "libstdc++") pick(m, n(2500), n(3000));
    else if (m.label == "this program") pick(m, n(1500), n(1500));
    else pick(m, n(1000), n(3500));
  }

  size_t total = 0;
  for (Module& m : mods) {
    std::printf("module %-34s %5zu addresses (%zu in named functions, %zu text samples)  %s\n", m.label.c_str(),
                m.rets.size(), m.from_symbols, m.sampled, m.path.c_str());
    total += m.rets.size();
  }

  // (a) memtrace's Symbolizer, fresh, construction included; (b) addr2line, one process per
  // module. Alternating, REPEAT times.
  std::map<uintptr_t, std::vector<std::string>> sym_names;
  std::map<uintptr_t, Frames> a2l_names;
  double ctor = 1e30, sym_total = 1e30, a2l_total = 1e30, sym_cpu = 1e30, a2l_cpu = 1e30;
  double sym_sys = 0;   // of the fastest CPU run: system time
  long sym_faults = 0;  // and page faults (the mapped files' pages the Symbolizer touched)
  for (Module& m : mods) m.sym_seconds = m.a2l_seconds = m.sym_cpu = m.a2l_cpu = 1e30;
  std::vector<uintptr_t> all_rets;
  for (Module& m : mods) all_rets.insert(all_rets.end(), m.rets.begin(), m.rets.end());
  unsigned threads = memtrace::unwind::default_symbolize_threads();
  if (const char* t = std::getenv("MEMTRACE_BENCH_THREADS")) threads = static_cast<unsigned>(std::atoi(t));
  double par_total = 1e30, par_cpu = 1e30;
  size_t par_differs = 0;
  std::map<uintptr_t, std::vector<std::string>> serial_frames;
  for (int r = 0; r < repeat; ++r) {
    auto t0 = Clock::now();
    double c0 = cpu_now();
    rusage ru0{};
    getrusage(RUSAGE_SELF, &ru0);
    double run_total = 0;
    {
      memtrace::unwind::Symbolizer sym;
      double c = since(t0);
      ctor = std::min(ctor, c);
      run_total += c;
      for (Module& m : mods) {
        auto t1 = Clock::now();
        double c1 = cpu_now();
        sym.prepare(m.rets, 1);  // as a dump does, on one thread
        for (uintptr_t ret : m.rets) sym.frames(ret);
        double t = since(t1);
        m.sym_seconds = std::min(m.sym_seconds, t);
        m.sym_cpu = std::min(m.sym_cpu, cpu_now() - c1);
        run_total += t;
      }
      double cpu = cpu_now() - c0;
      if (cpu < sym_cpu) {
        rusage ru1{};
        getrusage(RUSAGE_SELF, &ru1);
        sym_cpu = cpu;
        sym_sys = static_cast<double>(ru1.ru_stime.tv_sec - ru0.ru_stime.tv_sec) +
                  static_cast<double>(ru1.ru_stime.tv_usec - ru0.ru_stime.tv_usec) * 1e-6;
        sym_faults = (ru1.ru_minflt - ru0.ru_minflt) + (ru1.ru_majflt - ru0.ru_majflt);
      }
      if (r == 0) {
        const auto units = sym.unit_counts();
        std::printf("DWARF units whose DIEs were needed: %zu (walked by libdw instead of memtrace's reader: %zu)\n",
                    units.units, units.by_libdw);
      }
      // Names collected outside the timed part.
      if (r == 0)
        for (Module& m : mods)
          for (uintptr_t ret : m.rets) {
            auto& v = sym_names[ret];
            for (const auto& f : sym.frames(ret)) {
              v.emplace_back(f.function);
              serial_frames[ret].push_back(std::string(f.function) + "|" + std::string(f.file) + ":" +
                                           std::to_string(f.line));
            }
          }
    }
    sym_total = std::min(sym_total, run_total);

    // (a') the same addresses at once through prepare(), as a dump asks, on several threads.
    {
      auto t1 = Clock::now();
      double c1 = cpu_now();
      memtrace::unwind::Symbolizer sym;
      sym.prepare(all_rets, threads);
      for (uintptr_t ret : all_rets) sym.frames(ret);
      par_total = std::min(par_total, since(t1));
      par_cpu = std::min(par_cpu, cpu_now() - c1);
      if (r == 0)
        for (uintptr_t ret : all_rets) {
          std::vector<std::string> v;
          for (const auto& f : sym.frames(ret))
            v.push_back(std::string(f.function) + "|" + std::string(f.file) + ":" + std::to_string(f.line));
          par_differs += v != serial_frames[ret];
        }
    }

    if (no_addr2line) {
      usleep(200000);
      continue;
    }
    double a2l_run = 0, a2l_run_cpu = 0;
    for (Module& m : mods) {
      double t = 0, cpu = 0;
      auto res = run_addr2line(m, &t, &cpu);
      m.a2l_seconds = std::min(m.a2l_seconds, t);
      m.a2l_cpu = std::min(m.a2l_cpu, cpu);
      a2l_run += t;
      a2l_run_cpu += cpu;
      if (r != 0) continue;
      if (res.size() != m.rets.size())
        std::printf("warning: addr2line gave %zu results for %zu addresses of %s\n", res.size(), m.rets.size(),
                    m.label.c_str());
      for (size_t i = 0; i < res.size() && i < m.rets.size(); ++i) a2l_names[m.rets[i]] = std::move(res[i]);
    }
    a2l_total = std::min(a2l_total, a2l_run);
    a2l_cpu = std::min(a2l_cpu, a2l_run_cpu);
  }

  if (no_addr2line) {
    std::printf("memtrace: %.4f s CPU (fastest of %d runs) over %zu addresses\n", sym_cpu, repeat, total);
    std::printf("memtrace prepare() on %u threads: %.4f s wall, %.4f s CPU; frames differing from one thread's: %zu\n",
                threads, par_total, par_cpu, par_differs);
    return 0;
  }
  std::printf("\n%-34s %10s %12s %10s %12s %8s %9s %9s %6s\n", "", "memtrace s", "memtrace a/s", "addr2line s",
              "addr2line a/s", "ratio", "mt cpu s", "a2l cpu s", "ratio");
  std::printf("%-34s %10.3f\n", "Symbolizer construction", ctor);
  for (Module& m : mods)
    std::printf("%-34s %10.3f %12.0f %10.3f %12.0f %7.1fx %9.4f %9.3f %5.1fx\n", m.label.c_str(), m.sym_seconds,
                m.rets.size() / m.sym_seconds, m.a2l_seconds, m.rets.size() / m.a2l_seconds,
                m.a2l_seconds / m.sym_seconds, m.sym_cpu, m.a2l_cpu, m.a2l_cpu / m.sym_cpu);
  std::printf("%-37s %7.3f %12.0f %10.3f %12.0f %7.1fx\n", "TOTAL, one thread (with construction)", sym_total,
              total / sym_total, a2l_total, total / a2l_total, a2l_total / sym_total);
  std::printf("%-37s %7.3f %12.0f %10.3f %12.0f %7.1fx\n", "TOTAL, prepare() as a dump runs it", par_total,
              total / par_total, a2l_total, total / a2l_total, a2l_total / par_total);
  std::printf("memtrace as a dump runs it (prepare() on %u threads) is %.1fx faster than addr2line over %zu addresses"
              " (wall time, fastest of %d runs each); on one thread %.1fx\n",
              threads, a2l_total / par_total, total, repeat, a2l_total / sym_total);
  std::printf("CPU seconds (fastest run): memtrace on one thread %.3f (system %.3f, %ld page faults): %.1fx less than"
              " addr2line's %.3f; on %u threads %.3f (all threads): %.1fx less\n",
              sym_cpu, sym_sys, sym_faults, a2l_cpu / sym_cpu, a2l_cpu, threads, par_cpu, a2l_cpu / par_cpu);
  std::printf("frames from %u threads differing from one thread's: %zu of %zu addresses\n", threads, par_differs,
              total);

  // Agreement on function names (demangled). Compared: the outermost frame (the real function)
  // and, where both have them, every frame; "no name" on both sides counts as agreement.
  std::printf(
      "\nname agreement (outermost frame = the out-of-line function). \"Named only by addr2line\": addr2line\n"
      "takes the nearest symbol below even past its st_size (padding, stripped local code); memtrace\n"
      "then prints module+0xoffset. addr2line names DWARF-described functions by DW_AT_name (unqualified).\n");
  for (Module& m : mods) {
    size_t cmp = 0, exact = 0, noparams = 0, both_unnamed = 0, named = 0, named_agree = 0, depth_eq = 0;
    size_t loose_agree = 0, only_a2l = 0, only_mt = 0;
    size_t all_frames = 0, all_frames_agree = 0;
    std::vector<std::pair<std::string, std::string>> diffs;
    for (uintptr_t r : m.rets) {
      auto it = a2l_names.find(r);
      if (it == a2l_names.end() || it->second.empty()) continue;
      const auto& a = it->second;
      const auto& s = sym_names[r];
      ++cmp;
      std::string so = s.back(), ao = a.back();
      bool s_un = memtrace_unnamed(so), a_un = ao == "??";
      bool ok_exact, ok_np;
      bool ok_loose;
      if (s_un || a_un) {
        ok_exact = ok_np = ok_loose = s_un && a_un;
        if (ok_exact) ++both_unnamed;
        if (s_un && !a_un) ++only_a2l;
        if (!s_un && a_un) ++only_mt;
      } else {
        ++named;
        ok_exact = so == ao;
        ok_np = without_params(so) == without_params(ao);
        ok_loose = loose(so) == loose(ao);
        if (ok_np) ++named_agree;
      }
      loose_agree += ok_loose;
      exact += ok_exact;
      noparams += ok_np;
      if (s.size() == a.size()) {
        ++depth_eq;
        for (size_t i = 0; i < s.size(); ++i) {
          ++all_frames;
          all_frames_agree += loose(s[i]) == loose(a[i]) ||
                              (memtrace_unnamed(s[i]) && a[i] == "??");
        }
      }
      if (!ok_loose && diffs.size() < 3) diffs.push_back({so, ao});
    }
    auto pct = [](size_t a, size_t b) { return b ? 100.0 * static_cast<double>(a) / static_cast<double>(b) : 0.0; };
    std::printf(
        "  %s: %zu compared\n"
        "    outermost frame: exact %.1f%%, ignoring params %.1f%%, ignoring params+qualification+clone suffix %.1f%%\n"
        "    named by both %zu (agree ignoring params %.1f%%), unnamed by both %zu, named only by addr2line %zu,"
        " only by memtrace %zu\n"
        "    same frame count (inlining) %.1f%%; where equal, frame-by-frame loose agreement %.1f%%\n",
        m.label.c_str(), cmp, pct(exact, cmp), pct(noparams, cmp), pct(loose_agree, cmp), named,
        pct(named_agree, named), both_unnamed, only_a2l, only_mt, pct(depth_eq, cmp),
        pct(all_frames_agree, all_frames));
    for (auto& [so, ao] : diffs)
      std::printf("    e.g. differs: memtrace \"%.100s\"  addr2line \"%.100s\"\n", so.c_str(), ao.c_str());
  }
  if (big != nullptr) dlclose(big);
  return 0;
}
