// Every MEMTRACE_* setting, parsed once. A value that does not parse costs one warning
// naming the variable and the default used; the program always runs on.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace memtrace {

enum class StackMode : uint8_t { None, Native };

struct Config {
  std::string output = "memtrace-%p.pickle";  // MEMTRACE_OUTPUT (template, see output/)
  bool summary = true;                        // MEMTRACE_SUMMARY
  StackMode stacks = StackMode::Native;       // MEMTRACE_STACKS
  int stack_depth = 64;                       // MEMTRACE_STACK_DEPTH (1..256)
  bool free_stacks = false;                   // MEMTRACE_FREE_STACKS: free entries get the free's
                                              // own stack, not the allocation's
  size_t max_entries = 500000;                // MEMTRACE_MAX_ENTRIES (0 keeps no history)
  uint32_t skip_actions = 0;                  // MEMTRACE_SKIP_ACTIONS: bit per Action
  bool debug = false;                         // MEMTRACE_DEBUG
};

// Reads the environment through `getenv_fn` (tests pass their own). Warnings go to stderr.
using GetEnvFn = const char* (*)(const char*);
Config parse_config(GetEnvFn getenv_fn);

// Helpers shared with the launcher and tests.
bool parse_bool(const char* s, bool* out);
bool parse_size_bytes(const char* s, uint64_t* out);  // "4096", "16G", "512M", "1.5K"

}  // namespace memtrace
