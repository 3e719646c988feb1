// memtrace recover STATE_FILE [-o OUT]: runs <prefix>/bin/memtrace-recover (state/recover_main.cpp),
// which reads the state file and writes the snapshot with the preload's own dump and symbolizer;
// this binary links neither (docs/design.md, "No dependency runs backwards").
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "cli/paths.hpp"

namespace memtrace::cli {

std::string recover_program(const std::string& prefix) { return prefix + "/bin/memtrace-recover"; }

int cmd_recover(int argc, char** argv) {
  const std::string helper = recover_program(install_prefix());
  std::vector<char*> args;
  args.push_back(const_cast<char*>("memtrace-recover"));
  for (int i = 1; i < argc; ++i) args.push_back(argv[i]);
  args.push_back(nullptr);
  ::execv(helper.c_str(), args.data());
  std::fprintf(stderr, "memtrace recover: cannot run '%s': %s\n", helper.c_str(), std::strerror(errno));
  return kExitCannotRun;
}

}  // namespace memtrace::cli
