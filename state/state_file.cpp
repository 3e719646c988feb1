#include "state/state_file.hpp"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include <fmt/format.h>

#include "core/clock.hpp"
#include "unwind/module_map.hpp"

namespace memtrace::state {

namespace {

uint64_t page_up(uint64_t n) { return (n + kPage - 1) / kPage * kPage; }

void copy_text(char* dst, size_t cap, const std::string& s) {
  const size_t n = std::min(s.size(), cap - 1);
  std::memcpy(dst, s.data(), n);
  dst[n] = '\0';
}

// The folder must be a real directory (no symbolic link) we can write. The default one is ours:
// created 0700 when missing, refused when it is someone else's or others may enter it.
bool check_dir(const std::string& dir, bool is_default, std::string* why) {
  if (dir.empty()) {
    *why = "no folder for it";
    return false;
  }
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    *why = fmt::format("cannot create folder '{}': {}", dir, std::strerror(errno));
    return false;
  }
  struct stat st;
  if (lstat(dir.c_str(), &st) != 0) {
    *why = fmt::format("cannot use folder '{}': {}", dir, std::strerror(errno));
    return false;
  }
  if (!S_ISDIR(st.st_mode)) {
    *why = fmt::format("'{}' is not a folder", dir);
    return false;
  }
  if (is_default && (st.st_uid != getuid() || (st.st_mode & 077) != 0)) {
    *why = fmt::format("folder '{}' is not private to this user (it must be owned by uid {} with mode 0700)", dir,
                       getuid());
    return false;
  }
  if (access(dir.c_str(), W_OK | X_OK) != 0) {
    *why = fmt::format("cannot write in folder '{}': {}", dir, std::strerror(errno));
    return false;
  }
  return true;
}

}  // namespace

