// The state file's size (docs/state-file.md, README "The state file"): for several
// MEMTRACE_MAX_ENTRIES, the bytes the file takes as created (all reserved up front, so this is also
// its most) and what each section holds.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "state/state_file.hpp"

int main() {
  char tmpl[] = "/tmp/memtrace-bench-state-XXXXXX";
  const char* dir = mkdtemp(tmpl);
  if (!dir) return 1;
  std::printf("state file size by MEMTRACE_MAX_ENTRIES (created, reserved in full)\n");
  for (uint64_t entries : {uint64_t{0}, uint64_t{100000}, uint64_t{500000}, uint64_t{1000000}, uint64_t{10000000}}) {  // all under kMaxFileBytes
    memtrace::state::StateFile f;
    memtrace::state::CreateOptions o;
    o.dir = dir;
    o.dir_is_default = false;
    o.ring_entries = entries;
    std::string why;
    if (!f.create(o, &why)) {
      std::fprintf(stderr, "bench_state_size: %s\n", why.c_str());
      return 1;
    }
    struct stat st;
    stat(f.path().c_str(), &st);
    std::printf("  %9llu entries: %8.1f MiB on disk (%8.1f MiB apparent)\n", static_cast<unsigned long long>(entries),
                static_cast<double>(st.st_blocks) * 512 / (1 << 20), static_cast<double>(st.st_size) / (1 << 20));
    f.remove();
  }
  memtrace::state::Header h{};
  memtrace::state::plan_layout(0, &h);
  std::printf("fixed part: %llu live slots x %zu B, %llu stacks x 8 B + %llu addresses x 8 B, %llu modules x %zu B, "
              "%llu owner names x %zu B; the ring adds %zu B per entry\n",
              static_cast<unsigned long long>(h.live.count), sizeof(memtrace::LiveSlot),
              static_cast<unsigned long long>(h.stack_records.count),
              static_cast<unsigned long long>(h.stack_frames.count), static_cast<unsigned long long>(h.modules.count),
              sizeof(memtrace::state::ModuleEntry), static_cast<unsigned long long>(h.owners.count),
              sizeof(memtrace::OwnerName), sizeof(memtrace::TraceEntry));
  rmdir(dir);
  return 0;
}
