#include "unwind/symbolizer_reuse.hpp"

#include <unistd.h>

#include <functional>
#include <new>
#include <string_view>

namespace memtrace::unwind {

auto SymbolizerReuse::key_of(const std::vector<LoadedObject>& history) -> Key {
  Key k;
  k.pid = static_cast<int>(getpid());
  k.generation = loader_generation();
  uint64_t h = history.size();
  auto mix = [&h](uint64_t v) { h = (h ^ v) * 0x100000001b3ULL; };
  for (const LoadedObject& o : history) {
    mix(std::hash<std::string_view>{}(o.path));
    mix(o.start);
    mix(o.end);
    mix(o.bias);
  }
  k.history = h;
  return k;
}

SymbolizerReuse::Lease SymbolizerReuse::acquire(const std::vector<LoadedObject>& history) {
  Lease lease;
  lease.hold_ = std::unique_lock<std::mutex>(mu_);
  const Key now = key_of(history);
  if (sym_ != nullptr && now == key_) {
    lease.sym_ = sym_.get();
    lease.reused_ = true;
    return lease;
  }
  sym_.reset();  // first: the old one's memory is given back before the new one takes its own
  auto fresh = std::make_unique<Symbolizer>();
  fresh->add_unloaded_modules(history);
  sym_ = std::move(fresh);
  key_ = now;
  lease.sym_ = sym_.get();
  return lease;
}

void SymbolizerReuse::after_fork_child() {
  (void)sym_.release();  // deliberately leaked: see the header
  new (&mu_) std::mutex();
  key_ = Key{};
}

SymbolizerReuse& dump_symbolizers() {
  static SymbolizerReuse* const kept = new SymbolizerReuse();
  return *kept;
}

}  // namespace memtrace::unwind
