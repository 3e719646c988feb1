// The debug-file cache (unwind/debug_cache.hpp): which files qualify, where their copies live,
// and how a copy is written (libelf: every section as it is, compressed ones inflated by
// libdeflate), on disk in the cache or, with no cache, in memory.
#include "unwind/debug_cache.hpp"

#include <elfutils/libdwelf.h>
#include <fcntl.h>
#include <gelf.h>
#include <libdeflate.h>
#include <libelf.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>

namespace memtrace::unwind {

namespace {

std::mutex g_mutex;
std::string g_dir;
std::vector<std::string> g_warnings;
std::set<std::string> g_warned;  // each problem once per process

void warn_once(const std::string& key, std::string text) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_warned.insert(key).second) g_warnings.push_back(std::move(text));
}

// A copy is kept only up to this size: past it, the disk it takes outweighs what it saves.
constexpr uint64_t kMaxCopyBytes = uint64_t{1} << 30;

bool is_debug_section(const char* name) { return name != nullptr && std::strncmp(name, ".debug_", 7) == 0; }

// The sum of the compressed debug sections' inflated sizes; 0 when there is none, or when the file
// uses the older .zdebug form, which the copy does not handle (the file is then used as it is).
uint64_t compressed_debug_bytes(Elf* elf) {
  size_t shstrndx = 0;
  if (elf_getshdrstrndx(elf, &shstrndx) != 0) return 0;
  uint64_t total = 0;
  for (Elf_Scn* scn = elf_nextscn(elf, nullptr); scn != nullptr; scn = elf_nextscn(elf, scn)) {
    GElf_Shdr sh;
    if (gelf_getshdr(scn, &sh) == nullptr) return 0;
    const char* name = elf_strptr(elf, shstrndx, sh.sh_name);
    if (name != nullptr && std::strncmp(name, ".zdebug", 7) == 0) return 0;
    if (!(sh.sh_flags & SHF_COMPRESSED) || !is_debug_section(name)) continue;
    GElf_Chdr ch;
    if (gelf_getchdr(scn, &ch) == nullptr) return 0;
    total += ch.ch_size;
  }
  return total;
}

std::string hex(const unsigned char* id, int len) {
  static const char digits[] = "0123456789abcdef";
  std::string s;
  for (int i = 0; i < len; ++i) {
    s += digits[id[i] >> 4];
    s += digits[id[i] & 15];
  }
  return s;
}

// The copy at path is usable: its build id is id and nothing in it is compressed.
bool copy_holds(int fd, const unsigned char* id, int id_len) {
  Elf* elf = elf_begin(fd, ELF_C_READ_MMAP, nullptr);
  if (elf == nullptr) return false;
  const void* got = nullptr;
  const ssize_t got_len = dwelf_elf_gnu_build_id(elf, &got);
  bool ok = got_len == id_len && std::memcmp(got, id, static_cast<size_t>(id_len)) == 0;
  if (ok) {
    for (Elf_Scn* scn = elf_nextscn(elf, nullptr); scn != nullptr; scn = elf_nextscn(elf, scn)) {
      GElf_Shdr sh;
      if (gelf_getshdr(scn, &sh) == nullptr || (sh.sh_flags & SHF_COMPRESSED)) ok = false;
    }
  }
  elf_end(elf);
  return ok;
}

// *path = a malloc'd copy of `to` (what libdwfl frees), the old one freed.
void set_path(char** path, const std::string& to) {
  if (path == nullptr) return;
  std::free(*path);
  *path = strdup(to.c_str());
}

