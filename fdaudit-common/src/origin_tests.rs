use super::*;

fn args(a0: u64, a1: u64, a2: u64, a3: u64) -> [u64; 5] {
    [a0, a1, a2, a3, 0]
}

fn ok() -> Option<FdAt> {
    Some(FdAt::Result)
}

#[test]
fn only_calls_without_their_cloexec_flag_make_inheritable_fds() {
    use OriginCall::*;
    let none = || 0;
    let yes = |c, a: [u64; 5]| inheritable(c, &a, || 0);
    assert_eq!(yes(Open, args(0, 0, 0, 0)), ok());
    assert_eq!(yes(Open, args(0, O_CLOEXEC, 0, 0)), None);
    assert_eq!(yes(Openat, args(0, 0, 2, 0)), ok());
    assert_eq!(yes(Openat, args(0, 0, O_CLOEXEC | 2, 0)), None);
    assert_eq!(inheritable(Openat2, &args(0, 0, 0, 0), || O_CLOEXEC), None);
    assert_eq!(inheritable(Openat2, &args(0, 0, 0, 0), || 2), ok());
    assert_eq!(yes(Creat, args(0, 0, 0, 0)), ok());
    assert_eq!(yes(Socket, args(1, 1 | O_CLOEXEC, 0, 0)), None);
    assert_eq!(yes(Socket, args(1, 1, 0, 0)), ok());
    assert_eq!(
        yes(Socketpair, args(1, 1, 0, 0x1000)),
        Some(FdAt::Pair(0x1000))
    );
    assert_eq!(yes(Socketpair, args(1, 1 | O_CLOEXEC, 0, 8)), None);
    assert_eq!(yes(Accept, args(3, 0, 0, 0)), ok());
    assert_eq!(yes(Accept4, args(3, 0, 0, O_CLOEXEC)), None);
    assert_eq!(yes(Accept4, args(3, 0, 0, 0o4000)), ok());
    assert_eq!(yes(Pipe, args(8, 0, 0, 0)), Some(FdAt::Pair(8)));
    assert_eq!(yes(Pipe2, args(8, O_CLOEXEC, 0, 0)), None);
    assert_eq!(yes(Dup, args(3, 0, 0, 0)), ok());
    assert_eq!(yes(Dup2, args(3, 40, 0, 0)), ok());
    assert_eq!(yes(Dup3, args(3, 40, O_CLOEXEC, 0)), None);
    assert_eq!(yes(Dup3, args(3, 40, 0, 0)), ok());
    assert_eq!(
        inheritable(MemfdCreate, &args(0, MFD_CLOEXEC, 0, 0), none),
        None
    );
    assert_eq!(yes(MemfdCreate, args(0, 2, 0, 0)), ok());
    assert_eq!(yes(Eventfd2, args(0, O_CLOEXEC, 0, 0)), None);
    assert_eq!(yes(Signalfd4, args(0, 0, 8, O_CLOEXEC)), None);
    assert_eq!(yes(TimerfdCreate, args(1, 0, 0, 0)), ok());
    assert_eq!(yes(TimerfdCreate, args(1, O_CLOEXEC, 0, 0)), None);
}

#[test]
fn single_argument_calls_read_their_flags_from_the_first_argument() {
    use OriginCall::*;
    // epoll_create1(flags), inotify_init1(flags), userfaultfd(flags), fanotify_init(flags,
    // event_f_flags): the flags are the first argument, whatever the next registers hold.
    for c in [EpollCreate1, InotifyInit1, Userfaultfd, MemfdSecret] {
        assert_eq!(
            inheritable(c, &args(0, O_CLOEXEC, 0, 0), || 0),
            ok(),
            "{c:?}"
        );
        assert_eq!(
            inheritable(c, &args(O_CLOEXEC, 0, 0, 0), || 0),
            None,
            "{c:?}"
        );
    }
    assert_eq!(
        inheritable(FanotifyInit, &args(FAN_CLOEXEC, 0, 0, 0), || 0),
        None
    );
    assert_eq!(inheritable(FanotifyInit, &args(0, 2, 0, 0), || 0), ok());
    let perf = |flags| [0x1000, 0, u64::MAX, u64::MAX, flags];
    assert_eq!(inheritable(PerfEventOpen, &perf(0), || 0), ok());
    assert_eq!(
        inheritable(PerfEventOpen, &perf(PERF_FLAG_FD_CLOEXEC), || 0),
        None
    );
}

#[test]
fn pidfds_are_always_cloexec_and_io_uring_is_blind() {
    use OriginCall::*;
    for c in [PidfdOpen, PidfdGetfd] {
        assert_eq!(
            effect(c, &args(1, 0, 0, 0), || 0),
            Some(Effect::Makes {
                at: FdAt::Result,
                cloexec: true
            })
        );
    }
    assert_eq!(
        effect(IoUringSetup, &args(8, 0x1000, 0, 0), || 0),
        Some(Effect::Blind)
    );
}

