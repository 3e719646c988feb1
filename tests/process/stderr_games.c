/* What a program does with its stderr must not change what memtrace does to the program:
 *   "redirect FILE": puts FILE on fd 2 (dup2) and writes its own data there; memtrace's lines must
 *                    not land in it.
 *   "pipe":          its stderr is a pipe whose reader has gone; it exits 7, and memtrace's summary
 *                    at exit must not turn that into death by SIGPIPE. */
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "mt_case.h"

int main(int argc, char** argv) {
  mt_init();
  mt_setup(0);
  (void)mt_mem_alloc("kept", 1 << 20);
  if (argc > 2 && strcmp(argv[1], "redirect") == 0) {
    int fd = open(argv[2], O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || dup2(fd, 2) < 0) return 3;
    close(fd);
    static const char data[] = "program data\n";
    (void)!write(2, data, sizeof data - 1);
  }
  mt_done();
  return 7;
}
