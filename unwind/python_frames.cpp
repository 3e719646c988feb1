#include "unwind/python_frames.hpp"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "unwind/own_code.hpp"
#include "unwind/python_layout.hpp"
#include "unwind/python_walk.hpp"
#include "unwind/readable_memory.hpp"

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
};

// One code object seen in a stack. The direct path keeps no reference, so a code object freed
// and another allocated at the same address is told apart by the fields compared in
// same_code(); the API path holds a reference, so its addresses are never reused.
struct CodeEntry {
  uintptr_t code = 0;
  uintptr_t filename_obj = 0, name_obj = 0, linetable_obj = 0;
  int first_line = 0;
  std::string filename;
  std::string name;
  std::vector<uint8_t> lines;  // a copy of co_linetable, so later lines need no interpreter reads
  bool lines_copied = false;
  // (code unit << 32) | line of recent lookups, by code unit: a function on a stack is usually
  // at one of a few calls.
  std::atomic<uint64_t> memo[4] = {~uint64_t{0}, ~uint64_t{0}, ~uint64_t{0}, ~uint64_t{0}};
};

constexpr uint32_t kMaxCodes = 1u << 16;  // id 0 is "a Python frame memtrace could not name"
constexpr uint32_t kSlots = 1u << 17;     // open addressing, code address -> id
constexpr size_t kMaxCopiedLineTable = 256 * 1024;

enum class Path { None, Api, Direct };

struct State {
  PyApi py;
  Path path = Path::None;
  PythonLayout layout;
  PythonTypes types;
  int minor = 0;
  char support[160] = "none";
  uintptr_t interp_lo = 0, interp_hi = 0;
  uintptr_t eval_lo = 0, eval_hi = 0;  // _PyEval_EvalFrameDefault, when it is the loop itself
  std::atomic<uintptr_t>* slot_key = nullptr;
  std::atomic<uint32_t>* slot_id = nullptr;
  std::atomic<CodeEntry*>* entries = nullptr;  // by id
  std::mutex insert_mu;                        // first sight of a code object only
  uint32_t next_id = 1;
};

// 0: not looked yet, 1: looked, no Python (look again now and then), 2: Python found.
std::atomic<int> g_found{0};
std::atomic<int> g_mode{static_cast<int>(PythonReadMode::Auto)};
std::atomic<uint64_t> g_walks_failed{0};
__thread uint32_t t_recheck __attribute__((tls_model("initial-exec"))) = 0;
State* g_state = nullptr;
std::mutex g_detect_mu;

template <class F>
bool sym(F& fn, const char* name) {
  fn = reinterpret_cast<F>(dlsym(RTLD_DEFAULT, name));
  return fn != nullptr;
}

// Chooses how this interpreter's frames are read, and says so in s.support.
void choose_direct_path(State& s, int major, int minor) {
  const bool auto_mode = g_mode.load() == static_cast<int>(PythonReadMode::Auto);
  s.types.code = reinterpret_cast<uintptr_t>(dlsym(RTLD_DEFAULT, "PyCode_Type"));
  s.types.unicode = reinterpret_cast<uintptr_t>(dlsym(RTLD_DEFAULT, "PyUnicode_Type"));
  s.types.bytes = reinterpret_cast<uintptr_t>(dlsym(RTLD_DEFAULT, "PyBytes_Type"));
  const char* api = s.path == Path::Api ? "the C API while the GIL is held" : "nothing";
  if (g_mode.load() == static_cast<int>(PythonReadMode::Off)) {
    std::snprintf(s.support, sizeof s.support, "CPython %d.%d: MEMTRACE_PYTHON=off, no Python frames", major, minor);
    return;
  }
  if (!auto_mode) {
    std::snprintf(s.support, sizeof s.support, "CPython %d.%d: MEMTRACE_PYTHON=gil, frames from %s",
                  major, minor, api);
    return;
  }
  if (!s.types.code || !s.types.unicode || !s.types.bytes) {
    std::snprintf(s.support, sizeof s.support, "CPython %d.%d: type objects not exported, frames from %s",
                  major, minor, api);
    return;
  }
  PythonLayout l;
  const char* why = nullptr;
  const char* source = "";
  if (major == 3 && python_table_layout(minor, &l)) {
    source = "layout table";
  } else if (major == 3 && python_debug_offsets_size(minor) > 0) {
    uint8_t table[1024];
    const size_t need = python_debug_offsets_size(minor);
    auto runtime = reinterpret_cast<uintptr_t>(dlsym(RTLD_DEFAULT, "_PyRuntime"));
    if (!runtime || need > sizeof table || !safe_read(runtime, table, need)) {
      why = "_PyRuntime not found or not readable";
    } else if (python_debug_offsets_layout(table, need, minor, &l, &why)) {
      source = "_Py_DebugOffsets";
    }
  } else {
    why = "no layout known for this version";
  }
  if (why) {
    std::snprintf(s.support, sizeof s.support, "CPython %d.%d: %s; frames from %s", major, minor, why, api);
    return;
  }
  if (l.free_threaded) {
    std::snprintf(s.support, sizeof s.support,
                  "CPython %d.%d free-threaded build: not read directly; frames from %s", major, minor, api);
    return;
  }
  s.layout = l;
  s.path = Path::Direct;
  std::snprintf(s.support, sizeof s.support, "CPython %d.%d: frames read without the GIL (%s)", major,
                minor, source);
}

