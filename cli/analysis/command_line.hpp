// The options every analysis command shares (--json, --device N, --help, --lenient, --at, -o, --top,
// --by),
// a command's own options that take a value (replay's --capacity), and the two ways such a command
// fails before it starts: bad usage and a file that does not load (both exit status 2, one line on
// stderr).
#pragma once
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cli/analysis/device_history.hpp"
#include "cli/analysis/grouping.hpp"
#include "cli/analysis/stack_view.hpp"
#include "cli/reader/snapshot.hpp"

namespace memtrace::analysis {

constexpr int kExitBadInput = 2;  // bad usage or a file that does not load

struct CommandSpec {
  const char* name;   // "summary"
  const char* help;   // printed for --help (stdout) and after a usage error (stderr)
  int min_args = 1;
  int max_args = 1;
  bool takes_at = false;      // --at peak|end
  bool takes_output = false;  // -o FILE
  bool output_required = false;
  bool takes_top = false;     // --top N
  // The command's own options that take a value ("--capacity"), as "--name VALUE" or
  // "--name=VALUE", each as often as it is given; the command checks the values.
  std::span<const char* const> value_options = {};
  bool takes_by = false;      // --by owner|stack|range
};

struct CommandLine {
  bool help = false;
  bool json = false;
  bool lenient = false;  // --lenient: read an inconsistent file, naming each inconsistency on stderr
  std::optional<int> device;
  Moment at = Moment::kEnd;
  std::string output;
  std::optional<size_t> top;
  FrameMode frames = FrameMode::kShort;  // --frames short|all (docs/reports.md, "Readable stacks")
  // --by owner|stack|range: the one grouping to report (kOwner, kStack or kRange); unset: the
  // command's own default set of groupings.
  std::optional<GroupBy> by;
  std::vector<std::string> args;
  std::vector<std::pair<std::string, std::string>> values;  // (option, value) of value_options, in order

  // The values given to one of value_options, in order.
  std::vector<std::string> values_of(std::string_view option) const;
};

// argv[0] is the command's name. Returns nullopt after printing "memtrace NAME: problem" and a hint
// to stderr; sets help (after printing it to stdout) for -h/--help.
std::optional<CommandLine> parse_command_line(int argc, char** argv, const CommandSpec& spec);

// Prints "memtrace NAME: problem" and a one-line hint to stderr, as parse_command_line does: for
// the command's own checks of its values. The whole help would push the problem off the screen.
void print_usage_error(const CommandSpec& spec, const std::string& problem);

// Loads a snapshot or prints "memtrace NAME: <the reader's error line>" to stderr. A file that
// loads but is inconsistent (reader/consistency.hpp) is refused the same way, naming the first
// inconsistency, unless `lenient`: then each is a warning on stderr and the file is used.
// A `device` the file does not have (no trace list and no segment for it) is refused the same way:
// a figure for it would be a row of zeros.
std::optional<reader::Snapshot> load_for_command(const std::string& path, const CommandSpec& spec, bool lenient,
                                                 std::optional<int> device = std::nullopt);

// The devices a command reports: --device N alone, else every device with a segment or an entry
// (device 0 when the file has none).
std::vector<int> devices_to_report(const reader::Snapshot& s, const std::optional<int>& only);

}  // namespace memtrace::analysis
