//! fdaudit's integration tests, built as one test binary (`--test integration`) as ripgrep
//! (`tests/tests.rs`) and cargo (`testsuite`) build theirs: one link instead of one per
//! file. Each file of this directory is a module of it, so a test's name is
//! `<file>::<function>`; run one file's tests with `cargo test -p fdaudit-tests --test
//! integration -- <file>::` (a filter matches a substring: `trace::` also matches
//! `hostile_trace::`, so add `--skip hostile_trace::`, as `cargo xtask vm-test` does for the
//! guests, see `xtask::vm::build::module_filter`).
//!
//! What one process changes for tests that used to run in their own: root tests still take
//! `fdaudit_tests::guard()` (one lock for the whole binary now, so no two of any file run
//! together); nothing here changes the test process's environment, working directory,
//! signal dispositions or limits (children do, in `pre_exec`); the one process-wide flag a
//! test sets (`PR_SET_CHILD_SUBREAPER` in scan_hostile) is set under the guard.

mod common;

mod backends;
mod bench;
mod bench_matrix;
mod bench_user;
mod boundary;
mod boundary_cve;
mod cgroup_follow;
mod chains;
mod ci_native;
mod ci_output;
mod containers;
mod deploy;
mod dist;
mod doctor;
mod gates;
mod gates_hostile;
mod hostile_files;
mod hostile_trace;
mod ia32;
mod jit_copy;
mod jit_frames;
mod jit_origin;
mod origin;
mod origin_gdb;
mod origin_paths;
mod origin_python;
mod origin_sites;
mod output;
mod output_files;
mod perfetto;
mod readme;
mod reads;
mod runtime;
mod sarif;
mod scan;
mod scan_boundary;
mod scan_creds;
mod scan_floor;
mod scan_fold;
mod scan_hostile;
mod scan_identity;
mod scan_inflight;
mod schema;
mod terminal;
mod trace;
mod trace_attach;
mod trace_handover;
mod trace_signals;
mod trace_startup;
mod unclosed;
mod unclosed_exit;
mod unclosed_exports;
mod unclosed_runtimes;
mod watch;
mod watch_cost;
mod watch_exhaustion;
mod watch_hostile;
mod watch_textfile;
mod watch_tls;

/// A file of this directory that no `mod` line names would never be built or run
/// (`autotests = false`): each one must be a module above.
#[test]
fn every_file_here_is_a_module_of_this_binary() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let main = std::fs::read_to_string(dir.join("main.rs")).expect("read tests/main.rs");
    for entry in std::fs::read_dir(&dir).expect("list tests/tests") {
        let path = entry.expect("a directory entry").path();
        let name = path
            .file_stem()
            .and_then(|s| s.to_str())
            .expect("a UTF-8 name");
        if name == "main" || (path.is_file() && path.extension().is_none_or(|e| e != "rs")) {
            continue;
        }
        assert!(
            main.lines().any(|l| l == format!("mod {name};")),
            "tests/tests/{} is not built: add `mod {name};` to tests/tests/main.rs",
            path.file_name().unwrap().to_string_lossy()
        );
    }
}
