/* getppid N: N getppid() system calls, nothing else (a bystander workload of a syscall
 * fdaudit does not count). */
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>
int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000000;
    for (long i = 0; i < n; i++) syscall(SYS_getppid);
    return 0;
}
