#include "unwind/libdw_lock.hpp"

#include <pthread.h>

#include <new>

namespace memtrace::unwind::detail {

namespace {
alignas(std::recursive_mutex) unsigned char g_storage[sizeof(std::recursive_mutex)];

std::recursive_mutex* make() {
  auto* m = new (g_storage) std::recursive_mutex();
  // In the child only the forking thread exists: whatever held the lock is gone. (No
  // destructor for the old one: it is not in use by anyone that still exists.)
  pthread_atfork(nullptr, nullptr, [] { new (g_storage) std::recursive_mutex(); });
  return m;
}
}  // namespace

std::recursive_mutex& libdw_mutex() {
  static std::recursive_mutex* m = make();
  return *m;
}

}  // namespace memtrace::unwind::detail
