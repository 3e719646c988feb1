// A debug file's copy inflated as far as its asked units need (unwind/partial_copy.hpp): the
// layout written by write_inflated with the lazy sections deferred, then zlib's streaming inflate
// run forward into the memory file, section by section, only as far as asked.
#include "unwind/partial_copy.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <gelf.h>
#include <libelf.h>
#include <sys/mman.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>

#include "unwind/inflated_elf.hpp"

namespace memtrace::unwind::detail {

namespace {

constexpr const char* kLazyNames[PartialCopy::kLazyCount] = {".debug_info", ".debug_abbrev", ".debug_line",
                                                            ".debug_loclists"};
// Each inflate call goes at least this far past what was asked: the next unit is usually next.
constexpr uint64_t kStep = 64 << 10;

int lazy_index(const char* name) {
  for (int i = 0; i < PartialCopy::kLazyCount; ++i)
    if (std::strcmp(name, kLazyNames[i]) == 0) return i;
  return -1;
}

// Every copy this process made, by build id and path. Never destroyed: a dump at exit may still
// be reading one. A forked child starts with none: a thread of the parent may have held a lock
// or been part way through inflating at the fork, and only the forking thread exists in the
// child (the old ones are left, unused: the child's symbolizers are new, unwind/symbolizer_reuse.hpp).
struct Registry {
  std::mutex mutex;
  std::map<std::string, std::shared_ptr<PartialCopy>> copies;
};
std::atomic<Registry*> g_registry{nullptr};

Registry& registry() {
  static const bool once = [] {
    g_registry.store(new Registry, std::memory_order_release);
    pthread_atfork(nullptr, nullptr, [] { g_registry.store(new Registry, std::memory_order_release); });
    return true;
  }();
  (void)once;
  return *g_registry.load(std::memory_order_acquire);
}

uint64_t read_le(const unsigned char* p, int n) {
  uint64_t v = 0;
  for (int i = n; i-- > 0;) v = v << 8 | p[i];
  return v;
}

// A DWARF unit's initial length at p: the length, the size of that field (4, or 12 in 64-bit
// DWARF) and of the unit's offsets.
struct Length {
  uint64_t len, hdr;
  int off_size;
};
Length initial_length(const unsigned char* p) {
  const uint64_t len = read_le(p, 4);
  if (len == 0xffffffff) return {read_le(p + 4, 8), 12, 8};
  return {len, 4, 4};
}

// The .debug_abbrev offset in the unit header at p (DWARF 5 puts the unit type and address size
// before it).
uint64_t abbrev_offset(const unsigned char* p, const Length& l) {
  const uint64_t version = read_le(p + l.hdr, 2);
  return read_le(p + l.hdr + (version >= 5 ? 4 : 2), l.off_size);
}

}  // namespace

struct PartialCopy::Section {
  bool present = false;
  uint64_t offset = 0, size = 0;  // in the copy
  Compressed payload;
  z_stream z{};
  bool started = false, done = false, failed = false;
  uint64_t fed = 0;  // compressed bytes handed to zlib so far
  std::atomic<uint64_t> ready{0};  // bytes [0, ready) are inflated
  ~Section() {
    if (started) inflateEnd(&z);
  }
};

PartialCopy::PartialCopy() : sections_(new Section[kLazyCount]) {}

PartialCopy::~PartialCopy() {
  if (map_ != nullptr) munmap(const_cast<unsigned char*>(map_), map_size_);
  if (src_elf_ != nullptr) elf_end(static_cast<Elf*>(src_elf_));
  if (src_fd_ >= 0) close(src_fd_);
  if (fd_ >= 0) close(fd_);
}

std::shared_ptr<PartialCopy> PartialCopy::find(const std::string& id, const std::string& path) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.copies.find(id + '\0' + path);
  return it != r.copies.end() ? it->second : nullptr;
}

void PartialCopy::forget_all() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.copies.clear();
}

