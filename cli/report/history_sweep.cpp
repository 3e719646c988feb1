#include "cli/report/history_sweep.hpp"

#include <algorithm>
#include <unordered_map>

namespace memtrace::report {

using reader::Action;
using reader::BlockState;

namespace {

constexpr uint32_t kNone = UINT32_MAX;
constexpr uint32_t kSelf = UINT32_MAX - 1;  // a free whose alloc is not in the history: it closes itself

// The live set: items in a vector (removal swaps the last one in), found by key through pos_.
// Keys: an alloc's entry index, a free-without-alloc's own entry index, n + k for the k-th block
// older than the history.
class LiveSet {
 public:
  LiveSet(size_t keys, uint32_t owners, uint32_t groups, uint32_t ranges)
      : pos_(keys, kNone), owner_bytes_(owners, 0), owner_count_(owners, 0), group_bytes_(groups, 0),
        range_bytes_(ranges, 0) {}
  void add(uint32_t key, const LiveItem& it) {
    pos_[key] = static_cast<uint32_t>(items_.size());
    items_.push_back(it);
    keys_.push_back(key);
    total_ += it.bytes;
    owner_bytes_[it.owner] += it.bytes;
    ++owner_count_[it.owner];
    group_bytes_[it.group] += it.bytes;
    if (!range_bytes_.empty()) range_bytes_[it.range] += it.bytes;
  }
  void remove(uint32_t key) {
    uint32_t p = pos_[key];
    if (p == kNone) return;
    const LiveItem& it = items_[p];
    total_ -= it.bytes;
    owner_bytes_[it.owner] -= it.bytes;
    --owner_count_[it.owner];
    group_bytes_[it.group] -= it.bytes;
    if (!range_bytes_.empty()) range_bytes_[it.range] -= it.bytes;
    items_[p] = items_.back();
    keys_[p] = keys_.back();
    pos_[keys_[p]] = p;
    items_.pop_back();
    keys_.pop_back();
    pos_[key] = kNone;
  }
  uint64_t total() const { return total_; }
  const std::vector<LiveItem>& items() const { return items_; }
  const std::vector<uint64_t>& owner_bytes() const { return owner_bytes_; }
  const std::vector<uint64_t>& owner_count() const { return owner_count_; }
  const std::vector<uint64_t>& group_bytes() const { return group_bytes_; }
  const std::vector<uint64_t>& range_bytes() const { return range_bytes_; }

 private:
  std::vector<uint32_t> pos_;
  std::vector<LiveItem> items_;
  std::vector<uint32_t> keys_;
  std::vector<uint64_t> owner_bytes_, owner_count_, group_bytes_, range_bytes_;
  uint64_t total_ = 0;
};

// Buckets one level's points as the sweep emits states.
class LevelBuilder {
 public:
  LevelBuilder(size_t buckets, bool exact, bool owners, int64_t first, int64_t last, uint32_t owner_count,
               uint32_t group_count, uint32_t range_count)
      : buckets_(buckets), exact_(exact), owners_(owners), first_(first), span_(std::max<int64_t>(last - first, 1)) {
    if (owners_) {
      level_.by_owner.assign(owner_count, {});
      level_.by_stack.assign(group_count, {});
      level_.by_range.assign(range_count, {});
    }
  }
  // One state: the totals and their splits by owner, by stack group and by range group.
  void state(int64_t x, uint64_t allocated, uint64_t reserved, const std::vector<uint64_t>& by_owner,
             const std::vector<uint64_t>& by_stack, const std::vector<uint64_t>& by_range) {
    size_t b = exact_ ? SIZE_MAX : bucket(x);
    if (exact_ || b != current_ || level_.t.empty()) {
      current_ = b;
      level_.t.push_back(x);
      level_.allocated.push_back(allocated);
      level_.reserved.push_back(reserved);
      if (owners_) {
        for (size_t o = 0; o < by_owner.size(); ++o) level_.by_owner[o].push_back(by_owner[o]);
        for (size_t g = 0; g < by_stack.size(); ++g) level_.by_stack[g].push_back(by_stack[g]);
        for (size_t g = 0; g < by_range.size(); ++g) level_.by_range[g].push_back(by_range[g]);
      }
      return;
    }
    const size_t last = level_.t.size() - 1;
    if (reserved > level_.reserved[last]) level_.reserved[last] = reserved;
    if (allocated > level_.allocated[last]) {
      level_.allocated[last] = allocated;
      level_.t[last] = x;
      if (owners_) {
        for (size_t o = 0; o < by_owner.size(); ++o) level_.by_owner[o][last] = by_owner[o];
        for (size_t g = 0; g < by_stack.size(); ++g) level_.by_stack[g][last] = by_stack[g];
        for (size_t g = 0; g < by_range.size(); ++g) level_.by_range[g][last] = by_range[g];
      }
    }
  }
  SeriesLevel take() { return std::move(level_); }