// The copy at `copy`, opened, when it holds (copy_holds), its path put in *path; else -1.
int open_holding_copy(const std::string& copy, const unsigned char* id, int id_len, char** path) {
  const int fd = open(copy.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  if (!copy_holds(fd, id, id_len)) {
    close(fd);
    return -1;
  }
  set_path(path, copy);
  return fd;
}

bool make_dirs(const std::string& dir) {
  for (size_t at = 1; at <= dir.size(); ++at) {
    if (at != dir.size() && dir[at] != '/') continue;
    const std::string part = dir.substr(0, at);
    if (mkdir(part.c_str(), 0700) != 0 && errno != EEXIST) return false;  // the user's own, as ~/.cache is
  }
  struct stat st;
  return stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// The inflated bytes of a zlib-compressed section (ch: its compression header; header: that
// header's size in this ELF class), or null when they do not inflate to exactly ch.ch_size bytes.
// libdeflate, told the size up front, inflates in one call, well ahead of zlib's inflate (the one
// libelf and libdw use): docs/symbolization.md.
std::unique_ptr<unsigned char[]> inflate_zlib(libdeflate_decompressor* d, Elf_Scn* scn, const GElf_Chdr& ch,
                                              size_t header, std::string* err) {
  Elf_Data* raw = elf_rawdata(scn, nullptr);
  if (raw == nullptr || header == 0 || raw->d_size < header) {
    *err = "a compressed section without its header";
    return nullptr;
  }
  std::unique_ptr<unsigned char[]> out(new (std::nothrow) unsigned char[ch.ch_size ? ch.ch_size : 1]);
  if (out == nullptr) {
    *err = "out of memory";
    return nullptr;
  }
  const auto* in = static_cast<const unsigned char*>(raw->d_buf) + header;
  if (libdeflate_zlib_decompress(d, in, raw->d_size - header, out.get(), ch.ch_size, nullptr) != LIBDEFLATE_SUCCESS) {
    *err = "a compressed section that does not inflate to its stated size";
    return nullptr;
  }
  return out;
}

// Writes src to out with every compressed section inflated; the layout is the source's order,
// each section at its alignment, the section headers last. An error's text, or "" when written.
std::string write_inflated(Elf* src, int out) {
  Elf* dst = elf_begin(out, ELF_C_WRITE, nullptr);
  if (dst == nullptr) return elf_errmsg(-1);
  std::string err;
  GElf_Ehdr eh;
  size_t phnum = 0, shstrndx = 0;
  if (gelf_getehdr(src, &eh) == nullptr || elf_getphdrnum(src, &phnum) != 0 || elf_getshdrstrndx(src, &shstrndx) != 0 ||
      gelf_newehdr(dst, gelf_getclass(src)) == nullptr || (phnum > 0 && gelf_newphdr(dst, phnum) == nullptr))
    err = elf_errmsg(-1);
  for (size_t i = 0; err.empty() && i < phnum; ++i) {
    GElf_Phdr ph;
    if (gelf_getphdr(src, static_cast<int>(i), &ph) == nullptr || gelf_update_phdr(dst, static_cast<int>(i), &ph) == 0)
      err = elf_errmsg(-1);
  }
  const size_t ehsize = gelf_fsize(dst, ELF_T_EHDR, 1, EV_CURRENT);
  uint64_t offset = ehsize + phnum * gelf_fsize(dst, ELF_T_PHDR, 1, EV_CURRENT);
  const size_t chdr_size = gelf_fsize(src, ELF_T_CHDR, 1, EV_CURRENT);
  std::vector<std::unique_ptr<unsigned char[]>> inflated;  // what the new sections' data views
  std::unique_ptr<libdeflate_decompressor, void (*)(libdeflate_decompressor*)> inflater(
      libdeflate_alloc_decompressor(), libdeflate_free_decompressor);
  if (inflater == nullptr) err = "out of memory";
  for (Elf_Scn* scn = elf_nextscn(src, nullptr); err.empty() && scn != nullptr; scn = elf_nextscn(src, scn)) {
    GElf_Shdr sh;
    GElf_Chdr ch;
    if (gelf_getshdr(scn, &sh) == nullptr || ((sh.sh_flags & SHF_COMPRESSED) && gelf_getchdr(scn, &ch) == nullptr)) {
      err = elf_errmsg(-1);
      break;
    }
    Elf_Data mine{};  // a zlib section's inflated bytes, when it is one
    if ((sh.sh_flags & SHF_COMPRESSED) && ch.ch_type == ELFCOMPRESS_ZLIB) {
      inflated.push_back(inflate_zlib(inflater.get(), scn, ch, chdr_size, &err));
      if (inflated.back() == nullptr) break;
      mine.d_buf = inflated.back().get();
      mine.d_type = ELF_T_BYTE;
      mine.d_size = ch.ch_size;
      mine.d_align = ch.ch_addralign;
      mine.d_version = EV_CURRENT;
      sh.sh_flags &= ~static_cast<GElf_Xword>(SHF_COMPRESSED);
      sh.sh_size = ch.ch_size;
      sh.sh_addralign = ch.ch_addralign;
    } else if ((sh.sh_flags & SHF_COMPRESSED) && (elf_compress(scn, 0, 0) < 0 || gelf_getshdr(scn, &sh) == nullptr)) {
      err = elf_errmsg(-1);  // another compression (zstd): libelf inflates it, if it can
      break;
    }
    Elf_Scn* to = elf_newscn(dst);
    if (to == nullptr) {
      err = elf_errmsg(-1);
      break;
    }
    const uint64_t align = sh.sh_addralign > 1 ? sh.sh_addralign : 1;
    offset = (offset + align - 1) / align * align;
    sh.sh_offset = offset;
    if (sh.sh_type != SHT_NOBITS) {
      Elf_Data* from = mine.d_buf != nullptr ? &mine : elf_getdata(scn, nullptr);
      Elf_Data* data = elf_newdata(to);
      if (data == nullptr) {
        err = elf_errmsg(-1);
        break;
      }
      if (from != nullptr) {
        *data = *from;
        data->d_off = 0;
      }
      offset += sh.sh_size;
    }
    if (gelf_update_shdr(to, &sh) == 0) err = elf_errmsg(-1);
  }
  if (err.empty()) {
    eh.e_phoff = phnum > 0 ? ehsize : 0;
    eh.e_shoff = (offset + 7) / 8 * 8;
    // The names' section keeps its index; past SHN_LORESERVE it lives in section 0's sh_link.
    if (shstrndx >= SHN_LORESERVE) {
      eh.e_shstrndx = SHN_XINDEX;
      GElf_Shdr zero;
      Elf_Scn* first = elf_getscn(dst, 0);
      if (first == nullptr || gelf_getshdr(first, &zero) == nullptr) {
        err = elf_errmsg(-1);
      } else {
        zero.sh_link = static_cast<GElf_Word>(shstrndx);
        if (gelf_update_shdr(first, &zero) == 0) err = elf_errmsg(-1);
      }
    }
    if (err.empty() && gelf_update_ehdr(dst, &eh) == 0) err = elf_errmsg(-1);
  }
  if (err.empty()) {
    elf_flagelf(dst, ELF_C_SET, ELF_F_LAYOUT);
    if (elf_update(dst, ELF_C_WRITE) < 0) err = elf_errmsg(-1);
  }
  elf_end(dst);
  return err;
}

// The same, from the file fd refers to.
std::string write_inflated(int fd, int out) {
  Elf* src = elf_begin(fd, ELF_C_READ_MMAP, nullptr);
  if (src == nullptr) return elf_errmsg(-1);
  std::string err = write_inflated(src, out);
  elf_end(src);
  return err;
}

// The copy of the file fd refers to in an anonymous memory file, for the symbolizer that opens
// it alone: with no cache, or one that cannot be written. It takes the memory libdw's own
// inflating would, in less time. Its fd, or -1 and the reason.
int inflated_in_memory(int fd, std::string* err) {
  const int out = memfd_create("memtrace-debug", MFD_CLOEXEC);
  if (out < 0) {
    *err = std::strerror(errno);
    return -1;
  }
  *err = write_inflated(fd, out);
  if (!err->empty()) {
    close(out);
    return -1;
  }
  return out;
}

// The copy of the file fd refers to, made at path (through a temporary, renamed when whole: two
// processes may make it at once). An error's text, or "".
std::string make_copy(int fd, const std::string& dir, const std::string& path) {
  if (!make_dirs(dir)) return std::string("cannot make the folder: ") + std::strerror(errno);
  const std::string tmp = path + ".tmp." + std::to_string(getpid()) + "." + std::to_string(gettid());
  const int out = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (out < 0) return std::string("cannot write in the folder: ") + std::strerror(errno);
  std::string err = write_inflated(fd, out);
  if (close(out) != 0 && err.empty()) err = std::strerror(errno);
  if (err.empty() && rename(tmp.c_str(), path.c_str()) != 0) err = std::strerror(errno);
  if (!err.empty()) unlink(tmp.c_str());
  return err;
}

}  // namespace

void set_debug_cache_dir(std::string dir) {
  std::lock_guard<std::mutex> lock(g_mutex);
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  g_dir = std::move(dir);
}

std::string debug_cache_dir() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_dir;
}

