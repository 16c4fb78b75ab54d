// SPDX-License-Identifier: GPL-2.0

//! The KUnit suite `cmecho_conn_state`: the table at the top of `state.rs`,
//! walked row by row (a row the code disagrees with is printed with its line
//! and fails the suite), and what must hold for every phase and input.

#[kernel::prelude::kunit_tests(cmecho_conn_state)]
mod tests {
    use super::super::state::*;
    use super::super::EndReason;
    use crate::rdma::event::EventKind;
    use kernel::prelude::*;
    use EndReason::{DeviceRemoval, Disconnected as PeerGone};
    use EventKind as K;
    use Holder::*;
    use Input::*;
    use Reached::{Addr, Nothing as None_, Route};
    use Side::*;

    const ETIMEDOUT_: i32 = -110;
    const SETTING_UP: [(State, Reached); 3] = [
        (State::Connecting, None_),
        (State::AddrResolved, Addr),
        (State::RouteResolved, Route),
    ];
    /// Every error event (`DISCONNECTED` apart).
    const ERRORS: [EventKind; 5] = [
        K::AddrError,
        K::RouteError,
        K::ConnectError,
        K::Unreachable,
        K::Rejected,
    ];
    const HOLDERS: [Holder; 6] = [NoId, Lent, Held, Releasing, HandedBack, Gone];

    fn p(side: Side, state: State, reached: Reached, holder: Holder) -> Phase {
        Phase {
            side,
            state,
            reached,
            holder,
        }
    }

    fn ev(kind: EventKind) -> Input {
        Event(kind, 0)
    }

    /// `row!(bad; from, input => to, action)`: one row of the table, counted
    /// in `bad` (and printed with its line) when the code disagrees.
    macro_rules! row {
        ($bad:ident; $from:expr, $input:expr => $to:expr, $action:expr) => {
            $bad += row(line!(), $from, $input, $to, $action)
        };
    }

    /// Checks one row of the table: prints it when the code disagrees.
    fn row(line: u32, from: Phase, input: Input, to: Phase, action: Action) -> usize {
        let got = from.next(input);
        if got == (to, action) {
            return 0;
        }
        pr_err!(
            "state_kunit.rs:{}: {:?} on {:?}: got {:?}, the table says {:?}\n",
            line,
            from,
            input,
            got,
            (to, action)
        );
        1
    }

    /// The setup rows: resolution, `ESTABLISHED`, a repeated resolution.
    #[test]
    fn table_setup() {
        let mut bad = 0;
        for side in [Active, Passive] {
            for h in [Lent, Held] {
                let c = p(side, State::Connecting, None_, h);
                let a = p(side, State::AddrResolved, Addr, h);
                let r = p(side, State::RouteResolved, Route, h);
                row!(bad; c, ev(K::AddrResolved) => a, Action::Nothing);
                row!(bad; a, ev(K::RouteResolved) => r, Action::Nothing);
                for (s, re) in SETTING_UP {
                    let to = p(side, State::Established, Reached::Established, h);
                    row!(bad; p(side, s, re, h), ev(K::Established) => to, Action::Established);
                }
                for s in [State::Disconnecting, State::Closing, State::Closed] {
                    let to = p(side, s, Reached::Established, h);
                    row!(bad; p(side, s, Route, h), ev(K::Established) => to, Action::Established);
                }
                // Out of order: nothing.
                row!(bad; a, ev(K::AddrResolved) => a, Action::Nothing);
                row!(bad; c, ev(K::RouteResolved) => c, Action::Nothing);
            }
            let t = ETIMEDOUT_;
            let fa = p(side, State::Failed(K::AddrError, t), None_, Lent);
            let fr = p(side, State::Failed(K::RouteError, t), Addr, Lent);
            let c = p(side, State::Connecting, None_, Lent);
            let a = p(side, State::AddrResolved, Addr, Lent);
            row!(bad; fa, Retry => c, Action::Retry);
            row!(bad; fr, Retry => a, Action::Retry);
            let other = p(side, State::Failed(K::AddrError, -113), None_, Lent);
            row!(bad; other, Retry => other, Action::Nothing);
            let rej = p(side, State::Failed(K::Rejected, t), Route, Lent);
            row!(bad; rej, Retry => rej, Action::Nothing);
        }
        assert_eq!(bad, 0);
    }

