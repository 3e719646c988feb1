// The report's model against the analyses the text commands print, on every committed snapshot:
// memtrace's own from the simulated device (one truncated), PyTorch-shaped ones (frees without
// their alloc, blocks older than the history, an out-of-memory, pinned host memory, two devices).
#include <catch2/catch.hpp>

#include <numeric>
#include <string>

#include "cli/analysis/command_line.hpp"
#include "cli/analysis/device_history.hpp"
#include "cli/analysis/oom.hpp"
#include "cli/report/report_model.hpp"

using namespace memtrace;

namespace {

reader::Snapshot load(const std::string& name) {
  reader::LoadResult r = reader::load_snapshot(std::string(MEMTRACE_TEST_DATA) + "/" + name);
  REQUIRE(r.snapshot);
  return std::move(*r.snapshot);
}

uint64_t sum_live(const report::NodeBytes& nb) {
  uint64_t t = 0;
  for (const auto& [node, bytes] : nb) t += bytes;
  return t;
}

const char* const kFiles[] = {"mt_leak.pickle", "mt_python.pickle", "mt_nccl.pickle",        "mt_loop_truncated.pickle",
                              "memtrace_step.pickle",  "torch_step_p2.pickle",  "torch_later_p5.pickle",
                              "torch_oom_p4.pickle",   "torch_pinned_p4.pickle"};

}  // namespace

TEST_CASE("every device's peak, end and OOM figures are the ones the text reports print") {
  for (const char* name : kFiles) {
    INFO(name);
    reader::Snapshot s = load(name);
    const bool host = analysis::has_host_memory(s);
    report::Model m = report::build_model(s, name, analysis::devices_to_report(s, std::nullopt), host);
    for (const report::DeviceModel& d : m.devices) {
      INFO("device " << d.device);
      analysis::DeviceHistory h = d.device == analysis::kHostDevice ? analysis::analyze_host(s)
                                                                    : analysis::analyze_device(s, d.device);
      const report::Moment& peak = d.moments[d.peak_moment];
      CHECK(peak.entry == h.peak_index);
      CHECK(peak.allocated == h.peak_allocated);
      const report::Moment& end = d.moments.back();
      CHECK(end.allocated == std::accumulate(h.live_at_end.begin(), h.live_at_end.end(), uint64_t{0},
                                             [](uint64_t a, const analysis::LiveAlloc& l) { return a + l.bytes; }));
      CHECK(end.count == h.live_at_end.size());
      CHECK(end.reserved == h.reserved_now);
      // No moment and no series point above the peaks.
      uint64_t series_alloc = 0, series_reserved = 0;
      for (const report::SeriesLevel& l : d.series) {
        for (uint64_t v : l.allocated) series_alloc = std::max(series_alloc, v);
        for (uint64_t v : l.reserved) series_reserved = std::max(series_reserved, v);
        CHECK(*std::max_element(l.allocated.begin(), l.allocated.end()) == h.peak_allocated);
        CHECK(std::is_sorted(l.t.begin(), l.t.end()));
        // By owner and by stack group, the points stack to the total exactly.
        CHECK(l.by_owner.empty() == l.by_stack.empty());
        for (size_t p = 0; p < l.t.size() && !l.by_owner.empty(); ++p) {
          uint64_t sum = 0, by_stack = 0;
          for (const auto& o : l.by_owner) sum += o[p];
          for (const auto& g : l.by_stack) by_stack += g[p];
          CHECK(sum == l.allocated[p]);
          CHECK(by_stack == l.allocated[p]);
        }
      }
      // The stack groups are the largest stacks at the peak, largest first.
      CHECK(d.top_stacks.size() <= 8);
      {
        const report::Moment& pk = d.moments[d.peak_moment];
        for (size_t g = 0; g + 1 < pk.by_stack.size(); ++g) {
          if (g > 0) CHECK(pk.by_stack[g - 1] >= pk.by_stack[g]);
        }
      }
      CHECK(series_alloc == h.peak_allocated);
      CHECK(series_reserved == h.peak_reserved);
      if (d.device != analysis::kHostDevice) {
        std::vector<analysis::OomReport> ooms = analysis::find_ooms(s, d.device);
        REQUIRE(d.layouts.size() == 1 + ooms.size());
        for (size_t k = 0; k < ooms.size(); ++k) {
          CHECK(d.layouts[k + 1].layout.reserved == ooms[k].reserved);
          CHECK(d.layouts[k + 1].layout.largest_free == ooms[k].largest_free);
          CHECK(d.layouts[k + 1].verdict);
        }
      }
    }
  }
}

