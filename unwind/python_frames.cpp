#include "unwind/python_frames.hpp"

#include "unwind/python_layout311.h"

#include <dlfcn.h>
#include <link.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

namespace memtrace::unwind {

namespace {

// The CPython C API, looked up at run time: memtrace does not link against any Python.
struct PyApi {
  const char* (*GetVersion)() = nullptr;
  int (*IsInitialized)() = nullptr;
  int (*GILState_Check)() = nullptr;
  void* (*GILState_GetThisThreadState)() = nullptr;
  void* (*ThreadState_GetFrame)(void*) = nullptr;  // 3.9+, new reference
  void* (*Frame_GetBack)(void*) = nullptr;         // 3.9+, new reference
  void* (*Frame_GetCode)(void*) = nullptr;         // 3.9+, new reference
  int (*Frame_GetLineNumber)(void*) = nullptr;
  void (*IncRef)(void*) = nullptr;
  void (*DecRef)(void*) = nullptr;
  void* (*Object_GetAttrString)(void*, const char*) = nullptr;
  const char* (*Unicode_AsUTF8)(void*) = nullptr;
  void (*Err_Fetch)(void**, void**, void**) = nullptr;
  void (*Err_Restore)(void*, void*, void*) = nullptr;
  void* code_type = nullptr;     // &PyCode_Type
  void* unicode_type = nullptr;  // &PyUnicode_Type
  void* bytes_type = nullptr;    // &PyBytes_Type
};

// The 3.11 layout, named for the code below (values in python_layout311.h).
struct Layout311 {
  static constexpr size_t kTsCframe = MT_PY311_TS_CFRAME;
  static constexpr size_t kCframeCurrent = MT_PY311_CFRAME_CURRENT;
  static constexpr size_t kFrameCode = MT_PY311_FRAME_CODE;
  static constexpr size_t kFramePrevious = MT_PY311_FRAME_PREVIOUS;
  static constexpr size_t kFramePrevInstr = MT_PY311_FRAME_PREV_INSTR;
  static constexpr size_t kFrameOwner = MT_PY311_FRAME_OWNER;
  static constexpr char kOwnedByGenerator = MT_PY311_OWNED_BY_GENERATOR;
  static constexpr size_t kObType = MT_PY311_OB_TYPE;
  static constexpr size_t kCodeFirstLineNo = MT_PY311_CODE_FIRSTLINENO;
  static constexpr size_t kCodeFilename = MT_PY311_CODE_FILENAME;
  static constexpr size_t kCodeQualname = MT_PY311_CODE_QUALNAME;
  static constexpr size_t kCodeLineTable = MT_PY311_CODE_LINETABLE;
  static constexpr size_t kCodeFirstTraceable = MT_PY311_CODE_FIRSTTRACEABLE;
  static constexpr size_t kCodeAdaptive = MT_PY311_CODE_ADAPTIVE;
  static constexpr size_t kVarSize = MT_PY311_VAR_SIZE;
  static constexpr size_t kBytesData = MT_PY311_BYTES_DATA;
  static constexpr size_t kStrLength = MT_PY311_STR_LENGTH;
  static constexpr size_t kStrState = MT_PY311_STR_STATE;
  static constexpr size_t kAsciiData = MT_PY311_ASCII_DATA;
  static constexpr size_t kCompactData = MT_PY311_COMPACT_DATA;
};

template <class T>
inline T at(uintptr_t base, size_t off) {
  T v;
  std::memcpy(&v, reinterpret_cast<const void*>(base + off), sizeof v);
  return v;
}

// One code object seen in a stack. The raw path keeps no reference, so a code object freed
// and another allocated at the same address is told apart by the fields compared in
// matches_raw(); the API path holds a reference, so its addresses are never reused.
struct CodeEntry {
  uintptr_t code = 0;
  uintptr_t filename_obj = 0;
  uintptr_t name_obj = 0;
  int first_line = 0;
  std::string filename;
  std::string name;
};

constexpr uint32_t kMaxCodes = 1u << 16;  // id 0 is "a Python frame memtrace could not name"
constexpr uint32_t kSlots = 1u << 17;     // open addressing, code address -> id

struct State {
  PyApi py;
  bool raw311 = false;
  uintptr_t interp_lo = 0, interp_hi = 0;
  std::atomic<uintptr_t>* slot_key = nullptr;
  std::atomic<uint32_t>* slot_id = nullptr;
  std::atomic<CodeEntry*>* entries = nullptr;  // by id
  std::mutex insert_mu;                        // first sight of a code object only
  uint32_t next_id = 1;
};

// 0: not looked yet, 1: looked, no Python (look again now and then), 2: Python found.
std::atomic<int> g_found{0};
std::atomic<int> g_mode{static_cast<int>(PythonReadMode::Auto)};
__thread uint32_t t_recheck __attribute__((tls_model("initial-exec"))) = 0;
State* g_state = nullptr;
std::mutex g_detect_mu;

template <class F>
bool sym(F& fn, const char* name) {
  fn = reinterpret_cast<F>(dlsym(RTLD_DEFAULT, name));
  return fn != nullptr;
}

struct RangeQuery {
  uintptr_t addr;
  uintptr_t lo = 0, hi = 0;
};

int find_text_range(dl_phdr_info* info, size_t, void* data) {
  auto* q = static_cast<RangeQuery*>(data);
  bool holds = false;
  uintptr_t lo = UINTPTR_MAX, hi = 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD || !(ph.p_flags & PF_X)) continue;
    uintptr_t a = info->dlpi_addr + ph.p_vaddr, b = a + ph.p_memsz;
    if (q->addr >= a && q->addr < b) holds = true;
    if (a < lo) lo = a;
    if (b > hi) hi = b;
  }
  if (!holds) return 0;
  q->lo = lo;
  q->hi = hi;
  return 1;
}

