// MEMTRACE_ALLOCATOR=caching: memtrace's caching allocator (core/caching/) serves the program's
// linear device memory, one allocator per CUcontext, created on the context's first allocation.
// The allocator reports each of its actions (under its lock, in its order) to a listener that
// writes them into the session's recorder: registry + ring stay the single source of truth, so
// every snapshot (at exit, on a signal, on out-of-memory) is one consistent cut of both.
//
// Used by the hooks (hooks_linear.cpp, hooks_pointer.cpp, hooks_context.cpp) and by the
// exported memtrace_malloc / memtrace_free (PyTorch's CUDAPluggableAllocator).
#pragma once
#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <optional>

#include "core/caching/caching_allocator.hpp"
#include "core/config.hpp"
#include "output/snapshot_builder.hpp"

namespace memtrace::preload::caching_mode {

// At session start: remembers the mode (the settings are the session's: allocator_conf()).
void configure(const Config& c);
// MEMTRACE_ALLOCATOR=caching and the session is recording (starts the session if need be).
bool enabled();
// Some allocator exists (caching mode, or memtrace_malloc was called): pointer questions and
// frees must ask the allocators first.
bool any_allocator();

// cuMemAlloc_v2 / cuMemAllocPitch_v2 in caching mode, for the current context. False: not
// served (no session, no current context); the caller passes the call to the driver.
bool try_alloc(CUdeviceptr* dptr, size_t bytes, void* caller, CUresult* result);
// cuMemFree_v2: true when `ptr` lies in memory of an allocator (a block's start is freed;
// anything else inside a segment is refused with CUDA_ERROR_INVALID_VALUE so the driver never
// frees a whole segment under the allocator). False: not ours, pass it on unchanged.
bool try_free(CUdeviceptr ptr, void* caller, CUresult* result);

// memtrace_malloc / memtrace_free: `device`'s primary context, PyTorch's stream.
void* pluggable_malloc(size_t bytes, int device, uintptr_t stream, void* caller);
void pluggable_free(void* ptr, void* caller);

// The live block holding `ptr`, if an allocator handed it out.
std::optional<caching::BlockInfo> block_of(uintptr_t ptr);
// Inside some allocator's segment (live block or cached free space).
bool owned(uintptr_t ptr);

// At exit: one synchronize per allocator completes the frees still waiting for one, so the exit
// snapshot shows every free the program made (as free_requested + free_completed).
void settle_pending_frees();

// A context is about to go (cuCtxDestroy, primary reset): its allocator gives everything back
// while the context still exists. Its records are purged by the caller, with the context's.
void drop_context(CUcontext ctx);
// The context is already gone: forget its allocator without touching the driver.
void forget_context(CUcontext ctx);

// In a forked child: the parent's contexts are unusable there (CUDA does not survive fork), so
// every allocator is abandoned as it stands — no driver call, no lock taken (another thread of
// the parent may have held one at the fork). A context the child creates gets a fresh one.
void after_fork_child();

// What the snapshot's allocator_settings say: the mode, and the settings as the allocators use
// them (allocator_settings.cpp describes them).
output::AllocatorSettings settings();

}  // namespace memtrace::preload::caching_mode
