// SPDX-License-Identifier: GPL-2.0

//! A connection's state machine, as a pure function.
//!
//! A connection's [`Phase`] is what it is doing ([`State`]), how far its setup
//! got ([`Reached`]) and who holds its CM id ([`Holder`]). Every change of a
//! phase is [`Phase::next`] of an [`Input`]: the connection's code feeds it
//! the input under its `inner` lock, stores the phase it returns and carries
//! out the [`Action`] that comes with it. Nothing else writes a phase, so the
//! table below is the code; the KUnit suite `cmecho_conn_state` walks it row
//! by row.
//!
//! # The table
//!
//! "Setting up" is `Connecting`, `AddrResolved` or `RouteResolved`; "up" is
//! `Established`, or `Disconnecting` once `ESTABLISHED` came (`Reached::Established`);
//! "lent" is `Holder::Lent`. A row leaves `Reached` and `Holder` as they were
//! unless it says otherwise.
//!
//! | In | On | Goes to | Action |
//! |---|---|---|---|
//! | `Connecting` | `ADDR_RESOLVED` | `AddrResolved`, reached `Addr` | - |
//! | `AddrResolved` | `ROUTE_RESOLVED` | `RouteResolved`, reached `Route` | - |
//! | setting up | `ESTABLISHED` | `Established`, reached `Established` | `Established` (the ULP's `established`) |
//! | `Disconnecting`, `Closing`, `Closed` | `ESTABLISHED` | unchanged, reached `Established` | `Established` (a connect that sees it before it is released succeeds) |
//! | setting up, `Established`, `Disconnecting` | `*_ERROR`, `UNREACHABLE`, `REJECTED` | `Failed` (unchanged if `Disconnecting` and not up: nothing repeats a resolution) | up: `Ended(Disconnected)`; else not lent: `Close`; else - (the lender releases) |
//! | setting up, `Established`, `Disconnecting` | `DISCONNECTED` | `Disconnected` (unchanged if `Disconnecting` and not up) | as for an error |
//! | lent, not `Closing`/`Closed` | `DEVICE_REMOVAL` | `DeviceRemoved` | up: `Ended(DeviceRemoval)`; else - (the lender sees it and releases) |
//! | lent, `Closing`/`Closed` | `DEVICE_REMOVAL` | unchanged | - |
//! | held | `DEVICE_REMOVAL` | `DeviceRemoved` (unchanged if `Closing`/`Closed`), handed back | `HandBack(Ended(DeviceRemoval))` if up; `HandBack(Close)` if `ESTABLISHED` never came; `HandBack(Nothing)` |
//! | no id, releasing, handed back, gone | `DEVICE_REMOVAL` | unchanged | - (a release waits in `rdma_destroy_id` for the handler) |
//! | any other state | any other event | unchanged | - |
//! | passive, `Connecting`, reached below `Answered` | `Completed` | reached `Answered` | `CommEst`: the CM delivers `ESTABLISHED` without waiting for the peer's RTU |
//! | any other | `Completed` | unchanged | - |
//! | `Failed(ADDR_ERROR, ETIMEDOUT)` | `Retry` | `Connecting` | `Retry` |
//! | `Failed(ROUTE_ERROR, ETIMEDOUT)` | `Retry` | `AddrResolved` | `Retry` |
//! | any other | `Retry` | unchanged | - |
//! | setting up, `Established` | `Disconnect` | `Disconnecting` | `Disconnect` |
//! | any other | `Disconnect` | unchanged | `Disconnect` (harmless on an id that is not connected) |
//! | active, `Connecting`, no id | `ConnectStart` | lent | - |
//! | passive | `ConnectStart` | unchanged | `Refuse(EINVAL)` |
//! | active, any other (a second connect, or one after a close or a disconnect) | `ConnectStart` | unchanged | `Refuse(ECONNABORTED)` |
//! | lent | `ConnectEnd(failed)` | held | `Release` |
//! | lent, `Closing` or `DeviceRemoved` | `ConnectEnd(ok)` | held | `Release` (`connect` then succeeds if reached `Established`) |
//! | lent, any other | `ConnectEnd(ok)` | held | - |
//! | lent | `AcceptEnd(failed)` | held | `Release` |
//! | lent, `Closing`, `Closed`, `DeviceRemoved`, or `Failed`/`Disconnected`/`Disconnecting` without `ESTABLISHED` | `AcceptEnd(ok)` | held | `Release` |
//! | lent, any other | `AcceptEnd(ok)` | held | - |
//! | lent | `GiveBack` | `Closed`, handed back | `HandBack(Nothing)` |
//! | not lent | `ConnectEnd`, `AcceptEnd`, `GiveBack` | unchanged | - |
//! | not `Closing`/`Closed` | `Close` | `Closing` | `QueueRelease` |
//! | `Closing`, `Closed` | `Close` | unchanged | - |
//! | `Closed`, or releasing | `Release`, `ReleaseAnyway` | unchanged | - (the release under way finishes) |
//! | lent, not `Closed` | `Release`, `ReleaseAnyway` | `Closing` (unchanged if `DeviceRemoved`) | - (the lender releases when it is done) |
//! | held, reached `Answered` (`COMM_EST` told, no `ESTABLISHED` yet) | `Release` | `Closing` | `AwaitEstablished`: the CM cancels its REP only when it delivers `ESTABLISHED` |
//! | not lent, not releasing, not `Closed` | `Release` (other than above), `ReleaseAnyway` | `Closing`, releasing | `Release` |
//! | releasing | `Released` | `Closed`, gone | - |
//! | not releasing | `Released` | unchanged | - |
//!
//! Lent means only the task that set up the connection (`connect`, or for an
//! accepted connection the request's handler and then the accept's work item)
//! destroys the id: a close or a device removal meanwhile leaves it to that
//! task, which sees the state when it is done (`ConnectEnd`, `AcceptEnd`).
//! `Closed` is final; the ULP's `ended` is called at most once, on the one
//! transition out of "up" by an event.

