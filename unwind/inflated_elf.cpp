// An ELF file written again with its compressed sections inflated (unwind/inflated_elf.hpp):
// libelf lays it out, libdeflate inflates, and deferred sections are left as holes.
#include "unwind/inflated_elf.hpp"

#include <libdeflate.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

namespace memtrace::unwind::detail {

namespace {

constexpr unsigned char kHostData = __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ ? ELFDATA2LSB : ELFDATA2MSB;

// The deferred sections' room past the section headers (they were written as SHT_NOBITS, which
// libelf neither fills nor pads up to): their offsets set in dst, *end the file's new size.
std::string place_deferred(Elf* dst, uint64_t shoff, std::vector<Deferred>& deferred, uint64_t* end) {
  size_t shnum = 0;
  if (elf_getshdrnum(dst, &shnum) != 0) return elf_errmsg(-1);
  uint64_t at = shoff + shnum * gelf_fsize(dst, ELF_T_SHDR, 1, EV_CURRENT);
  for (Deferred& d : deferred) {
    Elf_Scn* scn = elf_getscn(dst, d.index);
    GElf_Shdr sh;
    if (scn == nullptr || gelf_getshdr(scn, &sh) == nullptr) return elf_errmsg(-1);
    const uint64_t align = sh.sh_addralign > 1 ? sh.sh_addralign : 1;
    at = (at + align - 1) / align * align;
    sh.sh_offset = d.offset = at;
    if (gelf_update_shdr(scn, &sh) == 0) return elf_errmsg(-1);
    at += sh.sh_size;
  }
  *end = at;
  return "";
}

// Once written: the deferred sections' headers say SHT_PROGBITS, and the file holds their room.
std::string claim_deferred(Elf* dst, int out, uint64_t shoff, const std::vector<Deferred>& deferred, uint64_t end) {
  if (ftruncate(out, static_cast<off_t>(end)) != 0) return std::strerror(errno);
  const size_t shentsize = gelf_fsize(dst, ELF_T_SHDR, 1, EV_CURRENT);
  const uint32_t progbits = SHT_PROGBITS;
  for (const Deferred& d : deferred) {
    // sh_type follows the 4-byte sh_name in both classes' section headers.
    const off_t at = static_cast<off_t>(shoff + d.index * shentsize + 4);
    if (pwrite(out, &progbits, sizeof progbits, at) != static_cast<ssize_t>(sizeof progbits)) return std::strerror(errno);
  }
  return "";
}

}  // namespace

bool compressed_payload(Elf* elf, Elf_Scn* scn, Compressed* out, std::string* err) {
  const size_t header = gelf_fsize(elf, ELF_T_CHDR, 1, EV_CURRENT);
  Elf_Data* raw = elf_rawdata(scn, nullptr);
  if (raw == nullptr || header == 0 || raw->d_size < header || gelf_getchdr(scn, &out->ch) == nullptr) {
    *err = "a compressed section without its header";
    return false;
  }
  out->in = static_cast<const unsigned char*>(raw->d_buf) + header;
  out->in_size = raw->d_size - header;
  return true;
}

bool inflate_whole(const Compressed& c, unsigned char* out, std::string* err) {
  std::unique_ptr<libdeflate_decompressor, void (*)(libdeflate_decompressor*)> d(libdeflate_alloc_decompressor(),
                                                                                 libdeflate_free_decompressor);
  if (d == nullptr) {
    *err = "out of memory";
    return false;
  }
  if (libdeflate_zlib_decompress(d.get(), c.in, c.in_size, out, c.ch.ch_size, nullptr) != LIBDEFLATE_SUCCESS) {
    *err = "a compressed section that does not inflate to its stated size";
    return false;
  }
  return true;
}

std::string write_inflated(Elf* src, int out, const std::function<bool(const char*)>& defer,
                           std::vector<Deferred>* deferred) {
  std::vector<Deferred> own;
  std::vector<Deferred>& later = deferred != nullptr ? *deferred : own;
  later.clear();
  Elf* dst = elf_begin(out, ELF_C_WRITE, nullptr);
  if (dst == nullptr) return elf_errmsg(-1);
  std::string err;
  GElf_Ehdr eh;
  size_t phnum = 0, shstrndx = 0;
  if (gelf_getehdr(src, &eh) == nullptr || elf_getphdrnum(src, &phnum) != 0 || elf_getshdrstrndx(src, &shstrndx) != 0 ||
      gelf_newehdr(dst, gelf_getclass(src)) == nullptr || (phnum > 0 && gelf_newphdr(dst, phnum) == nullptr))
    err = elf_errmsg(-1);
  const bool may_defer = defer && eh.e_ident[EI_DATA] == kHostData;
  for (size_t i = 0; err.empty() && i < phnum; ++i) {
    GElf_Phdr ph;
    if (gelf_getphdr(src, static_cast<int>(i), &ph) == nullptr || gelf_update_phdr(dst, static_cast<int>(i), &ph) == 0)
      err = elf_errmsg(-1);
  }
  const size_t ehsize = gelf_fsize(dst, ELF_T_EHDR, 1, EV_CURRENT);
  uint64_t offset = ehsize + phnum * gelf_fsize(dst, ELF_T_PHDR, 1, EV_CURRENT);
  std::vector<std::unique_ptr<unsigned char[]>> inflated;  // what the new sections' data views
  for (Elf_Scn* scn = elf_nextscn(src, nullptr); err.empty() && scn != nullptr; scn = elf_nextscn(src, scn)) {
    GElf_Shdr sh;
    GElf_Chdr ch;
    if (gelf_getshdr(scn, &sh) == nullptr || ((sh.sh_flags & SHF_COMPRESSED) && gelf_getchdr(scn, &ch) == nullptr)) {
      err = elf_errmsg(-1);
      break;
    }
    Elf_Data mine{};  // a zlib section's inflated bytes, when it is one
    bool later_one = false;
    if ((sh.sh_flags & SHF_COMPRESSED) && ch.ch_type == ELFCOMPRESS_ZLIB) {
      const char* name = elf_strptr(src, shstrndx, sh.sh_name);
      Compressed c;
      if (!compressed_payload(src, scn, &c, &err)) break;
      later_one = may_defer && name != nullptr && defer(name);
      if (later_one) {
        later.push_back({name, 0, 0, c});
      } else {
        inflated.emplace_back(new (std::nothrow) unsigned char[ch.ch_size ? ch.ch_size : 1]);
        if (inflated.back() == nullptr) err = "out of memory";
        if (!err.empty() || !inflate_whole(c, inflated.back().get(), &err)) break;
        mine.d_buf = inflated.back().get();
        mine.d_type = ELF_T_BYTE;
        mine.d_size = ch.ch_size;
        mine.d_align = ch.ch_addralign;
        mine.d_version = EV_CURRENT;
      }
      sh.sh_flags &= ~static_cast<GElf_Xword>(SHF_COMPRESSED);
      sh.sh_size = ch.ch_size;
      sh.sh_addralign = ch.ch_addralign;
    } else if ((sh.sh_flags & SHF_COMPRESSED) && (elf_compress(scn, 0, 0) < 0 || gelf_getshdr(scn, &sh) == nullptr)) {
      err = elf_errmsg(-1);  // another compression (zstd): libelf inflates it, if it can
      break;
    }
    Elf_Scn* to = elf_newscn(dst);
    if (to == nullptr) {
      err = elf_errmsg(-1);
      break;
    }
    if (later_one) {
      later.back().index = elf_ndxscn(to);
      sh.sh_type = SHT_NOBITS;  // until claim_deferred: libelf writes nothing for it
      sh.sh_offset = 0;         // placed by place_deferred
      if (gelf_update_shdr(to, &sh) == 0) err = elf_errmsg(-1);
      continue;
    }
    const uint64_t align = sh.sh_addralign > 1 ? sh.sh_addralign : 1;
    offset = (offset + align - 1) / align * align;
    sh.sh_offset = offset;
    if (sh.sh_type != SHT_NOBITS) {
      Elf_Data* from = mine.d_buf != nullptr ? &mine : elf_getdata(scn, nullptr);
      Elf_Data* data = elf_newdata(to);
      if (data == nullptr) {
        err = elf_errmsg(-1);
        break;
      }
      if (from != nullptr) {
        *data = *from;
        data->d_off = 0;
      }
      offset += sh.sh_size;
    }
    if (gelf_update_shdr(to, &sh) == 0) err = elf_errmsg(-1);
  }
  uint64_t end = 0;
  if (err.empty()) {
    eh.e_phoff = phnum > 0 ? ehsize : 0;
    eh.e_shoff = (offset + 7) / 8 * 8;
    if (!later.empty()) err = place_deferred(dst, eh.e_shoff, later, &end);
    // The names' section keeps its index; past SHN_LORESERVE it lives in section 0's sh_link.
    if (err.empty() && shstrndx >= SHN_LORESERVE) {
      eh.e_shstrndx = SHN_XINDEX;
      GElf_Shdr zero;
      Elf_Scn* first = elf_getscn(dst, 0);
      if (first == nullptr || gelf_getshdr(first, &zero) == nullptr) {
        err = elf_errmsg(-1);
      } else {
        zero.sh_link = static_cast<GElf_Word>(shstrndx);
        if (gelf_update_shdr(first, &zero) == 0) err = elf_errmsg(-1);
      }
    }
    if (err.empty() && gelf_update_ehdr(dst, &eh) == 0) err = elf_errmsg(-1);
  }
  if (err.empty()) {
    elf_flagelf(dst, ELF_C_SET, ELF_F_LAYOUT);
    if (elf_update(dst, ELF_C_WRITE) < 0) err = elf_errmsg(-1);
  }
  if (err.empty() && !later.empty()) err = claim_deferred(dst, out, eh.e_shoff, later, end);
  elf_end(dst);
  return err;
}

}  // namespace memtrace::unwind::detail
