// SIMCUDA_FAIL: make chosen entry points fail, to exercise error paths of callers.
//   SIMCUDA_FAIL=NAME[=CODE][@N][,NAME[=CODE][@N]...]
// NAME is an exact ELF name (cuMemAlloc_v2, cuMemAllocAsync_ptsz, ...), CODE a decimal
// CUresult (default 2, CUDA_ERROR_OUT_OF_MEMORY), N the 1-based call that fails (default:
// every call). Calls are counted per ELF name, across threads; several items may name the
// same entry point (e.g. "cuMemCreate@1,cuMemCreate@3").
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <string>

#include "internal.h"

namespace sim {
namespace {

struct Rule {
  std::string name;
  CUresult code;
  uint64_t nth;  // 0: every call
  size_t counter;
};

struct Rules {
  std::vector<Rule> rules;
  std::unique_ptr<std::atomic<uint64_t>[]> counters;
};

bool parse_number(const std::string& s, uint64_t* out) {
  if (s.empty() || s.size() > 18) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  *out = v;
  return true;
}

bool parse_item(const std::string& item, Rule* r) {
  size_t at = item.find('@');
  std::string head = item.substr(0, at);
  r->nth = 0;
  if (at != std::string::npos) {
    if (!parse_number(item.substr(at + 1), &r->nth) || r->nth == 0) return false;
  }
  size_t eq = head.find('=');
  r->name = head.substr(0, eq);
  uint64_t code = CUDA_ERROR_OUT_OF_MEMORY;
  if (eq != std::string::npos && (!parse_number(head.substr(eq + 1), &code) || code > 0x7fffffff)) return false;
  r->code = static_cast<CUresult>(code);
  if (r->name.empty()) return false;
  for (char c : r->name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

Rules* load() {
  auto* rules = new Rules();
  const char* env = std::getenv("SIMCUDA_FAIL");
  if (env == nullptr || *env == '\0') return rules;
  std::vector<Rule> parsed;
  std::vector<std::string> names;
  std::string all(env);
  size_t pos = 0;
  bool ok = true;
  while (ok) {
    size_t comma = all.find(',', pos);
    Rule r;
    ok = parse_item(all.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos), &r);
    if (!ok) break;
    size_t i = 0;
    while (i < names.size() && names[i] != r.name) ++i;
    if (i == names.size()) names.push_back(r.name);
    r.counter = i;
    parsed.push_back(std::move(r));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  if (!ok) {
    warn("SIMCUDA_FAIL='%s' is malformed (expected NAME[=CODE][@N],...); using the default: no fault injection", env);
    return rules;
  }
  rules->rules = std::move(parsed);
  rules->counters.reset(new std::atomic<uint64_t>[names.size()]);
  for (size_t i = 0; i < names.size(); ++i) rules->counters[i].store(0);
  return rules;
}

const Rules& rules() {
  static std::atomic<const Rules*> slot{nullptr};
  return build_once(slot, load);
}

}  // namespace

bool fault_hit(const char* elf_name, CUresult* code) {
  const Rules& rs = rules();
  if (rs.rules.empty()) return false;
  uint64_t call = 0;
  bool counted = false;
  for (const Rule& r : rs.rules) {
    if (r.name != elf_name) continue;
    if (!counted) {
      call = rs.counters[r.counter].fetch_add(1, std::memory_order_relaxed) + 1;
      counted = true;
    }
    if (r.nth == 0 || r.nth == call) {
      *code = r.code;
      return true;
    }
  }
  return false;
}

}  // namespace sim