std::string default_debug_cache_dir() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg != nullptr && xdg[0] == '/') return std::string(xdg) + "/memtrace/debug";
  const char* home = std::getenv("HOME");
  if (home != nullptr && home[0] == '/') return std::string(home) + "/.cache/memtrace/debug";
  return "";
}

void set_debug_cache_setting(const std::string& setting) {
  set_debug_cache_dir(setting == "off" ? std::string() : setting.empty() ? default_debug_cache_dir() : setting);
}

std::vector<std::string> take_debug_cache_warnings() {
  std::lock_guard<std::mutex> lock(g_mutex);
  std::vector<std::string> out;
  out.swap(g_warnings);
  return out;
}

namespace detail {

int open_by_build_id(const unsigned char* id, int id_len, char** path) {
  if (id == nullptr || id_len <= 0) return -1;
  elf_version(EV_CURRENT);
  const std::string hexid = hex(id, id_len);
  if (const std::string dir = debug_cache_dir(); !dir.empty())
    if (const int fd = open_holding_copy(dir + "/" + hexid + ".debug", id, id_len, path); fd >= 0) return fd;
  const std::string file = "/usr/lib/debug/.build-id/" + hexid.substr(0, 2) + "/" + hexid.substr(2) + ".debug";
  const int fd = open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  set_path(path, file);
  return debug_file_or_copy(fd, file.c_str(), id, id_len, path);
}

int debug_file_or_copy(int fd, const char* path, const unsigned char* id, int id_len, char** copy_path) {
  if (fd < 0 || id == nullptr || id_len <= 0) return fd;
  elf_version(EV_CURRENT);
  uint64_t bytes = 0;
  if (Elf* elf = elf_begin(fd, ELF_C_READ_MMAP, nullptr)) {
    bytes = compressed_debug_bytes(elf);
    elf_end(elf);
  }
  if (bytes == 0) return fd;
  const std::string name = path != nullptr ? path : "a debug file";
  const std::string dir = debug_cache_dir();
  std::string disk_err;  // why no copy could be kept, when one was to be
  if (!dir.empty() && bytes <= kMaxCopyBytes) {
    const std::string copy = dir + "/" + hex(id, id_len) + ".debug";
    int cfd = open_holding_copy(copy, id, id_len, copy_path);
    if (cfd < 0) {
      // Absent, or another file under that name (a crash mid-rename cannot leave one; a person can).
      unlink(copy.c_str());
      disk_err = make_copy(fd, dir, copy);
      if (disk_err.empty()) cfd = open_holding_copy(copy, id, id_len, copy_path);
    }
    if (cfd >= 0) {
      close(fd);
      return cfd;
    }
  }
  std::string err;
  const int mfd = inflated_in_memory(fd, &err);
  if (mfd < 0) {
    warn_once(name, "cannot inflate " + name + " (" + err + "); its compressed DWARF is read as it is");
    return fd;
  }
  if (!disk_err.empty())
    warn_once(dir, "no decompressed copy of " + name + " kept in " + dir + " (" + disk_err + "); inflated in memory instead");
  close(fd);
  return mfd;
}

}  // namespace detail

}  // namespace memtrace::unwind