std::shared_ptr<PartialCopy> PartialCopy::open(int fd, const std::string& path, const std::string& id, Hooks hooks,
                                               std::string* err) {
  err->clear();
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  const std::string key = id + '\0' + path;
  if (auto it = r.copies.find(key); it != r.copies.end()) return it->second;
  std::shared_ptr<PartialCopy> p(new PartialCopy);
  p->path_ = path;
  p->hooks_ = std::move(hooks);
  p->src_fd_ = fcntl(fd, F_DUPFD_CLOEXEC, 0);  // the compressed bytes stay mapped while the copy lives
  Elf* src = p->src_fd_ >= 0 ? elf_begin(p->src_fd_, ELF_C_READ_MMAP, nullptr) : nullptr;
  p->src_elf_ = src;
  size_t shstrndx = 0;
  if (src == nullptr || elf_getshdrstrndx(src, &shstrndx) != 0) return nullptr;
  // Qualifies: .debug_aranges to find units by, no type units (reached by signature from
  // anywhere), and at least one lazy section zlib-compressed.
  bool aranges = false, any_lazy = false;
  for (Elf_Scn* scn = elf_nextscn(src, nullptr); scn != nullptr; scn = elf_nextscn(src, scn)) {
    GElf_Shdr sh;
    GElf_Chdr ch;
    const char* name = gelf_getshdr(scn, &sh) != nullptr ? elf_strptr(src, shstrndx, sh.sh_name) : nullptr;
    if (name == nullptr) return nullptr;
    aranges |= std::strcmp(name, ".debug_aranges") == 0;
    if (std::strcmp(name, ".debug_types") == 0 || std::strncmp(name, ".zdebug", 7) == 0) return nullptr;
    if (lazy_index(name) >= 0 && (sh.sh_flags & SHF_COMPRESSED) && gelf_getchdr(scn, &ch) != nullptr &&
        ch.ch_type == ELFCOMPRESS_ZLIB)
      any_lazy = true;
  }
  if (!aranges || !any_lazy) return nullptr;

  p->fd_ = memfd_create("memtrace-debug", MFD_CLOEXEC);
  if (p->fd_ < 0) {
    *err = std::strerror(errno);
    return nullptr;
  }
  std::vector<Deferred> deferred;
  *err = write_inflated(src, p->fd_, [](const char* name) { return lazy_index(name) >= 0; }, &deferred);
  if (!err->empty()) return nullptr;
  if (deferred.empty()) return nullptr;  // another byte order: nothing was left to inflate later
  const off_t size = lseek(p->fd_, 0, SEEK_END);
  void* map = size > 0 ? mmap(nullptr, static_cast<size_t>(size), PROT_READ, MAP_SHARED, p->fd_, 0)
                       : MAP_FAILED;
  if (map == MAP_FAILED) {
    *err = std::strerror(errno);
    return nullptr;
  }
  p->map_ = static_cast<const unsigned char*>(map);
  p->map_size_ = static_cast<uint64_t>(size);
  for (const Deferred& d : deferred) {
    Section& s = p->sections_[lazy_index(d.name.c_str())];
    s.present = true;
    s.offset = d.offset;
    s.size = d.payload.ch.ch_size;
    s.payload = d.payload;
    p->compressed_total_ += d.payload.in_size;
  }

  // The units' address ranges, from the copy's .debug_aranges (inflated whole).
  Elf* copy = elf_begin(p->fd_, ELF_C_READ_MMAP, nullptr);
  size_t names = 0;
  if (copy == nullptr || elf_getshdrstrndx(copy, &names) != 0) {
    if (copy != nullptr) elf_end(copy);
    *err = elf_errmsg(-1);
    return nullptr;
  }
  for (Elf_Scn* scn = elf_nextscn(copy, nullptr); scn != nullptr; scn = elf_nextscn(copy, scn)) {
    GElf_Shdr sh;
    const char* name = gelf_getshdr(scn, &sh) != nullptr ? elf_strptr(copy, names, sh.sh_name) : nullptr;
    if (name == nullptr || std::strcmp(name, ".debug_aranges") != 0 || sh.sh_offset + sh.sh_size > p->map_size_) continue;
    const unsigned char* a = p->map_ + sh.sh_offset;
    const unsigned char* end = a + sh.sh_size;
    while (end - a >= 4) {
      if (read_le(a, 4) == 0xffffffff && end - a < 12) break;
      const Length l = initial_length(a);
      const uint64_t len = l.len, hdr = l.hdr;
      const int off_size = l.off_size;
      if (len > static_cast<uint64_t>(end - a) - hdr) break;
      const unsigned char* set_end = a + hdr + len;
      const unsigned char* q = a + hdr + 2;
      if (set_end - q < off_size + 2) break;
      const uint64_t cu = read_le(q, off_size);
      const int addr_size = q[off_size], seg_size = q[off_size + 1];
      if ((addr_size != 4 && addr_size != 8) || seg_size != 0) {
        a = set_end;
        continue;
      }
      const uint64_t tuple = 2 * static_cast<uint64_t>(addr_size);
      const uint64_t head = static_cast<uint64_t>(hdr + 2 + off_size + 2);
      for (const unsigned char* t = a + (head + tuple - 1) / tuple * tuple; set_end - t >= static_cast<ptrdiff_t>(tuple);
           t += tuple) {
        const uint64_t low = read_le(t, addr_size), n = read_le(t + addr_size, addr_size);
        if (low == 0 && n == 0) break;
        if (n > 0) p->aranges_.push_back({low, low + n, cu});
      }
      a = set_end;
    }
  }
  elf_end(copy);
  std::sort(p->aranges_.begin(), p->aranges_.end(), [](const Range& x, const Range& y) { return x.low < y.low; });
  if (p->aranges_.empty()) return nullptr;  // libdw would find no unit by address either
  r.copies[key] = p;
  return p;
}

