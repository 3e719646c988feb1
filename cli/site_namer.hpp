// Function names for a running process's call sites in `memtrace top`. bin/memtrace links no
// symbolizer (docs/design.md), so a `memtrace-recover --names STATE_FILE` helper is started the
// first time a name is wanted and kept for the life of the top; each address is asked once.
// When the helper cannot run or dies, names fall back to the raw frame the caller gives.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <unordered_map>

namespace memtrace::cli {

class SiteNamer {
 public:
  explicit SiteNamer(std::string state_file) : state_file_(std::move(state_file)) {}
  ~SiteNamer();
  SiteNamer(const SiteNamer&) = delete;
  SiteNamer& operator=(const SiteNamer&) = delete;

  // The name of the return address `pc`, or `fallback` when no helper answers.
  std::string name(uintptr_t pc, const std::string& fallback);

 private:
  bool start();
  void stop();

  std::string state_file_;
  pid_t child_ = -1;
  std::FILE* to_ = nullptr;
  std::FILE* from_ = nullptr;
  bool failed_ = false;
  std::unordered_map<uintptr_t, std::string> names_;
};

}  // namespace memtrace::cli
