// MEMTRACE_OUTPUT template expansion.
//   %p pid          %r rank (first set of RANK, OMPI_COMM_WORLD_RANK, SLURM_PROCID, PMI_RANK; "" if none)
//   %h host name    %n dump sequence number    %t Unix time in seconds
//   %e executable base name                    %% a literal %
// Any other %x, and a trailing lone %, are kept literally. A '/' inside a substituted value becomes
// '_' so that a value can never add directories.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace memtrace::output {

struct PathContext {
  int64_t pid = 0;
  std::string rank;
  std::string host;
  uint64_t sequence = 0;
  int64_t unix_time = 0;
  std::string exe_name;  // base name
};

std::string expand_output_path(std::string_view tmpl, const PathContext& ctx);

// The rank as the launchers set it; getenv_fn lets tests pass their own environment.
using GetEnvFn = const char* (*)(const char*);
std::string rank_from_env(GetEnvFn getenv_fn);

// pid, rank, host name, executable base name and time of this process now.
PathContext path_context_from_process(uint64_t sequence);

// Path of the running executable (/proc/self/exe), "" if unknown.
std::string executable_path();

}  // namespace memtrace::output
