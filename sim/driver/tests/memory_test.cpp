// Linear, pitched, managed, legacy and pinned host memory; capacity accounting; memset/memcpy.
#include <sys/mman.h>

#include <cstring>
#include <vector>

#include "helpers.h"

using namespace simtest;

TEST_CASE("OOM at capacity, cuMemGetInfo tells the truth, freed memory is reused", "[memory]") {
  use_primary(1);
  CU_OK(cuCtxSynchronize());
  size_t free0 = 0, total = 0;
  CU_OK(cuMemGetInfo(&free0, &total));
  REQUIRE(total == kCapacity);
  REQUIRE(free0 == total);  // every test leaves device 1 empty

  CUdeviceptr big = 0, mid = 0, p = 0;
  CU_OK(cuMemAlloc(&big, total - 4 * kMiB));
  CHECK(free_bytes() == 4 * kMiB);
  CU_OK(cuMemAlloc(&mid, 3 * kMiB));
  CHECK(free_bytes() == 1 * kMiB);
  CHECK(cuMemAlloc(&p, 2 * kMiB) == CUDA_ERROR_OUT_OF_MEMORY);
  CHECK(cuMemAlloc(&p, total + 1) == CUDA_ERROR_OUT_OF_MEMORY);
  CHECK(cuMemAlloc(&p, ~size_t{0}) == CUDA_ERROR_OUT_OF_MEMORY);
  CHECK(free_bytes() == 1 * kMiB);

  // Small allocations are rounded to 512 bytes, and that is what they cost.
  std::vector<CUdeviceptr> small;
  while (true) {
    CUdeviceptr q;
    CUresult r = cuMemAlloc(&q, 1000);
    if (r != CUDA_SUCCESS) {
      CHECK(r == CUDA_ERROR_OUT_OF_MEMORY);
      break;
    }
    CHECK(q % 512 == 0);
    small.push_back(q);
  }
  CHECK(small.size() == kMiB / 1024);
  CHECK(free_bytes() == 0);

  // Device memory is host-addressable, so a test can look at it.
  auto* bytes = reinterpret_cast<unsigned char*>(big);
  bytes[0] = 1;
  bytes[total - 4 * kMiB - 1] = 2;

  CU_OK(cuMemFree(big));
  CHECK(free_bytes() == total - 4 * kMiB);
  CU_OK(cuMemAlloc(&p, total - 4 * kMiB));
  CHECK(p == big);  // first fit: the freed range is reused
  CU_OK(cuMemFree(p));
  CU_OK(cuMemFree(mid));
  for (CUdeviceptr q : small) CU_OK(cuMemFree(q));
  CHECK(free_bytes() == total);
  use_primary(0);
}

TEST_CASE("cuMemFree rules", "[memory]") {
  use_primary(0);
  CU_OK(cuMemFree(0));
  CUdeviceptr p;
  CU_OK(cuMemAlloc(&p, 4096));
  CHECK(cuMemFree(p + 16) == CUDA_ERROR_INVALID_VALUE);  // not the start of an allocation
  CU_OK(cuMemFree(p));
  CHECK(cuMemFree(p) == CUDA_ERROR_INVALID_VALUE);  // double free
  int on_stack = 0;
  CHECK(cuMemFree(reinterpret_cast<CUdeviceptr>(&on_stack)) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemAlloc(&p, 0) == CUDA_ERROR_INVALID_VALUE);
}

TEST_CASE("pitched allocations", "[memory]") {
  use_primary(0);
  const size_t free_before = free_bytes();
  CUdeviceptr p;
  size_t pitch = 0;
  CU_OK(cuMemAllocPitch(&p, &pitch, 1000, 30, 4));
  CHECK(pitch == 1024);
  CHECK(free_bytes() == free_before - 1024 * 30);
  CUdeviceptr base;
  size_t size;
  CU_OK(cuMemGetAddressRange(&base, &size, p + 5000));
  CHECK(base == p);
  CHECK(size == 1024 * 30);
  CHECK(cuMemAllocPitch(&p, &pitch, 1000, 30, 3) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemAllocPitch(&p, &pitch, 0, 30, 8) == CUDA_ERROR_INVALID_VALUE);
  CU_OK(cuMemFree(base));
  CHECK(free_bytes() == free_before);
}

