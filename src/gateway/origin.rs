//! The origin's side: what arrives over an association is delivered to the
//! upstream JSON-RPC server, and its replies go back.
//!
//! How depends on the upstream's kind ([`super::upstream`]):
//!
//! - request by request (HTTP JSON-RPC): each request is served by a task
//!   of its own ([`Requests`], [`Role::OriginStateless`]); its reply goes
//!   back on the request's correlation_id;
//! - as a session (WebSocket, IPC, MCP, a child process): one upstream
//!   session per association ([`Session::origin`]), reconnected or
//!   restarted with backoff when it goes away; with several (a
//!   [`Sessions`] group), started on the best member and moved to another
//!   when it fails; but a language server's (`--protocol lsp`) is not
//!   restarted: its association closes with it.
//!
//! - No upstream (`serve --listen` alone: associations for `ping` and
//!   benchmarks): every request is answered NotDelivered, saying so.
//!
//! An upstream that cannot be reached, refuses, or does not answer in time
//! is answered with BRIDGE_ERROR NotDelivered: never a fabricated success or
//! JSON-RPC error.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use tracing::{info, warn};

use super::context::{Ctx, tls_roots_client_config};
use super::exec::{Exec, ExecSink, Local, Serve};
use super::outbox::Inbox;
use super::policy::backoff::Backoff;
use super::session::{Session, Upstreamed};
use super::settings::GatewayError;
use super::upstream::Plan;
use super::upstream::group::Sessions;
use super::upstream::http::{NO_UPSTREAM, Requests};
use super::upstream::{Delivery, Env, Kind as UpstreamKind, Upstream};
use crate::assoc::AssocHandle;
use crate::bridge::ProtocolId;
use crate::relay::Role;

/// The pauses between upstream restarts: 100 ms, doubling to 5 s; a
/// session that ran over 10 s starts them over.
const RESTARTS: Backoff = Backoff::new(
    Duration::from_millis(100),
    Duration::from_secs(5),
    Duration::from_secs(10),
);

/// What the origin delivers to; shared by all associations.
pub struct Origin {
    pub(super) ctx: Arc<Ctx>,
    /// `None`: requests are answered NotDelivered.
    upstream: Option<Upstream>,
    /// What the kinds of upstream share.
    env: Env,
    /// Serves requests one by one, when the upstream's kind does (or when
    /// there is none).
    requests: Arc<Requests>,
    /// Several session upstreams (`None`: `upstream` alone).
    sessions: Option<Arc<Sessions>>,
}

impl Origin {
    pub fn new(ctx: Arc<Ctx>, config: &Plan) -> Result<Self, GatewayError> {
        let tls = Arc::new(tls_roots_client_config(config.ca.as_deref())?);
        let env = Env::new(ctx.clone(), tls, config.headers.clone().into());
        let requests = Arc::new(Requests::new(&env, config));
        let sessions = (!config.sessions.is_empty()).then(|| {
            let sessions = Arc::new(Sessions::new(config.sessions.clone()));
            ctx.metrics.show(sessions.clone());
            sessions
        });
        if let Some(u) = &config.upstream
            && u.kind(ctx.protocol).is_none()
        {
            return Err(GatewayError::Config(format!(
                "no kind of upstream delivers to {u} for this protocol ({:?})",
                ctx.protocol
            )));
        }
        Ok(Self {
            upstream: config.upstream.clone(),
            ctx,
            env,
            requests,
            sessions,
        })
    }

    /// The sink for a newly accepted association.
    pub fn sink(self: &Arc<Self>, assoc: AssocHandle) -> OriginSink {
        self.ctx.track(&assoc, super::metrics::Side::Origin);
        let protocol = self.ctx.protocol;
        match self.upstream.as_ref().filter(|u| !u.per_request(protocol)) {
            None => {
                let mut exchange = self.ctx.exchange(Role::OriginStateless, None);
                if self.upstream.is_none() {
                    exchange.local_gone(NO_UPSTREAM.into());
                }
                let requests = self.requests.clone();
                let exec = Exec::start_with(exchange, assoc, self.ctx.clone(), |me| {
                    let me = me.clone();
                    let serve: Serve = Box::new(move |request| {
                        let Some(exec) = me.upgrade() else {
                            return;
                        };
                        // Room is taken now, in the order requests arrive,
                        // when there is some (else the task waits for it).
                        let room = requests.permits.clone().try_acquire_owned().ok();
                        let requests = requests.clone();
                        tokio::spawn(async move { requests.serve(exec, request, room).await });
                    });
                    Local::Served(serve)
                });
                ExecSink(exec)
            }
            Some(upstream) => {
                let (tx, rx) = self.ctx.limits.outbox();
                // Every upstream the session may move to must present a
                // forwarded credential, or none is taken (a session group
                // may mix kinds).
                let members = || {
                    let group = self
                        .sessions
                        .as_deref()
                        .map(|g| &g.members[..])
                        .unwrap_or(&[]);
                    std::iter::once(upstream).chain(group.iter().map(|m| &m.upstream))
                };
                let all = |f: fn(&dyn UpstreamKind) -> bool| {
                    members().all(|u| u.kind(protocol).is_some_and(f))
                };
                let upstreamed = Upstreamed {
                    credentials: all(|k| k.takes_credentials()),
                    // A member without streams of its own names them.
                    names: !all(|k| k.streams_per_request()),
                };
                let session = Session::origin(assoc, self.ctx.clone(), tx, upstreamed);
                let sink = session.sink();
                let (origin, upstream) = (self.clone(), upstream.clone());
                tokio::spawn(async move { origin.run_upstream(upstream, session, rx).await });
                sink
            }
        }
    }

