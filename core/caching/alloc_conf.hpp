// The caching allocator's settings, read from a string in PYTORCH_CUDA_ALLOC_CONF syntax
// (docs/caching-allocator.md, "Settings: MEMTRACE_ALLOC_CONF"): same keys, same meaning, plus a few memtrace_* keys of our own.
// A string that does not parse never stops the program: each bad piece costs one warning and
// leaves that setting at its default.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace memtrace::caching {

constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kNoMaxSplit = SIZE_MAX;  // max_split_size when unset ("unlimited", -1 in snapshots)

// How segments are obtained and shaped. `PyTorch` is PyTorch's native policy, with or without
// expandable_segments. `Remap` is memtrace's own (memtrace_policy:remap): expandable ranges with
// 2 MiB pages in both pools, and on a miss the whole free pages of cached holes are unmapped before
// any new page is mapped, so reserved bytes track allocated bytes closely (fewer holes held) at the
// price of more map/unmap calls. It needs a backend with virtual-memory support and falls back
// to `PyTorch` without one.
enum class Policy : uint8_t { PyTorch, Remap };
const char* policy_name(Policy p);

struct AllocConf {
  size_t max_split_size = kNoMaxSplit;         // max_split_size_mb (bytes here)
  size_t max_non_split_rounding = 20 * kMiB;   // max_non_split_rounding_mb
  size_t large_segment_size = 20 * kMiB;       // large_segment_size_mb (kLargeBuffer)
  // roundup_power2_divisions: division count for each power-of-two interval [2^(20+i), 2^(21+i))
  // bytes (interval 0 also covers everything below 2 MiB); 0 = plain 512-byte rounding.
  std::array<uint32_t, 16> roundup_power2_divisions{};
  double garbage_collection_threshold = 0;     // (0,1); 0 = off. Needs a memory fraction.
  // per_process_memory_fraction: unset = no limit (and garbage collection stays off, as in PyTorch).
  std::optional<double> per_process_memory_fraction;
  bool expandable_segments = false;
  bool release_lock_on_cudamalloc = false;     // accepted for compatibility; the lock is kept

  // --- memtrace's own keys ---
  Policy policy = Policy::PyTorch;             // memtrace_policy:pytorch|remap
  // memtrace_deferred_free:True (default) keeps the real free's promise: freed blocks wait in a
  // pending batch until one Backend::synchronize() covers them. False frees at once, with
  // PyTorch's stream-ordered semantics (what `memtrace replay` models).
  bool deferred_free = true;
  // memtrace_free_batch_mb: pending bytes that force a synchronize at the free that crosses it
  // (0 = only a cache miss flushes the batch).
  size_t free_batch_bytes = 0;

  std::string source;  // the string this was parsed from, for snapshots' allocator_settings
};

// Parses `text` (commas, colons, brackets and whitespace as PyTorch tokenizes them). Unknown keys,
// malformed or out-of-range values append one human-readable warning each to `warnings` (may be
// null) and keep the default. Keys of PyTorch's pinned-host and backend options are accepted and
// ignored (a warning only when `backend` asks for anything but `native`).
AllocConf parse_alloc_conf(std::string_view text, std::vector<std::string>* warnings);

// Request rounding (docs/caching-allocator.md, "Request rounding"): 512-byte minimum/multiple, or
// power-of-two divisions.
size_t round_size(const AllocConf& conf, size_t size);
// Which interval of roundup_power2_divisions `size` falls in (0..15).
int roundup_interval(size_t size);

}  // namespace memtrace::caching
