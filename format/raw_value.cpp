// The pool behind RawValues (raw_value.hpp).
#include "format/raw_value.hpp"

#include <cstring>

namespace memtrace::format {

RawId RawValues::real(double d) {
  uint64_t bits;
  std::memcpy(&bits, &d, sizeof bits);
  return add({RawKind::kFloat, 0, bits});
}

double RawValues::real_of(RawId id) const {
  double d;
  std::memcpy(&d, &nodes_[id].v, sizeof d);
  return d;
}

RawId RawValues::text(std::string_view s, RawKind k) {
  uint64_t idx;
  auto it = string_index_.find(s);
  if (it != string_index_.end()) {
    idx = it->second;
  } else {
    idx = strings_.size();
    strings_.emplace_back(s);
    string_index_.emplace(strings_.back(), idx);
    string_bytes_ += s.size() + 32;
  }
  // Identical strings share one node: keys repeated in every entry cost one node.
  auto& memo = k == RawKind::kStr ? str_nodes_ : bytes_nodes_;
  auto n = memo.find(idx);
  if (n != memo.end()) return n->second;
  RawId id = add({k, 0, idx});
  memo.emplace(idx, id);
  return id;
}

RawId RawValues::container(RawKind k, const RawId* children, size_t n) {
  uint64_t first = kids_.size();
  kids_.insert(kids_.end(), children, children + n);
  return add({k, static_cast<uint32_t>(n), first});
}

const RawId* RawValues::find(RawId dict, std::string_view key) const {
  const Node& d = nodes_[dict];
  if (d.kind != RawKind::kDict) return nullptr;
  const RawId* c = children(dict);
  const RawId* found = nullptr;
  for (uint32_t i = 0; i + 1 < d.count; i += 2)
    if (is_str(c[i], key)) found = &c[i + 1];
  return found;
}

RawId RawValues::copy_from(const RawValues& o, RawId id) {
  const Node& n = o.nodes_[id];
  switch (n.kind) {
    case RawKind::kNone: return 0;
    case RawKind::kStr: return str(o.text_of(id));
    case RawKind::kBytes: return bytes(o.text_of(id));
    case RawKind::kList:
    case RawKind::kTuple:
    case RawKind::kDict:
    case RawKind::kSet: {
      std::vector<RawId> kids(n.count);
      for (uint32_t i = 0; i < n.count; ++i) kids[i] = copy_from(o, o.children(id)[i]);
      return container(n.kind, kids.data(), kids.size());
    }
    default: return add(n);
  }
}

size_t RawValues::memory_bytes() const {
  return nodes_.capacity() * sizeof(Node) + kids_.capacity() * sizeof(RawId) + string_bytes_ +
         (str_nodes_.size() + bytes_nodes_.size()) * 32;
}

}  // namespace memtrace::format
