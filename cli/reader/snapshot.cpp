// Snapshot helpers and the two entry points: reading the file (mapped, not copied) and turning any
// failure, std::bad_alloc included, into a LoadError.
#include "cli/reader/snapshot.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <exception>
#include <new>

#include "cli/reader/snapshot_decoder.hpp"

namespace memtrace::reader {

std::string_view action_name(Action a) {
  switch (a) {
    case Action::kAlloc: return "alloc";
    case Action::kFreeRequested: return "free_requested";
    case Action::kFreeCompleted: return "free_completed";
    case Action::kSegmentAlloc: return "segment_alloc";
    case Action::kSegmentFree: return "segment_free";
    case Action::kSegmentMap: return "segment_map";
    case Action::kSegmentUnmap: return "segment_unmap";
    case Action::kSnapshot: return "snapshot";
    case Action::kOom: return "oom";
    case Action::kOther: break;
  }
  return "other";
}

int Snapshot::device_count() const {
  int n = static_cast<int>(device_traces.size());
  for (const Segment& s : segments)
    if (s.device + 1 > n) n = s.device + 1;
  return n;
}

namespace {

LoadResult decode_guarded(std::string_view bytes, const std::string& name_for_errors, bool drop_consumed) {
  try {
    return decode_snapshot(bytes, name_for_errors, drop_consumed);
  } catch (const std::bad_alloc&) {
    LoadResult r;
    r.error = LoadError{name_for_errors + ": out of memory while decoding"};
    return r;
  } catch (const std::exception& e) {
    LoadResult r;
    r.error = LoadError{name_for_errors + ": " + e.what()};
    return r;
  } catch (...) {
    LoadResult r;
    r.error = LoadError{name_for_errors + ": unexpected failure while decoding"};
    return r;
  }
}

LoadResult fail(const std::string& path, const std::string& what) {
  LoadResult r;
  r.error = LoadError{path + ": " + what};
  return r;
}

}  // namespace

LoadResult load_snapshot_bytes(std::string_view bytes, const std::string& name_for_errors) {
  return decode_guarded(bytes, name_for_errors, false);
}

LoadResult load_snapshot(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return fail(path, std::string("cannot open: ") + std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    return fail(path, std::string("cannot stat: ") + std::strerror(e));
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    return fail(path, "is a directory");
  }
  if (S_ISREG(st.st_mode)) {
    size_t size = static_cast<size_t>(st.st_size);
    if (size == 0) {
      ::close(fd);
      return fail(path, "empty file");
    }
    // Mapped read-only: the decoder copies out only the distinct strings, so the file's pages
    // are never duplicated in memory.
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    if (p == MAP_FAILED) return fail(path, std::string("cannot map: ") + std::strerror(errno));
    ::madvise(p, size, MADV_SEQUENTIAL);
    LoadResult r = decode_guarded(std::string_view(static_cast<const char*>(p), size), path, true);
    ::munmap(p, size);
    return r;
  }
  // Pipes and the like: read them whole.
  std::string data;
  try {
    char buf[1 << 16];
    while (true) {
      ssize_t n = ::read(fd, buf, sizeof(buf));
      if (n < 0) {
        if (errno == EINTR) continue;
        int e = errno;
        ::close(fd);
        return fail(path, std::string("cannot read: ") + std::strerror(e));
      }
      if (n == 0) break;
      data.append(buf, static_cast<size_t>(n));
    }
  } catch (const std::bad_alloc&) {
    ::close(fd);
    return fail(path, "out of memory while reading");
  }
  ::close(fd);
  return load_snapshot_bytes(data, path);
}

}  // namespace memtrace::reader
