// The walk of a thread's own stack with cached frame rules, remembered walks and the hints that
// find them (docs/stack-capture.md): the part of a native capture that runs on every allocation.
// Reads other frames' words on purpose, so the functions that do are not for the sanitizers.
#include <atomic>
#include <cstring>

#include "unwind/frame_rule.hpp"
#include "unwind/thread_walk.hpp"

namespace memtrace::unwind::detail {

#if defined(__x86_64__)

namespace {

inline HintSet& hint_set(ThreadWalk& w, uintptr_t key, uintptr_t sp) {
  return w.hints[((key ^ (sp * 0xff51afd7ed558ccdull)) * 0x9E3779B97F4A7C15ull) >> (64 - kHintSetBits)];
}

inline const JoinHint* find_hint(ThreadWalk& w, uintptr_t key, uintptr_t sp) {
  const HintSet& set = hint_set(w, key, sp);
  for (const JoinHint& h : set.way)
    if (h.key == key && h.sp == sp) return &h;
  return nullptr;
}

// Over the hint for the same (pc, sp), else over the set's oldest.
inline void put_hint(ThreadWalk& w, const JoinHint& hint) {
  HintSet& set = hint_set(w, hint.key, hint.sp);
  JoinHint* to = &set.way[0];
  for (JoinHint& h : set.way) {
    if (h.key == hint.key && h.sp == hint.sp) {
      to = &h;
      break;
    }
    if (h.version < to->version) to = &h;
  }
  *to = hint;
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

// The index of the first group of reads from `from` on whose words no longer hold their values,
// -1 when all do. Reads other frames' words on purpose: not for the sanitizers to judge.
// Out of line: a small leaf with registers of its own, where the walk has few to spare.
[[gnu::noinline, gnu::no_sanitize("address", "thread")]] int first_changed(const Memo& m, int from) {
  // Four at a time: the loads need not wait for one another. A stack that differs mostly
  // differs near the top (another call site), so the first group that differs ends the check.
  const Memo::Read* r = m.read;
  const int n = m.reads;
  int i = from;
  for (; i + 4 <= n; i += 4) {
    const uintptr_t d = (*reinterpret_cast<const uintptr_t*>(r[i].at) ^ r[i].value) |
                        (*reinterpret_cast<const uintptr_t*>(r[i + 1].at) ^ r[i + 1].value) |
                        (*reinterpret_cast<const uintptr_t*>(r[i + 2].at) ^ r[i + 2].value) |
                        (*reinterpret_cast<const uintptr_t*>(r[i + 3].at) ^ r[i + 3].value);
    if (d != 0) return i;
  }
  uintptr_t d = 0;
  for (int k = i; k < n; ++k) d |= *reinterpret_cast<const uintptr_t*>(r[k].at) ^ r[k].value;
  return d == 0 ? -1 : i;
}

// Makes the spare, into which a walk has written its reads and states, the remembered walk
// with these frames: the rbp flags of its states, the hints to each state, the start pc that
// makes it usable, and its place in the ring over the oldest, which becomes the spare.
// States from own_states on were copied from a walk this one joined: their flags are final, and
// their hints stay with that walk, which has the same frames from there on.
void remember_walk(ThreadWalk& w, const uintptr_t* out, int n, int reads, int states, int own_states, uintptr_t pc0,
                   uintptr_t sp0, uintptr_t fp0, int max_depth, bool truncated, const uint64_t used[2],
                   uint64_t* token) {
  const unsigned slot = w.spare;
  Memo& m = w.memos[slot];
  for (int j = 0; j < own_states; ++j) {
    FrameState& st = m.state[j];
    st.flags = static_cast<uint8_t>((st.flags & ~kUsesFp) | ((used[(st.gen >> 6) & 1] >> (st.gen & 63) & 1) ? kUsesFp : 0));
  }
  std::memcpy(m.out, out, static_cast<size_t>(n) * sizeof(uintptr_t));
  m.sp0 = sp0;
  m.fp0 = fp0;
  m.uses_fp0 = states > 0 && (m.state[0].flags & kUsesFp);
  m.max_depth = max_depth;
  m.truncated = truncated;
  m.used = false;
  m.n = n;
  m.reads = reads;
  m.states = states;
  m.version = *token = ++w.versions;
  for (int j = 0; j < own_states; ++j) {
    const FrameState& st = m.state[j];
    put_hint(w, {st.key, st.sp, m.version, slot, static_cast<uint32_t>(j)});
  }
  const unsigned old = w.ring[w.victim];
  w.memos[old].pc0 = 0;  // forgotten: its hints now fail
  std::atomic_signal_fence(std::memory_order_seq_cst);
  m.pc0 = pc0;
  w.ring[w.victim] = static_cast<uint8_t>(slot);
  w.next[w.last] = static_cast<uint8_t>(slot);
  w.last = static_cast<uint8_t>(slot);
  w.victim = static_cast<uint8_t>((w.victim + 1) % kMemos);
  w.spare = static_cast<uint8_t>(old);
}

// Whether a new walk should be remembered over the oldest. When the oldest was never returned
// again, the thread's stacks outnumber what it remembers and each new one would be forgotten
// unused in turn: then only one in eight is, so that some stay long enough to be found.
inline bool worth_remembering(ThreadWalk& w) {
  const Memo& oldest = w.memos[w.ring[w.victim]];
  if (oldest.pc0 == 0 || oldest.used) return true;
  return (++w.crowded & 7) == 0;
}

// Set while this thread writes the spare; a capture from a signal handler meanwhile finds it set
// and remembers nothing.
struct WritingSpare {
  ThreadWalk& w;
  const bool on;
  WritingSpare(ThreadWalk& walk, bool want) : w(walk), on(want && !walk.writing) {
    if (on) {
      w.writing = true;
      std::atomic_signal_fence(std::memory_order_seq_cst);
    }
  }
  ~WritingSpare() {
    if (on) {
      std::atomic_signal_fence(std::memory_order_seq_cst);
      w.writing = false;
    }
  }
};

// A remembered walk's frames are the answer again: its token, and it is the walk that followed
// the last one returned (the prediction) and now the last.
inline void returned_again(ThreadWalk& w, unsigned memo, uint64_t* token) {
  *token = w.memos[memo].version;
  w.memos[memo].used = true;
  w.next[w.last] = static_cast<uint8_t>(memo);
  w.last = static_cast<uint8_t>(memo);
}

// Where a walk is: the state before its next step, and what it has read and may remember.
struct Cursor {
  uintptr_t key, sp, fp;
  uintptr_t fp_from = 0;
  bool fp_known = true, fp_pending = false;
  // Which rbp values some rule computed a CFA from, by number: a state's rbp matters to the walk
  // from it on exactly when its value's number is marked.
  unsigned gen = 0;
  uint64_t used[2] = {0, 0};
  int n = 0, reads = 0;

  void mark_used(unsigned g) { used[(g >> 6) & 1] |= uint64_t{1} << (g & 63); }  // g <= 80 when remembered
};

// What a walk took from a remembered one when it jumped (below): the first `states` states and
// `reads` reads of `from`, copied into the spare only if the walk is remembered.
struct Borrowed {
  const Memo* from = nullptr;
  int reads = 0, states = 0;
  uintptr_t fp0 = 0, fp = 0;  // this walk's starting rbp, and its rbp where it jumped to
  unsigned gen = 0;           // the number of that rbp

  // Into m, and the rbp values its steps used into used.
  void copy_into(Memo& m, uint64_t used[2]) {
    if (from == nullptr) return;
    std::memcpy(m.read, from->read, static_cast<size_t>(reads - 1) * sizeof(Memo::Read));  // the last is ours
    std::memcpy(m.state, from->state, static_cast<size_t>(states) * sizeof(FrameState));
    for (int t = 0; t < states; ++t) {
      FrameState& st = m.state[t];
      if (st.flags & kStepUsedFp) used[(st.gen >> 6) & 1] |= uint64_t{1} << (st.gen & 63);
      if (st.gen == 0) st.fp = fp0;
      if (st.gen == gen) st.fp = fp;  // loaded from a word the other walk did not check: ours
    }
    from = nullptr;
  }
};

// A walk from the same start as o whose words hold up to the first that changed, `from` or a
// few after it: if that word is a return address o read, this walk has taken o's steps up to
// it and is past it now, in the state o's next one has but for that address. The cursor is set
// as if walked (o's frames before it copied, its reads and states borrowed), and true returned;
// false when the word is a saved rbp or the walk would stop there.
[[gnu::always_inline, gnu::no_sanitize("address", "thread")]] inline bool jump(const Memo& o, int from, int max_depth,
                                                                              bool remember, Memo& m, uintptr_t* out,
                                                                              uintptr_t fp0, Cursor& c,
                                                                              Borrowed& borrowed) {
  int k = from;
  while (k < o.reads && *reinterpret_cast<const uintptr_t*>(o.read[k].at) == o.read[k].value) ++k;
  if (k >= o.reads) return false;
  int s = 0;  // the step whose return address read k is: its reads end with it
  while (s + 1 < o.states && o.state[s + 1].read_from <= k) ++s;
  if (s + 1 >= o.states || o.state[s + 1].read_from != k + 1 || s + 1 > max_depth) return false;
  const uintptr_t ra = *reinterpret_cast<const uintptr_t*>(o.read[k].at);
  if (ra == 0) return false;
  const FrameState& nx = o.state[s + 1];
  // rbp there: as o loaded it, if o has not checked that word yet; as this walk found it, if o
  // never changed it; else o checked it, and it held.
  c.fp_known = nx.flags & kFpKnownAt;
  c.fp_pending = c.fp_known && (nx.flags & kFpPending);
  c.fp_from = nx.fp_from;
  c.fp = !c.fp_known ? 0 : c.fp_pending ? *reinterpret_cast<const uintptr_t*>(nx.fp_from) : nx.gen == 0 ? fp0 : nx.fp;
  std::memcpy(out, o.out, static_cast<size_t>(s) * sizeof(uintptr_t));
  out[s] = ra;
  if (remember) {
    m.read[k] = {o.read[k].at, ra};
    borrowed = {&o, k + 1, s + 1, fp0, c.fp, nx.gen};
  }
  c.n = s + 1;
  c.reads = k + 1;
  c.key = ra - 1;
  c.sp = nx.sp;
  c.gen = nx.gen;
  return true;
}

// Can the walk at c go on as o did from its state j? Only if it would end where o ended, and
// the rbp o used from there is the walk's.
[[gnu::always_inline]] inline bool can_join(const Memo& o, unsigned j, const JoinHint& h, int max_depth, const Cursor& c) {
  const int jj = static_cast<int>(j);
  if (!(o.pc0 != 0 && o.version == h.version && o.max_depth == max_depth && jj < o.states)) return false;
  const FrameState& st = o.state[jj];
  if (!(st.key == c.key && st.sp == c.sp && c.n + (o.n - jj) <= max_depth && (!o.truncated || c.n == jj))) return false;
  if (!(st.flags & kUsesFp)) return true;
  // And if o loaded it from a word it still checks, that word must be the one ours came from
  // (it may lie below our sp0, outside what this walk may read otherwise).
  return (st.flags & kFpKnownAt) && c.fp_known && c.fp == st.fp &&
         (!(st.flags & kFpPending) || (c.fp_pending && c.fp_from == st.fp_from));
}

// The walk at c joins o at its state j, whose reads from there all hold: o's frames from there
// are the walk's. Remembered as a new walk unless they are o's very frames. Returns the count.
[[gnu::always_inline]] inline int join(ThreadWalk& w, const Memo& o, unsigned hint_memo, int j, uintptr_t* out,
                                       int max_depth, bool remember, Memo& m, uintptr_t pc0, uintptr_t sp0,
                                       uintptr_t fp0, Cursor& c, Borrowed& borrowed, uint64_t* token) {
  const FrameState& st = o.state[j];
  const int tail = o.n - j;
  std::memcpy(out + c.n, o.out + j, static_cast<size_t>(tail) * sizeof(uintptr_t));
  if (c.n == 0) {
    ++w.counts.remembered;
  } else {
    ++w.counts.joined;
  }
  if (c.n == j && std::memcmp(out, o.out, static_cast<size_t>(c.n) * sizeof(uintptr_t)) == 0) {
    returned_again(w, hint_memo, token);  // the very frames that walk returned
    return c.n + tail;
  }
  if (!remember) return c.n + tail;
  // A stack not seen before: remembered whole, as if walked.
  if ((st.flags & kUsesFp) && c.fp_pending && !(st.flags & kFpPending)) {
    if (c.reads < kMemoReads) m.read[c.reads] = {c.fp_from, c.fp};
    ++c.reads;
    c.fp_pending = false;
  }
  if (st.flags & kUsesFp) c.mark_used(c.gen);
  const int more = o.reads - st.read_from;
  if (c.reads + more > kMemoReads || !worth_remembering(w)) return c.n + tail;
  std::memcpy(m.read + c.reads, o.read + st.read_from, static_cast<size_t>(more) * sizeof(Memo::Read));
  for (int k = j; k < o.states; ++k) {
    FrameState& to = m.state[c.n + k - j];
    to = o.state[k];
    to.read_from = static_cast<int16_t>(to.read_from - st.read_from + c.reads);
    if (to.gen == st.gen) {  // still the rbp of the join: ours, as we know it
      to.fp = c.fp;
      to.fp_from = c.fp_from;
      to.flags = static_cast<uint8_t>((to.flags & (kStepUsedFp | kUsesFp)) | (c.fp_known ? kFpKnownAt : 0) |
                                      (c.fp_pending ? kFpPending : 0));
    }
    to.gen = static_cast<uint8_t>(to.gen - st.gen + c.gen);  // in our numbering
    if (to.flags & kStepUsedFp) c.mark_used(to.gen);
  }
  borrowed.copy_into(m, c.used);
  remember_walk(w, out, c.n + tail, c.reads + more, c.n + (o.states - j), c.n + 1, pc0, sp0, fp0, max_depth,
                o.truncated, c.used, token);
  return c.n + tail;
}

}  // namespace

[[gnu::noinline, gnu::no_sanitize("address", "thread")]] int walk(uintptr_t* out, int max_depth, ThreadWalk& w,
                                                                 uint64_t* token) {
  uintptr_t pc, sp, fp;
  // One statement: the pc read is where the row for these rsp and rbp applies.
  asm volatile("lea 0(%%rip), %0\n\tmov %%rsp, %1\n\tmov %%rbp, %2" : "=r"(pc), "=r"(sp), "=r"(fp));
  *token = 0;
  const uintptr_t hi = w.stack_hi;
  if (sp < w.stack_lo || sp >= hi) return -1;  // a signal stack, a coroutine's stack

  // The predicted walk, then the last one again (a loop's one site).
  for (const unsigned i : {unsigned{w.next[w.last]}, unsigned{w.last}}) {
    const Memo& o = w.memos[i];
    if (o.pc0 == pc && o.sp0 == sp && o.max_depth == max_depth && (!o.uses_fp0 || o.fp0 == fp) &&
        first_changed(o, 0) < 0) {
      std::memcpy(out, o.out, static_cast<size_t>(o.n) * sizeof(uintptr_t));
      returned_again(w, i, token);
      ++w.counts.remembered;
      return o.n;
    }
  }

  const WritingSpare writing(w, max_depth <= kMemoFrames);
  const bool remember = writing.on;
  const unsigned slot = w.spare;  // empty (pc0 = 0) while it is the spare
  Memo& m = w.memos[slot];
  const uintptr_t pc0 = pc, sp0 = sp, fp0 = fp;
  // The innermost frame's pc is exact; a return address is looked up at -1.
  Cursor c{pc, sp, fp};
  Borrowed borrowed;
  // The last remembered walk found changed while trying to join it, and the first group of its
  // reads that changed: its states whose reads start at or before that would fail again (the
  // hints of the states that stacks share point at one walk, the latest stored).
  unsigned changed_memo = ~0u;
  int changed_at = -1;
  auto note = [&](uintptr_t at, uintptr_t v) {
    if (remember && c.reads < kMemoReads) m.read[c.reads] = {at, v};
    ++c.reads;
  };
  // The walk ends here, with `states` states recorded: remembered if it can be.
  auto store = [&](int states, bool truncated) {
    ++w.counts.walked;
    if (!remember || c.reads > kMemoReads || !worth_remembering(w)) return;
    borrowed.copy_into(m, c.used);
    remember_walk(w, out, c.n, c.reads, states, states, pc0, sp0, fp0, max_depth, truncated, c.used, token);
  };
  while (c.n < max_depth) {
    // A walk remembered through this very frame (same pc, same sp) went on as this one would,
    // if the words it read from here still hold and rbp matches where it is used.
    const JoinHint* h = find_hint(w, c.key, c.sp);
    if (h != nullptr && h->memo != slot && h->memo <= kMemos) {
      const Memo& o = w.memos[h->memo];
      const unsigned j = h->j < kMemoFrames ? h->j : kMemoFrames;
      if ((h->memo != changed_memo || o.state[j].read_from > changed_at) && can_join(o, j, *h, max_depth, c)) {
        const int bad = first_changed(o, o.state[j].read_from);
        if (bad < 0)
          return join(w, o, h->memo, static_cast<int>(j), out, max_depth, remember, m, pc0, sp0, fp0, c, borrowed,
                      token);
        changed_memo = h->memo;
        changed_at = bad;
        // From o's very start (its state 0 is ours): the words before bad held.
        if (c.n == 0 && j == 0 && jump(o, bad, max_depth, remember, m, out, fp0, c, borrowed)) continue;
      }
    }
    if (remember) {
      m.state[c.n] = {c.key, c.sp, c.fp, c.fp_from, static_cast<int16_t>(c.reads), static_cast<uint8_t>(c.gen),
                      static_cast<uint8_t>((c.fp_known ? kFpKnownAt : 0) | (c.fp_pending ? kFpPending : 0))};
    }
    const PackedRule r = rule_of(w, c.key);
    if (r.flags & kOutermost) {
      store(c.n + 1, false);
      return c.n;
    }
    if (!(r.flags & kStep)) return -1;
    if (r.flags & kFromFp) {
      if (!c.fp_known) return -1;
      c.mark_used(c.gen);
      if (remember) m.state[c.n].flags |= kStepUsedFp;
      if (c.fp_pending) {  // the saved rbp this rule starts from: the walk depends on it now
        note(c.fp_from, c.fp);
        c.fp_pending = false;
      }
    }
    const uintptr_t cfa = ((r.flags & kFromFp) ? c.fp : c.sp) + static_cast<intptr_t>(r.cfa_offset);
    const uintptr_t ra_at = cfa + static_cast<intptr_t>(r.ra_offset);
    // Every read lies between this frame's sp and the stack's end, and the walk only climbs.
    if (cfa <= c.sp || cfa > hi || ra_at < c.sp || ra_at > hi - sizeof(uintptr_t)) return -1;
    const uintptr_t ra = *reinterpret_cast<const uintptr_t*>(ra_at);
    note(ra_at, ra);
    if (r.flags & kFpSaved) {
      const uintptr_t fp_at = cfa + static_cast<intptr_t>(r.fp_offset);
      if (fp_at < c.sp || fp_at > hi - sizeof(uintptr_t)) return -1;
      c.fp = *reinterpret_cast<const uintptr_t*>(fp_at);
      // Remembered only if a later rule uses it: most saved rbps are a register's data (a
      // pointer, a counter) that changes from call to call while the frames stay the same.
      c.fp_from = fp_at;
      c.fp_pending = true;
      c.fp_known = true;
      ++c.gen;
    } else if (r.flags & kFpLost) {
      c.fp_known = false;
      c.fp_pending = false;
      ++c.gen;
    }
    c.sp = cfa;
    if (ra == 0) {
      store(c.n + 1, false);
      return c.n;
    }
    out[c.n++] = ra;
    c.key = ra - 1;
  }
  store(c.n, true);
  return c.n;
}

#endif  // __x86_64__

}  // namespace memtrace::unwind::detail
