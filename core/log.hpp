// memtrace's voice on stderr. Formats into a stack buffer and writes with one write(2):
// no allocation, no stdio locks, safe from any thread and after other libraries' teardown.
// Writing never raises SIGPIPE in the program and never changes its errno.
#pragma once
#include <fmt/format.h>

#include <cstddef>

namespace memtrace::log {

void write_line(const char* data, size_t n);
// From now on, write to MEMTRACE_LOG's file (appended, created 0600) when log_path is set, else to
// a duplicate of the current stderr, taken now. Called once as memtrace loads.
void set_destination(const char* log_path);
bool debug_enabled();
void set_debug(bool on);

// One line: prefix, formatted message, newline; truncated to fit the stack buffer.
template <typename... Args>
void emit(const char* prefix, fmt::format_string<Args...> f, Args&&... args) {
  char buf[1024];
  auto r = fmt::format_to_n(buf, sizeof(buf) - 1, "{}", prefix);
  r = fmt::format_to_n(r.out, sizeof(buf) - 1 - (r.out - buf), f, std::forward<Args>(args)...);
  size_t n = static_cast<size_t>(r.out - buf);
  if (n > sizeof(buf) - 1) n = sizeof(buf) - 1;
  buf[n++] = '\n';
  write_line(buf, n);
}

template <typename... Args>
void warn(fmt::format_string<Args...> f, Args&&... args) {
  emit("memtrace: warning: ", f, std::forward<Args>(args)...);
}

template <typename... Args>
void info(fmt::format_string<Args...> f, Args&&... args) {
  emit("memtrace: ", f, std::forward<Args>(args)...);
}

template <typename... Args>
void debug(fmt::format_string<Args...> f, Args&&... args) {
  if (debug_enabled()) emit("memtrace: debug: ", f, std::forward<Args>(args)...);
}

}  // namespace memtrace::log
