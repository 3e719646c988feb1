// cuInit and the calls the runtime makes before it (version, export table).
#include "internal.h"

namespace sim {
namespace {
std::atomic<bool> g_initialized{false};
}  // namespace

bool initialized() { return g_initialized.load(std::memory_order_acquire); }

}  // namespace sim

SIM_API CUresult cuInit(unsigned int Flags) {
  SIM_FAULT_CHECK();
  if (Flags != 0) return CUDA_ERROR_INVALID_VALUE;
  // A machine without devices fails cuInit and stays uninitialised, as the real driver does.
  if (sim::config().devices == 0) return CUDA_ERROR_NO_DEVICE;
  sim::g_initialized.store(true, std::memory_order_release);
  return CUDA_SUCCESS;
}

SIM_API CUresult cuDriverGetVersion(int* driverVersion) {
  SIM_FAULT_CHECK();
  if (driverVersion == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *driverVersion = sim::kDriverVersion;
  return CUDA_SUCCESS;
}

// The runtime's private interface is not simulated: failing here makes the real libcudart
// stop cleanly (cudaErrorInitializationError) after it has resolved all its entry points.
SIM_API CUresult cuGetExportTable(const void** ppExportTable, const CUuuid* pExportTableId) {
  SIM_FAULT_CHECK();
  if (ppExportTable != nullptr) *ppExportTable = nullptr;
  return CUDA_ERROR_NOT_SUPPORTED;
}
