// What the VM's users read: values as numbers, containers' items, the string table, records the
// hooks made; and the memory the VM holds: counted, capped, given back, on huge pages.
#include <string>
#include <utility>
#include <vector>

#include <sys/mman.h>
#include <unistd.h>

#include "cli/reader/pickle_vm.hpp"

namespace memtrace::reader::pickle {

std::vector<std::string> Vm::take_strings() {
  string_ids_.clear();
  std::vector<std::string> out;
  out.reserve(strings_.size());
  for (auto& s : strings_) out.push_back(std::move(s));
  strings_.clear();
  return out;
}

bool Vm::as_i64(Value v, int64_t* out) const {
  if (v.tag() == Tag::kInt) {
    *out = static_cast<int64_t>(v.bits) >> 3;
    return true;
  }
  if (v.tag() == Tag::kNum && numbers_[v.payload()].kind == 0) {
    *out = static_cast<int64_t>(numbers_[v.payload()].bits);
    return true;
  }
  return false;
}

bool Vm::as_u64(Value v, uint64_t* out) const {
  int64_t i;
  if (as_i64(v, &i)) {
    *out = static_cast<uint64_t>(i);
    return true;
  }
  if (v.tag() == Tag::kNum && numbers_[v.payload()].kind == 1) {
    *out = numbers_[v.payload()].bits;
    return true;
  }
  return false;
}

bool Vm::as_double(Value v, double* out) const {
  if (v.tag() == Tag::kFloat) {
    *out = floats_[v.payload()];
    return true;
  }
  int64_t i;
  uint64_t u;
  if (as_i64(v, &i)) {
    *out = static_cast<double>(i);
    return true;
  }
  if (as_u64(v, &u)) {
    *out = static_cast<double>(u);
    return true;
  }
  return false;
}

const char* Vm::type_name(Value v) const {
  switch (v.tag()) {
    case Tag::kInt:
    case Tag::kNum: return "int";
    case Tag::kStr: return "str";
    case Tag::kFloat: return "float";
    case Tag::kBytes: return "bytes";
    case Tag::kSpecial: return v.is_none() ? "None" : "bool";
    case Tag::kObj:
      switch (objs_[v.payload()].kind) {
        case ObjKind::kList: return "list";
        case ObjKind::kDict:
        case ObjKind::kRecord: return "dict";
        case ObjKind::kTuple: return "tuple";
        case ObjKind::kSet: return "set";
        case ObjKind::kCallable: return "global";
        case ObjKind::kPending: return "object";
      }
  }
  return "object";
}

void Vm::release_storage(uint32_t obj) {
  Obj& o = objs_[obj];
  if (o.storage == 0) return;
  std::vector<Value>& v = storage_[o.storage - 1];
  if (v.capacity() > 256) {
    storage_bytes_ -= v.capacity() * sizeof(Value);
    std::vector<Value>().swap(v);
  } else {
    v.clear();  // kept with its capacity for the next small container
  }
  free_storage_.push_back(o.storage - 1);
  o.storage = 0;
}

const Value* Vm::items(uint32_t obj, size_t* n) const {
  const Obj& o = objs_[obj];
  if (o.storage == 0) {
    *n = 0;
    return nullptr;
  }
  const std::vector<Value>& v = storage_[o.storage - 1];
  *n = v.size();
  return v.data();
}

const Value* Vm::find(uint32_t dict_obj, uint32_t key_id) const {
  size_t n;
  const Value* kv = items(dict_obj, &n);
  Value key = Value::make(Tag::kStr, key_id);
  for (size_t i = n; i >= 2; i -= 2)
    if (kv[i - 2].bits == key.bits) return &kv[i - 1];
  return nullptr;
}

void Vm::make_record(uint32_t obj, uint8_t record_kind, uint32_t payload) {
  release_storage(obj);  // a record's content lives with the hook
  Obj& o = objs_[obj];
  o.kind = ObjKind::kRecord;
  o.record_kind = record_kind;
  o.payload = payload;
  o.flags |= Obj::kSealed;
}

void Vm::cache(uint32_t obj, uint32_t id, bool release_items) {
  Obj& o = objs_[obj];
  o.flags |= Obj::kSealed | Obj::kCached;
  o.payload = id;
  if (release_items) release_storage(obj);
}

size_t Vm::memory_bytes() const {
  return stack_.capacity() * sizeof(Value) + marks_.capacity() * sizeof(size_t) +
         memo_.capacity() * sizeof(Value) + memo_far_.size() * 48 + objs_.capacity() * sizeof(Obj) +
         storage_.capacity() * sizeof(std::vector<Value>) + storage_bytes_ + numbers_.capacity() * sizeof(Number) +
         floats_.capacity() * sizeof(double) + string_bytes_ + hook_bytes_;
}

void advise_huge_pages(const void* p, size_t bytes) {
#ifdef MADV_HUGEPAGE
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  uintptr_t from = (reinterpret_cast<uintptr_t>(p) + kHuge - 1) & ~(kHuge - 1);
  uintptr_t to = (reinterpret_cast<uintptr_t>(p) + bytes) & ~(kHuge - 1);
  if (p && to > from) madvise(reinterpret_cast<void*>(from), to - from, MADV_HUGEPAGE);
#else
  (void)p;
  (void)bytes;
#endif
}

bool Vm::check_memory(size_t cap, bool drop_consumed, size_t pos, size_t* dropped_to) {
  if (memory_bytes() > cap)
    return fail("decoding needs more than " + std::to_string(cap >> 20) +
                " MiB (16x the file size + 64 MiB); not a snapshot");
  // Everything read so far has been copied out (strings are interned): the mapped file's pages
  // behind us can go, so the file does not count in full on top of the decoded data.
  if (drop_consumed && pos > *dropped_to + (size_t{8} << 20)) {
    size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    uintptr_t from = (reinterpret_cast<uintptr_t>(input_) + *dropped_to + page - 1) & ~(page - 1);
    uintptr_t to = (reinterpret_cast<uintptr_t>(input_) + pos) & ~(page - 1);
    if (to > from) madvise(reinterpret_cast<void*>(from), to - from, MADV_DONTNEED);
    *dropped_to = pos;
  }
  return true;
}

}  // namespace memtrace::reader::pickle
