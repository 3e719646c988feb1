// Communicators. All ranks live in this process: ncclCommInitAll creates a clique at once, and
// ncclCommInitRank joins the ranks that present the same unique id (from several threads, or from one
// thread inside ncclGroupStart/End), blocking like the real call until every rank has arrived.
//
// Creating a communicator allocates what NCCL's own setup would make visible at the driver: a 4 MiB
// channel buffer per rank through the VMM path (cuMemAlloc_v2 when NCCL_CUMEM_ENABLE=0) and a small work
// FIFO through cuMemAlloc_v2. Both are freed by ncclCommDestroy / ncclCommAbort.
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <random>

#include "internal.h"

namespace simnccl {
namespace {

constexpr size_t kChannelBufferBytes = 4u << 20;
constexpr size_t kWorkFifoBytes = 64u << 10;
constexpr uint64_t kIdMagic = 0x53494d4e43434c49ull;  // "SIMNCCLI"

std::mutex g_comms_mutex;
std::set<const ncclComm*>& live_comms() {
  static auto* s = new std::set<const ncclComm*>;
  return *s;
}

struct UniqueIdBody {
  uint64_t magic;
  uint64_t pid;
  uint64_t serial;
  uint64_t nonce;
};
static_assert(sizeof(UniqueIdBody) <= NCCL_UNIQUE_ID_BYTES);

// A clique being assembled by ncclCommInitRank calls that share a unique id.
struct Join {
  std::array<char, NCCL_UNIQUE_ID_BYTES> id;
  int nranks;
  std::vector<ncclComm*> members;
  int arrived = 0;
  bool complete = false;
};

std::mutex g_join_mutex;
std::condition_variable g_join_cv;
std::vector<std::shared_ptr<Join>>& joins() {
  static auto* v = new std::vector<std::shared_ptr<Join>>;
  return *v;
}

ncclResult_t join_register(const ncclUniqueId& id, int nranks, int rank, ncclComm* comm,
                           std::shared_ptr<Join>* out) {
  std::lock_guard<std::mutex> lock(g_join_mutex);
  std::shared_ptr<Join> join;
  for (auto& j : joins())
    if (std::memcmp(j->id.data(), id.internal, NCCL_UNIQUE_ID_BYTES) == 0) join = j;
  if (!join) {
    join = std::make_shared<Join>();
    std::memcpy(join->id.data(), id.internal, NCCL_UNIQUE_ID_BYTES);
    join->nranks = nranks;
    join->members.assign(static_cast<size_t>(nranks), nullptr);
    joins().push_back(join);
  }
  if (join->nranks != nranks)
    return fail(ncclInvalidUsage, "ncclCommInitRank: rank %d says %d ranks, others said %d", rank, nranks,
                join->nranks);
  if (join->members[static_cast<size_t>(rank)])
    return fail(ncclInvalidUsage, "ncclCommInitRank: rank %d joined twice", rank);
  join->members[static_cast<size_t>(rank)] = comm;
  if (++join->arrived == nranks) {
    auto clique = std::make_shared<Clique>(nranks);
    for (ncclComm* m : join->members) m->clique = clique;
    join->complete = true;
    std::erase(joins(), join);
    g_join_cv.notify_all();
  }
  *out = join;
  return ncclSuccess;
}

void join_wait(const std::shared_ptr<Join>& join) {
  std::unique_lock<std::mutex> lock(g_join_mutex);
  g_join_cv.wait(lock, [&] { return join->complete; });
}

void join_abandon(ncclComm* comm) {
  std::lock_guard<std::mutex> lock(g_join_mutex);
  for (auto& j : joins())
    for (auto& m : j->members)
      if (m == comm) {
        m = nullptr;
        --j->arrived;
      }
}

ncclComm* new_comm(int rank, int nranks, int device) {
  auto* comm = new ncclComm;
  comm->rank = rank;
  comm->nranks = nranks;
  comm->device = device;
  return comm;
}

// Gives back everything a communicator holds; used by destroy, abort and failed creation.
ncclResult_t teardown(ncclComm* comm) {
  {
    std::lock_guard<std::mutex> lock(g_comms_mutex);
    live_comms().erase(comm);
  }
  ncclResult_t result = ncclSuccess;
  if (comm->clique) clique_forget(comm);
  if (comm->ctx) {
    ScopedContext scope(comm->ctx);
    for (Registration* r : comm->registrations) delete r;
    comm->registrations.clear();
    for (ncclWindow_vidmem* w : comm->windows) delete w;
    comm->windows.clear();
    if (ncclResult_t r = buffer_free(comm->channel); r != ncclSuccess) result = r;
    if (ncclResult_t r = buffer_free(comm->work_fifo); r != ncclSuccess && result == ncclSuccess) result = r;
  }
  if (comm->ctx) release_primary(comm->device);
  comm->magic = 0;
  delete comm;
  return result;
}

// Per-rank resources; runs with the communicator's device context current.
ncclResult_t setup(ncclComm* comm) {
  ScopedContext scope(comm->ctx);
  if (ncclResult_t r = buffer_alloc(comm->device, kChannelBufferBytes, false, &comm->channel); r != ncclSuccess)
    return r;
  CUdeviceptr fifo = 0;
  SIMNCCL_CU(pfn().cuMemAlloc(&fifo, kWorkFifoBytes));
  comm->work_fifo = DeviceBuffer{fifo, kWorkFifoBytes, false};
  std::lock_guard<std::mutex> lock(g_comms_mutex);
  live_comms().insert(comm);
  return ncclSuccess;
}

ncclResult_t check_device(int device) {
  if (device < 0 || device >= device_count())
    return fail(ncclInvalidArgument, "invalid CUDA device %d (%d present)", device, device_count());
  return ncclSuccess;
}

ncclResult_t init_rank(ncclComm_t* out, int nranks, const ncclUniqueId& id, int rank) {
  if (!out) return fail(ncclInvalidArgument, "ncclCommInitRank: comm is NULL");
  *out = nullptr;
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return fail(ncclInvalidArgument, "ncclCommInitRank: rank %d of %d", rank, nranks);
  UniqueIdBody body;
  std::memcpy(&body, id.internal, sizeof(body));
  if (body.magic != kIdMagic) return fail(ncclInvalidArgument, "ncclCommInitRank: id not made by ncclGetUniqueId");
  if (ncclResult_t r = load_driver(); r != ncclSuccess) return r;
  int device = 0;
  if (ncclResult_t r = current_device(&device); r != ncclSuccess) return r;
  ncclComm* comm = new_comm(rank, nranks, device);
  if (ncclResult_t r = retain_primary(device, &comm->ctx); r != ncclSuccess) {
    delete comm;
    return r;
  }
  std::shared_ptr<Join> join;
  if (ncclResult_t r = join_register(id, nranks, rank, comm, &join); r != ncclSuccess) {
    teardown(comm);
    return r;
  }
  auto finish = [comm, join]() -> ncclResult_t {
    join_wait(join);
    if (ncclResult_t r = setup(comm); r != ncclSuccess) {
      std::lock_guard<std::mutex> lock(comm->mutex);
      comm->async_error = r;
      return r;
    }
    return ncclSuccess;
  };
  *out = comm;
  if (in_group()) {
    // The other ranks may be created later in this same group; wait for them at ncclGroupEnd.
    defer_to_group_end(finish);
    return ncclSuccess;
  }
  if (ncclResult_t r = finish(); r != ncclSuccess) {
    *out = nullptr;
    teardown(comm);
    return r;
  }
  return ncclSuccess;
}

}  // namespace

bool valid_comm(const ncclComm* comm) {
  if (!comm) return false;
  std::lock_guard<std::mutex> lock(g_comms_mutex);
  return live_comms().count(comm) != 0;
}

}  // namespace simnccl

