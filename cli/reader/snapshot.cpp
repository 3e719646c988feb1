// Snapshot helpers and the two entry points: reading the file (a regular file mapped, not copied;
// a FIFO, pipe or device read into memory, bounded, see LoadOptions) and turning any failure,
// std::bad_alloc included, into a LoadError.
#include "cli/reader/snapshot.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <exception>
#include <new>

#include "cli/reader/pickle_vm.hpp"
#include "cli/reader/snapshot_decoder.hpp"

namespace memtrace::reader {

int Snapshot::device_count() const {
  int n = static_cast<int>(device_traces.size());
  for (const Segment& s : segments)
    if (s.device + 1 > n) n = s.device + 1;
  return n;
}

std::vector<StrId> Snapshot::range_path(RangeId id) const {
  std::vector<StrId> out;
  // Parents always have lower ids (range_table.hpp), so the walk ends; the bound guards a table
  // built by hand.
  while (id != 0 && id < ranges.size() && out.size() <= kMaxRangeDepth) {
    out.push_back(ranges[id].name);
    id = ranges[id].parent;
  }
  std::reverse(out.begin(), out.end());
  return out;
}

namespace {

// Files people hand memtrace by mistake, named for what they are rather than as a bad opcode.
std::string what_else(std::string_view bytes) {
  if (bytes.substr(0, 2) == "\x1f\x8b") return "a gzip file, not a pickle (gunzip it first)";
  if (bytes.substr(0, 40).find("version https://git-lfs.github.com/spec/") == 0)
    return "a Git LFS pointer, not the snapshot (fetch it with 'git lfs pull')";
  if (bytes.substr(0, 4) == "PK\x03\x04") return "a zip archive, not a pickle (unzip it first)";
  return {};
}

LoadResult decode_guarded(std::string_view bytes, const std::string& name_for_errors, bool drop_consumed) {
  if (std::string other = what_else(bytes); !other.empty()) {
    LoadResult r;
    r.error = LoadError{name_for_errors + ": " + other};
    return r;
  }
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

namespace {

// The bytes read from a stream, in an anonymous mapping grown with mremap: growing never copies
// (pages are moved, not duplicated), so a stream near max_stream_bytes does not need 1.5x that
// while the buffer grows, as a doubling std::string would.
class StreamBuffer {
 public:
  StreamBuffer() = default;
  StreamBuffer(const StreamBuffer&) = delete;
  StreamBuffer& operator=(const StreamBuffer&) = delete;
  ~StreamBuffer() {
    if (p_) ::munmap(p_, cap_);
  }
  const char* data() const { return static_cast<const char*>(p_); }
  size_t size() const { return size_; }
  char* tail() { return static_cast<char*>(p_) + size_; }
  size_t room() const { return cap_ - size_; }
  void grew(size_t n) { size_ += n; }
  // Makes room() > 0, growing to at most `limit` bytes (> size()); false when out of memory.
  bool make_room(size_t limit) {
    if (size_ < cap_) return true;
    size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    size_t want = cap_ ? (cap_ > limit / 2 ? limit : cap_ * 2) : std::min(limit, size_t{1} << 20);
    want = (want + page - 1) / page * page;
    void* q = p_ ? ::mremap(p_, cap_, want, MREMAP_MAYMOVE)
                 : ::mmap(nullptr, want, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (q == MAP_FAILED) return false;
    p_ = q;
    cap_ = want;
    return true;
  }

 private:
  void* p_ = nullptr;
  size_t cap_ = 0;
  size_t size_ = 0;
};

std::string bytes_text(uint64_t b) {
  if (b >= (uint64_t{1} << 30) && b % (uint64_t{1} << 30) == 0) return std::to_string(b >> 30) + " GiB";
  if (b >= (uint64_t{1} << 20) && b % (uint64_t{1} << 20) == 0) return std::to_string(b >> 20) + " MiB";
  return std::to_string(b) + " bytes";
}

std::string ms_text(int ms) {
  return ms % 1000 == 0 ? std::to_string(ms / 1000) + " s" : std::to_string(ms) + " ms";
}

bool set_blocking(int fd) {
  int fl = ::fcntl(fd, F_GETFL);
  return fl >= 0 && ::fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) == 0;
}

// Reads the first byte of a non-regular input opened with O_NONBLOCK. On return fd is blocking.
// Returns "" with *byte set, or the error text.
//
// A FIFO: a read of 0 means no writer has it open (data or EAGAIN would mean one has), so the
// reader waits for one in poll(), which wakes when a writer writes or closes again, for at most
// wait_ms in all; then the read tells: still 0 is "no writer", EAGAIN is a writer that has not
// written yet, which is then waited for without limit (blocking reads), however slow it is. POLLHUP
// with no data is a writer that came and went (or an anonymous pipe whose writer has exited)
// without writing: empty input. Other devices are read blocking from the start (a terminal waits
// for its user, as cat does).
std::string read_first_byte(int fd, bool is_fifo, int wait_ms, char* byte) {
  if (!is_fifo && !set_blocking(fd)) return std::string("cannot read: ") + std::strerror(errno);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
  bool hung_up = false;
  bool blocking = !is_fifo;
  while (true) {
    ssize_t n = ::read(fd, byte, 1);
    if (n == 1) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      if ((errno == EAGAIN || errno == EWOULDBLOCK) && !blocking) {  // a writer, no data yet
        if (!set_blocking(fd)) return std::string("cannot read: ") + std::strerror(errno);
        blocking = true;
        continue;
      }
      return std::string("cannot read: ") + std::strerror(errno);
    }
    // n == 0: end of input, or (a FIFO still non-blocking) no writer at the moment.
    if (blocking || hung_up) return "no data: empty input";
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return "no data: FIFO has no writer (none opened it within " + ms_text(wait_ms) + ")";
    struct pollfd pfd = {fd, POLLIN, 0};
    int r = ::poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left.count() + 1, INT32_MAX)));
    if (r < 0 && errno != EINTR) return std::string("cannot poll: ") + std::strerror(errno);
    if (r > 0 && (pfd.revents & POLLHUP) && !(pfd.revents & POLLIN)) hung_up = true;
  }
  if (!blocking && !set_blocking(fd)) return std::string("cannot read: ") + std::strerror(errno);
  return "";
}

