// The caching allocator's settings (MEMTRACE_ALLOC_CONF, docs/caching-allocator.md, "Settings:
// MEMTRACE_ALLOC_CONF"): parsed here, once per process, by the session, and described here, as the
// key/value pairs of the snapshot's allocator_settings. A new setting is one edit in
// describe_allocator_settings(), besides its parsing in core/caching/alloc_conf.cpp.
#pragma once
#include <string>

#include "core/caching/alloc_conf.hpp"
#include "output/snapshot_builder.hpp"

namespace memtrace::preload {

// Parses the text of MEMTRACE_ALLOC_CONF: one warning per bad piece, each naming the variable.
caching::AllocConf parse_allocator_settings(const std::string& text);

// Fills in the pytorch and memtrace lists of `out` from `c`. `expandable_in_use`: whether the
// allocators really use expandable segments (without virtual-memory support they fall back to
// plain segments).
void describe_allocator_settings(const caching::AllocConf& c, bool expandable_in_use, output::AllocatorSettings* out);

}  // namespace memtrace::preload
