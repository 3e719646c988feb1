// Internals of the simulated libnccl.so.2.
//
// Like the real library, it carries its own private copy of the CUDA runtime's driver-resolution stage
// (simcuda_resolve, linked statically with hidden symbols) and makes every driver call through typed
// pointers obtained from that copy's master resolver, the way NCCL's pfn_cuMemCreate & co. are filled by
// cudaGetDriverEntryPointByVersion. It exports no cuda* symbol and links neither libcudart nor libcuda.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>
#include <nccl.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "simcuda/resolve.h"

// Every public ncclX is a weak symbol aliasing the strong pncclX (NCCL's PMPI-style profiling interface:
// a tool defines ncclX and forwards to pncclX).
#define NCCL_API(ret, name, ...)                                                                       \
  extern "C" __attribute__((visibility("default"), weak, alias("p" #name))) ret name(__VA_ARGS__);   \
  extern "C" __attribute__((visibility("default"))) ret p##name(__VA_ARGS__)

namespace simnccl SIMCUDA_HIDDEN {

// ---- driver.cpp: NCCL's pfn_ table ----------------------------------------------------------
#define SIMNCCL_DRIVER_FUNCTIONS(X)                                         \
  X(cuDeviceGet, 2000, PFN_cuDeviceGet_v2000)                               \
  X(cuDeviceGetCount, 2000, PFN_cuDeviceGetCount_v2000)                     \
  X(cuDeviceGetAttribute, 2000, PFN_cuDeviceGetAttribute_v2000)             \
  X(cuDevicePrimaryCtxRetain, 7000, PFN_cuDevicePrimaryCtxRetain_v7000)     \
  X(cuDevicePrimaryCtxRelease, 11000, PFN_cuDevicePrimaryCtxRelease_v11000) \
  X(cuCtxGetCurrent, 4000, PFN_cuCtxGetCurrent_v4000)                       \
  X(cuCtxSetCurrent, 4000, PFN_cuCtxSetCurrent_v4000)                       \
  X(cuCtxGetDevice, 2000, PFN_cuCtxGetDevice_v2000)                         \
  X(cuMemAlloc, 3020, PFN_cuMemAlloc_v3020)                                 \
  X(cuMemFree, 3020, PFN_cuMemFree_v3020)                                   \
  X(cuMemGetAddressRange, 3020, PFN_cuMemGetAddressRange_v3020)             \
  X(cuPointerGetAttribute, 4000, PFN_cuPointerGetAttribute_v4000)           \
  X(cuMemcpyDtoH, 3020, PFN_cuMemcpyDtoH_v3020)                             \
  X(cuMemcpyHtoD, 3020, PFN_cuMemcpyHtoD_v3020)                             \
  X(cuStreamSynchronize, 2000, PFN_cuStreamSynchronize_v2000)               \
  X(cuMemAddressReserve, 10020, PFN_cuMemAddressReserve_v10020)             \
  X(cuMemAddressFree, 10020, PFN_cuMemAddressFree_v10020)                   \
  X(cuMemCreate, 10020, PFN_cuMemCreate_v10020)                             \
  X(cuMemMap, 10020, PFN_cuMemMap_v10020)                                   \
  X(cuMemSetAccess, 10020, PFN_cuMemSetAccess_v10020)                       \
  X(cuMemUnmap, 10020, PFN_cuMemUnmap_v10020)                               \
  X(cuMemRelease, 10020, PFN_cuMemRelease_v10020)                           \
  X(cuMemGetAllocationGranularity, 10020, PFN_cuMemGetAllocationGranularity_v10020) \
  X(cuMemRetainAllocationHandle, 11000, PFN_cuMemRetainAllocationHandle_v11000)

struct Pfn {
#define SIMNCCL_SLOT(name, version, type) type name;
  SIMNCCL_DRIVER_FUNCTIONS(SIMNCCL_SLOT)
#undef SIMNCCL_SLOT
};

// Loads the table once (runtime resolution stage first). ncclSuccess or ncclUnhandledCudaError.
ncclResult_t load_driver();
const Pfn& pfn();
int device_count();

// Makes ctx current for a scope and puts the caller's context back afterwards.
class ScopedContext {
 public:
  explicit ScopedContext(CUcontext ctx);
  ~ScopedContext();
  ScopedContext(const ScopedContext&) = delete;
  ScopedContext& operator=(const ScopedContext&) = delete;

 private:
  CUcontext saved_ = nullptr;
  bool switched_ = false;
};

// The device the caller is working on: the current context's, or device 0 as a fresh runtime would pick.
ncclResult_t current_device(int* ordinal);
// The primary context of a device, retained (the caller owns one reference).
ncclResult_t retain_primary(int ordinal, CUcontext* ctx);
void release_primary(int ordinal);
// Makes sure some context is current, the way the static runtime's lazy init would.
ncclResult_t ensure_context(int* ordinal);

// ---- errors.cpp -----------------------------------------------------------------------------
// Records a message for ncclGetLastError and returns the result.
ncclResult_t fail(ncclResult_t r, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
ncclResult_t cu_fail(CUresult r, const char* what);
#define SIMNCCL_CU(call)                                      \
  do {                                                        \
    CUresult simnccl_r_ = (call);                             \
    if (simnccl_r_ != CUDA_SUCCESS) return ::simnccl::cu_fail(simnccl_r_, #call); \
  } while (0)

// ---- memory.cpp: device buffers -------------------------------------------------------------
// NCCL_CUMEM_ENABLE: unset or negative = auto (VMM when the driver offers it), 0 = off, positive = on.
bool cumem_enabled(int ordinal);

struct DeviceBuffer {
  CUdeviceptr ptr = 0;
  size_t size = 0;
  bool vmm = false;
};
// ncclCuMemAlloc / cudaMalloc, depending on cumem_enabled(); granularity MINIMUM for internal buffers,
// RECOMMENDED for ncclMemAlloc.
ncclResult_t buffer_alloc(int ordinal, size_t size, bool recommended_granularity, DeviceBuffer* out);
ncclResult_t buffer_free(const DeviceBuffer& b);

// ---- comm.cpp -------------------------------------------------------------------------------
struct Op;
struct Clique;

struct Registration {
  void* buffer;
  size_t size;
  CUdeviceptr base;
  size_t base_size;
};

}  // namespace simnccl

struct ncclWindow_vidmem {
  ncclComm* comm;
  void* buffer;
  size_t size;
  int flags;
};

struct ncclComm {
  static constexpr uint64_t kMagic = 0x53494d4e43434c31ull;  // "SIMNCCL1"
  uint64_t magic = kMagic;
  int rank = 0;
  int nranks = 1;
  int device = 0;
  CUcontext ctx = nullptr;  // the device's primary context, retained for the communicator's life
  std::shared_ptr<simnccl::Clique> clique;
  simnccl::DeviceBuffer channel;   // per-rank channel buffer (VMM unless NCCL_CUMEM_ENABLE=0)
  simnccl::DeviceBuffer work_fifo; // small linear buffer (cuMemAlloc_v2)
  std::mutex mutex;                // guards the registration sets and the flags below
  std::set<simnccl::Registration*> registrations;
  std::set<ncclWindow_vidmem*> windows;
  ncclResult_t async_error = ncclSuccess;
  bool finalized = false;
};

namespace simnccl SIMCUDA_HIDDEN {

bool valid_comm(const ncclComm* comm);

// ---- collectives.cpp ------------------------------------------------------------------------
enum class Collective { AllReduce, Broadcast, Reduce, AllGather, ReduceScatter };

struct Op {
  Collective kind;
  const void* send;
  void* recv;
  size_t count;
  ncclDataType_t type;
  ncclRedOp_t op;
  int root;
  ncclComm* comm;
  CUstream stream;
};

// The ranks created together share a clique; a collective runs once every rank has posted its part.
struct Clique {
  explicit Clique(int n) : nranks(n), pending(static_cast<size_t>(n)) {}
  int nranks;
  std::mutex mutex;
  std::vector<std::deque<Op>> pending;  // per rank, in posting order
};

// Runs now (outside a group) or at ncclGroupEnd.
ncclResult_t enqueue(const Op& op);
// A communicator leaving: drops its unmatched operations.
void clique_forget(ncclComm* comm);
// Group bookkeeping shared with communicator creation (ncclCommInitRank inside a group is deferred).
bool in_group();
void defer_to_group_end(std::function<ncclResult_t()> work);

}  // namespace simnccl
