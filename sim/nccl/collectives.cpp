// Collectives and groups.
//
// How a collective runs: each rank's call posts its part to the clique; the call that completes the set
// (the last rank to post, or ncclGroupEnd when one thread drives every rank) runs it at once. It first
// synchronises every participating stream (cuStreamSynchronize), so work queued before the collective —
// such as the copy that filled the send buffer — has landed, then stages the send buffers to host memory
// with cuMemcpyDtoH, reduces or gathers on the host, and writes the results with cuMemcpyHtoD. The
// collective has therefore completed when the call that ran it returns; later work queued on the streams
// runs after it, which is the ordering a stream would give. (Stream-ordered execution through host
// callbacks would need driver support the simulated device does not promise.)
#include <cstring>
#include <type_traits>

#include "internal.h"

namespace simnccl {
namespace {

struct GroupState {
  int depth = 0;
  std::vector<Op> ops;
  std::vector<std::function<ncclResult_t()>> work;
};
thread_local GroupState t_group;

// ---- element types -------------------------------------------------------------------------

float half_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  uint32_t bits;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);  // inf / nan
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;
  } else {  // subnormal: normalise
    int shift = 0;
    while (!(mantissa & 0x400u)) {
      mantissa <<= 1;
      ++shift;
    }
    mantissa &= 0x3ffu;
    bits = sign | (static_cast<uint32_t>(113 - shift) << 23) | (mantissa << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

uint16_t float_to_half(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  uint32_t exponent = (bits >> 23) & 0xffu;
  uint32_t mantissa = bits & 0x7fffffu;
  if (exponent == 0xff) return static_cast<uint16_t>(sign | 0x7c00u | (mantissa ? 0x200u : 0));
  int e = static_cast<int>(exponent) - 127 + 15;
  if (e >= 0x1f) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (e <= 0) {
    if (e < -10) return sign;  // underflow -> signed zero
    mantissa |= 0x800000u;
    uint32_t shift = static_cast<uint32_t>(14 - e);
    uint32_t half = mantissa >> shift;
    uint32_t rest = mantissa & ((1u << shift) - 1);
    uint32_t midpoint = 1u << (shift - 1);
    if (rest > midpoint || (rest == midpoint && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = (static_cast<uint32_t>(e) << 10) | (mantissa >> 13);
  uint32_t rest = mantissa & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;  // may carry into the exponent: correct
  return static_cast<uint16_t>(sign | half);
}

float bf16_to_float(uint16_t b) {
  uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

uint16_t float_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);  // quiet nan
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

template <typename T>
struct Plain {
  using Stored = T;
  using Compute = T;
  static Compute load(Stored v) { return v; }
  static Stored store(Compute v) { return v; }
};
struct Half {
  using Stored = uint16_t;
  using Compute = float;
  static Compute load(Stored v) { return half_to_float(v); }
  static Stored store(Compute v) { return float_to_half(v); }
};
struct Bf16 {
  using Stored = uint16_t;
  using Compute = float;
  static Compute load(Stored v) { return bf16_to_float(v); }
  static Stored store(Compute v) { return float_to_bf16(v); }
};

size_t type_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2: return 1;
    case ncclFloat16:
    case ncclBfloat16: return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32: return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64: return 8;
    default: return 0;
  }
}

using Bytes = std::vector<unsigned char>;

template <typename Traits>
void reduce_typed(const std::vector<Bytes>& in, Bytes& out, size_t count, ncclRedOp_t op) {
  using S = typename Traits::Stored;
  using C = typename Traits::Compute;
  auto at = [](const Bytes& b, size_t i) {
    S v;
    std::memcpy(&v, b.data() + i * sizeof(S), sizeof(S));
    return Traits::load(v);
  };
  for (size_t i = 0; i < count; ++i) {
    C acc = at(in[0], i);
    for (size_t r = 1; r < in.size(); ++r) {
      C v = at(in[r], i);
      switch (op) {
        case ncclSum:
        case ncclAvg: acc = static_cast<C>(acc + v); break;
        case ncclProd: acc = static_cast<C>(acc * v); break;
        case ncclMax: acc = acc < v ? v : acc; break;
        case ncclMin: acc = v < acc ? v : acc; break;
        default: break;
      }
    }
    if (op == ncclAvg) acc = static_cast<C>(acc / static_cast<C>(in.size()));
    S s = Traits::store(acc);
    std::memcpy(out.data() + i * sizeof(S), &s, sizeof(S));
  }
}

void reduce(const std::vector<Bytes>& in, Bytes& out, size_t count, ncclDataType_t type, ncclRedOp_t op) {
  switch (type) {
    case ncclInt8: return reduce_typed<Plain<int8_t>>(in, out, count, op);
    case ncclUint8: return reduce_typed<Plain<uint8_t>>(in, out, count, op);
    case ncclInt32: return reduce_typed<Plain<int32_t>>(in, out, count, op);
    case ncclUint32: return reduce_typed<Plain<uint32_t>>(in, out, count, op);
    case ncclInt64: return reduce_typed<Plain<int64_t>>(in, out, count, op);
    case ncclUint64: return reduce_typed<Plain<uint64_t>>(in, out, count, op);
    case ncclFloat16: return reduce_typed<Half>(in, out, count, op);
    case ncclFloat32: return reduce_typed<Plain<float>>(in, out, count, op);
    case ncclFloat64: return reduce_typed<Plain<double>>(in, out, count, op);
    case ncclBfloat16: return reduce_typed<Bf16>(in, out, count, op);
    default: return;
  }
}

bool is_reduction(Collective k) {
  return k == Collective::AllReduce || k == Collective::Reduce || k == Collective::ReduceScatter;
}

// ---- execution -----------------------------------------------------------------------------

ncclResult_t to_host(const Op& op, const void* src, Bytes& dst, size_t offset, size_t bytes) {
  ScopedContext scope(op.comm->ctx);
  SIMNCCL_CU(pfn().cuMemcpyDtoH(dst.data() + offset, reinterpret_cast<CUdeviceptr>(src), bytes));
  return ncclSuccess;
}

ncclResult_t to_device(const Op& op, void* dst, const Bytes& src, size_t offset, size_t bytes) {
  ScopedContext scope(op.comm->ctx);
  SIMNCCL_CU(pfn().cuMemcpyHtoD(reinterpret_cast<CUdeviceptr>(dst), src.data() + offset, bytes));
  return ncclSuccess;
}

#define SIMNCCL_TRY(expr)                                 \
  do {                                                    \
    if (ncclResult_t r_ = (expr); r_ != ncclSuccess) return r_; \
  } while (0)

ncclResult_t execute(const std::vector<Op>& ops) {
  const Op& first = ops[0];
  const size_t n = ops.size();
  for (const Op& o : ops) {
    if (o.kind != first.kind || o.count != first.count || o.type != first.type ||
        (is_reduction(first.kind) && o.op != first.op) || o.root != first.root)
      return fail(ncclInvalidUsage, "ranks called mismatched collectives (rank %d vs rank %d)", o.comm->rank,
                  first.comm->rank);
  }
  for (const Op& o : ops) {
    ScopedContext scope(o.comm->ctx);
    SIMNCCL_CU(pfn().cuStreamSynchronize(o.stream));
  }
  if (first.count == 0) return ncclSuccess;
  const size_t bytes = first.count * type_size(first.type);

  switch (first.kind) {
    case Collective::AllReduce:
    case Collective::Reduce: {
      std::vector<Bytes> in(n, Bytes(bytes));
      for (size_t r = 0; r < n; ++r) SIMNCCL_TRY(to_host(ops[r], ops[r].send, in[r], 0, bytes));
      Bytes out(bytes);
      reduce(in, out, first.count, first.type, first.op);
      for (size_t r = 0; r < n; ++r)
        if (first.kind == Collective::AllReduce || static_cast<int>(r) == first.root)
          SIMNCCL_TRY(to_device(ops[r], ops[r].recv, out, 0, bytes));
      return ncclSuccess;
    }
    case Collective::Broadcast: {
      Bytes data(bytes);
      const Op& root = ops[static_cast<size_t>(first.root)];
      SIMNCCL_TRY(to_host(root, root.send, data, 0, bytes));
      for (const Op& o : ops) SIMNCCL_TRY(to_device(o, o.recv, data, 0, bytes));
      return ncclSuccess;
    }
    case Collective::AllGather: {
      Bytes all(bytes * n);
      for (size_t r = 0; r < n; ++r) SIMNCCL_TRY(to_host(ops[r], ops[r].send, all, r * bytes, bytes));
      for (const Op& o : ops) SIMNCCL_TRY(to_device(o, o.recv, all, 0, bytes * n));
      return ncclSuccess;
    }
    case Collective::ReduceScatter: {
      std::vector<Bytes> in(n, Bytes(bytes * n));
      for (size_t r = 0; r < n; ++r) SIMNCCL_TRY(to_host(ops[r], ops[r].send, in[r], 0, bytes * n));
      Bytes out(bytes * n);
      reduce(in, out, first.count * n, first.type, first.op);
      for (size_t r = 0; r < n; ++r) SIMNCCL_TRY(to_device(ops[r], ops[r].recv, out, r * bytes, bytes));
      return ncclSuccess;
    }
  }
  return fail(ncclInternalError, "unknown collective");
}

ncclResult_t post(const Op& op) {
  std::shared_ptr<Clique> clique = op.comm->clique;
  std::lock_guard<std::mutex> lock(clique->mutex);
  clique->pending[static_cast<size_t>(op.comm->rank)].push_back(op);
  ncclResult_t result = ncclSuccess;
  for (;;) {
    for (const auto& q : clique->pending)
      if (q.empty()) return result;
    std::vector<Op> ops;
    for (auto& q : clique->pending) {
      ops.push_back(q.front());
      q.pop_front();
    }
    if (ncclResult_t r = execute(ops); r != ncclSuccess) {
      for (const Op& o : ops) {
        std::lock_guard<std::mutex> comm_lock(o.comm->mutex);
        o.comm->async_error = r;
      }
      if (result == ncclSuccess) result = r;
    }
  }
}

ncclResult_t validate(const Op& op) {
  if (!valid_comm(op.comm)) return fail(ncclInvalidArgument, "invalid communicator");
  if (op.type < 0 || op.type >= ncclNumTypes) return fail(ncclInvalidArgument, "invalid data type %d", op.type);
  if (op.type == ncclFloat8e4m3 || op.type == ncclFloat8e5m2)
    return fail(ncclInvalidArgument, "fp8 collectives are not simulated");
  if (is_reduction(op.kind) && (op.op < 0 || op.op >= ncclNumOps))
    return fail(ncclInvalidArgument, "invalid reduction operation %d", op.op);
  if ((op.kind == Collective::Broadcast || op.kind == Collective::Reduce) &&
      (op.root < 0 || op.root >= op.comm->nranks))
    return fail(ncclInvalidArgument, "invalid root %d", op.root);
  if (op.count > 0) {
    bool needs_send = op.kind != Collective::Broadcast || op.root == op.comm->rank;
    bool needs_recv = op.kind != Collective::Reduce || op.root == op.comm->rank;
    if ((needs_send && !op.send) || (needs_recv && !op.recv))
      return fail(ncclInvalidArgument, "NULL buffer");
  }
  return ncclSuccess;
}

}  // namespace

bool in_group() { return t_group.depth > 0; }

void defer_to_group_end(std::function<ncclResult_t()> work) { t_group.work.push_back(std::move(work)); }

ncclResult_t enqueue(const Op& op) {
  if (ncclResult_t r = validate(op); r != ncclSuccess) return r;
  if (in_group()) {
    t_group.ops.push_back(op);
    return ncclSuccess;
  }
  return post(op);
}

void clique_forget(ncclComm* comm) {
  std::lock_guard<std::mutex> lock(comm->clique->mutex);
  comm->clique->pending[static_cast<size_t>(comm->rank)].clear();
}

}  // namespace simnccl

using namespace simnccl;

NCCL_API(ncclResult_t, ncclGroupStart) {
  ++t_group.depth;
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclGroupEnd) {
  if (t_group.depth == 0) return fail(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  if (--t_group.depth > 0) return ncclSuccess;
  std::vector<std::function<ncclResult_t()>> work;
  std::vector<Op> ops;
  work.swap(t_group.work);
  ops.swap(t_group.ops);
  ncclResult_t result = ncclSuccess;
  for (auto& w : work)
    if (ncclResult_t r = w(); r != ncclSuccess && result == ncclSuccess) result = r;
  for (const Op& op : ops) {
    if (!valid_comm(op.comm)) continue;
    if (ncclResult_t r = post(op); r != ncclSuccess && result == ncclSuccess) result = r;
  }
  return result;
}

NCCL_API(ncclResult_t, ncclAllReduce, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
         ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return enqueue(Op{Collective::AllReduce, sendbuff, recvbuff, count, datatype, op, 0, comm, stream});
}

NCCL_API(ncclResult_t, ncclReduce, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
         ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  return enqueue(Op{Collective::Reduce, sendbuff, recvbuff, count, datatype, op, root, comm, stream});
}

NCCL_API(ncclResult_t, ncclBroadcast, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
         int root, ncclComm_t comm, cudaStream_t stream) {
  return enqueue(Op{Collective::Broadcast, sendbuff, recvbuff, count, datatype, ncclSum, root, comm, stream});
}

NCCL_API(ncclResult_t, ncclBcast, void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
         cudaStream_t stream) {
  return enqueue(Op{Collective::Broadcast, buff, buff, count, datatype, ncclSum, root, comm, stream});
}

NCCL_API(ncclResult_t, ncclAllGather, const void* sendbuff, void* recvbuff, size_t sendcount,
         ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  return enqueue(Op{Collective::AllGather, sendbuff, recvbuff, sendcount, datatype, ncclSum, 0, comm, stream});
}

NCCL_API(ncclResult_t, ncclReduceScatter, const void* sendbuff, void* recvbuff, size_t recvcount,
         ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return enqueue(Op{Collective::ReduceScatter, sendbuff, recvbuff, recvcount, datatype, op, 0, comm, stream});
}
