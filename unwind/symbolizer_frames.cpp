// One address's frames: its ELF symbol, source line and inlined frames put together, and the
// blocks of frames and characters that hold every answer for the Symbolizer's lifetime.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "unwind/symbolizer_impl.hpp"

namespace memtrace::unwind {

std::span<const SymFrame> Symbolizer::Impl::Worker::store(const std::vector<SymFrame>& frames) {
  if (frames.size() > block_left) {
    block_left = std::max<size_t>(4096, frames.size());
    frame_blocks.push_back(std::make_unique<SymFrame[]>(block_left));
    block_next = frame_blocks.back().get();
  }
  SymFrame* at = block_next;
  std::copy(frames.begin(), frames.end(), at);
  block_next += frames.size();
  block_left -= frames.size();
  return {at, frames.size()};
}

std::string_view Symbolizer::Impl::Worker::offset_name(std::string_view name, uint64_t offset) {
  char digits[16];
  size_t n = 0;
  do {
    digits[n++] = "0123456789abcdef"[offset & 15];
    offset >>= 4;
  } while (offset != 0);
  const size_t size = name.size() + 3 + n;  // "+0x"
  if (size > chars_left) {
    chars_left = std::max<size_t>(size, 64 * 1024);
    char_blocks.push_back(std::make_unique<char[]>(chars_left));
    chars_next = char_blocks.back().get();
  }
  char* at = chars_next;
  std::memcpy(at, name.data(), name.size());
  std::memcpy(at + name.size(), "+0x", 3);
  for (size_t i = 0; i < n; ++i) at[name.size() + 3 + i] = digits[n - 1 - i];
  chars_next += size;
  chars_left -= size;
  return {at, size};
}

std::span<const SymFrame> Symbolizer::Impl::frames_first(uintptr_t ret) {
  symbolize(main_worker, ret, place_of(ret));
  const std::span<const SymFrame> got = main_worker.store(main_worker.out);
  remember(ret, got);
  return got;
}

void Symbolizer::Impl::symbolize(Worker& w, uintptr_t ret, const Place& at) {
  std::vector<SymFrame>& out = w.out;
  out.clear();
  // A return address points after the call; the call itself is one byte earlier.
  const uintptr_t pc = ret > 0 ? ret - 1 : 0;
  Dwfl_Module* mod = at.mod;
  if (mod == nullptr) {
    out.push_back({w.offset_name("[unknown]", ret), "", 0});
    return;
  }
  const ModuleInfo* info = at.info;

  // ELF symbol (the real, out-of-line function).
  // (What dwfl_module_addrinfo would answer; a sized symbol is only ever chosen when it
  // contains pc, so past its st_size there is no name and module+0xoffset is printed.)
  const char* name = w.symbols(mod, *this).lookup(pc);
  const std::string& elf_name =
      name != nullptr && name[0] != '\0' ? w.elf_name_of(name) : empty_name;

  // Source line at pc, when a compilation unit covers it (a line table alone would answer
  // for code without debug info, such as _start, with the nearest row below).
  const std::string* file = &empty_name;  // points into a line table or text
  int line = 0;
  const Dwarf_Addr bias = at.bias;
  const bool found_by_ranges = at.found_by_ranges;
  Dwarf_Die* cudie = at.cudie;
  const LineTable* table = cudie != nullptr ? line_table(cudie, at.line_slot) : nullptr;
  if (table != nullptr) {
    const std::string* src = nullptr;
    if (table->lookup(pc - bias, src, line)) file = src;
  } else if (cudie != nullptr) {
    // libdw's answer: through the unit found here when its own lookup by address has none.
    LibdwLock lock(libdw_mutex());
    Dwarf_Line* dl = nullptr;
    Dwarf_Addr line_bias = 0;
    if (found_by_ranges) {
      dl = dwarf_getsrc_die(cudie, pc - bias);
    } else if (Dwfl_Line* l = dwfl_module_getsrc(mod, pc)) {
      dl = dwfl_dwarf_line(l, &line_bias);
    }
    if (dl != nullptr) {
      if (const char* src = dwarf_linesrc(dl, nullptr, nullptr)) file = w.keep(src);
      dwarf_lineno(dl, &line);
    }
  }

  // Inlined frames: the DIE nesting around the innermost scope at pc.
  bool have_function = false;
  ScopeIndex* index = cudie != nullptr ? scope_index(cudie, at.scope_slot) : nullptr;
  int innermost = -1;
  if (index != nullptr) {
    innermost = index->innermost(pc - bias);
    if (!index->usable) index = nullptr;  // unreadable further down: libdw answers
  }
  if (index != nullptr) {
    for (int i = innermost; i >= 0; i = index->nodes[i].parent) {
      ScopeIndex::Node& node = index->nodes[i];
      if (node.tag == DW_TAG_inlined_subroutine) {
        if (node.name == nullptr) node.name = &node_name(w, *index, node);
        out.push_back({*node.name, *file, line});
        if (!node.have_call) node_call_site(w, *index, node, table);
        file = node.call_file != nullptr ? node.call_file : &empty_name;
        line = node.call_line;
      } else if (node.tag == DW_TAG_subprogram || node.tag == DW_TAG_entry_point) {
        if (elf_name.empty() && node.name == nullptr) node.name = &node_name(w, *index, node);
        const std::string& fn = elf_name.empty() ? *node.name : elf_name;
        if (!fn.empty()) {
          out.push_back({fn, *file, line});
          have_function = true;
        }
        break;
      }
    }
  } else if (cudie != nullptr) {
    LibdwLock lock(libdw_mutex());
    Dwarf_Die* scopes = nullptr;
    int n = dwarf_getscopes(cudie, pc - bias, &scopes);
    if (n > 0) {
      Dwarf_Die innermost = scopes[0];
      std::free(scopes);
      scopes = nullptr;
      n = dwarf_getscopes_die(&innermost, &scopes);
      for (int i = 0; i < n; ++i) {
        Dwarf_Die* d = &scopes[i];
        int tag = dwarf_tag(d);
        if (tag == DW_TAG_inlined_subroutine) {
          out.push_back({w.dwarf_name_of(d), *file, line});
          call_site(d, table, w.text, file, line);
          if (file == nullptr) file = &empty_name;
        } else if (tag == DW_TAG_subprogram || tag == DW_TAG_entry_point) {
          const std::string& fn = elf_name.empty() ? w.dwarf_name_of(d) : elf_name;
          if (!fn.empty()) {
            out.push_back({fn, *file, line});
            have_function = true;
          }
          break;
        }
      }
    }
    std::free(scopes);
  }
  if (!have_function) {
    std::string_view fn = elf_name;
    if (fn.empty()) {
      std::string_view mod_path = info != nullptr ? std::string_view(info->path) : "";
      uintptr_t base = info != nullptr ? info->bias : 0;
      fn = w.offset_name(base_name(mod_path), ret - base);
    }
    out.push_back({fn, *file, line});
  }
}

}  // namespace memtrace::unwind
