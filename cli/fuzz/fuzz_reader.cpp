// libFuzzer target: any bytes through load_snapshot_bytes must give a Snapshot or a LoadError,
// never a crash, a hang, an exception or unbounded memory. Built by build_and_run.sh with
// -fsanitize=fuzzer,address,undefined; replay_main.cpp drives the same function over the corpus
// as the ctest reader_corpus.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "cli/reader/consistency.hpp"
#include "cli/reader/snapshot.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string name = "fuzz.pickle";
  memtrace::reader::LoadResult r =
      memtrace::reader::load_snapshot_bytes(std::string_view(reinterpret_cast<const char*>(data), size), name);
  // Exactly one of the two, and a decoded snapshot must be internally consistent.
  if (r.snapshot.has_value() == r.error.has_value()) std::abort();
  if (r.error) {
    if (r.error->message.rfind(name + ": ", 0) != 0 || r.error->message.find('\n') != std::string::npos) std::abort();
    return 0;
  }
  const memtrace::reader::Snapshot& s = *r.snapshot;
  if (s.strings.empty() || !s.strings[0].empty() || s.stacks.empty() || !s.stacks[0].empty()) std::abort();
  auto stack_ok = [&](uint32_t id) {
    if (id >= s.stacks.size()) return false;
    for (uint32_t f : s.stacks[id])
      if (f >= s.frames.size()) return false;
    return true;
  };
  for (const auto& f : s.frames)
    if (f.filename >= s.strings.size() || f.name >= s.strings.size()) std::abort();
  for (const auto& list : s.device_traces)
    for (const auto& e : list)
      if (!stack_ok(e.stack) || e.action_str >= s.strings.size() || e.category >= s.strings.size()) std::abort();
  for (const auto& seg : s.segments) {
    if (!stack_ok(seg.stack) || seg.segment_type >= s.strings.size()) std::abort();
    for (const auto& b : seg.blocks)
      if (!stack_ok(b.stack)) std::abort();
  }
  if (s.device_count() < static_cast<int>(s.device_traces.size())) std::abort();
  // The commands' consistency check runs on every decoded file: bounded, and its count agrees.
  size_t total = 0;
  auto found = memtrace::reader::find_inconsistencies(s, 3, &total);
  if (found.size() > 3 || found.size() != std::min<size_t>(total, 3)) std::abort();
  for (const auto& i : found)
    if (i.what.empty() || i.what.find('\n') != std::string::npos) std::abort();
  return 0;
}
