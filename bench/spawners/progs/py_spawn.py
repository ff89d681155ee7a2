#!/usr/bin/env python3
# usage: py_spawn.py MODE CMD...   MODE in closefds_true|closefds_false|shell
import os, sys, subprocess
fd = os.open("/tmp/spawners-secret.txt", os.O_RDONLY)   # Python opens non-inheritable (O_CLOEXEC)...
os.set_inheritable(fd, True)                              # ...so clear FD_CLOEXEC explicitly
mode, cmd = sys.argv[1], sys.argv[2:]
sys.stdout.flush()
if mode == "shell":
    subprocess.run(" ".join(cmd), shell=True)       # /bin/sh -c "CMD"
else:
    subprocess.run(cmd, close_fds=(mode == "closefds_true"))
