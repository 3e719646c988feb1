// Shared helpers of the simulated-driver tests.
//
// The test process runs with SIMCUDA_DEVICES=2 and SIMCUDA_MEMORY=256M (set by main.cpp before
// the driver reads its environment). Tests that need a pristine process or another
// environment (init rules, fault injection, malformed variables, the call log) re-run this
// executable on one hidden test case with run_child().
#pragma once

#include <cuda.h>

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#define CU_OK(expr) REQUIRE((expr) == CUDA_SUCCESS)

namespace simtest {

constexpr size_t kMiB = 1u << 20;
constexpr size_t kCapacity = 256 * kMiB;

// cuInit(0), then the primary context of `dev` retained (once per process) and current.
CUcontext use_primary(int dev = 0);

size_t free_bytes();  // cuMemGetInfo_v2 on the current context

// An entry point through the resolver, as the runtime gets it; also how the tests reach the
// _ptsz twins and legacy ABIs, which a client's cuda.h does not declare.
template <typename PFN>
PFN resolve(const char* name, int version, cuuint64_t flags = 0) {
  void* fn = nullptr;
  REQUIRE(cuGetProcAddress(name, &fn, version, flags, nullptr) == CUDA_SUCCESS);
  REQUIRE(fn != nullptr);
  return reinterpret_cast<PFN>(fn);
}
inline size_t footprint(size_t n) { return (n + 511) / 512 * 512; }

struct ChildResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};
// Runs the hidden test case `name` of this executable in a fresh process whose environment is
// this one minus every SIMCUDA_* variable, plus `env` ("NAME=value").
ChildResult run_child(const std::string& name, const std::vector<std::string>& env);

}  // namespace simtest