bool detect_locked() {
  PyApi py;
  if (!sym(py.GetVersion, "Py_GetVersion") || !sym(py.IsInitialized, "Py_IsInitialized") ||
      !sym(py.GILState_Check, "PyGILState_Check") ||
      !sym(py.GILState_GetThisThreadState, "PyGILState_GetThisThreadState") ||
      !sym(py.IncRef, "Py_IncRef") || !sym(py.DecRef, "Py_DecRef"))
    return false;
  // Present from 3.9 on; without them only the raw path could work, and it needs 3.11.
  sym(py.ThreadState_GetFrame, "PyThreadState_GetFrame");
  sym(py.Frame_GetBack, "PyFrame_GetBack");
  sym(py.Frame_GetCode, "PyFrame_GetCode");
  sym(py.Frame_GetLineNumber, "PyFrame_GetLineNumber");
  sym(py.Object_GetAttrString, "PyObject_GetAttrString");
  sym(py.Unicode_AsUTF8, "PyUnicode_AsUTF8");
  sym(py.Err_Fetch, "PyErr_Fetch");
  sym(py.Err_Restore, "PyErr_Restore");
  py.code_type = dlsym(RTLD_DEFAULT, "PyCode_Type");
  py.unicode_type = dlsym(RTLD_DEFAULT, "PyUnicode_Type");
  py.bytes_type = dlsym(RTLD_DEFAULT, "PyBytes_Type");

  int major = 0, minor = 0;
  const char* v = py.GetVersion();
  if (!v || std::sscanf(v, "%d.%d", &major, &minor) != 2) return false;
  bool api = py.ThreadState_GetFrame && py.Frame_GetBack && py.Frame_GetCode &&
             py.Frame_GetLineNumber && py.Object_GetAttrString && py.Unicode_AsUTF8 &&
             py.Err_Fetch && py.Err_Restore;
  bool raw = g_mode.load() == static_cast<int>(PythonReadMode::Auto) && major == 3 && minor == 11 && py.code_type && py.unicode_type && py.bytes_type;
  if (!api && !raw) return false;

  auto* s = new State();
  s->py = py;
  s->raw311 = raw;
  RangeQuery q{reinterpret_cast<uintptr_t>(py.GetVersion)};
  if (void* eval = dlsym(RTLD_DEFAULT, "PyEval_EvalCode")) q.addr = reinterpret_cast<uintptr_t>(eval);
  dl_iterate_phdr(&find_text_range, &q);
  s->interp_lo = q.lo;
  s->interp_hi = q.hi;
  s->slot_key = static_cast<std::atomic<uintptr_t>*>(std::calloc(kSlots, sizeof(uintptr_t)));
  s->slot_id = static_cast<std::atomic<uint32_t>*>(std::calloc(kSlots, sizeof(uint32_t)));
  s->entries = static_cast<std::atomic<CodeEntry*>*>(std::calloc(kMaxCodes, sizeof(void*)));
  if (!s->slot_key || !s->slot_id || !s->entries) return false;
  g_state = s;
  return true;
}

