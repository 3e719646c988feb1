// memtrace replay: replays the alloc/free history of a snapshot (memtrace's or PyTorch's) through
// memtrace's caching allocator over an offline device (addresses only, no memory, a capacity), once
// per allocator configuration, and reports what each would have reserved, wasted and asked the
// driver for, and whether it runs out of memory.
//
// What is replayed, from one device's trace: `alloc` (size = requested bytes) and one free per
// block (its `free_completed`, when that follows the `free_requested`, since that is when PyTorch
// puts the block back in the pool), and `oom` entries as a request that failed in the recording
// (attempted again; freed at once if it succeeds here, since the program never got it), and the
// program's torch.cuda.empty_cache() calls (below). Where the history was cut (a ring that wrapped,
// memtrace's entries_dropped), the blocks alive before the first kept entry are pre-allocated, in
// address order, when they can be inferred: a free of an address the trace never allocated, a block
// alive in `segments` with no alloc in the trace.
//
// Under the recorded settings the replay should make the recorded segment decisions again. Best fit
// breaks ties by address, so the offline device hands out the recorded segment addresses for as long
// as the allocator asks for the recorded segment sizes, in order; after the first difference (or
// under other settings) it places segments at the lowest free 2 MiB-aligned address from
// 0x7f0000000000, as a fresh device does.
//
// Recorded releases. PyTorch writes one segment_free (segment_unmap for expandable pages) per
// segment it gives back, in two situations: inside an allocation (the out-of-memory retry's release
// of cached blocks, max_split_size's release of oversize blocks, garbage collection), and when the
// program calls torch.cuda.empty_cache(). The first kind is the allocator's own decision, and the
// replayed allocator makes it again itself where it applies (under --capacity, its own settings).
// The second is the program's: it happens under any settings, so the replay makes the same call
// there, under every configuration: the replayed allocator's empty_cache(), which gives back every
// wholly free segment and every whole free expandable page of the device (all streams, both pools),
// as PyTorch's emptyCache does. It is the call that is replayed, not the recorded list of segments:
// under the recorded settings the replayed state is the recorded one, so the call frees the
// recorded segments (the comparison with the recording checks that), and under other settings the
// recorded segments do not exist. A run of consecutive segment_free/segment_unmap entries is one
// release; it is the program's empty_cache() unless the next entry (past free_completed, snapshot
// and unknown entries) is a segment_alloc, segment_map or oom carrying the same stack: PyTorch
// gives a release inside an allocation that allocation's stack, which its retry's segment_alloc
// (or its oom) carries too, while empty_cache() gives it the stack of the call (or, with contexts
// off, the segment's own). Without stacks (all empty) an empty_cache() followed at once by an
// allocation that takes a new segment cannot be told from an out-of-memory retry and is left to
// the allocator. A call that found nothing to release left no entry and cannot be replayed.
// memtrace's own snapshots get no empty_cache replay: memtrace's allocator has no empty_cache the
// program can call, so every release in them was made inside an allocation.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "cli/analysis/command_line.hpp"
#include "cli/analysis/human_size.hpp"
#include "cli/analysis/json_writer.hpp"
#include "cli/commands.hpp"
#include "cli/reader/snapshot.hpp"
#include "core/caching/alloc_conf.hpp"
#include "core/caching/backend.hpp"
#include "core/caching/caching_allocator.hpp"
#include "core/caching/listener.hpp"