TEST_CASE("each moment's live set adds up to its total on both trees, and the owners do too") {
  for (const char* name : kFiles) {
    INFO(name);
    reader::Snapshot s = load(name);
    report::Model m = report::build_model(s, name, analysis::devices_to_report(s, std::nullopt), true);
    for (const report::DeviceModel& d : m.devices) {
      REQUIRE(!d.moments.empty());
      for (const report::Moment& mo : d.moments) {
        CHECK(sum_live(mo.live[report::kShortTree]) == mo.allocated);
        CHECK(sum_live(mo.live[report::kAllTree]) == mo.allocated);
        CHECK(std::accumulate(mo.by_owner.begin(), mo.by_owner.end(), uint64_t{0}) == mo.allocated);
        CHECK(std::accumulate(mo.by_stack.begin(), mo.by_stack.end(), uint64_t{0}) == mo.allocated);
        CHECK(mo.top.size() <= 10);
        CHECK(std::is_sorted(mo.top.begin(), mo.top.end(),
                             [](const report::LiveItem& a, const report::LiveItem& b) { return a.bytes > b.bytes; }));
        for (const auto& [node, bytes] : mo.live[report::kAllTree]) CHECK(m.trees->kept(report::kAllTree, node));
        for (const report::LiveItem& it : mo.top) CHECK(m.trees->kept(report::kShortTree, m.trees->leaf(it.stack, report::kShortTree)));
      }
      for (size_t k = 1; k < d.moments.size(); ++k) CHECK(d.moments[k - 1].entry < d.moments[k].entry);
    }
  }
}

TEST_CASE("the moments are bounded, and always hold the peak, each OOM and the end") {
  reader::Snapshot s = load("torch_oom_p4.pickle");
  report::Limits lim;
  lim.moments = 2;
  report::Model m = report::build_model(s, "x", {0}, false, lim);
  const report::DeviceModel& d = m.devices.at(0);
  std::vector<std::string> labels;
  for (const report::Moment& mo : d.moments) labels.push_back(mo.label);
  CHECK(d.moments.size() <= 2 + 3);
  CHECK(d.moments[d.peak_moment].label == "peak");
  CHECK(labels.back() == "oom + end");
}

TEST_CASE("a stack too small for its own node leaves its bytes on its deepest ancestor that is large enough") {
  reader::Snapshot s = load("torch_step_p2.pickle");
  report::Limits lim;
  lim.keep_fraction = 0.5;  // only what holds half of a moment has a node of its own
  report::Model m = report::build_model(s, "x", {0}, false, lim);
  const report::Moment& end = m.devices.at(0).moments.back();
  CHECK(sum_live(end.live[report::kAllTree]) == end.allocated);
  // The 400-byte embedding: its path is kept (it is among the largest allocations listed), but its
  // bytes sit on a "(smaller stacks)" child of an ancestor, the step that also holds the 8 MB
  // forward activation.
  const report::LiveItem* embed = nullptr;
  for (const report::LiveItem& it : end.top)
    if (it.bytes == 400) embed = &it;
  REQUIRE(embed);
  const uint32_t leaf = m.trees->leaf(embed->stack, report::kAllTree);
  const report::StackTree& tree = m.trees->tree(report::kAllTree);
  const auto& parent = tree.parent();
  bool on_leaf = false, on_ancestor = false;
  for (const auto& [node, bytes] : end.live[report::kAllTree]) {
    on_leaf = on_leaf || node == leaf;
    if (bytes != 400 || tree.name()[node] != report::StackTree::kSmaller) continue;
    for (int64_t a = parent[leaf]; a > 0; a = parent[a]) on_ancestor = on_ancestor || parent[node] == a;
  }
  CHECK_FALSE(on_leaf);
  CHECK(on_ancestor);
}
