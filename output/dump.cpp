#include "output/dump.hpp"

#include <exception>
#include <new>

#include <fmt/format.h>

#include "core/log.hpp"
#include "format/atomic_file.hpp"
#include "format/pickle_writer.hpp"
#include "output/snapshot_builder.hpp"
#include "output/summary.hpp"

namespace memtrace::output {

namespace {

std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return s;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

size_t estimate_bytes(const StateCopy& s) {
  return (size_t{1} << 16) + s.trace.size() * 64 + s.live.size() * 200;
}

}  // namespace

DumpReport dump_with_source(const StateCopy& state, FrameSource& frames, const DumpRequest& request,
                            const PathContext& context, const std::string& exe_path,
                            std::chrono::steady_clock::time_point start) {
  DumpReport rep;
  std::string why_not;
  try {
    if (request.path_template.empty()) {
      why_not = "MEMTRACE_OUTPUT is empty";
    } else {
      rep.path = expand_output_path(request.path_template, context);
      BuildOptions bo;
      bo.include_frames = request.include_frames;
      bo.meta.pid = context.pid;
      bo.meta.exe = exe_path;
      bo.meta.host = context.host;
      bo.meta.rank = context.rank;
      bo.meta.sequence = request.sequence;
      bo.meta.reason = dump_kind_name(request.kind);
      bo.allocator = request.allocator;

      format::PickleWriter w(estimate_bytes(state));
      try {
        build_snapshot(state, frames, bo, w);
      } catch (const std::bad_alloc&) {
        throw;
      } catch (const std::exception& e) {
        // A symbolization problem must not cost the whole snapshot: build it again without stacks.
        log::warn("symbolization failed ({}); the snapshot is written without frames", one_line(e.what()));
        NullFrameSource none;
        bo.include_frames = false;
        w.clear();
        build_snapshot(state, none, bo, w);
      }
      std::string err;
      if (format::write_file_atomically(rep.path, w.bytes(), &err)) {
        rep.written = true;
        rep.bytes = w.size();
      } else {
        rep.error = one_line(err);
      }
    }
  } catch (const std::bad_alloc&) {
    rep.written = false;
    rep.error = fmt::format("cannot write '{}': out of memory while building the snapshot", rep.path);
  } catch (const std::exception& e) {
    rep.written = false;
    rep.error = one_line(fmt::format("cannot write '{}': {}", rep.path, e.what()));
  } catch (...) {
    rep.written = false;
    rep.error = fmt::format("cannot write '{}': unexpected error", rep.path);
  }
  rep.seconds = seconds_since(start);
  if (!rep.written && !rep.error.empty()) log::error("snapshot not written: {}", rep.error);

  if (request.print_summary && log::enabled(log::Level::info)) {  // the summary is an info message
    try {
      SummaryInfo si;
      si.program = exe_path;
      si.pid = context.pid;
      si.written = rep.written;
      si.path = rep.path;
      si.why_not = rep.error.empty() ? why_not : std::string("see the error above");
      si.bytes = rep.bytes;
      si.seconds = rep.seconds;
      si.report_follows = request.report_follows;
      std::string text;
      try {
        text = format_summary(state, frames, si);
      } catch (...) {
        NullFrameSource none;
        text = format_summary(state, none, si);
      }
      log::write_line(text.data(), text.size());
    } catch (...) {
    }
  }
  return rep;
}

}  // namespace memtrace::output