bool PartialCopy::unit_of(uint64_t addr, uint64_t* cu_offset) const {
  auto r = std::upper_bound(aranges_.begin(), aranges_.end(), addr,
                            [](uint64_t v, const Range& e) { return v < e.low; });
  if (r == aranges_.begin() || (--r)->high <= addr) return false;
  *cu_offset = r->cu;
  return true;
}

uint64_t PartialCopy::inflated_bytes() const {
  uint64_t n = 0;
  for (int i = 0; i < kLazyCount; ++i) n += sections_[i].ready.load(std::memory_order_acquire);
  return n;
}

uint64_t PartialCopy::lazy_bytes() const {
  uint64_t n = 0;
  for (int i = 0; i < kLazyCount; ++i) n += sections_[i].size;
  return n;
}

bool PartialCopy::ensure(Lazy which, uint64_t end) {
  Section& s = sections_[which];
  if (!s.present) return true;  // stored as it was: nothing to inflate
  end = std::min(end, s.size);
  if (s.ready.load(std::memory_order_acquire) >= end) return true;
  std::lock_guard<std::mutex> lock(mutex_);
  const bool ok = inflate_locked(which, end);
  if (!whole_.load(std::memory_order_relaxed) && compressed_used_ * 2 > compressed_total_) complete_locked();
  return ok && s.ready.load(std::memory_order_relaxed) >= end;
}

