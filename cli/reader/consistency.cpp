#include "cli/reader/consistency.hpp"

#include <algorithm>
#include <cinttypes>
#include <cstdio>

namespace memtrace::reader {

namespace {

// Held sizes and addresses above this were negative in the file (the decoder keeps their bits): no
// device has 2^63 bytes. Requests are not held memory: an oom entry may ask for SIZE_MAX.
constexpr uint64_t kImpossible = uint64_t{1} << 63;

std::string hex(uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof b, "%#" PRIx64, v);
  return b;
}

std::string signed_text(uint64_t v) { return std::to_string(static_cast<int64_t>(v)); }

class Finder {
 public:
  Finder(size_t limit) : limit_(limit) {}

  void add(std::string what) {
    ++total_;
    if (limit_ == 0 || found_.size() < limit_) found_.push_back(Inconsistency{std::move(what)});
  }

  void segments(const Snapshot& s) {
    std::vector<size_t> order;
    for (size_t i = 0; i < s.segments.size(); ++i) {
      const Segment& seg = s.segments[i];
      std::string where = "segments[" + std::to_string(i) + "] (device " + std::to_string(seg.device) + ", " +
                          hex(seg.address) + ")";
      bool sane = true;
      if (seg.total_size >= kImpossible) {
        add(where + ": total_size is " + signed_text(seg.total_size));
        sane = false;
      }
      if (sane && (seg.address >= kImpossible || seg.address + seg.total_size < seg.address)) {
        add(where + ": the segment lies outside the address space");
        sane = false;
      }
      uint64_t sum = 0;
      bool blocks_sane = true;
      for (size_t b = 0; b < seg.blocks.size(); ++b) {
        const Block& blk = seg.blocks[b];
        if (blk.size >= kImpossible) {
          add(where + ".blocks[" + std::to_string(b) + "]: size is " + signed_text(blk.size));
          blocks_sane = false;
          break;
        }
        sum += blk.size;
      }
      if (sane && blocks_sane && sum > seg.total_size)
        add(where + ": its blocks add up to " + std::to_string(sum) + " bytes, more than its total_size " +
            std::to_string(seg.total_size));
      if (sane) order.push_back(i);
    }
    // Two segments of one device that share a byte: the same allocation written twice, or two
    // that cannot both be real.
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      const Segment &x = s.segments[a], &y = s.segments[b];
      if (x.device != y.device) return x.device < y.device;
      if (x.address != y.address) return x.address < y.address;
      return a < b;
    });
    size_t reach = 0;  // among the segments so far on this device, the one that ends last
    for (size_t k = 0; k < order.size(); ++k) {
      const Segment& cur = s.segments[order[k]];
      if (k == 0 || s.segments[order[reach]].device != cur.device) {
        reach = k;
        continue;
      }
      const Segment& prev = s.segments[order[reach]];
      if (cur.address - prev.address < prev.total_size) {
        std::string a = "segments[" + std::to_string(order[reach]) + "]";
        std::string b = "segments[" + std::to_string(order[k]) + "] (device " + std::to_string(cur.device) + ", " +
                        hex(cur.address) + ")";
        if (cur.address == prev.address && cur.total_size == prev.total_size)
          add(b + " duplicates " + a);
        else
          add(b + " overlaps " + a + " (" + hex(prev.address) + ", " + std::to_string(prev.total_size) + " bytes)");
      }
      if (cur.address + cur.total_size > prev.address + prev.total_size) reach = k;
    }
  }

  void traces(const Snapshot& s) {
    for (size_t d = 0; d < s.device_traces.size(); ++d) {
      const auto& t = s.device_traces[d];
      for (size_t i = 0; i < t.size(); ++i) {
        const TraceEntry& e = t[i];
        if (e.action == Action::Oom || e.action == Action::Other || e.action == Action::Snapshot) continue;
        if (e.size >= kImpossible)
          add("device_traces[" + std::to_string(d) + "][" + std::to_string(i) + "] (" +
              std::string(action_name(e.action)) + " at " + hex(e.addr) + "): size is " + signed_text(e.size));
      }
    }
  }

  std::vector<Inconsistency> found_;
  size_t total_ = 0;

 private:
  size_t limit_;
};

}  // namespace

std::vector<Inconsistency> find_inconsistencies(const Snapshot& s, size_t limit, size_t* total) {
  Finder f(limit);
  f.segments(s);
  f.traces(s);
  if (total) *total = f.total_;
  return std::move(f.found_);
}

}  // namespace memtrace::reader
