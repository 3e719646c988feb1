#include "cli/analysis/command_line.hpp"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "cli/reader/consistency.hpp"

namespace memtrace::analysis {

namespace {

bool parse_count(const char* s, long long lo, long long hi, long long* out) {
  if (!s || !*s) return false;
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(s, &end, 10);
  if (errno || *end || v < lo || v > hi) return false;
  *out = v;
  return true;
}

}  // namespace

void print_usage_error(const CommandSpec& spec, const std::string& problem) {
  std::fprintf(stderr, "memtrace %s: %s\nTry 'memtrace %s --help' for its options.\n", spec.name, problem.c_str(),
               spec.name);
}

std::vector<std::string> CommandLine::values_of(std::string_view option) const {
  std::vector<std::string> out;
  for (const auto& [name, value] : values)
    if (name == option) out.push_back(value);
  return out;
}

namespace {

bool has_device(const reader::Snapshot& s, int d) {
  if (d >= 0 && d < static_cast<int>(s.device_traces.size())) return true;
  for (const reader::Segment& seg : s.segments)
    if (seg.device == d) return true;
  return false;
}

// "it has devices 0 and 1", "it has device 0", "it has no device".
std::string devices_text(const reader::Snapshot& s) {
  std::vector<int> have;
  for (int d = 0; d < s.device_count(); ++d)
    if (has_device(s, d)) have.push_back(d);
  if (have.empty()) return "it has no device";
  std::string out = have.size() == 1 ? "it has device " : "it has devices ";
  for (size_t i = 0; i < have.size(); ++i) {
    if (i) out += i + 1 == have.size() ? " and " : ", ";
    out += std::to_string(have[i]);
  }
  return out;
}

}  // namespace

std::optional<CommandLine> parse_command_line(int argc, char** argv, const CommandSpec& spec) {
  CommandLine cl;
  auto bad = [&](const std::string& msg) -> std::optional<CommandLine> {
    print_usage_error(spec, msg);
    return std::nullopt;
  };
  auto own_option = [&](std::string_view a) -> const char* {
    for (const char* name : spec.value_options) {
      std::string_view n = name;
      if (a == n || (a.size() > n.size() && a.substr(0, n.size()) == n && a[n.size()] == '=')) return name;
    }
    return nullptr;
  };
  bool only_args = false;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    auto value = [&](std::string_view opt) -> const char* {
      if (a.size() > opt.size() && a.substr(0, opt.size()) == opt && a[opt.size()] == '=') return argv[i] + opt.size() + 1;
      if (i + 1 < argc) return argv[++i];
      return nullptr;
    };
    auto is = [&](std::string_view opt) { return a == opt || (a.size() > opt.size() && a.substr(0, opt.size() + 1) == std::string(opt) + "="); };
    if (only_args || a.empty() || a[0] != '-' || a == "-") {
      cl.args.emplace_back(a);
    } else if (a == "--") {
      only_args = true;
    } else if (a == "-h" || a == "--help") {
      std::fputs(spec.help, stdout);
      cl.help = true;
      return cl;
    } else if (a == "--json") {
      cl.json = true;
    } else if (a == "--lenient") {
      cl.lenient = true;
    } else if (is("--device")) {
      long long d = 0;
      const char* v = value("--device");
      if (!parse_count(v, 0, 1023, &d)) return bad("--device needs a device index (0-1023)");
      cl.device = static_cast<int>(d);
    } else if (spec.takes_at && is("--at")) {
      const char* v = value("--at");
      std::string_view w = v ? v : "";
      if (w == "peak") cl.at = Moment::kPeak;
      else if (w == "end") cl.at = Moment::kEnd;
      else return bad("--at takes 'peak' or 'end'");
    } else if (spec.takes_output && (a == "-o" || is("--output"))) {
      const char* v = a == "-o" ? (i + 1 < argc ? argv[++i] : nullptr) : value("--output");
      if (!v || !*v) return bad("-o needs a file name");
      cl.output = v;
    } else if (is("--frames")) {
      const char* v = value("--frames");
      std::string_view w = v ? v : "";
      if (w == "all") cl.frames = FrameMode::kAll;
      else if (w == "short") cl.frames = FrameMode::kShort;
      else return bad("--frames takes 'short' or 'all'");
    } else if (spec.takes_by && is("--by")) {
      const char* v = value("--by");
      std::string_view w = v ? v : "";
      if (w == "owner") cl.by = GroupBy::kOwner;
      else if (w == "stack") cl.by = GroupBy::kStack;
      else if (w == "range") cl.by = GroupBy::kRange;
      else return bad("--by takes 'owner', 'stack' or 'range'");
    } else if (spec.takes_top && is("--top")) {
      long long n = 0;
      if (!parse_count(value("--top"), 0, 1LL << 40, &n)) return bad("--top needs a count (0 = all)");
      cl.top = static_cast<size_t>(n);
    } else if (const char* name = own_option(a)) {
      const char* v = value(name);
      if (!v) return bad(std::string(name) + " needs a value");
      cl.values.emplace_back(name, v);
    } else {
      return bad("unknown option '" + std::string(a) + "'");
    }
  }
  int n = static_cast<int>(cl.args.size());
  if (n < spec.min_args || n > spec.max_args) {
    if (spec.min_args == spec.max_args)
      return bad(spec.min_args == 1 ? "expects one file" : "expects " + std::to_string(spec.min_args) + " files");
    return bad("wrong number of arguments");
  }
  if (spec.output_required && cl.output.empty()) return bad("-o OUT is required");
  return cl;
}

