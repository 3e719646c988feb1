// Who asked for memory: the module of the first frame outside memtrace, the CUDA driver and
// the CUDA runtime, normalised to a short name (nccl, cublas, cudnn, torch, xla, cupy,
// cudart, the program's name, or the library's base name). When that frame is binding glue
// (the interpreter, libffi, ctypes, cffi), the Python code that made the call owns it instead:
// python_owner() below.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace memtrace::unwind {

class Symbolizer;
class ModuleMap;

// The owner a Python file stands for: the top-level package for a file under site-packages or
// dist-packages, "" for the standard library and pseudo-files (<frozen ...>), the file's base
// name for the user's own code.
std::string python_package(std::string_view filename);
// The owner of a stack by its Python frames (innermost outside the standard library: a package,
// or the user's entry script); "" when it has none that says.
std::string python_owner(std::span<const uintptr_t> pcs);
// Short name for a module path. exe_path is the main program's path.
std::string owner_name(std::string_view module_path, std::string_view exe_path);
// True for memtrace itself, libcuda*, and the shared CUDA runtime (libcudart*).
bool is_infrastructure(std::string_view module_path);
// Owner of a stack (innermost first). When every frame is infrastructure: the outermost
// one's owner (e.g. "cudart"); "unknown" when there are no frames.
std::string owner_of_stack(std::span<const uintptr_t> pcs, Symbolizer& sym, std::string_view exe_path);
// The same over the cheaper dl_iterate_phdr module map (module_map.hpp).
std::string owner_of_stack(std::span<const uintptr_t> pcs, ModuleMap& modules,
                           std::string_view exe_path);

}  // namespace memtrace::unwind
