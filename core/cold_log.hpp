// memtrace's spdlog logger, for code that runs where allocating and taking locks are fine and the
// C++ runtime is up: reading the configuration as recording starts (core/config.cpp), the
// session's start (preload/session.cpp), the line that says a snapshot was written
// (preload/dumps.cpp). Its sink writes each line through log::write_line, so it goes to the same
// descriptor, with the same prefixes, as core/log.hpp's lines, and its level is log::level().
// Never from a signal handler, a hook's allocation path, or exit-time code: those use
// core/log.hpp (docs/logging.md, "Where spdlog is used, and where not").
#pragma once
#include <spdlog/logger.h>

namespace memtrace::log {

// Built on first use and never destroyed; not in spdlog's registry.
spdlog::logger& cold();

}  // namespace memtrace::log
