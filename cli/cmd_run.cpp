// memtrace run: set up the environment for libmemtrace.so and exec the program in place, so
// that the program's pid, signals and exit status are its own.
#include <elf.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "cli/commands.hpp"
#include "cli/paths.hpp"

namespace memtrace::cli {

namespace {

constexpr const char* kUsageLine =
    "usage: memtrace run [--sim] [-o PATH] [--no-summary] [--stacks none|native] [--] PROGRAM [ARGS...]\n";

void print_run_usage(std::FILE* out) {
  std::fputs(kUsageLine, out);
  std::fprintf(out,
               "\n"
               "Runs PROGRAM with libmemtrace.so preloaded. When the program exits, memtrace writes a\n"
               "memory snapshot that pytorch.org/memory_viz opens and prints a summary on stderr.\n"
               "The program's exit status is passed through. If it dies without writing its snapshot\n"
               "(killed, crashed), memtrace recovers the snapshot from its state file and says where it\n"
               "is (see memtrace recover). Python programs can `import memtrace`\n"
               "(its folder is appended to PYTHONPATH) to mark phases and take snapshots themselves.\n"
               "\n"
               "options:\n"
               "  --sim                 run on the simulated CUDA device (no GPU needed): puts the\n"
               "                        simulated libcuda/libcudart/libnccl first on LD_LIBRARY_PATH\n"
               "  -o, --output PATH     where to write the snapshot (MEMTRACE_OUTPUT); in PATH, %%p is\n"
               "                        the pid, %%r the rank, %%h the host, %%n a sequence number,\n"
               "                        %%t the time, %%e the program's name (default memtrace-%%p.pickle)\n"
               "  --no-summary          print no summary on stderr (MEMTRACE_SUMMARY=0)\n"
               "  --stacks MODE         none or native: record the call stack of each event\n"
               "                        (MEMTRACE_STACKS, default native)\n"
               "  -h, --help            show this help\n"
               "\n"
               "Other settings are read from MEMTRACE_* environment variables, which pass through.\n");
}

struct RunOptions {
  bool sim = false;
  bool no_summary = false;
  const char* output = nullptr;
  const char* stacks = nullptr;
  int program_index = -1;  // index in argv of PROGRAM
};

int usage_error(const char* fmt, const char* arg) {
  std::fprintf(stderr, "memtrace run: ");
  std::fprintf(stderr, fmt, arg);
  std::fprintf(stderr, "\n%sTry 'memtrace run --help' for more.\n", kUsageLine);
  return kExitUsage;
}

// Returns -1 when parsing succeeded, else the exit code to return.
int parse(int argc, char** argv, RunOptions* o) {
  int i = 1;
  for (; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a == "--") {
      ++i;
      break;
    }
    if (a.empty() || a[0] != '-' || a == "-") break;  // first operand: the program
    if (a == "-h" || a == "--help") {
      print_run_usage(stdout);
      return 0;
    } else if (a == "--sim") {
      o->sim = true;
    } else if (a == "--no-summary") {
      o->no_summary = true;
    } else if (a == "-o" || a == "--output") {
      if (i + 1 >= argc) return usage_error("%s needs a path", argv[i]);
      o->output = argv[++i];
    } else if (a.starts_with("--output=")) {
      o->output = argv[i] + std::strlen("--output=");
    } else if (a.starts_with("-o")) {
      o->output = argv[i] + 2;
    } else if (a == "--stacks") {
      if (i + 1 >= argc) return usage_error("%s needs none or native", argv[i]);
      o->stacks = argv[++i];
    } else if (a.starts_with("--stacks=")) {
      o->stacks = argv[i] + std::strlen("--stacks=");
    } else {
      return usage_error("unknown option '%s'", argv[i]);
    }
  }
  if (o->output && *o->output == '\0') return usage_error("%s", "the output path is empty");
  if (o->stacks && std::strcmp(o->stacks, "none") != 0 && std::strcmp(o->stacks, "native") != 0)
    return usage_error("--stacks must be none or native, not '%s'", o->stacks);
  if (i >= argc) return usage_error("%s", "no program given");
  o->program_index = i;
  return -1;
}

// A sanitizer's runtime (AddressSanitizer, ThreadSanitizer, ...) must be the first library
// loaded, or it refuses to start: it stays ahead of memtrace.
bool is_sanitizer_runtime(std::string_view entry) {
  std::string_view base = entry.substr(entry.rfind('/') == std::string_view::npos ? 0 : entry.rfind('/') + 1);
  for (std::string_view p : {"libasan", "libtsan", "libubsan", "libhwasan", "libclang_rt.asan", "libclang_rt.tsan"})
    if (base.starts_with(p)) return true;
  return false;
}

// `first` followed by the entries of `existing` (separated by ':' or ' ', as ld.so reads
// LD_PRELOAD), leaving out empty entries and other copies of `first`; a sanitizer runtime that
// led `existing` keeps the lead.
std::string prepend_entry(const std::string& first, const char* existing, bool spaces_separate) {
  std::string lead, out = first;
  if (!existing) return out;
  std::string_view rest = existing;
  bool at_start = true;
  while (!rest.empty()) {
    size_t cut = spaces_separate ? rest.find_first_of(": ") : rest.find(':');
    std::string_view item = rest.substr(0, cut);
    rest = cut == std::string_view::npos ? std::string_view() : rest.substr(cut + 1);
    if (item.empty() || item == first) continue;
    if (at_start && spaces_separate && is_sanitizer_runtime(item)) {
      lead = std::string(item) + ":";
      at_start = false;
      continue;
    }
    at_start = false;
    out += ':';
    out += item;
  }
  return lead + out;
}

// `existing` (a ':'-separated path list) with `last` added at its end, unless it holds it already.
std::string append_entry(const std::string& last, const char* existing) {
  if (!existing || !*existing) return last;
  std::string_view rest = existing;
  while (true) {
    size_t cut = rest.find(':');
    if (rest.substr(0, cut) == last) return existing;
    if (cut == std::string_view::npos) break;
    rest.remove_prefix(cut + 1);
  }
  return std::string(existing) + ":" + last;
}

// The file execvp would run for `name` (a path, or the first executable match on PATH).
std::string resolve_program(const char* name) {
  if (std::strchr(name, '/')) return name;
  const char* path = std::getenv("PATH");
  std::string_view dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  while (true) {
    size_t colon = dirs.find(':');
    std::string dir(dirs.substr(0, colon));
    std::string cand = (dir.empty() ? std::string(".") : dir) + "/" + name;
    if (::access(cand.c_str(), X_OK) == 0) return cand;
    if (colon == std::string_view::npos) return {};
    dirs.remove_prefix(colon + 1);
  }
}

// True for an ELF executable with no program interpreter (a static executable): the loader that
// honours LD_PRELOAD never runs for it, so memtrace cannot be put in front of it. Scripts and
// anything unreadable are given the benefit of the doubt.
bool statically_linked(const std::string& file) {
  FILE* f = std::fopen(file.c_str(), "rb");
  if (!f) return false;
  Elf64_Ehdr eh;
  bool is_static = false;
  if (std::fread(&eh, sizeof eh, 1, f) == 1 && std::memcmp(eh.e_ident, ELFMAG, SELFMAG) == 0 &&
      eh.e_ident[EI_CLASS] == ELFCLASS64 && eh.e_phentsize == sizeof(Elf64_Phdr) && eh.e_phnum > 0 &&
      eh.e_phnum < 4096) {
    is_static = true;
    for (int i = 0; i < eh.e_phnum && is_static; ++i) {
      Elf64_Phdr ph;
      if (std::fseek(f, static_cast<long>(eh.e_phoff + i * sizeof ph), SEEK_SET) != 0 ||
          std::fread(&ph, sizeof ph, 1, f) != 1) {
        is_static = false;  // unreadable: do not claim anything
        break;
      }
      if (ph.p_type == PT_INTERP) is_static = false;
    }
  }
  std::fclose(f);
  return is_static;
}

bool set_env(const char* name, const std::string& value) {
  if (::setenv(name, value.c_str(), 1) == 0) return true;
  std::fprintf(stderr, "memtrace run: cannot set %s: %s\n", name, std::strerror(errno));
  return false;
}

}  // namespace

