/* getppid N [FILE]: N getppid() system calls, nothing else (a bystander workload of a syscall
 * fdaudit does not count); with FILE, the loop's own time in ns is written there. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000000;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long i = 0; i < n; i++) syscall(SYS_getppid);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (argc > 2) {
        FILE *f = fopen(argv[2], "w");
        if (!f) return 1;
        fprintf(f, "%lld\n", (long long)(t1.tv_sec - t0.tv_sec) * 1000000000LL +
                                 (t1.tv_nsec - t0.tv_nsec));
        fclose(f);
    }
    return 0;
}
