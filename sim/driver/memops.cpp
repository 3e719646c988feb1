// Memset and memcpy. Device operands must lie in live allocations (checked when the call is
// made and again when queued work finally runs, since a stream-ordered free may have taken
// the memory in between; that failure surfaces as CUDA_ERROR_ILLEGAL_ADDRESS at the next
// synchronisation, like a kernel fault). Synchronous variants first wait for the legacy
// stream (or, for _ptds, the calling thread's default stream).
#include <cstring>

#include "internal.h"

namespace sim {

bool in_simulated_address_space(uint64_t p) { return in_device_arena(p) || vmm_reservation_of(p, nullptr, nullptr); }

namespace {

enum class Space { Device, Host, Unified };

// Unified pointers (cuMemcpy) may be any host memory, but never a dead device address.
bool operand_ok(uint64_t p, uint64_t n, Space space) {
  if (p == 0 || p + n < p) return false;
  switch (space) {
    case Space::Device: return registry_covers(p, n);
    case Space::Host: return true;
    case Space::Unified:
      return registry_covers(p, n) || (!in_simulated_address_space(p) && !in_simulated_address_space(p + n - 1));
  }
  return false;
}

struct Copy {
  uint64_t dst, src, n;
  Space dst_space, src_space;
  bool valid() const { return operand_ok(dst, n, dst_space) && operand_ok(src, n, src_space); }
  void run() const { std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), n); }
};

struct Fill {
  uint64_t dst, count;
  uint32_t value;
  unsigned width;  // 1, 2 or 4 bytes
  bool valid() const { return operand_ok(dst, count * width, Space::Device); }
  void run() const {
    switch (width) {
      case 1: std::memset(reinterpret_cast<void*>(dst), static_cast<int>(value & 0xff), count); break;
      case 2: {
        auto* p = reinterpret_cast<uint16_t*>(dst);
        for (uint64_t i = 0; i < count; ++i) p[i] = static_cast<uint16_t>(value);
        break;
      }
      default: {
        auto* p = reinterpret_cast<uint32_t*>(dst);
        for (uint64_t i = 0; i < count; ++i) p[i] = value;
        break;
      }
    }
  }
};

template <typename Op>
CUresult run_sync(const Op& op, bool ptds) {
  CUctx_st* c;
  if (CUresult r = current_ctx(&c); r != CUDA_SUCCESS) return r;
  if (!op.valid()) return CUDA_ERROR_INVALID_VALUE;
  sync_before_blocking_op(c, ptds);
  if (!op.valid()) return CUDA_ERROR_INVALID_VALUE;  // freed by the work just waited for
  op.run();
  return CUDA_SUCCESS;
}

template <typename Op>
CUresult run_async(const Op& op, CUstream h, bool ptsz) {
  StreamPtr s;
  if (CUresult r = resolve_stream(h, ptsz, &s); r != CUDA_SUCCESS) return r;
  if (!op.valid()) return CUDA_ERROR_INVALID_VALUE;
  enqueue(s, [op](CUstream_st& st) {
    if (op.valid()) {
      op.run();
    } else if (st.error == CUDA_SUCCESS) {
      st.error = CUDA_ERROR_ILLEGAL_ADDRESS;
    }
  });
  return CUDA_SUCCESS;
}

CUresult copy(uint64_t dst, Space ds, uint64_t src, Space ss, uint64_t n, bool ptds) {
  if (n == 0) return CUDA_SUCCESS;
  return run_sync(Copy{dst, src, n, ds, ss}, ptds);
}

CUresult copy_async(uint64_t dst, Space ds, uint64_t src, Space ss, uint64_t n, CUstream h, bool ptsz) {
  if (n == 0) {
    StreamPtr s;
    return resolve_stream(h, ptsz, &s);
  }
  return run_async(Copy{dst, src, n, ds, ss}, h, ptsz);
}

bool fill_args_ok(uint64_t dst, uint64_t count, unsigned width) {
  return dst % width == 0 && count <= UINT64_MAX / width;
}

CUresult fill(uint64_t dst, uint32_t value, uint64_t count, unsigned width, bool ptds) {
  if (!fill_args_ok(dst, count, width)) return CUDA_ERROR_INVALID_VALUE;
  if (count == 0) return CUDA_SUCCESS;
  return run_sync(Fill{dst, count, value, width}, ptds);
}

CUresult fill_async(uint64_t dst, uint32_t value, uint64_t count, unsigned width, CUstream h, bool ptsz) {
  if (!fill_args_ok(dst, count, width)) return CUDA_ERROR_INVALID_VALUE;
  if (count == 0) {
    StreamPtr s;
    return resolve_stream(h, ptsz, &s);
  }
  return run_async(Fill{dst, count, value, width}, h, ptsz);
}

uint64_t host(const void* p) { return reinterpret_cast<uint64_t>(p); }

}  // namespace
}  // namespace sim

using namespace sim;

