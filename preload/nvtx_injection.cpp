// NVTX ranges with no change to the program (docs/ranges.md). NVTX v3 is compiled into every
// library that uses it; at its first call each copy reads NVTX_INJECTION64_PATH, loads that
// library and calls its InitializeInjectionNvtx2, which fills that copy's function tables. The
// variable names libmemtrace.so (memtrace run sets it; a bare LD_PRELOAD gets it set here as the
// library loads), so every copy in the process lands in preload/ranges.cpp.
#define NVTX_NO_IMPL
#include <nvtx3/nvToolsExt.h>

#include <dlfcn.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <cstring>
#include <cwchar>
#include <string_view>

#include "core/cold_log.hpp"
#include "core/config.hpp"
#include "preload/driver_decls.hpp"
#include "preload/ranges.hpp"
#include "preload/real_dlsym.hpp"

namespace memtrace::preload {

namespace {

namespace rg = ranges;

// NVTX hands domains and registered strings back to us as opaque pointers: ours are small ids.
rg::Domain domain_of(nvtxDomainHandle_t h) { return static_cast<rg::Domain>(reinterpret_cast<uintptr_t>(h)); }

// Wide text (UTF-32 on Linux) as UTF-8, cut to what the range table keeps.
std::string_view utf8_of(const wchar_t* w, char* buf, size_t cap) {
  size_t n = 0;
  for (; w && *w; ++w) {
    uint32_t c = static_cast<uint32_t>(*w);
    if (c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) c = 0xFFFD;
    char tmp[4];
    size_t k;
    if (c < 0x80) {
      tmp[0] = static_cast<char>(c), k = 1;
    } else if (c < 0x800) {
      tmp[0] = static_cast<char>(0xC0 | (c >> 6)), tmp[1] = static_cast<char>(0x80 | (c & 0x3F)), k = 2;
    } else if (c < 0x10000) {
      tmp[0] = static_cast<char>(0xE0 | (c >> 12)), tmp[1] = static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      tmp[2] = static_cast<char>(0x80 | (c & 0x3F)), k = 3;
    } else {
      tmp[0] = static_cast<char>(0xF0 | (c >> 18)), tmp[1] = static_cast<char>(0x80 | ((c >> 12) & 0x3F));
      tmp[2] = static_cast<char>(0x80 | ((c >> 6) & 0x3F)), tmp[3] = static_cast<char>(0x80 | (c & 0x3F)), k = 4;
    }
    if (n + k > cap) break;
    std::memcpy(buf + n, tmp, k);
    n += k;
  }
  return {buf, n};
}

constexpr size_t kTextCap = 1024;

// What an event's attributes name. A registered string is a name id already; a message of no
// type, or an attribute structure too small to hold one, is an unnamed range ("").
struct Message {
  bool registered = false;
  uint32_t id = 0;
  std::string_view text;
};
Message message_of(const nvtxEventAttributes_t* a, char* buf) {
  Message m;
  if (!a || a->size < offsetof(nvtxEventAttributes_t, message) + sizeof(a->message)) return m;
  switch (a->messageType) {
    case NVTX_MESSAGE_TYPE_ASCII:
      if (a->message.ascii) m.text = a->message.ascii;
      break;
    case NVTX_MESSAGE_TYPE_UNICODE: m.text = utf8_of(a->message.unicode, buf, kTextCap); break;
    case NVTX_MESSAGE_TYPE_REGISTERED:
      m.registered = true;
      m.id = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(a->message.registered));
      break;
    default: break;
  }
  return m;
}

int push_attr(rg::Domain d, const nvtxEventAttributes_t* a) {
  char buf[kTextCap];
  const Message m = message_of(a, buf);
  return m.registered ? rg::push_registered(d, m.id) : rg::push(d, m.text);
}

nvtxRangeId_t start_attr(rg::Domain d, const nvtxEventAttributes_t* a) {
  char buf[kTextCap];
  const Message m = message_of(a, buf);
  return m.registered ? rg::start_registered(d, m.id) : rg::start(d, m.text);
}

void mark_attr(rg::Domain d, const nvtxEventAttributes_t* a) {
  char buf[kTextCap];
  const Message m = message_of(a, buf);
  if (m.registered)
    rg::mark_registered(d, m.id);
  else
    rg::mark(d, m.text);
}

// ---- the functions NVTX calls ----
void NVTX_API mark_ex(const nvtxEventAttributes_t* a) { mark_attr(0, a); }
void NVTX_API mark_a(const char* m) { rg::mark(0, m ? m : ""); }
void NVTX_API mark_w(const wchar_t* m) {
  char buf[kTextCap];
  rg::mark(0, utf8_of(m, buf, kTextCap));
}
nvtxRangeId_t NVTX_API start_ex(const nvtxEventAttributes_t* a) { return start_attr(0, a); }
nvtxRangeId_t NVTX_API start_a(const char* m) { return rg::start(0, m ? m : ""); }
nvtxRangeId_t NVTX_API start_w(const wchar_t* m) {
  char buf[kTextCap];
  return rg::start(0, utf8_of(m, buf, kTextCap));
}
void NVTX_API range_end(nvtxRangeId_t id) { rg::end(id); }
int NVTX_API push_ex(const nvtxEventAttributes_t* a) { return push_attr(0, a); }
int NVTX_API push_a(const char* m) { return rg::push(0, m ? m : ""); }
int NVTX_API push_w(const wchar_t* m) {
  char buf[kTextCap];
  return rg::push(0, utf8_of(m, buf, kTextCap));
}
int NVTX_API range_pop() { return rg::pop(0); }

void NVTX_API domain_mark_ex(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) { mark_attr(domain_of(d), a); }
nvtxRangeId_t NVTX_API domain_start_ex(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) {
  return start_attr(domain_of(d), a);
}
void NVTX_API domain_end(nvtxDomainHandle_t, nvtxRangeId_t id) { rg::end(id); }
int NVTX_API domain_push_ex(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) { return push_attr(domain_of(d), a); }
int NVTX_API domain_pop(nvtxDomainHandle_t d) { return rg::pop(domain_of(d)); }
nvtxStringHandle_t NVTX_API register_a(nvtxDomainHandle_t d, const char* s) {
  return reinterpret_cast<nvtxStringHandle_t>(static_cast<uintptr_t>(rg::register_name(domain_of(d), s ? s : "")));
}
nvtxStringHandle_t NVTX_API register_w(nvtxDomainHandle_t d, const wchar_t* s) {
  char buf[kTextCap];
  return reinterpret_cast<nvtxStringHandle_t>(
      static_cast<uintptr_t>(rg::register_name(domain_of(d), utf8_of(s, buf, kTextCap))));
}
nvtxDomainHandle_t NVTX_API domain_create_a(const char* name) {
  return reinterpret_cast<nvtxDomainHandle_t>(static_cast<uintptr_t>(rg::domain_create(name ? name : "")));
}
nvtxDomainHandle_t NVTX_API domain_create_w(const wchar_t* name) {
  char buf[kTextCap];
  return reinterpret_cast<nvtxDomainHandle_t>(static_cast<uintptr_t>(rg::domain_create(utf8_of(name, buf, kTextCap))));
}
void NVTX_API domain_destroy(nvtxDomainHandle_t) {}  // its handle stays valid: events may still name it
void NVTX_API initialize(const void*) {}

void fill(NvtxFunctionTable table, unsigned size, unsigned id, NvtxFunctionPointer fn) {
  if (table && id < size && table[id]) *table[id] = fn;
}
template <typename F>
NvtxFunctionPointer fp(F f) {
  return reinterpret_cast<NvtxFunctionPointer>(f);
}

bool same_file(const char* a, const char* b) {
  struct stat sa, sb;
  return a && b && ::stat(a, &sa) == 0 && ::stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

const char* own_path() {
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&own_path), &info) == 0) return nullptr;
  return info.dli_fname;
}

