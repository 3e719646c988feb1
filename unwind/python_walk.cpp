#include "unwind/python_walk.hpp"

#include <cstring>

#include "unwind/python_frames.hpp"
#include "unwind/readable_memory.hpp"

namespace memtrace::unwind {

namespace {

template <class T>
T field(const uint8_t* block, uint32_t off) {
  T v;
  std::memcpy(&v, block + off, sizeof v);
  return v;
}

bool read_ptr(uintptr_t addr, uintptr_t* out) { return safe_read(addr, out, sizeof *out); }

void append_utf8(std::string& out, uint32_t cp) {
  if (cp > 0x10FFFF) cp = 0xFFFD;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

constexpr int64_t kMaxNameLength = 4096;

}  // namespace

uintptr_t python_frame_tag(uint32_t id, int line) {
  return kPythonFrameTag | (static_cast<uintptr_t>(id & 0x7FFFFFFF) << 32) |
         static_cast<uint32_t>(line < 0 ? 0 : line);
}

bool read_python_str(const PythonLayout& l, const PythonTypes& types, uintptr_t obj, std::string* out) {
  uintptr_t type = 0;
  if (!obj || !read_ptr(obj + l.ob_type, &type) || type != types.unicode) return false;
  int64_t len = 0;
  uint32_t state = 0;
  if (!safe_read(obj + l.str_length, &len, sizeof len) || !safe_read(obj + l.str_state, &state, sizeof state))
    return false;
  const unsigned kind = (state >> 2) & 7, compact = (state >> 5) & 1, ascii = (state >> 6) & 1;
  if (!compact || len < 0 || len > kMaxNameLength || (kind != 1 && kind != 2 && kind != 4)) return false;
  const uintptr_t data = obj + (ascii ? l.str_ascii_data : l.str_compact_data);
  const size_t bytes = static_cast<size_t>(len) * kind;
  char buf[kMaxNameLength * 4];
  if (bytes > sizeof buf || !safe_read(data, buf, bytes)) return false;
  out->clear();
  if (ascii) {
    out->assign(buf, bytes);
    return true;
  }
  for (int64_t i = 0; i < len; ++i) {
    uint32_t cp = kind == 1 ? static_cast<uint8_t>(buf[i])
                  : kind == 2 ? field<uint16_t>(reinterpret_cast<const uint8_t*>(buf), static_cast<uint32_t>(2 * i))
                              : field<uint32_t>(reinterpret_cast<const uint8_t*>(buf), static_cast<uint32_t>(4 * i));
    append_utf8(*out, cp);
  }
  return true;
}

bool python_bytes_span(const PythonLayout& l, const PythonTypes& types, uintptr_t obj, uintptr_t* data,
                       size_t* size) {
  uintptr_t type = 0;
  int64_t n = 0;
  if (!obj || !read_ptr(obj + l.ob_type, &type) || type != types.bytes) return false;
  if (!safe_read(obj + l.bytes_size, &n, sizeof n) || n < 0 || n > (int64_t{1} << 24)) return false;
  if (n > 0 && !safe_readable(obj + l.bytes_data, static_cast<size_t>(n))) return false;
  *data = obj + l.bytes_data;
  *size = static_cast<size_t>(n);
  return true;
}

uintptr_t python_first_frame(const PythonLayout& l, uintptr_t tstate, bool* ok) {
  *ok = false;
  uintptr_t p = 0;
  if (!tstate || !read_ptr(tstate + l.ts_frame, &p)) return 0;
  if (l.via_cframe) {
    *ok = true;
    if (!p) return 0;  // no eval loop on this thread's C stack yet
    uintptr_t frame = 0;
    if (!read_ptr(p + l.cframe_current, &frame)) {
      *ok = false;
      return 0;
    }
    return frame;
  }
  *ok = true;
  return p;
}

PythonWalk walk_python_frames(const PythonLayout& l, const PythonTypes& types, uintptr_t frame,
                              CodeNamer& namer, uintptr_t* out, int max_frames) {
  PythonWalk w;
  const uint32_t fspan = l.frame_span();
  const uint32_t cspan = l.code_span();
  uint8_t fblock[512];
  uint8_t cblock[1024 + 8];
  if (fspan > sizeof fblock || cspan > sizeof cblock) {
    w.failed = true;
    return w;
  }
  // Loops are found as Brent's algorithm finds them: a frame remembered at each power of two
  // steps; meeting it again means a cycle. Two comparisons a step, found within twice its length.
  uintptr_t remembered = 0;
  int power = 1, since = 0;
  auto close_group = [&]() {
    if (w.groups < kMaxPythonGroups && w.frames > (w.groups ? w.group_end[w.groups - 1] : 0))
      w.group_end[w.groups++] = static_cast<uint16_t>(w.frames);
  };
  for (int step = 0; frame; ++step) {
    if (step >= kMaxPythonSteps || (frame & 7) != 0) {
      w.failed = true;  // too deep to be real, or not a frame's address
      break;
    }
    if (frame == remembered) {
      w.failed = true;  // a loop: frames only ever point outwards
      break;
    }
    if (++since == power) {
      remembered = frame;
      power *= 2;
      since = 0;
    }
    if (!safe_read(frame, fblock, fspan)) {
      w.failed = true;
      break;
    }
    const uintptr_t previous = field<uintptr_t>(fblock, l.frame_previous);
    const int owner = static_cast<unsigned char>(field<char>(fblock, l.frame_owner));
    if (owner >= l.shim_owner) {
      // The entry shim at the bottom of each eval call: what lies beyond it was called from C.
      if (owner > 7) {
        w.failed = true;
        break;
      }
      close_group();
      frame = previous;
      continue;
    }
    uintptr_t code = field<uintptr_t>(fblock, l.frame_code);
    if (l.executable_tagged) code &= ~uintptr_t{3};
    const bool is_entry = l.frame_is_entry >= 0 && field<char>(fblock, static_cast<uint32_t>(l.frame_is_entry)) != 0;
    if (code == 0) {
      frame = previous;
      continue;
    }
    if (!safe_read(code, cblock, cspan)) {
      w.failed = true;
      break;
    }
    if (field<uintptr_t>(cblock, l.ob_type) != types.code) {
      // 3.13 and newer may run frames whose executable is not code (None, a shim): skip those;
      // before, every frame ran code, so anything else means the chain is not what it seems.
      if (l.minor < 13) {
        w.failed = true;
        break;
      }
      frame = previous;
      if (is_entry) close_group();
      continue;
    }
    const uintptr_t first_unit = code + l.code_adaptive;
    const uintptr_t instr = field<uintptr_t>(fblock, l.frame_instr);
    if (l.code_firsttraceable >= 0 && owner != l.owned_by_generator) {
      // A frame whose function has not begun (its prologue runs before the first traceable
      // instruction) is not shown, as CPython's own tracebacks do not show it.
      const int traceable = field<int>(cblock, static_cast<uint32_t>(l.code_firsttraceable));
      if (instr < first_unit + 2 * static_cast<uintptr_t>(traceable < 0 ? 0 : traceable)) {
        frame = previous;
        if (is_entry) close_group();
        continue;
      }
    }
    CodeFacts facts;
    facts.code = code;
    facts.filename = field<uintptr_t>(cblock, l.code_filename);
    facts.qualname = field<uintptr_t>(cblock, l.code_qualname);
    facts.linetable = field<uintptr_t>(cblock, l.code_linetable);
    facts.first_line = field<int>(cblock, l.code_firstlineno);
    const intptr_t delta = static_cast<intptr_t>(instr - first_unit);
    int index = delta < 0 || delta > (intptr_t{1} << 30) ? -1 : static_cast<int>(delta / 2);
    if (w.frames >= max_frames) {
      w.truncated = true;
      break;
    }
    const uint32_t id = namer.id_for(facts);
    out[w.frames++] = python_frame_tag(id, id ? namer.line_for(id, facts, index) : 0);
    if (is_entry) close_group();
    frame = previous;
  }
  if (w.failed) {
    w.frames = 0;
    w.groups = 0;
    return w;
  }
  close_group();
  return w;
}

}  // namespace memtrace::unwind