State* state() {
  int f = g_found.load(std::memory_order_acquire);
  if (f == 2) return g_state;
  // A program may dlopen libpython late (an embedding application): look again every 4096
  // captures rather than pay a symbol lookup on every one.
  if (f == 1 && (t_recheck++ & 4095) != 0) return nullptr;
  std::lock_guard<std::mutex> lock(g_detect_mu);
  f = g_found.load(std::memory_order_acquire);
  if (f == 2) return g_state;
  bool ok = detect_locked();
  g_found.store(ok ? 2 : 1, std::memory_order_release);
  return ok ? g_state : nullptr;
}

inline uint32_t slot_of(uintptr_t code) {
  uint64_t h = static_cast<uint64_t>(code) * 0x9E3779B97F4A7C15ull;
  return static_cast<uint32_t>(h >> 32) & (kSlots - 1);
}

// Looks a code object up; on a miss (or a stale entry) calls make() under the insert lock to
// build its entry. Returns 0 when the table is full.
template <class Valid, class Make>
uint32_t code_id(State& s, uintptr_t code, Valid&& valid, Make&& make) {
  uint32_t i = slot_of(code);
  for (uint32_t probe = 0; probe < 64; ++probe, i = (i + 1) & (kSlots - 1)) {
    uintptr_t k = s.slot_key[i].load(std::memory_order_acquire);
    if (k == 0) break;
    if (k == code) {
      uint32_t id = s.slot_id[i].load(std::memory_order_acquire);
      CodeEntry* e = id ? s.entries[id].load(std::memory_order_acquire) : nullptr;
      if (e && valid(*e)) return id;
      break;  // stale (address reused) or being published: take the slow path
    }
  }
  std::lock_guard<std::mutex> lock(s.insert_mu);
  if (s.next_id >= kMaxCodes) return 0;
  auto* e = new CodeEntry();
  e->code = code;
  make(*e);
  uint32_t id = s.next_id++;
  s.entries[id].store(e, std::memory_order_release);
  i = slot_of(code);
  for (uint32_t probe = 0; probe < 64; ++probe, i = (i + 1) & (kSlots - 1)) {
    uintptr_t k = s.slot_key[i].load(std::memory_order_relaxed);
    if (k == 0 || k == code) {
      s.slot_id[i].store(id, std::memory_order_release);
      s.slot_key[i].store(code, std::memory_order_release);
      break;
    }
  }
  return id;  // found again by id even if no slot was free (then looked up again next time)
}

inline uintptr_t tag(uint32_t id, int line) {
  return kPythonFrameTag | (static_cast<uintptr_t>(id) << 32) |
         static_cast<uint32_t>(line < 0 ? 0 : line);
}