int cmd_run(int argc, char** argv) {
  RunOptions o;
  if (int rc = parse(argc, argv, &o); rc >= 0) return rc;

  std::string prefix = install_prefix();
  if (prefix.empty()) {
    std::fprintf(stderr, "memtrace run: cannot find where memtrace is installed (/proc/self/exe: %s)\n",
                 std::strerror(errno));
    return kExitCannotRun;
  }
  std::string lib = preload_library(prefix);
  if (!is_regular_file(lib)) {
    std::fprintf(stderr, "memtrace run: the preload library %s is missing\n", lib.c_str());
    return kExitCannotRun;
  }
  if (!set_env("LD_PRELOAD", prepend_entry(lib, std::getenv("LD_PRELOAD"), true))) return kExitCannotRun;
  // NVTX ranges (docs/ranges.md): NVTX loads the tool this names. One already named (a profiler
  // the user runs memtrace under) is kept; the library says so once.
  const char* nvtx = std::getenv("NVTX_INJECTION64_PATH");
  const char* nvtx_setting = std::getenv("MEMTRACE_NVTX");
  const bool nvtx_off = nvtx_setting && std::string_view(nvtx_setting) == "0";
  if (!nvtx_off && (!nvtx || !*nvtx) && !set_env("NVTX_INJECTION64_PATH", lib)) return kExitCannotRun;

  // The Python module (`import memtrace`): appended, so that a module of that name the program
  // brings itself still comes first.
  if (std::string py = python_module_dir(prefix); is_directory(py + "/memtrace") &&
                                                  !set_env("PYTHONPATH", append_entry(py, std::getenv("PYTHONPATH"))))
    return kExitCannotRun;

  if (o.sim) {
    std::string sim = sim_library_dir(prefix);
    if (!is_regular_file(sim + "/libcuda.so.1")) {
      std::fprintf(stderr, "memtrace run: the simulated device is missing (no %s/libcuda.so.1)\n", sim.c_str());
      return kExitCannotRun;
    }
    if (!set_env("LD_LIBRARY_PATH", prepend_entry(sim, std::getenv("LD_LIBRARY_PATH"), false)))
      return kExitCannotRun;
  }
  if (o.output && !set_env("MEMTRACE_OUTPUT", o.output)) return kExitCannotRun;
  // The program keeps this process's pid (exec): its memtrace knows it is the one `run` started.
  if (!set_env("MEMTRACE_RUN_PID", std::to_string(::getpid()))) return kExitCannotRun;
  if (o.no_summary && !set_env("MEMTRACE_SUMMARY", "0")) return kExitCannotRun;
  if (o.stacks && !set_env("MEMTRACE_STACKS", o.stacks)) return kExitCannotRun;

  if (std::string file = resolve_program(argv[o.program_index]); !file.empty() && statically_linked(file))
    std::fprintf(stderr,
                 "memtrace run: %s is statically linked: no dynamic loader runs for it, so LD_PRELOAD cannot put "
                 "memtrace in front of it; it runs unrecorded and no snapshot is written\n",
                 file.c_str());
  // A program that dies without its exit snapshot (killed, crashed) leaves its state file: the
  // watcher recovers it once the program is gone (cli/run_watcher.cpp).
  start_run_watcher(prefix);
  std::fflush(nullptr);
  ::execvp(argv[o.program_index], argv + o.program_index);
  int err = errno;
  std::fprintf(stderr, "memtrace run: cannot run '%s': %s\n", argv[o.program_index], std::strerror(err));
  return kExitCannotRun;
}

}  // namespace memtrace::cli
