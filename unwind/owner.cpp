#include "unwind/owner.hpp"

#include "unwind/module_map.hpp"
#include "unwind/python_frames.hpp"
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

// The layers between Python code and the C it calls: the interpreter itself, libffi and
// ctypes, cffi. An allocation that reaches the driver through them belongs to the Python code
// that made the call, not to the layer.
bool is_binding_glue(std::string_view path) {
  const std::string_view base = base_name(path);
  return base.starts_with("libffi") || base.starts_with("_ctypes") || base.starts_with("_cffi_backend") ||
         base.starts_with("libpython") || base.starts_with("python");
}

template <class Lookup>
std::string owner_of(std::span<const uintptr_t> pcs, Lookup&& module_of, std::string_view exe) {
  std::string_view last;
  for (uintptr_t pc : pcs) {
    if (is_python_frame(pc)) {
      // Python code called the driver with nothing of its own in between (a builtin).
      if (std::string o = python_owner(pcs); !o.empty()) return o;
      continue;
    }
    // Return addresses: the call is one byte earlier (and in the caller's module).
    std::string_view path = module_of(pc > 0 ? pc - 1 : 0);
    if (path.empty()) continue;  // anonymous memory (JIT code) says nothing
    if (!is_infrastructure(path)) {
      if (is_binding_glue(path)) {
        std::string o = python_owner(pcs);
        return o.empty() ? std::string("python") : o;
      }
      return owner_name(path, exe);
    }
    last = path;
  }
  return last.empty() ? std::string("unknown") : owner_name(last, exe);
}

}  // namespace

std::string python_package(std::string_view filename) {
  if (filename.empty() || filename.front() == '<') return {};  // <frozen ...>, <string>, <stdin>
  for (std::string_view dir : {std::string_view("/site-packages/"), std::string_view("/dist-packages/")}) {
    size_t at = filename.rfind(dir);
    if (at == std::string_view::npos) continue;
    std::string_view rest = filename.substr(at + dir.size());
    std::string_view top = rest.substr(0, rest.find('/'));
    if (top.ends_with(".py")) top.remove_suffix(3);
    if (!top.empty()) return std::string(top);
  }
  // The standard library: <prefix>/lib/python3.N/... outside any site-packages.
  if (has(filename, "/lib/python3") || has(filename, "/lib64/python3")) return {};
  return std::string(base_name(filename));  // the user's own code: named by its file
}

std::string python_owner(std::span<const uintptr_t> pcs) {
  // The innermost Python frame outside the standard library decides: an installed package
  // (torch, transformers, cupy) by its name; the user's own code by the script it runs from,
  // the outermost such frame's file (the entry point), so one program is one owner.
  std::string user;
  for (uintptr_t pc : pcs) {
    PythonFrameInfo info;
    if (!describe_python_frame(pc, &info)) continue;
    std::string_view f = info.filename;
    if (f.empty() || f.front() == '<') continue;
    bool site = has(f, "/site-packages/") || has(f, "/dist-packages/");
    std::string pkg = python_package(f);
    if (pkg.empty()) continue;
    if (site && user.empty()) return pkg;
    if (!site) user = pkg;
  }
  return user;
}

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
