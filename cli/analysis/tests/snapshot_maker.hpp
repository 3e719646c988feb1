// Builds reader::Snapshot objects in code for the unit tests: strings and stacks interned as the
// reader does, segments with blocks whose addresses follow from their sizes, trace entries.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "cli/reader/snapshot.hpp"

namespace memtrace::analysis::test {

using reader::Action;
using reader::BlockState;

class SnapshotMaker {
 public:
  reader::Snapshot s;

  reader::StrId str(const std::string& v) {
    auto it = strs_.find(v);
    if (it != strs_.end()) return it->second;
    if (v.empty()) return 0;
    s.strings.push_back(v);
    return strs_[v] = static_cast<reader::StrId>(s.strings.size() - 1);
  }
  // Frames given innermost first as "name@file:line".
  reader::StackId stack(const std::vector<std::string>& frames) {
    std::vector<reader::FrameId> ids;
    for (const std::string& f : frames) {
      size_t at = f.find('@'), colon = f.rfind(':');
      reader::Frame fr;
      fr.name = str(f.substr(0, at));
      fr.filename = str(f.substr(at + 1, colon - at - 1));
      fr.line = std::stoll(f.substr(colon + 1));
      s.frames.push_back(fr);
      ids.push_back(static_cast<reader::FrameId>(s.frames.size() - 1));
    }
    if (ids.empty()) return 0;
    s.stacks.push_back(ids);
    return static_cast<reader::StackId>(s.stacks.size() - 1);
  }
  // A segment of `blocks` = {size, requested, state, stack}; total = sum of sizes.
  struct B {
    uint64_t size, requested;
    BlockState state;
    reader::StackId stack = 0;
  };
  reader::Segment& segment(int device, uint64_t addr, const std::vector<B>& blocks, reader::StackId stack = 0) {
    reader::Segment seg;
    seg.device = device;
    seg.address = addr;
    seg.stack = stack;
    uint64_t a = addr;
    for (const B& b : blocks) {
      reader::Block blk;
      blk.address = a;
      blk.size = b.size;
      blk.requested_size = b.requested;
      blk.state = b.state;
      blk.stack = b.stack;
      seg.blocks.push_back(blk);
      a += b.size;
    }
    seg.total_size = a - addr;
    s.segments.push_back(seg);
    return s.segments.back();
  }
  reader::TraceEntry& entry(int device, Action a, uint64_t addr, uint64_t size, int64_t t = 0, reader::StackId stack = 0,
                            const std::string& category = "") {
    if (static_cast<int>(s.device_traces.size()) <= device) s.device_traces.resize(device + 1);
    reader::TraceEntry e;
    e.action = a;
    e.addr = addr;
    e.size = size;
    e.time_us = t;
    e.stack = stack;
    e.category = str(category);
    s.device_traces[device].push_back(e);
    return s.device_traces[device].back();
  }
  // memtrace's shape of one allocation: segment_alloc + alloc, and its free triple.
  void mt_alloc(int device, uint64_t addr, uint64_t size, int64_t t, reader::StackId stack, const std::string& cat) {
    entry(device, Action::SegmentAlloc, addr, size, t, stack, cat);
    entry(device, Action::Alloc, addr, size, t, stack, cat);
  }
  void mt_free(int device, uint64_t addr, uint64_t size, int64_t t, reader::StackId stack, const std::string& cat) {
    entry(device, Action::FreeRequested, addr, size, t, stack, cat);
    entry(device, Action::FreeCompleted, addr, size, t, stack, cat);
    entry(device, Action::SegmentFree, addr, size, t, stack, cat);
  }

 private:
  std::map<std::string, reader::StrId> strs_{{"", 0}};
};

}  // namespace memtrace::analysis::test
