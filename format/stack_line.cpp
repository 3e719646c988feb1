#include "format/stack_line.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <cstdlib>

namespace memtrace::format {

namespace {

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
bool ends_with(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.substr(s.size() - p.size()) == p;
}
bool contains(std::string_view s, std::string_view p) { return s.find(p) != std::string_view::npos; }

// The qualified name without a leading return type: demangled template functions carry one
// ("at::Tensor at::_ops::add_Tensor::call(...)"). The name is what follows the last space at
// template and parenthesis depth 0 before the parameter list.
std::string_view qualified_name(std::string_view name) {
  std::string_view head = without_parameters(name);
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i < head.size(); ++i) {
    char c = head[i];
    if (c == '<' || c == '(') ++depth;
    else if ((c == '>' || c == ')') && depth > 0) --depth;
    else if (c == ' ' && depth == 0) start = i + 1;
  }
  // "operator<" and friends contain '<' without a matching '>': the depth count is then off, which
  // only means the return type stays; the prefix tests below still see the namespace first when
  // there is no return type, the common case.
  return head.substr(start);
}

// Namespaces and name prefixes of each kind. A prefix matches the qualified name (return type
// dropped), so "at::_ops::" matches "at::Tensor at::_ops::add_Tensor::call(...)".
constexpr std::string_view kProfilerPrefixes[] = {
    "memtrace::", "torch::unwind::", "torch::CapturedTraceback", "c10::Backtrace", "c10::get_backtrace",
    "c10::get_lazy_backtrace", "torch::cuda::(anonymous namespace)::gather",
};
constexpr std::string_view kAllocatorPrefixes[] = {
    "c10::cuda::CUDACachingAllocator", "c10::CachingDeviceAllocator", "c10::cuda::MemPool",
    "c10::CachingAllocator", "at::detail::empty_", "at::detail::_empty_", "c10::StorageImpl",
    "c10::make_intrusive<c10::StorageImpl", "c10::intrusive_ptr<c10::StorageImpl", "at::native::empty_cuda",
    "at::native::empty_strided_cuda", "at::cuda::getCurrentCUDABlasHandle", "cudart::", "__cudart",
};
constexpr std::string_view kGluePrefixes[] = {
    "ffi_call", "ffi_closure", "_ctypes_", "_call_function_pointer", "PyCFuncPtr_call", "pybind11::",
    "c10::impl::", "c10::Dispatcher::", "c10::KernelFunction", "c10::BoxedKernel", "c10::OperatorHandle",
    "c10::callUnboxedKernelFunction", "at::_ops::", "torch::autograd::VariableType::",
    "torch::ADInplaceOrView::", "torch::autograd::THPVariable_", "torch::autograd::TypeError_to_NotImplemented_",
    "at::(anonymous namespace)::wrapper_", "at::(anonymous namespace)::(anonymous namespace)::wrapper_",
    "torch::autograd::(anonymous namespace)::", "std::__invoke", "std::_Function_handler", "std::function<",
};
constexpr std::string_view kInterpreterPrefixes[] = {
    "_Py",           "method_vectorcall", "cfunction_",    "slot_tp_",       "vectorcall_",
    "object_vacall", "run_eval_code_obj", "run_mod",       "pymain_",        "pyrun_",
    "builtin_exec",  "function_code_fastlocals",           "call_function",  "do_call_core",
    "wrapper_call",  "wrapperdescr_call", "method_vectorcall_", "partial_vectorcall",
};
constexpr std::string_view kStartupNames[] = {
    "_start", "__libc_start_main", "__libc_start_call_main", "start_thread", "clone", "clone3",
};

template <size_t N>
bool any_prefix(std::string_view s, const std::string_view (&prefixes)[N]) {
  for (std::string_view p : prefixes)
    if (starts_with(s, p)) return true;
  return false;
}

// Py_RunMain, PyObject_Call, PyEval_EvalCode: CPython's public C API is "Py" then an upper-case
// letter or '_'; "Pygments" style names of user code do not follow that.
bool cpython_api(std::string_view n) {
  return n.size() > 2 && n[0] == 'P' && n[1] == 'y' && ((n[2] >= 'A' && n[2] <= 'Z') || n[2] == '_');
}

// cudaMalloc, cuMemAlloc_v2, cuMemCreate: the runtime's and the driver's entry points.
bool cuda_api(std::string_view n) {
  if (starts_with(n, "cuda") && n.size() > 4 && n[4] >= 'A' && n[4] <= 'Z') return true;
  return starts_with(n, "cu") && n.size() > 2 && n[2] >= 'A' && n[2] <= 'Z';
}

std::string_view base_name(std::string_view file) {
  size_t slash = file.rfind('/');
  return slash == std::string_view::npos ? file : file.substr(slash + 1);
}

}  // namespace

