// Tests of the simulated libnccl.so.2 (run with SIMCUDA_DEVICES=2). Buffers are prepared and checked through
// the simulated runtime; NCCL's own driver traffic is observed by the getproc spy, which wraps the memory
// functions NCCL's private resolver hands out.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>

#define GETPROC_SPY_WRAP
#include "../../common/testing/getproc_spy.h"

#include <cuda_runtime_api.h>
#include <elf.h>
#include <nccl.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <thread>
#include <vector>

namespace {

using Calls = std::vector<std::string>;

const Calls kVmmFree = {"cuMemRetainAllocationHandle", "cuMemRelease", "cuMemGetAddressRange_v2",
                        "cuMemUnmap",                  "cuMemRelease", "cuMemAddressFree"};

size_t count(const Calls& calls, const std::string& name) {
  return static_cast<size_t>(std::count(calls.begin(), calls.end(), name));
}

size_t free_on(int device) {
  REQUIRE(cudaSetDevice(device) == cudaSuccess);
  size_t free_bytes = 0, total = 0;
  REQUIRE(cudaMemGetInfo(&free_bytes, &total) == cudaSuccess);
  return free_bytes;
}

struct DynamicSymbol {
  std::string name;
  unsigned char bind;
  uint64_t value;
};

// Reads the dynamic symbol table of the library file, the view `nm -D` gives.
std::vector<DynamicSymbol> dynamic_symbols(const char* path, std::vector<std::string>* needed) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> image((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  REQUIRE(image.size() > sizeof(Elf64_Ehdr));
  auto* eh = reinterpret_cast<const Elf64_Ehdr*>(image.data());
  auto* sh = reinterpret_cast<const Elf64_Shdr*>(image.data() + eh->e_shoff);
  std::vector<DynamicSymbol> out;
  for (int i = 0; i < eh->e_shnum; ++i) {
    if (sh[i].sh_type == SHT_DYNSYM) {
      const char* strtab = image.data() + sh[sh[i].sh_link].sh_offset;
      auto* syms = reinterpret_cast<const Elf64_Sym*>(image.data() + sh[i].sh_offset);
      for (size_t k = 0; k < sh[i].sh_size / sizeof(Elf64_Sym); ++k)
        if (syms[k].st_shndx != SHN_UNDEF && syms[k].st_name)
          out.push_back({strtab + syms[k].st_name, static_cast<unsigned char>(ELF64_ST_BIND(syms[k].st_info)),
                         syms[k].st_value});
    }
    if (sh[i].sh_type == SHT_DYNAMIC && needed) {
      const char* strtab = image.data() + sh[sh[i].sh_link].sh_offset;
      auto* dyn = reinterpret_cast<const Elf64_Dyn*>(image.data() + sh[i].sh_offset);
      for (size_t k = 0; dyn[k].d_tag != DT_NULL; ++k)
        if (dyn[k].d_tag == DT_NEEDED) needed->push_back(strtab + dyn[k].d_un.d_val);
    }
  }
  return out;
}

struct Clique {
  std::vector<ncclComm_t> comms;
  explicit Clique(int n) : comms(static_cast<size_t>(n)) {
    REQUIRE(ncclCommInitAll(comms.data(), n, nullptr) == ncclSuccess);
  }
  ~Clique() {
    for (ncclComm_t c : comms) CHECK(ncclCommDestroy(c) == ncclSuccess);
  }
};

template <typename T>
void* device_copy(int device, const std::vector<T>& v) {
  REQUIRE(cudaSetDevice(device) == cudaSuccess);
  void* p = nullptr;
  REQUIRE(cudaMalloc(&p, v.size() * sizeof(T)) == cudaSuccess);
  REQUIRE(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess);
  return p;
}

template <typename T>
std::vector<T> host_copy(int device, const void* p, size_t n) {
  REQUIRE(cudaSetDevice(device) == cudaSuccess);
  std::vector<T> v(n);
  REQUIRE(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
  return v;
}

}  // namespace

TEST_CASE("version and error strings") {
  int v = 0;
  REQUIRE(ncclGetVersion(&v) == ncclSuccess);
  CHECK(v == NCCL_VERSION_CODE);
  CHECK(std::string(ncclGetErrorString(ncclInvalidArgument)) == "invalid argument");
}

TEST_CASE("ncclX are weak aliases of strong pncclX; no cuda* export, no CUDA library linked") {
  std::vector<std::string> needed;
  auto symbols = dynamic_symbols(SIMNCCL_LIBRARY, &needed);
  std::map<std::string, DynamicSymbol> by_name;
  for (const auto& s : symbols) by_name[s.name] = s;
  size_t public_functions = 0;
  for (const auto& s : symbols) {
    INFO(s.name);
    CHECK(s.name.rfind("cu", 0) != 0);
    bool profiled = s.name.rfind("pnccl", 0) == 0;
    CHECK((profiled || s.name.rfind("nccl", 0) == 0));
    if (profiled) {
      CHECK(s.bind == STB_GLOBAL);
    } else {
      ++public_functions;
      CHECK(s.bind == STB_WEAK);
      auto strong = by_name.find("p" + s.name);
      REQUIRE(strong != by_name.end());
      CHECK(strong->second.value == s.value);
    }
  }
  CHECK(public_functions >= 25);
  for (const auto& n : needed) {
    CHECK(n.find("libcudart") == std::string::npos);
    CHECK(n.find("libcuda.") == std::string::npos);
  }
  // And at run time the two names are one function.
  void* h = dlopen(SIMNCCL_LIBRARY, RTLD_NOW | RTLD_NOLOAD);
  REQUIRE(h);
  CHECK(dlsym(h, "ncclAllReduce") == dlsym(h, "pncclAllReduce"));
  CHECK(dlsym(h, "ncclMemAlloc") == dlsym(h, "pncclMemAlloc"));
  Dl_info info{};
  REQUIRE(dladdr(dlsym(h, "ncclMemAlloc"), &info));
  std::string owner = info.dli_sname ? info.dli_sname : "";
  CHECK((owner == "ncclMemAlloc" || owner == "pncclMemAlloc"));
}

TEST_CASE("communicators allocate VMM channel buffers and a work FIFO, and free them") {
  size_t free0 = free_on(0), free1 = free_on(1);
  getproc_spy::clear_calls();
  {
    Clique clique(2);
    Calls calls = getproc_spy::calls();
    CHECK(count(calls, "cuMemCreate") == 2);
    CHECK(count(calls, "cuMemAddressReserve") == 2);
    CHECK(count(calls, "cuMemMap") == 2);
    CHECK(count(calls, "cuMemSetAccess") == 2);
    CHECK(count(calls, "cuMemGetAllocationGranularity(MINIMUM)") == 2);
    CHECK(count(calls, "cuMemAlloc_v2") == 2);
    CHECK(free_on(0) <= free0 - (4u << 20) - (64u << 10));
    CHECK(free_on(1) <= free1 - (4u << 20) - (64u << 10));
    for (int r = 0; r < 2; ++r) {
      int v = -1;
      REQUIRE(ncclCommCount(clique.comms[static_cast<size_t>(r)], &v) == ncclSuccess);
      CHECK(v == 2);
      REQUIRE(ncclCommCuDevice(clique.comms[static_cast<size_t>(r)], &v) == ncclSuccess);
      CHECK(v == r);
      REQUIRE(ncclCommUserRank(clique.comms[static_cast<size_t>(r)], &v) == ncclSuccess);
      CHECK(v == r);
    }
    getproc_spy::clear_calls();
  }
  // Each rank: NCCL's VMM free sequence for the channel buffer, then the FIFO.
  Calls expected;
  for (int r = 0; r < 2; ++r) {
    expected.insert(expected.end(), kVmmFree.begin(), kVmmFree.end());
    expected.push_back("cuMemFree_v2");
  }
  CHECK(getproc_spy::calls() == expected);
  CHECK(free_on(0) == free0);
  CHECK(free_on(1) == free1);

  // NCCL's private resolver asked the master resolver for its VMM entry points at NCCL's versions.
  bool saw_create = false;
  for (const auto& l : getproc_spy::lookups())
    if (l.via_master && l.name == "cuMemCreate" && l.version == 10020) saw_create = true;
  CHECK(saw_create);
}

TEST_CASE("NCCL_CUMEM_ENABLE=0 makes every buffer a cuMemAlloc_v2 allocation") {
  setenv("NCCL_CUMEM_ENABLE", "0", 1);
  getproc_spy::clear_calls();
  {
    Clique clique(2);
    Calls calls = getproc_spy::calls();
    CHECK(count(calls, "cuMemCreate") == 0);
    CHECK(count(calls, "cuMemAlloc_v2") == 4);
    getproc_spy::clear_calls();
  }
  CHECK(getproc_spy::calls() == Calls(4, "cuMemFree_v2"));

  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  getproc_spy::clear_calls();
  void* p = nullptr;
  REQUIRE(ncclMemAlloc(&p, 1000) == ncclSuccess);
  REQUIRE(ncclMemFree(p) == ncclSuccess);
  CHECK(getproc_spy::calls() == Calls{"cuMemAlloc_v2", "cuMemFree_v2"});
  unsetenv("NCCL_CUMEM_ENABLE");
}

TEST_CASE("ncclMemAlloc and ncclMemFree follow NCCL's VMM sequence") {
  size_t free0 = free_on(0);
  getproc_spy::clear_calls();
  void* p = nullptr;
  REQUIRE(ncclMemAlloc(&p, 1000) == ncclSuccess);
  REQUIRE(p != nullptr);
  CHECK(getproc_spy::calls() == Calls{"cuMemGetAllocationGranularity(RECOMMENDED)", "cuMemCreate",
                                      "cuMemAddressReserve", "cuMemMap", "cuMemSetAccess"});
  CHECK(free_on(0) < free0);

  std::vector<int> data(250, 42);
  REQUIRE(cudaMemcpy(p, data.data(), 1000, cudaMemcpyHostToDevice) == cudaSuccess);
  CHECK(host_copy<int>(0, p, 250) == data);

  getproc_spy::clear_calls();
  REQUIRE(ncclMemFree(p) == ncclSuccess);
  CHECK(getproc_spy::calls() == kVmmFree);
  CHECK(free_on(0) == free0);
  CHECK(ncclMemAlloc(nullptr, 10) == ncclInvalidArgument);
}

TEST_CASE("collectives compute across two ranks") {
  Clique clique(2);
  constexpr size_t n = 1024;
  std::vector<void*> send(2), recv(2);
  std::vector<cudaStream_t> streams(2);
  for (int r = 0; r < 2; ++r) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>((r + 1) * 1000 + i);
    send[static_cast<size_t>(r)] = device_copy(r, v);
    recv[static_cast<size_t>(r)] = device_copy(r, std::vector<float>(2 * n, 0.0f));
    REQUIRE(cudaStreamCreate(&streams[static_cast<size_t>(r)]) == cudaSuccess);
  }

  SECTION("allreduce sum inside a group") {
    REQUIRE(ncclGroupStart() == ncclSuccess);
    for (size_t r = 0; r < 2; ++r)
      REQUIRE(ncclAllReduce(send[r], recv[r], n, ncclFloat, ncclSum, clique.comms[r], streams[r]) == ncclSuccess);
    REQUIRE(ncclGroupEnd() == ncclSuccess);
    for (int r = 0; r < 2; ++r) {
      REQUIRE(cudaSetDevice(r) == cudaSuccess);
      REQUIRE(cudaStreamSynchronize(streams[static_cast<size_t>(r)]) == cudaSuccess);
      auto out = host_copy<float>(r, recv[static_cast<size_t>(r)], n);
      for (size_t i = 0; i < n; ++i) REQUIRE(out[i] == static_cast<float>(3000 + 2 * i));
    }
  }

  SECTION("allreduce from one thread per rank, without a group") {
    std::vector<std::thread> threads;
    std::vector<ncclResult_t> results(2, ncclInternalError);
    for (size_t r = 0; r < 2; ++r)
      threads.emplace_back([&, r] {
        cudaSetDevice(static_cast<int>(r));
        results[r] = ncclAllReduce(send[r], recv[r], n, ncclFloat, ncclMax, clique.comms[r], streams[r]);
      });
    for (auto& t : threads) t.join();
    CHECK(results == std::vector<ncclResult_t>(2, ncclSuccess));
    auto out = host_copy<float>(0, recv[0], n);
    for (size_t i = 0; i < n; ++i) REQUIRE(out[i] == static_cast<float>(2000 + i));
  }

  SECTION("broadcast, reduce, allgather, reducescatter") {
    REQUIRE(ncclGroupStart() == ncclSuccess);
    for (size_t r = 0; r < 2; ++r)
      REQUIRE(ncclBroadcast(send[r], recv[r], n, ncclFloat, 1, clique.comms[r], streams[r]) == ncclSuccess);
    REQUIRE(ncclGroupEnd() == ncclSuccess);
    CHECK(host_copy<float>(0, recv[0], 1)[0] == 2000.0f);

    REQUIRE(ncclGroupStart() == ncclSuccess);
    for (size_t r = 0; r < 2; ++r)
      REQUIRE(ncclReduce(send[r], recv[r], n, ncclFloat, ncclProd, 0, clique.comms[r], streams[r]) == ncclSuccess);
    REQUIRE(ncclGroupEnd() == ncclSuccess);
    CHECK(host_copy<float>(0, recv[0], 2)[1] == 1001.0f * 2001.0f);

    REQUIRE(ncclGroupStart() == ncclSuccess);
    for (size_t r = 0; r < 2; ++r)
      REQUIRE(ncclAllGather(send[r], recv[r], n, ncclFloat, clique.comms[r], streams[r]) == ncclSuccess);
    REQUIRE(ncclGroupEnd() == ncclSuccess);
    auto gathered = host_copy<float>(1, recv[1], 2 * n);
    CHECK(gathered[0] == 1000.0f);
    CHECK(gathered[n] == 2000.0f);

    REQUIRE(ncclGroupStart() == ncclSuccess);
    for (size_t r = 0; r < 2; ++r)
      REQUIRE(ncclReduceScatter(send[r], recv[r], n / 2, ncclFloat, ncclAvg, clique.comms[r], streams[r]) ==
              ncclSuccess);
    REQUIRE(ncclGroupEnd() == ncclSuccess);
    CHECK(host_copy<float>(1, recv[1], 1)[0] == (1000.0f + n / 2 + 2000.0f + n / 2) / 2);
  }

  for (int r = 0; r < 2; ++r) {
    REQUIRE(cudaSetDevice(r) == cudaSuccess);
    REQUIRE(cudaStreamDestroy(streams[static_cast<size_t>(r)]) == cudaSuccess);
    REQUIRE(cudaFree(send[static_cast<size_t>(r)]) == cudaSuccess);
    REQUIRE(cudaFree(recv[static_cast<size_t>(r)]) == cudaSuccess);
  }
}

TEST_CASE("buffer registration") {
  Clique clique(1);
  void* buf = device_copy(0, std::vector<char>(4096, 1));
  getproc_spy::clear_calls();
  void* handle = nullptr;
  REQUIRE(ncclCommRegister(clique.comms[0], buf, 4096, &handle) == ncclSuccess);
  CHECK(getproc_spy::calls() == Calls{"cuMemGetAddressRange_v2"});
  REQUIRE(ncclCommDeregister(clique.comms[0], handle) == ncclSuccess);
  CHECK(ncclCommDeregister(clique.comms[0], handle) == ncclInvalidArgument);
  int on_stack = 0;
  CHECK(ncclCommRegister(clique.comms[0], &on_stack, sizeof(on_stack), &handle) != ncclSuccess);
  CHECK(std::string(ncclGetLastError(clique.comms[0])).size() > 0);

  void* win_buf = nullptr;
  REQUIRE(ncclMemAlloc(&win_buf, 1 << 20) == ncclSuccess);
  ncclWindow_t win = nullptr;
  REQUIRE(ncclCommWindowRegister(clique.comms[0], win_buf, 1 << 20, &win, NCCL_WIN_COLL_SYMMETRIC) == ncclSuccess);
  REQUIRE(ncclCommWindowDeregister(clique.comms[0], win) == ncclSuccess);
  REQUIRE(ncclMemFree(win_buf) == ncclSuccess);
  REQUIRE(cudaFree(buf) == cudaSuccess);
}

TEST_CASE("ncclCommInitRank: a single rank, and two ranks joined in a group or from two threads") {
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  REQUIRE(cudaSetDevice(1) == cudaSuccess);
  ncclComm_t solo = nullptr;
  REQUIRE(ncclCommInitRank(&solo, 1, id, 0) == ncclSuccess);
  int device = -1;
  REQUIRE(ncclCommCuDevice(solo, &device) == ncclSuccess);
  CHECK(device == 1);
  REQUIRE(ncclCommFinalize(solo) == ncclSuccess);
  REQUIRE(ncclCommDestroy(solo) == ncclSuccess);

  ncclComm_t comms[2] = {nullptr, nullptr};
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  REQUIRE(ncclGroupStart() == ncclSuccess);
  for (int r = 0; r < 2; ++r) {
    REQUIRE(cudaSetDevice(r) == cudaSuccess);
    REQUIRE(ncclCommInitRank(&comms[r], 2, id, r) == ncclSuccess);
  }
  REQUIRE(ncclGroupEnd() == ncclSuccess);
  int n = 0;
  REQUIRE(ncclCommCount(comms[1], &n) == ncclSuccess);
  CHECK(n == 2);
  for (ncclComm_t c : comms) REQUIRE(ncclCommDestroy(c) == ncclSuccess);

  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  std::vector<std::thread> threads;
  ncclResult_t results[2] = {ncclInternalError, ncclInternalError};
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      cudaSetDevice(r);
      results[r] = ncclCommInitRank(&comms[r], 2, id, r);
    });
  for (auto& t : threads) t.join();
  REQUIRE(results[0] == ncclSuccess);
  REQUIRE(results[1] == ncclSuccess);
  REQUIRE(ncclCommCuDevice(comms[1], &device) == ncclSuccess);
  CHECK(device == 1);
  for (ncclComm_t c : comms) REQUIRE(ncclCommAbort(c) == ncclSuccess);

  CHECK(ncclCommInitRank(&solo, 2, id, 5) == ncclInvalidArgument);
  CHECK(ncclCommDestroy(nullptr) == ncclSuccess);
}