use super::EndReason;
use crate::rdma::event::EventKind;
use kernel::prelude::*;

/// Which side made the connection. Fixed at creation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Side {
    /// Made by [`super::Conn::new_active`]; [`super::Connector::connect`] sets it up.
    Active,
    /// Made by a listener for a connect request, which accepts it.
    Passive,
}

/// What a connection is doing. The ULP sees it as a
/// [`ConnState`](super::ConnState) ([`Phase::public`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum State {
    /// Being set up: nothing resolved yet.
    Connecting,
    /// `ADDR_RESOLVED` came.
    AddrResolved,
    /// `ROUTE_RESOLVED` came.
    RouteResolved,
    /// `ESTABLISHED` came.
    Established,
    /// This side disconnected ([`super::Conn::disconnect`]): the QP is going
    /// into error, and the flushes that follow are its own doing.
    Disconnecting,
    /// An error event (its kind and status) ended it.
    Failed(EventKind, i32),
    /// The peer disconnected.
    Disconnected,
    /// The device was removed.
    DeviceRemoved,
    /// Being closed.
    Closing,
    /// Closed: id, QP and buffers released. Final.
    Closed,
}

impl State {
    /// The state's name (for a tracepoint).
    pub(crate) fn name(self) -> &'static CStr {
        match self {
            Self::Connecting => c"connecting",
            Self::AddrResolved => c"addr_resolved",
            Self::RouteResolved => c"route_resolved",
            Self::Established => c"established",
            Self::Disconnecting => c"disconnecting",
            Self::Failed(..) => c"failed",
            Self::Disconnected => c"disconnected",
            Self::DeviceRemoved => c"device_removed",
            Self::Closing => c"closing",
            Self::Closed => c"closed",
        }
    }

    /// Being set up.
    fn setting_up(self) -> bool {
        matches!(
            self,
            Self::Connecting | Self::AddrResolved | Self::RouteResolved
        )
    }

    /// Closing or closed.
    fn closing(self) -> bool {
        matches!(self, Self::Closing | Self::Closed)
    }
}

/// How far the connection's setup got. It only grows: a resolution repeated
/// after a timeout goes back to the state before its attempt, which had not
/// reached further.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Reached {
    /// Nothing resolved.
    Nothing,
    /// The address resolved.
    Addr,
    /// The route resolved (or, passive, came with the request).
    Route,
    /// Passive: a work request completed before `ESTABLISHED`, so the peer's
    /// QP talks to ours, and the CM was told so (`rdma_notify`), once.
    Answered,
    /// `ESTABLISHED` came: [`super::Conn::connect`] succeeds whatever follows.
    Established,
}

