// memtrace's public API, the library's side: the memtrace_v1_* names that libmemtrace_api.a and the
// Python module look up in the process (include/memtrace/memtrace_v1.h, docs/api.md). Each one is
// called by the program from any of its threads, never inside a hook: it starts the session as a
// hooked call would, keeps the program's errno and never throws.
#include <cerrno>
#include <cstring>
#include <memory>
#include <string_view>
#include <vector>

#include "include/memtrace/memtrace.h"
#include "include/memtrace/memtrace_v1.h"
#include "preload/dumps.hpp"
#include "preload/ranges.hpp"
#include "preload/session.hpp"

static_assert(MEMTRACE_STATS_MAX_DEVICES == memtrace::kMaxDevices, "one device slot per recorder device");
static_assert(MEMTRACE_STATS_MAX_OWNERS == memtrace::kMaxOwners, "one owner slot per owner id");

namespace memtrace::preload {
namespace {

// The session, started if need be, with the program's errno kept across its start.
Session* recording_session() {
  const int saved = errno;
  Session* s = session_if_active();
  errno = saved;
  return s;
}

void copy_usage(const UsageStats& from, memtrace_usage* to) {
  to->current = from.current;
  to->peak = from.peak;
  to->allocations = from.allocations;
}

void copy_name(const std::string& from, char (&to)[MEMTRACE_STATS_OWNER_NAME]) {
  const size_t n = from.size() < sizeof to - 1 ? from.size() : sizeof to - 1;
  std::memcpy(to, from.data(), n);
  to[n] = '\0';
}

int fill_stats(Session& s, void* out) {
  uint32_t size = 0;
  std::memcpy(&size, out, sizeof size);
  if (size < sizeof(struct memtrace_memory_stats)) return MEMTRACE_INVALID_ARGUMENT;  // version 1 is the first
  // Built whole and copied once: the program's struct is written in one place, with its size kept.
  auto st = std::make_unique<struct memtrace_memory_stats>();
  auto usage = std::make_unique<UsageTotals>();
  s.recorder.usage(usage.get());
  const std::vector<std::string> names = s.owners.names();
  st->size = size;
  st->version = MEMTRACE_STATS_VERSION;
  st->device_count = usage->device_count;
  copy_usage(usage->reserved_all, &st->all_devices.reserved);
  copy_usage(usage->allocated_all, &st->all_devices.allocated);
  for (int d = 0; d < kMaxDevices; ++d) {
    copy_usage(usage->reserved[d], &st->device[d].reserved);
    copy_usage(usage->allocated[d], &st->device[d].allocated);
  }
  copy_usage(usage->host, &st->host_pinned);
  const int owners = names.size() < size_t{kMaxOwners} ? static_cast<int>(names.size()) : kMaxOwners;
  st->owner_count = owners;
  for (int i = 0; i < owners; ++i) {
    copy_name(names[i], st->owner[i].name);
    copy_usage(usage->owner_device[i], &st->owner[i].device);
  }
  std::memcpy(out, st.get(), sizeof *st);
  return MEMTRACE_OK;
}

// Whatever a call does inside memtrace, the program gets a status, never an exception.
template <typename F>
int guarded(F&& f) {
  const int saved = errno;
  int rc = MEMTRACE_ERROR;
  try {
    rc = f();
  } catch (...) {
    rc = MEMTRACE_ERROR;
  }
  errno = saved;
  return rc;
}

}  // namespace
}  // namespace memtrace::preload

using memtrace::preload::guarded;
using memtrace::preload::recording_session;
namespace ranges = memtrace::preload::ranges;

extern "C" __attribute__((visibility("default"))) int memtrace_v1_recording(void) {
  return guarded([]() -> int { return recording_session() ? MEMTRACE_OK : MEMTRACE_NOT_RECORDING; });
}

extern "C" __attribute__((visibility("default"))) int memtrace_v1_range_push(const char* name) {
  return guarded([name]() -> int {
    if (!name) return MEMTRACE_INVALID_ARGUMENT;
    if (!recording_session()) return MEMTRACE_NOT_RECORDING;
    ranges::push(0, std::string_view(name));
    return MEMTRACE_OK;
  });
}

extern "C" __attribute__((visibility("default"))) int memtrace_v1_range_pop(void) {
  return guarded([]() -> int {
    if (!recording_session()) return MEMTRACE_NOT_RECORDING;
    return ranges::pop(0) < 0 ? MEMTRACE_NO_OPEN_RANGE : MEMTRACE_OK;
  });
}

extern "C" __attribute__((visibility("default"))) int memtrace_v1_annotate(const char* text) {
  return guarded([text]() -> int {
    if (!text) return MEMTRACE_INVALID_ARGUMENT;
    if (!recording_session()) return MEMTRACE_NOT_RECORDING;
    ranges::mark(0, std::string_view(text));
    return MEMTRACE_OK;
  });
}

extern "C" __attribute__((visibility("default"))) int memtrace_v1_dump(const char* path, char* written_path,
                                                                      size_t written_path_size) {
  return guarded([=]() -> int {
    if (written_path && written_path_size) written_path[0] = '\0';
    if (path && !*path) return MEMTRACE_INVALID_ARGUMENT;
    using memtrace::preload::RequestedDump;
    RequestedDump d = memtrace::preload::dump_requested(path ? std::string_view(path) : std::string_view());
    if (written_path && written_path_size && d.outcome == RequestedDump::Written) {
      const size_t n = d.path.size() < written_path_size - 1 ? d.path.size() : written_path_size - 1;
      std::memcpy(written_path, d.path.data(), n);
      written_path[n] = '\0';
    }
    switch (d.outcome) {
      case RequestedDump::Written: return MEMTRACE_OK;
      case RequestedDump::NotRecording: return MEMTRACE_NOT_RECORDING;
      case RequestedDump::AfterExit: return MEMTRACE_FINISHED;
      case RequestedDump::Failed: return MEMTRACE_WRITE_FAILED;
    }
    return MEMTRACE_ERROR;
  });
}

extern "C" __attribute__((visibility("default"))) int memtrace_v1_memory_stats(void* stats) {
  return guarded([stats]() -> int {
    if (!stats) return MEMTRACE_INVALID_ARGUMENT;
    memtrace::preload::Session* s = recording_session();
    if (!s) return MEMTRACE_NOT_RECORDING;
    return memtrace::preload::fill_stats(*s, stats);
  });
}
