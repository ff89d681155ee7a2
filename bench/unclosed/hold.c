/* hold N: raises its NOFILE soft limit to the hard one, waits for a byte on stdin, opens
 * /dev/null N times (kept open), writes "ready\n" to stdout, then holds them until stdin
 * reaches EOF. The fds are made after the byte, so a tracer attached before it sees each
 * creation (an outstanding fd of its live set). */
#include <fcntl.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>
int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000;
    struct rlimit r;
    char c;
    if (getrlimit(RLIMIT_NOFILE, &r) || (r.rlim_cur = r.rlim_max, setrlimit(RLIMIT_NOFILE, &r)))
        return 1;
    if (read(0, &c, 1) != 1) return 1;
    for (long i = 0; i < n; i++)
        if (open("/dev/null", O_RDONLY) < 0) return 2;
    if (write(1, "ready\n", 6) != 6) return 1;
    while (read(0, &c, 1) > 0) {
    }
    return 0;
}
