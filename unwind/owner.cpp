#include "unwind/owner.hpp"

#include "unwind/module_map.hpp"
#include "unwind/symbolizer.hpp"

namespace memtrace::unwind {

namespace {

std::string_view base_name(std::string_view p) {
  size_t s = p.rfind('/');
  return s == std::string_view::npos ? p : p.substr(s + 1);
}

bool has(std::string_view s, std::string_view needle) {
  return s.find(needle) != std::string_view::npos;
}

struct Rule {
  std::string_view needle;  // looked for in the file name
  std::string_view owner;
};

// CUDA libraries first: they also live inside torch/, cupy/ and jaxlib/ trees.
constexpr Rule kLibraryRules[] = {
    {"libnccl", "nccl"},         {"libcublas", "cublas"},     {"libcudnn", "cudnn"},
    {"libcufft", "cufft"},       {"libcurand", "curand"},     {"libcusparse", "cusparse"},
    {"libcusolver", "cusolver"}, {"libnvrtc", "nvrtc"},       {"libcudart", "cudart"},
};

template <class Lookup>
std::string owner_of(std::span<const uintptr_t> pcs, Lookup&& module_of, std::string_view exe) {
  std::string_view last;
  for (uintptr_t pc : pcs) {
    // Return addresses: the call is one byte earlier (and in the caller's module).
    std::string_view path = module_of(pc > 0 ? pc - 1 : 0);
    if (path.empty()) continue;  // anonymous memory (JIT code) says nothing
    if (!is_infrastructure(path)) return owner_name(path, exe);
    last = path;
  }
  return last.empty() ? std::string("unknown") : owner_name(last, exe);
}

}  // namespace

std::string owner_name(std::string_view path, std::string_view exe_path) {
  if (path.empty()) return "unknown";
  const std::string_view base = base_name(path);
  for (const Rule& r : kLibraryRules)
    if (has(base, r.needle)) return std::string(r.owner);
  if (base.starts_with("libtorch") || base.starts_with("libc10") ||
      ((has(path, "/torch/") || has(path, "/functorch/")) && base.starts_with("_C") &&
       has(base, ".cpython")))
    return "torch";
  if (base.starts_with("libxla") || has(base, "xla_extension") || has(path, "jaxlib") ||
      has(path, "/jax_plugins/"))
    return "xla";
  if (has(path, "/cupy/") || has(path, "/cupy_backends/") || base.starts_with("cupy"))
    return "cupy";
  if (base.starts_with("python") || base.starts_with("libpython")) return "python";
  if (path == exe_path) return std::string(base);
  // libfoo.so.3 -> foo; foo.cpython-311-x86_64-linux-gnu.so -> foo
  std::string_view name = base;
  if (name.starts_with("lib") && name.size() > 3) name.remove_prefix(3);
  for (size_t at = 0; (at = name.find(".so", at)) != std::string_view::npos; ++at) {
    if (at + 3 == name.size() || name[at + 3] == '.') {
      name = name.substr(0, at);
      break;
    }
  }
  if (size_t at = name.find(".cpython-"); at != std::string_view::npos) name = name.substr(0, at);
  return std::string(name.empty() ? base : name);
}

bool is_infrastructure(std::string_view path) {
  if (path.empty()) return false;
  if (path == self_module()) return true;
  const std::string_view base = base_name(path);
  return base.starts_with("libcuda.so") || base.starts_with("libcudart.so") ||
         base.starts_with("libcudart-") || base.starts_with("libmemtrace");
}

std::string owner_of_stack(std::span<const uintptr_t> pcs, Symbolizer& sym,
                           std::string_view exe_path) {
  return owner_of(pcs, [&](uintptr_t a) { return sym.module_of(a); }, exe_path);
}

std::string owner_of_stack(std::span<const uintptr_t> pcs, ModuleMap& modules,
                           std::string_view exe_path) {
  return owner_of(pcs, [&](uintptr_t a) { return modules.path_of(a); }, exe_path);
}

}  // namespace memtrace::unwind
