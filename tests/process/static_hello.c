/* A statically linked program: `memtrace run` cannot put memtrace in front of it and must say so. */
#include <stdio.h>

int main(void) {
  printf("STATIC hello\n");
  return 5;
}