const char* frame_kind_name(FrameKind k) {
  static const char* const kNames[kFrameKindCount] = {"user", "python",    "python library", "profiler",
                                                      "interpreter", "glue", "allocator",      "startup"};
  return kNames[static_cast<int>(k)];
}

FrameKind classify_frame(std::string_view name, std::string_view file) {
  if (starts_with(file, "<frozen ")) return FrameKind::PythonLibrary;
  if (ends_with(file, ".py") || ends_with(file, ".pyw"))
    return contains(file, "site-packages/") || contains(file, "dist-packages/") || contains(file, "/lib/python3")
               ? FrameKind::PythonLibrary
               : FrameKind::Python;
  const std::string_view q = qualified_name(name);
  std::string_view lib = base_name(file);
  if (any_prefix(q, kProfilerPrefixes) || contains(q, "gather_with_cpp") || starts_with(lib, "libmemtrace"))
    return FrameKind::Profiler;
  if (any_prefix(q, kAllocatorPrefixes) || cuda_api(q) || starts_with(lib, "libcudart") ||
      starts_with(lib, "libcuda.so"))
    return FrameKind::Allocator;
  if (any_prefix(q, kGluePrefixes) || starts_with(lib, "libffi") || starts_with(lib, "_ctypes"))
    return FrameKind::Glue;
  if (any_prefix(q, kInterpreterPrefixes) || cpython_api(q) || starts_with(lib, "libpython") ||
      contains(file, "/Python/") || contains(file, "/Objects/") || contains(file, "/Modules/") ||
      (starts_with(lib, "python3") && !contains(lib, ".py")))
    return FrameKind::Interpreter;
  for (std::string_view s : kStartupNames)
    if (q == s) return FrameKind::Startup;
  return FrameKind::User;
}

std::vector<size_t> shown_frames(const std::vector<FrameKind>& kinds) {
  bool own_python = false;
  for (FrameKind k : kinds) own_python = own_python || k == FrameKind::Python;
  std::vector<size_t> out;
  for (size_t i = 0; i < kinds.size(); ++i)
    if (kinds[i] == FrameKind::User || kinds[i] == FrameKind::Python ||
        (kinds[i] == FrameKind::PythonLibrary && !own_python))
      out.push_back(i);
  if (!out.empty()) return out;
  for (size_t i = 0; i < kinds.size(); ++i)
    if (kinds[i] != FrameKind::Profiler) out.push_back(i);
  return out;
}

std::string_view without_parameters(std::string_view name) {
  std::string_view s = name;
  // Qualifiers after the parameter list.
  for (bool again = true; again;) {
    again = false;
    for (std::string_view q : {" const", " volatile", " &&", " &", " noexcept"}) {
      if (ends_with(s, q)) {
        s.remove_suffix(q.size());
        again = true;
      }
    }
  }
  if (s.empty() || s.back() != ')') return name;
  int depth = 0;
  for (size_t i = s.size(); i-- > 0;) {
    if (s[i] == ')') ++depth;
    else if (s[i] == '(' && --depth == 0) {
      // "(anonymous namespace)" is a name part, not a parameter list; so is operator().
      std::string_view head = s.substr(0, i);
      if (head.empty()) return name;
      if (ends_with(head, "operator()") || ends_with(head, "operator")) return s.substr(0, i);
      return head;
    }
  }
  return name;
}

