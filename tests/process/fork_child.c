/* Threads: forked children and memtrace's record. The first child is forked before the parent
 * initialises CUDA: it initialises the driver itself, allocates, and writes its own snapshot
 * (MEMTRACE_OUTPUT with %p) holding only its own allocations. The second is forked after the
 * parent allocated: there the driver refuses every call (CUDA_ERROR_NOT_INITIALIZED, as the real
 * driver does in a child of an initialised process), and the child's snapshot must not show the
 * parent's allocations as its own. Its lines start with "LATE ". */
#include <sys/wait.h>

#include "mt_case.h"

static int wait_child(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int main(void) {
  mt_init();
  printf("PID %d\n", (int)getpid());
  fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) {
    printf("STOP fork\n");
    return 3;
  }
  if (pid == 0) {
    mt_prefix = "CHILD ";
    printf("CHILD PID %d\n", (int)getpid());
    mt_setup(0);
    mt_mem_alloc("child_alloc_1", 3 << 20);
    CUdeviceptr c2 = mt_mem_alloc("child_alloc_2", 4096);
    mt_mem_free("child_free_2", c2);
    mt_done();
    exit(0); /* exit(), not _exit(): the child's snapshot is written at exit */
  }
  printf("CHILD_STATUS %d\n", wait_child(pid));

  mt_setup(0);
  mt_mem_alloc("parent_alloc_1", 1 << 20);
  CUdeviceptr gone = mt_mem_alloc("parent_alloc_2", 8192);
  mt_mem_free("parent_free_2", gone);
  fflush(stdout);
  pid = fork();
  if (pid < 0) {
    printf("STOP fork\n");
    return 3;
  }
  if (pid == 0) {
    mt_prefix = "LATE ";
    printf("LATE PID %d\n", (int)getpid());
    CUdeviceptr p = 0;
    CU("late_alloc", cuMemAlloc(&p, 5 << 20));
    printf("LATE DONE\n");
    fflush(stdout);
    exit(0);
  }
  printf("LATE_STATUS %d\n", wait_child(pid));
  mt_mem_alloc("parent_alloc_3", 65536);
  mt_done();
  return 0;
}