// Whether the driver names the program reaches are ours: the library was preloaded, not loaded
// only by NVTX (a child that dropped LD_PRELOAD but kept the variable).
bool preloaded() {
  void* found = next_dlsym()(RTLD_DEFAULT, "cuMemAlloc_v2");
  Dl_info a, me;
  return found && dladdr(found, &a) != 0 && dladdr(reinterpret_cast<void*>(&own_path), &me) != 0 &&
         a.dli_fbase == me.dli_fbase;
}

bool nvtx_off() {
  const char* v = secure_getenv("MEMTRACE_NVTX");
  bool on = true;
  return v && parse_bool(v, &on) && !on;
}

// As the library loads: NVTX reads the variable at its first call, after this.
__attribute__((constructor)) void offer_nvtx_injection() {
  if (nvtx_off()) return;
  const char* mine = own_path();
  if (!mine || !*mine) return;
  const char* set = getenv("NVTX_INJECTION64_PATH");
  if (!set || !*set) {
    ::setenv("NVTX_INJECTION64_PATH", mine, 0);
    return;
  }
  if (!same_file(set, mine))
    log::cold().warn("NVTX_INJECTION64_PATH already names another tool ({}); memtrace leaves it alone and "
                     "records no NVTX ranges",
                     set);
}

}  // namespace

}  // namespace memtrace::preload

