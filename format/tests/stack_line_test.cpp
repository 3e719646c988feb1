// Which frames a text report keeps, how a frame is shortened, and how a line is cut to a width.
// The frames are spelled as PyTorch's C++ unwinder and memtrace's own unwinder write them.
#include "format/stack_line.hpp"

#include <catch2/catch.hpp>

using namespace memtrace::format;

TEST_CASE("frames are classified by what they are to the reader") {
  CHECK(classify_frame("torch::unwind::unwind()", "") == FrameKind::Profiler);
  CHECK(classify_frame("torch::CapturedTraceback::gather(bool, bool, bool)", "") == FrameKind::Profiler);
  CHECK(classify_frame("c10::cuda::CUDACachingAllocator::Native::(anonymous namespace)::gather_with_cpp()", "") ==
        FrameKind::Profiler);
  CHECK(classify_frame("memtrace::unwind::capture_stack(unsigned long*, int)", "libmemtrace.so") ==
        FrameKind::Profiler);
  CHECK(classify_frame("anything", "/opt/memtrace/lib/libmemtrace.so") == FrameKind::Profiler);

  CHECK(classify_frame("c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(signed char, "
                       "unsigned long, CUstream_st*)",
                       "/pytorch/c10/cuda/CUDACachingAllocator.cpp") == FrameKind::Allocator);
  CHECK(classify_frame("at::TensorBase at::detail::_empty_generic<long>(c10::ArrayRef<long>)", "") ==
        FrameKind::Allocator);
  CHECK(classify_frame("cudaMalloc", "libcudart.so.13") == FrameKind::Allocator);
  CHECK(classify_frame("cuMemAlloc_v2", "") == FrameKind::Allocator);
  CHECK(classify_frame("whatever", "/usr/lib/x86_64-linux-gnu/libcuda.so.1") == FrameKind::Allocator);

  CHECK(classify_frame("ffi_call_unix64", "libffi.so.8") == FrameKind::Glue);
  CHECK(classify_frame("_ctypes_callproc", "_ctypes.cpython-312-x86_64-linux-gnu.so") == FrameKind::Glue);
  CHECK(classify_frame("pybind11::cpp_function::dispatcher(_object*, _object*, _object*)", "") == FrameKind::Glue);
  CHECK(classify_frame("at::Tensor at::_ops::add_Tensor::call(at::Tensor const&, at::Tensor const&, c10::Scalar "
                       "const&)",
                       "") == FrameKind::Glue);
  CHECK(classify_frame("c10::impl::wrap_kernel_functor_unboxed_<...>::call(...)", "") == FrameKind::Glue);
  CHECK(classify_frame("torch::autograd::THPVariable_add(_object*, _object*, _object*)", "") == FrameKind::Glue);

  CHECK(classify_frame("_PyEval_EvalFrameDefault", "/usr/bin/python3.12") == FrameKind::Interpreter);
  CHECK(classify_frame("PyObject_Vectorcall", "") == FrameKind::Interpreter);
  CHECK(classify_frame("Py_RunMain", "") == FrameKind::Interpreter);
  CHECK(classify_frame("method_vectorcall_VARARGS_KEYWORDS", "") == FrameKind::Interpreter);
  CHECK(classify_frame("eval", "/build/python3.12/Python/ceval.c") == FrameKind::Interpreter);

  CHECK(classify_frame("__libc_start_main", "libc.so.6") == FrameKind::Startup);
  CHECK(classify_frame("_start", "") == FrameKind::Startup);

  CHECK(classify_frame("forward", "/home/me/model.py") == FrameKind::Python);
  CHECK(classify_frame("<module>", "<frozen runpy>") == FrameKind::PythonLibrary);
  CHECK(classify_frame("forward", "/opt/conda/lib/python3.12/site-packages/torch/nn/modules/linear.py") ==
        FrameKind::PythonLibrary);
  CHECK(classify_frame("run", "/usr/lib/python3.12/runpy.py") == FrameKind::PythonLibrary);
  CHECK(classify_frame("allocate", "leak.c") == FrameKind::User);
  CHECK(classify_frame("main", "") == FrameKind::User);
  CHECK(classify_frame("ncclCommInitRank", "libnccl.so.2") == FrameKind::User);
  CHECK(classify_frame("at::native::add_out(at::Tensor const&)", "") == FrameKind::User);
  CHECK(classify_frame("Pygame_draw", "") == FrameKind::User);  // not CPython's API
  CHECK(classify_frame("cuda_kernel_launcher", "") == FrameKind::User);
}