using namespace simnccl;

NCCL_API(ncclResult_t, ncclGetUniqueId, ncclUniqueId* uniqueId) {
  if (!uniqueId) return fail(ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
  static std::atomic<uint64_t> serial{0};
  std::memset(uniqueId, 0, sizeof(*uniqueId));
  UniqueIdBody body{kIdMagic, static_cast<uint64_t>(getpid()), serial.fetch_add(1) + 1,
                    static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count())};
  std::memcpy(uniqueId->internal, &body, sizeof(body));
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommInitAll, ncclComm_t* comms, int ndev, const int* devlist) {
  if (!comms || ndev < 1) return fail(ncclInvalidArgument, "ncclCommInitAll: comms NULL or ndev < 1");
  if (ncclResult_t r = load_driver(); r != ncclSuccess) return r;
  for (int i = 0; i < ndev; ++i) {
    if (ncclResult_t r = check_device(devlist ? devlist[i] : i); r != ncclSuccess) return r;
    for (int j = 0; j < i; ++j)
      if (devlist && devlist[j] == devlist[i])
        return fail(ncclInvalidUsage, "ncclCommInitAll: ranks %d and %d both on CUDA device %d", j, i, devlist[i]);
  }
  auto clique = std::make_shared<Clique>(ndev);
  std::vector<ncclComm*> made;
  ncclResult_t result = ncclSuccess;
  for (int i = 0; i < ndev && result == ncclSuccess; ++i) {
    ncclComm* comm = new_comm(i, ndev, devlist ? devlist[i] : i);
    comm->clique = clique;
    made.push_back(comm);
    result = retain_primary(comm->device, &comm->ctx);
    if (result == ncclSuccess) result = setup(comm);
  }
  if (result != ncclSuccess) {
    for (ncclComm* c : made) teardown(c);
    return result;
  }
  for (int i = 0; i < ndev; ++i) comms[i] = made[static_cast<size_t>(i)];
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommInitRank, ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  return init_rank(comm, nranks, commId, rank);
}

