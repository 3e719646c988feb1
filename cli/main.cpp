// memtrace: launcher and analysis tool. Dispatches `memtrace <command> ...` to cmd_<command>.
#include <cstdio>
#include <cstring>
#include <string_view>

#include "cli/commands.hpp"

#ifndef MEMTRACE_VERSION
#define MEMTRACE_VERSION "unknown"
#endif

using namespace memtrace::cli;

int main(int argc, char** argv) {
  if (argc < 2) {
    print_usage(stderr);
    return kExitUsage;
  }
  std::string_view first = argv[1];
  if (first == "-h" || first == "--help") {
    print_usage(stdout);
    return 0;
  }
  if (first == "-V" || first == "--version" || first == "version") {
    std::printf("memtrace %s\n", MEMTRACE_VERSION);
    return 0;
  }
  if (first == "help") {
    if (argc < 3) {
      print_usage(stdout);
      return 0;
    }
    const Command* c = find_command(argv[2]);
    if (!c) {
      std::fprintf(stderr, "memtrace: unknown command '%s'\nTry 'memtrace --help' for the commands.\n", argv[2]);
      return kExitUsage;
    }
    char help[] = "--help";
    char* sub_argv[] = {argv[2], help, nullptr};
    return c->main(2, sub_argv);
  }
  const Command* c = find_command(first);
  if (!c) {
    // One line and a hint: the whole list would push the mistake off the screen.
    std::fprintf(stderr, "memtrace: unknown %s '%s'\nTry 'memtrace --help' for the commands.\n",
                 !first.empty() && first[0] == '-' ? "option" : "command", argv[1]);
    return kExitUsage;
  }
  return c->main(argc - 1, argv + 1);
}