bool detect_locked() {
  PyApi py;
  if (!sym(py.GetVersion, "Py_GetVersion") || !sym(py.IsInitialized, "Py_IsInitialized") ||
      !sym(py.GILState_Check, "PyGILState_Check") ||
      !sym(py.GILState_GetThisThreadState, "PyGILState_GetThisThreadState") ||
      !sym(py.IncRef, "Py_IncRef") || !sym(py.DecRef, "Py_DecRef"))
    return false;
  sym(py.ThreadState_GetFrame, "PyThreadState_GetFrame");
  sym(py.Frame_GetBack, "PyFrame_GetBack");
  sym(py.Frame_GetCode, "PyFrame_GetCode");
  sym(py.Frame_GetLineNumber, "PyFrame_GetLineNumber");
  sym(py.Object_GetAttrString, "PyObject_GetAttrString");
  sym(py.Unicode_AsUTF8, "PyUnicode_AsUTF8");
  sym(py.Err_Fetch, "PyErr_Fetch");
  sym(py.Err_Restore, "PyErr_Restore");

  int major = 0, minor = 0;
  const char* v = py.GetVersion();
  if (!v || std::sscanf(v, "%d.%d", &major, &minor) != 2) return false;

  auto* s = new State();
  s->py = py;
  s->minor = minor;
  const bool api = py.ThreadState_GetFrame && py.Frame_GetBack && py.Frame_GetCode &&
                   py.Frame_GetLineNumber && py.Object_GetAttrString && py.Unicode_AsUTF8 &&
                   py.Err_Fetch && py.Err_Restore;
  s->path = api ? Path::Api : Path::None;
  choose_direct_path(*s, major, minor);
  if (s->path == Path::None) {
    delete s;
    return false;
  }
  uintptr_t in_interpreter = reinterpret_cast<uintptr_t>(py.GetVersion);
  if (void* eval = dlsym(RTLD_DEFAULT, "PyEval_EvalCode")) in_interpreter = reinterpret_cast<uintptr_t>(eval);
  const CodeRange interp = code_range_of(in_interpreter);
  s->interp_lo = interp.lo;
  s->interp_hi = interp.hi;
  // Where the eval loop is one large function, each of its activations on the native stack is
  // one eval call, which tells exactly where each group of Python frames belongs. Where it is a
  // small trampoline into per-instruction functions (3.14 built with tail calls), it is not.
  Dl_info info;
  void* entry = nullptr;
  if (void* eval = dlsym(RTLD_DEFAULT, "_PyEval_EvalFrameDefault");
      eval && dladdr1(eval, &info, &entry, RTLD_DL_SYMENT) && entry &&
      static_cast<const ElfW(Sym)*>(entry)->st_size > 16384) {
    const auto* es = static_cast<const ElfW(Sym)*>(entry);
    s->eval_lo = reinterpret_cast<uintptr_t>(eval);
    s->eval_hi = s->eval_lo + es->st_size;
  }
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
  if (!make(*e)) {
    delete e;
    return 0;
  }
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

// Names code objects met by the direct walk, from what it read through validated reads.
class DirectNamer final : public CodeNamer {
 public:
  explicit DirectNamer(State& s) : s_(s) {}

  uint32_t id_for(const CodeFacts& f) override {
    return code_id(
        s_, f.code,
        [&](const CodeEntry& e) {
          return e.filename_obj == f.filename && e.name_obj == f.qualname && e.first_line == f.first_line &&
                 e.linetable_obj == f.linetable;
        },
        [&](CodeEntry& e) {
          e.filename_obj = f.filename;
          e.name_obj = f.qualname;
          e.linetable_obj = f.linetable;
          e.first_line = f.first_line;
          if (!read_python_str(s_.layout, s_.types, f.filename, &e.filename)) e.filename = "<python>";
          if (!read_python_str(s_.layout, s_.types, f.qualname, &e.name)) e.name = "<python>";
          uintptr_t data = 0;
          size_t size = 0;
          if (python_bytes_span(s_.layout, s_.types, f.linetable, &data, &size) && size <= kMaxCopiedLineTable) {
            e.lines.assign(reinterpret_cast<const uint8_t*>(data), reinterpret_cast<const uint8_t*>(data) + size);
            e.lines_copied = true;
          }
          return true;
        });
  }

  int line_for(uint32_t id, const CodeFacts& f, int index) override {
    CodeEntry* e = s_.entries[id].load(std::memory_order_acquire);
    if (!e || index < 0) return e ? e->first_line : 0;
    std::atomic<uint64_t>& slot = e->memo[static_cast<unsigned>(index) & 3];
    const uint64_t memo = slot.load(std::memory_order_relaxed);
    if (memo != ~uint64_t{0} && static_cast<int>(memo >> 32) == index) return static_cast<int>(static_cast<uint32_t>(memo));
    int line = -1;
    if (e->lines_copied) {
      line = python_line_from_location_table(e->lines.data(), e->lines.size(), e->first_line, index);
    } else {
      uintptr_t data = 0;
      size_t size = 0;
      if (python_bytes_span(s_.layout, s_.types, f.linetable, &data, &size))
        line = python_line_from_location_table(reinterpret_cast<const uint8_t*>(data), size, e->first_line, index);
    }
    if (line < 0) line = 0;
    slot.store((static_cast<uint64_t>(static_cast<uint32_t>(index)) << 32) | static_cast<uint32_t>(line),
                  std::memory_order_relaxed);
    return line;
  }

 private:
  State& s_;
};

PythonWalk capture_direct(State& s, uintptr_t* out, int max) {
  PythonWalk w;
  auto ts = reinterpret_cast<uintptr_t>(s.py.GILState_GetThisThreadState());
  if (!ts) return w;  // a thread Python has never run on
  bool ok = false;
  uintptr_t frame = python_first_frame(s.layout, ts, &ok);
  if (!ok) {
    w.failed = true;
    return w;
  }
  DirectNamer namer(s);
  return walk_python_frames(s.layout, s.types, frame, namer, out, max);
}

std::string api_str(const PyApi& py, void* obj, const char* attr) {
  void* v = py.Object_GetAttrString(obj, attr);
  if (!v) return {};
  const char* s = py.Unicode_AsUTF8(v);
  std::string out = s ? s : "";
  py.DecRef(v);
  return out;
}

PythonWalk capture_api(State& s, uintptr_t* out, int max) {
  PythonWalk w;
  const PyApi& py = s.py;
  void* ts = py.GILState_GetThisThreadState();
  if (!ts) return w;
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
          return true;
        });
    py.DecRef(code);
    out[n++] = python_frame_tag(id, line);
    void* back = py.Frame_GetBack(f);
    py.DecRef(f);
    f = back;
  }
  if (f) py.DecRef(f);
  w.frames = n;
  if (n > 0) {
    w.groups = 1;
    w.group_end[0] = static_cast<uint16_t>(n);
  }
  return w;
}

