// SPDX-License-Identifier: GPL-2.0

//! What an endpoint does for its connections: keeps them, admits a server's,
//! counts a client's, spawns a client's connect, and closes the accepted
//! ones that miss their deadline.

use super::*;

impl Shared {
    /// The endpoint's connections, copied so that they are shown without the lock
    /// (as many as there is memory for).
    pub(crate) fn connections(&self) -> KVec<Arc<dyn ConnView>> {
        let g = self.inner.lock();
        let mut v = KVec::new();
        for k in g.run.conns.iter() {
            if v.push(k.conn.clone().as_view(), GFP_KERNEL).is_err() {
                break;
            }
        }
        drop(g);
        v
    }

    /// Stops everything and waits: the listener, every connection, every setup.
    pub(super) fn stop(&self) {
        let run = {
            let mut g = self.inner.lock();
            g.enabled = false;
            g.changing = true;
            g.reaper_armed = false;
            core::mem::replace(&mut g.run, Run::new())
        };
        // Not enabled any more: nothing arms the deadline again.
        self.reaper.disarm_sync();
        // No new connections first, then close the ones there are.
        if let Some(l) = &run.listener {
            l.stop();
        }
        close_all(&run.conns);
        // Client setups still on the workqueue see `enabled == false` and give up;
        // wait for them, and close what they registered meanwhile.
        let mut g = self.inner.lock();
        while g.setups > 0 {
            // A pending signal must not make this spin: wait uninterruptibly
            // for the setup's wake-up then.
            if let kernel::sync::CondVarTimeoutResult::Signal { .. } = self
                .changed
                .wait_interruptible_timeout(&mut g, msecs_to_jiffies(100))
            {
                if g.setups > 0 {
                    self.changed.wait(&mut g);
                }
            }
        }
        let late = core::mem::replace(&mut g.run, Run::new());
        drop(g);
        close_all(&late.conns);
        let mut g = self.inner.lock();
        g.state = State::Idle;
        g.changing = false;
    }

    /// Keeps a connection, unless the endpoint is disabled or out of memory, in
    /// which case it is closed. A server's (`accepted`) is closed unless it is
    /// established within `accept_timeout_ms`.
    fn keep<H: EchoConn>(self: &Arc<Self>, conn: Arc<Conn<H>>, accepted: bool) -> Result {
        let mut g = self.inner.lock();
        if g.enabled {
            g.run.prune();
            let kept = Kept {
                conn: conn.clone(),
                accepted: accepted.then(Instant::now),
                ready: false,
            };
            if g.run.conns.push(kept, GFP_KERNEL).is_ok() {
                if accepted && !g.reaper_armed {
                    g.reaper_armed = self
                        .reaper
                        .arm(self.clone(), g.cfg.accept_timeout_ms.min(REAPER_TICK_MS));
                }
                return Ok(());
            }
        }
        drop(g);
        conn.close();
        Err(ECONNABORTED)
    }

    /// A client's connection is connected: it starts with the others, once no
    /// setup of the endpoint runs any more ([`Shared::setup_done`]).
    pub(super) fn connected(self: &Arc<Self>, conn: &Arc<dyn EpConn>) {
        let mut g = self.inner.lock();
        let me = Arc::as_ptr(conn);
        if let Some(k) = g
            .run
            .conns
            .iter_mut()
            .find(|k| core::ptr::addr_eq(Arc::as_ptr(&k.conn), me))
        {
            k.ready = true;
        }
        // Its watch starts with it (`Shared::tick_conns`).
        if g.enabled && !g.reaper_armed {
            g.reaper_armed = self.reaper.arm(self.clone(), WATCH_MIN_MS);
        }
    }

    /// A client setup ended (connected, failed, or given up): the last one of
    /// an enabled endpoint starts every connected client, so that an endpoint's
    /// clients connect without their own messages in the way (on one host they
    /// share the CPUs with the CM's handshakes) and then run side by side. It
    /// counts in `setups` until it is done, so a disable waits for it.
    pub(super) fn setup_done(&self) {
        loop {
            let next = {
                let mut g = self.inner.lock();
                let next = if g.setups == 1 && g.enabled {
                    g.run.conns.iter_mut().find(|k| k.ready).map(|k| {
                        k.ready = false;
                        k.conn.clone()
                    })
                } else {
                    None
                };
                if next.is_none() {
                    g.setups = g.setups.saturating_sub(1);
                }
                next
            };
            match next {
                Some(c) => c.start(),
                None => break,
            }
        }
        self.changed.notify_all();
    }