/// Who holds the connection's CM id, and so who may destroy it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Holder {
    /// No id yet: an active connection before [`super::Conn::connect`].
    NoId,
    /// Lent to the task setting the connection up: [`super::Conn::connect`],
    /// or for an accepted connection the request's handler and then the
    /// accept's work item. Only that task destroys the id.
    Lent,
    /// The connection holds it: the one that takes `inner` may use it, a
    /// release or a device removal takes it out.
    Held,
    /// A release took it out and destroys it.
    Releasing,
    /// Given back to the CM inside one of its handlers, which destroys it.
    HandedBack,
    /// Destroyed by a release.
    Gone,
}

/// What changes a connection's phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Input {
    /// A CM event of the connection's id: its kind and status.
    Event(EventKind, i32),
    /// [`super::Conn::connect`] repeats a resolution whose attempt timed out.
    Retry,
    /// The ULP disconnects ([`super::Conn::disconnect`]).
    Disconnect,
    /// A work request completed successfully.
    Completed,
    /// [`super::Conn::connect`] starts.
    ConnectStart,
    /// [`super::Conn::connect`]'s steps ended: succeeded or not.
    ConnectEnd(bool),
    /// The accept's work item ended: its steps succeeded or not.
    AcceptEnd(bool),
    /// The accept failed inside the request's handler: the id goes back to
    /// the CM with the handler's verdict.
    GiveBack,
    /// [`super::Conn::close`]: queue the release.
    Close,
    /// A release starts (`close_now`).
    Release,
    /// A release that waited for `ESTABLISHED` (`Action::AwaitEstablished`)
    /// as long as it may: it goes ahead.
    ReleaseAnyway,
    /// The release destroyed what it took out.
    Released,
}

impl Input {
    /// The input's name (for a tracepoint): a CM event's as the CM calls it.
    pub(crate) fn name(self) -> &'static CStr {
        match self {
            Self::Event(kind, _) => kind.c_name(),
            Self::Retry => c"retry",
            Self::Disconnect => c"disconnect",
            Self::Completed => c"completed",
            Self::ConnectStart => c"connect_start",
            Self::ConnectEnd(true) => c"connect_end_ok",
            Self::ConnectEnd(false) => c"connect_end_failed",
            Self::AcceptEnd(true) => c"accept_end_ok",
            Self::AcceptEnd(false) => c"accept_end_failed",
            Self::GiveBack => c"give_back",
            Self::Close => c"close",
            Self::Release => c"release",
            Self::ReleaseAnyway => c"release_anyway",
            Self::Released => c"released",
        }
    }

    /// A CM event's status; 0 for every other input.
    pub(crate) fn status(self) -> i32 {
        match self {
            Self::Event(_, status) => status,
            _ => 0,
        }
    }
}

/// What happens after a device removal gave the id back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Then {
    /// Nothing more.
    Nothing,
    /// The ULP learns that the connection ended.
    Ended(EndReason),
    /// Never established: nobody else would close it.
    Close,
}

/// What the connection does after a transition, with its lock released.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Action {
    /// Nothing (the waiters are woken whenever the phase changed).
    Nothing,
    /// Call the ULP's `established`.
    Established,
    /// Call the ULP's `ended`.
    Ended(EndReason),
    /// Close the connection ([`super::Conn::close`]): nobody else would.
    Close,
    /// Repeat the resolution.
    Retry,
    /// Call `rdma_disconnect` on the id, if it is held.
    Disconnect,
    /// Tell the CM that communication is established (`rdma_notify`).
    CommEst,
    /// Refuse the call with this error.
    Refuse(Error),
    /// Queue the release on the module's workqueue, with the connection's
    /// reference on itself.
    QueueRelease,
    /// Take the id, the QP resources, the sink and the connection's reference
    /// on itself out, and release them; then [`Input::Released`].
    Release,
    /// Not yet: the CM was told the connection is established (`CommEst`)
    /// and has not delivered `ESTABLISHED`. It cancels its REP only in the
    /// work that delivers that event; an id destroyed before it leaves the REP
    /// retransmitting for as long as the peer's request asks (a minute, up to
    /// a quarter of an hour after an MRA), and `rdma_destroy_id` waits for it.
    /// Wait, bounded, for the phase to change, then `Release` again, or
    /// `ReleaseAnyway` once the wait is over.
    AwaitEstablished,
    /// Destroy the QP resources, give the id back to the CM, then this.
    HandBack(Then),
}