// ---- memset ----
SIM_API CUresult cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N) {
  SIM_ENTER();
  return fill(dstDevice, uc, N, 1, false);
}
SIM_API CUresult cuMemsetD8_v2_ptds(CUdeviceptr dstDevice, unsigned char uc, size_t N) {
  SIM_ENTER();
  return fill(dstDevice, uc, N, 1, true);
}
SIM_API CUresult cuMemsetD16_v2(CUdeviceptr dstDevice, unsigned short us, size_t N) {
  SIM_ENTER();
  return fill(dstDevice, us, N, 2, false);
}
SIM_API CUresult cuMemsetD16_v2_ptds(CUdeviceptr dstDevice, unsigned short us, size_t N) {
  SIM_ENTER();
  return fill(dstDevice, us, N, 2, true);
}
SIM_API CUresult cuMemsetD32_v2(CUdeviceptr dstDevice, unsigned int ui, size_t N) {
  SIM_ENTER();
  return fill(dstDevice, ui, N, 4, false);
}
SIM_API CUresult cuMemsetD32_v2_ptds(CUdeviceptr dstDevice, unsigned int ui, size_t N) {
  SIM_ENTER();
  return fill(dstDevice, ui, N, 4, true);
}
SIM_API CUresult cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream) {
  SIM_ENTER();
  return fill_async(dstDevice, uc, N, 1, hStream, false);
}
SIM_API CUresult cuMemsetD8Async_ptsz(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream) {
  SIM_ENTER();
  return fill_async(dstDevice, uc, N, 1, hStream, true);
}
SIM_API CUresult cuMemsetD16Async(CUdeviceptr dstDevice, unsigned short us, size_t N, CUstream hStream) {
  SIM_ENTER();
  return fill_async(dstDevice, us, N, 2, hStream, false);
}
SIM_API CUresult cuMemsetD16Async_ptsz(CUdeviceptr dstDevice, unsigned short us, size_t N, CUstream hStream) {
  SIM_ENTER();
  return fill_async(dstDevice, us, N, 2, hStream, true);
}
SIM_API CUresult cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream) {
  SIM_ENTER();
  return fill_async(dstDevice, ui, N, 4, hStream, false);
}
SIM_API CUresult cuMemsetD32Async_ptsz(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream) {
  SIM_ENTER();
  return fill_async(dstDevice, ui, N, 4, hStream, true);
}

// ---- synchronous memcpy ----
SIM_API CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount) {
  SIM_ENTER();
  return copy(dst, Space::Unified, src, Space::Unified, ByteCount, false);
}
SIM_API CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount) {
  SIM_ENTER();
  return copy(dst, Space::Unified, src, Space::Unified, ByteCount, true);
}
SIM_API CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount) {
  SIM_ENTER();
  return copy(dstDevice, Space::Device, host(srcHost), Space::Host, ByteCount, false);
}
SIM_API CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount) {
  SIM_ENTER();
  return copy(dstDevice, Space::Device, host(srcHost), Space::Host, ByteCount, true);
}
SIM_API CUresult cuMemcpyDtoH_v2(void* dstHost, CUdeviceptr srcDevice, size_t ByteCount) {
  SIM_ENTER();
  return copy(host(dstHost), Space::Host, srcDevice, Space::Device, ByteCount, false);
}
SIM_API CUresult cuMemcpyDtoH_v2_ptds(void* dstHost, CUdeviceptr srcDevice, size_t ByteCount) {
  SIM_ENTER();
  return copy(host(dstHost), Space::Host, srcDevice, Space::Device, ByteCount, true);
}
SIM_API CUresult cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount) {
  SIM_ENTER();
  return copy(dstDevice, Space::Device, srcDevice, Space::Device, ByteCount, false);
}
SIM_API CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount) {
  SIM_ENTER();
  return copy(dstDevice, Space::Device, srcDevice, Space::Device, ByteCount, true);
}

// ---- asynchronous memcpy ----
SIM_API CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream) {
  SIM_ENTER();
  return copy_async(dst, Space::Unified, src, Space::Unified, ByteCount, hStream, false);
}
SIM_API CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream) {
  SIM_ENTER();
  return copy_async(dst, Space::Unified, src, Space::Unified, ByteCount, hStream, true);
}
SIM_API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount, CUstream hStream) {
  SIM_ENTER();
  return copy_async(dstDevice, Space::Device, host(srcHost), Space::Host, ByteCount, hStream, false);
}
SIM_API CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount,
                                           CUstream hStream) {
  SIM_ENTER();
  return copy_async(dstDevice, Space::Device, host(srcHost), Space::Host, ByteCount, hStream, true);
}
SIM_API CUresult cuMemcpyDtoHAsync_v2(void* dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream) {
  SIM_ENTER();
  return copy_async(host(dstHost), Space::Host, srcDevice, Space::Device, ByteCount, hStream, false);
}
SIM_API CUresult cuMemcpyDtoHAsync_v2_ptsz(void* dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream) {
  SIM_ENTER();
  return copy_async(host(dstHost), Space::Host, srcDevice, Space::Device, ByteCount, hStream, true);
}
SIM_API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,
                                      CUstream hStream) {
  SIM_ENTER();
  return copy_async(dstDevice, Space::Device, srcDevice, Space::Device, ByteCount, hStream, false);
}
SIM_API CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,
                                           CUstream hStream) {
  SIM_ENTER();
  return copy_async(dstDevice, Space::Device, srcDevice, Space::Device, ByteCount, hStream, true);
}