namespace memtrace::cli {

namespace {

namespace rd = memtrace::reader;
namespace mc = memtrace::caching;
using analysis::human_bytes;

constexpr const char* kHelp =
    "usage: memtrace replay SNAPSHOT [--alloc-conf STRING ...] [--capacity SIZE] [--device N] [--json]\n"
    "\n"
    "Replays the allocations and frees recorded in SNAPSHOT (memtrace's or PyTorch's _dump_snapshot)\n"
    "through memtrace's caching allocator, without a GPU, once per configuration, and prints peak\n"
    "reserved and allocated bytes, fragmentation at the peak (reserved minus allocated, and the\n"
    "largest free block), the driver calls the allocator made, and whether the trace runs out of\n"
    "memory at --capacity (and at which event).\n"
    "\n"
    "  --alloc-conf STRING  a configuration in PYTORCH_CUDA_ALLOC_CONF syntax (same keys, plus\n"
    "                       memtrace_policy:pytorch|remap); repeat to compare several; \"\" is\n"
    "                       PyTorch's defaults. Without it: the settings the snapshot recorded,\n"
    "                       expandable_segments:True and memtrace_policy:remap.\n"
    "  --capacity SIZE      device memory, e.g. 80GiB, 24576MiB or bytes (KiB/MiB/GiB/TiB and\n"
    "                       K/M/G/T are powers of 1024, KB/MB/GB/TB of 1000); default unlimited\n"
    "  --device N           which device's history to replay (default: device 0, or the first\n"
    "                       device with entries)\n"
    "  --json               one JSON document on stdout instead of text\n"
    "  --lenient            read a file that breaks the format's invariants (each named on stderr)\n"
    "\n"
    "The program's torch.cuda.empty_cache() calls (recorded segment frees not made inside an\n"
    "allocation) are made again at the same points under every configuration. Replaying under the\n"
    "settings the snapshot was recorded with reproduces the recorded segment decisions; the output\n"
    "says whether it did. When the history was cut, it says how many blocks alive before the first\n"
    "kept entry were pre-allocated.\n";

// Offline devices report this much memory when no --capacity is given: no trace reaches it.
constexpr uint64_t kUnlimited = uint64_t{1} << 46;
constexpr uintptr_t kSegmentBase = 0x7f0000000000;
constexpr uintptr_t kReserveBase = 0x800000000000;  // expandable reservations, away from segments
constexpr size_t kSegmentAlign = size_t{2} << 20;

uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// ---- command line ---------------------------------------------------------------------------------

struct Options {
  std::string path;
  std::vector<std::string> confs;
  bool confs_given = false;
  std::optional<uint64_t> capacity;
  std::optional<int> device;
  bool json = false;
  bool lenient = false;
};

// "80GiB", "1.5G", "24576MiB", "1000000": binary units unless the suffix is KB/MB/GB/TB.
std::optional<uint64_t> parse_size(std::string_view text) {
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  if (i == 0) return std::nullopt;
  std::string number(text.substr(0, i));
  std::string unit;
  for (char c : text.substr(i)) unit += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  static const std::pair<const char*, double> kUnits[] = {
      {"", 1},          {"b", 1},         {"k", 0x1p10},    {"kib", 0x1p10}, {"kb", 1e3},
      {"m", 0x1p20},    {"mib", 0x1p20},  {"mb", 1e6},      {"g", 0x1p30},   {"gib", 0x1p30},
      {"gb", 1e9},      {"t", 0x1p40},    {"tib", 0x1p40},  {"tb", 1e12}};
  for (const auto& [name, scale] : kUnits) {
    if (unit != name) continue;
    char* end = nullptr;
    errno = 0;
    double v = std::strtod(number.c_str(), &end);
    if (errno != 0 || *end != '\0' || !(v > 0)) return std::nullopt;
    double bytes = std::floor(v * scale);
    if (bytes < 1 || bytes > 0x1p62) return std::nullopt;
    return static_cast<uint64_t>(bytes);
  }
  return std::nullopt;
}

std::optional<Options> parse_options(int argc, char** argv, int* exit_code) {
  Options o;
  auto usage_error = [&](const std::string& msg) {
    std::fprintf(stderr, "memtrace replay: %s (see memtrace replay --help)\n", msg.c_str());
    *exit_code = kExitUsage;
    return std::nullopt;
  };
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    auto value = [&](std::string_view name) -> std::optional<std::string> {
      if (a.size() > name.size() && a.substr(0, name.size()) == name && a[name.size()] == '=')
        return std::string(a.substr(name.size() + 1));
      if (a == name && i + 1 < argc) return std::string(argv[++i]);
      return std::nullopt;
    };
    auto is = [&](std::string_view name) {
      return a == name || (a.size() > name.size() && a.substr(0, name.size() + 1) == std::string(name) + "=");
    };
    if (a == "-h" || a == "--help") {
      std::fputs(kHelp, stdout);
      *exit_code = 0;
      return std::nullopt;
    } else if (a == "--json") {
      o.json = true;
    } else if (a == "--lenient") {
      o.lenient = true;
    } else if (is("--alloc-conf")) {
      auto v = value("--alloc-conf");
      if (!v) return usage_error("--alloc-conf needs a value");
      o.confs.push_back(*v);
      o.confs_given = true;
    } else if (is("--capacity")) {
      auto v = value("--capacity");
      if (!v) return usage_error("--capacity needs a value");
      o.capacity = parse_size(*v);
      if (!o.capacity) return usage_error("--capacity: '" + *v + "' is not a size (e.g. 80GiB)");
    } else if (is("--device")) {
      auto v = value("--device");
      char* end = nullptr;
      long d = v ? std::strtol(v->c_str(), &end, 10) : -1;
      if (!v || v->empty() || *end != '\0' || d < 0 || d > 1023)
        return usage_error("--device needs a device number");
      o.device = static_cast<int>(d);
    } else if (!a.empty() && a[0] == '-') {
      return usage_error("unknown option '" + std::string(a) + "'");
    } else if (o.path.empty()) {
      o.path = std::string(a);
    } else {
      return usage_error("one snapshot at a time ('" + std::string(a) + "')");
    }
  }
  if (o.path.empty()) return usage_error("no snapshot given");
  return o;
}

// ---- what is replayed -----------------------------------------------------------------------------

enum class OpKind : uint8_t { Alloc, Free, RecordedOom, EmptyCache };

struct Op {
  OpKind kind = OpKind::Alloc;
  bool enabled = true;  // a free_requested's free stays off while its free_completed may follow
  int64_t event = -1;   // index in the device's trace; -1 for pre-allocations
  uint64_t addr = 0;    // recorded address (the key that pairs a free with its alloc)
  uint64_t size = 0;
  uint64_t stream = 0;
};

struct Plan {
  int device = 0;
  size_t entries = 0;
  std::vector<Op> prealloc;  // blocks alive before the first kept entry, in address order
  std::vector<Op> ops;
  uint64_t allocs = 0, frees = 0, recorded_ooms = 0, skipped = 0;
  uint64_t empty_cache_calls = 0;    // recorded releases read as the program's empty_cache()
  uint64_t allocation_releases = 0;  // recorded releases made inside an allocation (left to the allocator)
  int64_t entries_dropped = 0;
  bool truncated = false;
  bool recorded_by_cache = true;  // PyTorch's allocator, or memtrace's in caching mode
  // The recording's own decisions, to follow (addresses) and to compare with.
  std::vector<std::pair<uint64_t, uint64_t>> segment_allocs;  // (address, bytes)
  std::vector<uint64_t> segment_frees, segment_maps, segment_unmaps;
};

bool is_release(rd::Action a) { return a == rd::Action::SegmentFree || a == rd::Action::SegmentUnmap; }

// Marks the first entry of each run of segment_free/segment_unmap entries that is the program's
// empty_cache() (see the top of the file) and counts both kinds of release into `p`.
std::vector<bool> empty_cache_runs(const std::vector<rd::TraceEntry>& trace, Plan* p) {
  std::vector<bool> at(trace.size(), false);
  auto passed_over = [](rd::Action a) {  // entries that neither end a release nor start an allocation
    return a == rd::Action::Snapshot || a == rd::Action::Other;
  };
  size_t i = 0;
  while (i < trace.size()) {
    if (!is_release(trace[i].action)) {
      ++i;
      continue;
    }
    const size_t first = i;
    while (i < trace.size() && (is_release(trace[i].action) || passed_over(trace[i].action))) ++i;
    // What follows the run: the allocation that released, or anything else. A free_completed here
    // is an allocation's processing of record_stream events, not the program's.
    size_t j = i;
    while (j < trace.size() && (passed_over(trace[j].action) || trace[j].action == rd::Action::FreeCompleted ||
                                is_release(trace[j].action)))
      ++j;
    bool by_allocation = false;
    if (j < trace.size()) {
      rd::Action a = trace[j].action;
      by_allocation = (a == rd::Action::SegmentAlloc || a == rd::Action::SegmentMap || a == rd::Action::Oom) &&
                      trace[j].stack == trace[first].stack;
    }
    if (by_allocation) {
      ++p->allocation_releases;
    } else {
      at[first] = true;
      ++p->empty_cache_calls;
    }
  }
  return at;
}

Plan build_plan(const rd::Snapshot& snap, int device) {
  Plan p;
  p.device = device;
  static const std::vector<rd::TraceEntry> kNone;
  const auto& trace = device < static_cast<int>(snap.device_traces.size()) ? snap.device_traces[device] : kNone;
  p.entries = trace.size();
  p.entries_dropped = snap.producer == rd::Producer::kMemtrace ? snap.memtrace.entries_dropped : 0;
  p.recorded_by_cache = snap.producer == rd::Producer::kPyTorch || snap.memtrace.allocator_caching;

  struct State {
    bool live = false;        // allocated in the replay
    bool allocated_in_trace = false;
    int64_t pending = -1;     // op index of a free_requested waiting for its free_completed
  };
  std::unordered_map<uint64_t, State> at;
  std::map<uint64_t, Op> pre;  // by address
  const std::vector<bool> empty_cache_at =
      snap.producer == rd::Producer::kPyTorch ? empty_cache_runs(trace, &p) : std::vector<bool>(trace.size(), false);
  auto preallocate = [&](uint64_t addr, uint64_t size, uint64_t stream) {
    pre[addr] = Op{OpKind::Alloc, true, -1, addr, size, stream};
    at[addr].live = true;
  };
  auto close_pending = [&](State& s) {  // the free_requested becomes the free
    p.ops[s.pending].enabled = true;
    s.pending = -1;
    s.live = false;
    ++p.frees;
  };

  for (size_t i = 0; i < trace.size(); ++i) {
    const rd::TraceEntry& e = trace[i];
    const int64_t ev = static_cast<int64_t>(i);
    switch (e.action) {
      case rd::Action::Alloc: {
        State& s = at[e.addr];
        if (s.pending >= 0) close_pending(s);  // its free_completed never came
        if (s.live) {                          // allocated twice without a free: the free is lost
          p.ops.push_back(Op{OpKind::Free, true, ev, e.addr, 0, e.stream});
          ++p.skipped;
        }
        p.ops.push_back(Op{OpKind::Alloc, true, ev, e.addr, e.size, e.stream});
        s.live = true;
        s.allocated_in_trace = true;
        ++p.allocs;
        break;
      }
      case rd::Action::FreeRequested:
      case rd::Action::FreeCompleted: {
        State& s = at[e.addr];
        bool completed = e.action == rd::Action::FreeCompleted;
        if (completed && s.pending >= 0) {
          s.pending = -1;
          s.live = false;
          p.ops.push_back(Op{OpKind::Free, true, ev, e.addr, 0, e.stream});
          ++p.frees;
          break;
        }
        if (!s.live) {
          if (s.allocated_in_trace || pre.count(e.addr) || s.pending >= 0) {
            ++p.skipped;  // a second free of the same block
            break;
          }
          preallocate(e.addr, e.size, e.stream);  // alive since before the first kept entry
        }
        if (completed) {
          p.ops.push_back(Op{OpKind::Free, true, ev, e.addr, 0, e.stream});
          s.live = false;
          ++p.frees;
        } else {
          s.pending = static_cast<int64_t>(p.ops.size());
          p.ops.push_back(Op{OpKind::Free, false, ev, e.addr, 0, e.stream});
        }
        break;
      }
      case rd::Action::Oom:
        p.ops.push_back(Op{OpKind::RecordedOom, true, ev, 0, e.size, e.stream});
        ++p.recorded_ooms;
        break;
      case rd::Action::SegmentAlloc: p.segment_allocs.emplace_back(e.addr, e.size); break;
      case rd::Action::SegmentFree:
      case rd::Action::SegmentUnmap:
        if (empty_cache_at[i]) p.ops.push_back(Op{OpKind::EmptyCache, true, ev, 0, 0, 0});
        (e.action == rd::Action::SegmentFree ? p.segment_frees : p.segment_unmaps).push_back(e.size);
        break;
      case rd::Action::SegmentMap: p.segment_maps.push_back(e.size); break;
      default: break;
    }
  }
  for (auto& [addr, s] : at)
    if (s.pending >= 0) close_pending(s);  // freed but not completed when the snapshot was taken

  // Blocks alive at the end that the trace never allocated were alive before it began.
  for (const rd::Segment& seg : snap.segments) {
    if (seg.device != device) continue;
    for (const rd::Block& b : seg.blocks) {
      if (b.state != rd::BlockState::ActiveAllocated && b.state != rd::BlockState::ActivePendingFree) continue;
      auto it = at.find(b.address);
      if (it != at.end() && (it->second.live || it->second.allocated_in_trace)) continue;
      if (pre.count(b.address)) continue;
      preallocate(b.address, b.requested_size ? b.requested_size : b.size, seg.stream);
    }
  }
  for (auto& [addr, op] : pre) p.prealloc.push_back(op);
  p.truncated = !p.prealloc.empty() || p.skipped > 0 || p.entries_dropped > 0;
  return p;
}

// ---- the offline device ---------------------------------------------------------------------------

class OfflineDevice : public mc::Backend {
 public:
  OfflineDevice(uint64_t capacity, std::vector<std::pair<uint64_t, uint64_t>> recorded)
      : capacity_(capacity), recorded_(std::move(recorded)) {}

