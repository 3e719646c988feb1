// Internal to stack capture: the per-thread walk state on x86-64 (rule table, remembered walks,
// hints to them) and the walk itself. unwind/stack_capture.cpp owns the table's lifetime and the
// fallback to libunwind; unwind/stack_walk.cpp walks. docs/stack-capture.md gives the rules.
#pragma once
#include <cstddef>
#include <cstdint>

#include "unwind/stack_capture.hpp"

namespace memtrace::unwind::detail {

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
// What a walk knew before its step number j: enough to tell whether another walk, in the same
// state there, would take the same steps from j on (docs/stack-capture.md, "Joining a
// remembered walk"). gen numbers the rbp values as the walk loads them (0: rbp as the walk found
// it). fp matters only if a rule from j on uses that value (kUsesFp); fp_from is the stack word
// it was loaded from while that read is not yet among the walk's reads (kFpPending).
// kStepUsedFp: the rule of step j itself computed the CFA from rbp.
constexpr uint8_t kFpKnownAt = 1, kFpPending = 2, kUsesFp = 4, kStepUsedFp = 8;
struct FrameState {
  uintptr_t key, sp, fp, fp_from;
  int16_t read_from;  // the first of the walk's reads made from j on
  uint8_t gen;
  uint8_t flags;
};
struct Memo {
  uintptr_t pc0, sp0, fp0;  // pc0 = 0: empty
  uint64_t version;         // the token: unique among this thread's walks remembered
  int32_t max_depth, n, reads, states;
  bool uses_fp0;   // some rule used rbp as the walk found it; else fp0 need not match
  bool truncated;  // it stopped at max_depth, not at the stack's end
  bool used;       // returned again since it was remembered
  struct Read {
    uintptr_t at, value;
  } read[kMemoReads];
  uintptr_t out[kMemoFrames];
  FrameState state[kMemoFrames + 1];
};
// How many walks a thread remembers. They are found through the hints below, not by a search, so
// the number costs memory (6.5 KiB each, touched as they fill), not time.
constexpr unsigned kMemos = kRememberedWalks;

// Where a remembered walk was at a (pc, sp): its state j there. A hint, checked against the
// walk's own state, so a stale or torn entry costs a compare and never a wrong answer. The last
// walk stored through a (pc, sp) owns its hint. Sets of four, so that two walks' own frames
// that hash alike do not push each other out (a walk whose own hint is lost still joins a walk
// further down, but as a new stack, with a new token).
struct JoinHint {
  uintptr_t key, sp;
  uint64_t version;
  uint32_t memo, j;
};
constexpr unsigned kHintWays = 4;
constexpr unsigned kHintSetBits = 10;  // 1024 sets of 4, 128 KiB: 64 walks of up to 64 states
struct alignas(64) HintSet {
  JoinHint way[kHintWays];
};

struct ThreadWalk {
  Slot slots[kSlots];
  uintptr_t stack_lo, stack_hi;  // [lo, hi): the thread's stack; hi = 0: not known
  uint64_t versions;
  // The walk being written goes into the spare; stored, it takes the place of the oldest in
  // ring, which becomes the spare. While one is written (writing), a capture from a signal
  // handler on this thread remembers nothing, so the two never write the same memo.
  uint8_t ring[kMemos];
  uint8_t victim;  // ring position of the oldest
  uint8_t spare;
  bool writing;
  // The walk returned last, and for each walk the one returned after it the last time: a
  // program that allocates from its sites in the same order each time is answered by the first
  // check of the walk, before any hint is looked up.
  uint8_t last;
  uint8_t next[kMemos + 1];
  uint32_t crowded;  // new walks met with the oldest unused (see worth_remembering)
  CaptureCounts counts;
  Memo memos[kMemos + 1];
  HintSet hints[size_t{1} << kHintSetBits];
};

// The walk; -1 when libunwind must answer instead. Out of line, so that its own return address,
// the first entry, is a pc inside its caller, as unw_backtrace's first entry is. *token: the
// version of the remembered walk whose frames it returned, 0 when none was.
int walk(uintptr_t* out, int max_depth, ThreadWalk& w, uint64_t* token);

#endif  // __x86_64__

}  // namespace memtrace::unwind::detail
