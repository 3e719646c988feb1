// Pickle bytes -> reader::Snapshot: the run of the pickle VM with the decoder as its dict hook, then
// the final pass over the known top-level shape. The decoder's parts and its decisions are in
// snapshot_decoder_internal.hpp.
#include "cli/reader/snapshot_decoder.hpp"

#include <cstdio>
#include <memory>
#include <string>

#include "cli/reader/range_derivation.hpp"
#include "cli/reader/snapshot_decoder_internal.hpp"

namespace memtrace::reader {

namespace detail {

Decoder::Decoder(const std::string& name) : name_(name), vm_(this) {
  // The keys read, interned first (in this order) so that their string ids index field_of_.
  constexpr Key kRead[] = {
      Key::Segments,      Key::DeviceTraces, Key::AllocatorSettings, Key::Action,      Key::Addr,
      Key::Size,          Key::Stream,       Key::TimeUs,            Key::Frames,      Key::Category,
      Key::DeviceFree,    Key::Filename,     Key::Name,              Key::Line,        Key::Device,
      Key::Address,       Key::TotalSize,    Key::SegmentType,       Key::IsExpandable, Key::Blocks,
      Key::State,         Key::RequestedSize, Key::History,          Key::RealSize,    Key::Memtrace,
      Key::Pid,           Key::Rank,         Key::Host,              Key::Exe,         Key::Reason,
      Key::EntriesDropped, Key::AllocatorCaching, Key::Allocator,    Key::SizeExact,   Key::DeviceFreeExact,
      Key::HostSegments,  Key::HostTraces,       Key::MergedPytorchSnapshot, Key::MergedMemtraceSnapshot,
      Key::UserMetadata,  Key::CompileContext,   Key::AllocatedSize,  Key::ActiveSize,  Key::SegmentPoolId,
      Key::ExternalAnnotations, Key::Ranges,
  };
  for (uint32_t& id : key_) id = UINT32_MAX;  // a key not read is never found
  for (Key k : kRead) {
    uint32_t id = vm_.intern(format::key_name(k));
    key_[static_cast<int>(k)] = id;
    if (id < kFieldTable) field_of_[id] = static_cast<uint8_t>(static_cast<int>(k) + 1);
  }
  for (int i = 0; i < format::kActionCount; ++i) action_id_[i] = vm_.intern(format::kActionNames[i]);
  st_allocated_ = vm_.intern(format::block_state_name(BlockState::ActiveAllocated));
  st_pending_ = vm_.intern(format::block_state_name(BlockState::ActivePendingFree));
  st_awaiting_ = vm_.intern(format::kAwaitingFreeAlias);
  st_inactive_ = vm_.intern(format::block_state_name(BlockState::Inactive));
}

bool Decoder::decode_top(Value top, Problem* p) {
  if (vm_.is_kind(top, ObjKind::kList)) {
    // Legacy: torch.cuda.memory_snapshot() returned the segment list alone.
    return decode_segments(top, Key::Segments, &snap_.segments, p);
  }
  if (!vm_.is_kind(top, ObjKind::kDict)) {
    p->what = std::string("not a snapshot: the pickle holds a ") +
              (vm_.is_kind(top, ObjKind::kRecord) ? "trace entry or frame dict" : vm_.type_name(top)) +
              ", expected a dict with " + quoted(Key::Segments) + " and " + quoted(Key::DeviceTraces);
    p->offset = offset_of(top, 0);
    return false;
  }
  uint32_t o = static_cast<uint32_t>(top.payload());
  const Value* seg = find(o, Key::Segments);
  const Value* tr = find(o, Key::DeviceTraces);
  if (!seg || !tr) {
    p->what = std::string("not a snapshot: the top-level dict has no ") +
              (!seg && !tr ? quoted(Key::Segments) + " and no " + quoted(Key::DeviceTraces)
               : !seg      ? quoted(Key::Segments)
                           : quoted(Key::DeviceTraces)) +
              " key";
    p->offset = vm_.obj(o).offset();
    return false;
  }
  // Pinned host memory, when the file has it (docs/snapshot-format.md, "Pinned host memory:
  // host_segments and host_traces"): read with the device keys' rules, kept apart from them.
  const Value* host_tr = find(o, Key::HostTraces);
  const Value* host_seg = find(o, Key::HostSegments);
  if (!decode_traces(*tr, host_tr, p)) return false;
  if (!decode_segments(*seg, Key::Segments, &snap_.segments, p)) return false;
  if (host_seg && !decode_segments(*host_seg, Key::HostSegments, &snap_.host_segments, p)) return false;
  if (const Value* s = find(o, Key::AllocatorSettings)) {
    decode_settings(*s);
    if (vm_.is_kind(*s, ObjKind::kDict)) snap_.settings_raw = to_raw(*s, 0);
  }
  // Kept as they were for `memtrace merge` (docs/snapshot-format.md, "Keys kept as they were").
  if (const Value* a = find(o, Key::ExternalAnnotations)) snap_.external_annotations = to_raw(*a, 0);
  const uint32_t known[] = {key_id(Key::Segments),     key_id(Key::DeviceTraces),      key_id(Key::HostSegments),
                            key_id(Key::HostTraces),   key_id(Key::AllocatorSettings), key_id(Key::ExternalAnnotations),
                            vm_.intern("categories"), vm_.intern("version")};  // the viewer's own
  snap_.kept_top = kept_pairs(o, known, sizeof(known) / sizeof(known[0]));
  return true;
}

LoadResult Decoder::run(std::string_view bytes, bool drop_consumed) {
  LoadResult r;
  Value top;
  std::string err;
  // One budget for the whole decode: values kept while the VM runs (take()) spend it too.
  work_left_ = 16 * bytes.size() + (size_t{1} << 20);
  output_left_ = bytes.size() / 4 + 4096;
  kept_left_ = bytes.size() / 2 + 4096;  // a kept value costs at least 2 bytes of pickle
  bool vm_ok;
  try {
    vm_ok = vm_.run(bytes, &top, &err, drop_consumed);
  } catch (const OverBudget&) {
    r.error = LoadError{name_ + ": containers shared through the memo make this pickle decode to far more than "
                                "its size (not a snapshot)"};
    return r;
  }
  if (!vm_ok) {
    r.error = LoadError{name_ + ": " + err};
    return r;
  }
  Problem p;
  bool ok;
  try {
    ok = decode_top(top, &p);
  } catch (const OverBudget&) {
    r.error = LoadError{name_ + ": containers shared through the memo make this pickle decode to far more than "
                                "its size (not a snapshot)"};
    return r;
  }
  if (!ok) {
    char where[64];
    std::snprintf(where, sizeof(where), " (object at byte %llu)", static_cast<unsigned long long>(p.offset));
    r.error = LoadError{name_ + ": " + p.what + where};
    return r;
  }
  pool_.clear();
  frame_ids_.clear();
  stack_ids_.clear();
  snap_.strings = vm_.take_strings();
  if (saw_ranges_) snap_.ranges_from = RangesFrom::kKeys;
  else if (snap_.producer == Producer::kPyTorch || !snap_.memtrace.merged_pytorch.empty())
    derive_ranges_from_annotations(snap_);
  r.snapshot = std::move(snap_);
  return r;
}

}  // namespace detail

LoadResult decode_snapshot(std::string_view bytes, const std::string& name_for_errors, bool drop_consumed) {
  auto d = std::make_unique<detail::Decoder>(name_for_errors);
  return d->run(bytes, drop_consumed);
}

}  // namespace memtrace::reader