    /// The ends: error events, `DISCONNECTED`, `DEVICE_REMOVAL`.
    #[test]
    fn table_ends() {
        let mut bad = 0;
        let est = Reached::Established;
        for side in [Active, Passive] {
            let ends = ERRORS.iter().map(|&k| (k, State::Failed(k, -5)));
            for (kind, st) in Iterator::chain(ends, [(K::Disconnected, State::Disconnected)]) {
                let input = Event(kind, -5);
                for h in [Lent, Held] {
                    let other = if h == Lent {
                        Action::Nothing
                    } else {
                        Action::Close
                    };
                    for (s, re) in SETTING_UP {
                        row!(bad; p(side, s, re, h), input => p(side, st, re, h), other);
                    }
                    // Up: the ULP learns of the end, once.
                    for s in [State::Established, State::Disconnecting] {
                        let to = p(side, st, est, h);
                        row!(bad; p(side, s, est, h), input => to, Action::Ended(PeerGone));
                    }
                    // Disconnected by this side before `ESTABLISHED`: stays
                    // so, and no resolution is repeated.
                    let d = p(side, State::Disconnecting, Route, h);
                    row!(bad; d, input => d, other);
                    row!(bad; d, Retry => d, Action::Nothing);
                    // Ended, closing or closed: nothing.
                    for s in [st, State::DeviceRemoved, State::Closing, State::Closed] {
                        let q = p(side, s, est, h);
                        row!(bad; q, input => q, Action::Nothing);
                    }
                }
            }
            let rm = ev(K::DeviceRemoval);
            let dr = State::DeviceRemoved;
            // Lent: the lender releases.
            for (s, re) in SETTING_UP {
                row!(bad; p(side, s, re, Lent), rm => p(side, dr, re, Lent), Action::Nothing);
            }
            for s in [State::Established, State::Disconnecting] {
                let to = p(side, dr, est, Lent);
                row!(bad; p(side, s, est, Lent), rm => to, Action::Ended(DeviceRemoval));
            }
            for s in [State::Closing, State::Closed] {
                let q = p(side, s, est, Lent);
                row!(bad; q, rm => q, Action::Nothing);
            }
            // Held: handed back here.
            let back = |t| Action::HandBack(t);
            for s in [State::Established, State::Disconnecting] {
                let to = p(side, dr, est, HandedBack);
                let a = back(Then::Ended(DeviceRemoval));
                row!(bad; p(side, s, est, Held), rm => to, a);
            }
            for (s, re) in SETTING_UP {
                let to = p(side, dr, re, HandedBack);
                row!(bad; p(side, s, re, Held), rm => to, back(Then::Close));
            }
            let f = State::Failed(K::ConnectError, -5);
            row!(bad; p(side, f, est, Held), rm => p(side, dr, est, HandedBack), back(Then::Nothing));
            row!(bad; p(side, f, Route, Held), rm => p(side, dr, Route, HandedBack), back(Then::Close));
            let cl = p(side, State::Closing, est, Held);
            row!(bad; cl, rm => p(side, State::Closing, est, HandedBack), back(Then::Nothing));
            // Nobody holds it here, or a release waits for this handler.
            for h in [NoId, Releasing, HandedBack, Gone] {
                for s in [
                    State::Connecting,
                    State::Established,
                    State::Closing,
                    State::Closed,
                ] {
                    let q = p(side, s, est, h);
                    row!(bad; q, rm => q, Action::Nothing);
                }
            }
            // Events the machine does not use.
            for k in [K::ConnectRequest, K::TimewaitExit, K::Other] {
                let q = p(side, State::Established, est, Held);
                row!(bad; q, ev(k) => q, Action::Nothing);
            }
        }
        assert_eq!(bad, 0);
    }