namespace {

// A Python file reads as its module path: "torch/autograd/__init__.py" says what "__init__.py"
// does not. Inside an installation that is the part after site-packages/ (or the standard
// library's python3.X/); a relative path is already one; anything else is cut to its base name.
std::string_view python_file(std::string_view file) {
  for (std::string_view root : {"site-packages/", "dist-packages/"})
    if (size_t at = file.rfind(root); at != std::string_view::npos) return file.substr(at + root.size());
  if (size_t at = file.rfind("/lib/python3"); at != std::string_view::npos) {
    size_t slash = file.find('/', at + 5);
    if (slash != std::string_view::npos) return file.substr(slash + 1);
  }
  if (!file.empty() && file[0] != '/') return file;
  return base_name(file);
}

std::string label(std::string_view name, std::string_view file, int64_t line) {
  std::string out{name};
  if (out.empty()) out = "??";
  if (!file.empty()) {
    out += " (";
    out += file;
    if (line != 0) {
      out += ':';
      out += std::to_string(line);
    }
    out += ')';
  }
  return out;
}

}  // namespace

std::string short_frame_label(const FrameText& f) {
  const bool python = ends_with(f.file, ".py") || ends_with(f.file, ".pyw");
  std::string_view file = python ? python_file(f.file) : base_name(f.file);
  if (file == "??") file = {};  // PyTorch's spelling of "no file"
  return label(without_parameters(f.name), file, f.line);
}

std::string frame_label(const FrameText& f) { return label(f.name, f.file, f.line); }

namespace {

// Bytes of s that hold at most `width` characters, never ending inside a UTF-8 sequence.
size_t utf8_prefix(std::string_view s, size_t width) {
  size_t chars = 0, i = 0;
  while (i < s.size()) {
    size_t len = 1;
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0xf0) len = 4;
    else if (c >= 0xe0) len = 3;
    else if (c >= 0xc0) len = 2;
    if (chars + 1 > width || i + len > s.size()) break;
    i += len;
    ++chars;
  }
  return i;
}

size_t utf8_length(std::string_view s) {
  size_t n = 0;
  for (char c : s)
    if ((static_cast<unsigned char>(c) & 0xc0) != 0x80) ++n;
  return n;
}

}  // namespace

std::string fit_stack_line(const std::vector<std::string>& labels, size_t width) {
  static constexpr std::string_view kSep = " < ";
  std::string out;
  size_t chars = 0;
  for (size_t i = 0; i < labels.size(); ++i) {
    const size_t len = utf8_length(labels[i]) + (i ? kSep.size() : 0);
    const size_t left = labels.size() - i - 1;
    // What the line needs after this label when more follow: " < …+N".
    const size_t tail = left ? kSep.size() + 1 + 1 + std::to_string(left).size() : 0;
    if (width == 0 || chars + len + tail <= width || (left == 0 && chars + len <= width)) {
      if (i) out += kSep;
      out += labels[i];
      chars += len;
      continue;
    }
    if (i == 0) {
      // The innermost label alone is too long: cut it, keep room for "…" and the count.
      size_t room = width > tail + 1 ? width - tail - 1 : 0;
      out.append(labels[0], 0, utf8_prefix(labels[0], room));
      out += "\u2026";
      if (left) out += std::string(kSep) + "\u2026+" + std::to_string(left);
      return out;
    }
    out += std::string(kSep) + "\u2026+" + std::to_string(labels.size() - i);
    return out;
  }
  return out;
}

size_t report_width(int fd) {
  if (isatty(fd)) {
    winsize ws{};
    if (ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col < 40 ? 40 : ws.ws_col;
  }
  if (const char* c = std::getenv("COLUMNS")) {
    char* end = nullptr;
    long v = std::strtol(c, &end, 10);
    if (end != c && *end == '\0' && v >= 40 && v <= 10000) return static_cast<size_t>(v);
  }
  return kDefaultWidth;
}

}  // namespace memtrace::format
