// How to step from one x86-64 frame to its caller: the row of the frame's call-frame information
// (the .eh_frame FDE the unwinder of C++ exceptions uses) at one pc, reduced to what a walk of
// return addresses needs. See docs/stack-capture.md.
#pragma once
#include <cstdint>

namespace memtrace::unwind {

struct FrameRule {
  enum Kind : uint8_t {
    Step,         // caller's frame found by the fields below
    Outermost,    // the return address is marked undefined: _start, a thread's first frame
    Unsupported,  // no FDE, a signal frame, an expression, an unusual register: ask libunwind
  };
  // CFA (the caller's stack pointer) = (cfa_from_fp ? rbp : rsp) + cfa_offset; the return
  // address lies at CFA + ra_offset; the caller's rbp at CFA + fp_offset when fp_saved, else
  // rbp is the caller's too (fp_lost: nothing says where it is).
  int32_t cfa_offset = 0;
  int16_t fp_offset = 0;
  int8_t ra_offset = 0;
  Kind kind = Unsupported;
  bool cfa_from_fp = false;
  bool fp_saved = false;
  bool fp_lost = false;
};

// The rule in effect at pc, an address inside an instruction (a return address minus one for
// every frame but the innermost). Reads the FDE that libgcc's _Unwind_Find_FDE finds; takes
// its locks, so for a cache's misses only.
FrameRule frame_rule_at(uintptr_t pc);

// The same, from an FDE in memory (the CIE it points to must lie before it, as in .eh_frame);
// func is the FDE's first address. Exposed for the tests' hand-made FDEs.
FrameRule frame_rule_from_fde(const unsigned char* fde, uintptr_t func, uintptr_t pc);

}  // namespace memtrace::unwind