TEST_CASE("managed memory", "[memory]") {
  use_primary(0);
  const size_t free_before = free_bytes();
  CUdeviceptr p;
  CHECK(cuMemAllocManaged(&p, 4096, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemAllocManaged(&p, 4096, CU_MEM_ATTACH_SINGLE) == CUDA_ERROR_INVALID_VALUE);
  CU_OK(cuMemAllocManaged(&p, 4096, CU_MEM_ATTACH_HOST));
  CHECK(free_bytes() == free_before - 4096);
  unsigned managed = 0, type = 0;
  void* host = nullptr;
  CU_OK(cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, p));
  CU_OK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p));
  CU_OK(cuPointerGetAttribute(&host, CU_POINTER_ATTRIBUTE_HOST_POINTER, p));
  CHECK(managed == 1);
  CHECK(type == CU_MEMORYTYPE_DEVICE);
  CHECK(host == reinterpret_cast<void*>(p));
  std::memset(host, 7, 4096);  // managed memory is usable from the host
  CU_OK(cuMemFree(p));
  CHECK(free_bytes() == free_before);
}

TEST_CASE("pointer attributes of linear memory and unknown pointers", "[memory][attributes]") {
  CUcontext ctx = use_primary(0);
  CUdeviceptr p;
  CU_OK(cuMemAlloc(&p, 10000));
  CUcontext owner = nullptr;
  unsigned type = 0, mapped = 0, managed = 1;
  int ordinal = -1;
  CUdeviceptr dptr = 0, start = 0;
  size_t range = 0;
  unsigned long long id1 = 0, id2 = 0, handle_types = 99;
  CU_OK(cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_CONTEXT, p + 100));
  CU_OK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p + 100));
  CU_OK(cuPointerGetAttribute(&dptr, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, p + 100));
  CU_OK(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, p + 100));
  CU_OK(cuPointerGetAttribute(&range, CU_POINTER_ATTRIBUTE_RANGE_SIZE, p + 100));
  CU_OK(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p));
  CU_OK(cuPointerGetAttribute(&mapped, CU_POINTER_ATTRIBUTE_MAPPED, p));
  CU_OK(cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, p));
  CU_OK(cuPointerGetAttribute(&handle_types, CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, p));
  CU_OK(cuPointerGetAttribute(&id1, CU_POINTER_ATTRIBUTE_BUFFER_ID, p));
  CHECK(owner == ctx);
  CHECK(type == CU_MEMORYTYPE_DEVICE);
  CHECK(dptr == p + 100);
  CHECK(start == p);
  CHECK(range == 10000);
  CHECK(ordinal == 0);
  CHECK(mapped == 1);
  CHECK(managed == 0);
  CHECK(handle_types == 0);
  void* host;
  CHECK(cuPointerGetAttribute(&host, CU_POINTER_ATTRIBUTE_HOST_POINTER, p) == CUDA_ERROR_INVALID_VALUE);
  CU_OK(cuMemFree(p));
  CU_OK(cuMemAlloc(&p, 10000));
  CU_OK(cuPointerGetAttribute(&id2, CU_POINTER_ATTRIBUTE_BUFFER_ID, p));
  CHECK(id2 != id1);  // never reused, even at the same address

  // Plural form: defaults instead of errors for a pointer the driver does not know.
  int local = 0;
  CHECK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, reinterpret_cast<CUdeviceptr>(&local)) ==
        CUDA_ERROR_INVALID_VALUE);
  CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_CONTEXT, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                 CU_POINTER_ATTRIBUTE_RANGE_SIZE};
  owner = ctx;
  type = 99;
  range = 99;
  void* data[] = {&owner, &type, &range};
  CU_OK(cuPointerGetAttributes(3, attrs, data, reinterpret_cast<CUdeviceptr>(&local)));
  CHECK(owner == nullptr);
  CHECK(type == 0);
  CHECK(range == 0);
  CU_OK(cuPointerGetAttributes(3, attrs, data, p));
  CHECK(owner == ctx);
  CHECK(type == CU_MEMORYTYPE_DEVICE);
  CHECK(range == 10000);
  CU_OK(cuMemFree(p));
}

