// Shared plumbing of the simulated libcudart: entry/exit helpers that every public function uses.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "simcuda/resolve.h"

// Public runtime functions: default visibility; the version script gives them the libcudart.so.13 node.
#define CUDART_EXPORT extern "C" __attribute__((visibility("default")))

namespace simcudart SIMCUDA_HIDDEN {

using simcuda_resolve::DriverTable;

inline const DriverTable& drv() { return simcuda_resolve::driver(); }

// Records a failure as this thread's last error (or the process's sticky error) and returns it.
cudaError_t fail(cudaError_t e);
// Maps a driver result; failures are recorded like fail().
cudaError_t check(CUresult r);

// The runtime's lazy initialisation without a context: driver resolved, device list known.
// Returns the (recorded) error if the runtime cannot work at all.
cudaError_t enter_no_context();
// As above, and make sure a context is current on this thread: the one the program made current through
// the driver API, otherwise the primary context of this thread's device (retained on first use).
cudaError_t enter();

// A sticky error stays for the life of the process, as after a device fault on real hardware.
cudaError_t sticky_error();

int device_count();
// Ordinal -> CUdevice as the driver numbers them.
CUdevice cu_device(int ordinal);
// The device the runtime would use now on this thread (current context's device, else the selected one).
int current_device();

}  // namespace simcudart
