/*
 * The floor for `fdaudit scan`: the least any tool must do to list every fd of every
 * process with its target and its flags. For each process, its fd directory is listed
 * (getdents64), then for each fd one readlinkat() relative to the fd directory and one
 * fdinfo read (openat + read + close, relative to the fdinfo directory); nothing else is
 * read, parsed or printed. Processes are spread over the cores as scan spreads them: a
 * worker per CPU (at most 8) takes the next pid from a shared counter.
 *
 * Build: cc -O2 -pthread -o floor bench/scan/floor.c
 * Usage: floor [PROCFS_ROOT]    (default /proc); prints "floor: P processes, F fds".
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

struct linux_dirent64 {
    unsigned long long d_ino;
    long long d_off;
    unsigned short d_reclen;
    unsigned char d_type;
    char d_name[];
};

static int root;
static int *pids;
static size_t npids;
static atomic_size_t next_pid;
static atomic_ulong total_fds, total_procs;

static int numeric(const char *s)
{
    if (!*s)
        return 0;
    for (; *s; s++)
        if (*s < '0' || *s > '9')
            return 0;
    return 1;
}

/* Calls f(name, arg) for each numeric entry of directory fd dir. */
static void each_numeric(int dir, void (*f)(const char *, void *), void *arg)
{
    char buf[64 * 1024];
    long n;
    while ((n = syscall(SYS_getdents64, dir, buf, sizeof buf)) > 0) {
        for (long off = 0; off < n;) {
            struct linux_dirent64 *d = (struct linux_dirent64 *)(buf + off);
            if (numeric(d->d_name))
                f(d->d_name, arg);
            off += d->d_reclen;
        }
    }
}

struct proc_dirs {
    int fd_dir, fdinfo_dir;
    unsigned long fds;
};

static void one_fd(const char *name, void *arg)
{
    struct proc_dirs *p = arg;
    char link[4096], info[1024];
    if (readlinkat(p->fd_dir, name, link, sizeof link) < 0)
        return;
    int f = openat(p->fdinfo_dir, name, O_RDONLY | O_CLOEXEC);
    if (f < 0)
        return;
    if (read(f, info, sizeof info) > 0)
        p->fds++;
    close(f);
}

static void one_process(int pid)
{
    char name[32];
    snprintf(name, sizeof name, "%d/fd", pid);
    struct proc_dirs p = {.fds = 0};
    p.fd_dir = openat(root, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (p.fd_dir < 0)
        return;
    snprintf(name, sizeof name, "%d/fdinfo", pid);
    p.fdinfo_dir = openat(root, name, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (p.fdinfo_dir >= 0) {
        each_numeric(p.fd_dir, one_fd, &p);
        close(p.fdinfo_dir);
        atomic_fetch_add(&total_fds, p.fds);
        atomic_fetch_add(&total_procs, 1);
    }
    close(p.fd_dir);
}

static void *worker(void *unused)
{
    (void)unused;
    for (;;) {
        size_t i = atomic_fetch_add(&next_pid, 1);
        if (i >= npids)
            return NULL;
        one_process(pids[i]);
    }
}

static void add_pid(const char *name, void *unused)
{
    (void)unused;
    static size_t cap;
    if (npids == cap) {
        cap = cap ? 2 * cap : 1024;
        pids = realloc(pids, cap * sizeof *pids);
        if (!pids) {
            perror("realloc");
            exit(1);
        }
    }
    pids[npids++] = atoi(name);
}

int main(int argc, char **argv)
{
    const char *path = argc > 1 ? argv[1] : "/proc";
    root = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (root < 0) {
        perror(path);
        return 2;
    }
    each_numeric(root, add_pid, NULL);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int n = cpus < 1 ? 1 : cpus > 8 ? 8 : (int)cpus;
    pthread_t t[8];
    for (int i = 0; i < n; i++)
        pthread_create(&t[i], NULL, worker, NULL);
    for (int i = 0; i < n; i++)
        pthread_join(t[i], NULL);
    printf("floor: %lu processes, %lu fds\n", atomic_load(&total_procs),
           atomic_load(&total_fds));
    return 0;
}
