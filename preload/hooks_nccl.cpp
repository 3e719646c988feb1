// NCCL's public calls, wrapped for attribution only: the memory they obtain is counted at
// the driver (NCCL's static runtime reaches it through our cuGetProcAddress substitution);
// here each driver event inside the call is tagged with the NCCL call that caused it.
#include "preload/driver_decls.hpp"
#include "preload/hook_table.hpp"
#include "preload/record.hpp"

using namespace memtrace;
using namespace memtrace::preload;

namespace {

class NcclNote {
 public:
  explicit NcclNote(const char* what) : saved_(t_state.note) { t_state.note = what; }
  ~NcclNote() { t_state.note = saved_; }

 private:
  const char* saved_;
};

}  // namespace

extern "C" MEMTRACE_EXPORT ncclResult_t ncclMemAlloc(void** ptr, size_t size) {
  auto real = real_fn<Hook::ncclMemAlloc, decltype(&::ncclMemAlloc)>();
  if (!real) return ncclSystemError;
  NcclNote note("ncclMemAlloc");
  return real(ptr, size);
}

extern "C" MEMTRACE_EXPORT ncclResult_t ncclMemFree(void* ptr) {
  auto real = real_fn<Hook::ncclMemFree, decltype(&::ncclMemFree)>();
  if (!real) return ncclSystemError;
  NcclNote note("ncclMemFree");
  return real(ptr);
}

extern "C" MEMTRACE_EXPORT ncclResult_t ncclCommRegister(const ncclComm_t comm, void* buff, size_t size,
                                                        void** handle) {
  auto real = real_fn<Hook::ncclCommRegister, decltype(&::ncclCommRegister)>();
  if (!real) return ncclSystemError;
  NcclNote note("ncclCommRegister");
  return real(comm, buff, size, handle);
}

extern "C" MEMTRACE_EXPORT ncclResult_t ncclCommDeregister(const ncclComm_t comm, void* handle) {
  auto real = real_fn<Hook::ncclCommDeregister, decltype(&::ncclCommDeregister)>();
  if (!real) return ncclSystemError;
  NcclNote note("ncclCommDeregister");
  return real(comm, handle);
}

extern "C" MEMTRACE_EXPORT ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId,
                                                        int rank) {
  auto real = real_fn<Hook::ncclCommInitRank, decltype(&::ncclCommInitRank)>();
  if (!real) return ncclSystemError;
  NcclNote note("ncclCommInitRank");
  return real(comm, nranks, commId, rank);
}

extern "C" MEMTRACE_EXPORT ncclResult_t ncclCommInitAll(ncclComm_t* comm, int ndev, const int* devlist) {
  auto real = real_fn<Hook::ncclCommInitAll, decltype(&::ncclCommInitAll)>();
  if (!real) return ncclSystemError;
  NcclNote note("ncclCommInitAll");
  return real(comm, ndev, devlist);
}

extern "C" MEMTRACE_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  auto real = real_fn<Hook::ncclCommDestroy, decltype(&::ncclCommDestroy)>();
  if (!real) return ncclSystemError;
  NcclNote note("ncclCommDestroy");
  return real(comm);
}