PythonWalk capture(State& s, uintptr_t* out, int max) {
  if (max <= 0 || !s.py.IsInitialized()) return PythonWalk{};
  if (s.path == Path::Direct) {
    PythonWalk w = capture_direct(s, out, max);
    if (w.failed) g_walks_failed.fetch_add(1, std::memory_order_relaxed);
    return w;
  }
  if (!s.py.GILState_Check()) return PythonWalk{};
  return capture_api(s, out, max);
}

inline bool in_interp(const State& s, uintptr_t pc) { return pc >= s.interp_lo && pc < s.interp_hi; }
inline bool in_eval(const State& s, uintptr_t pc) { return pc >= s.eval_lo && pc < s.eval_hi; }

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
  return s ? capture(*s, out, max_frames).frames : 0;
}

int splice_python_frames(uintptr_t* pcs, int n, int max_out) {
  if (n > max_out) n = max_out;
  if (g_mode.load(std::memory_order_relaxed) == static_cast<int>(PythonReadMode::Off)) return n;
  State* s = state();
  if (!s || n <= 0) return n;
  int first_interp = 0;
  while (first_interp < n && !in_interp(*s, pcs[first_interp] - 1)) ++first_interp;
  if (first_interp == n) return n;  // this stack does not pass through the interpreter
  constexpr int kMax = 512;
  uintptr_t py[kMax];
  PythonWalk w = capture(*s, py, max_out < kMax ? max_out : kMax);
  if (w.frames == 0) return n;
  uintptr_t merged[kMax];
  int m = 0, g = 0, k = 0;
  auto emit = [&](uintptr_t pc) {
    if (m < max_out && m < kMax) merged[m++] = pc;
  };
  auto emit_groups = [&](int count) {
    for (; count > 0 && g < w.groups; --count, ++g)
      for (; k < w.group_end[g]; ++k) emit(py[k]);
  };
  for (int i = 0; i < n;) {
    if (!in_interp(*s, pcs[i] - 1)) {
      emit(pcs[i++]);
      continue;
    }
    // A run of the interpreter's own frames: it is running the next group(s) of Python frames.
    int end = i, evals = 0;
    for (; end < n && in_interp(*s, pcs[end] - 1); ++end) evals += in_eval(*s, pcs[end] - 1);
    bool last_run = true;
    for (int j = end; j < n; ++j)
      if (in_interp(*s, pcs[j] - 1)) {
        last_run = false;
        break;
      }
    if (last_run) {
      emit_groups(w.groups);
      break;  // what lies outside (libc's start, the thread's start) says nothing more
    }
    emit_groups(s->eval_hi ? evals : 1);
    if (g == w.groups) break;  // every Python frame placed: the rest is the process's start
    i = end;
  }
  emit_groups(w.groups);  // the native stack was cut short: the rest still belongs
  for (; k < w.frames; ++k) emit(py[k]);
  std::memcpy(pcs, merged, static_cast<size_t>(m) * sizeof(uintptr_t));
  return m;
}

