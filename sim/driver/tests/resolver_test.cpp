// cuGetProcAddress[_v2]: lookups by base name, version and stream mode; the export table.
#include <cudaTypedefs.h>
#include <dlfcn.h>
#include <elf.h>

#include <fstream>
#include <iterator>
#include <map>
#include <set>

#include "helpers.h"

using namespace simtest;

namespace {

void* lib() {
  static void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  REQUIRE(h != nullptr);
  return h;
}

void* sym(const char* name) {
  void* p = dlsym(lib(), name);
  REQUIRE(p != nullptr);
  return p;
}

struct Lookup {
  CUresult result;
  CUdriverProcAddressQueryResult status;
  void* fn;
};

Lookup lookup(const char* name, int version, cuuint64_t flags = 0) {
  Lookup l{CUDA_ERROR_UNKNOWN, static_cast<CUdriverProcAddressQueryResult>(-1), reinterpret_cast<void*>(1)};
  l.result = cuGetProcAddress(name, &l.fn, version, flags, &l.status);
  return l;
}

void* found(const char* name, int version, cuuint64_t flags = 0) {
  Lookup l = lookup(name, version, flags);
  INFO(name << " @" << version << " flags " << flags);
  REQUIRE(l.result == CUDA_SUCCESS);
  REQUIRE(l.status == CU_GET_PROC_ADDRESS_SUCCESS);
  return l.fn;
}

// Defined function symbols of the library's dynamic symbol table, read from the file.
std::vector<std::string> exported_functions() {
  Dl_info info;
  REQUIRE(dladdr(sym("cuInit"), &info) != 0);
  std::ifstream in(info.dli_fname, std::ios::binary);
  std::string image((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  REQUIRE(image.size() > sizeof(Elf64_Ehdr));
  auto* eh = reinterpret_cast<const Elf64_Ehdr*>(image.data());
  auto* sections = reinterpret_cast<const Elf64_Shdr*>(image.data() + eh->e_shoff);
  std::vector<std::string> names;
  for (int i = 0; i < eh->e_shnum; ++i) {
    if (sections[i].sh_type != SHT_DYNSYM) continue;
    const char* strtab = image.data() + sections[sections[i].sh_link].sh_offset;
    auto* syms = reinterpret_cast<const Elf64_Sym*>(image.data() + sections[i].sh_offset);
    for (size_t k = 0; k < sections[i].sh_size / sizeof(Elf64_Sym); ++k) {
      if (syms[k].st_shndx == SHN_UNDEF || ELF64_ST_TYPE(syms[k].st_info) != STT_FUNC) continue;
      names.emplace_back(strtab + syms[k].st_name);
    }
  }
  return names;
}

std::string base_name(std::string name) {
  for (const char* suffix : {"_ptsz", "_ptds"}) {
    if (name.size() > 5 && name.compare(name.size() - 5, 5, suffix) == 0) name.resize(name.size() - 5);
  }
  size_t v = name.rfind("_v");
  if (v != std::string::npos && v + 2 < name.size() &&
      name.find_first_not_of("0123456789", v + 2) == std::string::npos) {
    name.resize(v);
  }
  return name;
}

}  // namespace

TEST_CASE("resolver picks the variant by version", "[resolver]") {
  void* legacy = found("cuMemAlloc", 2000);
  void* v2 = found("cuMemAlloc", 3020);
  CHECK(legacy == sym("cuMemAlloc"));
  CHECK(v2 == sym("cuMemAlloc_v2"));
  CHECK(legacy != v2);
  CHECK(found("cuMemAlloc", 3010) == legacy);
  CHECK(found("cuMemAlloc", 13000) == v2);
  CHECK(found("cuMemAlloc", 99999) == v2);  // newer than the driver: the newest variant

  // The runtime's self-lookups: the 11030 answer is the 4-argument resolver.
  CHECK(found("cuGetProcAddress", 11030) == sym("cuGetProcAddress"));
  CHECK(found("cuGetProcAddress", 12000) == sym("cuGetProcAddress_v2"));
  CHECK(sym("cuGetProcAddress") != sym("cuGetProcAddress_v2"));

  CHECK(found("cuMemHostRegister", 4000) == sym("cuMemHostRegister"));
  CHECK(found("cuMemHostRegister", 6050) == sym("cuMemHostRegister_v2"));
  CHECK(found("cuCtxCreate", 2000) == sym("cuCtxCreate"));
  CHECK(found("cuCtxCreate", 3020) == sym("cuCtxCreate_v2"));
  CHECK(found("cuCtxCreate", 11040) == sym("cuCtxCreate_v3"));
  CHECK(found("cuCtxCreate", 12050) == sym("cuCtxCreate_v4"));
  CHECK(found("cuCtxCreate", 13000) == sym("cuCtxCreate_v4"));
  CHECK(found("cuEventElapsedTime", 12080) == sym("cuEventElapsedTime_v2"));
  CHECK(found("cuMemGetDefaultMemPool", 13000) == sym("cuMemGetDefaultMemPool"));
  CHECK(found("cuInit", 2000) == sym("cuInit"));

  Lookup old = lookup("cuMemHostRegister", 3000);
  CHECK(old.result == CUDA_ERROR_NOT_FOUND);
  CHECK(old.status == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  CHECK(old.fn == nullptr);
}

TEST_CASE("resolver honours the per-thread default stream flag", "[resolver]") {
  CHECK(found("cuMemAllocAsync", 11020) == sym("cuMemAllocAsync"));
  CHECK(found("cuMemAllocAsync", 11020, CU_GET_PROC_ADDRESS_LEGACY_STREAM) == sym("cuMemAllocAsync"));
  CHECK(found("cuMemAllocAsync", 11020, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) == sym("cuMemAllocAsync_ptsz"));
  CHECK(found("cuMemFreeAsync", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) == sym("cuMemFreeAsync_ptsz"));
  CHECK(found("cuMemAllocFromPoolAsync", 12000, 2) == sym("cuMemAllocFromPoolAsync_ptsz"));
  CHECK(found("cuMemcpyHtoD", 7000, 2) == sym("cuMemcpyHtoD_v2_ptds"));
  CHECK(found("cuMemcpyHtoD", 7000, 0) == sym("cuMemcpyHtoD_v2"));
  CHECK(found("cuMemcpyHtoD", 6000, 2) == sym("cuMemcpyHtoD_v2"));  // no per-thread variant that old
  CHECK(found("cuStreamSynchronize", 12000, 2) == sym("cuStreamSynchronize_ptsz"));
  CHECK(found("cuMemAlloc", 12000, 2) == sym("cuMemAlloc_v2"));  // no per-thread variant at all
}

TEST_CASE("resolver failures", "[resolver]") {
  Lookup probe = lookup("", 0);  // the runtime's stub-library probe
  CHECK(probe.result == CUDA_ERROR_NOT_FOUND);
  CHECK(probe.status == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  CHECK(probe.fn == nullptr);
  Lookup unknown = lookup("cuNoSuchFunction", 13000);
  CHECK(unknown.result == CUDA_ERROR_NOT_FOUND);
  CHECK(unknown.status == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  CHECK(unknown.fn == nullptr);
  CHECK(lookup("cuMemAlloc_v2", 13000).result == CUDA_ERROR_NOT_FOUND);  // base names only
  void* fn;
  CHECK(cuGetProcAddress("cuInit", nullptr, 13000, 0, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGetProcAddress(nullptr, &fn, 13000, 0, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGetProcAddress("cuInit", &fn, 13000, 4, nullptr) == CUDA_ERROR_INVALID_VALUE);

  // The 4-argument resolver answers the same way.
  auto v1 = reinterpret_cast<PFN_cuGetProcAddress_v11030>(found("cuGetProcAddress", 11030));
  CHECK(v1("cuMemAlloc", &fn, 3020, 0) == CUDA_SUCCESS);
  CHECK(fn == sym("cuMemAlloc_v2"));
  CHECK(v1("", &fn, 0, 0) == CUDA_ERROR_NOT_FOUND);
  CHECK(fn == nullptr);

  const void* table = reinterpret_cast<void*>(1);
  CUuuid id = {};
  CHECK(cuGetExportTable(&table, &id) == CUDA_ERROR_NOT_SUPPORTED);
  CHECK(table == nullptr);
}

TEST_CASE("every exported function is a distinct cu* entry reachable through the resolver", "[resolver][exports]") {
  std::vector<std::string> names = exported_functions();
  INFO("exported functions: " << names.size());
  REQUIRE(names.size() >= 150);
  std::set<void*> addresses;
  std::map<std::string, std::set<void*>> reachable;  // base name -> every pointer the resolver gives
  for (const std::string& name : names) {
    CHECK(name.rfind("cu", 0) == 0);
    addresses.insert(sym(name.c_str()));
    const std::string base = base_name(name);
    if (reachable.count(base) != 0) continue;
    std::set<void*>& ptrs = reachable[base];
    for (int version = 2000; version <= 13000; version += 10) {
      for (cuuint64_t flags : {0, 2}) {
        void* fn = nullptr;
        if (cuGetProcAddress(base.c_str(), &fn, version, flags, nullptr) == CUDA_SUCCESS) ptrs.insert(fn);
      }
    }
  }
  CHECK(addresses.size() == names.size());  // no two names share an implementation
  for (const std::string& name : names) {
    INFO(name);
    CHECK(reachable[base_name(name)].count(sym(name.c_str())) == 1);
  }
}
