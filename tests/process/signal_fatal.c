/* Signals that end the program: "segv" allocates and then faults (MEMTRACE_SIGNAL=SEGV must not
 * turn the fault into an endless loop of snapshots); "term" allocates and sends itself SIGTERM
 * (MEMTRACE_SIGNAL=TERM: a snapshot, then the default action, death by SIGTERM). Prints SURVIVED
 * if it is still running 60 s after the signal (a loaded machine may take seconds to dump). */
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mt_case.h"

int main(int argc, char** argv) {
  mt_init();
  mt_setup(0);
  (void)mt_mem_alloc("kept", 3 << 20);
  if (argc > 1 && strcmp(argv[1], "segv") == 0) {
    printf("FAULTING\n");
    fflush(stdout);
    volatile int* volatile nowhere = NULL;
    *nowhere = 1;
  } else {
    printf("TERMINATING\n");
    fflush(stdout);
    kill(getpid(), SIGTERM);
  }
  for (int i = 0; i < 600; ++i) {
    struct timespec ts = {0, 100 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  printf("SURVIVED\n");
  return 0;
}
