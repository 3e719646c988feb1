// The Symbolizer dumps share: kept while the same objects are loaded at the same addresses,
// replaced when something is loaded or unloaded, or when the recorded history differs.
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <string_view>
#include <catch2/catch.hpp>
#include <thread>

#include "unwind/symbolizer_reuse.hpp"
#include "unwind/tests/test_util.hpp"

using memtrace::unwind::LoadedObject;
using memtrace::unwind::SymbolizerReuse;
using unwind_test::base_name;

namespace {
[[gnu::noipa]] int reuse_probe(int x) { return x * 3 + 1; }
}  // namespace

TEST_CASE("symbolizer reuse: kept while nothing is loaded or unloaded", "[symbolizer][reuse]") {
  SymbolizerReuse reuse;
  const std::vector<LoadedObject> none;
  const uintptr_t ret = reinterpret_cast<uintptr_t>(&reuse_probe) + 1;
  const memtrace::unwind::Symbolizer* first = nullptr;
  const memtrace::unwind::SymFrame* first_frames = nullptr;
  {
    auto lease = reuse.acquire(none);
    CHECK_FALSE(lease.reused());
    first = &lease.symbolizer();
    const auto f = lease.symbolizer().frames(ret);
    REQUIRE(!f.empty());
    CHECK(f.back().function.find("reuse_probe") != std::string_view::npos);
    first_frames = f.data();
  }
  {
    auto lease = reuse.acquire(none);
    CHECK(lease.reused());
    CHECK(&lease.symbolizer() == first);
    CHECK(lease.symbolizer().frames(ret).data() == first_frames);  // remembered, not redone
  }
  // Another history of unloaded objects: what add_unloaded_modules was given no longer holds.
  std::vector<LoadedObject> other(1);
  other[0].path = "/nonexistent/libgone.so";
  other[0].start = 0x100000;
  other[0].end = 0x200000;
  other[0].bias = 0x100000;
  {
    auto lease = reuse.acquire(other);
    CHECK_FALSE(lease.reused());
  }
  {
    auto lease = reuse.acquire(other);
    CHECK(lease.reused());
  }
}

TEST_CASE("symbolizer reuse: a fresh one after dlopen and after dlclose", "[symbolizer][reuse]") {
  SymbolizerReuse reuse;
  const std::vector<LoadedObject> none;
  { auto lease = reuse.acquire(none); }
  void* h = dlopen(UNWIND_SYMTEST_DL_PATH, RTLD_NOW | RTLD_LOCAL);
  REQUIRE(h != nullptr);
  auto fn = reinterpret_cast<int (*)(int)>(dlsym(h, "symtest_dl_fn"));
  REQUIRE(fn != nullptr);
  const uintptr_t ret = reinterpret_cast<uintptr_t>(fn) + 1;
  {
    auto lease = reuse.acquire(none);
    CHECK_FALSE(lease.reused());
    CHECK(base_name(lease.symbolizer().module_of(ret)) == "libunwind_symtest_dl.so");
    CHECK(lease.symbolizer().frames(ret)[0].function == "symtest_dl_fn");
  }
  {
    auto lease = reuse.acquire(none);
    CHECK(lease.reused());
  }
  dlclose(h);
  {
    auto lease = reuse.acquire(none);
    CHECK_FALSE(lease.reused());
    // The library is gone, and the fresh Symbolizer does not place the address in it.
    CHECK(base_name(lease.symbolizer().module_of(ret)) != "libunwind_symtest_dl.so");
  }
}

TEST_CASE("symbolizer reuse: one lease at a time", "[symbolizer][reuse]") {
  SymbolizerReuse reuse;
  const std::vector<LoadedObject> none;
  std::atomic<bool> second_has_it{false}, second_reused{false};
  std::thread other;
  {
    auto lease = reuse.acquire(none);
    other = std::thread([&] {
      auto l = reuse.acquire(none);
      second_reused = l.reused();  // (Catch's checks are the main thread's)
      second_has_it = true;
    });
    // Whatever the other thread does meanwhile, it cannot hold a lease while this one lives.
    for (int i = 0; i < 1000; ++i) {
      CHECK_FALSE(second_has_it.load());
      std::this_thread::yield();
    }
  }
  other.join();
  CHECK(second_has_it.load());
  CHECK(second_reused.load());
}

// A kept Symbolizer holds the files it read open between dumps: none may leak into a program the
// profiled one executes.
TEST_CASE("symbolizer reuse: the files it holds are close-on-exec", "[symbolizer][reuse]") {
  SymbolizerReuse reuse;
  auto lease = reuse.acquire({});
  // Something in libc (its DWARF too, where its debug file is installed) and in this program.
  uintptr_t libc_fn = reinterpret_cast<uintptr_t>(&fcntl);
  uintptr_t own_fn = reinterpret_cast<uintptr_t>(&reuse_probe);
  REQUIRE(!lease.symbolizer().frames(libc_fn + 1).empty());
  REQUIRE(!lease.symbolizer().frames(own_fn + 1).empty());
  size_t files = 0;
  DIR* d = opendir("/proc/self/fd");
  REQUIRE(d != nullptr);
  while (dirent* e = readdir(d)) {
    const int fd = std::atoi(e->d_name);
    if (e->d_name[0] == '.' || fd == dirfd(d)) continue;
    char target[4096];
    const ssize_t n = readlink((std::string("/proc/self/fd/") + e->d_name).c_str(), target, sizeof target - 1);
    if (n <= 0) continue;
    target[n] = '\0';
    const std::string_view t(target);
    // The object files it opened: libc, the program, debug files.
    if (t.find(".so") == std::string_view::npos && !t.ends_with(".debug") && !t.ends_with("unwind_tests")) continue;
    INFO("fd " << fd << " -> " << t);
    ++files;
    CHECK((fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0);
  }
  closedir(d);
  CHECK(files >= 2);
}
