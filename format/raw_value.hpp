// Values a reader kept as they were, for a writer to write back unchanged: the keys memtrace does
// not interpret (a newer PyTorch's, another tool's) and values whose shape varies (user_metadata as
// a string or a dict, external_annotations). A RawValues is a flat pool; a RawId names one value
// in it, 0 is None (docs/snapshot-format.md, "Keys kept as they were").
//
// Memory: one 16-byte node per value, strings stored once per distinct content, containers as
// runs of child ids. Only what the reader did not interpret lands here, so a snapshot whose
// entries carry nothing new costs nothing.
#pragma once
#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace memtrace::format {

using RawId = uint32_t;

enum class RawKind : uint8_t { kNone, kFalse, kTrue, kInt, kUInt, kFloat, kStr, kBytes, kList, kTuple, kDict, kSet };

class RawValues {
 public:
  struct Node {
    RawKind kind = RawKind::kNone;
    uint32_t count = 0;  // containers: children (a dict: 2 per pair, key first)
    uint64_t v = 0;      // int bits, double bits, string index, or index of the first child in kids
  };

  RawId none() const { return 0; }
  RawId boolean(bool b) { return add({b ? RawKind::kTrue : RawKind::kFalse, 0, 0}); }
  RawId integer(int64_t i) { return add({RawKind::kInt, 0, static_cast<uint64_t>(i)}); }
  RawId uinteger(uint64_t u) { return add({RawKind::kUInt, 0, u}); }
  RawId real(double d);
  RawId str(std::string_view s) { return text(s, RawKind::kStr); }
  RawId bytes(std::string_view s) { return text(s, RawKind::kBytes); }
  // A container of the given children (a dict: key, value, key, value ...).
  RawId container(RawKind k, const RawId* children, size_t n);

  const Node& node(RawId id) const { return nodes_[id]; }
  const RawId* children(RawId id) const { return kids_.data() + nodes_[id].v; }
  std::string_view text_of(RawId id) const { return strings_[nodes_[id].v]; }
  double real_of(RawId id) const;
  // A dict's value under a string key (last one wins); nullptr when absent or id is not a dict.
  const RawId* find(RawId dict, std::string_view key) const;
  // True when id is a str equal to s.
  bool is_str(RawId id, std::string_view s) const {
    return nodes_[id].kind == RawKind::kStr && text_of(id) == s;
  }
  // Copies id (and everything under it) from another pool into this one.
  RawId copy_from(const RawValues& other, RawId id);
  size_t memory_bytes() const;

 private:
  RawId add(const Node& n) {
    nodes_.push_back(n);
    return static_cast<RawId>(nodes_.size() - 1);
  }
  RawId text(std::string_view s, RawKind k);

  std::vector<Node> nodes_{Node{}};
  std::vector<RawId> kids_;
  std::deque<std::string> strings_;  // a deque: views of its strings stay valid as it grows
  std::unordered_map<std::string_view, uint64_t> string_index_;
  std::unordered_map<uint64_t, RawId> str_nodes_, bytes_nodes_;  // by string index: one node each
  size_t string_bytes_ = 0;
};

}  // namespace memtrace::format
