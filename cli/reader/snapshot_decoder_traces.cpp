// Trace entries, frames and stacks: made typed records while the pickle VM builds them (take()),
// then copied into device_traces list by list (snapshot_decoder_internal.hpp, "Decisions").
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <new>
#include <string>

#include "cli/reader/snapshot_decoder_internal.hpp"

namespace memtrace::reader::detail {

EntryChunk::EntryChunk(size_t bytes) {
  constexpr size_t kHuge = size_t{2} << 20;
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  bytes_ = (bytes + page - 1) / page * page;
  // Room to slide to a 2 MiB boundary, then the slack on both sides unmapped.
  const size_t slack = bytes_ >= kHuge ? kHuge : 0;
  void* m = ::mmap(nullptr, bytes_ + slack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) throw std::bad_alloc();
  uintptr_t base = reinterpret_cast<uintptr_t>(m);
  uintptr_t start = slack ? (base + kHuge - 1) & ~(uintptr_t{kHuge} - 1) : base;
  if (start > base) ::munmap(m, start - base);
  if (base + bytes_ + slack > start + bytes_)
    ::munmap(reinterpret_cast<void*>(start + bytes_), base + bytes_ + slack - (start + bytes_));
  p_ = reinterpret_cast<TraceEntry*>(start);
  pickle::advise_huge_pages(p_, bytes_);
}

void EntryChunk::reset() {
  if (p_ != nullptr) ::munmap(p_, bytes_);
  p_ = nullptr;
}

StreamId Decoder::stream_id(uint64_t value) {
  if (value == 0) return 0;
  auto [it, added] = stream_ids_.try_emplace(value, static_cast<StreamId>(snap_.streams.size()));
  if (added) snap_.streams.push_back(value);
  return it->second;
}

bool Decoder::entry_from_pairs(const Value* kv, size_t n_pairs, TraceEntry* e, std::string* why,
                               format::RawId* kept) {
  bool have_action = false;
  size_t kept_from = kept_tmp_.size();
  // A key the analyses do not read: kept as it was (user_metadata and compile_context only when
  // not '', which PyTorch writes on every entry and the writer writes by default).
  auto keep = [&](Value k, Value v) {
    if (!kept) return;
    Key f = field(k);
    if ((f == Key::UserMetadata || f == Key::CompileContext) && v.is_str() && v.payload() == 0) return;
    if (f == Key::Ranges && v.is_obj()) {  // one copy per list object: entries share it
      auto [it, added] = ranges_raw_.try_emplace(static_cast<uint32_t>(v.payload()), 0);
      if (added) it->second = to_raw(v, 1);
      kept_tmp_.push_back(to_raw(k, 1));
      kept_tmp_.push_back(it->second);
      return;
    }
    kept_tmp_.push_back(to_raw(k, 1));
    kept_tmp_.push_back(to_raw(v, 1));
  };
  uint64_t size_exact = 0, free_exact = 0, device_free = 0;
  bool have_device_free = false;
  // A decimal string written by memtrace beside a value capped at 2^53 - 1; anything else is ignored.
  auto exact = [&](Value v, uint64_t* out) {
    if (!v.is_str()) return;
    std::string_view t = vm_.str(static_cast<uint32_t>(v.payload()));
    uint64_t n = 0;
    if (t.empty() || t.size() > 20) return;
    for (char c : t) {
      if (c < '0' || c > '9') return;
      uint64_t d = static_cast<uint64_t>(c - '0');
      if (n > (UINT64_MAX - d) / 10) return;
      n = n * 10 + d;
    }
    *out = n;
  };
  for (size_t i = 0; i < n_pairs; ++i) {
    Value v = kv[2 * i + 1];
    switch (field(kv[2 * i])) {
      case Key::Action:
        if (!v.is_str()) {
          *why = quoted(Key::Action) + " is a " + vm_.type_name(v) + ", expected a str";
          return false;
        }
        e->action_str = static_cast<StrId>(v.payload());
        e->action = Action::Other;
        for (int a = 0; a < format::kActionCount; ++a)
          if (action_id_[a] == e->action_str) e->action = static_cast<Action>(a);
        have_action = true;
        break;
      case Key::Addr:
        if (!v.is_none() && !u64(v, Key::Addr, &e->addr, why)) return false;
        break;
      case Key::Size:
        if (!v.is_none() && !u64(v, Key::Size, &e->size, why)) return false;
        break;
      case Key::Stream:
        if (!v.is_none()) {
          uint64_t stream;
          if (!u64(v, Key::Stream, &stream, why)) return false;
          e->stream = stream_id(stream);
        }
        break;
      case Key::TimeUs:
        if (!v.is_none() && !i64(v, Key::TimeUs, &e->time_us, why)) return false;
        break;
      case Key::Category:
        if (!str(v, Key::Category, &e->category, why)) return false;
        break;
      case Key::DeviceFree:
        if (!v.is_none()) {
          if (!u64(v, Key::DeviceFree, &device_free, why)) return false;
          have_device_free = true;
        }
        break;
      case Key::Frames:
        if (!stack_of(v, &e->stack, why)) return false;
        break;
      case Key::Ranges:
        if (!range_of(v, &e->range, why)) return false;
        saw_ranges_ = true;
        keep(kv[2 * i], v);
        break;
      case Key::SizeExact:  // memtrace's true value of a size the viewer's numbers cannot hold
        exact(v, &size_exact);
        break;
      case Key::DeviceFreeExact:
        exact(v, &free_exact);
        break;
      default:
        keep(kv[2 * i], v);
        break;
    }
  }
  if (kept) {
    *kept = 0;
    if (kept_tmp_.size() > kept_from) {
      *kept = snap_.raw.container(format::RawKind::kDict, kept_tmp_.data() + kept_from, kept_tmp_.size() - kept_from);
      e->has_kept = true;
    }
    kept_tmp_.resize(kept_from);
  }
  if (size_exact) e->size = size_exact;
  if (free_exact) {
    device_free = free_exact;
    have_device_free = true;
  }
  // Only an oom's device_free means anything (and only an oom's is written back); an oom has no
  // address of its own, so its `addr` holds it (TraceEntry::device_free()).
  if (have_device_free && e->action == Action::Oom) e->set_device_free(device_free);
  if (!have_action) {
    *why = "no " + quoted(Key::Action) + " key";
    return false;
  }
  return true;
}

bool Decoder::frame_from_pairs(const Value* kv, size_t n_pairs, FrameId* out, std::string* why) {
  FrameKey f{0, 0, 0};
  for (size_t i = 0; i < n_pairs; ++i) {
    Value k = kv[2 * i], v = kv[2 * i + 1];
    if (!k.is_str()) continue;
    uint32_t id = static_cast<uint32_t>(k.payload());
    if (id == key_id(Key::Filename)) {
      if (!str(v, Key::Filename, &f.file, why)) return false;
    } else if (id == key_id(Key::Name)) {
      if (!str(v, Key::Name, &f.name, why)) return false;
    } else if (id == key_id(Key::Line)) {
      if (!v.is_none() && !i64(v, Key::Line, &f.line, why)) return false;
    }
  }
  auto it = frame_ids_.find(f);
  if (it != frame_ids_.end()) {
    *out = it->second;
    return true;
  }
  FrameId fid = static_cast<FrameId>(snap_.frames.size());
  snap_.frames.push_back(Frame{f.file, f.name, f.line});
  frame_ids_.emplace(f, fid);
  *out = fid;
  return true;
}

bool Decoder::frame_of(Value v, FrameId* out, std::string* why) {
  if (v.is_obj()) {
    uint32_t o = static_cast<uint32_t>(v.payload());
    const pickle::Obj& ob = vm_.obj(o);
    if (ob.kind == ObjKind::kRecord && ob.record_kind == kFrameRecord) {
      *out = ob.payload;
      return true;
    }
    if (ob.kind == ObjKind::kDict) {
      size_t n;
      const Value* kv = vm_.items(o, &n);
      if (!frame_from_pairs(kv, n / 2, out, why)) return false;
      vm_.make_record(o, kFrameRecord, *out);
      return true;
    }
  }
  *why = std::string("a frame is a ") + vm_.type_name(v) + ", expected a dict";
  return false;
}

StackId Decoder::intern_stack(const std::vector<FrameId>& ids) {
  if (ids.empty()) return 0;
  std::string_view key(reinterpret_cast<const char*>(ids.data()), ids.size() * sizeof(FrameId));
  auto it = stack_ids_.find(key);
  if (it != stack_ids_.end()) return it->second;
  StackId id = static_cast<StackId>(snap_.stacks.size());
  snap_.stacks.push_back(ids);
  const std::vector<FrameId>& stored = snap_.stacks.back();
  stack_ids_.emplace(std::string_view(reinterpret_cast<const char*>(stored.data()), stored.size() * sizeof(FrameId)),
                     id);
  stack_frames_ += ids.size();
  if ((id & 1023) == 0) account();
  return id;
}

bool Decoder::stack_of(Value v, StackId* out, std::string* why) {
  if (v.is_none()) {
    *out = 0;
    return true;
  }
  if (v.is_obj()) {
    uint32_t o = static_cast<uint32_t>(v.payload());
    const pickle::Obj& ob = vm_.obj(o);
    if (ob.kind == ObjKind::kList || ob.kind == ObjKind::kTuple) {
      if (ob.flags & pickle::Obj::kCached) {
        *out = ob.payload;
        return true;
      }
      size_t n;
      const Value* it = vm_.items(o, &n);
      ids_tmp_.clear();
      for (size_t i = 0; i < n; ++i) {
        FrameId f;
        if (!frame_of(it[i], &f, why)) {
          *why = quoted(Key::Frames) + ": " + *why;
          return false;
        }
        ids_tmp_.push_back(f);
      }
      *out = intern_stack(ids_tmp_);
      vm_.cache(o, *out, true);
      return true;
    }
  }
  *why = quoted(Key::Frames) + " is a " + vm_.type_name(v) + ", expected a list";
  return false;
}

bool Decoder::range_of(Value v, RangeId* out, std::string* why) {
  *out = 0;
  if (v.is_none()) return true;
  if (v.is_obj()) {
    uint32_t o = static_cast<uint32_t>(v.payload());
    const pickle::Obj& ob = vm_.obj(o);
    if ((ob.kind == ObjKind::kList || ob.kind == ObjKind::kTuple) && !(ob.flags & pickle::Obj::kCached)) {
      if (auto it = range_ids_.find(o); it != range_ids_.end()) {
        *out = it->second;
        return true;
      }
      size_t n;
      const Value* it = vm_.items(o, &n);
      spend(n + 1);
      names_tmp_.clear();
      for (size_t i = 0; i < n; ++i) {
        if (!it[i].is_str()) {
          *why = quoted(Key::Ranges) + " holds a " + vm_.type_name(it[i]) + ", expected a list of str";
          return false;
        }
        if (names_tmp_.size() < kMaxRangeDepth) names_tmp_.push_back(static_cast<StrId>(it[i].payload()));
      }
      *out = ranges_.stack(names_tmp_.data(), names_tmp_.size());
      range_ids_.emplace(o, *out);
      return true;
    }
    if (ob.flags & pickle::Obj::kCached) {  // a frames list the decoder already read
      *why = quoted(Key::Ranges) + " holds a dict, expected a list of str";
      return false;
    }
  }
  *why = quoted(Key::Ranges) + " is a " + vm_.type_name(v) + ", expected a list of str";
  return false;
}

void Decoder::account() {
  vm_.set_hook_bytes(pool_bytes_ + snap_.raw.memory_bytes() + pool_kept_.size() * 8 + snap_.frames.size() * (sizeof(Frame) + 64) +
                     snap_.ranges.size() * (sizeof(RangeNode) + 32) + range_ids_.size() * 48 +
                     snap_.stacks.size() * 112 + stack_frames_ * sizeof(FrameId));
}

bool Decoder::take(pickle::Vm& vm, uint32_t obj, const Value* kv, size_t n_pairs) {
  bool action = false, file = false, name = false;
  for (size_t i = 0; i < n_pairs; ++i) {
    Key k = field(kv[2 * i]);
    action |= k == Key::Action;
    file |= k == Key::Filename;
    name |= k == Key::Name;
  }
  std::string why;
  if (action) {
    TraceEntry e;
    format::RawId kept = 0;
    if (pool_size_ >= UINT32_MAX - kChunk || !entry_from_pairs(kv, n_pairs, &e, &why, &kept)) return false;
    if (pool_size_ == chunk_start(static_cast<uint32_t>(pool_.size()))) {
      pool_.emplace_back(chunk_capacity(static_cast<uint32_t>(pool_.size())) * sizeof(TraceEntry));
      pool_bytes_ += pool_.back().bytes();
      account();
    }
    uint32_t idx = pool_size_++;
    new (&pool_at(idx)) TraceEntry(e);
    if (kept) {
      pool_kept_.emplace_back(idx, kept);
      if ((pool_kept_.size() & 1023) == 0) account();
    }
    vm.make_record(obj, kTraceRecord, idx);
    return true;
  }
  if (file && name) {
    FrameId f;
    if (!frame_from_pairs(kv, n_pairs, &f, &why)) return false;
    vm.make_record(obj, kFrameRecord, f);
    if ((snap_.frames.size() & 1023) == 0) account();
    return true;
  }
  return false;
}

bool Decoder::decode_traces(Value v, const Value* host, Problem* p) {
  if (!vm_.is_kind(v, ObjKind::kList) && !vm_.is_kind(v, ObjKind::kTuple)) {
    p->what = quoted(Key::DeviceTraces) + " is a " + vm_.type_name(v) + ", expected a list of lists";
    p->offset = offset_of(v, 0);
    return false;
  }
  if (host && !vm_.is_kind(*host, ObjKind::kList) && !vm_.is_kind(*host, ObjKind::kTuple)) {
    p->what = quoted(Key::HostTraces) + " is a " + vm_.type_name(*host) + ", expected a list";
    p->offset = offset_of(*host, 0);
    return false;
  }
  size_t nd;
  const Value* dev = vm_.items(static_cast<uint32_t>(v.payload()), &nd);
  // Every list to copy: one per device, then host_traces. Their entries share the pool.
  struct List {
    Value list;
    std::vector<TraceEntry>* out;
    std::string where;
  };
  std::vector<List> lists;
  lists.reserve(nd + 1);
  produce(nd);
  snap_.device_traces.resize(nd);
  snap_.kept_entries.resize(nd + 1);
  for (size_t d = 0; d < nd; ++d) {
    std::string where = key_text(Key::DeviceTraces) + ("[" + std::to_string(d) + "]");
    if (!vm_.is_kind(dev[d], ObjKind::kList) && !vm_.is_kind(dev[d], ObjKind::kTuple)) {
      p->what = where + " is a " + vm_.type_name(dev[d]) + ", expected a list";
      p->offset = offset_of(dev[d], offset_of(v, 0));
      return false;
    }
    lists.push_back({dev[d], &snap_.device_traces[d], std::move(where)});
  }
  if (host) lists.push_back({*host, &snap_.host_traces, key_text(Key::HostTraces)});
  auto kept_of = [&](const List& l) -> std::vector<std::pair<uint32_t, format::RawId>>& {
    return snap_.kept_entries[l.out == &snap_.host_traces ? nd : static_cast<size_t>(l.out - snap_.device_traces.data())];
  };

  // Pool chunks still referred to by the lists not yet copied (freed as soon as none is).
  std::vector<uint32_t> refs(pool_.size(), 0);
  for (const List& l : lists) {
    size_t ne;
    const Value* it = vm_.items(static_cast<uint32_t>(l.list.payload()), &ne);
    spend(ne + 1);
    for (size_t i = 0; i < ne; ++i) {
      if (!it[i].is_obj()) continue;
      const pickle::Obj& ob = vm_.obj(static_cast<uint32_t>(it[i].payload()));
      if (ob.kind == ObjKind::kRecord && ob.record_kind == kTraceRecord) ++refs[chunk_of(ob.payload)];
    }
  }
  for (size_t c = 0; c < pool_.size(); ++c)
    if (refs[c] == 0) pool_[c].reset();

  for (const List& l : lists) {
    size_t ne;
    const Value* it = vm_.items(static_cast<uint32_t>(l.list.payload()), &ne);
    std::vector<TraceEntry>& out = *l.out;
    produce(ne);
    out.reserve(ne);
    pickle::advise_huge_pages(out.data(), ne * sizeof(TraceEntry));
    for (size_t i = 0; i < ne; ++i) {
      Value e = it[i];
      std::string why;
      if (e.is_obj()) {
        uint32_t o = static_cast<uint32_t>(e.payload());
        const pickle::Obj& ob = vm_.obj(o);
        if (ob.kind == ObjKind::kRecord && ob.record_kind == kTraceRecord) {
          out.push_back(pool_at(ob.payload));
          if (out.back().has_kept) {
            auto k = std::lower_bound(pool_kept_.begin(), pool_kept_.end(),
                                      std::make_pair(ob.payload, format::RawId{0}));
            if (k != pool_kept_.end() && k->first == ob.payload)
              kept_of(l).emplace_back(static_cast<uint32_t>(out.size() - 1), k->second);
            else
              out.back().has_kept = false;
          }
          // Give back a pool chunk as soon as no list still to be copied refers to it.
          uint32_t c = chunk_of(ob.payload);
          if (--refs[c] == 0) pool_[c].reset();
          continue;
        }
        if (ob.kind == ObjKind::kDict) {
          size_t n;
          const Value* kv = vm_.items(o, &n);
          TraceEntry te;
          format::RawId kept = 0;
          if (entry_from_pairs(kv, n / 2, &te, &why, &kept)) {
            out.push_back(te);
            if (kept) kept_of(l).emplace_back(static_cast<uint32_t>(out.size() - 1), kept);
            continue;
          }
        }
      }
      if (why.empty()) why = std::string("is a ") + vm_.type_name(e) + ", expected a trace entry dict";
      p->what = l.where + ("[" + std::to_string(i) + "]: ") + why;
      p->offset = offset_of(e, offset_of(l.list, 0));
      return false;
    }
  }
  return true;
}

}  // namespace memtrace::reader::detail
