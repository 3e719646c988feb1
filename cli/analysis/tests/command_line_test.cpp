#include "cli/analysis/command_line.hpp"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

using namespace memtrace::analysis;

namespace {

constexpr const char* kOwn[] = {"--alloc-conf", "--capacity"};
const CommandSpec kSpec{"replay", "usage: memtrace replay SNAPSHOT\n", 1, 1, false, false, false, false, kOwn};

std::optional<CommandLine> parse(std::vector<std::string> words) {
  words.insert(words.begin(), "replay");
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  return parse_command_line(static_cast<int>(argv.size()), argv.data(), kSpec);
}

}  // namespace

TEST_CASE("a command's own value options, in both spellings and in order") {
  auto cl = parse({"snap.pickle", "--alloc-conf", "", "--capacity=80GiB", "--alloc-conf=expandable_segments:True",
                   "--json", "--device", "1"});
  REQUIRE(cl);
  CHECK(cl->args == std::vector<std::string>{"snap.pickle"});
  CHECK(cl->values_of("--alloc-conf") == std::vector<std::string>{"", "expandable_segments:True"});
  CHECK(cl->values_of("--capacity") == std::vector<std::string>{"80GiB"});
  CHECK(cl->values_of("--nothing").empty());
  CHECK(cl->json);
  CHECK(cl->device == 1);
}

TEST_CASE("a value option without its value, or an option of another command, is a usage error") {
  CHECK_FALSE(parse({"snap.pickle", "--capacity"}));
  CHECK_FALSE(parse({"snap.pickle", "--capacityX=1"}));
  CHECK_FALSE(parse({"snap.pickle", "--top", "3"}));  // not a replay option
  CHECK_FALSE(parse({"a.pickle", "b.pickle"}));
  auto help = parse({"--help"});
  REQUIRE(help);
  CHECK(help->help);
}