  int allocate(size_t bytes, uintptr_t* out) override {
    if (used_ + bytes > capacity_) return mc::kErrorOutOfMemory;
    uintptr_t a = 0;
    if (follow_ < recorded_.size() && recorded_[follow_].second == bytes && is_free(recorded_[follow_].first, bytes)) {
      a = recorded_[follow_++].first;
    } else {
      follow_ = recorded_.size();  // diverged: addresses of our own from now on
      a = lowest_fit(bytes);
    }
    segments_[a] = a + bytes;
    used_ += bytes;
    *out = a;
    return 0;
  }
  int free(uintptr_t base, size_t bytes) override {
    auto it = segments_.find(base);
    if (it == segments_.end() || it->second != base + bytes) return 1;
    segments_.erase(it);
    used_ -= bytes;
    return 0;
  }
  bool supports_expandable() const override { return true; }
  int reserve(size_t bytes, uintptr_t* out) override {
    *out = next_reserve_;
    next_reserve_ += align_up(bytes, uint64_t{1} << 30) + (uint64_t{1} << 30);
    return 0;
  }
  int map(uintptr_t, size_t, size_t bytes) override {
    if (used_ + bytes > capacity_) return mc::kErrorOutOfMemory;
    used_ += bytes;
    return 0;
  }
  int unmap(uintptr_t, size_t, size_t bytes) override {
    used_ -= bytes;
    return 0;
  }
  int release(uintptr_t, size_t) override { return 0; }
  int synchronize() override { return 0; }
  int mem_get_info(size_t* free_bytes, size_t* total_bytes) override {
    *free_bytes = capacity_ - used_;
    *total_bytes = capacity_;
    return 0;
  }

