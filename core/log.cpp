#include "core/log.hpp"

#include <unistd.h>

#include <atomic>
#include <cerrno>

namespace memtrace::log {

namespace {
std::atomic<bool> g_debug{false};
}

void write_line(const char* data, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(STDERR_FILENO, data, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return;
    }
    data += w;
    n -= static_cast<size_t>(w);
  }
}

bool debug_enabled() { return g_debug.load(std::memory_order_relaxed); }
void set_debug(bool on) { g_debug.store(on, std::memory_order_relaxed); }

}  // namespace memtrace::log