/// A connection's state machine: what it does, how far it got, who holds
/// its id. Copied in and out of the connection's `inner` lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Phase {
    pub(crate) side: Side,
    pub(crate) state: State,
    pub(crate) reached: Reached,
    pub(crate) holder: Holder,
}

impl Phase {
    /// A new active connection.
    pub(crate) const fn active() -> Self {
        Self {
            side: Side::Active,
            state: State::Connecting,
            reached: Reached::Nothing,
            holder: Holder::NoId,
        }
    }

    /// A new passive connection, inside its connect request's handler, which
    /// holds the id until the accept is done. The request carried the route.
    pub(crate) const fn passive() -> Self {
        Self {
            side: Side::Passive,
            state: State::Connecting,
            reached: Reached::Route,
            holder: Holder::Lent,
        }
    }

    /// `ESTABLISHED` came, whatever came after it.
    pub(crate) fn was_established(self) -> bool {
        self.reached == Reached::Established
    }

    /// Established and not ended: the one state an end event reports to the
    /// ULP (`ended`).
    pub(super) fn up(self) -> bool {
        self.was_established() && matches!(self.state, State::Established | State::Disconnecting)
    }

    /// Being set up or established, not disconnecting, ended, closing or
    /// closed.
    pub(crate) fn is_open(self) -> bool {
        self.state.setting_up() || self.state == State::Established
    }

    /// Known to be up: `ESTABLISHED` came, or, for an accepted connection, a
    /// work request completed.
    pub(crate) fn peer_answered(self) -> bool {
        self.reached >= Reached::Answered
    }

    /// Nothing to tell the CM on a successful completion any more.
    pub(crate) fn comm_est_done(self) -> bool {
        self.side == Side::Active
            || self.reached >= Reached::Answered
            || self.state != State::Connecting
    }

    /// The route is final: resolved on the active side, taken from the
    /// request on the passive side.
    pub(crate) fn route_final(self) -> bool {
        self.reached >= Reached::Route
    }

    /// What the ULP sees. A disconnecting connection is still what it was
    /// until the peer's answer.
    pub(crate) fn public(self) -> super::ConnState {
        use super::ConnState as P;
        match self.state {
            State::Connecting => P::Connecting,
            State::AddrResolved => P::AddrResolved,
            State::RouteResolved => P::RouteResolved,
            State::Established => P::Established,
            State::Disconnecting => match self.reached {
                Reached::Established => P::Established,
                Reached::Route if self.side == Side::Active => P::RouteResolved,
                Reached::Addr => P::AddrResolved,
                _ => P::Connecting,
            },
            State::Failed(k, s) => P::Failed(k, s),
            State::Disconnected => P::Disconnected,
            State::DeviceRemoved => P::DeviceRemoved,
            State::Closing => P::Closing,
            State::Closed => P::Closed,
        }
    }

