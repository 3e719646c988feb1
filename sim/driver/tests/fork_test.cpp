// fork(): as with the real driver, a child forked after its parent called cuInit cannot use
// the driver (CUDA_ERROR_NOT_INITIALIZED from every call that needs it, cuInit included), while
// a child of a process that never initialised the driver uses it normally. Above all the child
// never hangs, whatever another thread of the parent was doing inside the driver at the fork.
//
// Registered as its own ctest entry (sim_driver_fork_tests, tag [fork]): a child that hangs is
// only declared hung after a generous wait, longer than the main entry's whole budget.
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "../../common/testing/fork_reaper.h"
#include "helpers.h"

using namespace simtest;

namespace {

using fork_reaper::Clock;
using fork_reaper::Reaper;

// What a child of an initialised parent sees; 0, or one bit per call that answered otherwise.
int forked_after_init_checks(CUdeviceptr parent_ptr) {
  int bad = 0;
  CUdeviceptr p = 0;
  if (cuMemAlloc_v2(&p, 4096) != CUDA_ERROR_NOT_INITIALIZED) bad |= 0x01;
  CUcontext c = nullptr;
  if (cuCtxGetCurrent(&c) != CUDA_ERROR_NOT_INITIALIZED) bad |= 0x02;
  if (cuInit(0) != CUDA_ERROR_NOT_INITIALIZED) bad |= 0x04;  // the child cannot start over either
  if (cuMemAlloc_v2(&p, 4096) != CUDA_ERROR_NOT_INITIALIZED) bad |= 0x08;
  if (cuMemFree_v2(parent_ptr) != CUDA_ERROR_NOT_INITIALIZED) bad |= 0x10;
  int count = -1;
  size_t free_b = 0, total_b = 0;
  if (cuDeviceGetCount(&count) != CUDA_ERROR_NOT_INITIALIZED ||
      cuMemGetInfo_v2(&free_b, &total_b) != CUDA_ERROR_NOT_INITIALIZED ||
      cuStreamSynchronize(nullptr) != CUDA_ERROR_NOT_INITIALIZED) {
    bad |= 0x20;
  }
  // What needs no initialisation keeps working.
  int version = 0;
  const char* name = nullptr;
  if (cuDriverGetVersion(&version) != CUDA_SUCCESS || version != 13000 ||
      cuGetErrorName(CUDA_ERROR_NOT_INITIALIZED, &name) != CUDA_SUCCESS || name == nullptr ||
      std::strcmp(name, "CUDA_ERROR_NOT_INITIALIZED") != 0) {
    bad |= 0x40;
  }
  void* fn = nullptr;
  if (cuGetProcAddress("cuMemAlloc", &fn, 3020, 0, nullptr) != CUDA_SUCCESS ||
      fn != reinterpret_cast<void*>(&cuMemAlloc_v2)) {
    bad |= 0x80;
  }
  return bad;
}

// A normal life on the simulated device, for a child of a process that never called cuInit.
int fresh_child_checks() {
  int bad = 0;
  if (cuInit(0) != CUDA_SUCCESS) return 0x01;
  int count = -1;
  if (cuDeviceGetCount(&count) != CUDA_SUCCESS || count != 1) bad |= 0x02;
  CUcontext ctx = nullptr;
  if (cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS) return bad | 0x04;
  CUdeviceptr p = 0;
  constexpr size_t n = 3 << 20;
  if (cuMemAlloc_v2(&p, n) != CUDA_SUCCESS) return bad | 0x08;
  if (cuMemsetD8_v2(p, 0x5a, n) != CUDA_SUCCESS) bad |= 0x10;
  unsigned char back[64] = {};
  if (cuMemcpyDtoH_v2(back, p + n - sizeof back, sizeof back) != CUDA_SUCCESS || back[0] != 0x5a ||
      back[sizeof back - 1] != 0x5a) {
    bad |= 0x20;
  }
  size_t free_b = 0, total_b = 0;
  if (cuMemGetInfo_v2(&free_b, &total_b) != CUDA_SUCCESS || total_b - free_b < n) bad |= 0x40;
  if (cuMemFree_v2(p) != CUDA_SUCCESS || cuDevicePrimaryCtxRelease_v2(0) != CUDA_SUCCESS) bad |= 0x80;
  return bad;
}

void expect_child_process_passes(const std::string& name) {
  ChildResult r = run_child(name, {});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
}

}  // namespace

