/* N spawns of /bin/true at full speed, one at a time (fork, execve, wait): the workload of
 * bench/watch/spawn.py. Usage: spawnloop N */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000;
    char *args[] = {"/bin/true", NULL};
    char *env[] = {NULL};
    for (long i = 0; i < n; i++) {
        pid_t pid = fork();
        if (pid < 0) {
            perror("fork");
            return 1;
        }
        if (pid == 0) {
            execve(args[0], args, env);
            _exit(127);
        }
        int st;
        if (waitpid(pid, &st, 0) < 0) {
            perror("waitpid");
            return 1;
        }
    }
    return 0;
}