 private:
  bool is_free(uintptr_t a, size_t bytes) const {
    auto it = segments_.lower_bound(a);
    if (it != segments_.end() && it->first < a + bytes) return false;
    if (it != segments_.begin() && std::prev(it)->second > a) return false;
    return true;
  }
  uintptr_t lowest_fit(size_t bytes) const {
    uintptr_t a = kSegmentBase;
    for (const auto& [lo, hi] : segments_) {
      if (hi <= a) continue;
      if (lo >= a + bytes) break;
      a = align_up(hi, kSegmentAlign);
    }
    return a;
  }

  uint64_t capacity_;
  uint64_t used_ = 0;
  std::vector<std::pair<uint64_t, uint64_t>> recorded_;
  size_t follow_ = 0;
  std::map<uintptr_t, uintptr_t> segments_;  // base -> end
  uintptr_t next_reserve_ = kReserveBase;
};

// ---- one configuration ----------------------------------------------------------------------------

struct OomAt {
  int64_t event = -1;         // trace index; -1 during pre-allocation
  int64_t alloc_ordinal = -1; // how many of the trace's allocs came before it
  uint64_t size = 0;
  uint64_t stream = 0;
  bool recorded = false;      // the recording ran out of memory here too (an oom entry)
};

struct Outcome {
  std::string conf;
  std::string label;
  std::vector<std::string> warnings;
  bool expandable_active = false;
  std::string policy;
  mc::Stats stats;
  uint64_t allocated_at_peak = 0;
  uint64_t largest_free_at_peak = 0;
  std::vector<uint64_t> segment_allocs, segment_frees, segment_maps, segment_unmaps;
  std::optional<OomAt> first_oom;
  uint64_t failed_requests = 0;
  uint64_t empty_cache_released = 0;  // bytes the replayed empty_cache() calls gave back
  std::optional<bool> matches_recorded;  // nullopt when the history is incomplete
};

class Tally : public mc::Listener {
 public:
  explicit Tally(Outcome& o) : o_(o) {}
  void on_event(const mc::AllocatorEvent& e) override {
    switch (e.action) {
      case Action::Alloc: allocated_ += e.block_size; break;
      case Action::FreeCompleted: allocated_ -= e.block_size; break;
      case Action::SegmentAlloc: o_.segment_allocs.push_back(e.size); reserved_ += e.size; break;
      case Action::SegmentFree: o_.segment_frees.push_back(e.size); reserved_ -= e.size; break;
      case Action::SegmentMap: o_.segment_maps.push_back(e.size); reserved_ += e.size; break;
      case Action::SegmentUnmap: o_.segment_unmaps.push_back(e.size); reserved_ -= e.size; break;
      default: break;
    }
  }
  uint64_t reserved() const { return reserved_; }
  uint64_t allocated() const { return allocated_; }

