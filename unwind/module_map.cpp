#include "unwind/module_map.hpp"

#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <sys/auxv.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace memtrace::unwind {

namespace {

struct MapsLine {
  uintptr_t start = 0, end = 0;
  std::string_view path;  // "" for anonymous memory
};

// Calls fn(const MapsLine&) for each line of /proc/self/maps until it returns false.
template <class Fn>
void for_each_maps_line(Fn&& fn) {
  FILE* f = std::fopen("/proc/self/maps", "re");
  if (f == nullptr) return;
  char* line = nullptr;
  size_t cap = 0;
  ssize_t len;
  while ((len = getline(&line, &cap, f)) > 0) {
    // start-end perms offset dev inode   path
    unsigned long start = 0, end = 0;
    int path_at = 0;
    if (std::sscanf(line, "%lx-%lx %*s %*s %*s %*s %n", &start, &end, &path_at) < 2) continue;
    MapsLine m;
    m.start = start;
    m.end = end;
    if (path_at > 0 && path_at < len) {
      size_t n = static_cast<size_t>(len - path_at);
      while (n > 0 && (line[path_at + n - 1] == '\n' || line[path_at + n - 1] == ' ')) --n;
      m.path = std::string_view(line + path_at, n);
    }
    if (!fn(m)) break;
  }
  std::free(line);
  std::fclose(f);
}

}  // namespace

std::string mapped_path(uintptr_t addr) {
  std::string result;
  for_each_maps_line([&](const MapsLine& m) {
    if (addr < m.start || addr >= m.end) return true;
    result = m.path;
    return false;
  });
  return result;
}

namespace {

// The GNU build id among the notes of a loaded PT_NOTE segment, as lower-case hex.
std::string build_id_in_notes(uintptr_t at, size_t size) {
  const uintptr_t end = at + size;
  while (at + sizeof(ElfW(Nhdr)) <= end) {
    ElfW(Nhdr) nh;
    std::memcpy(&nh, reinterpret_cast<const void*>(at), sizeof nh);
    uintptr_t name = at + sizeof nh;
    uintptr_t desc = name + ((nh.n_namesz + 3) & ~3u);
    uintptr_t next = desc + ((nh.n_descsz + 3) & ~3u);
    if (next > end || next <= at) break;
    if (nh.n_type == NT_GNU_BUILD_ID && nh.n_namesz == 4 &&
        std::memcmp(reinterpret_cast<const void*>(name), "GNU", 4) == 0) {
      static const char kHex[] = "0123456789abcdef";
      std::string out;
      const auto* d = reinterpret_cast<const unsigned char*>(desc);
      for (uint32_t i = 0; i < nh.n_descsz; ++i) {
        out += kHex[d[i] >> 4];
        out += kHex[d[i] & 15];
      }
      return out;
    }
    at = next;
  }
  return {};
}

uint64_t generation_of(dl_phdr_info* info, size_t size) {
  if (size < offsetof(dl_phdr_info, dlpi_subs) + sizeof(info->dlpi_subs)) return 0;
  return info->dlpi_adds + info->dlpi_subs;
}

}  // namespace

uint64_t loader_generation() {
  uint64_t gen = 0;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t size, void* arg) -> int {
        *static_cast<uint64_t*>(arg) = generation_of(info, size);
        return 1;  // the counters are the same in every entry: stop at the first
      },
      &gen);
  return gen;
}

