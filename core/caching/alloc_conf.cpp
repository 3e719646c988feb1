// Parsing of the PYTORCH_CUDA_ALLOC_CONF syntax, and request rounding (docs/caching-allocator.md,
// "Settings: MEMTRACE_ALLOC_CONF" and "Request rounding").
#include "core/caching/alloc_conf.hpp"

#include <bit>
#include <charconv>
#include <cmath>
#include <cstdlib>

namespace memtrace::caching {

const char* policy_name(Policy p) {
  switch (p) {
    case Policy::PyTorch: return "pytorch";
    case Policy::Remap: return "remap";
  }
  return "?";
}

int roundup_interval(size_t size) {
  if (size == 0) return 0;
  int idx = static_cast<int>(std::bit_width(size)) - 1 - 20;
  return idx < 0 ? 0 : (idx > 15 ? 15 : idx);
}

size_t round_size(const AllocConf& conf, size_t size) {
  constexpr size_t kMin = 512;
  if (size < kMin) return kMin;
  size_t d = conf.roundup_power2_divisions[roundup_interval(size)];
  if (d > 1 && size > kMin * d) {
    if (std::has_single_bit(size)) return size;
    size_t floor2 = std::bit_floor(size);
    size_t step = floor2 / std::bit_floor(d);
    if (step == 0) return floor2 << 1;
    return (size + step - 1) / step * step;
  }
  return (size + kMin - 1) / kMin * kMin;
}

namespace {

bool is_punct(char c) { return c == ',' || c == ':' || c == '[' || c == ']'; }

// PyTorch's tokenization: the four punctuation characters are tokens of their own, whitespace
// separates and is dropped, anything else runs together.
std::vector<std::string> tokenize(std::string_view s) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (is_punct(c) || c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      if (!cur.empty()) out.push_back(std::move(cur)), cur.clear();
      if (is_punct(c)) out.emplace_back(1, c);
    } else {
      cur.push_back(c);
    }
  }
  if (!cur.empty()) out.push_back(std::move(cur));
  return out;
}

bool parse_u64(const std::string& s, uint64_t* out) {
  if (s.empty()) return false;
  auto r = std::from_chars(s.data(), s.data() + s.size(), *out);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

bool parse_double(const std::string& s, double* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size() || !std::isfinite(v)) return false;
  *out = v;
  return true;
}

bool parse_bool(const std::string& s, bool* out) {
  if (s == "True") return *out = true, true;
  if (s == "False") return *out = false, true;
  return false;
}

bool pow2_or_zero(uint64_t v) { return v == 0 || std::has_single_bit(v); }

class Parser {
 public:
  Parser(std::string_view text, std::vector<std::string>* warnings)
      : toks_(tokenize(text)), warnings_(warnings) {
    conf_.source = std::string(text);
  }

  AllocConf run() {
    bool explicit_max_split = false;
    while (i_ < toks_.size()) {
      if (toks_[i_] == ",") { ++i_; continue; }
      const std::string key = toks_[i_++];
      if (is_punct(key[0])) { warn("unexpected '" + key + "'"); skip_entry(); continue; }
      if (!eat(":")) { warn("option '" + key + "' has no value"); skip_entry(); continue; }
      if (key == "roundup_power2_divisions") {
        roundup(key);
      } else {
        if (at("[")) { warn("option '" + key + "' takes a single value, not a list"); skip_entry(); continue; }
        if (i_ >= toks_.size() || is_punct(toks_[i_][0])) { warn("option '" + key + "' has no value"); skip_entry(); continue; }
        const std::string v = toks_[i_++];
        if (key == "max_split_size_mb") explicit_max_split |= scalar(key, v);
        else scalar(key, v);
      }
      if (i_ < toks_.size() && toks_[i_] != ",") { warn("unexpected '" + toks_[i_] + "' after option '" + key + "'"); skip_entry(); }
    }
    if (explicit_max_split && conf_.max_split_size < conf_.large_segment_size) {
      warn("max_split_size_mb must be at least large_segment_size_mb; using unlimited");
      conf_.max_split_size = kNoMaxSplit;
    }
    return std::move(conf_);
  }

 private:
  void warn(const std::string& w) {
    if (warnings_) warnings_->push_back(w);
  }
  bool at(const char* t) const { return i_ < toks_.size() && toks_[i_] == t; }
  bool eat(const char* t) { return at(t) ? (++i_, true) : false; }
  // Drops the rest of a malformed entry: up to the next comma outside brackets.
  void skip_entry() {
    int depth = 0;
    while (i_ < toks_.size()) {
      const std::string& t = toks_[i_];
      if (t == "[") ++depth;
      else if (t == "]") depth = depth > 0 ? depth - 1 : 0;
      else if (t == "," && depth == 0) return;
      ++i_;
    }
  }
  void bad(const std::string& key, const std::string& v, const char* why) {
    warn("option '" + key + "': bad value '" + v + "' (" + why + "); default kept");
  }

  bool mib(const std::string& key, const std::string& v, uint64_t min, size_t* out) {
    uint64_t n;
    if (!parse_u64(v, &n)) return bad(key, v, "not a whole number of MiB"), false;
    if (n < min) return bad(key, v, ("below " + std::to_string(min)).c_str()), false;
    if (n > (SIZE_MAX >> 20)) return bad(key, v, "too large"), false;
    *out = static_cast<size_t>(n) << 20;
    return true;
  }
  void boolean(const std::string& key, const std::string& v, bool* out) {
    if (!parse_bool(v, out)) bad(key, v, "must be True or False");
  }

