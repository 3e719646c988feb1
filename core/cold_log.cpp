#include "core/cold_log.hpp"

#include <spdlog/sinks/sink.h>

#include <memory>
#include <string>

#include "core/log.hpp"

namespace memtrace::log {

namespace {

// Each message is one write_line of prefix, text and newline, whole (no truncation: this path may
// allocate). No pattern, no formatter state, no mutex: write_line is one write(2) per line, so
// lines from several threads never interleave, and a forked child finds no lock held.
class LineSink final : public spdlog::sinks::sink {
 public:
  void log(const spdlog::details::log_msg& msg) override {
    fmt::memory_buffer line;
    const std::string_view prefix = line_prefix(static_cast<Level>(msg.level));
    line.append(prefix.data(), prefix.data() + prefix.size());
    line.append(msg.payload.data(), msg.payload.data() + msg.payload.size());
    line.push_back('\n');
    write_line(line.data(), line.size());
  }
  void flush() override {}
  void set_pattern(const std::string&) override {}
  void set_formatter(std::unique_ptr<spdlog::formatter>) override {}
};

spdlog::logger* make_logger() {
  // Never deleted: a dump thread may still say a snapshot was written while static destructors run.
  auto* l = new spdlog::logger("memtrace", std::make_shared<LineSink>());
  // spdlog's own handler would print to the stdio stderr, outside memtrace's destination.
  l->set_error_handler([](const std::string& what) { warn("a log line could not be written ({})", what); });
  l->flush_on(spdlog::level::off);
  return l;
}

}  // namespace

spdlog::logger& cold() {
  static spdlog::logger* const logger = make_logger();
  // One level for both paths: spdlog's filters (before formatting) by memtrace's, read here.
  logger->set_level(static_cast<spdlog::level::level_enum>(level()));
  return *logger;
}

}  // namespace memtrace::log
