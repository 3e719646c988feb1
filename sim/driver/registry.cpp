// The address map of everything the driver has handed out: the authority for frees,
// pointer attributes, memcpy validation and context teardown. Readers (pointer queries,
// memcpy checks) share the lock; the allocators' own locks are never taken under it.
#include <shared_mutex>

#include "internal.h"

namespace sim {
namespace {

struct Registry {
  std::shared_mutex mu;
  std::map<uint64_t, Allocation> by_base;
};

Registry& reg() {
  static Registry* r = new Registry();
  return *r;
}

// The entry containing p, or end().
std::map<uint64_t, Allocation>::iterator containing(Registry& r, uint64_t p) {
  auto it = r.by_base.upper_bound(p);
  if (it == r.by_base.begin()) return r.by_base.end();
  --it;
  return p - it->second.base < it->second.size ? it : r.by_base.end();
}

}  // namespace

uint64_t next_buffer_id() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

bool registry_insert(const Allocation& a) {
  Registry& r = reg();
  std::unique_lock lock(r.mu);
  auto next = r.by_base.lower_bound(a.base);
  if (next != r.by_base.end() && next->first < a.base + a.size) return false;
  if (next != r.by_base.begin()) {
    auto prev = std::prev(next);
    if (prev->second.base + prev->second.size > a.base) return false;
  }
  r.by_base.emplace_hint(next, a.base, a);
  return true;
}

std::optional<Allocation> registry_find(uint64_t p) {
  Registry& r = reg();
  std::shared_lock lock(r.mu);
  auto it = containing(r, p);
  if (it == r.by_base.end()) return std::nullopt;
  return it->second;
}

std::optional<Allocation> registry_take(uint64_t base, const AllocFilter& accept) {
  Registry& r = reg();
  std::unique_lock lock(r.mu);
  auto it = r.by_base.find(base);
  if (it == r.by_base.end() || !accept(it->second)) return std::nullopt;
  Allocation a = it->second;
  r.by_base.erase(it);
  return a;
}

std::optional<Allocation> registry_mark_free_pending(uint64_t base, const AllocFilter& accept) {
  Registry& r = reg();
  std::unique_lock lock(r.mu);
  auto it = r.by_base.find(base);
  if (it == r.by_base.end() || it->second.free_pending || !accept(it->second)) return std::nullopt;
  it->second.free_pending = true;
  return it->second;
}

std::vector<Allocation> registry_take_all(const AllocFilter& accept) {
  Registry& r = reg();
  std::unique_lock lock(r.mu);
  std::vector<Allocation> out;
  for (auto it = r.by_base.begin(); it != r.by_base.end();) {
    if (accept(it->second)) {
      out.push_back(it->second);
      it = r.by_base.erase(it);
    } else {
      ++it;
    }
  }
  return out;
}

// A range may continue from one entry into the next only across VMM mappings, which together
// form one virtual range; running off the end of any other allocation is an overrun, even
// into a neighbour.
bool registry_covers(uint64_t p, uint64_t n) {
  if (n == 0) return true;
  if (p + n < p) return false;
  Registry& r = reg();
  std::shared_lock lock(r.mu);
  const uint64_t end = p + n;
  auto it = containing(r, p);
  while (it != r.by_base.end()) {
    const Allocation& a = it->second;
    if (a.base + a.size >= end) return true;
    auto next = std::next(it);
    if (next == r.by_base.end() || next->first != a.base + a.size || a.kind != Kind::VmmMapping ||
        next->second.kind != Kind::VmmMapping) {
      return false;
    }
    it = next;
  }
  return false;
}

}  // namespace sim
