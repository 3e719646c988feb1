#include "cli/commands.hpp"

namespace memtrace::cli {

namespace {

constexpr Command kCommands[] = {
    {"run", "run a program with memtrace preloaded and write a memory snapshot", &cmd_run},
};

}  // namespace

std::span<const Command> commands() { return kCommands; }

const Command* find_command(std::string_view name) {
  for (const Command& c : kCommands)
    if (c.name == name) return &c;
  return nullptr;
}

void print_usage(std::FILE* out) {
  std::fprintf(out,
               "usage: memtrace <command> [options] [args]\n"
               "       memtrace --help | --version\n"
               "\n"
               "commands:\n");
  for (const Command& c : kCommands)
    std::fprintf(out, "  %-12.*s %.*s\n", static_cast<int>(c.name.size()), c.name.data(),
                 static_cast<int>(c.summary.size()), c.summary.data());
  std::fprintf(out,
               "  %-12s %s\n"
               "\n"
               "Run 'memtrace <command> --help' for the options of one command.\n",
               "help", "show the help of a command");
}

}  // namespace memtrace::cli
