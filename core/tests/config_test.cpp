#include <catch2/catch.hpp>

#include <algorithm>
#include <csignal>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "core/event.hpp"
#include "stderr_capture.hpp"

using namespace memtrace;

namespace {
std::map<std::string, std::string> g_env;
const char* fake_getenv(const char* name) {
  auto it = g_env.find(name);
  return it == g_env.end() ? nullptr : it->second.c_str();
}
}  // namespace

TEST_CASE("defaults when nothing is set") {
  g_env.clear();
  StderrCapture cap;
  Config c = parse_config(&fake_getenv);
  CHECK(cap.text().empty());
  CHECK(c.output == "memtrace-%p.pickle");
  CHECK(c.summary);
  CHECK(c.stacks == StackMode::Native);
  CHECK(c.stack_depth == 64);
  CHECK(c.max_entries == 500000);
  CHECK(c.skip_actions == 0);
  CHECK_FALSE(c.free_stacks);
  CHECK(c.symbolize_threads == 0);
}

TEST_CASE("valid values are taken") {
  g_env = {{"MEMTRACE_OUTPUT", "/tmp/x-%p.pickle"}, {"MEMTRACE_SUMMARY", "0"},
           {"MEMTRACE_STACKS", "NONE"},            {"MEMTRACE_STACK_DEPTH", "32"},
           {"MEMTRACE_MAX_ENTRIES", "1000"},       {"MEMTRACE_SKIP_ACTIONS", "free_requested, oom"},
           {"MEMTRACE_FREE_STACKS", "1"},          {"MEMTRACE_SYMBOLIZE_THREADS", "3"}};
  StderrCapture cap;
  Config c = parse_config(&fake_getenv);
  CHECK(cap.text().empty());
  CHECK(c.output == "/tmp/x-%p.pickle");
  CHECK_FALSE(c.summary);
  CHECK(c.stacks == StackMode::None);
  CHECK(c.stack_depth == 32);
  CHECK(c.max_entries == 1000);
  CHECK(c.free_stacks);
  CHECK(c.symbolize_threads == 3);
  CHECK(c.skip_actions == ((1u << int(Action::FreeRequested)) | (1u << int(Action::Oom))));
}

TEST_CASE("each bad value gets one warning naming the variable and the default") {
  struct Case {
    const char* var;
    const char* value;
    const char* expect;
  };
  Case cases[] = {
      {"MEMTRACE_SUMMARY", "maybe", "MEMTRACE_SUMMARY='maybe'"},
      {"MEMTRACE_STACKS", "python", "using native"},
      {"MEMTRACE_FREE_STACKS", "sometimes", "using 0"},
      {"MEMTRACE_SIGNAL", "SIGFOO", "using USR2"},
      {"MEMTRACE_SIGNAL", "9", "using USR2"},
      {"MEMTRACE_INTERVAL", "soon", "interval dumps stay off"},
      {"MEMTRACE_INTERVAL", "-1", "interval dumps stay off"},
      {"MEMTRACE_DUMP_ON_OOM", "2", "using 1"},
      {"MEMTRACE_RANKS", "0,x", "recording every rank"},
      {"MEMTRACE_STACK_DEPTH", "abc", "using 64"},
      {"MEMTRACE_STACK_DEPTH", "0", "using 64"},
      {"MEMTRACE_STACK_DEPTH", "1000", "using 64"},
      {"MEMTRACE_MAX_ENTRIES", "-5", "using 500000"},
      {"MEMTRACE_SKIP_ACTIONS", "alloc,bogus", "skipping none"},
      {"MEMTRACE_OUTPUT", "", "MEMTRACE_OUTPUT is empty"},
      {"MEMTRACE_PYTHON", "always", "using auto"},
      {"MEMTRACE_SYMBOLIZE_THREADS", "0", "using auto"},
      {"MEMTRACE_SYMBOLIZE_THREADS", "65", "using auto"},
      {"MEMTRACE_SYMBOLIZE_THREADS", "many", "using auto"},
      {"MEMTRACE_DEBUG_CACHE", "cache/here", "using the default"},
  };
  for (const Case& k : cases) {
    g_env = {{k.var, k.value}};
    StderrCapture cap;
    Config c = parse_config(&fake_getenv);
    std::string out = cap.text();
    INFO(k.var << "=" << k.value << " -> " << out);
    CHECK(out.find(k.expect) != std::string::npos);
    CHECK(out.find(k.var) != std::string::npos);
    CHECK(std::count(out.begin(), out.end(), '\n') == 1);
    Config d;
    CHECK(c.stack_depth == d.stack_depth);
    CHECK(c.max_entries == d.max_entries);
    CHECK(c.summary == d.summary);
    CHECK(c.python == d.python);
    CHECK(c.symbolize_threads == d.symbolize_threads);
    CHECK(c.debug_cache == d.debug_cache);
  }
}

