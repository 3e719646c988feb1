// Reads one frame's row out of its FDE: the CIE's initial instructions, then the FDE's up to the
// wanted pc, keeping only the CFA and where rbp and the return address were saved. Anything the
// walk in stack_capture.cpp could get wrong (expressions, a CFA in another register, a signal
// frame, a 64-bit FDE) gives Unsupported, and that capture is left to libunwind.
#include "unwind/frame_rule.hpp"

#include <climits>
#include <cstring>

// libgcc's FDE lookup (unwind-dw2-fde.h; exported by libgcc_s.so.1 since GCC 3.0). It searches
// every loaded object's .eh_frame_hdr, with its own cache, and registered JIT frames.
struct dwarf_eh_bases {
  void* tbase;
  void* dbase;
  void* func;
};
extern "C" const void* _Unwind_Find_FDE(void* pc, dwarf_eh_bases* bases);

namespace memtrace::unwind {

namespace {

constexpr unsigned kRegFp = 6;   // rbp in DWARF's x86-64 numbering
constexpr unsigned kRegSp = 7;   // rsp
constexpr unsigned kRegRa = 16;  // the return address column

struct Reader {
  const unsigned char* p;
  const unsigned char* end;
  bool ok = true;

  uint8_t u8() {
    if (p >= end) return fail();
    return *p++;
  }
  uint64_t fixed(int n) {
    if (end - p < n) return fail();
    uint64_t v = 0;
    std::memcpy(&v, p, static_cast<size_t>(n));  // little-endian host and data
    p += n;
    return v;
  }
  uint64_t uleb() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      uint8_t b = u8();
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    return fail();
  }
  int64_t sleb() {
    int64_t v = 0;
    int shift = 0;
    uint8_t b = 0;
    do {
      b = u8();
      if (shift < 64) v |= static_cast<int64_t>(b & 0x7f) << shift;
      shift += 7;
    } while ((b & 0x80) && ok);
    if (shift < 64 && (b & 0x40)) v |= -(int64_t{1} << shift);
    return v;
  }
  // Skips an encoded pointer (DW_EH_PE_*); false for encodings whose size is not known here.
  bool skip_encoded(uint8_t enc) {
    if (enc == 0xff) return true;  // omitted
    switch (enc & 0x0f) {
      case 0x00: fixed(8); break;  // absptr
      case 0x01: uleb(); break;
      case 0x02: case 0x0a: fixed(2); break;
      case 0x03: case 0x0b: fixed(4); break;
      case 0x04: case 0x0c: fixed(8); break;
      case 0x09: sleb(); break;
      default: return fail();
    }
    return ok && (enc & 0x70) != 0x50;  // aligned: would need the absolute position
  }
  uint8_t fail() {
    ok = false;
    p = end;
    return 0;
  }
};

enum class RegRule : uint8_t { Same, Offset, Undefined, Other };

struct Row {
  unsigned cfa_reg = kRegSp;
  int64_t cfa_offset = 8;
  RegRule fp = RegRule::Same, ra = RegRule::Other;
  int64_t fp_offset = 0, ra_offset = 0;
};

struct Cie {
  uint64_t code_align = 1;
  int64_t data_align = -8;
  uint64_t ra_column = kRegRa;
  uint8_t fde_encoding = 0;
  bool has_aug_data = false;
  const unsigned char* insns = nullptr;
  const unsigned char* end = nullptr;
};

bool parse_cie(const unsigned char* cie, Cie& out) {
  uint32_t len = 0;
  std::memcpy(&len, cie, 4);
  if (len == 0 || len == 0xffffffffu) return false;  // terminator, or 64-bit DWARF
  Reader r{cie + 4, cie + 4 + len};
  if (r.fixed(4) != 0) return false;  // not a CIE
  uint8_t version = r.u8();
  if (version != 1 && version != 3) return false;
  const char* aug = reinterpret_cast<const char*>(r.p);
  const void* nul = std::memchr(r.p, 0, static_cast<size_t>(r.end - r.p));
  if (nul == nullptr) return false;
  r.p = static_cast<const unsigned char*>(nul) + 1;
  if (aug[0] != '\0' && aug[0] != 'z') return false;  // "eh" and other ancient forms
  out.code_align = r.uleb();
  out.data_align = r.sleb();
  out.ra_column = version == 1 ? r.u8() : r.uleb();
  if (aug[0] == 'z') {
    out.has_aug_data = true;
    uint64_t alen = r.uleb();
    if (!r.ok || alen > static_cast<uint64_t>(r.end - r.p)) return false;
    const unsigned char* data_end = r.p + alen;
    for (const char* a = aug + 1; *a != '\0'; ++a) {
      switch (*a) {
        case 'R': out.fde_encoding = r.u8(); break;
        case 'L': r.u8(); break;
        case 'P': {
          uint8_t enc = r.u8();
          if (!r.skip_encoded(enc)) return false;
          break;
        }
        case 'S': return false;  // a signal frame: its caller's registers are in a ucontext
        default: return false;   // unknown augmentation: its data cannot be trusted to skip
      }
    }
    if (!r.ok || r.p > data_end) return false;
    r.p = data_end;
  }
  if (!r.ok || out.ra_column != kRegRa) return false;
  out.insns = r.p;
  out.end = r.end;
  return true;
}

// Runs CFA instructions from [p, end) starting at loc, stopping before the first advance past pc.
// initial: the row after the CIE's instructions (what DW_CFA_restore returns to).
bool run_cfa(Reader r, const Cie& cie, uintptr_t loc, uintptr_t pc, Row& row, const Row& initial) {
  Row saved[8];
  int depth = 0;
  auto set_reg = [&](uint64_t reg, RegRule rule, int64_t off) {
    if (reg == kRegFp) row.fp = rule, row.fp_offset = off;
    else if (reg == kRegRa) row.ra = rule, row.ra_offset = off;
  };
  auto advance = [&](uint64_t delta) {
    loc += delta * cie.code_align;
    return loc <= pc;
  };
  while (r.ok && r.p < r.end) {
    uint8_t op = r.u8();
    uint8_t low = op & 0x3f;
    switch (op >> 6) {
      case 1:
        if (!advance(low)) return true;
        continue;
      case 2:
        set_reg(low, RegRule::Offset, static_cast<int64_t>(r.uleb()) * cie.data_align);
        continue;
      case 3:
        if (low == kRegFp) row.fp = initial.fp, row.fp_offset = initial.fp_offset;
        else if (low == kRegRa) row.ra = initial.ra, row.ra_offset = initial.ra_offset;
        continue;
      default: break;
    }
    switch (op) {
      case 0x00: break;  // nop
      case 0x01: return false;  // set_loc: an encoded address, never emitted by GCC or clang
      case 0x02: if (!advance(r.u8())) return true; break;
      case 0x03: if (!advance(r.fixed(2))) return true; break;
      case 0x04: if (!advance(r.fixed(4))) return true; break;
      case 0x05: {  // offset_extended
        uint64_t reg = r.uleb();
        set_reg(reg, RegRule::Offset, static_cast<int64_t>(r.uleb()) * cie.data_align);
        break;
      }
      case 0x06: {  // restore_extended
        uint64_t reg = r.uleb();
        if (reg == kRegFp) row.fp = initial.fp, row.fp_offset = initial.fp_offset;
        else if (reg == kRegRa) row.ra = initial.ra, row.ra_offset = initial.ra_offset;
        break;
      }
      case 0x07: set_reg(r.uleb(), RegRule::Undefined, 0); break;
      case 0x08: set_reg(r.uleb(), RegRule::Same, 0); break;
      case 0x09: {  // register: a value kept in another register
        uint64_t reg = r.uleb();
        r.uleb();
        set_reg(reg, RegRule::Other, 0);
        break;
      }
      case 0x0a:
        if (depth == 8) return false;
        saved[depth++] = row;
        break;
      case 0x0b: {  // restore_state: the whole row, the CFA's rule included (as libgcc does)
        if (depth == 0) return false;
        row = saved[--depth];
        break;
      }
      case 0x0c: row.cfa_reg = static_cast<unsigned>(r.uleb()); row.cfa_offset = static_cast<int64_t>(r.uleb()); break;
      case 0x0d: row.cfa_reg = static_cast<unsigned>(r.uleb()); break;
      case 0x0e: row.cfa_offset = static_cast<int64_t>(r.uleb()); break;
      case 0x0f: return false;  // def_cfa_expression
      case 0x10:                // expression, and
      case 0x16: {              // val_expression: fine for a register the walk does not read
        uint64_t reg = r.uleb();
        uint64_t len = r.uleb();
        if (!r.ok || len > static_cast<uint64_t>(r.end - r.p)) return false;
        r.p += len;
        set_reg(reg, RegRule::Other, 0);
        break;
      }
      case 0x11: {  // offset_extended_sf
        uint64_t reg = r.uleb();
        set_reg(reg, RegRule::Offset, r.sleb() * cie.data_align);
        break;
      }
      case 0x12: row.cfa_reg = static_cast<unsigned>(r.uleb()); row.cfa_offset = r.sleb() * cie.data_align; break;
      case 0x13: row.cfa_offset = r.sleb() * cie.data_align; break;
      case 0x14: case 0x15: {  // val_offset(_sf): a value, not a slot
        uint64_t reg = r.uleb();
        if (op == 0x14) r.uleb();
        else r.sleb();
        set_reg(reg, RegRule::Other, 0);
        break;
      }
      case 0x2e: r.uleb(); break;  // GNU_args_size: the CFA rule already counts pushed arguments
      case 0x2f: {                 // GNU_negative_offset_extended
        uint64_t reg = r.uleb();
        set_reg(reg, RegRule::Offset, -static_cast<int64_t>(r.uleb()) * cie.data_align);
        break;
      }
      default: return false;
    }
  }
  return r.ok;
}

}  // namespace