    /// The ULP's calls and the setup's ends: disconnect, connect, accept,
    /// close, release.
    #[test]
    fn table_calls() {
        let mut bad = 0;
        let est = Reached::Established;
        let dn = State::Disconnecting;
        for side in [Active, Passive] {
            for h in HOLDERS {
                let open = Iterator::chain(SETTING_UP.into_iter(), [(State::Established, est)]);
                for (s, re) in open {
                    let a = Action::Disconnect;
                    row!(bad; p(side, s, re, h), Disconnect => p(side, dn, re, h), a);
                }
                for s in [
                    dn,
                    State::Disconnected,
                    State::DeviceRemoved,
                    State::Closing,
                    State::Closed,
                ] {
                    let q = p(side, s, est, h);
                    row!(bad; q, Disconnect => q, Action::Disconnect);
                }
            }
        }
        // A completion before `ESTABLISHED` of an accepted connection.
        let pa = Phase::passive();
        let ans = p(Passive, State::Connecting, Reached::Answered, Lent);
        row!(bad; pa, Completed => ans, Action::CommEst);
        for q in [
            ans,
            p(Passive, State::Established, est, Held),
            p(Passive, State::Closing, Route, Held),
            p(Passive, dn, Route, Held),
            p(Active, State::Connecting, Route, Lent),
            p(Active, State::Established, est, Held),
        ] {
            row!(bad; q, Completed => q, Action::Nothing);
        }
        // Connect: once, active only.
        let fresh = Phase::active();
        row!(bad; fresh, ConnectStart => p(Active, State::Connecting, None_, Lent), Action::Nothing);
        row!(bad; pa, ConnectStart => pa, Action::Refuse(EINVAL));
        for q in [
            p(Active, State::Connecting, None_, Lent),
            p(Active, State::Connecting, None_, Held),
            p(Active, State::Closing, None_, NoId),
            p(Active, State::Established, est, Held),
        ] {
            row!(bad; q, ConnectStart => q, Action::Refuse(ECONNABORTED));
        }
        // The end of a connect.
        for s in [
            State::Established,
            State::Failed(K::Rejected, 28),
            State::Connecting,
        ] {
            let q = p(Active, s, est, Lent);
            row!(bad; q, ConnectEnd(false) => p(Active, s, est, Held), Action::Release);
        }
        for s in [State::Closing, State::DeviceRemoved] {
            for re in [Route, est] {
                let q = p(Active, s, re, Lent);
                row!(bad; q, ConnectEnd(true) => p(Active, s, re, Held), Action::Release);
            }
        }
        for s in [State::Established, dn, State::Disconnected] {
            let q = p(Active, s, est, Lent);
            row!(bad; q, ConnectEnd(true) => p(Active, s, est, Held), Action::Nothing);
        }
        // The end of an accept.
        for s in [State::Connecting, State::Established] {
            let q = p(Passive, s, Route, Lent);
            row!(bad; q, AcceptEnd(false) => p(Passive, s, Route, Held), Action::Release);
        }
        for s in [State::Closing, State::Closed, State::DeviceRemoved] {
            let q = p(Passive, s, est, Lent);
            row!(bad; q, AcceptEnd(true) => p(Passive, s, est, Held), Action::Release);
        }
        for s in [
            State::Failed(K::ConnectError, -110),
            State::Disconnected,
            dn,
        ] {
            let q = p(Passive, s, Route, Lent);
            row!(bad; q, AcceptEnd(true) => p(Passive, s, Route, Held), Action::Release);
            let q = p(Passive, s, est, Lent);
            row!(bad; q, AcceptEnd(true) => p(Passive, s, est, Held), Action::Nothing);
        }
        for (s, re) in [
            (State::Connecting, Route),
            (State::Established, est),
            (dn, est),
        ] {
            let q = p(Passive, s, re, Lent);
            row!(bad; q, AcceptEnd(true) => p(Passive, s, re, Held), Action::Nothing);
        }
        // A failed accept in the request's handler.
        let gb = p(Passive, State::Closed, Route, HandedBack);
        row!(bad; pa, GiveBack => gb, Action::HandBack(Then::Nothing));
        // Not lent: the ends of a setup change nothing.
        for h in [NoId, Held, Releasing, HandedBack, Gone] {
            let q = p(Passive, State::Closing, Route, h);
            for i in [
                ConnectEnd(true),
                ConnectEnd(false),
                AcceptEnd(true),
                AcceptEnd(false),
                GiveBack,
            ] {
                row!(bad; q, i => q, Action::Nothing);
            }
        }
        // Close and release.
        for side in [Active, Passive] {
            for h in HOLDERS {
                for s in [
                    State::Connecting,
                    State::Established,
                    dn,
                    State::Failed(K::Rejected, 28),
                    State::Disconnected,
                    State::DeviceRemoved,
                ] {
                    let q = p(side, s, est, h);
                    let to = p(side, State::Closing, est, h);
                    row!(bad; q, Close => to, Action::QueueRelease);
                    let (to, a) = match h {
                        Releasing => (q, Action::Nothing),
                        Lent if s == State::DeviceRemoved => (q, Action::Nothing),
                        Lent => (p(side, State::Closing, est, Lent), Action::Nothing),
                        _ => (p(side, State::Closing, est, Releasing), Action::Release),
                    };
                    row!(bad; q, Release => to, a);
                    row!(bad; q, ReleaseAnyway => to, a);
                }
                for s in [State::Closing, State::Closed] {
                    let q = p(side, s, est, h);
                    row!(bad; q, Close => q, Action::Nothing);
                }
                let q = p(side, State::Closed, est, h);
                row!(bad; q, Release => q, Action::Nothing);
                row!(bad; q, ReleaseAnyway => q, Action::Nothing);
            }
            let r = p(side, State::Closing, est, Releasing);
            row!(bad; r, Released => p(side, State::Closed, est, Gone), Action::Nothing);
            let q = p(side, State::Closing, est, Lent);
            row!(bad; q, Released => q, Action::Nothing);
        }
        // Told COMM_EST, no ESTABLISHED yet: the release waits for it (the
        // CM cancels its REP only then), unless it waited long enough.
        let ans = Reached::Answered;
        for s in [State::Connecting, dn, State::Closing] {
            let q = p(Passive, s, ans, Held);
            let wait = p(Passive, State::Closing, ans, Held);
            row!(bad; q, Release => wait, Action::AwaitEstablished);
            let go = p(Passive, State::Closing, ans, Releasing);
            row!(bad; q, ReleaseAnyway => go, Action::Release);
            let lent = p(Passive, s, ans, Lent);
            row!(bad; lent, Release => p(Passive, State::Closing, ans, Lent), Action::Nothing);
        }
        assert_eq!(bad, 0);
    }

