// Real-pointer slots for every hooked name, the exact-name classifier used by the dlsym hook,
// and the address-identity table used by the cuGetProcAddress hooks. Slots are written once
// (compare-and-swap) and read without locks.
#pragma once
#include <cstdint>

#include "preload/hook_list.hpp"

namespace memtrace::preload {

const char* hook_name(Hook h);
// Our wrapper for a hook; null for internal-only names.
void* hook_wrapper(Hook h);
// Index of an exact hooked name that has a wrapper, or -1.
int classify_wrapped_name(const char* name);
bool is_nccl_hook(Hook h);

// The real function behind a hook. Resolves lazily (next object after memtrace, then a
// loaded libcuda.so.1 / libnccl.so.2) the first time; null if none exists.
void* real_pointer(Hook h);
// Records a real pointer learned from dlsym or cuGetProcAddress (first one wins).
void remember_real(Hook h, void* real);

// Which wrapped hook a real driver pointer is (by address), or -1. Builds the table
// lazily from the object that holds `real`.
int identify_driver_pointer(void* real);

template <Hook H, typename Fn>
inline Fn real_fn() {
  return reinterpret_cast<Fn>(real_pointer(H));
}

}  // namespace memtrace::preload
