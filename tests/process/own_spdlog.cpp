/* A program with its own spdlog (Debian's shared libspdlog, over the shared libfmt), as many C++
 * programs memtrace is preloaded into have. It configures spdlog globally (trace level, its own
 * pattern), logs before and after its first CUDA call (which starts memtrace's session, whose
 * configuration warnings go through memtrace's spdlog logger), and looks for memtrace's logger in
 * its registry. memtrace's header-only, hidden copy must neither see these settings nor be seen:
 *   REGISTRY memtrace <0|1>     whether spdlog::get("memtrace") found a logger
 * and its own lines, "own info ..." / "own debug ...", on stdout. */
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include "mt_case.h"

int main() {
  mt_init();
  auto own = spdlog::stdout_logger_mt("own");
  spdlog::set_default_logger(own);
  spdlog::set_pattern("%n %l %v");
  spdlog::set_level(spdlog::level::trace);
  spdlog::info("before cuda {}", 1);
  mt_setup(0);
  CUdeviceptr a = mt_mem_alloc("alloc_a", 1 << 20);
  CUdeviceptr b = mt_mem_alloc("alloc_b", 4096);
  mt_mem_free("free_b", b);
  (void)a;
  spdlog::debug("after cuda {}", 2);
  std::printf("REGISTRY memtrace %d\n", spdlog::get("memtrace") ? 1 : 0);
  spdlog::shutdown();
  mt_done();
  return 0;
}
