// Static storage for an object that is built before anything runs and never destroyed. memtrace's
// state must be there for the first hooked call, which may come from another library's constructor
// before memtrace's own have run (so it must be constant-initialised: declare it constinit), and
// must outlive the destructors that run at exit, after which the runtime and other libraries still
// call the driver and the exit snapshot is still written.
#pragma once

namespace memtrace::preload {

template <typename T>
union Immortal {
  constexpr Immortal() : value() {}
  ~Immortal() {}  // deliberately leaves `value` alone
  T value;
};

}  // namespace memtrace::preload
