// memtrace merge: placeholder until the command lands; it refuses to run rather than pretend.
#include <cstdio>

#include "cli/commands.hpp"

namespace memtrace::cli {

int cmd_merge(int argc, char** argv) {
  std::fprintf(stderr, "memtrace merge: not available in this build\n");
  return kExitUsage;
}

}  // namespace memtrace::cli
