// cuGetErrorName / cuGetErrorString over every CUresult the toolkit header defines.
#include "internal.h"

namespace {

struct ErrorText {
  int code;
  const char* name;
  const char* text;
};

// The descriptions are the first sentence of each code's comment in cuda.h.
constexpr ErrorText kErrors[] = {
#include "errors_table.inc"
};

const ErrorText* find(CUresult error) {
  for (const ErrorText& e : kErrors) {
    if (e.code == static_cast<int>(error)) return &e;
  }
  return nullptr;
}

}  // namespace

SIM_API CUresult cuGetErrorString(CUresult error, const char** pStr) {
  SIM_FAULT_CHECK();
  if (pStr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const ErrorText* e = find(error);
  *pStr = e ? e->text : nullptr;
  return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

SIM_API CUresult cuGetErrorName(CUresult error, const char** pStr) {
  SIM_FAULT_CHECK();
  if (pStr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const ErrorText* e = find(error);
  *pStr = e ? e->name : nullptr;
  return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
