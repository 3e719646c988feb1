// One allocator_settings entry as the snapshot stores it: a key and a plain value. Whoever owns
// the allocator's settings describes them as a list of these (preload/), and the snapshot writer
// writes them without knowing what they mean (docs/snapshot-format.md, "allocator_settings and memtrace's metadata"), so
// that adding a setting is one edit where the settings are parsed.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace memtrace::format {

// A dict of integers keyed by text, as roundup_power2_divisions is written.
using IntDict = std::vector<std::pair<std::string, int64_t>>;

struct Setting {
  std::string key;
  // monostate is None.
  std::variant<std::monostate, bool, int64_t, uint64_t, double, std::string, IntDict> value;
};
using Settings = std::vector<Setting>;

}  // namespace memtrace::format
