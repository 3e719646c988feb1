// MEMTRACE_OUTPUT template expansion, and how each dump's file is named from it.
//   %p pid          %r rank (first set of RANK, OMPI_COMM_WORLD_RANK, SLURM_PROCID, PMI_RANK; "" if none)
//   %h host name    %n dump sequence number    %t Unix time in seconds
//   %e executable base name                    %% a literal %
// Any other %x, and a trailing lone %, are kept literally. A '/' inside a substituted value becomes
// '_' so that a value can never add directories. The result is never shortened: a path too long
// for the file system fails to be written, with its one warning (output/dump.hpp).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace memtrace::output {

enum class DumpKind : uint8_t;  // output/dump.hpp

struct PathContext {
  int64_t pid = 0;
  std::string rank;
  std::string host;
  uint64_t sequence = 0;
  int64_t unix_time = 0;
  std::string exe_name;  // base name
};

std::string expand_output_path(std::string_view tmpl, const PathContext& ctx);

// Whether the template names each dump itself (it holds %n).
bool numbers_each_dump(std::string_view tmpl);

// The template a dump of `kind` expands. Dumps other than the exit one must not overwrite each
// other or the exit snapshot: a template without %n gets "-%n" before its extension (the last '.'
// of the file name, not a leading one), or at its end without one. The exit dump uses it as it is.
std::string dump_path_template(std::string_view tmpl, DumpKind kind);

// pid, rank, host name, executable base name and time of this process now.
PathContext path_context_from_process(uint64_t sequence);

// Path of the running executable (/proc/self/exe), "" if unknown.
std::string executable_path();

}  // namespace memtrace::output