std::optional<reader::Snapshot> load_for_command(const std::string& path, const CommandSpec& spec, bool lenient,
                                                 std::optional<int> device) {
  reader::LoadResult r = reader::load_snapshot(path);
  if (!r.snapshot) {
    std::fprintf(stderr, "memtrace %s: %s\n", spec.name,
                 r.error ? r.error->message.c_str() : (path + ": cannot be read").c_str());
    return std::nullopt;
  }
  // Strict by default: a figure computed from an impossible file would be read as a fact.
  constexpr size_t kShown = 20;
  size_t total = 0;
  std::vector<reader::Inconsistency> found = reader::find_inconsistencies(*r.snapshot, lenient ? kShown : 1, &total);
  if (!found.empty() && !lenient) {
    std::fprintf(stderr, "memtrace %s: %s: inconsistent snapshot: %s%s (--lenient reads it anyway)\n", spec.name,
                 path.c_str(), found[0].what.c_str(),
                 total > 1 ? (" (and " + std::to_string(total - 1) + " more)").c_str() : "");
    return std::nullopt;
  }
  for (const reader::Inconsistency& i : found)
    std::fprintf(stderr, "memtrace %s: warning: %s: %s\n", spec.name, path.c_str(), i.what.c_str());
  if (total > found.size())
    std::fprintf(stderr, "memtrace %s: warning: %s: %zu more inconsistencies not shown\n", spec.name, path.c_str(),
                 total - found.size());
  if (device && !has_device(*r.snapshot, *device)) {
    std::fprintf(stderr, "memtrace %s: %s: no device %d in this file (%s)\n", spec.name, path.c_str(), *device,
                 devices_text(*r.snapshot).c_str());
    return std::nullopt;
  }
  return std::move(*r.snapshot);
}

std::vector<int> devices_to_report(const reader::Snapshot& s, const std::optional<int>& only) {
  if (only) return {*only};
  int n = device_count(s);
  std::vector<bool> used(static_cast<size_t>(n), false);
  for (int d = 0; d < static_cast<int>(s.device_traces.size()); ++d)
    if (!s.device_traces[d].empty()) used[d] = true;
  for (const auto& seg : s.segments)
    if (seg.device >= 0) used[seg.device] = true;
  std::vector<int> out;
  for (int d = 0; d < n; ++d)
    if (used[d]) out.push_back(d);
  if (out.empty()) out.push_back(0);
  return out;
}

}  // namespace memtrace::analysis
