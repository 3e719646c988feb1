// Everything in output/ that calls into unwind/: the symbolized frame source and dump_snapshot().
// Tests that fake their frames do not pull this file in, so they link without the unwinder.
#include <algorithm>
#include <chrono>
#include <exception>
#include <memory>
#include <optional>

#include <time.h>

#include "core/log.hpp"
#include "output/dump.hpp"
#include "output/frame_source.hpp"
#include "unwind/debug_cache.hpp"
#include "unwind/owner.hpp"
#include "unwind/python_frames.hpp"
#include "unwind/stack_table.hpp"
#include "unwind/symbolizer.hpp"
#include "unwind/symbolizer_reuse.hpp"

namespace memtrace::output {

SymbolizedFrameSource::SymbolizedFrameSource(const unwind::StackTable& table, unwind::Symbolizer& sym,
                                             std::string exe_path)
    : table_(table), sym_(sym), exe_(std::move(exe_path)), self_(unwind::self_module()) {}

std::string_view SymbolizedFrameSource::intern(std::string_view s) {
  auto it = strings_.find(std::string(s));
  if (it == strings_.end()) it = strings_.emplace(s).first;
  return *it;
}

void SymbolizedFrameSource::frames(uint32_t stack_id, std::vector<FrameRef>* out) {
  if (stack_id == 0) return;
  for (uintptr_t pc : table_.get(stack_id)) {
    if (unwind::PythonFrameInfo py; unwind::describe_python_frame(pc, &py)) {
      out->push_back(FrameRef{py.filename, py.name, py.line});
      continue;
    }
    std::string_view module = sym_.module_of(pc);
    if (!self_.empty() && module == self_) continue;  // memtrace's own frames never show
    std::string_view module_name;
    bool module_interned = false;
    // The symbolizer keeps the strings its frames view for its lifetime.
    for (const unwind::SymFrame& f : sym_.frames(pc)) {
      FrameRef r;
      if (!f.file.empty()) {
        r.filename = f.file;
      } else {
        if (!module_interned) {
          module_name = intern(module.empty() ? std::string_view("??") : module);
          module_interned = true;
        }
        r.filename = module_name;
      }
      r.name = f.function;
      r.line = f.line;
      out->push_back(r);
    }
  }
}

std::string SymbolizedFrameSource::owner(uint32_t stack_id) {
  if (stack_id == 0) return "unknown";
  auto pcs = table_.get(stack_id);
  if (pcs.empty()) return "unknown";
  std::string o = unwind::owner_of_stack(pcs, sym_, exe_);
  return o.empty() ? std::string("unknown") : o;
}

namespace {
// The native return addresses of every stack the snapshot will name, for
// Symbolizer::prepare (Python frames have their own reader).
std::vector<uintptr_t> native_addresses(const StateCopy& state, const unwind::StackTable& stacks) {
  std::vector<uint32_t> ids;
  ids.reserve(state.live.size() + state.handles.size() + state.trace.size());
  for (const auto& r : state.live) ids.push_back(r.stack_id);
  for (const auto& h : state.handles) ids.push_back(h.stack_id);
  for (const auto& t : state.trace) ids.push_back(t.stack_id);
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  std::vector<uintptr_t> pcs;
  for (uint32_t id : ids)
    if (id != 0)
      for (uintptr_t pc : stacks.get(id))
        if (unwind::PythonFrameInfo py; !unwind::describe_python_frame(pc, &py)) pcs.push_back(pc);
  return pcs;  // (prepare() drops repeats)
}

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}
}  // namespace

DumpReport dump_snapshot(const StateCopy& state, const unwind::StackTable& stacks, const DumpRequest& request) {
  auto start = std::chrono::steady_clock::now();
  try {
    PathContext ctx = path_context_from_process(request.sequence);
    std::string exe = executable_path();
    // The last dump's Symbolizer when nothing was loaded or unloaded since (symbolizer_reuse.hpp).
    std::optional<unwind::SymbolizerReuse::Lease> lease;
    unwind::Symbolizer* sym = nullptr;
    const double cpu0 = thread_cpu_seconds();
    try {
      lease.emplace(unwind::dump_symbolizers().acquire(request.module_history));
      sym = &lease->symbolizer();
    } catch (const std::exception& e) {
      log::debug("symbolizer unavailable ({}); writing without frames", e.what());
    } catch (...) {
      log::debug("symbolizer unavailable; writing without frames");
    }
    if (sym && request.include_frames) {
      try {
        const auto t0 = std::chrono::steady_clock::now();
        const auto rep = sym->prepare(native_addresses(state, stacks), request.symbolize_threads);
        log::debug("symbolized {} addresses ({} units or modules) on {} threads in {:.3f} s{}", rep.addresses,
                   rep.tasks, rep.threads,
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                   lease->reused() ? " (the last dump's symbolizer)" : "");
      } catch (const std::exception& e) {
        log::debug("symbolizing ahead failed ({}); frames are symbolized one by one", e.what());
      }
    }
    if (sym) {
      const double symbolize_cpu = thread_cpu_seconds() - cpu0;
      SymbolizedFrameSource src(stacks, *sym, exe);
      DumpReport rep = dump_with_source(state, src, request, ctx, exe, start);
      for (const std::string& w : unwind::take_debug_cache_warnings()) log::warn("{}", w);
      rep.symbolizer_reused = lease->reused();
      rep.symbolize_cpu_seconds = symbolize_cpu;
      return rep;
    }
    NullFrameSource none;
    return dump_with_source(state, none, request, ctx, exe, start);
  } catch (...) {
    // dump_with_source does not throw; this guards the set-up above (allocation failures).
    DumpReport rep;
    rep.error = "cannot write the snapshot: out of memory";
    log::error("snapshot not written: {}", rep.error);
    return rep;
  }
}

}  // namespace memtrace::output
