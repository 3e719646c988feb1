// The `memtrace` command line: a table of subcommands, each in its own cmd_<name>.cpp.
// To add one: write `int cmd_<name>(int argc, char** argv)` (argv[0] is the command's name)
// and list it in commands.cpp.
#pragma once
#include <cstdio>
#include <span>
#include <string>
#include <string_view>

namespace memtrace::cli {

// Exit codes shared by every command.
constexpr int kExitUsage = 2;        // bad command line
constexpr int kExitCannotRun = 127;  // the program (or memtrace's own pieces) could not be started

struct Command {
  std::string_view name;
  std::string_view summary;  // one line for `memtrace --help`
  int (*main)(int argc, char** argv);
};

std::span<const Command> commands();
const Command* find_command(std::string_view name);

// Prints the top-level usage (command list) to `out`.
void print_usage(std::FILE* out);

// Commands.
int cmd_run(int argc, char** argv);
int cmd_summary(int argc, char** argv);
int cmd_peak(int argc, char** argv);
int cmd_leaks(int argc, char** argv);
int cmd_diff(int argc, char** argv);
int cmd_merge(int argc, char** argv);
int cmd_flamegraph(int argc, char** argv);
int cmd_ranks(int argc, char** argv);
int cmd_replay(int argc, char** argv);
int cmd_report(int argc, char** argv);
int cmd_recover(int argc, char** argv);
int cmd_top(int argc, char** argv);
int cmd_snap(int argc, char** argv);

// <prefix>/bin/memtrace-recover, which `recover` and `run` start.
std::string recover_program(const std::string& prefix);
// Starts the process that recovers the program's state file if it dies (cli/run_watcher.cpp).
void start_run_watcher(const std::string& prefix);

}  // namespace memtrace::cli
