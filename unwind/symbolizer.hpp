// Turns return addresses into frames, late (when a snapshot is written), each distinct
// address once. ELF symbol tables give names even for programs built without -rdynamic;
// DWARF (elfutils libdw) gives file, line and inlined frames where debug info exists.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "unwind/module_map.hpp"

namespace memtrace::unwind {

// The views stay valid for the Symbolizer's lifetime (it keeps every string it hands out
// once, however many frames share it).
struct SymFrame {
  std::string_view function;  // demangled; "module+0xoffset" when nothing better exists
                              // (module: file name; offset: of the return address from the
                              // load bias); "[unknown]+0xaddress" outside every module
  std::string_view file;      // "" when unknown (the module path is used by callers then)
  int line = 0;
};

// One loaded object as the Symbolizer saw it.
struct ModuleInfo {
  std::string path;      // canonical path (as module_of() gives it); "[vdso]" for the vDSO
  uintptr_t start = 0;   // lowest mapped address (the load base for ordinary objects)
  uintptr_t end = 0;     // one past the highest
  uintptr_t bias = 0;    // load bias: runtime address - ELF virtual address
  std::string build_id;  // lower-case hex, from the loaded image's note; "" when it has none
};

class Symbolizer {
 public:
  // Takes the current process's module map (path, load address, build id).
  Symbolizer();
  // Another process's objects only (a dead process's, from its state file), read from their files
  // at the addresses it had them; nothing of the calling process.
  explicit Symbolizer(const std::vector<LoadedObject>& objects);
  ~Symbolizer();
  Symbolizer(const Symbolizer&) = delete;
  Symbolizer& operator=(const Symbolizer&) = delete;

  // Frames for one return address, innermost first (inlined frames expanded). Never empty.
  // The span stays valid for the Symbolizer's lifetime; asking again gives the same one.
  std::span<const SymFrame> frames(uintptr_t return_address);
  // Symbolizes the return addresses not yet symbolized, ahead of the frames() calls that
  // will ask for them, on up to `threads` threads (0: default_symbolize_threads()). A dump
  // knows every distinct address it needs at once, and compilation units are independent
  // work, so it waits a fraction as long: the threads share this Symbolizer's libdwfl
  // session, take turns at elfutils (which is not thread-safe) and each read the units
  // given to them with memtrace's own readers. The frames are the same as one thread's;
  // below a few hundred addresses the calling thread does it alone. Not to be called from
  // two threads at once (no Symbolizer call is).
  struct PrepareReport {
    size_t addresses = 0;  // distinct addresses not symbolized before
    size_t tasks = 0;      // units (or modules without debug data) they fell in; 0 when serial
    unsigned threads = 1;  // threads that took part, the calling one included
  };
  PrepareReport prepare(std::span<const uintptr_t> return_addresses, unsigned threads = 0);

  // Path of the module containing the address, "" if none.
  std::string_view module_of(uintptr_t address);
  // The module map: the objects loaded at construction (per the dynamic loader), plus any
  // found later: when an address falls outside every known module and something was
  // dlopened or dlclosed since, the loader's list is read again.
  std::vector<ModuleInfo> modules() const;

  // Compilation units whose DIEs were needed so far (since the module list was last re-read),
  // and how many of them memtrace's own reader could not read, so that libdw walked them
  // (slower; same frames). For tests and benchmarks.
  struct UnitCounts {
    size_t units = 0;
    size_t by_libdw = 0;
  };
  UnitCounts unit_counts() const;
  // Objects recorded while loaded (ModuleMap::history()): those unloaded since are read from
  // their files at their old addresses, so stacks captured while they were there still resolve.
  // Where something else is loaded at that address now, the loaded object wins.
  void add_unloaded_modules(const std::vector<LoadedObject>& seen);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Threads prepare() uses by default: the CPUs this process may run on, at most 8.
unsigned default_symbolize_threads();

// Path of the module that holds memtrace's own code (libmemtrace.so, or a test binary).
std::string_view self_module();

}  // namespace memtrace::unwind
