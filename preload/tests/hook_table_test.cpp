// What the hook table promises (hook_table.hpp, hook_list.hpp): every wrapped name is found by its
// exact spelling and by nothing else, internal-only names are never handed out, and the export
// list is exactly the wrapped names (plus dlsym and the two pluggable-allocator entry points).
#include <catch2/catch.hpp>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "include/memtrace/memtrace_v1.h"
#include "preload/driver_decls.hpp"
#include "preload/hook_list.hpp"
#include "preload/hook_table.hpp"

using namespace memtrace::preload;

namespace {

std::set<std::string> wrapped_names() {
  std::set<std::string> out;
#define MEMTRACE_COLLECT(n) out.insert(#n);
  MEMTRACE_DRIVER_WRAPPED(MEMTRACE_COLLECT)
  MEMTRACE_NCCL_WRAPPED(MEMTRACE_COLLECT)
#undef MEMTRACE_COLLECT
  return out;
}

std::set<std::string> internal_names() {
  std::set<std::string> out;
#define MEMTRACE_COLLECT(n) out.insert(#n);
  MEMTRACE_DRIVER_INTERNAL(MEMTRACE_COLLECT)
#undef MEMTRACE_COLLECT
  return out;
}

}  // namespace

TEST_CASE("every wrapped name resolves to its own hook and wrapper", "[hook_table]") {
  const std::set<std::string> wrapped = wrapped_names();
  int seen = 0;
  for (int i = 0; i < kHookCount; ++i) {
    const Hook h = static_cast<Hook>(i);
    const std::string name = hook_name(h);
    INFO(name);
    if (!wrapped.count(name)) continue;
    ++seen;
    CHECK(classify_wrapped_name(name.c_str()) == i);
    CHECK(hook_wrapper(h) != nullptr);
  }
  CHECK(seen == static_cast<int>(wrapped.size()));
  // The wrapper is the exported function of that name, not some other one.
  CHECK(hook_wrapper(Hook::cuMemAlloc_v2) == reinterpret_cast<void*>(&::cuMemAlloc_v2));
  CHECK(hook_wrapper(Hook::cuMemFree_v2) == reinterpret_cast<void*>(&::cuMemFree_v2));
  CHECK(hook_wrapper(Hook::cuGetProcAddress_v2) == reinterpret_cast<void*>(&::cuGetProcAddress_v2));
}

TEST_CASE("names memtrace only calls are never handed out", "[hook_table]") {
  const std::set<std::string> internal = internal_names();
  REQUIRE_FALSE(internal.empty());
  for (int i = 0; i < kHookCount; ++i) {
    const Hook h = static_cast<Hook>(i);
    if (!internal.count(hook_name(h))) continue;
    INFO(hook_name(h));
    CHECK(hook_wrapper(h) == nullptr);
    CHECK(classify_wrapped_name(hook_name(h)) == -1);
  }
}

TEST_CASE("unknown names, prefixes and extensions of hooked names are not hooked", "[hook_table]") {
  for (const char* name : {"", "c", "cu", "cuMem", "cuMemAlloc_v", "cuMemAlloc_v22", "cuMemAlloc_v2 ",
                           "cuMemAlloc_v2x", "cudnnCreate", "cudaMalloc", "cublasCreate_v2", "ncclMem",
                           "ncclMemAllocX", "nccl", "malloc", "dlsym", "CUMEMALLOC_V2", "zzz"}) {
    INFO("'" << name << "'");
    CHECK(classify_wrapped_name(name) == -1);
  }
  CHECK(classify_wrapped_name(nullptr) == -1);
}

TEST_CASE("versioned names: each ABI variant is its own hook, legacy ones none", "[hook_table]") {
  // The unversioned entry points have 32-bit ABIs and are never wrapped (hook_list.hpp).
  for (const char* legacy : {"cuMemAlloc", "cuMemAllocPitch", "cuMemFree", "cuMemAllocHost", "cuMemHostRegister",
                             "cuCtxDestroy", "cuDevicePrimaryCtxReset", "cuDevicePrimaryCtxRelease",
                             "cuMemGetAddressRange"}) {
    INFO(legacy);
    CHECK(classify_wrapped_name(legacy) == -1);
  }
  CHECK(classify_wrapped_name("cuMemAlloc_v2") == static_cast<int>(Hook::cuMemAlloc_v2));
  CHECK(classify_wrapped_name("cuGetProcAddress") == static_cast<int>(Hook::cuGetProcAddress));
  CHECK(classify_wrapped_name("cuGetProcAddress_v2") == static_cast<int>(Hook::cuGetProcAddress_v2));
  CHECK(classify_wrapped_name("cuMemAllocAsync") == static_cast<int>(Hook::cuMemAllocAsync));
  CHECK(classify_wrapped_name("cuMemAllocAsync_ptsz") == static_cast<int>(Hook::cuMemAllocAsync_ptsz));
  CHECK(classify_wrapped_name("cuMemFreeAsync_ptsz") == static_cast<int>(Hook::cuMemFreeAsync_ptsz));
  // Per-thread-stream variants of calls memtrace only makes itself are not handed out either.
  CHECK(classify_wrapped_name("cuStreamIsCapturing_ptsz") == -1);
}

TEST_CASE("NCCL hooks are exactly the NCCL names", "[hook_table]") {
  for (int i = 0; i < kHookCount; ++i) {
    const Hook h = static_cast<Hook>(i);
    INFO(hook_name(h));
    CHECK(is_nccl_hook(h) == (std::string(hook_name(h)).rfind("nccl", 0) == 0));
  }
}

TEST_CASE("the export list is the wrapped names, dlsym, the pluggable allocator and the public API", "[hook_table]") {
  std::ifstream in(MEMTRACE_EXPORTS_MAP);
  REQUIRE(in);
  std::stringstream text;
  text << in.rdbuf();
  std::string map = text.str();
  // The names between "global:" and "local:", without the comment.
  const size_t from = map.find("global:"), to = map.find("local:");
  REQUIRE(from != std::string::npos);
  REQUIRE(to != std::string::npos);
  const std::string globals = map.substr(from + 7, to - from - 7);
  std::set<std::string> exported;
  const std::regex name("[A-Za-z_][A-Za-z0-9_]*");
  for (auto it = std::sregex_iterator(globals.begin(), globals.end(), name); it != std::sregex_iterator(); ++it)
    exported.insert(it->str());
  std::set<std::string> want = wrapped_names();
  want.insert({"dlsym", "memtrace_malloc", "memtrace_free", "InitializeInjectionNvtx2"});
#define MEMTRACE_V1_NAME(x) want.insert("memtrace_v1_" #x);
  MEMTRACE_V1_SYMBOLS(MEMTRACE_V1_NAME)
#undef MEMTRACE_V1_NAME
  CHECK(exported == want);
}
