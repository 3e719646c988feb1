// The Symbolizer that a process's dumps share. Building one costs what the code on the stacks
// costs to read (a module's DWARF, decompressed where it is compressed, its symbol table, its
// units); an interval dump of an unchanged program would pay it again each time. So the
// Symbolizer of the last dump is kept and handed to the next, as long as the same objects are
// loaded at the same addresses: the frames it remembers per address stay right exactly as long
// as that holds. Any dlopen or dlclose that maps or unmaps an object (loader_generation()), a
// different list of objects recorded as once loaded, or another process (a forked child) gets a
// fresh one. What it keeps (frames, names, libdw's decompressed debug data) stays until then.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "unwind/module_map.hpp"
#include "unwind/symbolizer.hpp"

namespace memtrace::unwind {

class SymbolizerReuse {
 public:
  // A Symbolizer held for one dump: no other lease is granted until this one is gone.
  class Lease {
   public:
    Symbolizer& symbolizer() const { return *sym_; }
    bool reused() const { return reused_; }  // the last dump's, not a fresh one

   private:
    friend class SymbolizerReuse;
    std::unique_lock<std::mutex> hold_;
    Symbolizer* sym_ = nullptr;
    bool reused_ = false;
  };

  // The last lease's Symbolizer when nothing was loaded or unloaded since and `history`
  // (ModuleMap::history(), given to add_unloaded_modules) is the same list; else a fresh one,
  // the old one destroyed. Throws what the Symbolizer's construction throws (nothing kept then).
  Lease acquire(const std::vector<LoadedObject>& history);

  // In a forked child: a dump another thread of the parent was taking is not waited for, and
  // the Symbolizer it may have been changing is never used (nor freed: it may be half-changed).
  void after_fork_child();

 private:
  struct Key {
    int pid = 0;
    uint64_t generation = 0;
    uint64_t history = 0;  // a hash of the history list
    bool operator==(const Key&) const = default;
  };
  static Key key_of(const std::vector<LoadedObject>& history);

  std::mutex mu_;
  std::unique_ptr<Symbolizer> sym_;
  Key key_;
};

// The process's dumps' SymbolizerReuse; never destroyed (the exit dump runs late).
SymbolizerReuse& dump_symbolizers();

}  // namespace memtrace::unwind
