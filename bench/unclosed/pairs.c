/* pairs N [FILE]: N open("/dev/null") + close() pairs, nothing else; with FILE, the loop's
 * own time in ns is written there (the hot path alone, without a tracer's start-up and
 * report). Every open is a creation `fdaudit unclosed` keeps and every close one it drops. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 100000;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long i = 0; i < n; i++) {
        int fd = open("/dev/null", O_RDONLY);
        if (fd < 0) return 1;
        close(fd);
    }
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
