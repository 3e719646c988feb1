#include "preload/ranges.hpp"

#include <atomic>
#include <cstring>

#include "core/range_table.hpp"
#include "core/spinlock.hpp"
#include "preload/capture.hpp"
#include "preload/immortal.hpp"
#include "preload/record.hpp"
#include "preload/session.hpp"

namespace memtrace::preload::ranges {

namespace {

// Process-wide and outside the session: a program may open a range before its first CUDA call,
// and the stacks its threads hold must mean the same thing when the session starts.
constinit Immortal<RangeTable> g_table;
RangeTable& table() { return g_table.value; }
// Marker texts apart from range names: a program that marks every step with a new text ("step
// 1234") fills this store, never the one its ranges are named from (docs/ranges.md).
constinit Immortal<RangeTable> g_markers;
RangeTable& markers() { return g_markers.value; }
constexpr const char* kMarkersFull = "(marker text dropped: memtrace's marker store is full)";

// Domains: a name each; domain 0 is NVTX's default (and memtrace's API), named "".
constexpr uint32_t kMaxDomains = 1024;
SpinLock g_domain_lock;
uint32_t g_domain_names[kMaxDomains];  // name id of each domain, [0] unused
std::atomic<uint32_t> g_domain_count{1};

constexpr uint32_t kDepth = RangeTable::kMaxDepth;

// A thread's push/pop stack: its node, and the domain of each open range (NVTX pops per domain).
// Ranges past the bound are counted in `extra`, and are the first a pop closes.
struct ThreadRanges {
  uint32_t node;
  uint16_t depth;
  uint16_t extra;
  uint16_t domains[kDepth];
};
__thread ThreadRanges t_ranges __attribute__((tls_model("initial-exec")));

// Start/end ranges: process-wide, in the order they started. Few are open at once; the lock
// is held only by starts and ends, never by an allocation.
constexpr uint32_t kMaxOpen = 64;
struct OpenRange {
  uint64_t id;
  uint32_t name;
  uint32_t node;  // where it sat when it started (what its start and end are logged as)
};
SpinLock g_open_lock;
OpenRange g_open[kMaxOpen];
uint32_t g_open_count = 0;
uint64_t g_next_id = 0;
std::atomic<uint32_t> g_phase{0};

void log_range(uint32_t node, RangeStage stage) {
  if (!session_ready()) return;
  if (Session* s = session_if_active()) s->recorder.record_range(node, thread_device_hint(), stage);
}

// "domain:name" for a named domain, in a buffer on the stack (no allocation on this path).
uint32_t intern_in(RangeTable& into, Domain d, std::string_view name) {
  if (d == 0 || d >= g_domain_count.load(std::memory_order_acquire)) return into.intern_name(name);
  std::string_view dn = table().name(g_domain_names[d]);
  char buf[2 * RangeTable::kMaxNameLength + 2];
  const size_t a = std::min<size_t>(dn.size(), RangeTable::kMaxNameLength);
  const size_t b = std::min<size_t>(name.size(), RangeTable::kMaxNameLength);
  std::memcpy(buf, dn.data(), a);
  buf[a] = ':';
  std::memcpy(buf + a + 1, name.data(), b);
  return into.intern_name(std::string_view(buf, a + 1 + b));
}
uint32_t intern_in(Domain d, std::string_view name) { return intern_in(table(), d, name); }

int push_id(Domain d, uint32_t name_id) {
  ThreadRanges& t = t_ranges;
  const int level = t.depth + t.extra;
  const uint32_t child = t.depth < kDepth ? table().child(t.node, name_id) : t.node;
  if (child == t.node) {
    // Past the depth bound, or the table is full: counted, so that pops stay paired.
    if (t.extra < UINT16_MAX) ++t.extra;
    return level;
  }
  t.domains[t.depth++] = static_cast<uint16_t>(d);
  t.node = child;
  log_range(child, RangeStage::Start);
  return level;
}

uint32_t rebuild_phase_locked() {
  uint32_t node = 0;
  for (uint32_t i = 0; i < g_open_count; ++i) {
    node = table().child(node, g_open[i].name);
    g_open[i].node = node;
  }
  return node;
}

uint64_t start_id(uint32_t name_id) {
  uint32_t node = 0;
  uint64_t id;
  {
    SpinGuard g(g_open_lock);
    id = ++g_next_id;
    if (g_open_count == kMaxOpen) return id;  // past the bound: its end will find nothing
    const uint32_t parent = g_open_count ? g_open[g_open_count - 1].node : 0;
    node = table().child(parent, name_id);
    if (node == parent) return id;
    g_open[g_open_count++] = {id, name_id, node};
    g_phase.store(node, std::memory_order_release);
  }
  log_range(node, RangeStage::Start);
  return id;
}

}  // namespace

Domain domain_create(std::string_view name) {
  const uint32_t name_id = table().intern_name(name);
  SpinGuard g(g_domain_lock);
  const uint32_t n = g_domain_count.load(std::memory_order_relaxed);
  for (uint32_t d = 1; d < n; ++d)
    if (g_domain_names[d] == name_id) return d;  // NVTX: one handle per name
  if (n == kMaxDomains || name_id == 0) return 0;  // past the bound: its ranges count as the default's
  g_domain_names[n] = name_id;
  g_domain_count.store(n + 1, std::memory_order_release);
  return n;
}

uint32_t register_name(Domain d, std::string_view name) { return intern_in(d, name); }

int push(Domain d, std::string_view name) { return push_id(d, intern_in(d, name)); }

int push_registered(Domain d, uint32_t name_id) { return push_id(d, name_id); }

int pop(Domain d) {
  ThreadRanges& t = t_ranges;
  if (t.extra > 0) {
    --t.extra;
    return t.depth + t.extra;
  }
  int i = static_cast<int>(t.depth) - 1;
  while (i >= 0 && t.domains[i] != d) --i;
  if (i < 0) return -1;
  // The range to close is frame i. Usually the innermost; when domains interleave, the ranges
  // above it are opened again on top of its parent.
  uint32_t names_above[kDepth];
  uint32_t node = t.node;
  const int above = static_cast<int>(t.depth) - 1 - i;
  for (int k = above - 1; k >= 0; --k) {
    const RangeNode n = table().node(node);
    names_above[k] = n.name;
    node = n.parent;
  }
  log_range(node, RangeStage::End);
  node = table().node(node).parent;
  for (int k = 0; k < above; ++k) {
    node = table().child(node, names_above[k]);
    t.domains[i + k] = t.domains[i + k + 1];
  }
  t.node = node;
  --t.depth;
  return i;
}

uint64_t start(Domain d, std::string_view name) { return start_id(intern_in(d, name)); }

uint64_t start_registered(Domain, uint32_t name_id) { return start_id(name_id); }

void end(uint64_t id) {
  uint32_t node = 0;
  {
    SpinGuard g(g_open_lock);
    uint32_t i = 0;
    while (i < g_open_count && g_open[i].id != id) ++i;
    if (i == g_open_count) return;  // never started, ended twice, or past the bound
    node = g_open[i].node;
    std::memmove(&g_open[i], &g_open[i + 1], sizeof(OpenRange) * (g_open_count - i - 1));
    --g_open_count;
    g_phase.store(rebuild_phase_locked(), std::memory_order_release);
  }
  log_range(node, RangeStage::End);
}

namespace {
// `text` lives in one of the tables, which outlive the recorder.
__attribute__((noinline)) void record_marker(const char* text, void* caller) {
  HookScope scope;
  Session* s = scope.session();
  if (!s) return;
  const Current c = current();
  s->recorder.record_marker(thread_device_hint(), text, capture_stack_id(*s, caller), c.range, c.phase);
}
}  // namespace

// A marker starts the session (HookScope) where a range does not: it is an event of its own, and
// a program often marks its first step before its first allocation.
void mark(Domain d, std::string_view text) {
  const uint32_t id = intern_in(markers(), d, text);
  record_marker(id ? markers().name(id).data() : kMarkersFull, __builtin_return_address(0));
}

void mark_registered(Domain, uint32_t id) {
  if (id == 0) return;
  record_marker(table().name(id).data(), __builtin_return_address(0));
}

Current current() { return {t_ranges.node, g_phase.load(std::memory_order_acquire)}; }

void copy_table(StateCopy* out) {
  std::vector<std::string_view> names;
  table().copy_to(&out->range_nodes, &names);
  out->range_names.assign(names.begin(), names.end());
}

void after_fork_child() {
  table().reset_after_fork();
  markers().reset_after_fork();
  g_domain_lock.reset();
  g_open_lock.reset();
}

}  // namespace memtrace::preload::ranges
