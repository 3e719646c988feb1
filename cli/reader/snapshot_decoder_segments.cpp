// Segments and their blocks, read in the final pass; block addresses recomputed as the viewer does.
#include <string>

#include "cli/reader/snapshot_decoder_internal.hpp"

namespace memtrace::reader::detail {

bool Decoder::decode_segment(Value v, Key key, size_t index, std::vector<Segment>* out, Problem* p) {
  std::string where = key_text(key) + ("[" + std::to_string(index) + "]");
  if (!vm_.is_kind(v, ObjKind::kDict)) {
    p->what = where + " is a " + (vm_.is_kind(v, ObjKind::kRecord) ? std::string("trace entry or frame")
                                                                  : std::string(vm_.type_name(v))) +
              ", expected a segment dict";
    p->offset = offset_of(v, 0);
    return false;
  }
  uint32_t o = static_cast<uint32_t>(v.payload());
  p->offset = vm_.obj(o).offset();
  Segment seg;
  std::string why;
  auto need = [&](Key k) -> const Value* {
    const Value* f = find(o, k);
    if (!f) p->what = where + ": no " + quoted(k) + " key";
    return f;
  };
  const Value* address = need(Key::Address);
  if (!address) return false;
  const Value* total = need(Key::TotalSize);
  if (!total) return false;
  const Value* blocks = need(Key::Blocks);
  if (!blocks) return false;
  bool ok = u64(*address, Key::Address, &seg.address, &why) && u64(*total, Key::TotalSize, &seg.total_size, &why);
  int64_t dev = 0;
  if (ok) {
    if (const Value* f = find(o, Key::Device)) ok = i64(*f, Key::Device, &dev, &why);
  }
  if (ok && (dev < -1 || dev > 1 << 20)) {
    why = quoted(Key::Device) + " is " + std::to_string(dev) + ", not a device index";
    ok = false;
  }
  seg.device = static_cast<int>(dev);
  if (ok) {
    if (const Value* f = find(o, Key::Stream); f && !f->is_none()) ok = u64(*f, Key::Stream, &seg.stream, &why);
  }
  if (ok) {
    if (const Value* f = find(o, Key::SegmentType)) ok = str(*f, Key::SegmentType, &seg.segment_type, &why);
  }
  if (ok) {
    if (const Value* f = find(o, Key::IsExpandable)) {
      if (f->is_bool()) {
        seg.is_expandable = f->payload() == 2;
      } else if (!f->is_none()) {
        why = quoted(Key::IsExpandable) + " is a " + vm_.type_name(*f) + ", expected a bool";
        ok = false;
      }
    }
  }
  if (ok) {
    if (const Value* f = find(o, Key::Frames)) ok = stack_of(*f, &seg.stack, &why);
  }
  if (!ok) {
    p->what = where + ": " + why;
    return false;
  }
  if (!vm_.is_kind(*blocks, ObjKind::kList) && !vm_.is_kind(*blocks, ObjKind::kTuple)) {
    p->what = where + ": " + quoted(Key::Blocks) + " is a " + vm_.type_name(*blocks) + ", expected a list";
    return false;
  }
  // Recomputed by the writer from the blocks, or read above: everything else is kept.
  const uint32_t known[] = {key_id(Key::Device),      key_id(Key::Address),       key_id(Key::TotalSize),
                            key_id(Key::AllocatedSize), key_id(Key::ActiveSize),  key_id(Key::RequestedSize),
                            key_id(Key::Stream),      key_id(Key::SegmentType),   key_id(Key::IsExpandable),
                            key_id(Key::Frames),      key_id(Key::Blocks)};
  seg.kept = kept_pairs(o, known, sizeof(known) / sizeof(known[0]));
  size_t nb;
  const Value* b = vm_.items(static_cast<uint32_t>(blocks->payload()), &nb);
  produce(nb + 1);
  seg.blocks.reserve(nb);
  uint64_t addr = seg.address;
  for (size_t i = 0; i < nb; ++i) {
    Block blk;
    if (!decode_block(b[i], where + "." + key_text(Key::Blocks) + "[" + std::to_string(i) + "]", &blk, p)) return false;
    blk.address = addr;
    addr += blk.size;
    seg.blocks.push_back(blk);
  }
  out->push_back(std::move(seg));
  return true;
}

// One block's size, requested size, state and stack; its address is the caller's.
bool Decoder::decode_block(Value v, const std::string& where, Block* blk, Problem* p) {
  if (!vm_.is_kind(v, ObjKind::kDict)) {
    p->what = where + " is a " + vm_.type_name(v) + ", expected a block dict";
    p->offset = offset_of(v, p->offset);
    return false;
  }
  uint32_t bo = static_cast<uint32_t>(v.payload());
  const Value* size = find(bo, Key::Size);
  if (!size) {
    p->what = where + ": no " + quoted(Key::Size) + " key";
    p->offset = vm_.obj(bo).offset();
    return false;
  }
  std::string why;
  bool ok = u64(*size, Key::Size, &blk->size, &why);
  if (ok) {
    if (const Value* f = find(bo, Key::RequestedSize); f && !f->is_none())
      ok = u64(*f, Key::RequestedSize, &blk->requested_size, &why);
  }
  if (ok) {
    blk->state = BlockState::Other;
    if (const Value* f = find(bo, Key::State)) {
      StrId s = 0;
      ok = str(*f, Key::State, &s, &why);
      if (s == st_allocated_) blk->state = BlockState::ActiveAllocated;
      else if (s == st_pending_ || s == st_awaiting_) blk->state = BlockState::ActivePendingFree;
      else if (s == st_inactive_) blk->state = BlockState::Inactive;
    }
  }
  if (ok) {
    if (const Value* f = find(bo, Key::Frames)) {
      ok = stack_of(*f, &blk->stack, &why);
    } else if (const Value* h = find(bo, Key::History)) {
      // Pre-2023 files: the block's newest history record carries its frames and real size.
      size_t nh = 0;
      const Value* hv = (vm_.is_kind(*h, ObjKind::kList)) ? vm_.items(static_cast<uint32_t>(h->payload()), &nh) : nullptr;
      if (nh > 0 && vm_.is_kind(hv[0], ObjKind::kDict)) {
        uint32_t ho = static_cast<uint32_t>(hv[0].payload());
        if (const Value* f = find(ho, Key::Frames)) ok = stack_of(*f, &blk->stack, &why);
        if (ok) {
          if (const Value* r = find(ho, Key::RealSize); r && !r->is_none())
            ok = u64(*r, Key::RealSize, &blk->requested_size, &why);
        }
      }
    }
  }
  if (ok) {
    if (const Value* f = find(bo, Key::Ranges)) {
      ok = range_of(*f, &blk->range, &why);
      saw_ranges_ = true;
    }
  }
  if (!ok) {
    p->what = where + ": " + why;
    p->offset = vm_.obj(bo).offset();
    return false;
  }
  // 'ranges' stays in the kept keys too: merge writes it back from there (snapshot_decoder_internal.hpp).
  const uint32_t known[] = {key_id(Key::Address), key_id(Key::Size),   key_id(Key::RequestedSize),
                            key_id(Key::State),   key_id(Key::Frames), key_id(Key::History)};
  blk->kept = kept_pairs(bo, known, sizeof(known) / sizeof(known[0]));
  return true;
}

bool Decoder::decode_segments(Value v, Key key, std::vector<Segment>* out, Problem* p) {
  if (!vm_.is_kind(v, ObjKind::kList) && !vm_.is_kind(v, ObjKind::kTuple)) {
    p->what = quoted(key) + " is a " + vm_.type_name(v) + ", expected a list";
    p->offset = offset_of(v, 0);
    return false;
  }
  size_t n;
  const Value* it = vm_.items(static_cast<uint32_t>(v.payload()), &n);
  out->reserve(n);
  for (size_t i = 0; i < n; ++i)
    if (!decode_segment(it[i], key, i, out, p)) return false;
  return true;
}

}  // namespace memtrace::reader::detail
