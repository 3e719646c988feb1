// Ranges the program opens and closes (docs/ranges.md): NVTX through its injection
// (nvtx_injection.cpp) and memtrace's own API (public_api.cpp) both land here. Each thread keeps
// its push/pop stack as one node of the session's range table; start/end ranges are process-wide.
// Every function is safe before the session starts (it then records nothing) and never calls into
// CUDA.
#pragma once
#include <cstdint>
#include <string_view>

#include "core/records.hpp"

namespace memtrace::preload::ranges {

using memtrace::StateCopy;

// A range's domain: 0 is NVTX's default domain (and memtrace's API); others come from
// domain_create() and name their ranges "domain:name".
using Domain = uint32_t;
Domain domain_create(std::string_view name);

// A name registered once (nvtxDomainRegisterString): pushing it skips hashing the text.
// 0 when the table is full (pushes of it then count but carry no name).
uint32_t register_name(Domain d, std::string_view name);

// Push/pop on the calling thread. The depth NVTX returns: the stack's depth after the push,
// before the pop; -1 from pop() when the thread has no open range of that domain.
int push(Domain d, std::string_view name);
int push_registered(Domain d, uint32_t name_id);
int pop(Domain d);

// Start/end ranges, process-wide. The id start() returns is what end() takes; 0 is never one.
uint64_t start(Domain d, std::string_view name);
uint64_t start_registered(Domain d, uint32_t name_id);
void end(uint64_t id);

// A marker (nvtxMark, memtrace_annotate): an 'annotate' trace entry on the thread's device.
void mark(Domain d, std::string_view text);
void mark_registered(Domain d, uint32_t name_id);

// The calling thread's range node and the process-wide one, as an event records them.
struct Current {
  uint32_t range = 0;
  uint32_t phase = 0;
};
Current current();

// A dump: the range table's nodes and names into the copy (after the recorder's cut: the table
// only grows, so every node the copy's events name is there).
void copy_table(StateCopy* out);
// In a forked child: locks another parent thread held are free again; the stacks stay.
void after_fork_child();

}  // namespace memtrace::preload::ranges
