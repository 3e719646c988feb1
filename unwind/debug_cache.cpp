// The debug-file cache (unwind/debug_cache.hpp): which files qualify, where their copies live,
// and how a copy is written (libelf: every section as it is, compressed ones inflated by
// libdeflate), on disk in the cache or, with no cache, in memory.
#include "unwind/debug_cache.hpp"

#include <elfutils/libdwelf.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <set>

#include "unwind/inflated_elf.hpp"
#include "unwind/partial_copy.hpp"

namespace memtrace::unwind {

using detail::PartialCopy;

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

// The whole copy of the file fd refers to, written to out (unwind/inflated_elf.hpp).
std::string write_inflated_file(int fd, int out) {
  Elf* src = elf_begin(fd, ELF_C_READ_MMAP, nullptr);
  if (src == nullptr) return elf_errmsg(-1);
  std::string err = detail::write_inflated(src, out);
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
  *err = write_inflated_file(fd, out);
  if (!err->empty()) {
    close(out);
    return -1;
  }
  return out;
}

// A copy made at path by write (through a temporary, renamed when whole: two processes may make
// it at once). An error's text, or "".
std::string make_copy(const std::string& dir, const std::string& path, const std::function<std::string(int)>& write) {
  if (!make_dirs(dir)) return std::string("cannot make the folder: ") + std::strerror(errno);
  const std::string tmp = path + ".tmp." + std::to_string(getpid()) + "." + std::to_string(gettid());
  const int out = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (out < 0) return std::string("cannot write in the folder: ") + std::strerror(errno);
  std::string err = write(out);
  if (close(out) != 0 && err.empty()) err = std::strerror(errno);
  if (err.empty() && rename(tmp.c_str(), path.c_str()) != 0) err = std::strerror(errno);
  if (!err.empty()) unlink(tmp.c_str());
  return err;
}

// The bytes of the memory file mfd, written to out.
std::string copy_bytes(int mfd, int out) {
  const off_t size = lseek(mfd, 0, SEEK_END);
  if (size < 0) return std::strerror(errno);
  for (off_t at = 0; at < size;) {
    const ssize_t n = sendfile(out, mfd, &at, static_cast<size_t>(size - at));
    if (n <= 0) return n == 0 ? std::string("short write") : std::strerror(errno);
  }
  return "";
}

// A partial copy that became whole (unwind/partial_copy.hpp), kept in the cache when there is one
// and it holds no copy yet: the next program maps it instead of inflating again.
void keep_whole(int mfd, const std::string& name, const std::string& hexid, const unsigned char* id, int id_len) {
  const std::string dir = debug_cache_dir();
  if (dir.empty()) return;
  const std::string copy = dir + "/" + hexid + ".debug";
  if (const int cfd = open_holding_copy(copy, id, id_len, nullptr); cfd >= 0) {
    close(cfd);
    return;
  }
  unlink(copy.c_str());  // another file under that name (a crash mid-rename cannot leave one; a person can)
  if (std::string err = make_copy(dir, copy, [mfd](int out) { return copy_bytes(mfd, out); }); !err.empty())
    warn_once(dir, "no decompressed copy of " + name + " kept in " + dir + " (" + err + ")");
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
  const std::string hexid = hex(id, id_len);
  const std::string copy = dir + "/" + hexid + ".debug";
  if (!dir.empty())
    if (const int cfd = open_holding_copy(copy, id, id_len, copy_path); cfd >= 0) {
      close(fd);
      return cfd;
    }
  // This process's partial copy, inflated only as far as the units asked need.
  std::string perr;
  const std::string raw_id(reinterpret_cast<const char*>(id), static_cast<size_t>(id_len));
  PartialCopy::Hooks hooks;
  hooks.warn = [name](const std::string& text) { warn_once(name, text); };
  if (bytes <= kMaxCopyBytes) {
    std::vector<unsigned char> id_bytes(id, id + id_len);
    hooks.whole = [name, hexid, id_bytes](int mfd) {
      keep_whole(mfd, name, hexid, id_bytes.data(), static_cast<int>(id_bytes.size()));
    };
  }
  if (auto partial = PartialCopy::open(fd, name, raw_id, hooks, &perr)) {
    const int pfd = fcntl(partial->fd(), F_DUPFD_CLOEXEC, 0);
    if (pfd >= 0) {
      if (partial->whole() && hooks.whole) hooks.whole(partial->fd());  // made whole before the cache was set
      close(fd);
      return pfd;
    }
  }
  // A file a partial copy cannot serve: the whole copy, on disk when there is a cache.
  std::string disk_err;  // why no copy could be kept, when one was to be
  if (!dir.empty() && bytes <= kMaxCopyBytes) {
    unlink(copy.c_str());  // another file under that name (a crash mid-rename cannot leave one; a person can)
    disk_err = make_copy(dir, copy, [fd](int out) { return write_inflated_file(fd, out); });
    if (disk_err.empty())
      if (const int cfd = open_holding_copy(copy, id, id_len, copy_path); cfd >= 0) {
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
