// Which loaded object holds an address, cheaply: a snapshot of the dynamic loader's list
// (dl_iterate_phdr), binary-searched. For owner attribution while recording; the Symbolizer
// (libdwfl) is the heavier, late path.
#pragma once
#include <cstdint>
#include <deque>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace memtrace::unwind {

// Path of the file mapped at addr according to /proc/self/maps; "" for anonymous memory or
// an unmapped address. Reads the whole file: not for hot paths.
std::string mapped_path(uintptr_t addr);

// An object loaded by the dynamic loader (the program, its libraries, dlopened ones, the
// vDSO), per dl_iterate_phdr.
struct LoadedObject {
  std::string path;     // canonical: realpath(), /proc/self/exe for the program, "[vdso]"
  uintptr_t start = 0;  // lowest PT_LOAD page
  uintptr_t end = 0;    // one past the highest PT_LOAD page
  std::vector<std::pair<uintptr_t, uintptr_t>> segments;  // PT_LOAD [start, end)
  uintptr_t bias = 0;   // load bias (dlpi_addr): runtime address - ELF virtual address
  std::string build_id; // lower-case hex from the loaded image's NT_GNU_BUILD_ID note; "" if none
};
// The loaded objects, in the loader's order (the program first).
std::vector<LoadedObject> loaded_objects();
// Objects added + removed by the dynamic loader so far: changes with every dlopen/dlclose
// that maps or unmaps something. Cheap (looks at the first entry only).
uint64_t loader_generation();

class ModuleMap {
 public:
  ModuleMap();  // takes a snapshot
  ModuleMap(const ModuleMap&) = delete;
  ModuleMap& operator=(const ModuleMap&) = delete;

  // Canonical path (realpath; the main program as /proc/self/exe) of the object whose
  // PT_LOAD segments contain addr; "" if none. On a miss the loader's list is re-read when
  // anything was loaded or unloaded since the snapshot. Thread-safe; the view stays valid
  // for the map's lifetime.
  std::string_view path_of(uintptr_t addr);
  // Re-reads the loader's list if it changed since the last read; true if it did.
  bool refresh_if_changed();
  size_t module_count();
  // Every object this map has seen loaded, including those unloaded (dlclose) since: what a
  // late symbolizer needs for addresses recorded while they were there. Unloaded ones last.
  std::vector<LoadedObject> history();

 private:
  struct Segment {
    uintptr_t start, end;
    const std::string* path;
  };
  void read_locked();
  const std::string* intern_locked(std::string path);

  std::mutex mu_;
  std::vector<Segment> segments_;   // sorted by start
  std::vector<LoadedObject> loaded_;   // as of the last read
  std::vector<LoadedObject> unloaded_; // seen before, gone at a later read (bounded: 4096)
  std::deque<std::string> paths_;   // every path ever seen; never shrinks
  uint64_t generation_ = 0;
  size_t modules_ = 0;
};

}  // namespace memtrace::unwind