TEST_CASE("pinned host memory: allocation, registration and their errors", "[memory][host]") {
  use_primary(0);
  const size_t free_before = free_bytes();
  void* h = nullptr;
  CU_OK(cuMemHostAlloc(&h, 100000, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
  CHECK(free_bytes() == free_before);  // host memory is not device capacity
  CUdeviceptr d = 0;
  CU_OK(cuMemHostGetDevicePointer(&d, h, 0));
  CHECK(d == reinterpret_cast<CUdeviceptr>(h));
  CHECK(cuMemHostGetDevicePointer(&d, h, 1) == CUDA_ERROR_INVALID_VALUE);
  unsigned flags = 0;
  CU_OK(cuMemHostGetFlags(&flags, h));
  CHECK(flags == (CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
  unsigned type = 0;
  CU_OK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d + 10));
  CHECK(type == CU_MEMORYTYPE_HOST);
  CHECK(cuMemHostAlloc(&h, 16, 0x80) == CUDA_ERROR_INVALID_VALUE);
  CU_OK(cuMemFreeHost(reinterpret_cast<void*>(d)));
  CHECK(cuMemFreeHost(reinterpret_cast<void*>(d)) == CUDA_ERROR_INVALID_VALUE);

  void* legacy_style = nullptr;
  CU_OK(cuMemAllocHost(&legacy_style, 4096));
  CU_OK(cuMemFreeHost(legacy_style));

  const size_t len = 1 << 20;
  void* buf = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(buf != MAP_FAILED);
  auto* bytes = static_cast<char*>(buf);
  CHECK(cuMemHostUnregister(buf) == CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
  CU_OK(cuMemHostRegister(buf, len, CU_MEMHOSTREGISTER_DEVICEMAP));
  CHECK(cuMemHostRegister(buf, len, 0) == CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
  CHECK(cuMemHostRegister(bytes + 4096, 4096, 0) == CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
  CHECK(cuMemHostRegister(bytes + len, 0, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemHostRegister(buf, len, 0x40) == CUDA_ERROR_INVALID_VALUE);
  CU_OK(cuMemHostGetDevicePointer(&d, bytes + 4096, 0));
  CHECK(d == reinterpret_cast<CUdeviceptr>(bytes + 4096));
  CHECK(cuMemHostUnregister(bytes + 4096) == CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
  CU_OK(cuMemHostUnregister(buf));
  CHECK(cuMemHostUnregister(buf) == CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);

  // The 4.0 ABI is a distinct symbol with the same contract.
  void* fn = nullptr;
  REQUIRE(cuGetProcAddress("cuMemHostRegister", &fn, 4000, 0, nullptr) == CUDA_SUCCESS);
  auto register_v1 = reinterpret_cast<CUresult (*)(void*, size_t, unsigned)>(fn);
  CU_OK(register_v1(buf, len, 0));
  CHECK(register_v1(buf, len, 0) == CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
  CU_OK(cuMemHostUnregister(buf));
  munmap(buf, len);
}

TEST_CASE("memset and memcpy move real bytes and reject dead pointers", "[memory][memops]") {
  use_primary(0);
  CUdeviceptr a, b;
  CU_OK(cuMemAlloc(&a, 4096));
  CU_OK(cuMemAlloc(&b, 4096));
  CU_OK(cuMemsetD32(a, 0xdeadbeef, 1024));
  std::vector<uint32_t> host(1024);
  CU_OK(cuMemcpyDtoH(host.data(), a, 4096));
  CHECK(host[0] == 0xdeadbeef);
  CHECK(host[1023] == 0xdeadbeef);
  CU_OK(cuMemsetD16(a + 2, 0x1234, 1));
  CU_OK(cuMemsetD8(a + 4095, 0x11, 1));
  CU_OK(cuMemcpyDtoD(b, a, 4096));
  CU_OK(cuMemcpyDtoH(host.data(), b, 4096));
  CHECK(host[0] == 0x1234beef);
  CHECK((host[1023] >> 24) == 0x11);
  for (uint32_t i = 0; i < 1024; ++i) host[i] = i;
  CU_OK(cuMemcpyHtoD(a, host.data(), 4096));
  CHECK(reinterpret_cast<uint32_t*>(a)[77] == 77);
  CU_OK(cuMemcpy(b, a, 4096));  // unified addressing
  CHECK(reinterpret_cast<uint32_t*>(b)[1000] == 1000);

  CHECK(cuMemsetD32(a + 2, 0, 1) == CUDA_ERROR_INVALID_VALUE);        // misaligned
  CHECK(cuMemsetD8(a, 0, 4097) == CUDA_ERROR_INVALID_VALUE);          // past the end
  CHECK(cuMemcpyHtoD(a + 4000, host.data(), 200) == CUDA_ERROR_INVALID_VALUE);
  CU_OK(cuMemFree(b));
  CHECK(cuMemcpyDtoD(b, a, 16) == CUDA_ERROR_INVALID_VALUE);  // freed
  CHECK(cuMemcpy(b, a, 16) == CUDA_ERROR_INVALID_VALUE);       // freed device address, even via UVA
  CHECK(cuMemsetD8(0, 0, 1) == CUDA_ERROR_INVALID_VALUE);
  CU_OK(cuMemFree(a));
}

TEST_CASE("legacy 32-bit ABIs are distinct functions below 4 GiB", "[memory][legacy]") {
  use_primary(0);
  using AllocV1 = CUresult (*)(unsigned int*, unsigned int);
  using FreeV1 = CUresult (*)(unsigned int);
  using InfoV1 = CUresult (*)(unsigned int*, unsigned int*);
  using HostV1 = CUresult (*)(void**, unsigned int);
  void *alloc_fn, *free_fn, *info_fn, *host_fn;
  REQUIRE(cuGetProcAddress("cuMemAlloc", &alloc_fn, 2000, 0, nullptr) == CUDA_SUCCESS);
  REQUIRE(cuGetProcAddress("cuMemFree", &free_fn, 2000, 0, nullptr) == CUDA_SUCCESS);
  REQUIRE(cuGetProcAddress("cuMemGetInfo", &info_fn, 2000, 0, nullptr) == CUDA_SUCCESS);
  REQUIRE(cuGetProcAddress("cuMemAllocHost", &host_fn, 2000, 0, nullptr) == CUDA_SUCCESS);
  CHECK(alloc_fn != reinterpret_cast<void*>(&cuMemAlloc));  // cuMemAlloc here is the _v2 macro
  const size_t free_before = free_bytes();
  unsigned int p32 = 0;
  CU_OK(reinterpret_cast<AllocV1>(alloc_fn)(&p32, 5000));
  CHECK(p32 != 0);
  CHECK(free_bytes() == free_before - footprint(5000));
  unsigned int f32 = 0, t32 = 0;
  CU_OK(reinterpret_cast<InfoV1>(info_fn)(&f32, &t32));
  CHECK(t32 == kCapacity);
  CHECK(f32 == free_before - footprint(5000));
  CU_OK(cuMemsetD8(p32, 0x5a, 5000));  // ordinary device memory for the modern API
  CHECK(reinterpret_cast<unsigned char*>(static_cast<uintptr_t>(p32))[4999] == 0x5a);
  CU_OK(reinterpret_cast<FreeV1>(free_fn)(p32));
  CHECK(free_bytes() == free_before);
  void* h = nullptr;
  CU_OK(reinterpret_cast<HostV1>(host_fn)(&h, 100));
  CU_OK(cuMemFreeHost(h));
}
