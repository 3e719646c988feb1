// Tests of the simulated libcudart.so.13 against the simulated libcuda.so.1 (run with SIMCUDA_DEVICES=2).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cuda_runtime_api.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "../../common/testing/fork_reaper.h"
#include "../../common/testing/getproc_spy.h"

// Exported by the runtime but not declared by the toolkit headers unless per-thread streams are enabled.
extern "C" cudaError_t cudaMallocAsync_ptsz(void** devPtr, size_t size, cudaStream_t stream);
extern "C" cudaError_t cudaFreeAsync_ptsz(void* devPtr, cudaStream_t stream);
extern "C" void** __cudaRegisterFatBinary(void* fatCubin);
extern "C" void __cudaRegisterFunction(void** handle, const char* hostFun, char* deviceFun, const char* deviceName,
                                       int threadLimit, uint3* tid, uint3* bid, dim3* bDim, dim3* gDim, int* wSize);
extern "C" void __cudaUnregisterFatBinary(void** handle);

namespace {

std::string g_log_path;

void* libcuda() {
  static void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  return h;
}

bool has_lookup(const std::vector<getproc_spy::Lookup>& v, const char* name, int version, unsigned long long flags) {
  for (const auto& l : v)
    if (l.via_master && l.name == name && l.version == version && l.flags == flags) return true;
  return false;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TEST_CASE("the runtime resolves the driver the way the CUDA 13 runtime does") {
  REQUIRE(cudaFree(nullptr) == cudaSuccess);
  REQUIRE(libcuda() != nullptr);

  // The driver was found by dlsym("cuGetProcAddress_v2"), a call an LD_PRELOAD dlsym sees.
  {
    std::lock_guard<std::mutex> lock(getproc_spy::state().mutex);
    const auto& names = getproc_spy::state().dlsym_names;
    CHECK(std::find(names.begin(), names.end(), "cuGetProcAddress_v2") != names.end());
  }

  auto lookups = getproc_spy::lookups();
  REQUIRE(lookups.size() > 50);
  // Through the first pointer: the probe, cuInit, and the two self-lookups, in that order.
  REQUIRE_FALSE(lookups[0].via_master);
  CHECK(lookups[0].name.empty());
  CHECK(lookups[0].version == 0);
  CHECK(lookups[0].flags == 0);
  CHECK(lookups[1].name == "cuInit");
  CHECK(lookups[1].version == 2000);
  CHECK(lookups[2].name == "cuGetProcAddress");
  CHECK(lookups[2].version == 11030);
  CHECK(lookups[3].name == "cuGetProcAddress");
  CHECK(lookups[3].version == 12000);
  // Everything after that goes through the master resolver.
  size_t first_pointer_lookups = 0;
  for (const auto& l : lookups)
    if (!l.via_master) ++first_pointer_lookups;
  CHECK(first_pointer_lookups == 4);
  CHECK(has_lookup(lookups, "cuMemAlloc", 3020, 0));
  CHECK(has_lookup(lookups, "cuMemFree", 3020, 0));
  CHECK(has_lookup(lookups, "cuMemHostRegister", 6050, 0));
  CHECK(has_lookup(lookups, "cuMemHostAlloc", 2020, 0));
  CHECK(has_lookup(lookups, "cuMemAllocAsync", 11020, 0));
  CHECK(has_lookup(lookups, "cuMemAllocAsync", 11020, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM));
  CHECK(has_lookup(lookups, "cuMemFreeAsync", 11020, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM));
  CHECK(has_lookup(lookups, "cuCtxCreate", 12050, 0));
  CHECK(has_lookup(lookups, "cuDriverGetVersion", 2020, 0));
  // No private export tables: the simulated runtime never asks for them.
  for (const auto& l : lookups) CHECK(l.name != "cuGetExportTable");

  // The _ptsz lookup got a different function from the driver than the legacy one.
  void* legacy = nullptr;
  void* per_thread = nullptr;
  for (const auto& l : lookups)
    if (l.via_master && l.name == "cuMemAllocAsync")
      (l.flags ? per_thread : legacy) = l.driver_result;
  CHECK(legacy == dlsym(libcuda(), "cuMemAllocAsync"));
  CHECK(per_thread == dlsym(libcuda(), "cuMemAllocAsync_ptsz"));

  // The driver's own call log, when it keeps one, shows the same lookups.
  std::string log = read_file(g_log_path);
  if (log.find("getproc ") != std::string::npos) {
    CHECK(log.find("getproc cuInit 2000 0") != std::string::npos);
    CHECK(log.find("getproc cuGetProcAddress 12000 0") != std::string::npos);
    CHECK(log.find("getproc cuMemAlloc 3020 0") != std::string::npos);
    CHECK(log.find("getproc cuMemAllocAsync 11020 2") != std::string::npos);
  } else {
    WARN("the simulated driver wrote no getproc lines to SIMCUDA_LOG; relying on the dlsym spy");
  }
}

// Child mode (see main): the toolkit's stub libcuda answers the "" probe with CUDA_ERROR_STUB_LIBRARY, the
// runtime falls back to plain dlsym lookups and reports cudaErrorStubLibrary.
int stub_driver_child() {
  int n = -1;
  if (cudaGetDeviceCount(&n) != cudaErrorStubLibrary || n != 0) return 10;
  if (cudaGetLastError() != cudaErrorStubLibrary) return 11;
  void* p = nullptr;
  if (cudaMalloc(&p, 16) != cudaErrorStubLibrary) return 12;
  auto lookups = getproc_spy::lookups();
  if (lookups.size() != 1 || !lookups[0].name.empty()) return 13;  // only the probe went through getproc
  std::lock_guard<std::mutex> lock(getproc_spy::state().mutex);
  const auto& names = getproc_spy::state().dlsym_names;
  for (const char* want : {"cuInit", "cuDriverGetVersion", "cuMemAlloc_v2", "cuMemAllocAsync_ptsz"})
    if (std::find(names.begin(), names.end(), want) == names.end()) return 14;
  return 0;
}

TEST_CASE("a stub driver library makes every call fail with cudaErrorStubLibrary") {
  const char* stub = "/usr/local/cuda/lib64/stubs/libcuda.so";
  if (access(stub, R_OK) != 0) {
    WARN("no toolkit stub library; skipped");
    return;
  }
  char dir_template[] = "/tmp/sim_runtime_stub.XXXXXX";
  const char* dir = mkdtemp(dir_template);
  REQUIRE(dir);
  std::string link = std::string(dir) + "/libcuda.so.1";
  REQUIRE(symlink(stub, link.c_str()) == 0);
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    // LD_LIBRARY_PATH is searched before the runtime's RUNPATH, so the stub wins over the simulated driver.
    setenv("LD_LIBRARY_PATH", dir, 1);
    setenv("SIM_RUNTIME_TESTS_CHILD", "stub", 1);
    execl("/proc/self/exe", "sim_runtime_tests", static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  unlink(link.c_str());
  rmdir(dir);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("versions") {
  int v = 0;
  REQUIRE(cudaRuntimeGetVersion(&v) == cudaSuccess);
  CHECK(v == 13000);
  REQUIRE(cudaDriverGetVersion(&v) == cudaSuccess);
  CHECK(v >= 13000);
}

TEST_CASE("cudaMalloc and cudaFree round-trip data") {
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  constexpr size_t n = 1 << 20;
  std::vector<unsigned char> host(n), back(n, 0);
  for (size_t i = 0; i < n; ++i) host[i] = static_cast<unsigned char>(i * 7 + 3);
  void* a = nullptr;
  void* b = nullptr;
  REQUIRE(cudaMalloc(&a, n) == cudaSuccess);
  REQUIRE(cudaMalloc(&b, n) == cudaSuccess);
  REQUIRE(a != nullptr);
  REQUIRE(a != b);
  REQUIRE(cudaMemcpy(a, host.data(), n, cudaMemcpyHostToDevice) == cudaSuccess);
  REQUIRE(cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice) == cudaSuccess);
  REQUIRE(cudaMemset(b, 0xab, 16) == cudaSuccess);
  REQUIRE(cudaMemcpy(back.data(), b, n, cudaMemcpyDeviceToHost) == cudaSuccess);
  for (size_t i = 0; i < 16; ++i) host[i] = 0xab;
  CHECK(back == host);
  // cudaMemcpyDefault works out the direction from the addresses.
  std::vector<unsigned char> again(n, 0);
  REQUIRE(cudaMemcpy(again.data(), b, n, cudaMemcpyDefault) == cudaSuccess);
  CHECK(again == host);
  std::vector<unsigned char> copy(n, 0);
  REQUIRE(cudaMemcpy(copy.data(), host.data(), n, cudaMemcpyHostToHost) == cudaSuccess);
  CHECK(copy == host);

  cudaPointerAttributes attr{};
  REQUIRE(cudaPointerGetAttributes(&attr, a) == cudaSuccess);
  CHECK(attr.type == cudaMemoryTypeDevice);
  CHECK(attr.device == 0);
  REQUIRE(cudaPointerGetAttributes(&attr, host.data()) == cudaSuccess);
  CHECK(attr.type == cudaMemoryTypeUnregistered);

  REQUIRE(cudaFree(a) == cudaSuccess);
  REQUIRE(cudaFree(b) == cudaSuccess);
  CHECK(cudaGetLastError() == cudaSuccess);
}

TEST_CASE("managed memory") {
  void* m = nullptr;
  REQUIRE(cudaMallocManaged(&m, 1 << 16, cudaMemAttachGlobal) == cudaSuccess);
  cudaPointerAttributes attr{};
  REQUIRE(cudaPointerGetAttributes(&attr, m) == cudaSuccess);
  CHECK(attr.type == cudaMemoryTypeManaged);
  REQUIRE(cudaMemset(m, 7, 1 << 16) == cudaSuccess);
  unsigned char c = 0;
  REQUIRE(cudaMemcpy(&c, m, 1, cudaMemcpyDefault) == cudaSuccess);
  CHECK(c == 7);
  REQUIRE(cudaFree(m) == cudaSuccess);
  CHECK(cudaMallocManaged(&m, 16, 0) == cudaErrorInvalidValue);
  cudaGetLastError();
}

TEST_CASE("pitched allocations") {
  void* p = nullptr;
  size_t pitch = 0;
  REQUIRE(cudaMallocPitch(&p, &pitch, 100, 10) == cudaSuccess);
  CHECK(pitch >= 100);
  std::vector<char> src(100 * 10, 5), dst(100 * 10, 0);
  REQUIRE(cudaMemcpy2D(p, pitch, src.data(), 100, 100, 10, cudaMemcpyHostToDevice) == cudaSuccess);
  REQUIRE(cudaMemcpy2D(dst.data(), 100, p, pitch, 100, 10, cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(dst == src);
  REQUIRE(cudaFree(p) == cudaSuccess);

  cudaPitchedPtr pp{};
  REQUIRE(cudaMalloc3D(&pp, cudaExtent{64, 4, 4}) == cudaSuccess);
  CHECK(pp.ptr != nullptr);
  CHECK(pp.pitch >= 64);
  CHECK(pp.xsize == 64);
  REQUIRE(cudaFree(pp.ptr) == cudaSuccess);
}

TEST_CASE("out of memory is cudaErrorMemoryAllocation and does not stick") {
  size_t free_bytes = 0, total = 0;
  REQUIRE(cudaMemGetInfo(&free_bytes, &total) == cudaSuccess);
  REQUIRE(total > 0);
  void* p = nullptr;
  CHECK(cudaMalloc(&p, total + (1u << 20)) == cudaErrorMemoryAllocation);
  CHECK(cudaPeekAtLastError() == cudaErrorMemoryAllocation);
  CHECK(cudaGetLastError() == cudaErrorMemoryAllocation);
  CHECK(cudaGetLastError() == cudaSuccess);
  CHECK(cudaPeekAtLastError() == cudaSuccess);
  REQUIRE(cudaMalloc(&p, 4096) == cudaSuccess);
  REQUIRE(cudaFree(p) == cudaSuccess);
  CHECK(std::string(cudaGetErrorName(cudaErrorMemoryAllocation)) == "cudaErrorMemoryAllocation");
  CHECK(std::string(cudaGetErrorString(cudaErrorMemoryAllocation)) == "out of memory");
  CHECK(std::string(cudaGetErrorString(static_cast<cudaError_t>(12345))) == "unrecognized error code");
}

TEST_CASE("stream-ordered allocation, pools and the per-thread twins") {
  cudaStream_t s = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  void* p = nullptr;
  REQUIRE(cudaMallocAsync(&p, 1 << 16, s) == cudaSuccess);
  std::vector<int> in(1 << 14), out(1 << 14, 0);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<int>(i);
  REQUIRE(cudaMemcpyAsync(p, in.data(), 1 << 16, cudaMemcpyHostToDevice, s) == cudaSuccess);
  REQUIRE(cudaMemcpyAsync(out.data(), p, 1 << 16, cudaMemcpyDeviceToHost, s) == cudaSuccess);
  REQUIRE(cudaFreeAsync(p, s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  CHECK(out == in);

  void* q = nullptr;
  REQUIRE(cudaMallocAsync_ptsz(&q, 4096, nullptr) == cudaSuccess);
  REQUIRE(cudaFreeAsync_ptsz(q, nullptr) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(cudaStreamPerThread) == cudaSuccess);

  cudaMemPool_t pool = nullptr;
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  REQUIRE(cudaMemPoolCreate(&pool, &props) == cudaSuccess);
  void* r = nullptr;
  REQUIRE(cudaMallocFromPoolAsync(&r, 1 << 20, pool, s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  cuuint64_t used = 0;
  REQUIRE(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used) == cudaSuccess);
  CHECK(used >= (1u << 20));
  REQUIRE(cudaFreeAsync(r, s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  REQUIRE(cudaMemPoolTrimTo(pool, 0) == cudaSuccess);
  REQUIRE(cudaMemPoolDestroy(pool) == cudaSuccess);

  cudaMemPool_t def = nullptr, cur = nullptr;
  REQUIRE(cudaDeviceGetDefaultMemPool(&def, 0) == cudaSuccess);
  REQUIRE(cudaDeviceGetMemPool(&cur, 0) == cudaSuccess);
  CHECK(def == cur);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
}

TEST_CASE("pinned and registered host memory") {
  void* h = nullptr;
  REQUIRE(cudaMallocHost(&h, 8192) == cudaSuccess);
  std::memset(h, 1, 8192);
  cudaPointerAttributes attr{};
  REQUIRE(cudaPointerGetAttributes(&attr, h) == cudaSuccess);
  CHECK(attr.type == cudaMemoryTypeHost);
  REQUIRE(cudaFreeHost(h) == cudaSuccess);

  void* mapped = nullptr;
  REQUIRE(cudaHostAlloc(&mapped, 4096, cudaHostAllocMapped) == cudaSuccess);
  void* dev = nullptr;
  REQUIRE(cudaHostGetDevicePointer(&dev, mapped, 0) == cudaSuccess);
  CHECK(dev != nullptr);
  REQUIRE(cudaFreeHost(mapped) == cudaSuccess);

  std::vector<char> plain(1 << 16, 2);
  REQUIRE(cudaHostRegister(plain.data(), plain.size(), cudaHostRegisterDefault) == cudaSuccess);
  REQUIRE(cudaPointerGetAttributes(&attr, plain.data()) == cudaSuccess);
  CHECK(attr.type == cudaMemoryTypeHost);
  REQUIRE(cudaHostUnregister(plain.data()) == cudaSuccess);
  CHECK(cudaHostUnregister(plain.data()) != cudaSuccess);
  cudaGetLastError();
}

TEST_CASE("cudaGetDriverEntryPointByVersion answers through the master resolver") {
  REQUIRE(cudaFree(nullptr) == cudaSuccess);
  size_t before = getproc_spy::lookups().size();
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
  REQUIRE(cudaGetDriverEntryPointByVersion("cuMemAlloc", &fn, 3020, cudaEnableDefault, &status) == cudaSuccess);
  CHECK(status == cudaDriverEntryPointSuccess);
  CHECK(fn == dlsym(libcuda(), "cuMemAlloc_v2"));
  auto after = getproc_spy::lookups();
  REQUIRE(after.size() == before + 1);
  CHECK(after.back().via_master);
  CHECK(after.back().name == "cuMemAlloc");

  // The per-thread flag reaches the driver as such.
  REQUIRE(cudaGetDriverEntryPointByVersion("cuMemAllocAsync", &fn, 11020, cudaEnablePerThreadDefaultStream,
                                           &status) == cudaSuccess);
  CHECK(fn == dlsym(libcuda(), "cuMemAllocAsync_ptsz"));

  // An unknown symbol is an answer, not an error.
  REQUIRE(cudaGetDriverEntryPointByVersion("cuNoSuchFunction", &fn, 13000, cudaEnableDefault, &status) ==
          cudaSuccess);
  CHECK(fn == nullptr);
  CHECK(status == cudaDriverEntryPointSymbolNotFound);
  CHECK(cudaGetLastError() == cudaSuccess);
}

TEST_CASE("devices and primary contexts") {
  int n = 0;
  REQUIRE(cudaGetDeviceCount(&n) == cudaSuccess);
  REQUIRE(n == 2);
  CHECK(cudaSetDevice(n) == cudaErrorInvalidDevice);
  CHECK(cudaGetLastError() == cudaErrorInvalidDevice);
  REQUIRE(cudaSetDevice(1) == cudaSuccess);
  int d = -1;
  REQUIRE(cudaGetDevice(&d) == cudaSuccess);
  CHECK(d == 1);
  void* p = nullptr;
  REQUIRE(cudaMalloc(&p, 1024) == cudaSuccess);
  cudaPointerAttributes attr{};
  REQUIRE(cudaPointerGetAttributes(&attr, p) == cudaSuccess);
  CHECK(attr.device == 1);
  REQUIRE(cudaFree(p) == cudaSuccess);

  cudaDeviceProp prop{};
  REQUIRE(cudaGetDeviceProperties(&prop, 1) == cudaSuccess);
  CHECK(prop.name[0] != '\0');
  CHECK(prop.totalGlobalMem > 0);
  int value = 0;
  REQUIRE(cudaDeviceGetAttribute(&value, cudaDevAttrComputeCapabilityMajor, 1) == cudaSuccess);
  CHECK(value == prop.major);
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
}

TEST_CASE("cudaDeviceReset frees the device's memory") {
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  size_t free_before = 0, total = 0;
  REQUIRE(cudaMemGetInfo(&free_before, &total) == cudaSuccess);
  void* p = nullptr;
  REQUIRE(cudaMalloc(&p, 8 << 20) == cudaSuccess);
  size_t free_during = 0;
  REQUIRE(cudaMemGetInfo(&free_during, &total) == cudaSuccess);
  CHECK(free_during <= free_before - (8 << 20));
  REQUIRE(cudaDeviceReset() == cudaSuccess);
  size_t free_after = 0;
  REQUIRE(cudaMemGetInfo(&free_after, &total) == cudaSuccess);
  CHECK(free_after == free_before);
}

TEST_CASE("streams and events") {
  cudaStream_t s = nullptr;
  cudaEvent_t a = nullptr, b = nullptr;
  REQUIRE(cudaStreamCreate(&s) == cudaSuccess);
  REQUIRE(cudaEventCreate(&a) == cudaSuccess);
  REQUIRE(cudaEventCreateWithFlags(&b, cudaEventDefault) == cudaSuccess);
  void* p = nullptr;
  REQUIRE(cudaMalloc(&p, 1 << 20) == cudaSuccess);
  REQUIRE(cudaEventRecord(a, s) == cudaSuccess);
  REQUIRE(cudaMemsetAsync(p, 3, 1 << 20, s) == cudaSuccess);
  REQUIRE(cudaEventRecord(b, s) == cudaSuccess);
  REQUIRE(cudaStreamWaitEvent(nullptr, b, 0) == cudaSuccess);
  REQUIRE(cudaEventSynchronize(b) == cudaSuccess);
  CHECK(cudaEventQuery(b) == cudaSuccess);
  CHECK(cudaStreamQuery(s) == cudaSuccess);
  float ms = -1;
  REQUIRE(cudaEventElapsedTime(&ms, a, b) == cudaSuccess);
  CHECK(ms >= 0);
  unsigned char c = 0;
  REQUIRE(cudaMemcpy(&c, static_cast<char*>(p) + 12345, 1, cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(c == 3);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  REQUIRE(cudaFree(p) == cudaSuccess);
  REQUIRE(cudaEventDestroy(a) == cudaSuccess);
  REQUIRE(cudaEventDestroy(b) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
}

TEST_CASE("kernel launches fail the way real CUDA does without a kernel image") {
  static int fake_kernel_stub;  // stands in for a host stub address
  static char fake_fatbin[16];
  CHECK(cudaLaunchKernel(&fake_kernel_stub, dim3(1), dim3(1), nullptr, 0, nullptr) ==
        cudaErrorInvalidDeviceFunction);
  CHECK(cudaGetLastError() == cudaErrorInvalidDeviceFunction);
  void** module = __cudaRegisterFatBinary(fake_fatbin);
  __cudaRegisterFunction(module, reinterpret_cast<const char*>(&fake_kernel_stub), nullptr, "fake", -1, nullptr,
                         nullptr, nullptr, nullptr, nullptr);
  CHECK(cudaLaunchKernel(&fake_kernel_stub, dim3(1), dim3(1), nullptr, 0, nullptr) ==
        cudaErrorNoKernelImageForDevice);
  CHECK(cudaGetLastError() == cudaErrorNoKernelImageForDevice);
  __cudaUnregisterFatBinary(module);
  // Not a sticky error: the runtime keeps working.
  void* p = nullptr;
  REQUIRE(cudaMalloc(&p, 16) == cudaSuccess);
  REQUIRE(cudaFree(p) == cudaSuccess);
}

// fork() from a process whose runtime is busy on another thread: the child must come back with the real
// runtime's answer for a child of an initialised process, cudaErrorInitializationError, and never hang on a
// lock (the runtime's or the driver's) the other thread held at the fork. Its own ctest entry (tag [fork]):
// a hung child is only declared so after fork_reaper's generous limit.
TEST_CASE("a child forked while another thread uses the runtime gets cudaErrorInitializationError", "[fork]") {
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  void* parent_ptr = nullptr;
  REQUIRE(cudaMalloc(&parent_ptr, 1 << 20) == cudaSuccess);

  std::atomic<bool> stop{false};
  std::atomic<unsigned long> rounds{0};
  std::atomic<int> worker_failures{0};  // no Catch2 assertion on the worker thread
  std::thread hammer([&] {
    while (!stop.load(std::memory_order_relaxed)) {
      void* a = nullptr;
      void* b = nullptr;
      if (cudaSetDevice(0) != cudaSuccess) ++worker_failures;  // takes the runtime's primary-context lock
      if (cudaMalloc(&a, 4096) != cudaSuccess || cudaFree(a) != cudaSuccess) ++worker_failures;
      if (cudaMallocAsync(&b, 8192, nullptr) != cudaSuccess || cudaFreeAsync(b, nullptr) != cudaSuccess ||
          cudaStreamSynchronize(nullptr) != cudaSuccess) {
        ++worker_failures;
      }
      rounds.fetch_add(1, std::memory_order_relaxed);
    }
  });
  // Selecting a device is mostly the runtime's own lock, and module registration only the registry's: a
  // second thread doing nothing else.
  static int fork_kernel_stub;
  static char fork_fatbin[16];
  std::thread selector([&] {
    for (int i = 0; !stop.load(std::memory_order_relaxed); ++i) {
      if (cudaSetDevice(i % 2) != cudaSuccess) ++worker_failures;
      void** module = __cudaRegisterFatBinary(fork_fatbin);
      __cudaRegisterFunction(module, reinterpret_cast<const char*>(&fork_kernel_stub), nullptr, "fork", -1, nullptr,
                             nullptr, nullptr, nullptr, nullptr);
      __cudaUnregisterFatBinary(module);
    }
  });
  const auto started = fork_reaper::Clock::now();
  while (rounds.load() == 0 && fork_reaper::Clock::now() - started < std::chrono::seconds(30))
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const bool hammer_ran = rounds.load() > 0;

  constexpr int kForks = 100;
  fork_reaper::Reaper reaper;
  int fork_failures = hammer_ran ? fork_reaper::fork_children(reaper, kForks, [&] {
    int bad = 0;
    void* p = nullptr;
    if (cudaMalloc(&p, 4096) != cudaErrorInitializationError) bad |= 1;
    if (cudaSetDevice(0) != cudaErrorInitializationError) bad |= 2;
    if (cudaFree(parent_ptr) != cudaErrorInitializationError) bad |= 4;
    if (cudaDeviceSynchronize() != cudaErrorInitializationError) bad |= 8;
    int v = 0;
    if (cudaRuntimeGetVersion(&v) != cudaSuccess || v != 13000) bad |= 16;
    // The kernel registry stays usable (registration never needs the device); a launch does not.
    static int child_stub;
    void** module = __cudaRegisterFatBinary(fork_fatbin);
    __cudaRegisterFunction(module, reinterpret_cast<const char*>(&child_stub), nullptr, "child", -1, nullptr,
                           nullptr, nullptr, nullptr, nullptr);
    if (cudaLaunchKernel(&child_stub, dim3(1), dim3(1), nullptr, 0, nullptr) != cudaErrorInitializationError)
      bad |= 32;
    __cudaUnregisterFatBinary(module);
    return bad;
  }) : 0;
  stop = true;
  hammer.join();
  selector.join();
  reaper.finish();

  REQUIRE(hammer_ran);
  CHECK(fork_failures == 0);
  INFO("children: " << reaper.describe());
  CHECK(reaper.hung() == 0);
  CHECK(reaper.passed() == kForks);
  CHECK(worker_failures.load() == 0);
  CHECK(cudaFree(parent_ptr) == cudaSuccess);
  CHECK(cudaGetLastError() == cudaSuccess);
}

int main(int argc, char* argv[]) {
  if (const char* child = std::getenv("SIM_RUNTIME_TESTS_CHILD"); child && std::string(child) == "stub")
    return stub_driver_child();
  // Ask the driver for its call log before anything initialises it.
  bool own_log = false;
  if (const char* existing = std::getenv("SIMCUDA_LOG")) {
    g_log_path = existing;
  } else {
    own_log = true;
    g_log_path = "/tmp/sim_runtime_tests." + std::to_string(getpid()) + ".log";
    setenv("SIMCUDA_LOG", g_log_path.c_str(), 1);
  }
  int rc = Catch::Session().run(argc, argv);
  if (own_log) unlink(g_log_path.c_str());
  return rc;
}
