#include "format/atomic_file.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

namespace memtrace::format {

namespace {

void set_error(std::string* error, std::string_view what, const std::string& path, int err) {
  if (!error) return;
  try {
    *error = fmt::format("cannot {} '{}': {}", what, path, std::strerror(err));
  } catch (...) {
  }
}

const char* kind_of(mode_t m) {
  if (S_ISDIR(m)) return "directory";
  if (S_ISCHR(m)) return "character device";
  if (S_ISBLK(m)) return "block device";
  if (S_ISFIFO(m)) return "FIFO";
  if (S_ISSOCK(m)) return "socket";
  return "special file";
}

// A snapshot replaces only a regular file (or a symbolic link, which rename replaces, never its
// target). Replacing /dev/null, a FIFO or a device node with a regular file would break every
// other program that uses it; as root nothing else would stop it.
bool may_replace(const std::string& path, std::string* error) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0 || S_ISREG(st.st_mode) || S_ISLNK(st.st_mode)) return true;
  if (error) {
    try {
      *error = fmt::format("'{}' is a {}, not a regular file: snapshots are written only as regular files",
                           path, kind_of(st.st_mode));
    } catch (...) {
    }
  }
  return false;
}

bool is_directory(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::atomic<unsigned> g_counter{0};

constexpr char kTmpMark[] = ".tmp.";
constexpr time_t kStaleAfterS = 60;  // no dump takes this long to write its file

std::string this_host() {
  char h[256] = {};
  if (::gethostname(h, sizeof h - 1) != 0 || !h[0]) return "host";
  for (char* c = h; *c; ++c)
    if (*c == '/' || *c == '.') *c = '_';  // one path component, and the name's dots stay ours
  return h;
}

// A temporary file another dump left behind (its process was killed while writing): named
// ".<stem>.tmp.<host>.<pid>.<n>.<x>" by write_file_atomically. It is removed only when that is
// provably safe: written on this host, by a process that no longer exists, not touched for a
// minute, and owned by this user. Anything else, including names of other shapes, is left alone.
void remove_stale_temporaries(const std::string& dir, const std::string& host) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return;
  const uid_t me = ::geteuid();
  const std::string host_part = kTmpMark + host + ".";
  while (dirent* e = ::readdir(d)) {
    std::string_view name = e->d_name;
    if (name.size() < 2 || name[0] != '.') continue;
    size_t at = name.rfind(host_part);
    if (at == std::string_view::npos || at == 0) continue;
    std::string_view rest = name.substr(at + host_part.size());  // <pid>.<n>.<x>
    size_t dot = rest.find('.');
    if (dot == std::string_view::npos || dot == 0 || dot > 9) continue;
    long pid = 0;
    bool digits = true;
    for (char c : rest.substr(0, dot)) {
      if (c < '0' || c > '9') digits = false;
      pid = pid * 10 + (c - '0');
    }
    if (!digits || pid <= 0 || pid == ::getpid()) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // alive, or not ours to ask
    struct stat st;
    std::string full = dir + "/" + std::string(name);
    if (::lstat(full.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != me) continue;
    if (::time(nullptr) - st.st_mtime < kStaleAfterS) continue;
    ::unlink(full.c_str());
  }
  ::closedir(d);
}

}  // namespace

namespace {

// Creates the missing directories of `dir`, appending each one it made to *made (outermost first).
bool create_directories(const std::string& dir, std::vector<std::string>* made, std::string* error) {
  if (dir.empty() || is_directory(dir)) return true;
  std::string cur;
  size_t i = 0;
  while (i <= dir.size()) {
    size_t slash = dir.find('/', i);
    if (slash == std::string::npos) slash = dir.size();
    cur.assign(dir, 0, slash);
    i = slash + 1;
    if (cur.empty() || cur.back() == '/') continue;  // leading or doubled slash
    if (::mkdir(cur.c_str(), 0700) == 0) {
      if (made) made->push_back(cur);
      continue;
    }
    int err = errno;
    if (err == EEXIST) {
      if (is_directory(cur)) continue;
      err = ENOTDIR;
    } else if (is_directory(cur)) {
      continue;  // e.g. EACCES on an existing directory we only pass through
    }
    set_error(error, "create directory", cur, err);
    return false;
  }
  return true;
}

// A write that fails leaves the file system as it found it: the directories it made go again
// (innermost first; rmdir removes only what is still empty).
void remove_directories(const std::vector<std::string>& made) {
  int saved = errno;
  for (auto it = made.rbegin(); it != made.rend(); ++it) ::rmdir(it->c_str());
  errno = saved;
}

// Names the kernel would refuse, found before anything is created: a component over NAME_MAX or a
// path over PATH_MAX.
bool name_fits(const std::string& path) {
  if (path.size() >= PATH_MAX) return false;
  size_t start = 0;
  while (start <= path.size()) {
    size_t slash = path.find('/', start);
    if (slash == std::string::npos) slash = path.size();
    if (slash - start > NAME_MAX) return false;
    start = slash + 1;
  }
  return true;
}

}  // namespace