TEST_CASE("MEMTRACE_DEBUG_CACHE: off, a folder, or the default") {
  for (auto [value, want] : {std::pair{"off", "off"}, std::pair{"none", "off"}, std::pair{"0", "off"},
                             std::pair{"/var/cache/mt", "/var/cache/mt"}, std::pair{" /x ", "/x"}, std::pair{"", ""}}) {
    g_env = {{"MEMTRACE_DEBUG_CACHE", value}};
    StderrCapture cap;
    Config c = parse_config(&fake_getenv);
    INFO(value);
    CHECK(c.debug_cache == want);
    CHECK(cap.text().empty());
  }
}

TEST_CASE("MEMTRACE_PYTHON: auto, gil, off") {
  for (auto [value, want] : {std::pair{"auto", PythonMode::Auto}, std::pair{"gil", PythonMode::Gil},
                             std::pair{"off", PythonMode::Off}, std::pair{"0", PythonMode::Off}}) {
    g_env = {{"MEMTRACE_PYTHON", value}};
    StderrCapture cap;
    Config c = parse_config(&fake_getenv);
    INFO(value);
    CHECK(cap.text().empty());
    CHECK(c.python == want);
  }
}

TEST_CASE("sizes with suffixes") {
  uint64_t v = 0;
  CHECK(parse_size_bytes("4096", &v));
  CHECK(v == 4096);
  CHECK(parse_size_bytes("16G", &v));
  CHECK(v == 16ull << 30);
  CHECK(parse_size_bytes("1.5K", &v));
  CHECK(v == 1536);
  CHECK(parse_size_bytes("512MiB", &v));
  CHECK(v == 512ull << 20);
  CHECK_FALSE(parse_size_bytes("12Q", &v));
  CHECK_FALSE(parse_size_bytes("", &v));
  CHECK_FALSE(parse_size_bytes("-1", &v));
}

TEST_CASE("segment actions cannot be skipped") {
  g_env = {{"MEMTRACE_SKIP_ACTIONS", "segment_alloc,alloc"}};
  StderrCapture cap;
  Config c = parse_config(&fake_getenv);
  std::string out = cap.text();
  CHECK(out.find("MEMTRACE_SKIP_ACTIONS") != std::string::npos);
  CHECK(std::count(out.begin(), out.end(), '\n') == 1);
  CHECK(c.skip_actions == (1u << int(Action::Alloc)));
}

TEST_CASE("signals by name, number or none") {
  CHECK(parse_signal("USR2") == SIGUSR2);
  CHECK(parse_signal("SIGUSR1") == SIGUSR1);
  CHECK(parse_signal("sigterm") == SIGTERM);
  CHECK(parse_signal("40") == 40);
  CHECK(parse_signal("RTMIN3") == SIGRTMIN + 3);
  CHECK(parse_signal("none") == 0);
  CHECK(parse_signal("KILL") == -1);
  CHECK(parse_signal("9") == -1);  // SIGKILL cannot be caught
  CHECK(parse_signal("") == -1);
  for (const char* fault : {"SEGV", "SIGSEGV", "11", "BUS", "FPE", "8", "ILL", "TRAP", "ABRT", "6", "SIGSYS"})
    CHECK(parse_signal(fault) == -2);
}

