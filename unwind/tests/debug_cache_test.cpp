// The debug cache (unwind/debug_cache.hpp) on a library whose separate debug file is compressed:
// the frames are the same with and without it, the copy is made once and then used, and a
// folder that cannot be written or a file that is not the copy costs nothing but a warning.
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <elfutils/libdwelf.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "unwind/debug_cache.hpp"
#include "unwind/partial_copy.hpp"
#include "unwind/stack_capture.hpp"
#include "unwind/symbolizer.hpp"
#include "unwind/tests/test_util.hpp"

using memtrace::unwind::Symbolizer;

namespace {

// A return address inside symtest_gz_call.
uintptr_t address_in_gz_library() {
  Symbolizer sym;
  for (uintptr_t pc : unwind_test::capture_via(symtest_gz_call))
    if (unwind_test::base_name(sym.module_of(pc - 1)) == "libunwind_symtest_gz.so") return pc;
  return 0;
}

void check_frames(uintptr_t pc) {
  Symbolizer sym;
  const auto& f = sym.frames(pc);
  REQUIRE(f.size() == 1);
  CHECK(f[0].function == "symtest_gz_call");
  const std::string file(f[0].file);
  CHECK(file.substr(file.rfind('/') + 1) == "symtest_gz.cpp");
  CHECK(f[0].line == symtest_gz_line());
}

std::vector<std::string> files_in(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') out.push_back(dir + "/" + e->d_name);
    closedir(d);
  }
  return out;
}

// The ELF file's sections: (any compressed, any .debug_info).
std::pair<bool, bool> sections_of(const std::string& path) {
  elf_version(EV_CURRENT);
  const int fd = open(path.c_str(), O_RDONLY);
  bool compressed = false, info = false;
  if (Elf* elf = elf_begin(fd, ELF_C_READ, nullptr)) {
    size_t names = 0;
    elf_getshdrstrndx(elf, &names);
    for (Elf_Scn* s = elf_nextscn(elf, nullptr); s != nullptr; s = elf_nextscn(elf, s)) {
      GElf_Shdr sh;
      gelf_getshdr(s, &sh);
      compressed |= (sh.sh_flags & SHF_COMPRESSED) != 0;
      const char* n = elf_strptr(elf, names, sh.sh_name);
      info |= n != nullptr && std::string(n) == ".debug_info";
    }
    elf_end(elf);
  }
  close(fd);
  return {compressed, info};
}

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/memtrace-debug-cache-XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() {
    for (const std::string& f : files_in(path)) unlink(f.c_str());
    rmdir(path.c_str());
    memtrace::unwind::set_debug_cache_dir("");
  }
};

std::string library_debug_file() {
  Dl_info info{};
  dladdr(reinterpret_cast<void*>(&symtest_gz_call), &info);
  return std::string(info.dli_fname) + ".debug";
}

}  // namespace

TEST_CASE("debug cache: a compressed debug file is read through a decompressed copy, made once", "[debug_cache]") {
  REQUIRE(sections_of(library_debug_file()).first);  // the test library's debug file is compressed
  const uintptr_t pc = address_in_gz_library();
  REQUIRE(pc != 0);
  TempDir dir;
  memtrace::unwind::set_debug_cache_dir(dir.path);
  check_frames(pc);
  const auto made = files_in(dir.path);
  REQUIRE(made.size() == 1);
  CHECK(made[0].size() > 6);
  CHECK(made[0].substr(made[0].size() - 6) == ".debug");
  const auto [compressed, info] = sections_of(made[0]);
  CHECK_FALSE(compressed);
  CHECK(info);
  struct stat before{}, after{};
  REQUIRE(stat(made[0].c_str(), &before) == 0);
  check_frames(pc);  // a new symbolizer: the copy, as it is
  REQUIRE(stat(made[0].c_str(), &after) == 0);
  CHECK(after.st_ino == before.st_ino);
  CHECK(after.st_mtim.tv_nsec == before.st_mtim.tv_nsec);
  CHECK(files_in(dir.path).size() == 1);
  CHECK(memtrace::unwind::take_debug_cache_warnings().empty());

  memtrace::unwind::set_debug_cache_dir("");  // off: a copy in memory, same frames
  check_frames(pc);
}