std::vector<LoadedObject> loaded_objects() {
  struct Raw {
    std::string name;  // as the loader has it
    LoadedObject obj;
  };
  std::vector<Raw> raw;
  // Only copying under the loader's lock; paths are resolved afterwards.
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* arg) -> int {
        auto* out = static_cast<std::vector<Raw>*>(arg);
        Raw r;
        r.name = info->dlpi_name != nullptr ? info->dlpi_name : "";
        r.obj.bias = info->dlpi_addr;
        const uintptr_t page = 4096;
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          if (ph.p_type == PT_NOTE && r.obj.build_id.empty())
            r.obj.build_id = build_id_in_notes(info->dlpi_addr + ph.p_vaddr, ph.p_memsz);
          if (ph.p_type != PT_LOAD || ph.p_memsz == 0) continue;
          uintptr_t s = info->dlpi_addr + ph.p_vaddr;
          uintptr_t e = s + ph.p_memsz;
          r.obj.segments.emplace_back(s, e);
          s &= ~(page - 1);
          e = (e + page - 1) & ~(page - 1);
          if (r.obj.segments.size() == 1 || s < r.obj.start) r.obj.start = s;
          if (e > r.obj.end) r.obj.end = e;
        }
        if (!r.obj.segments.empty()) out->push_back(std::move(r));
        return 0;
      },
      &raw);
  const uintptr_t vdso = getauxval(AT_SYSINFO_EHDR);
  std::vector<LoadedObject> out;
  out.reserve(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) {
    LoadedObject& o = raw[i].obj;
    char buf[PATH_MAX];
    if (i == 0) {  // the program
      ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
      if (n > 0) o.path.assign(buf, static_cast<size_t>(n));
    } else if (vdso != 0 && o.start == vdso) {
      o.path = "[vdso]";
    } else if (!raw[i].name.empty()) {
      o.path = realpath(raw[i].name.c_str(), buf) != nullptr ? std::string(buf) : raw[i].name;
    }
    if (!o.path.empty()) out.push_back(std::move(o));
  }
  return out;
}

ModuleMap::ModuleMap() {
  std::lock_guard<std::mutex> g(mu_);
  read_locked();
}

const std::string* ModuleMap::intern_locked(std::string path) {
  for (const std::string& p : paths_)
    if (p == path) return &p;
  paths_.push_back(std::move(path));
  return &paths_.back();
}

void ModuleMap::read_locked() {
  generation_ = loader_generation();
  std::vector<LoadedObject> objects = loaded_objects();
  // Objects gone since the last read were dlclosed: keep them for late symbolization.
  for (LoadedObject& old : loaded_) {
    bool still = std::any_of(objects.begin(), objects.end(), [&](const LoadedObject& o) {
      return o.start == old.start && o.path == old.path;
    });
    if (!still && unloaded_.size() < 4096) unloaded_.push_back(std::move(old));
  }
  loaded_ = objects;
  segments_.clear();
  modules_ = objects.size();
  for (LoadedObject& o : objects) {
    const std::string* path = intern_locked(std::move(o.path));
    for (const auto& [s, e] : o.segments) segments_.push_back({s, e, path});
  }
  std::sort(segments_.begin(), segments_.end(),
            [](const Segment& a, const Segment& b) { return a.start < b.start; });
}

bool ModuleMap::refresh_if_changed() {
  const uint64_t gen = loader_generation();
  std::lock_guard<std::mutex> g(mu_);
  if (gen == generation_) return false;
  read_locked();
  return true;
}

std::string_view ModuleMap::path_of(uintptr_t addr) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    {
      std::lock_guard<std::mutex> g(mu_);
      auto it = std::upper_bound(segments_.begin(), segments_.end(), addr,
                                 [](uintptr_t a, const Segment& s) { return a < s.start; });
      if (it != segments_.begin()) {
        --it;
        if (addr < it->end) return *it->path;
      }
    }
    if (attempt == 0 && !refresh_if_changed()) break;
  }
  return {};
}

std::vector<LoadedObject> ModuleMap::history() {
  std::lock_guard<std::mutex> g(mu_);
  std::vector<LoadedObject> out = loaded_;
  out.insert(out.end(), unloaded_.begin(), unloaded_.end());
  return out;
}

size_t ModuleMap::module_count() {
  std::lock_guard<std::mutex> g(mu_);
  return modules_;
}

}  // namespace memtrace::unwind
