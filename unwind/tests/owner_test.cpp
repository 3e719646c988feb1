#include <sys/mman.h>

#include <catch2/catch.hpp>

#include "unwind/module_map.hpp"
#include "unwind/owner.hpp"
#include "unwind/symbolizer.hpp"
#include "unwind/tests/test_util.hpp"

using memtrace::unwind::is_infrastructure;
using memtrace::unwind::owner_name;
using memtrace::unwind::owner_of_stack;

TEST_CASE("owner_name: module paths to short names", "[owner]") {
  const std::string exe = "/opt/app/bin/trainer";
  struct Case {
    const char* path;
    const char* owner;
  };
  const Case cases[] = {
      {"/usr/lib/x86_64-linux-gnu/libnccl.so.2", "nccl"},
      {"/site-packages/nvidia/nccl/lib/libnccl.so.2.21.5", "nccl"},
      {"/usr/local/cuda/lib64/libcublasLt.so.12", "cublas"},
      {"/usr/local/cuda/lib64/libcublas.so.12.4.5.8", "cublas"},
      {"/site-packages/nvidia/cudnn/lib/libcudnn_ops.so.9", "cudnn"},
      {"/usr/lib/libcudnn.so.8", "cudnn"},
      {"/site-packages/torch/lib/libtorch_cuda.so", "torch"},
      {"/site-packages/torch/lib/libtorch.so", "torch"},
      {"/site-packages/torch/lib/libc10_cuda.so", "torch"},
      {"/site-packages/torch/lib/libc10.so", "torch"},
      {"/site-packages/torch/_C.cpython-311-x86_64-linux-gnu.so", "torch"},
      {"/site-packages/torch/lib/libcudnn.so.8", "cudnn"},
      {"/site-packages/jaxlib/xla_extension.so", "xla"},
      {"/opt/xla/libxla_gpu.so", "xla"},
      {"/site-packages/jaxlib/mosaic/libfoo.so", "xla"},
      {"/site-packages/cupy/_core/core.cpython-311-x86_64-linux-gnu.so", "cupy"},
      {"/site-packages/cupy_backends/cuda/api/runtime.cpython-311-x86_64-linux-gnu.so", "cupy"},
      {"/usr/local/cuda/lib64/libcudart.so.12", "cudart"},
      {"/site-packages/torch/lib/libcudart-9335f6a2.so.12", "cudart"},
      {"/usr/local/cuda/lib64/libcufft.so.11", "cufft"},
      {"/usr/local/cuda/lib64/libcurand.so.10", "curand"},
      {"/usr/local/cuda/lib64/libcusparse.so.12", "cusparse"},
      {"/usr/local/cuda/lib64/libcusolver.so.11", "cusolver"},
      {"/usr/local/cuda/lib64/libnvrtc.so.12", "nvrtc"},
      {"/usr/bin/python3.11", "python"},
      {"/usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0", "python"},
      {"/opt/app/bin/trainer", "trainer"},
      {"/x/libfoo.so.3", "foo"},
      {"/x/libfoo.so", "foo"},
      {"/x/libfoo-bar.so.1.2.3", "foo-bar"},
      {"/x/mymod.cpython-311-x86_64-linux-gnu.so", "mymod"},
      {"/x/plugin.so", "plugin"},
      {"/x/libsomething.sonic.so.1", "something.sonic"},
      {"[vdso]", "[vdso]"},
      {"", "unknown"},
  };
  for (const Case& c : cases) {
    INFO(c.path);
    CHECK(owner_name(c.path, exe) == c.owner);
  }
  CHECK(owner_name("/usr/bin/tool", "/usr/bin/tool") == "tool");
}

TEST_CASE("is_infrastructure", "[owner]") {
  CHECK(is_infrastructure("/usr/lib/x86_64-linux-gnu/libcuda.so.1"));
  CHECK(is_infrastructure("/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15"));
  CHECK(is_infrastructure("/build/lib/memtrace/sim/libcuda.so.1"));
  CHECK(is_infrastructure("/usr/local/cuda/lib64/libcudart.so.12"));
  CHECK(is_infrastructure("/site-packages/torch/lib/libcudart-9335f6a2.so.12"));
  CHECK(is_infrastructure("/opt/memtrace/lib/libmemtrace.so"));
  CHECK(is_infrastructure(memtrace::unwind::self_module()));
  CHECK_FALSE(is_infrastructure("/usr/lib/libcudadevrt.so"));
  CHECK_FALSE(is_infrastructure("/usr/lib/libnccl.so.2"));
  CHECK_FALSE(is_infrastructure("/usr/lib/libcublas.so.12"));
  CHECK_FALSE(is_infrastructure(""));
}

TEST_CASE("owner_of_stack skips infrastructure frames", "[owner]") {
  const std::string exe = unwind_test::exe_path();
  // capture() and the callback live in the test program, which holds unwind's code and so
  // is "memtrace itself"; the first frame outside it is symtest::outer in the library.
  auto pcs = unwind_test::capture_through_symtest();
  REQUIRE(pcs.size() >= 4);
  memtrace::unwind::Symbolizer sym;
  memtrace::unwind::ModuleMap map;
  CHECK(owner_of_stack(pcs, sym, exe) == "unwind_symtest");
  CHECK(owner_of_stack(pcs, map, exe) == "unwind_symtest");

  // All infrastructure: the outermost frame's owner.
  uintptr_t own[8];
  int n = memtrace::unwind::capture(own, 2);
  REQUIRE(n == 2);
  CHECK(owner_of_stack({own, 2}, sym, exe) == "unwind_tests");
  CHECK(owner_of_stack({own, 2}, map, exe) == "unwind_tests");

  CHECK(owner_of_stack({}, sym, exe) == "unknown");
  CHECK(owner_of_stack({}, map, exe) == "unknown");

  void* p = mmap(nullptr, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(p != MAP_FAILED);
  uintptr_t anon[2] = {reinterpret_cast<uintptr_t>(p) + 16, reinterpret_cast<uintptr_t>(p) + 32};
  CHECK(owner_of_stack(anon, sym, exe) == "unknown");
  CHECK(owner_of_stack(anon, map, exe) == "unknown");
  // Anonymous frames are passed over on the way to a real module.
  std::vector<uintptr_t> mixed = {anon[0], pcs.begin()[0], anon[1]};
  mixed.insert(mixed.end(), pcs.begin(), pcs.end());
  CHECK(owner_of_stack(mixed, sym, exe) == "unwind_symtest");
  munmap(p, 4096);
}

TEST_CASE("python_package: installed packages by name, the standard library not at all, user code by file") {
  using memtrace::unwind::python_package;
  CHECK(python_package("/opt/venv/lib/python3.12/site-packages/torch/nn/modules/module.py") == "torch");
  CHECK(python_package("/usr/lib/python3/dist-packages/cupy/_core/core.py") == "cupy");
  CHECK(python_package("/usr/local/lib/python3.13/site-packages/six.py") == "six");
  CHECK(python_package("/usr/lib/python3.13/threading.py") == "");
  CHECK(python_package("/root/.pyenv/versions/3.11.7/lib/python3.11/ctypes/__init__.py") == "");
  CHECK(python_package("<frozen importlib._bootstrap>") == "");
  CHECK(python_package("/home/ana/project/train.py") == "train.py");
}
