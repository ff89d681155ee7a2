/* openclose N: N open("/dev/null") + close() pairs without O_CLOEXEC, nothing else: the
 * worst case of `trace --origin`, one origin record per open (a workload started with its
 * tracer). */
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>
int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 100000;
    for (long i = 0; i < n; i++) {
        int fd = open("/dev/null", O_RDONLY);
        if (fd < 0) return 1;
        close(fd);
    }
    return 0;
}
