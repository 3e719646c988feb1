#include "core/event.hpp"

#include <cstring>

namespace memtrace {

namespace {
constexpr const char* kActionNames[kActionCount] = {
    "alloc",       "free_requested", "free_completed", "segment_alloc", "segment_free",
    "segment_map", "segment_unmap",  "oom",            "snapshot",
};
}  // namespace

const char* action_name(Action a) { return kActionNames[static_cast<int>(a)]; }

bool parse_action(const char* name, Action* out) {
  for (int i = 0; i < kActionCount; ++i) {
    if (std::strcmp(name, kActionNames[i]) == 0) {
      *out = static_cast<Action>(i);
      return true;
    }
  }
  return false;
}

}  // namespace memtrace
