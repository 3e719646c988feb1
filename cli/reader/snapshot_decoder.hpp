// Pickle bytes -> reader::Snapshot: runs the pickle VM with a hook that turns trace-entry and
// frame dicts into typed records as soon as their items arrive, then walks the known top-level
// shape (docs/snapshot-format.md, "The snapshot dict"). May throw std::bad_alloc; load_snapshot_bytes catches it.
#pragma once
#include <string>
#include <string_view>

#include "cli/reader/snapshot.hpp"

namespace memtrace::reader {

// drop_consumed: `bytes` is a private read-only mapping of the file whose pages may be given back
// as decoding moves past them (see pickle::Vm::run).
LoadResult decode_snapshot(std::string_view bytes, const std::string& name_for_errors, bool drop_consumed);

}  // namespace memtrace::reader
