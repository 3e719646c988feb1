// memtrace's voice: one level and one destination for all its lines (docs/logging.md).
// This is the path every caller may use, hooks and exit-time code included: it formats into a
// stack buffer and writes with one write(2): no allocation, no stdio locks, safe from any thread
// and after other libraries' teardown. Writing never raises SIGPIPE in the program and never
// changes its errno. Cold code may log through spdlog instead (core/cold_log.hpp); both end in
// write_line, under the same level.
#pragma once
#include <fmt/format.h>

#include <atomic>
#include <cstddef>
#include <string_view>

namespace memtrace::log {

// spdlog::level::level_enum's numbers (core/log.cpp checks), so that spdlog's level and this one
// are the same value. spdlog's `critical` (5) is not used: nothing memtrace says is above error.
enum class Level : int { trace = 0, debug = 1, info = 2, warn = 3, error = 4, off = 6 };

namespace detail {
extern std::atomic<int> g_level;  // constant-initialised (core/log.cpp): right before any constructor
}

// Whether a line at `l` is written now. A relaxed load: callable anywhere.
inline bool enabled(Level l) {
  return static_cast<int>(l) >= detail::g_level.load(std::memory_order_relaxed);
}
inline bool debug_enabled() { return enabled(Level::debug); }
Level level();
void set_level(Level l);

// trace, debug, info, warn (or warning), error (or err), off; any case, spaces around ignored.
// spdlog's own names through spdlog::level::from_str, less `critical`. Allocates nothing (it runs
// in the dlsym hook, possibly before any constructor).
bool parse_level(std::string_view text, Level* out);
// "trace", "debug", "info", "warn", "error", "off": what MEMTRACE_LOG_LEVEL takes.
const char* level_name(Level l);
// "memtrace: warning: ", "memtrace: " (info), ...: what begins a line at `l`.
const char* line_prefix(Level l);

// Writes the bytes as they are, whatever the level (callers check enabled() first).
void write_line(const char* data, size_t n);

// From now on, write to a duplicate of the current stderr, taken now. Called as memtrace loads.
void use_stderr();
// From now on, write to the file at `path` (appended, created 0600, not through a symbolic
// link; a FIFO without a reader fails at once). 0 on success; otherwise the open's errno, and the
// destination is unchanged.
int use_file(const char* path);
// Back to writing to whatever fd 2 is at each write, as before any of the above (tests).
void use_fd2();
// use_file, and when that fails (or log_path is null or empty), use_stderr; a failed open costs
// one warning naming the path. True when lines now go to the file.
bool set_destination(const char* log_path);

// One line: prefix, formatted message, newline; truncated to fit the stack buffer.
template <typename... Args>
void emit(Level l, fmt::format_string<Args...> f, Args&&... args) {
  char buf[1024];
  auto r = fmt::format_to_n(buf, sizeof(buf) - 1, "{}", line_prefix(l));
  r = fmt::format_to_n(r.out, sizeof(buf) - 1 - (r.out - buf), f, std::forward<Args>(args)...);
  size_t n = static_cast<size_t>(r.out - buf);
  if (n > sizeof(buf) - 1) n = sizeof(buf) - 1;
  buf[n++] = '\n';
  write_line(buf, n);
}

template <typename... Args>
void error(fmt::format_string<Args...> f, Args&&... args) {
  if (enabled(Level::error)) emit(Level::error, f, std::forward<Args>(args)...);
}

template <typename... Args>
void warn(fmt::format_string<Args...> f, Args&&... args) {
  if (enabled(Level::warn)) emit(Level::warn, f, std::forward<Args>(args)...);
}

template <typename... Args>
void info(fmt::format_string<Args...> f, Args&&... args) {
  if (enabled(Level::info)) emit(Level::info, f, std::forward<Args>(args)...);
}

template <typename... Args>
void debug(fmt::format_string<Args...> f, Args&&... args) {
  if (enabled(Level::debug)) emit(Level::debug, f, std::forward<Args>(args)...);
}

template <typename... Args>
void trace(fmt::format_string<Args...> f, Args&&... args) {
  if (enabled(Level::trace)) emit(Level::trace, f, std::forward<Args>(args)...);
}

}  // namespace memtrace::log
