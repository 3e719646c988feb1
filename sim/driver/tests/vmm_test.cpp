// Virtual memory management: reference-counted physical handles, reservations, mappings.
#include <unistd.h>

#include <cstring>

#include "helpers.h"

using namespace simtest;

namespace {

CUmemAllocationProp device_prop(int dev, CUmemAllocationHandleType types = CU_MEM_HANDLE_TYPE_NONE) {
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.requestedHandleTypes = types;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  return prop;
}

}  // namespace

TEST_CASE("VMM handles are reference counted across create, map and retain", "[vmm]") {
  use_primary(0);
  CUmemAllocationProp prop = device_prop(0);
  size_t gran = 0;
  CU_OK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  CHECK(gran == 2 * kMiB);
  CU_OK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
  CHECK(gran == 2 * kMiB);

  const size_t free_before = free_bytes();
  CUmemGenericAllocationHandle h = 0;
  CHECK(cuMemCreate(&h, 3 * kMiB, &prop, 0) == CUDA_ERROR_INVALID_VALUE);  // not a multiple of the granularity
  CU_OK(cuMemCreate(&h, 4 * kMiB, &prop, 0));
  CHECK(free_bytes() == free_before - 4 * kMiB);

  CUdeviceptr va = 0;
  CU_OK(cuMemAddressReserve(&va, 16 * kMiB, 0, 0, 0));
  CHECK(va % (2 * kMiB) == 0);
  CHECK(free_bytes() == free_before - 4 * kMiB);  // address space costs no capacity

  CHECK(cuMemMap(va, 4 * kMiB, 1 * kMiB, h, 0) == CUDA_ERROR_INVALID_VALUE);   // unaligned offset
  CHECK(cuMemMap(va, 6 * kMiB, 0, h, 0) == CUDA_ERROR_INVALID_VALUE);          // larger than the handle
  CHECK(cuMemMap(va + 14 * kMiB, 4 * kMiB, 0, h, 0) == CUDA_ERROR_INVALID_VALUE);  // leaves the reservation
  CU_OK(cuMemMap(va, 4 * kMiB, 0, h, 0));
  CHECK(cuMemMap(va + 2 * kMiB, 2 * kMiB, 0, h, 0) == CUDA_ERROR_INVALID_VALUE);  // already mapped
  CU_OK(cuMemMap(va + 8 * kMiB, 2 * kMiB, 2 * kMiB, h, 0));  // the second half, again

  CUmemAccessDesc access = {};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CU_OK(cuMemSetAccess(va, 4 * kMiB, &access, 1));
  CHECK(cuMemSetAccess(va, 6 * kMiB, &access, 1) == CUDA_ERROR_INVALID_VALUE);  // partly unmapped
  unsigned long long flags = 0;
  CU_OK(cuMemGetAccess(&flags, &prop.location, va + 100));
  CHECK(flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE);

  // Both mappings show the same physical bytes.
  CU_OK(cuMemsetD32(va + 2 * kMiB, 0x01020304, 4));
  CHECK(*reinterpret_cast<uint32_t*>(va + 8 * kMiB) == 0x01020304);
  std::strcpy(reinterpret_cast<char*>(va), "still here");

  // Pointer attributes: ranges are the reservation's, mappings are the mapping's.
  CUdeviceptr start = 0;
  size_t range = 0;
  unsigned mapped = 9;
  CU_OK(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, va + 5));
  CU_OK(cuPointerGetAttribute(&range, CU_POINTER_ATTRIBUTE_RANGE_SIZE, va + 5));
  CHECK(start == va);
  CHECK(range == 16 * kMiB);
  CU_OK(cuPointerGetAttribute(&mapped, CU_POINTER_ATTRIBUTE_MAPPED, va + 5 * kMiB));
  CHECK(mapped == 0);
  CUdeviceptr base;
  size_t size;
  CU_OK(cuMemGetAddressRange(&base, &size, va + 9 * kMiB));
  CHECK(base == va + 8 * kMiB);
  CHECK(size == 2 * kMiB);

  // Release the creation reference: the mappings keep the memory alive.
  CU_OK(cuMemRelease(h));
  CHECK(std::strcmp(reinterpret_cast<char*>(va), "still here") == 0);
  CHECK(free_bytes() == free_before - 4 * kMiB);
  CUmemAllocationProp got = {};
  CU_OK(cuMemGetAllocationPropertiesFromHandle(&got, h));
  CHECK(got.location.id == 0);

  CUmemGenericAllocationHandle retained = 0;
  CU_OK(cuMemRetainAllocationHandle(&retained, reinterpret_cast<void*>(va + 8 * kMiB + 4096)));
  CHECK(retained == h);
  CHECK(cuMemUnmap(va, 2 * kMiB) == CUDA_ERROR_INVALID_VALUE);  // not a whole mapping
  CU_OK(cuMemUnmap(va, 4 * kMiB));
  CHECK(cuMemsetD8(va, 0, 1) == CUDA_ERROR_INVALID_VALUE);  // unmapped again
  CU_OK(cuMemUnmap(va + 8 * kMiB, 2 * kMiB));
  CHECK(free_bytes() == free_before - 4 * kMiB);  // the retain still holds it
  CU_OK(cuMemRelease(retained));
  CHECK(free_bytes() == free_before);  // last reference gone: capacity returned
  CHECK(cuMemRelease(h) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemGetAllocationPropertiesFromHandle(&got, h) == CUDA_ERROR_INVALID_VALUE);

  CHECK(cuMemAddressFree(va, 8 * kMiB) == CUDA_ERROR_INVALID_VALUE);  // size must match
  CU_OK(cuMemAddressFree(va, 16 * kMiB));
}