    /// What holds for every phase and input: `Closed` is final, `ended` comes
    /// only out of "up", only a lender's end or a release gives up a lent id,
    /// and `reached` never shrinks.
    #[test]
    fn invariants() {
        let states = [
            State::Connecting,
            State::AddrResolved,
            State::RouteResolved,
            State::Established,
            State::Disconnecting,
            State::Failed(K::AddrError, ETIMEDOUT_),
            State::Failed(K::Rejected, 28),
            State::Disconnected,
            State::DeviceRemoved,
            State::Closing,
            State::Closed,
        ];
        let inputs = [
            ev(K::AddrResolved),
            ev(K::RouteResolved),
            ev(K::Established),
            Event(K::AddrError, ETIMEDOUT_),
            ev(K::Rejected),
            ev(K::Disconnected),
            ev(K::DeviceRemoval),
            ev(K::TimewaitExit),
            Retry,
            Disconnect,
            Completed,
            ConnectStart,
            ConnectEnd(true),
            ConnectEnd(false),
            AcceptEnd(true),
            AcceptEnd(false),
            GiveBack,
            Close,
            Release,
            ReleaseAnyway,
            Released,
        ];
        let mut bad = 0usize;
        for side in [Active, Passive] {
            for s in states {
                for re in [None_, Addr, Route, Reached::Answered, Reached::Established] {
                    for h in HOLDERS {
                        let q = p(side, s, re, h);
                        for i in inputs {
                            let (n, a) = q.next(i);
                            let ok = (s != State::Closed || n.state == State::Closed)
                                && (!matches!(
                                    a,
                                    Action::Ended(_) | Action::HandBack(Then::Ended(_))
                                ) || q.up())
                                && (h != Lent
                                    || n.holder == Lent
                                    || matches!(i, ConnectEnd(_) | AcceptEnd(_) | GiveBack))
                                && (a != Action::AwaitEstablished
                                    || (h == Held && re == Reached::Answered))
                                && (n.reached >= q.reached)
                                && n.side == side;
                            if !ok {
                                pr_err!("{:?} on {:?} gives {:?}\n", q, i, (n, a));
                                bad += 1;
                            }
                        }
                    }
                }
            }
        }
        assert_eq!(bad, 0);
    }
}
