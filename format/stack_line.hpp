// How a stack reads in one line of a text report: the frames that tell stacks apart, in the
// user's terms, cut to a width (docs/design.md, "Readable stacks"). Used by the exit summary and by
// every text report of the CLI, so both fold the same frames the same way. Pure functions of frame
// text: they know nothing of snapshots or of the recorder.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace memtrace::format {

// What a frame is to a reader looking for who took the memory.
enum class FrameKind : uint8_t {
  User,         // the program's and its libraries' own code: shown
  Python,       // a Python frame of the program's own code (file *.py): shown
  PythonLibrary,  // a Python frame of an installed package or the standard library (site-packages/,
                  // dist-packages/, lib/python3.X/, <frozen ...>): shown when the stack has no
                  // frame of the program's own Python code
  Profiler,     // memtrace's own frames and PyTorch's stack-gathering frames
  Interpreter,  // CPython's C frames (_PyEval_EvalFrameDefault, PyObject_Call, ...)
  Glue,         // binding and dispatch glue: libffi, _ctypes, pybind11, PyTorch's op dispatcher
  Allocator,    // the allocator that served the request: PyTorch's caching allocator, the CUDA
                // runtime and driver entry points
  Startup,      // _start, __libc_start_main, start_thread, clone
};
inline constexpr int kFrameKindCount = 8;
const char* frame_kind_name(FrameKind k);

FrameKind classify_frame(std::string_view name, std::string_view file);

struct FrameText {
  std::string_view name;
  std::string_view file;
  int64_t line = 0;
};

// Which frames a report shows, as indices into `kinds` (innermost first, the order kept): the
// User and Python ones, and PythonLibrary ones only when there is no Python one (torch.nn's
// forward says less than the model's line that called it). When a stack has none of these, every
// frame but the Profiler ones, so that a stack entirely inside the allocator still reads as
// something.
std::vector<size_t> shown_frames(const std::vector<FrameKind>& kinds);

// "name (file:line)" with the C++ parameter list dropped and the file cut to its base name (a
// Python file to its module path: torch/nn/modules/module.py):
// `at::native::add_out(at::Tensor const&, ...)` reads `at::native::add_out`.
std::string short_frame_label(const FrameText& f);
// "name (file:line)", "name (file)" when line is 0, "name" without a file, "??" without a name:
// the frame in full, as --frames all and JSON show it.
std::string frame_label(const FrameText& f);

// Drops a demangled C++ name's trailing parameter list (and cv/ref qualifiers after it).
std::string_view without_parameters(std::string_view name);

// Joins labels with " < " (innermost first) into at most `width` characters (counted as bytes of
// UTF-8 text, code points never split): frames that do not fit are replaced by " < …+N", a label
// that alone does not fit is cut and ends in "…". width 0 means no limit.
std::string fit_stack_line(const std::vector<std::string>& labels, size_t width);

// The width text reports fit a line to: the terminal's width when fd is a terminal (at least 40),
// else $COLUMNS when set to a number, else kDefaultWidth.
inline constexpr size_t kDefaultWidth = 160;
size_t report_width(int fd);

}  // namespace memtrace::format