void append_utf8(std::string& out, uint32_t cp) {
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

// A str object's text, read from its 3.11 layout ("?" for shapes it does not handle).
std::string raw_str311(const State& s, uintptr_t obj) {
  using L = Layout311;
  if (!obj || at<void*>(obj, L::kObType) != s.py.unicode_type) return "?";
  auto len = at<int64_t>(obj, L::kStrLength);
  uint32_t st = at<uint32_t>(obj, L::kStrState);
  unsigned kind = (st >> 2) & 7, compact = (st >> 5) & 1, ascii = (st >> 6) & 1;
  if (!compact || len < 0 || len > 4096) return "?";
  if (ascii) return std::string(reinterpret_cast<const char*>(obj + L::kAsciiData), len);
  std::string out;
  const uintptr_t d = obj + L::kCompactData;
  for (int64_t i = 0; i < len; ++i) {
    uint32_t cp = kind == 1   ? at<uint8_t>(d, i)
                  : kind == 2 ? at<uint16_t>(d, 2 * i)
                  : kind == 4 ? at<uint32_t>(d, 4 * i)
                              : '?';
    append_utf8(out, cp);
  }
  return out;
}

int capture_raw311(State& s, uintptr_t* out, int max) {
  using L = Layout311;
  auto ts = reinterpret_cast<uintptr_t>(s.py.GILState_GetThisThreadState());
  if (!ts) return 0;
  uintptr_t cframe = at<uintptr_t>(ts, L::kTsCframe);
  if (!cframe) return 0;
  uintptr_t frame = at<uintptr_t>(cframe, L::kCframeCurrent);
  int n = 0;
  for (int guard = 0; frame && n < max && guard < 4096; ++guard) {
    uintptr_t code = at<uintptr_t>(frame, L::kFrameCode);
    if (!code || at<void*>(code, L::kObType) != s.py.code_type) break;  // not a frame chain
    uintptr_t first = code + L::kCodeAdaptive;
    uintptr_t prev = at<uintptr_t>(frame, L::kFramePrevInstr);
    int traceable = at<int>(code, L::kCodeFirstTraceable);
    bool incomplete = at<char>(frame, L::kFrameOwner) != L::kOwnedByGenerator &&
                      prev < first + 2 * static_cast<uintptr_t>(traceable);
    if (!incomplete) {
      uintptr_t fn = at<uintptr_t>(code, L::kCodeFilename);
      uintptr_t qn = at<uintptr_t>(code, L::kCodeQualname);
      int first_line = at<int>(code, L::kCodeFirstLineNo);
      uint32_t id = code_id(
          s, code,
          [&](const CodeEntry& e) {
            return e.filename_obj == fn && e.name_obj == qn && e.first_line == first_line;
          },
          [&](CodeEntry& e) {
            e.filename_obj = fn;
            e.name_obj = qn;
            e.first_line = first_line;
            e.filename = raw_str311(s, fn);
            e.name = raw_str311(s, qn);
          });
      int line = 0;
      uintptr_t table = at<uintptr_t>(code, L::kCodeLineTable);
      if (table && at<void*>(table, L::kObType) == s.py.bytes_type) {
        auto size = at<int64_t>(table, L::kVarSize);
        int index = static_cast<int>((static_cast<intptr_t>(prev - first)) / 2);
        if (size > 0 && size < (int64_t{1} << 24))
          line = python_line_from_location_table(reinterpret_cast<const uint8_t*>(table + L::kBytesData),
                                                 static_cast<size_t>(size), first_line, index);
      }
      out[n++] = tag(id, line);
    }
    frame = at<uintptr_t>(frame, L::kFramePrevious);
  }
  return n;
}

std::string api_str(const PyApi& py, void* obj, const char* attr) {
  void* v = py.Object_GetAttrString(obj, attr);
  if (!v) return {};
  const char* s = py.Unicode_AsUTF8(v);
  std::string out = s ? s : "";
  py.DecRef(v);
  return out;
}

int capture_api(State& s, uintptr_t* out, int max) {
  const PyApi& py = s.py;
  void* ts = py.GILState_GetThisThreadState();
  if (!ts) return 0;
  void* f = py.ThreadState_GetFrame(ts);
  int n = 0;
  while (f && n < max) {
    void* code = py.Frame_GetCode(f);
    int line = py.Frame_GetLineNumber(f);
    uint32_t id = code_id(
        s, reinterpret_cast<uintptr_t>(code), [](const CodeEntry&) { return true; },
        [&](CodeEntry& e) {
          // Looking attributes up may raise; the program's pending exception, if any, must
          // survive. The reference taken keeps the code object's address from being reused.
          void *t, *v, *tb;
          py.Err_Fetch(&t, &v, &tb);
          e.filename = api_str(py, code, "co_filename");
          e.name = api_str(py, code, "co_qualname");
          if (e.name.empty()) e.name = api_str(py, code, "co_name");
          py.Err_Restore(t, v, tb);
          py.IncRef(code);
        });
    py.DecRef(code);
    out[n++] = tag(id, line);
    void* back = py.Frame_GetBack(f);
    py.DecRef(f);
    f = back;
  }
  if (f) py.DecRef(f);
  return n;
}

}  // namespace

