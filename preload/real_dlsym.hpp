// The dlsym memtrace itself uses. Never the exported `dlsym` (that is our hook): glibc's,
// reached with dlvsym, or whatever interposer follows us in the search order.
#pragma once

namespace memtrace::preload {

using DlsymFn = void* (*)(void*, const char*);
// The next dlsym after libmemtrace (a later interposer's, else glibc's). Never null.
DlsymFn next_dlsym();

}  // namespace memtrace::preload