TEST_CASE("debug cache: a file under the copy's name that is not the copy is replaced", "[debug_cache]") {
  const uintptr_t pc = address_in_gz_library();
  REQUIRE(pc != 0);
  TempDir dir;
  memtrace::unwind::set_debug_cache_dir(dir.path);
  check_frames(pc);
  const auto made = files_in(dir.path);
  REQUIRE(made.size() == 1);
  {
    std::ofstream junk(made[0], std::ios::trunc);
    junk << "not an ELF file";
  }
  check_frames(pc);
  CHECK(sections_of(made[0]).second);  // an ELF file with DWARF again
}

TEST_CASE("debug cache: a folder that cannot be made costs one warning, never the frames", "[debug_cache]") {
  const uintptr_t pc = address_in_gz_library();
  REQUIRE(pc != 0);
  memtrace::unwind::take_debug_cache_warnings();
  memtrace::unwind::set_debug_cache_dir("/proc/self/memtrace-cannot-be-here");
  check_frames(pc);
  const auto warned = memtrace::unwind::take_debug_cache_warnings();
  REQUIRE(warned.size() == 1);
  CHECK(warned[0].find("/proc/self/memtrace-cannot-be-here") != std::string::npos);
  CHECK(warned[0].find("libunwind_symtest_gz.so.debug") != std::string::npos);
  check_frames(pc);
  CHECK(memtrace::unwind::take_debug_cache_warnings().empty());  // said once
  memtrace::unwind::set_debug_cache_dir("");
}

