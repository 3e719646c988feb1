#include "cli/analysis/rank_table.hpp"

#include <algorithm>
#include <catch2/catch.hpp>

using namespace memtrace::analysis;

TEST_CASE("rank from a file name") {
  CHECK(rank_from_filename("dir/snap-rank3.pickle") == "3");
  CHECK(rank_from_filename("RANK_12_memory.pkl") == "12");
  CHECK(rank_from_filename("rank=7.pickle") == "7");
  CHECK(rank_from_filename("/x/rank2/../5.pickle") == "5");
  CHECK(rank_from_filename("memtrace-4242.pickle") == "");  // a pid, not a rank
  CHECK(rank_from_filename("ranking.pickle") == "");
}

TEST_CASE("outliers: beyond 20% of the median and 3 scaled MADs, high and low") {
  auto v = find_outliers({100, 101, 99, 100, 150, 60});
  CHECK(v.median == 100);
  CHECK(v.flag == std::vector<int>{0, 0, 0, 0, 1, -1});
  // a wide even spread has no outlier
  CHECK(find_outliers({100, 150, 200, 250, 300}).flag == std::vector<int>{0, 0, 0, 0, 0});
  // identical ranks and one 25% higher: MAD is 0, so the 20% rule decides
  CHECK(find_outliers({100, 100, 100, 125}).flag == std::vector<int>{0, 0, 0, 1});
  // a 10% difference never counts
  CHECK(find_outliers({100, 100, 100, 110}).flag == std::vector<int>{0, 0, 0, 0});
  // two ranks: nothing to compare with
  CHECK(find_outliers({100, 1000}).flag == std::vector<int>{0, 0});
}

TEST_CASE("rank labels sort numerically, then as text, unknown last") {
  std::vector<std::string> r = {"", "10", "b", "2", "a", "02"};
  std::sort(r.begin(), r.end(), rank_less);
  CHECK(r == std::vector<std::string>{"02", "2", "10", "a", "b", ""});
}