TEST_CASE("a child forked while another thread allocates gets CUDA_ERROR_NOT_INITIALIZED and never hangs", "[fork]") {
  CUcontext ctx = use_primary(0);
  CUdeviceptr parent_ptr = 0;
  CU_OK(cuMemAlloc_v2(&parent_ptr, 1 << 20));
  const size_t free_before = free_bytes();

  // No Catch2 assertion on the worker thread: it counts, the main thread checks.
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> rounds{0};
  std::atomic<int> worker_failures{0};
  std::thread hammer([&] {
    if (cuCtxSetCurrent(ctx) != CUDA_SUCCESS) ++worker_failures;
    CUstream s = nullptr;
    if (cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) ++worker_failures;
    while (!stop.load(std::memory_order_relaxed)) {
      CUdeviceptr a = 0, b = 0;
      if (cuMemAlloc_v2(&a, 4096) != CUDA_SUCCESS || cuMemAlloc_v2(&b, 3 << 20) != CUDA_SUCCESS) ++worker_failures;
      if (a != 0 && cuMemFree_v2(a) != CUDA_SUCCESS) ++worker_failures;
      if (b != 0 && cuMemFree_v2(b) != CUDA_SUCCESS) ++worker_failures;
      // Stream-ordered work too, so the fork also lands in pool, stream and event locks.
      CUdeviceptr c = 0;
      if (cuMemAllocAsync(&c, 8192, s) != CUDA_SUCCESS || cuMemFreeAsync(c, s) != CUDA_SUCCESS ||
          cuStreamSynchronize(s) != CUDA_SUCCESS) {
        ++worker_failures;
      }
      rounds.fetch_add(1, std::memory_order_relaxed);
    }
    if (s != nullptr && cuStreamDestroy(s) != CUDA_SUCCESS) ++worker_failures;
  });

  // The forks must overlap the loop: wait (boundedly) until it is running.
  const auto started = Clock::now();
  while (rounds.load() == 0 && Clock::now() - started < std::chrono::seconds(30)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const bool hammer_ran = rounds.load() > 0;

  constexpr int kForks = 200;
  Reaper reaper;
  int fork_failures =
      hammer_ran ? fork_reaper::fork_children(reaper, kForks, [&] { return forked_after_init_checks(parent_ptr); }) : 0;
  const uint64_t rounds_during_forks = rounds.load();
  stop = true;
  hammer.join();
  reaper.finish();

  REQUIRE(hammer_ran);
  CHECK(fork_failures == 0);
  INFO("children: " << reaper.describe() << "allocation rounds during the forks: " << rounds_during_forks);
  CHECK(reaper.hung() == 0);
  CHECK(reaper.passed() == kForks);
  CHECK(worker_failures.load() == 0);
  // The parent is unaffected.
  CU_OK(cuCtxSetCurrent(ctx));
  CU_OK(cuCtxSynchronize());
  CHECK(free_bytes() == free_before);
  CU_OK(cuMemFree_v2(parent_ptr));
}

// Runs in a fresh process (run_child): the driver has never been initialised here.
TEST_CASE("child_fork_before_init", "[.child]") {
  // The calls allowed before cuInit, from another thread while the forks happen.
  std::atomic<bool> stop{false};
  std::atomic<int> worker_failures{0};
  std::thread prober([&] {
    while (!stop.load(std::memory_order_relaxed)) {
      void* fn = nullptr;
      int version = 0;
      if (cuGetProcAddress("cuMemAlloc", &fn, 3020, 0, nullptr) != CUDA_SUCCESS ||
          cuDriverGetVersion(&version) != CUDA_SUCCESS) {
        ++worker_failures;
      }
      int count = 0;
      if (cuDeviceGetCount(&count) != CUDA_ERROR_NOT_INITIALIZED) ++worker_failures;
    }
  });
  constexpr int kForks = 50;
  Reaper reaper;
  int fork_failures = fork_reaper::fork_children(reaper, kForks, [] { return fresh_child_checks(); });
  stop = true;
  prober.join();
  reaper.finish();
  CHECK(fork_failures == 0);
  INFO("children of the uninitialised process: " << reaper.describe());
  CHECK(reaper.passed() == kForks);
  CHECK(worker_failures.load() == 0);

  // The children's use of the driver did not initialise this process's.
  int count = -1;
  CHECK(cuDeviceGetCount(&count) == CUDA_ERROR_NOT_INITIALIZED);
  // Once this process initialises, its children (and theirs) are locked out.
  REQUIRE(fresh_child_checks() == 0);
  CUcontext ctx = nullptr;
  REQUIRE(cuDevicePrimaryCtxRetain(&ctx, 0) == CUDA_SUCCESS);
  REQUIRE(cuCtxSetCurrent(ctx) == CUDA_SUCCESS);
  CUdeviceptr p = 0;
  REQUIRE(cuMemAlloc_v2(&p, 1 << 20) == CUDA_SUCCESS);
  Reaper after;
  pid_t pid = fork();
  if (pid == 0) {
    int bad = forked_after_init_checks(p);
    pid_t grandchild = fork();
    if (grandchild == 0) _exit(forked_after_init_checks(p));
    int status = 0;
    if (grandchild < 0 || waitpid(grandchild, &status, 0) != grandchild || !WIFEXITED(status) ||
        WEXITSTATUS(status) != 0) {
      bad |= 0x100;
    }
    _exit(bad == 0 ? 0 : (bad & 0x100 ? 99 : bad));
  }
  REQUIRE(pid > 0);
  after.add(pid);
  after.finish();
  INFO("child and grandchild of the initialised process: " << after.describe());
  CHECK(after.passed() == 1);
  CHECK(cuMemFree_v2(p) == CUDA_SUCCESS);
  CHECK(cuDevicePrimaryCtxRelease_v2(0) == CUDA_SUCCESS);
}

TEST_CASE("a child of a process that never called cuInit uses the driver normally", "[fork]") {
  expect_child_process_passes("child_fork_before_init");
}
