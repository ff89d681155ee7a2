use fdaudit_common::OriginCall;

use super::*;

/// model_tests' entry, made by open().
fn e(pid: u32, fd: i32, stack_id: i32, time_ns: u64) -> LiveEntry {
    super::super::model::tests::e(pid, fd, stack_id, OriginCall::Open, time_ns)
}

#[test]
fn a_steady_leak_fits_exactly_and_projects_the_limit() {
    // 10 fds a second from 20 open, read every 2 s.
    let pts: Vec<(f64, f64)> = (0..5)
        .map(|i| (i as f64 * 2.0, 20.0 + 20.0 * i as f64))
        .collect();
    let f = fit(&pts).expect("five points fit");
    assert!((f.slope - 10.0).abs() < 1e-9, "slope {f:?}");
    assert!((f.intercept - 20.0).abs() < 1e-9, "intercept {f:?}");
    assert!((f.r2 - 1.0).abs() < 1e-9, "a line fits perfectly: {f:?}");
    // 100 open now, limit 1024: 92.4 s at 10 a second.
    match Projection::of(Some(f), 100, Some(1024)) {
        Projection::Limit(s, _) => assert!((s - 92.4).abs() < 1e-9, "{s}"),
        p => panic!("a growing process with a limit is projected: {p:?}"),
    }
}

#[test]
fn noisy_growth_has_a_lower_r2_and_flat_or_shrinking_is_no_growth() {
    let noisy = [(0.0, 10.0), (1.0, 30.0), (2.0, 15.0), (3.0, 40.0)];
    let f = fit(&noisy).expect("fits");
    assert!(f.slope > 0.0 && f.r2 < 0.9 && f.r2 > 0.0, "{f:?}");
    let flat = fit(&[(0.0, 7.0), (5.0, 7.0), (9.0, 7.0)]).expect("fits");
    assert_eq!(flat.slope, 0.0);
    assert_eq!(flat.r2, 1.0, "a flat line is a perfect fit");
    assert_eq!(Projection::of(Some(flat), 7, Some(64)).word(), "no growth");
    let down = fit(&[(0.0, 50.0), (1.0, 40.0)]).expect("fits");
    assert_eq!(Projection::of(Some(down), 40, Some(64)).word(), "no growth");
    assert_eq!(Projection::of(Some(down), 40, Some(64)).text(), "no growth");
}

#[test]
fn one_point_or_one_instant_is_too_few_and_no_limit_is_said() {
    assert_eq!(fit(&[(1.0, 3.0)]), None);
    assert_eq!(fit(&[(1.0, 3.0), (1.0, 9.0)]), None, "no spread in time");
    assert_eq!(Projection::of(None, 3, Some(64)).word(), "too few reports");
    let f = fit(&[(0.0, 0.0), (60.0, 60.0)]).expect("fits");
    let p = Projection::of(Some(f), 60, None);
    assert_eq!(p.word(), "no limit");
    assert_eq!(p.text(), "+60.0/min, no limit (R² 1.00)");
    // At or past the limit: 0 s.
    assert!(matches!(Projection::of(Some(f), 80, Some(64)), Projection::Limit(s, _) if s == 0.0));
}

#[test]
fn history_keeps_the_newest_points() {
    let mut h = History::default();
    for i in 0..(MAX_POINTS + 10) {
        h.add(7, i as f64, i as u64);
    }
    let f = h.fit(7).expect("fits");
    assert_eq!(f.points, MAX_POINTS);
    assert!((f.slope - 1.0).abs() < 1e-9);
    h.remove(7);
    assert_eq!(h.fit(7), None);
}

#[test]
fn stack_rates_count_fds_that_come_and_go_between_reads() {
    let mut r = StackRates::default();
    r.observe(&[e(1, 3, 5, 100), e(1, 4, 6, 110)]);
    // fd 3 closed and its number reused by stack 6; fd 4 kept; fd 9 new.
    r.observe(&[e(1, 3, 6, 200), e(1, 4, 6, 110), e(1, 9, 5, 210)]);
    assert_eq!(r.of(5), (2, 1), "stack 5: fds 3 and 9 opened, 3 closed");
    assert_eq!(r.of(6), (2, 0), "stack 6: fds 4 and the new 3 opened");
    // The report drops fd 9 as closed (close_range) and fd 4 as its process's exit.
    r.dropped((1, 9), true);
    r.dropped((1, 4), false);
    r.observe(&[e(1, 3, 6, 200)]);
    assert_eq!(
        r.of(5),
        (2, 2),
        "fd 9 closed once, not again at the next read"
    );
    assert_eq!(r.of(6), (2, 0), "an fd held at exit was never closed");
    assert_eq!(per_min(3, 30.0), 6.0);
    assert_eq!(per_min(3, 0.0), 0.0);
}