 private:
  Outcome& o_;
  uint64_t reserved_ = 0;
  uint64_t allocated_ = 0;
};

Outcome replay(const Plan& plan, const std::string& conf_text, const std::string& label, uint64_t capacity) {
  Outcome o;
  o.conf = conf_text;
  o.label = label;
  mc::AllocConf conf = mc::parse_alloc_conf(conf_text, &o.warnings);
  conf.deferred_free = false;  // PyTorch's stream-ordered frees: a block is reusable at once
  OfflineDevice device(capacity, plan.segment_allocs);
  Tally tally(o);
  {
    mc::CachingAllocator alloc(device, conf, &tally);
    o.expandable_active = alloc.expandable_active();
    o.policy = mc::policy_name(alloc.conf().policy);
    std::unordered_map<uint64_t, uintptr_t> ptr_of;  // recorded address -> replayed block
    // "At the peak": of the moments reserved memory stands at its peak, the one with the most
    // allocated, so the fragmentation reported is what the peak could not avoid (reserved often
    // reaches its peak long before the allocations that fill it).
    uint64_t peak_seen = 0;
    int64_t ordinal = 0;
    auto after_malloc = [&] {
      if (tally.reserved() < peak_seen) return;
      if (tally.reserved() == peak_seen && tally.allocated() <= o.allocated_at_peak) return;
      peak_seen = tally.reserved();
      mc::Stats s = alloc.stats();
      o.allocated_at_peak = s.allocated;
      o.largest_free_at_peak = s.largest_free_block;
    };
    auto failed = [&](const Op& op, bool recorded) {
      ++o.failed_requests;
      if (!o.first_oom) o.first_oom = OomAt{op.event, op.event < 0 ? -1 : ordinal, op.size, op.stream, recorded};
    };
    auto run = [&](const Op& op) {
      switch (op.kind) {
        case OpKind::Alloc: {
          mc::MallocResult r = alloc.malloc(op.size, op.stream);
          if (r.ptr) ptr_of[op.addr] = r.ptr;
          else failed(op, false);
          after_malloc();
          if (op.event >= 0) ++ordinal;
          break;
        }
        case OpKind::Free: {
          if (!op.enabled) break;
          auto it = ptr_of.find(op.addr);
          if (it == ptr_of.end()) break;  // its allocation failed here
          alloc.free(it->second);
          ptr_of.erase(it);
          break;
        }
        case OpKind::RecordedOom: {
          mc::MallocResult r = alloc.malloc(op.size, op.stream);
          after_malloc();
          if (r.ptr) alloc.free(r.ptr);
          else failed(op, true);
          break;
        }
        case OpKind::EmptyCache: {
          const uint64_t before = tally.reserved();
          alloc.empty_cache();
          o.empty_cache_released += before - tally.reserved();
          break;
        }
      }
    };
    for (const Op& op : plan.prealloc) run(op);
    for (const Op& op : plan.ops) run(op);
    o.stats = alloc.stats();
  }
  if (!plan.truncated && plan.recorded_by_cache) {
    // Allocations in order; releases as sets (their order within one release is the pools').
    auto same_set = [](std::vector<uint64_t> a, std::vector<uint64_t> b) {
      std::sort(a.begin(), a.end());
      std::sort(b.begin(), b.end());
      return a == b;
    };
    bool same = o.segment_allocs.size() == plan.segment_allocs.size() && o.segment_maps == plan.segment_maps &&
                same_set(o.segment_frees, plan.segment_frees) && same_set(o.segment_unmaps, plan.segment_unmaps);
    for (size_t i = 0; same && i < o.segment_allocs.size(); ++i)
      same = o.segment_allocs[i] == plan.segment_allocs[i].second;
    o.matches_recorded = same;
  }
  return o;
}

// The PYTORCH_CUDA_ALLOC_CONF the snapshot says it was recorded with ("" when it does not say).
std::string recorded_conf(const rd::Snapshot& snap) {
  for (const auto& [k, v] : snap.settings)
    if (k == "PYTORCH_CUDA_ALLOC_CONF") {
      if (v.size() >= 2 && (v.front() == '\'' || v.front() == '"') && v.back() == v.front())
        return v.substr(1, v.size() - 2);
      return v;
    }
  return "";
}

// ---- output ---------------------------------------------------------------------------------------

void sizes_field(analysis::JsonWriter& w, std::string_view key, const std::vector<uint64_t>& v) {
  w.key(key).begin_array();
  for (uint64_t x : v) w.uinteger(x);
  w.end_array();
}

void print_json(const Options& opt, const rd::Snapshot& snap, const Plan& plan, uint64_t capacity,
                const std::vector<Outcome>& outcomes) {
  analysis::JsonWriter w;
  w.begin_object();
  w.field("file", opt.path);
  w.field("producer", snap.producer == rd::Producer::kMemtrace ? "memtrace" : "pytorch");
  w.field_int("device", plan.device);
  if (opt.capacity) w.field_uint("capacity", capacity);
  else w.key("capacity").null();
  w.key("replayed").begin_object();
  w.field_uint("entries", plan.entries);
  w.field_uint("events", plan.allocs + plan.frees + plan.recorded_ooms + plan.empty_cache_calls);
  w.field_uint("allocs", plan.allocs);
  w.field_uint("frees", plan.frees);
  w.field_uint("recorded_ooms", plan.recorded_ooms);
  w.field_uint("empty_cache_calls", plan.empty_cache_calls);
  w.field_uint("allocation_releases", plan.allocation_releases);
  w.field_uint("skipped", plan.skipped);
  w.field_uint("preallocated", plan.prealloc.size());
  w.field_int("entries_dropped", plan.entries_dropped);
  w.field_bool("truncated", plan.truncated);
  w.end_object();
  w.key("recorded").begin_object();
  std::vector<uint64_t> rec_allocs;
  for (const auto& s : plan.segment_allocs) rec_allocs.push_back(s.second);
  sizes_field(w, "segment_alloc_sizes", rec_allocs);
  sizes_field(w, "segment_free_sizes", plan.segment_frees);
  sizes_field(w, "segment_map_sizes", plan.segment_maps);
  sizes_field(w, "segment_unmap_sizes", plan.segment_unmaps);
  w.end_object();
  w.key("configurations").begin_array();
  for (const Outcome& o : outcomes) {
    const mc::Stats& s = o.stats;
    w.begin_object();
    w.field("label", o.label);
    w.field("alloc_conf", o.conf);
    w.field("policy", o.policy);
    w.field_bool("expandable_segments", o.expandable_active);
    w.key("warnings").begin_array();
    for (const std::string& x : o.warnings) w.string(x);
    w.end_array();
    w.field_uint("peak_reserved", s.peak_reserved);
    w.field_uint("peak_allocated", s.peak_allocated);
    w.field_uint("allocated_at_peak", o.allocated_at_peak);
    w.field_uint("fragmentation_at_peak", s.peak_reserved - o.allocated_at_peak);
    w.field_uint("largest_free_at_peak", o.largest_free_at_peak);
    w.key("driver_calls").begin_object();
    w.field_uint("segment_allocs", s.backend_allocs);
    w.field_uint("segment_frees", s.backend_frees);
    w.field_uint("maps", s.backend_maps);
    w.field_uint("unmaps", s.backend_unmaps);
    w.field_uint("reserves", s.backend_reserves);
    w.field_uint("releases", s.backend_releases);
    w.field_uint("syncs", s.backend_syncs);
    w.end_object();
    w.field_uint("alloc_retries", s.num_alloc_retries);
    w.field_uint("empty_cache_released", o.empty_cache_released);
    sizes_field(w, "segment_alloc_sizes", o.segment_allocs);
    sizes_field(w, "segment_free_sizes", o.segment_frees);
    sizes_field(w, "segment_map_sizes", o.segment_maps);
    sizes_field(w, "segment_unmap_sizes", o.segment_unmaps);
    if (o.matches_recorded) w.field_bool("matches_recorded", *o.matches_recorded);
    else w.key("matches_recorded").null();
    w.field_uint("failed_requests", o.failed_requests);
    if (o.first_oom) {
      w.key("oom").begin_object();
      if (o.first_oom->event >= 0) w.field_int("event_index", o.first_oom->event);
      else w.key("event_index").null();
      if (o.first_oom->alloc_ordinal >= 0) w.field_int("alloc_ordinal", o.first_oom->alloc_ordinal);
      else w.key("alloc_ordinal").null();
      w.field_uint("size", o.first_oom->size);
      w.field_uint("stream", o.first_oom->stream);
      w.field_bool("recorded", o.first_oom->recorded);
      w.end_object();
    } else {
      w.key("oom").null();
    }
    w.end_object();
  }
  w.end_array();
  w.end_object();
  std::printf("%s\n", w.text().c_str());
}

void print_text(const Options& opt, const rd::Snapshot& snap, const Plan& plan, uint64_t capacity,
                const std::vector<Outcome>& outcomes) {
  std::printf("memtrace replay: %s (%s snapshot), device %d\n", opt.path.c_str(),
              snap.producer == rd::Producer::kMemtrace ? "memtrace" : "PyTorch", plan.device);
  std::printf("replayed: %llu events (%llu allocations, %llu frees",
              static_cast<unsigned long long>(plan.allocs + plan.frees + plan.recorded_ooms + plan.empty_cache_calls),
              static_cast<unsigned long long>(plan.allocs), static_cast<unsigned long long>(plan.frees));
  if (plan.empty_cache_calls)
    std::printf(", %llu empty_cache calls", static_cast<unsigned long long>(plan.empty_cache_calls));
  if (plan.recorded_ooms)
    std::printf(", %llu recorded out-of-memory requests", static_cast<unsigned long long>(plan.recorded_ooms));
  std::printf(") of %zu trace entries, %llu skipped, %zu pre-allocated\n", plan.entries,
              static_cast<unsigned long long>(plan.skipped), plan.prealloc.size());
  if (plan.empty_cache_calls || plan.allocation_releases)
    std::printf("releases: %llu recorded empty_cache calls, replayed under every configuration; %llu releases "
                "made inside an allocation (out-of-memory retry, max_split_size, garbage collection), left to "
                "the allocator\n",
                static_cast<unsigned long long>(plan.empty_cache_calls),
                static_cast<unsigned long long>(plan.allocation_releases));
  if (plan.truncated) {
    std::printf("history: truncated");
    if (plan.entries_dropped > 0) std::printf(" (%lld entries dropped before the dump)", static_cast<long long>(plan.entries_dropped));
    std::printf("; the %zu blocks alive before the first kept entry were pre-allocated in address order, "
                "so the replay is an approximation\n", plan.prealloc.size());
  } else {
    std::printf("history: complete\n");
  }
  std::printf("capacity: %s\n", opt.capacity ? human_bytes(capacity).c_str() : "unlimited");
  for (size_t i = 0; i < outcomes.size(); ++i) {
    const Outcome& o = outcomes[i];
    const mc::Stats& s = o.stats;
    std::printf("\n[%zu] %s\n", i + 1, o.label.c_str());
    for (const std::string& x : o.warnings) std::printf("    warning: %s\n", x.c_str());
    std::printf("    peak reserved      %s\n", human_bytes(s.peak_reserved).c_str());
    std::printf("    peak allocated     %s\n", human_bytes(s.peak_allocated).c_str());
    std::printf("    fragmentation      %s reserved but not allocated at the peak; largest free block %s\n",
                human_bytes(s.peak_reserved - o.allocated_at_peak).c_str(), human_bytes(o.largest_free_at_peak).c_str());
    std::printf("    driver calls       %llu segment allocs, %llu segment frees, %llu maps, %llu unmaps, %llu syncs\n",
                static_cast<unsigned long long>(s.backend_allocs), static_cast<unsigned long long>(s.backend_frees),
                static_cast<unsigned long long>(s.backend_maps), static_cast<unsigned long long>(s.backend_unmaps),
                static_cast<unsigned long long>(s.backend_syncs));
    if (plan.empty_cache_calls)
      std::printf("    empty_cache        %s given back by %llu calls\n", human_bytes(o.empty_cache_released).c_str(),
                  static_cast<unsigned long long>(plan.empty_cache_calls));
    if (o.matches_recorded && o.conf == recorded_conf(snap))
      std::printf("    vs. recording      %s (%zu segment allocs, %zu maps, %zu segment frees, %zu unmaps recorded)\n",
                  *o.matches_recorded ? "same segment decisions" : "different segment decisions",
                  plan.segment_allocs.size(), plan.segment_maps.size(), plan.segment_frees.size(),
                  plan.segment_unmaps.size());
    if (!o.first_oom) {
      std::printf("    out of memory      no%s\n", opt.capacity ? "" : " (capacity unlimited)");
    } else {
      const OomAt& m = *o.first_oom;
      if (m.event >= 0)
        std::printf("    out of memory      YES, first at trace entry %lld (a request of %s on stream %#llx%s); %llu requests failed\n",
                    static_cast<long long>(m.event), human_bytes(m.size).c_str(),
                    static_cast<unsigned long long>(m.stream), m.recorded ? ", which failed in the recording too" : "",
                    static_cast<unsigned long long>(o.failed_requests));
      else
        std::printf("    out of memory      YES, while pre-allocating the blocks alive before the trace (%s); %llu requests failed\n",
                    human_bytes(m.size).c_str(), static_cast<unsigned long long>(o.failed_requests));
    }
  }
}

}  // namespace

