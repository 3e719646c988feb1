#include <catch2/catch.hpp>

#include <csignal>
#include <map>
#include <vector>
#include <string>

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
  CHECK(process_rank(&fake_getenv) == 5);
  g_env = {{"RANK", "2"}, {"SLURM_PROCID", "5"}};
  CHECK(process_rank(&fake_getenv) == 2);
  g_env = {};
  CHECK(process_rank(&fake_getenv) == -1);
  g_env = {{"RANK", "abc"}};
  CHECK(process_rank(&fake_getenv) == -1);
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
