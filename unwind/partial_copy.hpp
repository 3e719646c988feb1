// A compressed debug file's copy in memory whose big DWARF sections (.debug_info, .debug_abbrev,
// .debug_line, .debug_loclists) are inflated only as far as the compilation units a dump asks
// for need, so that a dump pays for the code on its stacks rather than for the whole library:
// libc's frames in the main thread sit in its first units (docs/symbolization.md). The small
// sections (.debug_aranges, .debug_str, .debug_rnglists, ...) are inflated whole when it is made.
//
// One per debug file per process, shared by every symbolizer (each maps the same memory file), so
// what one dump inflated serves the next. Once more than half of the lazy sections' compressed
// bytes have been needed, the rest is inflated too and the copy is whole: it is then handed to
// whoever made it (the debug cache keeps it on disk), since the next program would pay the same.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace memtrace::unwind::detail {

class PartialCopy {
 public:
  enum Lazy : int { kInfo, kAbbrev, kLine, kLoclists, kLazyCount };

  struct Hooks {
    std::function<void(const std::string&)> warn;  // a problem, said once, naming the file
    std::function<void(int fd)> whole;              // the copy is complete (fd: the memory file)
  };

  // The copy of the debug file fd (named path, build id id: its bytes), made now when this process has
  // none. Null when the file does not qualify: its lazy sections are not zlib-compressed, it has
  // no .debug_aranges (the units could not be found without reading every one), it holds type
  // units, or its byte order is not this machine's; *err says why when it was a failure.
  static std::shared_ptr<PartialCopy> open(int fd, const std::string& path, const std::string& id, Hooks hooks,
                                           std::string* err);
  // This process's copy of the debug file with this build id and path, or null.
  static std::shared_ptr<PartialCopy> find(const std::string& id, const std::string& path);
  // Forgets this process's copies, for tests that need a first one: the next open makes new ones
  // (copies in use stay alive for their users).
  static void forget_all();
  static std::shared_ptr<PartialCopy> find(const unsigned char* id, int id_len, const std::string& path) {
    return find(std::string(reinterpret_cast<const char*>(id), id_len > 0 ? static_cast<size_t>(id_len) : 0), path);
  }

  PartialCopy(const PartialCopy&) = delete;
  PartialCopy& operator=(const PartialCopy&) = delete;
  ~PartialCopy();

  int fd() const { return fd_; }
  // The .debug_info offset of the unit whose .debug_aranges range holds addr (an address in the
  // file's own terms); false when none does.
  bool unit_of(uint64_t addr, uint64_t* cu_offset) const;
  // Makes readable all that reading the unit at cu_offset touches: .debug_info up to the unit's
  // end (libdw reads every unit header before it) and the abbreviation tables of those units.
  // False when the unit is not there or its bytes do not inflate (said once through warn).
  bool prepare_unit(uint64_t cu_offset);
  // The line program at stmt_list (a unit's DW_AT_stmt_list), the same way.
  bool prepare_lines(uint64_t stmt_list);

  // Inflated bytes of the lazy sections so far, and their inflated size.
  uint64_t inflated_bytes() const;
  uint64_t lazy_bytes() const;
  bool whole() const { return whole_.load(std::memory_order_acquire); }

 private:
  struct Section;
  PartialCopy();
  bool ensure(Lazy s, uint64_t end);
  bool inflate_locked(Lazy s, uint64_t end);
  bool inflate_rest_locked(Lazy s);
  void complete_locked();
  void warn_failed(Lazy s);
  bool write_at(uint64_t offset, const unsigned char* bytes, uint64_t n);
  bool walk_abbrevs(uint64_t offset, bool* refers_out);

  int fd_ = -1;
  int src_fd_ = -1;
  void* src_elf_ = nullptr;  // Elf*: the compressed bytes the sections inflate from
  const unsigned char* map_ = nullptr;  // the memory file, read-only (written with pwrite)
  std::unique_ptr<unsigned char[]> chunk_;  // what zlib's streaming inflates into
  uint64_t map_size_ = 0;
  std::string path_;
  Hooks hooks_;
  std::unique_ptr<Section[]> sections_;
  struct Range {
    uint64_t low, high, cu;
  };
  std::vector<Range> aranges_;  // by low
  std::mutex walk_mutex_;  // the unit walk's state; taken before mutex_
  std::mutex mutex_;       // the sections' inflating
  uint64_t units_walked_ = 0;   // .debug_info offset up to which unit headers were walked
  uint64_t compressed_total_ = 0, compressed_used_ = 0;
  std::vector<uint64_t> abbrevs_walked_;
  std::atomic<bool> whole_{false};
  bool failed_ = false;
};

}  // namespace memtrace::unwind::detail
