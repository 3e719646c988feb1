// Every MEMTRACE_* setting, parsed once. A value that does not parse costs one warning
// naming the variable and the default used; the program always runs on.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/log.hpp"

namespace memtrace {

enum class StackMode : uint8_t { None, Native };
// Python frames: read whenever present (auto), only while the thread holds the GIL (gil), never.
enum class PythonMode : uint8_t { Auto, Gil, Off };

// Who serves cuMemAlloc/cuMemAllocPitch/cuMemFree: the driver (memtrace only watches), or
// memtrace's caching allocator (core/caching/) over the driver.
enum class AllocatorMode : uint8_t { Passthrough, Caching };

// Reads the environment through a GetEnvFn (tests pass their own). Warnings go to memtrace's log
// (core/cold_log.hpp).
using GetEnvFn = const char* (*)(const char*);

struct Config {
  std::string output = "memtrace-%p.pickle";  // MEMTRACE_OUTPUT (template, see output/)
  bool summary = true;                        // MEMTRACE_SUMMARY
  bool report = false;                        // MEMTRACE_REPORT: an HTML report beside each snapshot
  StackMode stacks = StackMode::Native;       // MEMTRACE_STACKS
  int stack_depth = 64;                       // MEMTRACE_STACK_DEPTH (1..256)
  bool free_stacks = false;                   // MEMTRACE_FREE_STACKS: free entries get the free's
                                              // own stack, not the allocation's
  PythonMode python = PythonMode::Auto;       // MEMTRACE_PYTHON: auto, gil or off
  unsigned symbolize_threads = 0;             // MEMTRACE_SYMBOLIZE_THREADS (1..64; 0 = auto:
                                              // the CPUs the process may use, at most 8)
  size_t max_entries = 500000;                // MEMTRACE_MAX_ENTRIES (0 keeps no history)
  std::string state_dir;                      // MEMTRACE_STATE_DIR: the state file's folder ("" =
                                              // the per-user default; "off" = no state file)
  std::string debug_cache;                    // MEMTRACE_DEBUG_CACHE: folder of decompressed debug files
                                              // ("" = the per-user default; "off" = none)
  uint32_t skip_actions = 0;                  // MEMTRACE_SKIP_ACTIONS: bit per Action
  size_t range_history = 65536;               // MEMTRACE_RANGE_HISTORY: range starts and ends kept
                                              // for external_annotations (0 keeps none)
  bool nvtx = true;                           // MEMTRACE_NVTX: take NVTX ranges through its injection
  bool debug = false;                         // MEMTRACE_DEBUG: a synonym of MEMTRACE_LOG_LEVEL=debug
  log::Level log_level = log::Level::info;    // MEMTRACE_LOG_LEVEL (see log_level_setting)
  int dump_signal = 12;                       // MEMTRACE_SIGNAL (SIGUSR2; 0 = none)
  double interval_s = 0;                      // MEMTRACE_INTERVAL (0 = off)
  int interval_keep = 10;                     // MEMTRACE_INTERVAL_KEEP: interval snapshots kept (0 = all)
  uint32_t max_stacks = 1u << 20;             // MEMTRACE_MAX_STACKS: distinct stacks kept
  bool dump_on_oom = true;                    // MEMTRACE_DUMP_ON_OOM
  AllocatorMode allocator = AllocatorMode::Passthrough;  // MEMTRACE_ALLOCATOR: passthrough or caching
  std::string alloc_conf;                     // MEMTRACE_ALLOC_CONF, PYTORCH_CUDA_ALLOC_CONF syntax; parsed
                                              // (and warned about) by the session (preload/allocator_settings.cpp)
  std::string ranks;                          // MEMTRACE_RANKS as given ("" = every rank)
  std::vector<long> rank_list;                // ... parsed
};

// The process's rank from the usual launcher variables (RANK, OMPI_COMM_WORLD_RANK, SLURM_PROCID,
// PMI_RANK; the first one set and not empty wins): as set (what %r puts in the output path; "" when
// none is set) and as a number (what MEMTRACE_RANKS selects by; -1 when none is set or the value is
// not a whole number).
struct LauncherRank {
  std::string text;
  long number = -1;
};
LauncherRank launcher_rank(GetEnvFn getenv_fn);
// Whether this process records, given MEMTRACE_RANKS: every rank when the list is empty, and a
// process with no rank only then.
bool rank_selected(const Config& c, long rank);
// "USR2", "SIGUSR2", "12" → 12; "none" → 0; -1 when it names no catchable signal; -2 for a
// signal that reports a fault in the program (SEGV, BUS, FPE, ILL, TRAP, ABRT, SYS), refused.
int parse_signal(const char* s);

Config parse_config(GetEnvFn getenv_fn);

// memtrace's log level: MEMTRACE_LOG_LEVEL; without it, or when it names no level (*bad set), debug
// if MEMTRACE_DEBUG is on, else info. Says nothing and allocates nothing: the library applies it
// as it loads, and the dlsym hook may need it before that (preload/log_setup.cpp). parse_config
// gives it as Config::log_level, with the warning a bad value costs.
log::Level log_level_setting(GetEnvFn getenv_fn, bool* bad = nullptr);

// MEMTRACE_DEBUG_CACHE's value as Config keeps it: "off" (also "none", "0"), an absolute folder,
// or "" for the default; *bad set (and "" given) when it is none of these.
std::string debug_cache_setting(const char* value, bool* bad);

// Helpers shared with the launcher and tests.
bool parse_bool(const char* s, bool* out);
bool parse_size_bytes(const char* s, uint64_t* out);  // "4096", "16G", "512M", "1.5K"

}  // namespace memtrace
