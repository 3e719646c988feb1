#include "format/utf8.hpp"

#include <cstring>

namespace memtrace::format {

namespace {

// One decoding step at p (avail > 0 bytes). Returns the bytes consumed; *ok tells whether they
// form a valid scalar value. An invalid step consumes the maximal prefix of a well-formed
// sequence (at least one byte), per the Unicode "maximal subpart" practice.
inline size_t utf8_step(const unsigned char* p, size_t avail, bool* ok) {
  unsigned c = p[0];
  if (c < 0x80) {
    *ok = true;
    return 1;
  }
  unsigned need, lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    need = 1;
  } else if (c == 0xE0) {
    need = 2;
    lo = 0xA0;
  } else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) {
    need = 2;
  } else if (c == 0xED) {
    need = 2;
    hi = 0x9F;  // no UTF-16 surrogates
  } else if (c == 0xF0) {
    need = 3;
    lo = 0x90;
  } else if (c >= 0xF1 && c <= 0xF3) {
    need = 3;
  } else if (c == 0xF4) {
    need = 3;
    hi = 0x8F;
  } else {
    *ok = false;
    return 1;
  }
  if (avail < 2 || p[1] < lo || p[1] > hi) {
    *ok = false;
    return 1;
  }
  size_t i = 2;
  for (; i <= need; ++i) {
    if (i >= avail || (p[i] & 0xC0) != 0x80) {
      *ok = false;
      return i;
    }
  }
  *ok = true;
  return need + 1;
}

}  // namespace

size_t utf8_sanitized_size(std::string_view s, bool* valid) {
  const unsigned char* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t n = s.size(), i = 0, out = 0;
  bool all = true;
  while (i < n) {
    if (p[i] < 0x80) {  // ASCII run
      ++i;
      ++out;
      continue;
    }
    bool ok;
    size_t k = utf8_step(p + i, n - i, &ok);
    if (ok) {
      out += k;
    } else {
      out += 3;
      all = false;
    }
    i += k;
  }
  *valid = all;
  return out;
}

void utf8_sanitize_into(std::string_view s, char* out) {
  const unsigned char* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t n = s.size(), i = 0;
  while (i < n) {
    bool ok;
    size_t k = utf8_step(p + i, n - i, &ok);
    if (ok) {
      std::memcpy(out, p + i, k);
      out += k;
    } else {
      *out++ = static_cast<char>(0xEF);
      *out++ = static_cast<char>(0xBF);
      *out++ = static_cast<char>(0xBD);
    }
    i += k;
  }
}

void utf8_sanitize_append(std::string_view s, std::string& out) {
  bool valid;
  size_t n = utf8_sanitized_size(s, &valid);
  if (valid) {
    out.append(s);
    return;
  }
  size_t at = out.size();
  out.resize(at + n);
  utf8_sanitize_into(s, out.data() + at);
}

}  // namespace memtrace::format
