/* The program takes the dump signal (SIGUSR2) away from memtrace: "replace" installs its own
 * handler and sends itself the signal (its handler, not memtrace's, runs); "block" blocks it and
 * sends it (nobody takes it). Either way no snapshot follows the signal, and memtrace must say so
 * once. Prints HANDLED when its own handler ran. argv[2], if given: milliseconds to run on after
 * the signal (then "RUNNING ON" goes to stderr first), time for memtrace's periodic look. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mt_case.h"

static volatile sig_atomic_t handled = 0;
static void on_usr2(int sig) {
  (void)sig;
  handled = 1;
}

int main(int argc, char** argv) {
  mt_init();
  mt_setup(0);
  (void)mt_mem_alloc("kept", 1 << 20);
  if (argc > 1 && strcmp(argv[1], "replace") == 0) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr2;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR2, &sa, NULL);
    raise(SIGUSR2);
    if (handled) printf("HANDLED\n");
  } else {
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, SIGUSR2);
    sigprocmask(SIG_BLOCK, &one, NULL);
    kill(getpid(), SIGUSR2);
  }
  if (argc > 2) {
    long ms = atol(argv[2]);
    fprintf(stderr, "RUNNING ON\n");
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
    fprintf(stderr, "RAN ON\n");
  }
  mt_done();
  return 0;
}
