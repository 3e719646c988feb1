// Range stacks, each stored once (docs/ranges.md): a node is a (parent node, name) pair, so a
// thread's whole stack of open ranges is one 32-bit id, a push is "find or add this child" and a
// pop is "go to the parent". Names are interned the same way. Lookups of known names and nodes
// take no lock; adding one takes a short lock. Storage is reserved address space, made usable page
// by page as it is touched, so the bound is known at start and costs RAM only as ranges arrive.
// Constant-initialisable: a program may push a range before any constructor of ours has run.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "core/spinlock.hpp"

namespace memtrace {

struct RangeNode {
  uint32_t parent = 0;  // 0: outermost
  uint32_t name = 0;    // 0: a range past the table's bound, shown unnamed
  uint32_t depth = 0;   // 1 for an outermost range
};

class RangeTable {
 public:
  static constexpr uint32_t kMaxNodes = 1u << 16;
  static constexpr uint32_t kMaxNames = 1u << 16;
  static constexpr size_t kMaxNameBytes = size_t{4} << 20;
  static constexpr uint32_t kMaxNameLength = 256;  // longer names are cut (at a UTF-8 boundary)
  static constexpr uint32_t kMaxDepth = 64;        // deeper pushes are counted, not named

  constexpr RangeTable() = default;
  RangeTable(const RangeTable&) = delete;
  RangeTable& operator=(const RangeTable&) = delete;

  // Id (> 0) of this name, 0 once the table is full.
  uint32_t intern_name(std::string_view name);
  // The node for `name` opened inside `parent`; `parent` itself once the table is full or the
  // stack is kMaxDepth deep (the caller counts those pushes so that pops stay paired).
  uint32_t child(uint32_t parent, uint32_t name);

  RangeNode node(uint32_t id) const;
  std::string_view name(uint32_t id) const;  // followed by a NUL in memory: data() is a C string
  uint32_t node_count() const { return nodes_used_.load(std::memory_order_acquire); }  // ids 1..count
  uint32_t name_count() const { return names_used_.load(std::memory_order_acquire); }

  // What a dump copies: every node (index = id, [0] is "no range") and every name ([0] is "").
  void copy_to(std::vector<RangeNode>* nodes, std::vector<std::string_view>* names) const;
  // A forked child keeps its parent's table (node ids in its thread's state stay meaningful), but
  // not a lock another parent thread held at the fork.
  void reset_after_fork() { insert_lock_.reset(); }

 private:
  struct NameRecord {
    uint32_t offset;
    uint32_t length;
  };
  struct Slot {
    std::atomic<uint64_t> key;  // 0: empty; published after `id`
    std::atomic<uint32_t> id;
  };
  static constexpr uint32_t kIndexSlots = 1u << 17;  // per index; twice the bound, so probes stay short

  bool map_storage();
  uint32_t find_name(uint64_t hash, std::string_view name) const;
  uint32_t find_node(uint64_t key) const;

  std::atomic<bool> mapped_{false};
  SpinLock insert_lock_;
  char* bytes_ = nullptr;
  NameRecord* names_ = nullptr;
  RangeNode* nodes_ = nullptr;
  Slot* name_index_ = nullptr;
  Slot* node_index_ = nullptr;
  size_t bytes_used_ = 0;  // under insert_lock_
  std::atomic<uint32_t> names_used_{0};
  std::atomic<uint32_t> nodes_used_{0};
};

}  // namespace memtrace