bool python_present() { return state() != nullptr; }

bool describe_python_frame(uintptr_t tagged, PythonFrameInfo* out) {
  if (!is_python_frame(tagged) || g_found.load(std::memory_order_acquire) != 2) return false;
  uint32_t id = static_cast<uint32_t>((tagged & ~kPythonFrameTag) >> 32);
  static const char kUnnamed[] = "<python>";
  const CodeEntry* e = id > 0 && id < kMaxCodes ? g_state->entries[id].load(std::memory_order_acquire) : nullptr;
  out->filename = e ? std::string_view(e->filename) : std::string_view(kUnnamed);
  out->name = e ? std::string_view(e->name) : std::string_view(kUnnamed);
  out->line = static_cast<int>(static_cast<uint32_t>(tagged));
  return true;
}

std::string_view python_support() {
  State* s = g_found.load(std::memory_order_acquire) == 2 ? g_state : nullptr;
  return s ? std::string_view(s->support) : std::string_view("none");
}

bool python_reads_directly() {
  State* s = g_found.load(std::memory_order_acquire) == 2 ? g_state : nullptr;
  return s && s->path == Path::Direct;
}

uint64_t python_walks_failed() { return g_walks_failed.load(std::memory_order_relaxed); }

}  // namespace memtrace::unwind