bool make_directories(const std::string& dir, std::string* error) {
  try {
    if (!name_fits(dir)) {
      set_error(error, "create directory", dir, ENAMETOOLONG);
      return false;
    }
    std::vector<std::string> made;
    if (create_directories(dir, &made, error)) return true;
    remove_directories(made);
    return false;
  } catch (...) {
    set_error(error, "create directory", dir, ENOMEM);
    return false;
  }
}

bool write_file_atomically(const std::string& path, std::string_view bytes, std::string* error) {
  std::string tmp;
  std::vector<std::string> made;  // directories this call created, removed again if it fails
  struct Undo {
    std::vector<std::string>& made;
    bool done = false;
    ~Undo() {
      if (!done) remove_directories(made);
    }
  } undo{made};
  int fd = -1;
  try {
    if (path.empty()) {
      set_error(error, "write", path, ENOENT);
      return false;
    }
    size_t slash = path.rfind('/');
    std::string dir = slash == std::string::npos ? std::string(".") : path.substr(0, slash == 0 ? 1 : slash);
    std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
    if (base.empty() || base == "." || base == "..") {
      set_error(error, "write", path, EISDIR);
      return false;
    }
    // Under a file size limit, writing past it raises SIGXFSZ (which kills by default): refuse first.
    struct rlimit rl;
    if (::getrlimit(RLIMIT_FSIZE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && bytes.size() > rl.rlim_cur) {
      set_error(error, "write", path, EFBIG);
      return false;
    }
    const std::string host = this_host();
    // The temporary name is the longest thing created: the stem is cut so that it fits a
    // directory entry, and the whole path is checked before any directory is made.
    const size_t fixed = 1 + sizeof(kTmpMark) - 1 + host.size() + 3 * 1 + 10 + 20 + 8;
    const size_t stem_max = fixed < NAME_MAX ? std::min<size_t>(200, NAME_MAX - fixed) : 0;
    if (!name_fits(path) || stem_max == 0 || !name_fits(dir + "/" + std::string(fixed + stem_max, 'x'))) {
      set_error(error, "write", path, ENAMETOOLONG);
      return false;
    }
    if (!create_directories(dir, &made, error)) return false;
    if (!may_replace(path, error)) return false;
    {
      int saved = errno;
      remove_stale_temporaries(dir, host);
      errno = saved;
    }

    // A hidden temporary name beside the target, so that rename() stays within one file system.
    std::string stem = base.size() > stem_max ? base.substr(0, stem_max) : base;
    for (int attempt = 0; attempt < 64 && fd < 0; ++attempt) {
      struct timespec ts;
      ::clock_gettime(CLOCK_MONOTONIC, &ts);
      tmp = fmt::format("{}/.{}{}{}.{}.{}.{:x}", dir, stem, kTmpMark, host, ::getpid(),
                        g_counter.fetch_add(1, std::memory_order_relaxed), static_cast<unsigned>(ts.tv_nsec));
      fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
      if (fd < 0 && errno != EEXIST) break;
    }
    if (fd < 0) {
      int err = errno;
      set_error(error, "create a file in", dir, err);
      return false;
    }

    const char* p = bytes.data();
    size_t left = bytes.size();
    while (left > 0) {
      size_t chunk = left < (size_t{1} << 30) ? left : (size_t{1} << 30);
      ssize_t n = ::write(fd, p, chunk);
      if (n < 0) {
        if (errno == EINTR) continue;
        int err = errno;
        set_error(error, "write", path, err);
        ::close(fd);
        ::unlink(tmp.c_str());
        return false;
      }
      if (n == 0) {
        set_error(error, "write", path, ENOSPC);
        ::close(fd);
        ::unlink(tmp.c_str());
        return false;
      }
      p += n;
      left -= static_cast<size_t>(n);
    }
    if (::fsync(fd) != 0 && errno != EINVAL && errno != EROFS) {
      int err = errno;
      set_error(error, "write", path, err);
      ::close(fd);
      ::unlink(tmp.c_str());
      return false;
    }
    // close() can report a deferred write error (network file systems).
    if (::close(fd) != 0 && errno != EINTR) {
      int err = errno;
      fd = -1;
      set_error(error, "write", path, err);
      ::unlink(tmp.c_str());
      return false;
    }
    fd = -1;
    // Looked at again: the name may have become something else while the file was written.
    if (!may_replace(path, error)) {
      ::unlink(tmp.c_str());
      return false;
    }
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
      int err = errno;
      set_error(error, "replace", path, err);
      ::unlink(tmp.c_str());
      return false;
    }
    // Make the rename itself durable; best effort.
    int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      (void)::fsync(dfd);
      ::close(dfd);
    }
    undo.done = true;
    return true;
  } catch (...) {
    if (fd >= 0) ::close(fd);
    if (!tmp.empty()) ::unlink(tmp.c_str());
    set_error(error, "write", path, ENOMEM);
    return false;
  }
}

}  // namespace memtrace::format