    /// The phase after `input`, and what to do about it.
    pub(crate) fn next(self, input: Input) -> (Self, Action) {
        let mut n = self;
        let s = self.state;
        let lent = self.holder == Holder::Lent;
        let action = match input {
            Input::Event(EventKind::AddrResolved, _) if s == State::Connecting => {
                n.state = State::AddrResolved;
                n.reached = n.reached.max(Reached::Addr);
                Action::Nothing
            }
            Input::Event(EventKind::RouteResolved, _) if s == State::AddrResolved => {
                n.state = State::RouteResolved;
                n.reached = n.reached.max(Reached::Route);
                Action::Nothing
            }
            Input::Event(EventKind::Established, _)
                if s.setting_up() || matches!(s, State::Disconnecting) || s.closing() =>
            {
                if s.setting_up() {
                    n.state = State::Established;
                }
                n.reached = Reached::Established;
                Action::Established
            }
            Input::Event(
                kind @ (EventKind::AddrError
                | EventKind::RouteError
                | EventKind::ConnectError
                | EventKind::Unreachable
                | EventKind::Rejected
                | EventKind::Disconnected),
                status,
            ) if s.setting_up() || matches!(s, State::Established | State::Disconnecting) => {
                // A connection this side disconnected before it was up stays
                // `Disconnecting`: nothing repeats a resolution of it.
                if s != State::Disconnecting || self.up() {
                    n.state = match kind {
                        EventKind::Disconnected => State::Disconnected,
                        _ => State::Failed(kind, status),
                    };
                }
                if self.up() {
                    Action::Ended(EndReason::Disconnected)
                } else if lent {
                    Action::Nothing
                } else {
                    Action::Close
                }
            }
            Input::Event(EventKind::DeviceRemoval, _) => match self.holder {
                Holder::Lent => {
                    if !s.closing() {
                        n.state = State::DeviceRemoved;
                    }
                    if self.up() {
                        Action::Ended(EndReason::DeviceRemoval)
                    } else {
                        Action::Nothing
                    }
                }
                Holder::Held => {
                    if !s.closing() {
                        n.state = State::DeviceRemoved;
                    }
                    n.holder = Holder::HandedBack;
                    Action::HandBack(if self.up() {
                        Then::Ended(EndReason::DeviceRemoval)
                    } else if !self.was_established() {
                        Then::Close
                    } else {
                        Then::Nothing
                    })
                }
                _ => Action::Nothing,
            },
            Input::Event(..) => Action::Nothing,
            Input::Retry => match s {
                State::Failed(EventKind::AddrError, st) if st == ETIMEDOUT.to_errno() => {
                    n.state = State::Connecting;
                    Action::Retry
                }
                State::Failed(EventKind::RouteError, st) if st == ETIMEDOUT.to_errno() => {
                    n.state = State::AddrResolved;
                    Action::Retry
                }
                _ => Action::Nothing,
            },
            Input::Disconnect => {
                if s.setting_up() || s == State::Established {
                    n.state = State::Disconnecting;
                }
                Action::Disconnect
            }
            Input::Completed
                if self.side == Side::Passive
                    && s == State::Connecting
                    && self.reached < Reached::Answered =>
            {
                n.reached = Reached::Answered;
                Action::CommEst
            }
            Input::Completed => Action::Nothing,
            Input::ConnectStart => match self.side {
                Side::Passive => Action::Refuse(EINVAL),
                Side::Active if s == State::Connecting && self.holder == Holder::NoId => {
                    n.holder = Holder::Lent;
                    Action::Nothing
                }
                Side::Active => Action::Refuse(ECONNABORTED),
            },
            Input::ConnectEnd(ok) if lent => {
                n.holder = Holder::Held;
                if !ok || matches!(s, State::Closing | State::DeviceRemoved) {
                    Action::Release
                } else {
                    Action::Nothing
                }
            }
            Input::AcceptEnd(ok) if lent => {
                n.holder = Holder::Held;
                let gone = matches!(s, State::Closing | State::Closed | State::DeviceRemoved);
                // Ended, or given up by this side, before it was up.
                let lost = !self.was_established()
                    && matches!(
                        s,
                        State::Failed(..) | State::Disconnected | State::Disconnecting
                    );
                if !ok || gone || lost {
                    Action::Release
                } else {
                    Action::Nothing
                }
            }
            Input::GiveBack if lent => {
                n.state = State::Closed;
                n.holder = Holder::HandedBack;
                Action::HandBack(Then::Nothing)
            }
            Input::ConnectEnd(_) | Input::AcceptEnd(_) | Input::GiveBack => Action::Nothing,
            Input::Close if !s.closing() => {
                n.state = State::Closing;
                Action::QueueRelease
            }
            Input::Close => Action::Nothing,
            Input::Release | Input::ReleaseAnyway
                if s == State::Closed || self.holder == Holder::Releasing =>
            {
                Action::Nothing
            }
            Input::Release | Input::ReleaseAnyway if lent => {
                if s != State::DeviceRemoved {
                    n.state = State::Closing;
                }
                Action::Nothing
            }
            Input::Release if self.holder == Holder::Held && self.reached == Reached::Answered => {
                n.state = State::Closing;
                Action::AwaitEstablished
            }
            Input::Release | Input::ReleaseAnyway => {
                n.state = State::Closing;
                n.holder = Holder::Releasing;
                Action::Release
            }
            Input::Released if self.holder == Holder::Releasing => {
                n.state = State::Closed;
                n.holder = Holder::Gone;
                Action::Nothing
            }
            Input::Released => Action::Nothing,
        };
        (n, action)
    }
}
