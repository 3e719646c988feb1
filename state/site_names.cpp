#include "state/site_names.hpp"

#include <cinttypes>
#include <cstdlib>
#include <memory>
#include <vector>

#include <fmt/format.h>

#include "state/state_reader.hpp"
#include "unwind/symbolizer.hpp"

namespace memtrace::state {

namespace {

bool covered(const std::vector<unwind::LoadedObject>& objects, uintptr_t a) {
  for (const unwind::LoadedObject& o : objects)
    if (a >= o.start && a < o.end) return true;
  return false;
}

std::string name_of(unwind::Symbolizer& sym, uintptr_t a) {
  const auto frames = sym.frames(a);
  const unwind::SymFrame& f = frames.front();  // innermost: where the call is, inlined or not
  if (f.file.empty()) return std::string(f.function);
  const size_t slash = f.file.rfind('/');
  const std::string_view file = slash == std::string_view::npos ? f.file : f.file.substr(slash + 1);
  return fmt::format("{} ({}:{})", f.function, file, f.line);
}

}  // namespace

int serve_site_names(const std::string& state_file, std::FILE* in, std::FILE* out) {
  std::vector<unwind::LoadedObject> objects;
  std::string why;
  if (!read_state_modules(state_file, &objects, &why)) {
    std::fprintf(stderr, "memtrace-recover: %s\n", why.c_str());
    return 2;
  }
  auto sym = std::make_unique<unwind::Symbolizer>(objects);
  char line[64];
  while (std::fgets(line, sizeof line, in)) {
    char* end = nullptr;
    const uintptr_t a = std::strtoull(line, &end, 16);
    if (end == line) {
      std::fputs("?\n", out);
    } else {
      if (!covered(objects, a)) {
        std::vector<unwind::LoadedObject> now;
        if (read_state_modules(state_file, &now, &why) && now.size() != objects.size()) {
          objects = std::move(now);
          sym = std::make_unique<unwind::Symbolizer>(objects);
        }
      }
      std::fprintf(out, "%s\n", name_of(*sym, a).c_str());
    }
    std::fflush(out);
  }
  return 0;
}

}  // namespace memtrace::state