// Reads a non-regular input whole (bounded by options.max_stream_bytes) and decodes it.
LoadResult load_stream(int fd, const std::string& path, bool is_fifo, const LoadOptions& options,
                       uint64_t* bytes_read) {
  char first = 0;
  std::string err = read_first_byte(fd, is_fifo, options.fifo_writer_wait_ms, &first);
  if (!err.empty()) return fail(path, err);
  *bytes_read = 1;
  // The VM on the one byte fails at byte 0 with the message the whole input would give ("not a
  // pickle: unknown opcode 0x00 at byte 0"), except where the opcode wanted its argument first.
  if (!pickle::may_start_pickle(static_cast<uint8_t>(first))) {
    LoadResult r = load_snapshot_bytes(std::string_view(&first, 1), path);
    if (!r.error || r.error->message.find(": truncated") != std::string::npos)
      r = fail(path, "not a pickle: " + pickle::describe_opcode(static_cast<uint8_t>(first)) +
                         " cannot start a pickle at byte 0");
    return r;
  }
  const uint64_t limit64 = std::max<uint64_t>(options.max_stream_bytes, 1);
  const size_t limit = static_cast<size_t>(std::min<uint64_t>(limit64, SIZE_MAX / 2));
  StreamBuffer buf;
  if (!buf.make_room(limit)) return fail(path, "out of memory while reading");
  *buf.tail() = first;
  buf.grew(1);
  while (true) {
    bool full = buf.size() >= limit;
    if (!full && !buf.make_room(limit)) return fail(path, "out of memory while reading");
    char probe;
    char* to = full ? &probe : buf.tail();
    size_t want = full ? 1 : std::min(buf.room(), limit - buf.size());
    ssize_t n = ::read(fd, to, want);
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail(path, std::string("cannot read: ") + std::strerror(errno));
    }
    if (n == 0) break;
    *bytes_read += static_cast<uint64_t>(n);
    if (full)
      return fail(path, "not a regular file and longer than " + bytes_text(limit) +
                            ", the most read from a pipe or device; save it to a file first");
    buf.grew(static_cast<size_t>(n));
  }
  return load_snapshot_bytes(std::string_view(buf.data(), buf.size()), path);
}

}  // namespace

LoadResult load_snapshot(const std::string& path) { return load_snapshot(path, LoadOptions{}); }

LoadResult load_snapshot(const std::string& path, const LoadOptions& options) {
  uint64_t ignored = 0;
  uint64_t* bytes_read = options.stream_bytes_read ? options.stream_bytes_read : &ignored;
  *bytes_read = 0;
  // O_NONBLOCK: opening a FIFO must not wait for a writer (load_stream does, for a bounded time).
  // "-" is standard input, as in other tools: `zcat snap.pickle.gz | memtrace summary -`.
  int fd = path == "-" ? ::fcntl(0, F_DUPFD_CLOEXEC, 0) : ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
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
  // Pipes, FIFOs, devices: read them into memory, bounded.
  LoadResult r;
  try {
    r = load_stream(fd, path, S_ISFIFO(st.st_mode), options, bytes_read);
  } catch (const std::bad_alloc&) {
    r = fail(path, "out of memory while reading");
  }
  ::close(fd);
  return r;
}

format::RawId Snapshot::kept_entry(size_t list, size_t index) const {
  if (list >= kept_entries.size()) return 0;
  const auto& v = kept_entries[list];
  auto it = std::lower_bound(v.begin(), v.end(), std::make_pair(static_cast<uint32_t>(index), format::RawId{0}));
  return it != v.end() && it->first == index ? it->second : 0;
}

}  // namespace memtrace::reader