TEST_CASE("interval, oom dumps and ranks") {
  g_env = {{"MEMTRACE_INTERVAL", "0.5"}, {"MEMTRACE_DUMP_ON_OOM", "0"}, {"MEMTRACE_RANKS", "0, 3,7"},
           {"MEMTRACE_SIGNAL", "SIGUSR1"}};
  StderrCapture cap;
  Config c = parse_config(&fake_getenv);
  CHECK(cap.text().empty());
  CHECK(c.interval_s == Approx(0.5));
  CHECK_FALSE(c.dump_on_oom);
  CHECK(c.dump_signal == SIGUSR1);
  CHECK(c.rank_list == std::vector<long>{0, 3, 7});
  CHECK(rank_selected(c, 3));
  CHECK_FALSE(rank_selected(c, 1));
  CHECK_FALSE(rank_selected(c, -1));  // no rank variable: not one of the listed ranks
  Config every;
  CHECK(rank_selected(every, -1));
  CHECK(every.dump_signal == SIGUSR2);
  CHECK(every.interval_s == 0);
}

TEST_CASE("rank from the launcher's variables, first set wins") {
  g_env = {{"SLURM_PROCID", "5"}, {"PMI_RANK", "9"}};
  CHECK(launcher_rank(&fake_getenv).number == 5);
  g_env = {{"RANK", "2"}, {"SLURM_PROCID", "5"}};
  CHECK(launcher_rank(&fake_getenv).number == 2);
  g_env = {};
  CHECK(launcher_rank(&fake_getenv).number == -1);
  g_env = {{"RANK", "abc"}};
  CHECK(launcher_rank(&fake_getenv).number == -1);
  CHECK(launcher_rank(&fake_getenv).text == "abc");  // %r puts it in the path all the same
}

TEST_CASE("rank text comes from the first launcher variable that is set") {
  g_env.clear();
  CHECK(launcher_rank(&fake_getenv).text == "");
  g_env["PMI_RANK"] = "9";
  CHECK(launcher_rank(&fake_getenv).text == "9");
  g_env["SLURM_PROCID"] = "8";
  CHECK(launcher_rank(&fake_getenv).text == "8");
  g_env["OMPI_COMM_WORLD_RANK"] = "7";
  CHECK(launcher_rank(&fake_getenv).text == "7");
  g_env["RANK"] = "";  // set but empty: skipped
  CHECK(launcher_rank(&fake_getenv).text == "7");
  CHECK(launcher_rank(&fake_getenv).number == 7);
  g_env["RANK"] = "0";
  CHECK(launcher_rank(&fake_getenv).text == "0");
  CHECK(launcher_rank(&fake_getenv).number == 0);
}

TEST_CASE("MEMTRACE_SYMBOLIZE_THREADS: a count or auto") {
  for (auto [value, want] : {std::pair{"auto", 0u}, std::pair{"1", 1u}, std::pair{" 8 ", 8u}, std::pair{"64", 64u}}) {
    g_env = {{"MEMTRACE_SYMBOLIZE_THREADS", value}};
    StderrCapture cap;
    Config c = parse_config(&fake_getenv);
    INFO(value);
    CHECK(cap.text().empty());
    CHECK(c.symbolize_threads == want);
  }
}

TEST_CASE("the log level: MEMTRACE_LOG_LEVEL first, MEMTRACE_DEBUG=1 as debug, else info") {
  struct Row {
    const char* level;
    const char* debug;
    log::Level want;
    bool bad;
  };
  const Row rows[] = {{nullptr, nullptr, log::Level::info, false}, {nullptr, "1", log::Level::debug, false},
                      {nullptr, "0", log::Level::info, false},     {"warn", "1", log::Level::warn, false},
                      {"off", nullptr, log::Level::off, false},    {"TRACE", nullptr, log::Level::trace, false},
                      {"loud", nullptr, log::Level::info, true},   {"loud", "yes", log::Level::debug, true}};
  for (const Row& r : rows) {
    g_env.clear();
    if (r.level) g_env["MEMTRACE_LOG_LEVEL"] = r.level;
    if (r.debug) g_env["MEMTRACE_DEBUG"] = r.debug;
    INFO((r.level ? r.level : "(unset)") << " / MEMTRACE_DEBUG=" << (r.debug ? r.debug : "(unset)"));
    bool bad = !r.bad;
    CHECK(log_level_setting(&fake_getenv, &bad) == r.want);
    CHECK(bad == r.bad);
    StderrCapture cap;
    Config c = parse_config(&fake_getenv);
    const std::string out = cap.text();
    CHECK(c.log_level == r.want);
    if (r.bad)
      CHECK(out == std::string("memtrace: warning: MEMTRACE_LOG_LEVEL='loud' is not trace, debug, info, warn, error "
                               "or off; using ") + log::level_name(r.want) + "\n");
    else
      CHECK(out.empty());
  }
}