    /// A server accepted a connection: counts and keeps it (on failure `keep` has
    /// closed it).
    pub(in crate::echo) fn accepted<H: EchoConn>(self: &Arc<Self>, conn: Arc<Conn<H>>) {
        self.stats(|s| s.connections += 1);
        let _ = self.keep(conn, true);
    }

    /// A server failed to accept a connection.
    pub(in crate::echo) fn accept_failed(&self, err: &StepError) {
        self.step_error(fmt!("server: accepting a connection"), err, None);
    }

    /// A server's listener lost its device.
    pub(in crate::echo) fn listener_removed(&self) {
        self.error(fmt!(
            "server: the RDMA device was removed; no longer listening"
        ));
        self.inner.lock().state = State::Error;
    }

    /// A server's connection lost its device.
    pub(in crate::echo) fn conn_lost_device(&self) {
        self.error(fmt!(
            "server: a connection ended: the RDMA device was removed ({})",
            ErrName(ENODEV)
        ));
    }

    /// Decides on a connect request for a server: the memory budget, `max_conns`
    /// and the ECE policy (see [`admission::admit`]). Returns the ECE to answer
    /// with, or why the request is rejected.
    pub(in crate::echo) fn admit(&self, req: &ConnectRequest) -> Result<Option<Ece>, RejectReason> {
        let mut g = self.inner.lock();
        if !g.enabled {
            return Err(RejectReason::Consumer);
        }
        g.run.prune();
        let live = g.run.conns.len();
        admission::admit(&g.cfg, live, req.remote_ece.vendor_id).map_err(|r| {
            g.stats.rejected += 1;
            set_error(&mut g, fmt!("server: rejected a connect request: {}", r));
            r.reason()
        })
    }

    /// Records that a client connection finished; the endpoint is `done` once all
    /// have, `error` as soon as one failed.
    pub(in crate::echo) fn client_finished(&self, ok: bool) {
        let mut g = self.inner.lock();
        g.unfinished = g.unfinished.saturating_sub(1);
        if !ok {
            g.state = State::Error;
        } else if g.unfinished == 0 && g.state != State::Error && g.enabled {
            g.state = State::Done;
        }
    }

    /// Marks a client endpoint running once a connection is established.
    pub(in crate::echo) fn client_established(&self) {
        let mut g = self.inner.lock();
        g.stats.connections += 1;
        if g.state == State::Connecting {
            g.state = State::Running;
        }
    }
}

/// Opens client connection `index` of an endpoint with the given handler: setup
/// runs on the module's workqueue, everything after in completion handlers.
pub(in crate::echo) fn spawn_connect<H: EchoConn>(
    shared: &Arc<Shared>,
    cfg: &Config,
    addr: &Addr,
    index: u32,
    handler: impl PinInit<H, Error>,
    qp: QpConfig,
) -> Result {
    let connector = Conn::new_active(handler, cfg.conn_params())?;
    let conn = connector.conn().clone();
    if shared.keep(conn.clone(), false).is_err() {
        return Err(ECONNABORTED);
    }
    shared.inner.lock().setups += 1;
    let addr = *addr;
    let port = cfg.port;
    let sh = shared.clone();
    let r = crate::rdma::spawn(move || {
        let enabled = sh.inner.lock().enabled;
        let res = if enabled {
            connector
                .connect(&sh.net, addr.as_cstr(), port, qp)
                .map(|()| {
                    let c: Arc<dyn EpConn> = conn.clone();
                    sh.connected(&c)
                })
        } else {
            conn.close();
            Ok(())
        };
        if let Err(e) = res {
            let why = e
                .reject_data
                .as_ref()
                .and_then(|d| conn.handler().explain_reject(d));
            sh.step_error(
                fmt!("client {}", index),
                &e,
                why.as_ref().map(|w| w as &dyn fmt::Display),
            );
            conn.handler().setup_failed();
        }
        sh.setup_done();
    });
    if let Err(e) = r {
        shared.inner.lock().setups -= 1;
        return Err(e);
    }
    Ok(())
}

/// Closes connections and waits for each; the callers run in process context.
pub(super) fn close_all(conns: &[Kept]) {
    for k in conns {
        k.conn.close_and_wait();
    }
}