    /// Keeps one upstream session up for as long as the association lives:
    /// on `single`, or on a member of the session group, moving to another
    /// member (at once, when one is admitted) when it fails.
    async fn run_upstream(&self, single: Upstream, session: Session, mut rx: Inbox) {
        let _counted = Counted::new(&self.ctx.metrics.upstream_sessions);
        let group = self.sessions.as_deref();
        let mut backoff = RESTARTS;
        let mut first = true;
        let mut failed = None;
        loop {
            if !first {
                self.ctx.metrics.upstream_restarts.fetch_add(1, Relaxed);
            }
            first = false;
            let on = group.map(|g| g.enter(failed));
            let upstream = match (group, &on) {
                (Some(g), Some(on)) => &g.members[on.index].upstream,
                _ => &single,
            };
            let started = Instant::now();
            // Watches the association itself: when it ends, it closes the
            // upstream politely before returning.
            let why = self.one_upstream(upstream, &session, &mut rx).await;
            if !session.assoc().is_open() {
                return;
            }
            if self.ctx.protocol == ProtocolId::LSP_EXPERIMENTAL {
                // A language server's state (its initialize, the documents
                // open in it) goes with it: a restarted one would answer
                // every request "not initialized". The session ends with
                // it, as for an editor that ran the server itself (and
                // after `exit` this is how it ends).
                info!(%upstream, %why, "language server session ended: closing its association");
                if let (Some(g), Some(on)) = (group, &on) {
                    // The next association starts on another member.
                    g.failed(on, started.elapsed());
                }
                session.local_down(&why).await;
                session.close().await;
                return;
            }
            warn!(%upstream, %why, "upstream session ended");
            // What it speaks is asked again (it may come back another).
            self.env.revisions.forget(upstream.address());
            session.local_down(&why).await;
            if !session.assoc().is_open() {
                return;
            }
            // Everything queued has been answered NotDelivered: emptying the
            // queue now frees the association's reader if it waits for room.
            while rx.try_recv().is_some() {}
            backoff.ended(started.elapsed());
            let another = match (group, &on) {
                (Some(g), Some(on)) => {
                    failed = Some(on.index);
                    g.failed(on, started.elapsed())
                }
                _ => false,
            };
            drop(on);
            if another {
                // The session's state (subscriptions, an MCP session) does
                // not move with it: the next member starts afresh.
                info!(from = %upstream, "upstream session moves to another upstream of the group");
            } else {
                tokio::select! {
                    _ = tokio::time::sleep(backoff.pause()) => {}
                    _ = session.assoc().ended() => return,
                }
            }
            // What was queued while the upstream was down was answered
            // NotDelivered already: it must not reach the next upstream.
            while rx.try_recv().is_some() {}
            session.local_starting();
        }
    }

    /// Runs one upstream session until it fails; returns why.
    async fn one_upstream(&self, upstream: &Upstream, session: &Session, rx: &mut Inbox) -> String {
        match upstream.kind(self.ctx.protocol).map(|k| k.delivery()) {
            Some(Delivery::Session(run)) => run(upstream.address(), &self.env, session, rx).await,
            Some(Delivery::Requests) => {
                format!("{upstream} is served request by request, not as a session")
            }
            None => format!(
                "no kind of upstream delivers to {upstream} for this protocol ({:?})",
                self.ctx.protocol
            ),
        }
    }
}

/// The sink of an association at the origin.
pub type OriginSink = ExecSink<()>;

/// Counts itself in a gauge while it lives (also when its task is aborted).
struct Counted<'a>(&'a std::sync::atomic::AtomicI64);

impl<'a> Counted<'a> {
    fn new(gauge: &'a std::sync::atomic::AtomicI64) -> Self {
        gauge.fetch_add(1, Relaxed);
        Self(gauge)
    }
}

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Relaxed);
    }
}