namespace {

// One MEMTRACE_* variable: a value that is taken and what it gives, a value that is not and the
// words of its warning; the documented default (README, "Configuration") is checked after the bad
// value.
struct VariableCase {
  const char* var;
  const char* good;
  std::function<bool(const Config&)> took_good;
  const char* bad;  // null: every value is taken as it is
  const char* warning;
  std::function<bool(const Config&)> is_default;
};

const std::vector<VariableCase>& variable_cases() {
  static const std::vector<VariableCase> cases = {
      {"MEMTRACE_OUTPUT", "/tmp/x-%p-%r.pickle", [](const Config& c) { return c.output == "/tmp/x-%p-%r.pickle"; },
       "", "MEMTRACE_OUTPUT is empty; using memtrace-%p.pickle",
       [](const Config& c) { return c.output == "memtrace-%p.pickle"; }},
      {"MEMTRACE_SUMMARY", "0", [](const Config& c) { return !c.summary; }, "maybe", "using 1",
       [](const Config& c) { return c.summary; }},
      {"MEMTRACE_REPORT", "1", [](const Config& c) { return c.report; }, "maybe", "using 0",
       [](const Config& c) { return !c.report; }},
      {"MEMTRACE_STACKS", "none", [](const Config& c) { return c.stacks == StackMode::None; }, "python",
       "using native", [](const Config& c) { return c.stacks == StackMode::Native; }},
      {"MEMTRACE_MAX_STACKS", "64", [](const Config& c) { return c.max_stacks == 64; }, "63", "using 1048576",
       [](const Config& c) { return c.max_stacks == 1048576; }},
      {"MEMTRACE_STACK_DEPTH", "256", [](const Config& c) { return c.stack_depth == 256; }, "257", "using 64",
       [](const Config& c) { return c.stack_depth == 64; }},
      {"MEMTRACE_MAX_ENTRIES", "0", [](const Config& c) { return c.max_entries == 0; }, "lots", "using 500000",
       [](const Config& c) { return c.max_entries == 500000; }},
      {"MEMTRACE_SKIP_ACTIONS", "alloc",
       [](const Config& c) { return c.skip_actions == (1u << static_cast<int>(Action::Alloc)); }, "alloc,bogus",
       "skipping none", [](const Config& c) { return c.skip_actions == 0; }},
      {"MEMTRACE_FREE_STACKS", "yes", [](const Config& c) { return c.free_stacks; }, "sometimes", "using 0",
       [](const Config& c) { return !c.free_stacks; }},
      {"MEMTRACE_RANGE_HISTORY", "0", [](const Config& c) { return c.range_history == 0; }, "-1", "using 65536",
       [](const Config& c) { return c.range_history == 65536; }},
      {"MEMTRACE_NVTX", "0", [](const Config& c) { return !c.nvtx; }, "perhaps", "using 1",
       [](const Config& c) { return c.nvtx; }},
      {"MEMTRACE_PYTHON", "gil", [](const Config& c) { return c.python == PythonMode::Gil; }, "always",
       "using auto", [](const Config& c) { return c.python == PythonMode::Auto; }},
      {"MEMTRACE_SYMBOLIZE_THREADS", "2", [](const Config& c) { return c.symbolize_threads == 2; }, "many",
       "using auto", [](const Config& c) { return c.symbolize_threads == 0; }},
      {"MEMTRACE_SIGNAL", "TERM", [](const Config& c) { return c.dump_signal == SIGTERM; }, "SIGFOO",
       "using USR2", [](const Config& c) { return c.dump_signal == SIGUSR2; }},
      {"MEMTRACE_INTERVAL", "2.5", [](const Config& c) { return c.interval_s == 2.5; }, "soon",
       "interval dumps stay off", [](const Config& c) { return c.interval_s == 0; }},
      {"MEMTRACE_INTERVAL_KEEP", "0", [](const Config& c) { return c.interval_keep == 0; }, "-1",
       "keeping the last 10", [](const Config& c) { return c.interval_keep == 10; }},
      {"MEMTRACE_DUMP_ON_OOM", "off", [](const Config& c) { return !c.dump_on_oom; }, "2", "using 1",
       [](const Config& c) { return c.dump_on_oom; }},
      {"MEMTRACE_RANKS", "1,2", [](const Config& c) { return c.rank_list == std::vector<long>{1, 2}; }, "one",
       "recording every rank", [](const Config& c) { return c.rank_list.empty() && c.ranks.empty(); }},
      {"MEMTRACE_ALLOCATOR", "caching", [](const Config& c) { return c.allocator == AllocatorMode::Caching; },
       "pool", "using passthrough", [](const Config& c) { return c.allocator == AllocatorMode::Passthrough; }},
      {"MEMTRACE_DEBUG", "1", [](const Config& c) { return c.debug; }, "verbose", "using 0",
       [](const Config& c) { return !c.debug; }},
      {"MEMTRACE_LOG_LEVEL", "warn", [](const Config& c) { return c.log_level == log::Level::warn; }, "loud",
       "using info", [](const Config& c) { return c.log_level == log::Level::info; }},
      // Kept as text: the state file's folder is checked when the file is made (state/state_file.cpp).
      {"MEMTRACE_STATE_DIR", "/tmp/somewhere", [](const Config& c) { return c.state_dir == "/tmp/somewhere"; },
       nullptr, nullptr, [](const Config& c) { return c.state_dir.empty(); }},
      // The debug-file cache's folder (unwind/debug_cache.hpp): absolute, or off.
      {"MEMTRACE_DEBUG_CACHE", "/var/tmp/mt-debug", [](const Config& c) { return c.debug_cache == "/var/tmp/mt-debug"; },
       "relative/folder", "is not an absolute folder or 'off'; using the default",
       [](const Config& c) { return c.debug_cache.empty(); }},
      // Kept as text: the session parses it (preload/allocator_settings.cpp), and warns there.
      {"MEMTRACE_ALLOC_CONF", "expandable_segments:True,bogus:1",
       [](const Config& c) { return c.alloc_conf == "expandable_segments:True,bogus:1"; }, nullptr, nullptr,
       [](const Config& c) { return c.alloc_conf.empty(); }},
  };
  return cases;
}

}  // namespace