 private:
  size_t bucket(int64_t x) const {
    __int128 b = static_cast<__int128>(x - first_) * static_cast<__int128>(buckets_) / span_;
    return static_cast<size_t>(std::clamp<__int128>(b, 0, static_cast<__int128>(buckets_ - 1)));
  }
  size_t buckets_;
  bool exact_, owners_;
  int64_t first_, span_;
  size_t current_ = SIZE_MAX;
  SeriesLevel level_;
};

Moment take_moment(const LiveSet& live, uint64_t reserved, int64_t entry, int64_t x, const Limits& lim,
                   std::vector<uint64_t>& stack_bytes, std::vector<reader::StackId>& touched) {
  Moment m;
  m.entry = entry;
  m.t = x;
  m.allocated = live.total();
  m.reserved = reserved;
  m.count = live.items().size();
  m.by_owner = live.owner_bytes();
  m.count_by_owner = live.owner_count();
  m.by_stack = live.group_bytes();
  m.by_range = live.range_bytes();
  for (const LiveItem& it : live.items()) {
    if (stack_bytes[it.stack] == 0) touched.push_back(it.stack);
    stack_bytes[it.stack] += it.bytes;
  }
  for (reader::StackId st : touched) {
    if (stack_bytes[st] > 0) m.stacks.push_back({st, stack_bytes[st]});
    stack_bytes[st] = 0;
  }
  touched.clear();
  std::sort(m.stacks.begin(), m.stacks.end(),
            [](const StackBytes& a, const StackBytes& b) { return a.bytes != b.bytes ? a.bytes > b.bytes : a.stack < b.stack; });
  m.top = live.items();
  const auto larger = [](const LiveItem& a, const LiveItem& b) {
    return a.bytes != b.bytes ? a.bytes > b.bytes : a.addr < b.addr;
  };
  if (m.top.size() > lim.top) {
    std::nth_element(m.top.begin(), m.top.begin() + static_cast<ptrdiff_t>(lim.top), m.top.end(), larger);
    m.top.resize(lim.top);
  }
  std::sort(m.top.begin(), m.top.end(), larger);
  return m;
}

bool is_live(BlockState st) { return st == BlockState::ActiveAllocated || st == BlockState::ActivePendingFree; }

// The series' split by stack: the `count` stacks holding the most bytes right after `peak` (from
// the pairing, without a second sweep), each its own group, every other stack in the last one.
// Returns each stack id's group.
std::vector<uint32_t> stack_groups(const std::vector<reader::TraceEntry>& tr, size_t n, const std::vector<uint32_t>& closes,
                                   const std::vector<LiveItem>& older, int64_t peak, size_t count,
                                   std::vector<reader::StackId>* top) {
  size_t max_stack = 0;
  for (size_t i = 0; i < n; ++i) max_stack = std::max<size_t>(max_stack, tr[i].stack);
  for (const LiveItem& it : older) max_stack = std::max<size_t>(max_stack, it.stack);
  std::vector<uint32_t> closed_at(n, kNone);
  for (size_t i = 0; i < n; ++i)
    if (closes[i] != kNone && closes[i] != kSelf) closed_at[closes[i]] = static_cast<uint32_t>(i);
  std::vector<uint64_t> at_peak(max_stack + 1, 0);
  for (const LiveItem& it : older) at_peak[it.stack] += it.bytes;
  for (size_t i = 0; i < n; ++i) {
    const bool open_at_peak = tr[i].action == Action::Alloc && static_cast<int64_t>(i) <= peak &&
                              (closed_at[i] == kNone || static_cast<int64_t>(closed_at[i]) > peak);
    const bool freed_after = closes[i] == kSelf && static_cast<int64_t>(i) > peak;  // alive from the start
    if (open_at_peak || freed_after) at_peak[tr[i].stack] += tr[i].size;
  }
  std::vector<reader::StackId> order;
  for (size_t st = 0; st <= max_stack; ++st)
    if (at_peak[st] > 0) order.push_back(static_cast<reader::StackId>(st));
  const size_t k = std::min(count, order.size());
  const auto larger = [&](reader::StackId a, reader::StackId b) { return at_peak[a] != at_peak[b] ? at_peak[a] > at_peak[b] : a < b; };
  std::partial_sort(order.begin(), order.begin() + static_cast<ptrdiff_t>(k), order.end(), larger);
  order.resize(k);
  std::vector<uint32_t> group_of(max_stack + 1, static_cast<uint32_t>(k));
  for (size_t g = 0; g < k; ++g) group_of[order[g]] = static_cast<uint32_t>(g);
  *top = std::move(order);
  return group_of;
}

}  // namespace

SweepOutput sweep_history(const SweepInput& in) {
  const auto& tr = *in.src.trace;
  const auto& x = *in.x;
  const Limits& lim = *in.limits;
  const size_t n = std::min<size_t>(tr.size(), kSelf - 1);
  const auto owner = [&](reader::StrId c) { return c < in.owner_of->size() ? (*in.owner_of)[c] : 0; };
  const auto range = [&](reader::RangeId r) -> uint32_t {
    return in.range_of && r < in.range_of->size() ? (*in.range_of)[r] : 0;
  };
  const uint32_t range_count = in.range_of ? in.range_count : 0;

  // Pairing, as analyze_history does it: which earlier item each entry closes.
  bool any_completed = false;
  for (size_t i = 0; i < n; ++i) any_completed = any_completed || tr[i].action == Action::FreeCompleted;
  const Action closer = any_completed ? Action::FreeCompleted : Action::FreeRequested;
  std::vector<uint32_t> closes(n, kNone);
  std::unordered_map<uint64_t, uint32_t> open;
  for (size_t i = 0; i < n; ++i) {
    const reader::TraceEntry& e = tr[i];
    if (e.action == Action::Alloc) {
      auto [it, inserted] = open.try_emplace(e.addr, static_cast<uint32_t>(i));
      if (!inserted) {
        closes[i] = it->second;
        it->second = static_cast<uint32_t>(i);
      }
    } else if (e.action == closer) {
      auto it = open.find(e.addr);
      if (it != open.end()) {
        closes[i] = it->second;
        open.erase(it);
      } else {
        closes[i] = kSelf;
      }
    }
  }
  // Blocks at the end that no kept alloc made were alive throughout.
  std::vector<LiveItem> older;
  int64_t reserved_end = 0, seg_net = 0;
  for (const reader::Segment& seg : *in.src.segments) {
    if (!in.src.has(seg)) continue;
    reserved_end += static_cast<int64_t>(seg.total_size);
    for (const reader::Block& b : seg.blocks)
      if (is_live(b.state) && !open.count(b.address))
        older.push_back({b.requested_size, b.address, 0, b.stack, 0, range(b.range)});
  }
  for (size_t i = 0; i < n; ++i) seg_net += static_cast<int64_t>(analysis::segment_delta(tr[i]));
  SweepOutput out;
  std::vector<uint32_t> group_of = stack_groups(tr, n, closes, older, in.peak_entry, lim.top_stacks, &out.top_stacks);
  const uint32_t groups = static_cast<uint32_t>(out.top_stacks.size() + 1);
  const auto group = [&](reader::StackId st) { return st < group_of.size() ? group_of[st] : groups - 1; };
  for (LiveItem& it : older) it.group = group(it.stack);

  LiveSet live(n + older.size(), in.owner_count, groups, range_count);
  for (size_t k = 0; k < older.size(); ++k) live.add(static_cast<uint32_t>(n + k), older[k]);
  for (size_t i = 0; i < n; ++i)
    if (closes[i] == kSelf)
      live.add(static_cast<uint32_t>(i),
               {tr[i].size, tr[i].addr, owner(tr[i].category), tr[i].stack, group(tr[i].stack), range(tr[i].range)});
  int64_t reserved = reserved_end - seg_net;

  const int64_t first = n ? x[0] : 0, last = n ? x[n - 1] : 0;
  std::vector<LevelBuilder> levels;
  for (size_t l = 0; l < lim.levels.size(); ++l) {
    const bool exact = n + 1 <= lim.levels[l];
    levels.emplace_back(lim.levels[l], exact, l < lim.owner_levels, first, last, in.owner_count, groups, range_count);
    if (exact) break;  // finer levels would repeat it
  }
  std::vector<uint64_t> stack_bytes;
  size_t max_stack = 0;
  for (size_t i = 0; i < n; ++i) max_stack = std::max<size_t>(max_stack, tr[i].stack);
  for (const LiveItem& it : older) max_stack = std::max<size_t>(max_stack, it.stack);
  stack_bytes.assign(max_stack + 1, 0);
  std::vector<reader::StackId> touched;
  size_t next_cp = 0;
  auto emit = [&](int64_t entry, int64_t at) {
    const uint64_t r = reserved > 0 ? static_cast<uint64_t>(reserved) : 0;
    for (LevelBuilder& lb : levels) lb.state(at, live.total(), r, live.owner_bytes(), live.group_bytes(), live.range_bytes());
    while (next_cp < in.checkpoints.size() && in.checkpoints[next_cp] == entry) {
      out.moments.push_back(take_moment(live, r, entry, at, lim, stack_bytes, touched));
      if (in.on_moment) in.on_moment(out.moments.back());
      ++next_cp;
    }
  };
  emit(-1, first);
  for (size_t i = 0; i < n; ++i) {
    const reader::TraceEntry& e = tr[i];
    if (e.action == Action::Alloc) {
      if (closes[i] != kNone) live.remove(closes[i]);
      live.add(static_cast<uint32_t>(i), {e.size, e.addr, owner(e.category), e.stack, group(e.stack), range(e.range)});
    } else if (e.action == closer) {
      live.remove(closes[i] == kSelf ? static_cast<uint32_t>(i) : closes[i]);
    } else {
      reserved += static_cast<int64_t>(analysis::segment_delta(e));
    }
    emit(static_cast<int64_t>(i), x[i]);
  }
  for (LevelBuilder& lb : levels) out.series.push_back(lb.take());
  return out;
}

}  // namespace memtrace::report
