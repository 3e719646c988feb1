// memtrace peak: placeholder until the command lands; it refuses to run rather than pretend.
#include <cstdio>

#include "cli/commands.hpp"

namespace memtrace::cli {

int cmd_peak(int argc, char** argv) {
  std::fprintf(stderr, "memtrace peak: not available in this build\n");
  return kExitUsage;
}

}  // namespace memtrace::cli