TEST_CASE("VMM capacity, host location, export", "[vmm]") {
  use_primary(1);
  CU_OK(cuCtxSynchronize());
  const size_t free_before = free_bytes();
  CUmemAllocationProp prop = device_prop(1, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  CUmemGenericAllocationHandle h, too_big;
  CHECK(cuMemCreate(&too_big, kCapacity + 2 * kMiB, &prop, 0) == CUDA_ERROR_OUT_OF_MEMORY);
  CU_OK(cuMemCreate(&h, 2 * kMiB, &prop, 0));

  int fd = -1;
  CU_OK(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  CHECK(fd >= 0);
  CUmemGenericAllocationHandle imported;
  CU_OK(cuMemImportFromShareableHandle(&imported, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                                       CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
  close(fd);
  CHECK(imported != h);
  CUdeviceptr va;
  CU_OK(cuMemAddressReserve(&va, 4 * kMiB, 0, 0, 0));
  CU_OK(cuMemMap(va, 2 * kMiB, 0, h, 0));
  CU_OK(cuMemMap(va + 2 * kMiB, 2 * kMiB, 0, imported, 0));
  *reinterpret_cast<int*>(va) = 1234;
  CHECK(*reinterpret_cast<int*>(va + 2 * kMiB) == 1234);  // the import maps the same memory
  unsigned long long types = 0;
  CU_OK(cuPointerGetAttribute(&types, CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, va));
  CHECK(types == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  CU_OK(cuMemsetD8(va + 2 * kMiB - 8, 7, 16));  // one memset across two adjacent mappings
  CU_OK(cuMemUnmap(va, 4 * kMiB));              // both mappings at once
  CU_OK(cuMemRelease(imported));
  CU_OK(cuMemRelease(h));
  CU_OK(cuMemAddressFree(va, 4 * kMiB));
  CHECK(free_bytes() == free_before);

  CUmemAllocationProp plain = device_prop(1);
  CU_OK(cuMemCreate(&h, 2 * kMiB, &plain, 0));
  CHECK(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_FABRIC, 0) == CUDA_ERROR_NOT_SUPPORTED);
  CU_OK(cuMemRelease(h));

  CUmemAllocationProp host = {};
  host.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  host.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
  CU_OK(cuMemCreate(&h, 2 * kMiB, &host, 0));
  CHECK(free_bytes() == free_before);  // host memory is not device capacity
  CU_OK(cuMemRelease(h));

  CUmemAllocationProp bad = device_prop(5);
  CHECK(cuMemCreate(&h, 2 * kMiB, &bad, 0) == CUDA_ERROR_INVALID_DEVICE);
  use_primary(0);
}
