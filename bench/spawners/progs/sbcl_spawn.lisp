;; usage: sbcl --script sbcl_spawn.lisp CMD...
;; sb-unix:unix-open with plain O_RDONLY: no O_CLOEXEC -> inheritable
(sb-unix:unix-open "/tmp/spawners-secret.txt" sb-unix:o_rdonly 0)
(let* ((args (cdr sb-ext:*posix-argv*)))
  (finish-output)
  (sb-ext:run-program (car args) (cdr args) :search nil :output t :error t :input t))