bool PartialCopy::inflate_locked(Lazy which, uint64_t end) {
  Section& s = sections_[which];
  if (s.failed) return false;
  uint64_t ready = s.ready.load(std::memory_order_relaxed);
  if (ready >= end || s.done) return ready >= end;
  // Far into the section, libdeflate's one call for all of it beats zlib's streaming there.
  if (end > s.size / 4) return inflate_rest_locked(which);
  if (!s.started) {
    if (inflateInit(&s.z) != Z_OK) {
      s.failed = true;
    } else {
      s.started = true;
    }
  }
  const uint64_t target = std::min(s.size, std::max(end, ready + kStep));
  const uint64_t used_before = s.started ? s.z.total_in : 0;
  // Inflated aside and written into the memory file: its pages cost far less taken by a write
  // than faulted in one by one through a mapping.
  if (s.started && chunk_ == nullptr) chunk_.reset(new (std::nothrow) unsigned char[kStep]);
  if (chunk_ == nullptr) s.failed = true;
  while (!s.failed && ready < target) {
    if (s.z.avail_in == 0 && s.fed < s.payload.in_size) {
      // zlib counts its input in 32 bits: a section past 4 GiB compressed is fed in parts.
      s.z.next_in = const_cast<Bytef*>(s.payload.in + s.fed);
      s.z.avail_in = static_cast<uInt>(std::min<uint64_t>(s.payload.in_size - s.fed, uint64_t{1} << 30));
      s.fed += s.z.avail_in;
    }
    s.z.next_out = chunk_.get();
    s.z.avail_out = static_cast<uInt>(std::min<uint64_t>(target - ready, kStep));
    const int r = inflate(&s.z, Z_SYNC_FLUSH);
    const uint64_t got = s.z.total_out - ready;
    if (got > 0 && !write_at(s.offset + ready, chunk_.get(), got)) s.failed = true;
    ready = s.z.total_out;
    if (r == Z_STREAM_END) {
      s.done = true;
      s.failed |= ready != s.size;
      break;
    }
    if (r != Z_OK && !(r == Z_BUF_ERROR && (s.z.avail_in > 0 || s.fed < s.payload.in_size))) s.failed = true;
  }
  if (s.started) compressed_used_ += s.z.total_in - used_before;
  if (s.failed) {
    warn_failed(which);
    return false;
  }
  s.ready.store(ready, std::memory_order_release);
  return ready >= end;
}

bool PartialCopy::write_at(uint64_t offset, const unsigned char* bytes, uint64_t n) {
  while (n > 0) {
    const ssize_t w = pwrite(fd_, bytes, n, static_cast<off_t>(offset));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    bytes += w;
    offset += static_cast<uint64_t>(w);
    n -= static_cast<uint64_t>(w);
  }
  return true;
}

bool PartialCopy::inflate_rest_locked(Lazy which) {
  Section& s = sections_[which];
  if (s.failed) return false;
  if (s.done) return true;
  const uint64_t ready = s.ready.load(std::memory_order_relaxed);
  std::string err;
  // Inflated aside; only the rest is written, since readers may be in [0, ready).
  std::unique_ptr<unsigned char[]> all(new (std::nothrow) unsigned char[s.size ? s.size : 1]);
  s.failed = all == nullptr || !inflate_whole(s.payload, all.get(), &err) ||
             !write_at(s.offset + ready, all.get() + ready, s.size - ready);
  compressed_used_ += s.payload.in_size - (s.started ? s.z.total_in : 0);
  if (s.started) {
    inflateEnd(&s.z);
    s.started = false;
  }
  if (s.failed) {
    warn_failed(which);
    return false;
  }
  s.done = true;
  s.ready.store(s.size, std::memory_order_release);
  return true;
}

void PartialCopy::warn_failed(Lazy which) {
  if (!failed_ && hooks_.warn)
    hooks_.warn(std::string("cannot inflate ") + kLazyNames[which] + " of " + path_ +
                " (it does not inflate to its stated size); frames in it have no source lines");
  failed_ = true;
}

void PartialCopy::complete_locked() {
  bool all = true;
  for (int i = 0; i < kLazyCount; ++i)
    if (sections_[i].present && !inflate_rest_locked(static_cast<Lazy>(i))) all = false;
  if (!all) return;  // a section that does not inflate: the copy stays partial
  whole_.store(true, std::memory_order_release);
  if (hooks_.whole) hooks_.whole(fd_);
}