/// The longest the accept deadline's timer waits, in ms: while a connection
/// waits to be established, the deadline is checked at least this often, so
/// that the timer wheel's slack (an eighth of a long delay) does not add to it.
const REAPER_TICK_MS: u32 = 1000;

/// The shortest wait of a connection's watch, in ms.
const WATCH_MIN_MS: u32 = 10;

/// How many connections [`Shared::tick_conns`] takes per hold of the lock.
const TICK_BATCH: usize = 16;

impl Shared {
    /// Calls each kept connection's [`EchoConn::tick`] outside the lock;
    /// returns the soonest next call one of them wants, in ms. Allocates
    /// nothing: the watch must run when memory is short (a dead peer's
    /// connection is ended by it), so the connections are taken
    /// [`TICK_BATCH`] at a time into an array on the stack. A connection kept
    /// or dropped between two batches may be ticked twice or not at all in
    /// one firing; a tick only compares times, and the next firing comes.
    fn tick_conns(&self) -> Option<u32> {
        let mut next: Option<u32> = None;
        let mut start = 0;
        loop {
            let mut batch: [Option<Arc<dyn EpConn>>; TICK_BATCH] = Default::default();
            let more = {
                let g = self.inner.lock();
                for (slot, k) in batch.iter_mut().zip(g.run.conns.iter().skip(start)) {
                    *slot = Some(k.conn.clone());
                }
                start += TICK_BATCH;
                g.run.conns.len() > start
            };
            for c in batch.iter().flatten() {
                if let Some(ms) = c.tick() {
                    next = Some(next.map_or(ms, |n| n.min(ms)));
                }
            }
            if !more {
                return next;
            }
        }
    }

    /// A server's accept deadline: closes each server connection not
    /// established within `accept_timeout_ms` of its accept, whatever timeout
    /// the peer's connect request asked the CM for, and counts it. Returns in
    /// how many ms the deadline wants to be checked again.
    fn accept_deadline(&self) -> Option<u32> {
        let mut late = KVec::new();
        let mut g = self.inner.lock();
        let limit = i64::from(g.cfg.accept_timeout_ms);
        let mut next: Option<i64> = None;
        for k in g.run.conns.iter_mut() {
            let Some(t) = k.accepted else {
                continue;
            };
            if k.conn.peer_answered() {
                // Messages went through its QP: its peer holds nothing it
                // does not use, whenever the CM gets to its RTU.
                k.accepted = None;
                continue;
            }
            match k.conn.state() {
                ConnState::Connecting | ConnState::AddrResolved | ConnState::RouteResolved => {}
                // Established, or ended some other way: no deadline any more.
                _ => {
                    k.accepted = None;
                    continue;
                }
            }
            let left = limit - t.elapsed().as_millis();
            if left > 0 {
                next = Some(next.map_or(left, |n| n.min(left)));
            } else if late.push(k.conn.clone(), GFP_KERNEL).is_ok() {
                k.accepted = None;
            } else {
                // No memory to note it now: the next firing closes it.
                next = Some(next.map_or(1, |n| n.min(1)));
            }
        }
        if !late.is_empty() {
            g.stats.accept_timeouts += late.len() as u64;
            set_error(
                &mut g,
                fmt!(
                    "server: accept_timeout_ms {}: {} connection(s) not established; closed",
                    limit,
                    late.len()
                ),
            );
        }
        drop(g);
        for c in &late {
            c.close();
        }
        next.map(|ms| u32::try_from(ms).unwrap_or(u32::MAX))
    }
}

/// The endpoint's timer: a server's accept deadline
/// ([`Shared::accept_deadline`]), then every kept connection's watch
/// ([`EchoConn::tick`]); armed again for the soonest of what they want, 10 ms
/// to 1 s from now.
impl TimerHandler for Shared {
    fn fire(self: Arc<Self>) {
        let server = {
            let mut g = self.inner.lock();
            g.reaper_armed = false;
            if !g.enabled {
                return;
            }
            g.cfg.role == Role::Server
        };
        let deadline = if server { self.accept_deadline() } else { None };
        let next = match (deadline, self.tick_conns()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if let Some(ms) = next {
            let mut g = self.inner.lock();
            // Under `inner`, which `stop` takes before it disarms; a `keep`
            // or `connected` meanwhile may have armed it already.
            if g.enabled && !g.reaper_armed {
                g.reaper_armed = self
                    .reaper
                    .arm(self.clone(), ms.clamp(WATCH_MIN_MS, REAPER_TICK_MS));
            }
        }
    }
}