int python_line_from_location_table(const uint8_t* table, size_t size, int first_line,
                                    int instr_index) {
  // Entries: a first byte with bit 7 set holding a code (bits 3-6) and a length in code units
  // (bits 0-2, plus one); then varint payload bytes. Codes 13 and 14 start with a signed line
  // delta, 11 and 12 mean one and two lines down, 15 means "no location".
  size_t p = 0;
  int line = first_line;
  int unit = 0;
  auto varint = [&]() -> uint32_t {
    uint32_t v = 0;
    int shift = 0;
    while (p < size) {
      uint8_t b = table[p++];
      v |= static_cast<uint32_t>(b & 63) << shift;
      shift += 6;
      if (!(b & 64) || shift > 30) break;
    }
    return v;
  };
  while (p < size) {
    uint8_t head = table[p++];
    if (!(head & 0x80)) continue;  // resynchronise on the next entry start
    int code = (head >> 3) & 15;
    int length = (head & 7) + 1;
    int delta = 0;
    if (code == 13 || code == 14) {
      uint32_t u = varint();
      delta = (u & 1) ? -static_cast<int>(u >> 1) : static_cast<int>(u >> 1);
    } else if (code == 11) {
      delta = 1;
    } else if (code == 12) {
      delta = 2;
    }
    line += delta;
    if (instr_index < unit + length) return code == 15 ? -1 : line;
    unit += length;
    while (p < size && !(table[p] & 0x80)) ++p;  // rest of this entry's payload
  }
  return -1;
}

void set_python_read_mode(PythonReadMode mode) { g_mode.store(static_cast<int>(mode)); }

int capture_python(uintptr_t* out, int max_frames) {
  if (max_frames <= 0 || g_mode.load(std::memory_order_relaxed) == static_cast<int>(PythonReadMode::Off))
    return 0;
  State* s = state();
  if (!s || !s->py.IsInitialized()) return 0;
  if (s->raw311) return capture_raw311(*s, out, max_frames);
  if (!s->py.GILState_Check()) return 0;
  return capture_api(*s, out, max_frames);
}

bool python_present() { return state() != nullptr; }

bool in_python_interpreter(uintptr_t pc) {
  if (g_found.load(std::memory_order_acquire) != 2) return false;
  return pc >= g_state->interp_lo && pc < g_state->interp_hi;
}

bool describe_python_frame(uintptr_t tagged, PythonFrameInfo* out) {
  if (!is_python_frame(tagged) || g_found.load(std::memory_order_acquire) != 2) return false;
  uint32_t id = static_cast<uint32_t>((tagged & ~kPythonFrameTag) >> 32);
  static const std::string kUnnamed = "<python>";
  const CodeEntry* e = id > 0 && id < kMaxCodes ? g_state->entries[id].load(std::memory_order_acquire) : nullptr;
  out->filename = e ? std::string_view(e->filename) : std::string_view(kUnnamed);
  out->name = e ? std::string_view(e->name) : std::string_view(kUnnamed);
  out->line = static_cast<int>(static_cast<uint32_t>(tagged));
  return true;
}

std::string_view python_support() {
  State* s = g_found.load(std::memory_order_acquire) == 2 ? g_state : nullptr;
  if (!s) return "none";
  return s->raw311 ? "api+3.11" : "api";
}

}  // namespace memtrace::unwind
