// Environment of the simulated driver: SIMCUDA_DEVICES, SIMCUDA_MEMORY, SIMCUDA_LOG.
// Read once, on the first call into the library (cuGetProcAddress comes before cuInit, so
// this cannot wait for cuInit). The result is never destroyed: the CUDA runtime and other
// libraries call the driver from atexit handlers and static destructors.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

#include "internal.h"

namespace sim {
namespace {

bool parse_u64(const char* s, uint64_t* out, const char** end) {
  if (!std::isdigit(static_cast<unsigned char>(*s))) return false;
  uint64_t v = 0;
  for (; std::isdigit(static_cast<unsigned char>(*s)); ++s) {
    unsigned digit = static_cast<unsigned>(*s - '0');
    if (v > (UINT64_MAX - digit) / 10) return false;
    v = v * 10 + digit;
  }
  *out = v;
  *end = s;
  return true;
}

bool parse_devices(const char* s, int* out) {
  uint64_t v;
  const char* end;
  if (!parse_u64(s, &v, &end) || *end != '\0' || v > kMaxDevices) return false;
  *out = static_cast<int>(v);
  return true;
}

// Binary suffixes, as GPU memory sizes are always quoted.
bool parse_memory(const char* s, uint64_t* out) {
  uint64_t v;
  const char* end;
  if (!parse_u64(s, &v, &end)) return false;
  unsigned shift = 0;
  switch (std::toupper(static_cast<unsigned char>(*end))) {
    case '\0': break;
    case 'K': shift = 10; break;
    case 'M': shift = 20; break;
    case 'G': shift = 30; break;
    case 'T': shift = 40; break;
    default: return false;
  }
  if (shift != 0 && end[1] != '\0') return false;
  // 64 TiB per device keeps 16 devices' reservations inside a 47-bit address space.
  constexpr uint64_t kMax = 64ull << 40;
  if (v == 0 || v > (kMax >> shift)) return false;
  *out = v << shift;
  return true;
}

Config* load() {
  auto* c = new Config();
  if (const char* s = std::getenv("SIMCUDA_DEVICES"); s != nullptr && !parse_devices(s, &c->devices)) {
    warn("SIMCUDA_DEVICES='%s' is malformed (expected 0..%d); using the default 1", s, kMaxDevices);
    c->devices = 1;
  }
  if (const char* s = std::getenv("SIMCUDA_MEMORY"); s != nullptr && !parse_memory(s, &c->memory)) {
    warn("SIMCUDA_MEMORY='%s' is malformed (expected bytes with optional K/M/G/T suffix); "
         "using the default 16G", s);
    c->memory = 16ull << 30;
  }
  if (const char* s = std::getenv("SIMCUDA_LOG"); s != nullptr && *s != '\0') {
    c->log_fd = ::open(s, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (c->log_fd < 0) warn("SIMCUDA_LOG='%s' cannot be opened (%s); logging disabled", s, std::strerror(errno));
  }
  return c;
}

}  // namespace

const Config& config() {
  static std::atomic<const Config*> slot{nullptr};
  return build_once(slot, load);
}

// One write(2) per line keeps concurrent warnings and log lines from interleaving.
void warn(const char* fmt, ...) {
  char buf[512];
  int n = std::snprintf(buf, sizeof buf, "simcuda: warning: ");
  va_list ap;
  va_start(ap, fmt);
  int m = std::vsnprintf(buf + n, sizeof buf - n - 1, fmt, ap);
  va_end(ap);
  size_t len = static_cast<size_t>(n) + (m < 0 ? 0 : std::min<size_t>(m, sizeof buf - n - 2));
  buf[len++] = '\n';
  ssize_t r = ::write(STDERR_FILENO, buf, len);
  (void)r;
}

void log_write(const char* text, size_t len) {
  int fd = config().log_fd;
  if (fd < 0) return;
  ssize_t r = ::write(fd, text, len);
  (void)r;
}

}  // namespace sim
