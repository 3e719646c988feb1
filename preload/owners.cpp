#include "preload/owners.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "unwind/module_map.hpp"
#include "unwind/owner.hpp"
#include "unwind/stack_table.hpp"

namespace memtrace::preload {

OwnerTable::OwnerTable() {
  names_[0] = "unknown";
  // One slot per possible stack id, reserved up front and paid for as stacks appear.
  size_t len = static_cast<size_t>(unwind::StackTable::kMaxStacks) + 1;
  void* p = mmap(nullptr, len * sizeof(std::atomic<uint16_t>), PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p != MAP_FAILED) {
    by_stack_ = static_cast<std::atomic<uint16_t>*>(p);
    by_stack_len_ = len;
  }
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n > 0) exe_.assign(buf, static_cast<size_t>(n));
}

OwnerTable::~OwnerTable() {
  if (by_stack_) munmap(by_stack_, by_stack_len_ * sizeof(std::atomic<uint16_t>));
  delete modules_;
}

uint16_t OwnerTable::intern(const std::string& name) {
  for (int i = 0; i < count_; ++i)
    if (names_[i] == name) return static_cast<uint16_t>(i);
  if (count_ == kMaxOwners - 1) {
    names_[count_] = "(other owners)";
    publish(count_++);
  }
  if (count_ >= kMaxOwners) return static_cast<uint16_t>(kMaxOwners - 1);
  names_[count_] = name;
  publish(count_);
  return static_cast<uint16_t>(count_++);
}

// Under lock_ (or before any other thread can name owners). The name is written before the count
// that covers it is stored, so a reader never takes a half-written one.
void OwnerTable::publish(int id) {
  if (!mirror_) return;
  char* out = mirror_[id].text;
  const size_t n = std::min(names_[id].size(), sizeof mirror_[id].text - 1);
  std::memcpy(out, names_[id].data(), n);
  out[n] = '\0';
  published_->store(static_cast<uint64_t>(id) + 1, std::memory_order_release);
}

void OwnerTable::attach_state(OwnerName* names, std::atomic<uint64_t>* published) {
  SpinGuard g(lock_);
  mirror_ = names;
  published_ = published;
  if (!mirror_ || !published_) {
    mirror_ = nullptr;
    return;
  }
  for (int i = 0; i < count_; ++i) publish(i);
}

uint16_t OwnerTable::owner_of(uint32_t stack_id, const unwind::StackTable& stacks) {
  if (stack_id == 0 || !by_stack_ || stack_id >= by_stack_len_) return 0;
  uint16_t known = by_stack_[stack_id].load(std::memory_order_acquire);
  if (known) return static_cast<uint16_t>(known - 1);
  SpinGuard g(lock_);
  known = by_stack_[stack_id].load(std::memory_order_relaxed);
  if (known) return static_cast<uint16_t>(known - 1);
  if (!modules_) modules_ = new unwind::ModuleMap();
  // A new stack may hold frames of a library loaded since the last look; reading the loader's
  // list now also keeps libraries that are dlclosed later in the map's history, so their
  // addresses still resolve when a snapshot is written.
  modules_->refresh_if_changed();
  uint16_t id = intern(unwind::owner_of_stack(stacks.get(stack_id), *modules_, exe_));
  by_stack_[stack_id].store(static_cast<uint16_t>(id + 1), std::memory_order_release);
  return id;
}

std::vector<unwind::LoadedObject> OwnerTable::module_history() {
  SpinGuard g(lock_);
  return modules_ ? modules_->history() : std::vector<unwind::LoadedObject>{};
}

std::vector<std::string> OwnerTable::names() {
  SpinGuard g(lock_);
  return std::vector<std::string>(names_, names_ + count_);
}

void OwnerTable::clear() {
  lock_.reset();
  if (by_stack_) madvise(by_stack_, by_stack_len_ * sizeof(std::atomic<uint16_t>), MADV_DONTNEED);
  for (int i = 1; i < count_; ++i) names_[i].clear();
  count_ = 1;
  mirror_ = nullptr;  // the state file is the parent's
  published_ = nullptr;
}

}  // namespace memtrace::preload