NCCL_API(ncclResult_t, ncclCommInitRankConfig, ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
         ncclConfig_t* config) {
  // Creation always completes before returning, so a non-blocking config needs no special handling.
  if (config && (config->magic != 0xcafebeef || config->size < offsetof(ncclConfig_t, blocking)))
    return fail(ncclInvalidArgument, "ncclCommInitRankConfig: config not set up with NCCL_CONFIG_INITIALIZER");
  return init_rank(comm, nranks, commId, rank);
}

NCCL_API(ncclResult_t, ncclCommFinalize, ncclComm_t comm) {
  if (!valid_comm(comm)) return fail(ncclInvalidArgument, "ncclCommFinalize: invalid communicator");
  // Work runs when every rank has posted it; nothing of this rank can still be in flight on a device.
  std::lock_guard<std::mutex> lock(comm->mutex);
  comm->finalized = true;
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommDestroy, ncclComm_t comm) {
  if (!comm) return ncclSuccess;
  if (!valid_comm(comm)) {
    // Still waiting for its peers inside a group that never ended.
    join_abandon(comm);
    return fail(ncclInvalidArgument, "ncclCommDestroy: invalid communicator");
  }
  return teardown(comm);
}

NCCL_API(ncclResult_t, ncclCommAbort, ncclComm_t comm) {
  if (!comm) return ncclSuccess;
  if (!valid_comm(comm)) return fail(ncclInvalidArgument, "ncclCommAbort: invalid communicator");
  return teardown(comm);
}

NCCL_API(ncclResult_t, ncclCommGetAsyncError, ncclComm_t comm, ncclResult_t* asyncError) {
  if (!valid_comm(comm) || !asyncError) return fail(ncclInvalidArgument, "ncclCommGetAsyncError: bad arguments");
  std::lock_guard<std::mutex> lock(comm->mutex);
  *asyncError = comm->async_error;
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommCount, const ncclComm_t comm, int* count) {
  if (!valid_comm(comm) || !count) return fail(ncclInvalidArgument, "ncclCommCount: bad arguments");
  *count = comm->nranks;
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommCuDevice, const ncclComm_t comm, int* device) {
  if (!valid_comm(comm) || !device) return fail(ncclInvalidArgument, "ncclCommCuDevice: bad arguments");
  *device = comm->device;
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommUserRank, const ncclComm_t comm, int* rank) {
  if (!valid_comm(comm) || !rank) return fail(ncclInvalidArgument, "ncclCommUserRank: bad arguments");
  *rank = comm->rank;
  return ncclSuccess;
}