bool PartialCopy::walk_abbrevs(uint64_t offset, bool* refers_out) {
  const Section& s = sections_[kAbbrev];
  const uint64_t size = s.present ? s.size : 0;
  if (!s.present) return true;  // stored as it was: libdw reads it whole
  const unsigned char* base = map_ + s.offset;
  uint64_t at = offset;
  // One LEB128 number; false past the section or when longer than any valid one.
  auto leb = [&](uint64_t* v) {
    if (!ensure(kAbbrev, at + 10)) return false;
    *v = 0;
    for (int shift = 0; at < size && shift < 70; shift += 7) {
      const unsigned char b = base[at++];
      *v |= static_cast<uint64_t>(b & 0x7f) << std::min(shift, 63);
      if (!(b & 0x80)) return true;
    }
    return false;
  };
  for (;;) {
    uint64_t code = 0, tag = 0, name = 0, form = 0, konst = 0;
    if (!leb(&code)) return false;
    if (code == 0) return true;
    if (!leb(&tag) || !ensure(kAbbrev, at + 1) || at >= size) return false;
    ++at;  // DW_CHILDREN_yes / no
    do {
      if (!leb(&name) || !leb(&form)) return false;
      if (form == 0x21 && !leb(&konst)) return false;  // DW_FORM_implicit_const
      // DW_FORM_ref_addr, DW_FORM_ref_sig8, DW_FORM_indirect: a DIE elsewhere in the section.
      if (form == 0x10 || form == 0x20 || form == 0x16) *refers_out = true;
    } while (name != 0 || form != 0);
  }
}

bool PartialCopy::prepare_unit(uint64_t cu_offset) {
  std::lock_guard<std::mutex> lock(walk_mutex_);
  const Section& info = sections_[kInfo];
  if (!info.present) return true;
  const unsigned char* base = map_ + info.offset;
  // Straight to the unit and its abbreviations first: when they lie far into their sections,
  // each is inflated whole at once rather than streamed there unit by unit.
  if (cu_offset >= units_walked_ && ensure(kInfo, cu_offset + 24) && cu_offset + 24 <= info.size) {
    ensure(kAbbrev, abbrev_offset(base + cu_offset, initial_length(base + cu_offset)) + 1);
  }
  while (units_walked_ <= cu_offset) {
    const uint64_t at = units_walked_;
    if (!ensure(kInfo, at + 24) || at + 4 > info.size) return false;
    const Length l = initial_length(base + at);
    if (l.hdr == 4 && l.len >= 0xfffffff0) return false;  // a reserved length
    const uint64_t end = at + l.hdr + l.len;
    const uint64_t off_size = static_cast<uint64_t>(l.off_size);
    if (l.len < 2 + off_size + 1 || end > info.size || at + l.hdr + 4 + off_size > info.size) return false;
    const uint64_t version = read_le(base + at + l.hdr, 2);
    if (version < 2 || version > 5) return false;
    const uint64_t abbrev = abbrev_offset(base + at, l);
    if (!ensure(kInfo, end)) return false;
    if (!std::binary_search(abbrevs_walked_.begin(), abbrevs_walked_.end(), abbrev)) {
      bool refers_out = false;
      if (!walk_abbrevs(abbrev, &refers_out)) return false;
      if (refers_out && !ensure(kInfo, info.size)) return false;
      abbrevs_walked_.insert(std::upper_bound(abbrevs_walked_.begin(), abbrevs_walked_.end(), abbrev), abbrev);
    }
    units_walked_ = end;
  }
  return true;
}

bool PartialCopy::prepare_lines(uint64_t stmt_list) {
  const Section& line = sections_[kLine];
  if (!line.present) return true;
  if (!ensure(kLine, stmt_list + 12) || stmt_list + 4 > line.size) return false;
  const Length l = initial_length(map_ + line.offset + stmt_list);
  return l.len <= line.size && ensure(kLine, stmt_list + l.hdr + l.len);
}

}  // namespace memtrace::unwind::detail