#[test]
fn recvmsg_s_fds_are_inheritable_without_msg_cmsg_cloexec() {
    use OriginCall::*;
    assert_eq!(
        inheritable(Recvmsg, &args(3, 0x2000, 0, 0), || 0),
        Some(FdAt::Msg(0x2000))
    );
    assert_eq!(
        effect(Recvmsg, &args(3, 0x2000, MSG_CMSG_CLOEXEC, 0), || 0),
        Some(Effect::Makes {
            at: FdAt::Msg(0x2000),
            cloexec: true
        })
    );
    assert_eq!(
        inheritable(Recvmmsg, &args(3, 0x3000, 4, 0), || 0),
        Some(FdAt::Msgs(0x3000))
    );
    assert_eq!(
        inheritable(Recvmmsg, &args(3, 0x3000, 4, MSG_CMSG_CLOEXEC), || 0),
        None
    );
}

#[test]
fn fcntl_and_ioctl_clear_or_set_the_flag_of_the_given_fd() {
    let f = OriginCall::Fcntl;
    let e = |c, a: [u64; 5]| effect(c, &a, || 0);
    assert_eq!(inheritable(f, &args(3, F_DUPFD, 10, 0), || 0), ok());
    assert_eq!(
        e(f, args(3, F_DUPFD_CLOEXEC, 10, 0)),
        Some(Effect::Makes {
            at: FdAt::Result,
            cloexec: true
        })
    );
    assert_eq!(
        inheritable(f, &args(5, F_SETFD, 0, 0), || 0),
        Some(FdAt::Given(5))
    );
    assert_eq!(
        e(f, args(5, F_SETFD, FD_CLOEXEC, 0)),
        Some(Effect::SetsCloexec(5))
    );
    assert_eq!(e(f, args(5, 1, 0, 0)), None); // F_GETFD
    assert_eq!(e(f, args(5, 4, 0, 0)), None); // F_SETFL
    let i = OriginCall::Ioctl;
    assert_eq!(
        inheritable(i, &args(7, FIONCLEX, 0, 0), || 0),
        Some(FdAt::Given(7))
    );
    assert_eq!(
        inheritable(i, &args(7, FIONCLEX | 1 << 32, 0, 0), || 0),
        Some(FdAt::Given(7))
    );
    assert_eq!(e(i, args(7, FIOCLEX, 0, 0)), Some(Effect::SetsCloexec(7)));
    assert_eq!(e(i, args(7, 0x5401, 0, 0)), None); // TCGETS
}

#[test]
fn the_table_maps_numbers_both_ways() {
    for (i, c) in OriginCall::ALL.iter().enumerate() {
        assert_eq!(OriginCall::from_u32(i as u32), Some(*c));
    }
    assert_eq!(OriginCall::of_sysno(crate::sysno::CLOSE), None);
    assert_eq!(OriginCall::of_ia32(6), None); // i386 close
    assert_eq!(OriginCall::of_ia32(221), Some(OriginCall::Fcntl)); // fcntl64
    assert_eq!(OriginCall::of_ia32(crate::sysno::NONE), None);
    #[cfg(target_arch = "x86_64")]
    {
        assert_eq!(OriginCall::of_sysno(2), Some(OriginCall::Open));
        assert_eq!(OriginCall::of_sysno(16), Some(OriginCall::Ioctl));
        assert_eq!(OriginCall::of_sysno(33), Some(OriginCall::Dup2));
        assert_eq!(OriginCall::of_sysno(53), Some(OriginCall::Socketpair));
    }
}

/// `unclosed` keeps every fd a call of the table makes, close-on-exec or not: each call
/// but fcntl's and ioctl's other commands makes fds, with its close-on-exec flag set and
/// without; io_uring_setup's ring is an fd too (the kernel side keeps it, blind or not).
#[test]
fn every_call_of_the_table_makes_fds_for_unclosed_with_or_without_cloexec() {
    use OriginCall::*;
    for &call in OriginCall::ALL {
        let set = |bit| {
            let mut a = [0u64; 5];
            if let Rule::Flag(i, b) = call.rule() {
                a[i] = if bit { b } else { 0 };
            }
            a
        };
        let made = |a: [u64; 5], how2: u64| effect(call, &a, || how2);
        match call {
            // The commands that make fds; the others (F_GETFL, FIONREAD, ...) make none.
            Fcntl => {
                assert_eq!(
                    made(args(3, F_DUPFD, 0, 0), 0),
                    Some(Effect::Makes {
                        at: FdAt::Result,
                        cloexec: false
                    })
                );
                assert_eq!(
                    made(args(3, F_DUPFD_CLOEXEC, 0, 0), 0),
                    Some(Effect::Makes {
                        at: FdAt::Result,
                        cloexec: true
                    })
                );
                assert_eq!(made(args(3, 3, 0, 0), 0), None, "F_GETFL");
            }
            Ioctl => assert_eq!(made(args(3, 0x541b, 0, 0), 0), None, "FIONREAD"),
            IoUringSetup => assert_eq!(made(set(false), 0), Some(Effect::Blind)),
            _ => {
                let (plain, cloexec) = match call {
                    Openat2 => (made(set(false), 0), made(set(false), O_CLOEXEC)),
                    _ => (made(set(false), 0), made(set(true), 0)),
                };
                let fds = |e: Option<Effect>| match e {
                    Some(Effect::Makes { cloexec, .. }) => Some(cloexec),
                    _ => None,
                };
                let expect = match call.rule() {
                    Rule::Never => (Some(false), Some(false)),
                    Rule::Always => (Some(true), Some(true)),
                    _ => (Some(false), Some(true)),
                };
                assert_eq!((fds(plain), fds(cloexec)), expect, "{call:?}");
            }
        }
    }
}
