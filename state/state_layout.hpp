// The state file's layout (docs/state-file.md): one header page, then the sections it names, each
// page-aligned. Written by the recording process through its shared mapping, read by `memtrace
// recover` (and any reader) from a copy; both sides are this build, and the header's sizes let a
// reader refuse a file laid out by another.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/state_memory.hpp"

namespace memtrace::state {

inline constexpr char kMagic[8] = {'M', 'T', 'S', 'T', 'A', 'T', 'E', '\n'};
inline constexpr uint32_t kFormatVersion = 3;  // 2 added the snapshot fields, 3 the owner names
inline constexpr size_t kPage = 4096;

// The bounds that, with MEMTRACE_MAX_ENTRIES, fix the file's size (README, "The state file").
inline constexpr uint64_t kLiveSlots = uint64_t{1} << 18;     // live allocations copied (262,144)
inline constexpr uint64_t kMirrorStacks = uint64_t{1} << 18;  // distinct stacks copied
inline constexpr uint64_t kMirrorFrames = uint64_t{1} << 21;  // their return addresses, in all
inline constexpr uint64_t kModules = 2048;                    // loaded objects, dlclosed ones included
// The most a state file may take (MEMTRACE_MAX_ENTRIES up to about 32 million); beyond it, none.
inline constexpr uint64_t kMaxFileBytes = uint64_t{2} << 30;

// One loaded object (unwind::LoadedObject), enough to symbolize its addresses from its file.
struct ModuleEntry {
  uint64_t start = 0, end = 0, bias = 0;
  uint32_t path_len = 0;  // bytes of path used; longer paths are not recorded
  uint32_t unused = 0;
  char build_id[80] = {};  // lower-case hex, NUL-terminated
  char path[928] = {};     // NUL-terminated; the program's real path, not /proc/self/exe
};
static_assert(sizeof(ModuleEntry) % 8 == 0);

struct Section {
  uint64_t offset = 0;  // from the start of the file, page-aligned
  uint64_t count = 0;   // elements
};

struct Header {
  char magic[8];
  uint32_t version;
  uint32_t header_bytes;  // sizeof(Header)
  uint64_t file_bytes;    // the whole file, as created
  // The element sizes this build wrote with: a reader refuses a file whose sizes differ.
  uint32_t entry_bytes, record_bytes, slot_bytes, counters_bytes, module_bytes, owner_bytes;
  int64_t pid;
  uint32_t uid;
  uint32_t state;  // kRunning until the process ends cleanly (then the file is removed)
  uint64_t start_us;     // Unix time when recording started
  uint64_t start_ticks;  // now_ticks() at start_us: how ring times become microseconds
  char boot_id[40];      // /proc/sys/kernel/random/boot_id: ticks of another boot mean nothing
  char program[1024];    // the executable's path
  char host[256];
  char rank[32];

  Section ring;           // TraceEntry[count]
  Section counters;       // one UsageCounters
  Section live;           // LiveSlot[count]
  Section stack_records;  // uint64_t[count] (StackMirror)
  Section stack_frames;   // uintptr_t[count]
  Section modules;        // ModuleEntry[count]
  Section owners;         // OwnerName[count], by owner id

  std::atomic<uint64_t> ring_total;       // entries pushed so far (the ring's sequence number)
  std::atomic<uint64_t> live_unrecorded;  // live allocations that found no slot
  std::atomic<uint64_t> stacks_published; // stack ids whose record is written
  std::atomic<uint64_t> modules_published;
  std::atomic<uint64_t> owners_published;  // owner ids whose name is written
  std::atomic<uint64_t> unknown_frees;    // copied at times; informational
  std::atomic<int32_t> fatal_signal;      // the signal that was ending the process (0: none seen)
  // For `memtrace snap` (docs/state-file.md, "Asking for a snapshot"): the signal that writes a
  // snapshot (MEMTRACE_SIGNAL; 0: none; kSignalNotArmed until the session has tried to install
  // its handler), and the last snapshot written while the program runs.
  // snapshot_seq is odd while last_snapshot changes and counts two per snapshot.
  std::atomic<int32_t> dump_signal;
  static constexpr int32_t kSignalNotArmed = -1;
  std::atomic<uint64_t> snapshot_seq;
  char last_snapshot[2048];
};
static_assert(sizeof(Header) <= kPage);
inline constexpr uint32_t kRunning = 1;

// /proc/sys/kernel/random/boot_id, "" when unreadable: the tick counter is only this boot's.
std::string current_boot_id();

// Sizes of a file for a ring of `ring_entries`; fills the sections of *h.
uint64_t plan_layout(uint64_t ring_entries, Header* h);

}  // namespace memtrace::state
