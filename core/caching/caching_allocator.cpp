// The caching allocator's policy (docs/caching-allocator.md, "PyTorch's policy, and what memtrace
// adds") and memtrace's deferred frees: construction and teardown here; each operation in its
// own file (core/caching/allocator_impl.hpp lists them).
#include "core/caching/allocator_impl.hpp"

#include <utility>

namespace memtrace::caching {

CachingAllocator::Impl::Impl(Backend& b, AllocConf c, Listener* l)
    : backend(b), conf(std::move(c)), listener(l) {
  pools[0].kind = PoolKind::Small;
  pools[1].kind = PoolKind::Large;
  size_t free_b = 0;
  if (backend.mem_get_info(&free_b, &device_total) != 0) device_total = 0;
  if (conf.per_process_memory_fraction) {
    limit_set = true;
    allowed_max = static_cast<size_t>(*conf.per_process_memory_fraction * static_cast<double>(device_total));
  }
  expandable = (conf.expandable_segments || conf.policy == Policy::Remap) && backend.supports_expandable();
  remap = expandable && conf.policy == Policy::Remap;
  // Only with deferred frees: PyTorch's own policy (what `memtrace replay` models, frees at
  // once) always merges. Expandable segments merge to keep their mapped runs whole.
  reuse = conf.deferred_free && !expandable;
}

CachingAllocator::Impl::~Impl() {
  // Everything goes back, whatever its state: the owner is done with the device memory.
  for (auto& [base, s] : segments) {
    if (!s->expandable) {
      backend.free(s->base, s->size);
    } else {
      unmap_all_mapped(s);
      backend.release(s->base, s->size);
    }
    for (Block* b = s->head; b;) {
      Block* n = b->next;
      delete b;
      b = n;
    }
    delete s;
  }
  for (Block* b : block_cache) delete b;
}

CachingAllocator::CachingAllocator(Backend& backend, AllocConf conf, Listener* listener)
    : impl_(std::make_unique<Impl>(backend, std::move(conf), listener)) {}
CachingAllocator::~CachingAllocator() = default;

const AllocConf& CachingAllocator::conf() const { return impl_->conf; }
bool CachingAllocator::expandable_active() const { return impl_->expandable; }

}  // namespace memtrace::caching