TEST_CASE("shown frames are the user's and Python's, in stack order") {
  std::vector<FrameKind> k = {FrameKind::Profiler,  FrameKind::Allocator, FrameKind::User,    FrameKind::Glue,
                              FrameKind::Interpreter, FrameKind::Python,  FrameKind::Startup};
  CHECK(shown_frames(k) == std::vector<size_t>{2, 5});
  // Nothing of the user's: everything but the profiler's frames, so the line is not empty.
  std::vector<FrameKind> inner = {FrameKind::Profiler, FrameKind::Allocator, FrameKind::Interpreter};
  CHECK(shown_frames(inner) == std::vector<size_t>{1, 2});
  CHECK(shown_frames({}).empty());
  // Library Python frames give way to the program's own, and stand in for them when there are none.
  std::vector<FrameKind> lib = {FrameKind::User, FrameKind::PythonLibrary, FrameKind::Python, FrameKind::PythonLibrary};
  CHECK(shown_frames(lib) == std::vector<size_t>{0, 2});
  std::vector<FrameKind> only_lib = {FrameKind::Allocator, FrameKind::PythonLibrary, FrameKind::Interpreter};
  CHECK(shown_frames(only_lib) == std::vector<size_t>{1});
}

TEST_CASE("a frame label drops the parameter list and the directory") {
  CHECK(without_parameters("at::native::add_out(at::Tensor const&, at::Tensor const&)") == "at::native::add_out");
  CHECK(without_parameters("foo::bar() const") == "foo::bar");
  CHECK(without_parameters("(anonymous namespace)::helper(int)") == "(anonymous namespace)::helper");
  CHECK(without_parameters("Lambda::operator()(int) const") == "Lambda::operator()");
  CHECK(without_parameters("plain_c_name") == "plain_c_name");
  CHECK(without_parameters("(broken") == "(broken");
  CHECK(short_frame_label({"allocate", "/src/app/leak.c", 36}) == "allocate (leak.c:36)");
  CHECK(short_frame_label({"f(int)", "/lib/libx.so", 0}) == "f (libx.so)");
  CHECK(short_frame_label({"", "", 0}) == "??");
  CHECK(short_frame_label({"torch::unwind::unwind()", "??", 0}) == "torch::unwind::unwind");
  CHECK(short_frame_label({"forward", "/usr/lib/python3/dist-packages/torch/nn/modules/linear.py", 125}) ==
        "forward (torch/nn/modules/linear.py:125)");
  CHECK(short_frame_label({"run", "/usr/lib/python3.12/runpy.py", 88}) == "run (runpy.py:88)");
  CHECK(short_frame_label({"step", "/home/me/train.py", 60}) == "step (train.py:60)");
  CHECK(short_frame_label({"backward", "torch/autograd/__init__.py", 251}) == "backward (torch/autograd/__init__.py:251)");
}

TEST_CASE("a stack line fits its width and says how many frames it left out") {
  std::vector<std::string> labels = {"alpha (a.c:1)", "beta (b.c:2)", "gamma (c.c:3)"};
  CHECK(fit_stack_line(labels, 0) == "alpha (a.c:1) < beta (b.c:2) < gamma (c.c:3)");
  CHECK(fit_stack_line(labels, 200) == "alpha (a.c:1) < beta (b.c:2) < gamma (c.c:3)");
  std::string two = fit_stack_line(labels, 36);
  CHECK(two == "alpha (a.c:1) < beta (b.c:2) < \u2026+1");
  std::string one = fit_stack_line(labels, 22);
  CHECK(one == "alpha (a.c:1) < \u2026+2");
  // Exactly the full length fits without a marker.
  std::string full = "alpha (a.c:1) < beta (b.c:2) < gamma (c.c:3)";
  CHECK(fit_stack_line(labels, full.size()) == full);
  // The innermost label alone too long: cut, with the count of the rest.
  std::string cut = fit_stack_line({"a_very_long_function_name_indeed", "x"}, 20);
  CHECK(cut.rfind("a_very_long", 0) == 0);
  CHECK(cut.find("\u2026+1") != std::string::npos);
  // Never split a UTF-8 sequence, and never exceed the width in characters.
  std::string u = fit_stack_line({"\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9"}, 5);
  CHECK(u == "\u00e9\u00e9\u00e9\u00e9\u2026");
  for (size_t w = 8; w < 60; ++w) {
    std::string line = fit_stack_line(labels, w);
    size_t chars = 0;
    for (char c : line)
      if ((static_cast<unsigned char>(c) & 0xc0) != 0x80) ++chars;
    CHECK(chars <= w);
  }
}
