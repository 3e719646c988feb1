/* Threads: a forked child that allocates writes its own snapshot (MEMTRACE_OUTPUT with %p),
 * holding only its own allocations; the parent's holds only the parent's. */
#include <sys/wait.h>

#include "mt_case.h"

int main(void) {
  mt_init();
  mt_setup(0);
  printf("PID %d\n", (int)getpid());
  mt_mem_alloc("parent_alloc_1", 1 << 20);
  CUdeviceptr gone = mt_mem_alloc("parent_alloc_2", 8192);
  mt_mem_free("parent_free_2", gone);
  fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) {
    printf("STOP fork\n");
    return 3;
  }
  if (pid == 0) {
    mt_prefix = "CHILD ";
    printf("CHILD PID %d\n", (int)getpid());
    mt_mem_alloc("child_alloc_1", 3 << 20);
    CUdeviceptr c2 = mt_mem_alloc("child_alloc_2", 4096);
    mt_mem_free("child_free_2", c2);
    mt_done();
    exit(0); /* exit(), not _exit(): the child's snapshot is written at exit */
  }
  int status = 0;
  waitpid(pid, &status, 0);
  printf("CHILD_STATUS %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
  mt_mem_alloc("parent_alloc_3", 65536);
  mt_done();
  return 0;
}