std::string current_boot_id() {
  int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  char buf[64];
  ssize_t n = read(fd, buf, sizeof buf);
  close(fd);
  if (n <= 0) return {};
  std::string s(buf, static_cast<size_t>(n));
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

uint64_t plan_layout(uint64_t ring_entries, Header* h) {
  uint64_t at = kPage;
  auto place = [&at](Section* s, uint64_t count, uint64_t elem) {
    s->offset = at;
    s->count = count;
    at = page_up(at + count * elem);
  };
  place(&h->ring, ring_entries, sizeof(TraceEntry));
  place(&h->counters, 1, sizeof(UsageCounters));
  place(&h->live, kLiveSlots, sizeof(LiveSlot));
  place(&h->stack_records, kMirrorStacks, sizeof(uint64_t));
  place(&h->stack_frames, kMirrorFrames, sizeof(uintptr_t));
  place(&h->modules, kModules, sizeof(ModuleEntry));
  place(&h->owners, kMaxOwners, sizeof(OwnerName));
  return at;
}

bool StateFile::create(const CreateOptions& o, std::string* why) {
  Header plan{};
  if (const uint64_t bytes = plan_layout(o.ring_entries, &plan); bytes > kMaxFileBytes) {
    // The file is reserved in full: a ring of hundreds of millions of entries would take that much
    // memory or disk at once, where the private ring is paid for only as it fills.
    *why = fmt::format("MEMTRACE_MAX_ENTRIES={} would need {} MiB, more than the {} MiB a state file may take",
                       o.ring_entries, bytes >> 20, kMaxFileBytes >> 20);
    return false;
  }
  if (!o.dir.empty()) return create_in(o.dir, o.dir_is_default, o, why);
  // The default folders in turn: a memory file system first, the next when one cannot hold it.
  std::string first_why;
  for (const std::string& dir : default_state_dirs()) {
    if (create_in(dir, true, o, why)) return true;
    if (first_why.empty()) first_why = *why;
  }
  *why = first_why;
  return false;
}

bool StateFile::create_in(const std::string& dir, bool is_default, const CreateOptions& o, std::string* why) {
  if (!check_dir(dir, is_default, why)) return false;
  const pid_t pid = getpid();
  int fd = -1;
  std::string path;
  // A file of this name left by a dead process with the same pid may still be wanted: never
  // replace it, take the next name.
  for (int n = 0; n < 16 && fd < 0; ++n) {
    path = dir + "/" + state_file_name(pid, n);
    fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) {
    *why = fmt::format("cannot create '{}': {}", path, std::strerror(errno));
    return false;
  }
  Header plan{};
  const uint64_t bytes = plan_layout(o.ring_entries, &plan);
  // The whole size is reserved now: a shared mapping over a hole the file system cannot fill
  // would kill the program with SIGBUS at some later event.
  int err = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  void* p = err == 0 ? mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
  if (p == MAP_FAILED) {
    if (err == 0) err = errno;
    *why = fmt::format("cannot reserve {} bytes for '{}': {}", bytes, path, std::strerror(err));
    close(fd);
    unlink(path.c_str());
    return false;
  }
  close(fd);
  Header* h = static_cast<Header*>(p);
  // The mapping is zero-filled: only the sections and the facts are written.
  h->ring = plan.ring;
  h->counters = plan.counters;
  h->live = plan.live;
  h->stack_records = plan.stack_records;
  h->stack_frames = plan.stack_frames;
  h->modules = plan.modules;
  h->owners = plan.owners;
  h->version = kFormatVersion;
  h->header_bytes = sizeof(Header);
  h->file_bytes = bytes;
  h->entry_bytes = sizeof(TraceEntry);
  h->record_bytes = sizeof(AllocRecord);
  h->slot_bytes = sizeof(LiveSlot);
  h->counters_bytes = sizeof(UsageCounters);
  h->module_bytes = sizeof(ModuleEntry);
  h->owner_bytes = sizeof(OwnerName);
  h->pid = pid;
  h->uid = getuid();
  h->state = kRunning;
  h->start_ticks = now_ticks();
  h->start_us = now_us();
  copy_text(h->boot_id, sizeof h->boot_id, current_boot_id());
  copy_text(h->program, sizeof h->program, o.program);
  copy_text(h->host, sizeof h->host, o.host);
  copy_text(h->rank, sizeof h->rank, o.rank);
  h->dump_signal.store(Header::kSignalNotArmed, std::memory_order_relaxed);  // until the handler is in place
  // The magic last: a reader that sees it sees a complete header.
  std::atomic_thread_fence(std::memory_order_release);
  std::memcpy(h->magic, kMagic, sizeof kMagic);
  header_ = h;
  bytes_ = bytes;
  path_ = path;
  char* base = static_cast<char*>(p);
  mirror_.records = reinterpret_cast<uint64_t*>(base + h->stack_records.offset);
  mirror_.max_stacks = h->stack_records.count;
  mirror_.frames = reinterpret_cast<uintptr_t*>(base + h->stack_frames.offset);
  mirror_.max_frames = h->stack_frames.count;
  mirror_.published = &h->stacks_published;
  return true;
}

StateMemory StateFile::memory() const {
  StateMemory m;
  if (!header_) return m;
  char* base = reinterpret_cast<char*>(header_);
  m.ring = header_->ring.count ? reinterpret_cast<TraceEntry*>(base + header_->ring.offset) : nullptr;
  m.ring_capacity = header_->ring.count;
  m.ring_total = &header_->ring_total;
  m.counters = reinterpret_cast<UsageCounters*>(base + header_->counters.offset);
  m.live = reinterpret_cast<LiveSlot*>(base + header_->live.offset);
  m.live_slots = header_->live.count;
  m.live_unrecorded = &header_->live_unrecorded;
  m.owner_names = reinterpret_cast<OwnerName*>(base + header_->owners.offset);
  m.owners_published = &header_->owners_published;
  return m;
}

void StateFile::record_modules() {
  if (!header_) return;
  std::unique_lock<std::mutex> lock(modules_mu_, std::try_to_lock);
  if (!lock.owns_lock()) return;
  const uint64_t gen = unwind::loader_generation();
  if (gen == loader_gen_) return;
  loader_gen_ = gen;
  ModuleEntry* table = reinterpret_cast<ModuleEntry*>(reinterpret_cast<char*>(header_) + header_->modules.offset);
  uint64_t n = header_->modules_published.load(std::memory_order_relaxed);
  for (const unwind::LoadedObject& o : unwind::loaded_objects()) {
    if (n >= header_->modules.count) break;
    std::string path = o.path;
    if (path == "/proc/self/exe") {
      char buf[4096];
      ssize_t k = readlink("/proc/self/exe", buf, sizeof buf - 1);
      if (k > 0) path.assign(buf, static_cast<size_t>(k));
    }
    if (path.empty() || path.size() >= sizeof(ModuleEntry::path)) continue;
    if (!modules_seen_.insert({o.start, path}).second) continue;
    ModuleEntry& e = table[n];
    e.start = o.start;
    e.end = o.end;
    e.bias = o.bias;
    e.path_len = static_cast<uint32_t>(path.size());
    copy_text(e.build_id, sizeof e.build_id, o.build_id);
    copy_text(e.path, sizeof e.path, path);
    header_->modules_published.store(++n, std::memory_order_release);
  }
}

void StateFile::note_snapshot(const std::string& path) const {
  if (!header_) return;
  // A path too long for the field is not given half: `memtrace snap` then says it has no path.
  const size_t n = path.size() < sizeof header_->last_snapshot ? path.size() : 0;
  const uint64_t q = header_->snapshot_seq.load(std::memory_order_relaxed);
  header_->snapshot_seq.store(q + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  std::memcpy(header_->last_snapshot, path.data(), n);
  header_->last_snapshot[n] = '\0';
  header_->snapshot_seq.store(q + 2, std::memory_order_release);
}

void StateFile::sync() const {
  if (header_) msync(header_, bytes_, MS_ASYNC);
}

void StateFile::remove() {
  if (!header_ || path_.empty()) return;
  header_->state = 0;
  unlink(path_.c_str());
  path_.clear();
}

void StateFile::forget() {
  if (header_) munmap(header_, bytes_);
  header_ = nullptr;
  path_.clear();
  mirror_ = unwind::StackMirror{};
}

}  // namespace memtrace::state
