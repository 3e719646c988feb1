// Return addresses of the calling thread. On x86-64 a walk of the thread's own stack with each
// frame's rule (unwind/frame_rule.hpp) kept in a per-thread table keyed by pc: once the table
// holds a stack's pcs, a frame costs a table probe and two loads. Anything the walk cannot be
// sure of (a pc with no usable rule, a read outside the thread's stack, a stack it cannot find)
// hands the whole capture to libunwind's unw_backtrace, so what comes out is always libunwind's
// answer. docs/stack-capture.md gives the rules.
#define UNW_LOCAL_ONLY
#include "unwind/stack_capture.hpp"

#include <libunwind.h>
#include <pthread.h>
#include <sys/mman.h>

#include <atomic>
#include <cstring>

#include "unwind/frame_rule.hpp"

namespace memtrace::unwind {

namespace {

// 0: not set, 1: being set by one thread, 2: set. Others do not wait: until it is set they
// unwind with libunwind's default (global, locked) cache, which is merely slower.
std::atomic<int> g_policy_state{0};

inline void ensure_caching_policy() {
  if (g_policy_state.load(std::memory_order_acquire) == 2) return;
  int expected = 0;
  if (g_policy_state.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
    unw_set_caching_policy(unw_local_addr_space, UNW_CACHE_PER_THREAD);
    g_policy_state.store(2, std::memory_order_release);
  }
}

#if defined(__x86_64__)

// A rule as the table keeps it: 8 bytes, so that a slot is 16.
struct PackedRule {
  int32_t cfa_offset;
  int16_t fp_offset;
  int8_t ra_offset;
  uint8_t flags;
};
constexpr uint8_t kStep = 1, kOutermost = 2, kFromFp = 4, kFpSaved = 8, kFpLost = 16;

struct Slot {
  uintptr_t pc;  // 0: empty
  PackedRule rule;
};

constexpr unsigned kSlotBits = 12;  // 4096 slots, 64 KiB a thread
constexpr size_t kSlots = size_t{1} << kSlotBits;

// A walk remembered: the registers it started from, every stack word it read (address and
// value, in order) and what it returned. A later walk from the same pc and sp whose words all
// still hold those values would repeat it step for step, so it returns the same frames without
// stepping: the words are read independently of each other, not one frame's load waiting for
// the last (docs/stack-capture.md, "Repeated stacks").
constexpr int kMemoFrames = 80;  // MEMTRACE_STACK_DEPTH's default 64, plus the 8 capture asks for
constexpr int kMemoReads = 2 * kMemoFrames;
struct Memo {
  uintptr_t pc0, sp0, fp0;  // pc0 = 0: empty
  uint64_t version;         // the token: unique among this thread's walks remembered
  int32_t max_depth, n, reads;
  bool uses_fp0;  // some rule used rbp as the walk found it; else fp0 need not match
  struct Read {
    uintptr_t at, value;
  } read[kMemoReads];
  uintptr_t out[kMemoFrames];
};
// One set, searched in full: the walk starts inside memtrace, so the starting pc is the same for
// every capture and sp differs only with depth; any index built from them put the call sites of
// one depth into one small set (4 of the 16 walks usable). A check that fails on a start
// register costs a compare, one that fails on a word stops at the first group that differs.
constexpr unsigned kMemos = 16;  // 50 KiB

struct ThreadWalk {
  Slot slots[kSlots];
  uintptr_t stack_lo, stack_hi;  // [lo, hi): the thread's stack; hi = 0: not known
  uint64_t versions;
  uint8_t victim;  // the next walk replaces this one (oldest first)
  uint8_t last;    // the last one returned: the search starts there, a loop's site repeats
  Memo memos[kMemos];
};

// The table is mmapped, not malloc'd: capture may run wherever the program allocates device
// memory, and the table outlives nothing (a key's destructor unmaps it as the thread ends).
__thread ThreadWalk* t_walk __attribute__((tls_model("initial-exec"))) = nullptr;
__thread bool t_walk_failed __attribute__((tls_model("initial-exec"))) = false;
pthread_key_t g_walk_key;
pthread_once_t g_walk_once = PTHREAD_ONCE_INIT;

void drop_walk(void* p) {
  if (t_walk == p) t_walk = nullptr;
  t_walk_failed = true;  // a capture in a later destructor of this thread: libunwind's
  munmap(p, sizeof(ThreadWalk));
}

ThreadWalk* make_walk() {
  if (t_walk_failed) return nullptr;
  t_walk_failed = true;  // until it works; also keeps a thread-exit destructor from looping
  pthread_once(&g_walk_once, [] { pthread_key_create(&g_walk_key, drop_walk); });
  void* m = mmap(nullptr, sizeof(ThreadWalk), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return nullptr;
  auto* w = static_cast<ThreadWalk*>(m);  // zero-filled: every slot empty, stack unknown
  pthread_attr_t attr;
  if (pthread_getattr_np(pthread_self(), &attr) == 0) {
    void* addr = nullptr;
    size_t size = 0;
    if (pthread_attr_getstack(&attr, &addr, &size) == 0 && addr != nullptr && size != 0) {
      w->stack_lo = reinterpret_cast<uintptr_t>(addr);
      w->stack_hi = w->stack_lo + size;
    }
    pthread_attr_destroy(&attr);
  }
  if (w->stack_hi == 0 || pthread_setspecific(g_walk_key, w) != 0) {
    munmap(m, sizeof(ThreadWalk));
    return nullptr;
  }
  t_walk_failed = false;
  return t_walk = w;
}

PackedRule pack(const FrameRule& r) {
  PackedRule p{r.cfa_offset, r.fp_offset, r.ra_offset, 0};
  if (r.kind == FrameRule::Step) p.flags |= kStep;
  if (r.kind == FrameRule::Outermost) p.flags |= kOutermost;
  if (r.cfa_from_fp) p.flags |= kFromFp;
  if (r.fp_saved) p.flags |= kFpSaved;
  if (r.fp_lost) p.flags |= kFpLost;
  return p;
}

inline PackedRule rule_of(ThreadWalk& w, uintptr_t pc) {
  Slot& s = w.slots[(pc * 0x9E3779B97F4A7C15ull) >> (64 - kSlotBits)];
  if (s.pc != pc) {  // a miss replaces whatever was there
    // A signal handler on this thread may capture too (a program that allocates in one): it
    // must never see the old pc with the new rule, so the slot is empty while it changes.
    s.pc = 0;
    std::atomic_signal_fence(std::memory_order_seq_cst);
    s.rule = pack(frame_rule_at(pc));
    std::atomic_signal_fence(std::memory_order_seq_cst);
    s.pc = pc;
  }
  return s.rule;
}

// Reads other frames' words on purpose: not for the sanitizers to judge.
[[gnu::no_sanitize("address", "thread")]] inline bool memo_holds(const Memo& m, uintptr_t pc, uintptr_t sp, uintptr_t fp, int max_depth) {
  if (m.pc0 != pc || m.sp0 != sp || m.max_depth != max_depth || (m.uses_fp0 && m.fp0 != fp)) return false;
  // Every address lies between sp and the stack's end (the walk that read it checked), and this
  // walk starts at the same sp: all of it is this thread's live stack.
  // Four at a time: the loads need not wait for one another. A stack that differs mostly
  // differs near the top (another call site), so the first group that differs ends the check.
  const Memo::Read* r = m.read;
  const int n = m.reads;
  int i = 0;
  for (; i + 4 <= n; i += 4) {
    const uintptr_t d = (*reinterpret_cast<const uintptr_t*>(r[i].at) ^ r[i].value) |
                        (*reinterpret_cast<const uintptr_t*>(r[i + 1].at) ^ r[i + 1].value) |
                        (*reinterpret_cast<const uintptr_t*>(r[i + 2].at) ^ r[i + 2].value) |
                        (*reinterpret_cast<const uintptr_t*>(r[i + 3].at) ^ r[i + 3].value);
    if (d != 0) return false;
  }
  uintptr_t d = 0;
  for (; i < n; ++i) d |= *reinterpret_cast<const uintptr_t*>(r[i].at) ^ r[i].value;
  return d == 0;
}

// The walk; -1 when libunwind must answer instead. Out of line so that its own return address,
// the first entry, is a pc inside its caller, as unw_backtrace's first entry is. *token: the
// version of the remembered walk that gave the answer, 0 when none was remembered.
[[gnu::noinline, gnu::no_sanitize("address", "thread")]] int walk(uintptr_t* out, int max_depth, ThreadWalk& w,
                                                                 uint64_t* token) {
  uintptr_t pc, sp, fp;
  // One statement: the pc read is where the row for these rsp and rbp applies.
  asm volatile("lea 0(%%rip), %0\n\tmov %%rsp, %1\n\tmov %%rbp, %2" : "=r"(pc), "=r"(sp), "=r"(fp));
  *token = 0;
  const uintptr_t hi = w.stack_hi;
  if (sp < w.stack_lo || sp >= hi) return -1;  // a signal stack, a coroutine's stack

  for (unsigned k = 0, i = w.last; k < kMemos; ++k, i = (i + 1) % kMemos) {
    const Memo& m = w.memos[i];
    if (memo_holds(m, pc, sp, fp, max_depth)) {
      std::memcpy(out, m.out, static_cast<size_t>(m.n) * sizeof(uintptr_t));
      *token = m.version;
      w.last = static_cast<uint8_t>(i);
      return m.n;
    }
  }
  const bool remember = max_depth <= kMemoFrames;
  const unsigned slot = w.victim;
  Memo& m = w.memos[slot];
  if (remember) {
    m.pc0 = 0;  // written in full below, or left empty; a handler that captures meanwhile skips it
    std::atomic_signal_fence(std::memory_order_seq_cst);
    w.victim = static_cast<uint8_t>((slot + 1) % kMemos);
  }
  const uintptr_t pc0 = pc, sp0 = sp, fp0 = fp;
  bool fp_known = true, fp_initial = true, uses_fp0 = false, fp_pending = false;
  uintptr_t fp_from = 0;
  int reads = 0;
  auto note = [&](uintptr_t at, uintptr_t v) {
    if (remember && reads < kMemoReads) {
      m.read[reads] = {at, v};
    }
    ++reads;
  };
  uintptr_t key = pc;  // the innermost frame's pc is exact; a return address is looked up at -1
  int n = 0;
  while (n < max_depth) {
    const PackedRule r = rule_of(w, key);
    if (r.flags & kOutermost) break;
    if (!(r.flags & kStep)) return -1;
    if (r.flags & kFromFp) {
      if (!fp_known) return -1;
      uses_fp0 |= fp_initial;
      if (fp_pending) {  // the saved rbp this rule starts from: the walk depends on it now
        note(fp_from, fp);
        fp_pending = false;
      }
    }
    const uintptr_t cfa = ((r.flags & kFromFp) ? fp : sp) + static_cast<intptr_t>(r.cfa_offset);
    const uintptr_t ra_at = cfa + static_cast<intptr_t>(r.ra_offset);
    // Every read lies between this frame's sp and the stack's end, and the walk only climbs.
    if (cfa <= sp || cfa > hi || ra_at < sp || ra_at > hi - sizeof(uintptr_t)) return -1;
    const uintptr_t ra = *reinterpret_cast<const uintptr_t*>(ra_at);
    note(ra_at, ra);
    if (r.flags & kFpSaved) {
      const uintptr_t fp_at = cfa + static_cast<intptr_t>(r.fp_offset);
      if (fp_at < sp || fp_at > hi - sizeof(uintptr_t)) return -1;
      fp = *reinterpret_cast<const uintptr_t*>(fp_at);
      // Remembered only if a later rule uses it: most saved rbps are a register's data (a
      // pointer, a counter) that changes from call to call while the frames stay the same.
      fp_from = fp_at;
      fp_pending = true;
      fp_known = true;
      fp_initial = false;
    } else if (r.flags & kFpLost) {
      fp_known = false;
      fp_initial = false;
      fp_pending = false;
    }
    sp = cfa;
    if (ra == 0) break;
    out[n++] = ra;
    key = ra - 1;
  }
  if (remember && reads <= kMemoReads) {
    std::memcpy(m.out, out, static_cast<size_t>(n) * sizeof(uintptr_t));
    m.sp0 = sp0;
    m.fp0 = fp0;
    m.uses_fp0 = uses_fp0;
    m.max_depth = max_depth;
    m.n = n;
    m.reads = reads;
    m.version = *token = ++w.versions;
    std::atomic_signal_fence(std::memory_order_seq_cst);
    m.pc0 = pc0;
    w.last = static_cast<uint8_t>(slot);
  }
  return n;
}

#endif  // __x86_64__

// Inlined into each caller, so that the first entry, unw_backtrace's return address, is a pc
// inside that caller.
[[gnu::always_inline]] inline int libunwind_trace(uintptr_t* out, int max_depth) {
  ensure_caching_policy();
  static_assert(sizeof(void*) == sizeof(uintptr_t));
  int n = unw_backtrace(reinterpret_cast<void**>(out), max_depth);
  return n > 0 ? n : 0;
}

}  // namespace

int capture_libunwind(uintptr_t* out, int max_depth) {
  if (out == nullptr || max_depth <= 0) return 0;
  return libunwind_trace(out, max_depth);
}

// The walk on this thread's table; -1 when there is none or the walk declines. Inlined into
// each caller, so that walk's return address (the first entry) lies in that caller.
[[gnu::always_inline]] static inline int walk_here(uintptr_t* out, int max_depth, uint64_t* token) {
#if defined(__x86_64__)
  ThreadWalk* w = t_walk != nullptr ? t_walk : make_walk();
  if (w != nullptr) {
    int n = walk(out, max_depth, *w, token);
    asm volatile("" : "+r"(n));  // not a tail call
    return n;
  }
#endif
  return -1;
}

int capture(uintptr_t* out, int max_depth, uint64_t* token) {
  uint64_t ignored = 0;
  if (token == nullptr) token = &ignored;
  *token = 0;
  if (out == nullptr || max_depth <= 0) return 0;
  const int n = walk_here(out, max_depth, token);
  return n >= 0 ? n : libunwind_trace(out, max_depth);
}

int capture_walk_only(uintptr_t* out, int max_depth, uint64_t* token) {
  uint64_t ignored = 0;
  if (token == nullptr) token = &ignored;
  *token = 0;
  if (out == nullptr || max_depth <= 0) return 0;
  return walk_here(out, max_depth, token);
}

}  // namespace memtrace::unwind