namespace {

// Every section's bytes, by name, compressed ones inflated by libelf (zlib's inflate: a second
// implementation to hold libdeflate's against).
std::vector<std::pair<std::string, std::string>> inflated_sections(int fd) {
  std::vector<std::pair<std::string, std::string>> out;
  elf_version(EV_CURRENT);
  Elf* elf = elf_begin(fd, ELF_C_READ, nullptr);
  REQUIRE(elf != nullptr);
  size_t names = 0;
  elf_getshdrstrndx(elf, &names);
  for (Elf_Scn* s = elf_nextscn(elf, nullptr); s != nullptr; s = elf_nextscn(elf, s)) {
    GElf_Shdr sh;
    gelf_getshdr(s, &sh);
    if (sh.sh_flags & SHF_COMPRESSED) REQUIRE(elf_compress(s, 0, 0) >= 0);
    gelf_getshdr(s, &sh);
    std::string bytes;
    if (sh.sh_type != SHT_NOBITS)
      if (Elf_Data* d = elf_getdata(s, nullptr); d != nullptr && d->d_buf != nullptr)
        bytes.assign(static_cast<const char*>(d->d_buf), d->d_size);
    out.emplace_back(elf_strptr(elf, names, sh.sh_name), std::move(bytes));
  }
  elf_end(elf);
  return out;
}

std::vector<unsigned char> build_id_of(const std::string& path) {
  elf_version(EV_CURRENT);
  const int fd = open(path.c_str(), O_RDONLY);
  std::vector<unsigned char> id;
  if (Elf* elf = elf_begin(fd, ELF_C_READ, nullptr)) {
    const void* p = nullptr;
    const ssize_t n = dwelf_elf_gnu_build_id(elf, &p);
    if (n > 0) id.assign(static_cast<const unsigned char*>(p), static_cast<const unsigned char*>(p) + n);
    elf_end(elf);
  }
  close(fd);
  return id;
}

void check_same_sections(const std::vector<std::pair<std::string, std::string>>& have,
                         const std::vector<std::pair<std::string, std::string>>& want) {
  REQUIRE(have.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    INFO(want[i].first);
    CHECK(have[i].first == want[i].first);
    CHECK(have[i].second == want[i].second);
  }
}

bool maps_hold(const std::string& what) {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);)
    if (line.find(what) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST_CASE("debug cache: with none, a compressed debug file is read through a copy in memory; made whole, byte for byte",
          "[debug_cache]") {
  const std::string file = library_debug_file();
  const std::vector<unsigned char> id = build_id_of(file);
  REQUIRE_FALSE(id.empty());
  memtrace::unwind::set_debug_cache_dir("");
  memtrace::unwind::take_debug_cache_warnings();
  const int fd = open(file.c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  const int want_fd = open(file.c_str(), O_RDONLY | O_CLOEXEC);
  const auto want = inflated_sections(want_fd);
  close(want_fd);
  char* path = strdup(file.c_str());
  const int got = memtrace::unwind::detail::debug_file_or_copy(fd, file.c_str(), id.data(), static_cast<int>(id.size()), &path);
  REQUIRE(got >= 0);
  CHECK(got != fd);
  CHECK(std::string(path) == file);  // libdwfl still names the distribution's file
  std::free(path);
  char link[64];
  std::snprintf(link, sizeof link, "/proc/self/fd/%d", got);
  char target[256] = {};
  REQUIRE(readlink(link, target, sizeof target - 1) > 0);
  CHECK(std::string(target).find("memfd:memtrace-debug") != std::string::npos);  // "/memfd:... (deleted)"
  CHECK_FALSE(sections_of(link).first);

  // A symbolizer maps it, answering as it does from the file or the cache; this library's
  // one unit is more than half its DWARF, so answering makes the copy whole.
  const uintptr_t pc = address_in_gz_library();
  REQUIRE(pc != 0);
  Symbolizer sym;
  const auto& f = sym.frames(pc);
  REQUIRE(f.size() == 1);
  CHECK(f[0].function == "symtest_gz_call");
  CHECK(f[0].line == symtest_gz_line());
  CHECK(maps_hold("memfd:memtrace-debug"));
  const auto copy = memtrace::unwind::detail::PartialCopy::find(id.data(), static_cast<int>(id.size()), file);
  REQUIRE(copy != nullptr);
  CHECK(copy->whole());
  const auto have = inflated_sections(got);
  close(got);
  check_same_sections(have, want);
  CHECK(memtrace::unwind::take_debug_cache_warnings().empty());
}

namespace {

// A copy of the test library's debug file at `to` with the middle of section's compressed
// payload zeroed: it no longer inflates to its size.
void write_damaged(const std::string& file, const std::string& to, const std::string& section) {
  std::ifstream in(file, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  elf_version(EV_CURRENT);
  const int fd = open(file.c_str(), O_RDONLY);
  Elf* elf = elf_begin(fd, ELF_C_READ, nullptr);
  size_t names = 0;
  elf_getshdrstrndx(elf, &names);
  bool found = false;
  for (Elf_Scn* s = elf_nextscn(elf, nullptr); s != nullptr; s = elf_nextscn(elf, s)) {
    GElf_Shdr sh;
    gelf_getshdr(s, &sh);
    if (std::string(elf_strptr(elf, names, sh.sh_name)) != section) continue;
    REQUIRE((sh.sh_flags & SHF_COMPRESSED) != 0);
    REQUIRE(sh.sh_size > 64);
    for (size_t i = sh.sh_size / 2; i < sh.sh_size / 2 + 16; ++i) bytes[sh.sh_offset + i] = '\0';
    found = true;
  }
  elf_end(elf);
  close(fd);
  REQUIRE(found);
  std::ofstream(to, std::ios::binary) << bytes;
}

}  // namespace

TEST_CASE("debug cache: a compressed section that does not inflate costs one warning; the file is read as it is",
          "[debug_cache]") {
  const std::string file = library_debug_file();
  const std::vector<unsigned char> id = build_id_of(file);
  TempDir dir;
  const std::string bad = dir.path + "/broken.debug";
  write_damaged(file, bad, ".debug_str");  // inflated when any copy is made
  memtrace::unwind::set_debug_cache_dir("");
  memtrace::unwind::take_debug_cache_warnings();
  const int fd = open(bad.c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  char* path = strdup(bad.c_str());
  CHECK(memtrace::unwind::detail::debug_file_or_copy(fd, bad.c_str(), id.data(), static_cast<int>(id.size()), &path) == fd);
  std::free(path);
  close(fd);
  const auto warned = memtrace::unwind::take_debug_cache_warnings();
  REQUIRE(warned.size() == 1);
  CHECK(warned[0].find(bad) != std::string::npos);
  CHECK(warned[0].find("read as it is") != std::string::npos);
}

namespace {

std::string big_library_debug_file() {
  Dl_info info{};
  dladdr(reinterpret_cast<void*>(&symtest_gz_first), &info);
  return std::string(info.dli_fname) + ".debug";
}

// A return address into libunwind_symtest_gz_big.so from call's callback.
uintptr_t address_in_big_library(int (*call)(symtest::Callback, void*)) {
  Symbolizer sym;
  for (uintptr_t pc : unwind_test::capture_via(call))
    if (unwind_test::base_name(sym.module_of(pc - 1)) == "libunwind_symtest_gz_big.so") return pc;
  return 0;
}

// pc as an address in the library file's own terms (its DWARF's).
uint64_t file_address(uintptr_t pc) {
  Dl_info info{};
  dladdr(reinterpret_cast<void*>(pc), &info);
  return pc - reinterpret_cast<uintptr_t>(info.dli_fbase);
}

void check_one_frame(Symbolizer& sym, uintptr_t pc, const char* function, int line) {
  const auto& f = sym.frames(pc);
  REQUIRE(f.size() == 1);
  CHECK(f[0].function == function);
  CHECK(f[0].line == line);
}

}  // namespace

TEST_CASE("debug cache: a partial copy inflates as far as the units asked; past half, it is whole and kept",
          "[debug_cache]") {
  const std::string file = big_library_debug_file();
  const std::vector<unsigned char> id = build_id_of(file);
  REQUIRE(sections_of(file).first);
  const uintptr_t first = address_in_big_library(symtest_gz_first);
  const uintptr_t last = address_in_big_library(symtest_gz_last);
  REQUIRE(first != 0);
  REQUIRE(last != 0);
  TempDir dir;
  memtrace::unwind::set_debug_cache_dir(dir.path);
  memtrace::unwind::take_debug_cache_warnings();
  {
    Symbolizer sym;
    check_one_frame(sym, first, "symtest_gz_first", symtest_gz_first_line());
  }
  const auto copy = memtrace::unwind::detail::PartialCopy::find(id.data(), static_cast<int>(id.size()), file);
  REQUIRE(copy != nullptr);
  CHECK_FALSE(copy->whole());
  INFO("inflated " << copy->inflated_bytes() << " of " << copy->lazy_bytes());
  CHECK(copy->inflated_bytes() < copy->lazy_bytes() / 2);
  CHECK(files_in(dir.path).empty());  // nothing kept: the next program pays as little

  // The unit at the end: the rest is inflated, and the whole copy kept for the next program.
  {
    Symbolizer sym;
    check_one_frame(sym, last, "symtest_gz_last", symtest_gz_last_line());
    check_one_frame(sym, first, "symtest_gz_first", symtest_gz_first_line());
  }
  CHECK(copy->whole());
  CHECK(copy->inflated_bytes() == copy->lazy_bytes());
  const auto made = files_in(dir.path);
  REQUIRE(made.size() == 1);
  const int want_fd = open(file.c_str(), O_RDONLY | O_CLOEXEC);
  const int have_fd = open(made[0].c_str(), O_RDONLY | O_CLOEXEC);
  const auto want = inflated_sections(want_fd);
  const auto have = inflated_sections(have_fd);
  close(want_fd);
  close(have_fd);
  check_same_sections(have, want);
  CHECK(memtrace::unwind::take_debug_cache_warnings().empty());
  {
    Symbolizer sym;  // the kept copy now
    check_one_frame(sym, last, "symtest_gz_last", symtest_gz_last_line());
  }
}

TEST_CASE("debug cache: a unit whose bytes do not inflate costs one warning; the units before it still answer",
          "[debug_cache]") {
  const std::string file = big_library_debug_file();
  const std::vector<unsigned char> id = build_id_of(file);
  TempDir dir;
  const std::string bad = dir.path + "/broken-big.debug";
  write_damaged(file, bad, ".debug_info");
  memtrace::unwind::set_debug_cache_dir("");
  memtrace::unwind::take_debug_cache_warnings();
  const int fd = open(bad.c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  char* path = strdup(bad.c_str());
  const int got = memtrace::unwind::detail::debug_file_or_copy(fd, bad.c_str(), id.data(), static_cast<int>(id.size()), &path);
  std::free(path);
  CHECK(got != fd);  // .debug_info is inflated only when a unit is asked: nothing failed yet
  CHECK(memtrace::unwind::take_debug_cache_warnings().empty());
  const auto copy = memtrace::unwind::detail::PartialCopy::find(id.data(), static_cast<int>(id.size()), bad);
  REQUIRE(copy != nullptr);
  uint64_t first_unit = 0, last_unit = 0;
  REQUIRE(copy->unit_of(file_address(address_in_big_library(symtest_gz_first)) - 1, &first_unit));
  REQUIRE(copy->unit_of(file_address(address_in_big_library(symtest_gz_last)) - 1, &last_unit));
  REQUIRE(first_unit < last_unit);
  CHECK(copy->prepare_unit(first_unit));  // before the damage
  CHECK_FALSE(copy->prepare_unit(last_unit));
  CHECK_FALSE(copy->prepare_unit(last_unit));
  const auto warned = memtrace::unwind::take_debug_cache_warnings();
  REQUIRE(warned.size() == 1);
  CHECK(warned[0].find(bad) != std::string::npos);
  CHECK(warned[0].find(".debug_info") != std::string::npos);
  close(got);
}

TEST_CASE("debug cache: a forked child starts with no partial copies and makes its own", "[debug_cache]") {
  const std::string file = big_library_debug_file();
  const std::vector<unsigned char> id = build_id_of(file);
  const uintptr_t first = address_in_big_library(symtest_gz_first);
  REQUIRE(first != 0);
  memtrace::unwind::set_debug_cache_dir("");
  {
    Symbolizer sym;
    check_one_frame(sym, first, "symtest_gz_first", symtest_gz_first_line());
  }
  using memtrace::unwind::detail::PartialCopy;
  REQUIRE(PartialCopy::find(id.data(), static_cast<int>(id.size()), file) != nullptr);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    // The parent's copy (whose locks another thread may have held at the fork) is not used here.
    int bad = PartialCopy::find(id.data(), static_cast<int>(id.size()), file) != nullptr ? 1 : 0;
    Symbolizer sym;
    const auto& f = sym.frames(first);
    if (f.size() != 1 || f[0].function != "symtest_gz_first" || f[0].line != symtest_gz_first_line()) bad |= 2;
    if (PartialCopy::find(id.data(), static_cast<int>(id.size()), file) == nullptr) bad |= 4;
    _exit(bad);
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("debug cache: prepare()'s threads read a partial copy that the routing thread inflates", "[debug_cache]") {
  using memtrace::unwind::detail::PartialCopy;
  const uintptr_t first = address_in_big_library(symtest_gz_first);
  const uintptr_t last = address_in_big_library(symtest_gz_last);
  const uintptr_t gz = address_in_gz_library();
  REQUIRE(first != 0);
  REQUIRE(last != 0);
  REQUIRE(gz != 0);
  memtrace::unwind::set_debug_cache_dir("");
  memtrace::unwind::take_debug_cache_warnings();
  PartialCopy::forget_all();  // both libraries' copies made anew, by this prepare()
  std::vector<uintptr_t> addresses = {first, gz, last};
  for (uintptr_t pc : unwind_test::capture_via(symtest_gz_last)) addresses.push_back(pc);
  for (uintptr_t pc : unwind_test::capture_via(symtest_gz_first)) addresses.push_back(pc);
  Symbolizer sym;
  sym.prepare(addresses, 4);
  check_one_frame(sym, first, "symtest_gz_first", symtest_gz_first_line());
  check_one_frame(sym, last, "symtest_gz_last", symtest_gz_last_line());
  check_one_frame(sym, gz, "symtest_gz_call", symtest_gz_line());
  // And each address as a symbolizer of its own answers it, one at a time.
  Symbolizer alone;
  for (uintptr_t pc : addresses) {
    const auto& a = sym.frames(pc);
    const auto& b = alone.frames(pc);
    REQUIRE(a.size() == b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      CHECK(a[i].function == b[i].function);
      CHECK(a[i].file == b[i].file);
      CHECK(a[i].line == b[i].line);
    }
  }
  CHECK(memtrace::unwind::take_debug_cache_warnings().empty());
}
