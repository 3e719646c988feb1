#include "cli/commands.hpp"

namespace memtrace::cli {

namespace {

constexpr Command kCommands[] = {
    {"run", "run a program with memtrace preloaded and write a memory snapshot", &cmd_run},
    {"summary", "per device: current and peak memory, owners, largest stacks, fragmentation", &cmd_summary},
    {"peak", "the allocations live at the moment of peak usage, grouped by stack", &cmd_peak},
    {"leaks", "what is still allocated at the end, grouped by stack and owner", &cmd_leaks},
    {"diff", "growth and shrinkage between two snapshots, by stack and by owner", &cmd_diff},
    {"merge", "merge a PyTorch snapshot and a memtrace snapshot into one file the viewer opens", &cmd_merge},
    {"flamegraph", "folded stacks weighted by bytes (flamegraph.pl, speedscope, inferno)", &cmd_flamegraph},
    {"ranks", "one line per rank's snapshot in a directory, outliers highlighted", &cmd_ranks},
    {"replay", "replay a snapshot's allocations under other caching-allocator settings", &cmd_replay},
    {"recover", "the snapshot of a killed or crashed process, from its state file", &cmd_recover},
    {"top", "what the running processes under memtrace hold now, refreshed each second", &cmd_top},
    {"snap", "ask a running process for a snapshot now and print its path when complete", &cmd_snap},
    {"report", "one self-contained HTML page: memory over time, live sets, leaks, segments", &cmd_report},
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
               "       memtrace help <command> | --help | version\n"
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