TEST_CASE("every variable parse_config reads is covered below") {
  std::ifstream in(MEMTRACE_CONFIG_SOURCE);
  REQUIRE(in);
  std::stringstream text;
  text << in.rdbuf();
  const std::string source = text.str();
  std::set<std::string> read, covered;
  const std::regex lookup(R"re(getenv_fn\("(MEMTRACE_[A-Z_]+)"\))re");
  for (auto it = std::sregex_iterator(source.begin(), source.end(), lookup); it != std::sregex_iterator(); ++it)
    read.insert((*it)[1].str());
  for (const VariableCase& k : variable_cases()) covered.insert(k.var);
  CHECK(read.size() >= 18);
  CHECK(read == covered);
}

TEST_CASE("every variable: a good value is taken silently, a bad one warns once and keeps the default") {
  for (const VariableCase& k : variable_cases()) {
    {
      g_env = {{k.var, k.good}};
      StderrCapture cap;
      Config c = parse_config(&fake_getenv);
      INFO(k.var << "=" << k.good);
      CHECK(cap.text().empty());
      CHECK(k.took_good(c));
    }
    {
      g_env = {};
      Config c = parse_config(&fake_getenv);
      INFO(k.var << " unset");
      CHECK(k.is_default(c));
    }
    if (!k.bad) continue;
    g_env = {{k.var, k.bad}};
    StderrCapture cap;
    Config c = parse_config(&fake_getenv);
    const std::string out = cap.text();
    INFO(k.var << "=" << k.bad << " -> " << out);
    CHECK(std::count(out.begin(), out.end(), '\n') == 1);
    CHECK(out.find("memtrace: warning: ") == 0);
    CHECK(out.find(k.var) != std::string::npos);
    CHECK(out.find(k.warning) != std::string::npos);
    CHECK(k.is_default(c));
  }
}