FrameRule frame_rule_from_fde(const unsigned char* fde, uintptr_t func, uintptr_t pc) {
  FrameRule out;
  uint32_t len = 0;
  std::memcpy(&len, fde, 4);
  if (len == 0 || len == 0xffffffffu) return out;
  uint32_t cie_ptr = 0;
  std::memcpy(&cie_ptr, fde + 4, 4);
  if (cie_ptr == 0) return out;  // this is a CIE
  Cie cie;
  if (!parse_cie(fde + 4 - cie_ptr, cie)) return out;
  Reader r{fde + 8, fde + 4 + len};
  if (!r.skip_encoded(cie.fde_encoding)) return out;             // pc_begin (func has it)
  if (!r.skip_encoded(static_cast<uint8_t>(cie.fde_encoding & 0x0f))) return out;  // pc_range
  if (cie.has_aug_data) {
    uint64_t alen = r.uleb();
    if (!r.ok || alen > static_cast<uint64_t>(r.end - r.p)) return out;
    r.p += alen;
  }
  Row initial;
  if (!run_cfa(Reader{cie.insns, cie.end}, cie, func, UINTPTR_MAX, initial, initial)) return out;
  Row row = initial;
  if (!run_cfa(r, cie, func, pc, row, initial)) return out;

  if (row.ra == RegRule::Undefined) {
    out.kind = FrameRule::Outermost;
    return out;
  }
  if (row.cfa_reg != kRegSp && row.cfa_reg != kRegFp) return out;
  if (row.ra != RegRule::Offset || row.ra_offset < INT8_MIN || row.ra_offset > INT8_MAX) return out;
  if (row.cfa_offset < 0 || row.cfa_offset > INT32_MAX) return out;
  if (row.fp == RegRule::Offset && (row.fp_offset < INT16_MIN || row.fp_offset > INT16_MAX)) return out;
  out.cfa_from_fp = row.cfa_reg == kRegFp;
  out.cfa_offset = static_cast<int32_t>(row.cfa_offset);
  out.ra_offset = static_cast<int8_t>(row.ra_offset);
  out.fp_saved = row.fp == RegRule::Offset;
  out.fp_offset = static_cast<int16_t>(out.fp_saved ? row.fp_offset : 0);
  out.fp_lost = row.fp == RegRule::Undefined || row.fp == RegRule::Other;
  out.kind = FrameRule::Step;
  return out;
}

FrameRule frame_rule_at(uintptr_t pc) {
  dwarf_eh_bases bases{};
  const void* fde = _Unwind_Find_FDE(reinterpret_cast<void*>(pc), &bases);
  if (fde == nullptr) return {};
  return frame_rule_from_fde(static_cast<const unsigned char*>(fde), reinterpret_cast<uintptr_t>(bases.func), pc);
}

}  // namespace memtrace::unwind
