// Symbolizer::prepare: a dump's distinct addresses symbolized at once, the work shared out
// among threads by compilation unit, over the Symbolizer's one libdwfl session.
#include <pthread.h>
#include <sched.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <new>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "unwind/symbolizer_impl.hpp"

namespace memtrace::unwind {

unsigned default_symbolize_threads() {
  unsigned n = 0;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) n = static_cast<unsigned>(CPU_COUNT(&set));
  if (n == 0) n = std::thread::hardware_concurrency();
  return std::clamp(n, 1u, 8u);
}

namespace {
// Below this many new addresses, starting threads costs more than it saves.
constexpr size_t kMinParallel = 256;
}  // namespace

// One task per compilation unit, or per module without debug data: each unit's indexes are
// built and read by one thread. The calling thread finds every address's place (libdwfl
// loads a module's debug data then), module by module, and hands out a module's tasks as
// soon as they are known, costliest first: an address in a unit with debug data costs about
// ten times one named by a symbol table alone (bench_symbolize: 9 us against 0.3-1.2 us).
struct Symbolizer::Impl::Parallel {
  struct Task {
    size_t cost = 0;
    std::vector<std::pair<uintptr_t, Place>> addresses;
    std::vector<std::span<const SymFrame>> frames;  // when done: one per address
  };
  using ByModule = std::vector<std::pair<Dwfl_Module*, std::vector<uintptr_t>>>;

  Impl& m;
  std::deque<Task> tasks;  // (a deque: handed-out tasks stay where they are)
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Task*> ready;
  bool done = false;  // no more tasks will come
  std::vector<std::thread> pool;

  explicit Parallel(Impl& impl) : m(impl) {}

  // Addresses by module, most addresses first, found before any other thread starts (finding
  // one may re-read the module list, which drops every index).
  static ByModule by_module(Impl& m, const std::vector<uintptr_t>& pending) {
    ByModule by;
    std::unordered_map<Dwfl_Module*, size_t> index_of;
    for (uintptr_t r : pending) {
      Dwfl_Module* mod = m.module_at(r > 0 ? r - 1 : 0);
      auto [it, fresh] = index_of.try_emplace(mod, by.size());
      if (fresh) by.push_back({mod, {}});
      by[it->second].second.push_back(r);
    }
    std::stable_sort(by.begin(), by.end(),
                     [](const auto& a, const auto& b) { return a.second.size() > b.second.size(); });
    return by;
  }

  // Symbolizes the tasks handed out until none are left and none will come.
  void run(Worker& w) {
    for (;;) {
      Task* t = nullptr;
      {
        std::unique_lock lock(mu);
        cv.wait(lock, [this] { return !ready.empty() || done; });
        if (ready.empty()) return;
        t = ready.front();
        ready.pop_front();
      }
      std::vector<std::span<const SymFrame>> got;
      got.reserve(t->addresses.size());
      for (const auto& [r, at] : t->addresses) {
        m.symbolize(w, r, at);
        got.push_back(w.store(w.out));
      }
      t->frames = std::move(got);  // complete or not at all
    }
  }

  // Up to `helpers` threads, each with its own Worker; fewer when no more can be had. They
  // take no signals: the program's handlers expect its own threads.
  void start(size_t helpers) {
    m.workers.reserve(m.workers.size() + helpers);
    pool.reserve(helpers);
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    for (size_t t = 0; t < helpers; ++t) {
      try {
        m.workers.push_back(std::make_unique<Worker>());
        pool.emplace_back([this, w = m.workers.back().get()] {
          try {
            run(*w);
          } catch (...) {
            // The task it was on has no frames: the calling thread does it in keep_results().
          }
        });
      } catch (...) {
        break;  // no more threads to be had: fewer do the work
      }
    }
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
  }

  // One module's addresses placed and grouped into tasks, which are then handed out.
  void route(Dwfl_Module* mod, const std::vector<uintptr_t>& rets) {
    std::vector<Task*> made;
    std::unordered_map<const void*, Task*> task_of;
    for (uintptr_t r : rets) {
      Place at;
      {
        LibdwLock lock(libdw_mutex());
        at = m.place_in(mod, r);
      }
      const void* key = at.cudie != nullptr ? static_cast<const void*>(at.cudie->addr)
                                            : static_cast<const void*>(at.mod);
      Task*& t = task_of[key];
      if (t == nullptr) {
        t = &tasks.emplace_back();
        made.push_back(t);
      }
      if (at.cudie != nullptr) {
        // The unit's slots: the other threads are given them, as this one adds to the maps.
        at.line_slot = &unit_slot(m.line_tables, at.cudie);
        at.scope_slot = &unit_slot(m.scope_indexes, at.cudie);
      }
      t->cost += at.cudie != nullptr ? 10 : 1;
      t->addresses.push_back({r, at});
    }
    std::sort(made.begin(), made.end(), [](const Task* a, const Task* b) { return a->cost > b->cost; });
    {
      std::lock_guard lock(mu);
      ready.insert(ready.end(), made.begin(), made.end());
    }
    cv.notify_all();
  }

  void close() {
    {
      std::lock_guard lock(mu);
      done = true;
    }
    cv.notify_all();
  }

  void join() {
    for (std::thread& t : pool) t.join();
  }

  // Every address's frames remembered: a task's as its thread made them, or made here when
  // that thread failed part-way (out of memory).
  void keep_results() {
    for (Task& t : tasks)
      for (size_t j = 0; j < t.addresses.size(); ++j)
        if (t.frames.size() == t.addresses.size()) {
          m.remember(t.addresses[j].first, t.frames[j]);
        } else {
          m.frames(t.addresses[j].first);
        }
  }
};

Symbolizer::PrepareReport Symbolizer::prepare(std::span<const uintptr_t> return_addresses, unsigned threads) {
  Impl& m = *impl_;
  if (threads == 0) threads = default_symbolize_threads();
  std::vector<uintptr_t> pending(return_addresses.begin(), return_addresses.end());
  std::sort(pending.begin(), pending.end());
  pending.erase(std::unique(pending.begin(), pending.end()), pending.end());
  std::erase_if(pending, [&m](uintptr_t r) { return m.cached(r) != nullptr; });
  PrepareReport report;
  report.addresses = pending.size();
  if (!m.cache.reserve(m.cache.size() + pending.size())) throw std::bad_alloc();
  if (threads <= 1 || m.dwfl == nullptr || pending.size() < kMinParallel) {
    for (uintptr_t r : pending) m.frames(r);
    return report;
  }

  const Impl::Parallel::ByModule by_module = Impl::Parallel::by_module(m, pending);
  Impl::Parallel par(m);
  par.start(std::min<size_t>(threads, pending.size()) - 1);
  std::exception_ptr failed;
  try {
    for (const auto& [mod, rets] : by_module) par.route(mod, rets);
  } catch (...) {
    failed = std::current_exception();
  }
  par.close();
  if (!failed) {
    try {
      par.run(m.main_worker);
    } catch (...) {
      failed = std::current_exception();
    }
  }
  par.join();
  report.tasks = par.tasks.size();
  report.threads = static_cast<unsigned>(par.pool.size()) + 1;
  if (failed) std::rethrow_exception(failed);
  par.keep_results();
  return report;
}

}  // namespace memtrace::unwind
