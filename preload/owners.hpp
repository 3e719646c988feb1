// Owner ids for stacks, worked out once per distinct stack (the module of the first frame
// outside memtrace, the driver and the runtime), so that device bytes can be counted by owner
// as they move, and the summary can give each owner's peak, not only what is left at exit.
#pragma once
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "core/records.hpp"
#include "core/state_memory.hpp"
#include "core/spinlock.hpp"
#include "unwind/module_map.hpp"

namespace memtrace::unwind {
class StackTable;
class ModuleMap;
}  // namespace memtrace::unwind

namespace memtrace::preload {

class OwnerTable {
 public:
  OwnerTable();
  ~OwnerTable();
  OwnerTable(const OwnerTable&) = delete;
  OwnerTable& operator=(const OwnerTable&) = delete;

  // Owner id of a stack (0: unknown). The first call for a stack looks its frames up in the
  // loader's module list; later calls are one load.
  uint16_t owner_of(uint32_t stack_id, const unwind::StackTable& stacks);
  // Every object seen loaded while stacks were recorded, dlclosed ones included.
  std::vector<unwind::LoadedObject> module_history();
  // Names by id; index 0 is "unknown".
  std::vector<std::string> names();
  void clear();  // forked child
  // Names are also written to `names` (kMaxOwners of them, the state file's) as ids are handed
  // out, with `published` stored after each: a reader of the file names owners as this table does.
  void attach_state(OwnerName* names, std::atomic<uint64_t>* published);

 private:
  uint16_t intern(const std::string& name);
  void publish(int id);

  std::atomic<uint16_t>* by_stack_ = nullptr;  // id + 1 per stack id, 0 = not worked out yet
  size_t by_stack_len_ = 0;
  SpinLock lock_;
  std::string names_[kMaxOwners];
  int count_ = 1;
  unwind::ModuleMap* modules_ = nullptr;
  std::string exe_;
  OwnerName* mirror_ = nullptr;
  std::atomic<uint64_t>* published_ = nullptr;
};

}  // namespace memtrace::preload
