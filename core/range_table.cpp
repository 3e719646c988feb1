#include "core/range_table.hpp"

#include <sys/mman.h>

#include <cstring>

namespace memtrace {

namespace {

uint64_t hash_bytes(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a: names are short, and this needs no table
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

uint64_t mix(uint64_t k) { return (k ^ (k >> 29)) * 0x9E3779B97F4A7C15ull; }

// Cuts a name at kMaxNameLength bytes without splitting a UTF-8 sequence.
std::string_view bounded(std::string_view s) {
  if (s.size() <= RangeTable::kMaxNameLength) return s;
  size_t n = RangeTable::kMaxNameLength;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return s.substr(0, n);
}

}  // namespace

bool RangeTable::map_storage() {
  if (mapped_.load(std::memory_order_relaxed)) return true;
  const size_t total = kMaxNameBytes + sizeof(NameRecord) * (kMaxNames + 1) + sizeof(RangeNode) * (kMaxNodes + 1) +
                       2 * sizeof(Slot) * kIndexSlots;
  void* p = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return false;
  // Slots first: they are the only atomics, and the mapping's start is page-aligned.
  char* c = static_cast<char*>(p);
  node_index_ = reinterpret_cast<Slot*>(c);
  name_index_ = node_index_ + kIndexSlots;
  nodes_ = reinterpret_cast<RangeNode*>(name_index_ + kIndexSlots);
  names_ = reinterpret_cast<NameRecord*>(nodes_ + kMaxNodes + 1);
  bytes_ = reinterpret_cast<char*>(names_ + kMaxNames + 1);
  mapped_.store(true, std::memory_order_release);
  return true;
}

uint32_t RangeTable::find_name(uint64_t hash, std::string_view name) const {
  const uint64_t key = hash | 1;  // a name's slot holds its hash with the low bit set: never "empty"
  for (uint32_t i = static_cast<uint32_t>(mix(hash) >> 47) & (kIndexSlots - 1);; i = (i + 1) & (kIndexSlots - 1)) {
    uint64_t k = name_index_[i].key.load(std::memory_order_acquire);
    if (k == 0) return 0;
    if (k == key) {
      uint32_t id = name_index_[i].id.load(std::memory_order_relaxed);
      const NameRecord& r = names_[id];
      if (r.length == name.size() && std::memcmp(bytes_ + r.offset, name.data(), name.size()) == 0) return id;
    }
  }
}

uint32_t RangeTable::intern_name(std::string_view name) {
  name = bounded(name);
  const uint64_t hash = hash_bytes(name);
  if (mapped_.load(std::memory_order_acquire)) {
    if (uint32_t id = find_name(hash, name)) return id;
  }
  SpinGuard g(insert_lock_);
  if (!map_storage()) return 0;
  if (uint32_t id = find_name(hash, name)) return id;
  const uint32_t used = names_used_.load(std::memory_order_relaxed);
  if (used >= kMaxNames || bytes_used_ + name.size() + 1 > kMaxNameBytes) return 0;
  const uint32_t id = used + 1;
  // Stored with a NUL after it: a marker's text is a trace entry's note, a C string.
  std::memcpy(bytes_ + bytes_used_, name.data(), name.size());
  bytes_[bytes_used_ + name.size()] = '\0';
  names_[id] = {static_cast<uint32_t>(bytes_used_), static_cast<uint32_t>(name.size())};
  bytes_used_ += name.size() + 1;
  const uint64_t key = hash | 1;
  uint32_t i = static_cast<uint32_t>(mix(hash) >> 47) & (kIndexSlots - 1);
  while (name_index_[i].key.load(std::memory_order_relaxed) != 0) i = (i + 1) & (kIndexSlots - 1);
  name_index_[i].id.store(id, std::memory_order_relaxed);
  name_index_[i].key.store(key, std::memory_order_release);
  names_used_.store(id, std::memory_order_release);
  return id;
}

uint32_t RangeTable::find_node(uint64_t key) const {
  for (uint32_t i = static_cast<uint32_t>(mix(key) >> 47) & (kIndexSlots - 1);; i = (i + 1) & (kIndexSlots - 1)) {
    uint64_t k = node_index_[i].key.load(std::memory_order_acquire);
    if (k == 0) return 0;
    if (k == key + 1) return node_index_[i].id.load(std::memory_order_relaxed);
  }
}

uint32_t RangeTable::child(uint32_t parent, uint32_t name) {
  if (parent != 0 && node(parent).depth >= kMaxDepth) return parent;
  const uint64_t key = (static_cast<uint64_t>(parent) << 32) | name;
  if (mapped_.load(std::memory_order_acquire)) {
    if (uint32_t id = find_node(key)) return id;
  }
  SpinGuard g(insert_lock_);
  if (!map_storage()) return parent;
  if (uint32_t id = find_node(key)) return id;
  const uint32_t used = nodes_used_.load(std::memory_order_relaxed);
  if (used >= kMaxNodes) return parent;
  const uint32_t id = used + 1;
  nodes_[id] = {parent, name, parent ? nodes_[parent].depth + 1 : 1};
  uint32_t i = static_cast<uint32_t>(mix(key) >> 47) & (kIndexSlots - 1);
  while (node_index_[i].key.load(std::memory_order_relaxed) != 0) i = (i + 1) & (kIndexSlots - 1);
  node_index_[i].id.store(id, std::memory_order_relaxed);
  node_index_[i].key.store(key + 1, std::memory_order_release);
  nodes_used_.store(id, std::memory_order_release);
  return id;
}

RangeNode RangeTable::node(uint32_t id) const {
  if (id == 0 || id > node_count()) return {};
  return nodes_[id];
}

std::string_view RangeTable::name(uint32_t id) const {
  if (id == 0 || id > name_count()) return {};
  return {bytes_ + names_[id].offset, names_[id].length};
}

void RangeTable::copy_to(std::vector<RangeNode>* nodes, std::vector<std::string_view>* names) const {
  const uint32_t n = node_count(), m = name_count();
  nodes->assign(1, RangeNode{});
  names->assign(1, std::string_view{});
  for (uint32_t i = 1; i <= n; ++i) nodes->push_back(nodes_[i]);
  for (uint32_t i = 1; i <= m; ++i) names->push_back(name(i));
}

}  // namespace memtrace