// NVTX's entry point. Each NVTX copy in the process calls it once; every call fills that copy's
// tables. Declined (0) when memtrace does not record here: MEMTRACE_NVTX=0, or the library was
// loaded only by NVTX, not preloaded, so its hooks see nothing.
extern "C" MEMTRACE_EXPORT int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_export_table) {
  using namespace memtrace::preload;
  if (nvtx_off() || !get_export_table) return 0;
  if (!preloaded()) return 0;
  auto* cb = static_cast<const NvtxExportTableCallbacks*>(get_export_table(NVTX_ETID_CALLBACKS));
  if (!cb || cb->struct_size < sizeof(NvtxExportTableCallbacks) || !cb->GetModuleFunctionTable) return 0;
  NvtxFunctionTable t = nullptr;
  unsigned n = 0;
  if (!cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &t, &n) || !t) return 0;
  fill(t, n, NVTX_CBID_CORE_MarkEx, fp(&mark_ex));
  fill(t, n, NVTX_CBID_CORE_MarkA, fp(&mark_a));
  fill(t, n, NVTX_CBID_CORE_MarkW, fp(&mark_w));
  fill(t, n, NVTX_CBID_CORE_RangeStartEx, fp(&start_ex));
  fill(t, n, NVTX_CBID_CORE_RangeStartA, fp(&start_a));
  fill(t, n, NVTX_CBID_CORE_RangeStartW, fp(&start_w));
  fill(t, n, NVTX_CBID_CORE_RangeEnd, fp(&range_end));
  fill(t, n, NVTX_CBID_CORE_RangePushEx, fp(&push_ex));
  fill(t, n, NVTX_CBID_CORE_RangePushA, fp(&push_a));
  fill(t, n, NVTX_CBID_CORE_RangePushW, fp(&push_w));
  fill(t, n, NVTX_CBID_CORE_RangePop, fp(&range_pop));
  t = nullptr;
  n = 0;
  if (cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &t, &n) && t) {
    fill(t, n, NVTX_CBID_CORE2_DomainMarkEx, fp(&domain_mark_ex));
    fill(t, n, NVTX_CBID_CORE2_DomainRangeStartEx, fp(&domain_start_ex));
    fill(t, n, NVTX_CBID_CORE2_DomainRangeEnd, fp(&domain_end));
    fill(t, n, NVTX_CBID_CORE2_DomainRangePushEx, fp(&domain_push_ex));
    fill(t, n, NVTX_CBID_CORE2_DomainRangePop, fp(&domain_pop));
    fill(t, n, NVTX_CBID_CORE2_DomainRegisterStringA, fp(&register_a));
    fill(t, n, NVTX_CBID_CORE2_DomainRegisterStringW, fp(&register_w));
    fill(t, n, NVTX_CBID_CORE2_DomainCreateA, fp(&domain_create_a));
    fill(t, n, NVTX_CBID_CORE2_DomainCreateW, fp(&domain_create_w));
    fill(t, n, NVTX_CBID_CORE2_DomainDestroy, fp(&domain_destroy));
    fill(t, n, NVTX_CBID_CORE2_Initialize, fp(&initialize));
  }
  return 1;
}
