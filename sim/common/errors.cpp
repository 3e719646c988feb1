// The runtime's error names and messages, shared by every copy of the runtime stage.
#include "simcuda/resolve.h"

namespace simcuda_resolve {
namespace {

struct ErrorInfo {
  int code;
  const char* name;
  const char* text;
};

constexpr ErrorInfo kErrors[] = {
#define SIM_CUDA_ERROR(id, text) {static_cast<int>(id), #id, text},
#include "simcuda/cuda_errors.inc"
#undef SIM_CUDA_ERROR
};

const ErrorInfo* find(int code) {
  for (const ErrorInfo& e : kErrors)
    if (e.code == code) return &e;
  return nullptr;
}

}  // namespace

bool is_known_cuda_error(int code) { return find(code) != nullptr; }

const char* cuda_error_name(int code) {
  const ErrorInfo* e = find(code);
  return e ? e->name : nullptr;
}

const char* cuda_error_string(int code) {
  const ErrorInfo* e = find(code);
  return e ? e->text : nullptr;
}

}  // namespace simcuda_resolve
