// memtrace replay: placeholder until the command lands; it refuses to run rather than pretend.
#include <cstdio>

#include "cli/commands.hpp"

namespace memtrace::cli {

int cmd_replay(int argc, char** argv) {
  std::fprintf(stderr, "memtrace replay: not available in this build\n");
  return kExitUsage;
}

}  // namespace memtrace::cli