  // Returns true when the value was taken.
  bool scalar(const std::string& key, const std::string& v) {
    if (key == "max_split_size_mb") return mib(key, v, 20, &conf_.max_split_size);
    if (key == "max_non_split_rounding_mb") return mib(key, v, 20, &conf_.max_non_split_rounding);
    if (key == "large_segment_size_mb") return mib(key, v, 1, &conf_.large_segment_size);
    if (key == "garbage_collection_threshold") {
      double d;
      if (!parse_double(v, &d)) return bad(key, v, "not a number"), false;
      if (!(d > 0 && d < 1)) return bad(key, v, "must be in (0, 1)"), false;
      conf_.garbage_collection_threshold = d;
      return true;
    }
    if (key == "per_process_memory_fraction") {
      double d;
      if (!parse_double(v, &d)) return bad(key, v, "not a number"), false;
      if (!(d >= 0 && d <= 1)) return bad(key, v, "must be in [0, 1]"), false;
      conf_.per_process_memory_fraction = d;
      return true;
    }
    if (key == "expandable_segments") return boolean(key, v, &conf_.expandable_segments), true;
    if (key == "release_lock_on_cudamalloc") return boolean(key, v, &conf_.release_lock_on_cudamalloc), true;
    if (key == "backend") {
      if (v == "native") return true;
      if (v == "cudaMallocAsync") {
        warn("option 'backend:cudaMallocAsync' is not supported by memtrace's allocator; using native");
        return false;
      }
      return bad(key, v, "must be native or cudaMallocAsync"), false;
    }
    // PyTorch's pinned-host and capture options: valid keys, nothing for a device allocator to do.
    if (key == "pinned_use_cuda_host_register" || key == "pinned_num_register_threads" ||
        key == "pinned_use_background_threads" || key == "pinned_reserve_segment_size_mb" ||
        key == "pinned_free_catch_all" || key == "graph_capture_record_stream_reuse" ||
        key == "throw_on_cudamalloc_oom") {
      return true;
    }
    if (key == "memtrace_policy") {
      if (v == "pytorch") return conf_.policy = Policy::PyTorch, true;
      if (v == "remap") return conf_.policy = Policy::Remap, true;
      return bad(key, v, "must be pytorch or remap"), false;
    }
    if (key == "memtrace_deferred_free") return boolean(key, v, &conf_.deferred_free), true;
    if (key == "memtrace_free_batch_mb") return mib(key, v, 0, &conf_.free_batch_bytes);
    warn("unknown option '" + key + "' ignored");
    return false;
  }

  // roundup_power2_divisions: one division count for all intervals, or
  // [<MiB>:<div>, ..., >:<div>] (docs/caching-allocator.md, "Settings: MEMTRACE_ALLOC_CONF").
  void roundup(const std::string& key) {
    if (!eat("[")) {
      if (i_ >= toks_.size() || is_punct(toks_[i_][0])) { warn("option '" + key + "' has no value"); return; }
      const std::string v = toks_[i_++];
      uint64_t d;
      if (!parse_u64(v, &d) || !pow2_or_zero(d)) return bad(key, v, "must be 0 or a power of two");
      conf_.roundup_power2_divisions.fill(static_cast<uint32_t>(d));
      return;
    }
    std::array<uint32_t, 16> divs{};
    int last = -1;
    bool first = true, ok = true;
    while (ok && i_ < toks_.size() && !at("]")) {
      if (eat(",")) continue;
      const std::string k = toks_[i_++];
      if (!eat(":") || i_ >= toks_.size() || is_punct(toks_[i_][0])) {
        warn("option '" + key + "': list entry '" + k + "' has no division; default kept");
        ok = false;
        break;
      }
      const std::string v = toks_[i_++];
      uint64_t d;
      if (!parse_u64(v, &d) || !pow2_or_zero(d)) {
        warn("option '" + key + "': division '" + v + "' must be 0 or a power of two; default kept");
        ok = false;
        break;
      }
      if (k == ">") {
        for (int j = last + 1; j < 16; ++j) divs[j] = static_cast<uint32_t>(d);
        last = 15;
        continue;
      }
      uint64_t mb;
      if (!parse_u64(k, &mb) || !std::has_single_bit(mb)) {
        warn("option '" + key + "': interval '" + k + "' must be a power of two in MiB; default kept");
        ok = false;
        break;
      }
      int idx = static_cast<int>(std::bit_width(mb)) - 1;
      if (idx > 15) idx = 15;
      if (first) {
        for (int j = 0; j < idx; ++j) divs[j] = static_cast<uint32_t>(d);
        first = false;
      }
      divs[idx] = static_cast<uint32_t>(d);
      last = idx > last ? idx : last;
    }
    if (ok && !eat("]")) {
      warn("option '" + key + "': list not closed; default kept");
      return;
    }
    if (!ok) {
      while (i_ < toks_.size() && !eat("]")) ++i_;  // out of the list, then out of the entry
      skip_entry();
      return;
    }
    conf_.roundup_power2_divisions = divs;
  }

  std::vector<std::string> toks_;
  size_t i_ = 0;
  std::vector<std::string>* warnings_;
  AllocConf conf_;
};

}  // namespace

AllocConf parse_alloc_conf(std::string_view text, std::vector<std::string>* warnings) {
  return Parser(text, warnings).run();
}

}  // namespace memtrace::caching