int cmd_replay(int argc, char** argv) {
  int exit_code = 0;
  std::optional<Options> opt = parse_options(argc, argv, &exit_code);
  if (!opt) return exit_code;

  std::optional<rd::Snapshot> loaded =
      memtrace::analysis::load_for_command(opt->path, memtrace::analysis::CommandSpec{"replay", kHelp}, opt->lenient);
  if (!loaded) return kExitUsage;
  const rd::Snapshot& snap = *loaded;

  int device = 0;
  if (opt->device) {
    if (*opt->device >= snap.device_count()) {
      std::fprintf(stderr, "memtrace replay: %s has no device %d (it has %d)\n", opt->path.c_str(), *opt->device,
                   snap.device_count());
      return kExitUsage;
    }
    device = *opt->device;
  } else if (snap.device_traces.empty() || snap.device_traces[0].empty()) {
    for (size_t d = 0; d < snap.device_traces.size(); ++d)
      if (!snap.device_traces[d].empty()) {
        device = static_cast<int>(d);
        break;
      }
  }
  Plan plan = build_plan(snap, device);

  std::vector<std::pair<std::string, std::string>> configs;  // (conf, label)
  if (opt->confs_given) {
    for (const std::string& c : opt->confs) configs.emplace_back(c, c.empty() ? "\"\" (PyTorch's defaults)" : c);
  } else {
    std::string rec = recorded_conf(snap);
    if (plan.recorded_by_cache)
      configs.emplace_back(rec, "as recorded: \"" + rec + "\"");
    else  // memtrace without its caching allocator: every allocation went to the driver
      configs.emplace_back("", "\"\" (PyTorch's defaults)");
    if (!mc::parse_alloc_conf(rec, nullptr).expandable_segments)
      configs.emplace_back("expandable_segments:True", "expandable_segments:True");
    configs.emplace_back("memtrace_policy:remap", "memtrace_policy:remap (memtrace's own)");
  }

  const uint64_t capacity = opt->capacity.value_or(kUnlimited);
  std::vector<Outcome> outcomes;
  for (const auto& [conf, label] : configs) {
    outcomes.push_back(replay(plan, conf, label, capacity));
    for (const std::string& w : outcomes.back().warnings)
      std::fprintf(stderr, "memtrace replay: --alloc-conf '%s': %s\n", conf.c_str(), w.c_str());
  }
  if (opt->json) print_json(*opt, snap, plan, capacity, outcomes);
  else print_text(*opt, snap, plan, capacity, outcomes);
  return 0;
}

}  // namespace memtrace::cli
