//! Gateway metrics: lock-free counters, shown in the Prometheus text
//! exposition format (`/metrics`, written by the `prometheus` crate's
//! encoder from the [`Families`] each part describes), and `/readyz`.
//!
//! Telemetry knows no other room: what an edge's origins, an origin's
//! upstream groups or the ingress kinds show of themselves, each registers
//! as a [`Section`] when it is built.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use prometheus::proto::{self, MetricFamily, MetricType};

use crate::bridge::TransportError;

/// Upper bounds of the latency histogram buckets, in seconds: from 25 µs,
/// about two to an octave below 10 ms (a hop of this gateway takes tens
/// of µs, an upstream often well under a millisecond), fewer above.
const BUCKETS: [f64; 25] = [
    0.000025, 0.00005, 0.000075, 0.0001, 0.00015, 0.0002, 0.0003, 0.0005, 0.00075, 0.001, 0.0015,
    0.002, 0.003, 0.005, 0.0075, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// A latency histogram with fixed buckets (cumulative on render).
#[derive(Default)]
pub struct Histogram {
    buckets: [AtomicU64; BUCKETS.len()],
    overflow: AtomicU64,
    sum_micros: AtomicU64,
    count: AtomicU64,
}

impl Histogram {
    pub fn observe(&self, d: Duration) {
        let s = d.as_secs_f64();
        // The first bucket whose bound is not below it.
        match self.buckets.get(BUCKETS.partition_point(|&b| b < s)) {
            Some(bucket) => bucket.fetch_add(1, Relaxed),
            None => self.overflow.fetch_add(1, Relaxed),
        };
        self.sum_micros
            .fetch_add(u64::try_from(d.as_micros()).unwrap_or(u64::MAX), Relaxed);
        self.count.fetch_add(1, Relaxed);
    }

    pub fn count(&self) -> u64 {
        self.count.load(Relaxed)
    }

    /// As the exposition's model has it: cumulative buckets (the encoder
    /// adds `+Inf`, the count), the sum in seconds.
    fn to_proto(&self) -> proto::Histogram {
        let mut cumulative = 0;
        let buckets = BUCKETS
            .iter()
            .zip(&self.buckets)
            .map(|(&bound, n)| {
                cumulative += n.load(Relaxed);
                let mut b = proto::Bucket::default();
                b.set_upper_bound(bound);
                b.set_cumulative_count(cumulative);
                b
            })
            .collect();
        let mut h = proto::Histogram::default();
        h.set_bucket(buckets);
        h.set_sample_sum(self.sum_micros.load(Relaxed) as f64 / 1e6);
        h.set_sample_count(self.count().max(cumulative));
        h
    }
}

/// The metric families of one scrape, as each part of the gateway
/// describes them; [`Families::encode`] writes them out.
#[derive(Default)]
pub struct Families(Vec<MetricFamily>);

/// The samples of one family being described.
pub struct Samples<'a>(&'a mut MetricFamily);

impl Families {
    pub fn counter(&mut self, name: &str, help: &str) -> Samples<'_> {
        self.family(name, help, MetricType::COUNTER)
    }

    pub fn gauge(&mut self, name: &str, help: &str) -> Samples<'_> {
        self.family(name, help, MetricType::GAUGE)
    }

    /// A histogram without labels.
    pub fn histogram(&mut self, name: &str, help: &str, h: &Histogram) {
        let mut m = proto::Metric::default();
        m.set_histogram(h.to_proto());
        self.family(name, help, MetricType::HISTOGRAM)
            .0
            .mut_metric()
            .push(m);
    }

    /// A counter without labels, for each (name, help, value).
    pub fn counters<const N: usize>(&mut self, all: [(&str, &str, u64); N]) {
        for (name, help, v) in all {
            self.counter(name, help).value(v as f64);
        }
    }

    fn family(&mut self, name: &str, help: &str, kind: MetricType) -> Samples<'_> {
        let mut f = MetricFamily::default();
        f.set_name(name.to_owned());
        f.set_help(help.to_owned());
        f.set_field_type(kind);
        self.0.push(f);
        let last = self.0.len() - 1;
        Samples(&mut self.0[last])
    }

    /// The Prometheus text exposition (format 0.0.4) of every family that
    /// has a sample.
    pub fn encode(mut self) -> String {
        self.0.retain(|f| !f.get_metric().is_empty());
        prometheus::TextEncoder::new()
            .encode_to_string(&self.0)
            .unwrap_or_else(|e| format!("# the metrics could not be encoded: {e}\n"))
    }
}

impl Samples<'_> {
    /// A sample with these labels.
    pub fn with(&mut self, labels: &[(&str, &str)], value: f64) -> &mut Self {
        let mut m = proto::Metric::default();
        let pairs = labels
            .iter()
            .map(|(name, value)| {
                let mut l = proto::LabelPair::default();
                l.set_name((*name).to_owned());
                l.set_value((*value).to_owned());
                l
            })
            .collect();
        m.set_label(pairs);
        let kind = self.0.get_field_type();
        match kind {
            MetricType::COUNTER => {
                let mut c = proto::Counter::default();
                c.set_value(value);
                m.set_counter(c);
            }
            _ => {
                let mut g = proto::Gauge::default();
                g.set_value(value);
                m.set_gauge(g);
            }
        }
        self.0.mut_metric().push(m);
        self
    }

    /// The one sample, without labels.
    pub fn value(&mut self, value: f64) {
        self.with(&[], value);
    }
}

pub use crate::relay::ReplyClass;

/// Where a JSON-RPC message entered the gateway: a slot of the per-ingress
/// counters. The ingress registry gives the slots their constants
/// (`Ingress::HTTP`, `Ingress::STDIO`) and their names, and renders them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ingress(pub(super) u8);

impl Ingress {
    /// The slots the counters have room for (the registry checks that its
    /// kinds fit).
    pub const SLOTS: usize = 8;

    /// Its index in the metrics' arrays.
    pub const fn index(self) -> usize {
        self.0 as usize
    }
}

/// Which end of an association this gateway is: an edge opens them, an
/// origin accepts them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    Edge = 0,
    Origin = 1,
}

impl Side {
    pub const ALL: [Side; 2] = [Side::Edge, Side::Origin];

    /// Its `role` label.
    pub fn name(self) -> &'static str {
        match self {
            Side::Edge => "edge",
            Side::Origin => "origin",
        }
    }
}

/// What a part of the gateway shows of itself in `/metrics` and
/// `/readyz`, registered with [`Metrics::show`] as it is built.
pub trait Section: Send + Sync {
    /// What it is; a second section of the same name is not shown (one
    /// process's first edge shows its origins).
    fn name(&self) -> &'static str;
    /// Describes its metric families (none by default: some parts only
    /// answer `/readyz`).
    fn render(&self, metrics: &Metrics, out: &mut Families) {
        let _ = (metrics, out);
    }
    /// Whether it can carry a request now, and why not.
    fn readiness(&self) -> Result<(), String> {
        Ok(())
    }
}

/// All counters of one gateway process.
#[derive(Default)]
pub struct Metrics {
    requests: [AtomicU64; Ingress::SLOTS],
    notifications: [AtomicU64; Ingress::SLOTS],
    replies: [AtomicU64; ReplyClass::ALL.len()],
    /// Transport errors sent, and received, by code (1–5; 0 counts unknown
    /// codes).
    transport_errors: [[AtomicU64; 6]; 2],
    pub in_flight: AtomicI64,
    /// Open associations, and those ever opened, by [`Side`].
    associations: [AtomicI64; 2],
    associations_opened: [AtomicU64; 2],
    /// The roles this gateway has (edge, origin); both are shown while
    /// none was said.
    roles: std::sync::OnceLock<[bool; 2]>,
    pub handshake_failures: AtomicU64,
    /// Edge: handshakes that ran so far past the last one's time that a
    /// spare was made beside them.
    pub handshake_spares: AtomicU64,
    /// Edge: handshakes that waited for a turn (more than
    /// `HANDSHAKES_AT_ONCE`, 16, under way to their origin).
    pub handshakes_queued: AtomicU64,
    pub association_errors: AtomicU64,
    /// Origin: requests delivered to the upstream, and their answers.
    pub upstream_requests: AtomicU64,
    /// Notifications the upstream took (origin).
    pub upstream_notifications: AtomicU64,
    /// Origin: requests the upstream answered (a result or a JSON-RPC
    /// error).
    pub upstream_replies: AtomicU64,
    pub upstream_failures: AtomicU64,
    pub upstream_restarts: AtomicU64,
    /// Origin: upstream sessions (WebSocket connections, child processes)
    /// being kept, one per association, including those shutting down.
    pub upstream_sessions: AtomicI64,
    /// Frames or messages dropped (malformed, unknown correlation, no client).
    pub dropped: AtomicU64,
    /// Edge: HTTP requests and WebSocket handshakes refused for a missing
    /// or unknown bearer token.
    pub unauthorized: AtomicU64,
    /// Edge: HTTP requests and WebSocket handshakes refused because they
    /// came from a page of an origin not allowed (`--cors-origin`).
    pub foreign_origins: AtomicU64,
    /// Origin: upstream sessions that found `--max-upstream-processes`
    /// running and started none.
    pub upstream_processes_refused: AtomicU64,
    /// Edge: MCP `initialize` refused: the sessions at their limits
    /// (`--max-connections`, `--max-sessions-per-client`).
    pub sessions_refused: AtomicU64,
    /// Edge: client connections closed at once because their source address
    /// held `--max-connections-per-source` already.
    pub source_connections_refused: AtomicU64,
    /// Edge: HTTP requests and WebSocket handshakes refused because they
    /// named a host not allowed (`--allowed-host`; DNS rebinding).
    pub foreign_hosts: AtomicU64,
    /// Edge: client TLS handshakes that failed (no or an untrusted client
    /// certificate, a protocol or version the ingress does not speak).
    pub client_tls_failures: AtomicU64,
    /// Edge: requests and notifications refused for a client over its
    /// rate limit (`--rate-limit`, `--rate-limit-octets`).
    pub rate_limited: AtomicU64,
    /// Edge: clients dropped for not moving data (a body that does not
    /// arrive, replies that are not read).
    pub stalled_clients: AtomicU64,
    /// Origin: upstream sessions restarted because they took no message
    /// within the stall timeout.
    pub stalled_upstreams: AtomicU64,
    pub latency: Histogram,
    pub upstream_latency: Histogram,
    /// The association listeners' own counters (origin role).
    pub serve: crate::assoc::ServeStats,
    /// What peers did wrong (drops, errors by class, refused handshakes):
    /// the endpoint's counters, shared by all its associations.
    pub assoc: std::sync::Arc<crate::assoc::stats::AssocStats>,
    /// What the other rooms show of themselves, in the order they came.
    sections: std::sync::Mutex<Vec<std::sync::Arc<dyn Section>>>,
}

impl Metrics {
    /// `/readyz`: whether this gateway can carry a request now (an edge: an
    /// origin not ejected; an origin: an upstream not ejected), and why
    /// not.
    pub fn readiness(&self) -> Result<(), String> {
        self.sections().iter().try_for_each(|s| s.readiness())
    }

    /// Shows `section` in [`Metrics::render`] and [`Metrics::readiness`],
    /// unless one of its name is shown already.
    pub fn show(&self, section: std::sync::Arc<dyn Section>) {
        let mut sections = self.sections();
        if sections.iter().all(|s| s.name() != section.name()) {
            sections.push(section);
        }
    }

    fn sections(&self) -> std::sync::MutexGuard<'_, Vec<std::sync::Arc<dyn Section>>> {
        // A panic while one was held leaves a whole list behind.
        self.sections
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Metrics that also report the association counters of an endpoint.
    pub fn with_assoc_stats(assoc: std::sync::Arc<crate::assoc::stats::AssocStats>) -> Self {
        Self {
            assoc,
            ..Self::default()
        }
    }

    pub fn request(&self, ingress: Ingress) {
        self.requests[ingress.index()].fetch_add(1, Relaxed);
    }

    pub fn notification(&self, ingress: Ingress) {
        self.notifications[ingress.index()].fetch_add(1, Relaxed);
    }

    pub fn reply(&self, class: ReplyClass) {
        self.replies[class as usize].fetch_add(1, Relaxed);
    }

    /// `n` answers of one class.
    pub fn reply_n(&self, class: ReplyClass, n: usize) {
        self.replies[class as usize].fetch_add(n as u64, Relaxed);
    }

    pub fn replies(&self, class: ReplyClass) -> u64 {
        self.replies[class as usize].load(Relaxed)
    }

    pub fn requests(&self, ingress: Ingress) -> u64 {
        self.requests[ingress.index()].load(Relaxed)
    }

    pub fn notifications(&self, ingress: Ingress) -> u64 {
        self.notifications[ingress.index()].load(Relaxed)
    }

    /// A transport error this gateway sent (`sent`) or received.
    pub fn transport_error(&self, code: TransportError, sent: bool) {
        let i = if (1..=5).contains(&code.0) {
            code.0 as usize
        } else {
            0
        };
        self.transport_errors[usize::from(!sent)][i].fetch_add(1, Relaxed);
    }

    /// Says which roles this gateway has: only their metrics are shown.
    pub fn for_roles(&self, edge: bool, origin: bool) {
        let _ = self.roles.set([edge, origin]);
    }

    /// An association was opened, at this end of it.
    pub fn association_opened(&self, side: Side) {
        self.associations[side as usize].fetch_add(1, Relaxed);
        self.associations_opened[side as usize].fetch_add(1, Relaxed);
    }

    /// An association ended.
    pub fn association_closed(&self, side: Side) {
        self.associations[side as usize].fetch_sub(1, Relaxed);
    }

    /// Associations opened so far, at either end.
    pub fn associations_opened(&self) -> u64 {
        self.associations_opened
            .iter()
            .map(|n| n.load(Relaxed))
            .sum()
    }

    /// Associations open now, at either end.
    pub fn associations_open(&self) -> i64 {
        self.associations.iter().map(|n| n.load(Relaxed)).sum()
    }

    /// The Prometheus text exposition of every metric of the roles this
    /// gateway has ([`Metrics::for_roles`]; both when none was said).
    pub fn render(&self) -> String {
        let mut o = Families::default();
        self.render_both(&mut o);
        if self.shows(Side::Edge) {
            self.render_edge(&mut o);
        }
        if self.shows(Side::Origin) {
            self.render_origin(&mut o);
        }
        for section in self.sections().iter() {
            section.render(self, &mut o);
        }
        o.encode()
    }

    fn shows(&self, side: Side) -> bool {
        match self.roles.get() {
            None => true,
            Some(roles) => roles[side as usize],
        }
    }

    /// What both roles count: associations, transport errors, what peers
    /// did wrong, drops.
    fn render_both(&self, o: &mut Families) {
        let mut errors = o.counter(
            "npamp_transport_errors_total",
            "N-PAMP transport errors, by code and by whether this gateway sent or received them.",
        );
        for (side, counts) in ["sent", "received"].iter().zip(&self.transport_errors) {
            for (code, n) in counts.iter().enumerate() {
                let name = TransportError(code as u8).name();
                errors.with(&[("code", name), ("side", side)], load(n));
            }
        }
        (o.gauge("npamp_in_flight", "Requests awaiting a reply."))
            .value(self.in_flight.load(Relaxed) as f64);
        let mut open = o.gauge(
            "npamp_associations",
            "Open N-PAMP associations, by this gateway's role in them.",
        );
        for side in Side::ALL.into_iter().filter(|&s| self.shows(s)) {
            let n = self.associations[side as usize].load(Relaxed);
            open.with(&[("role", side.name())], n as f64);
        }
        let mut opened = o.counter(
            "npamp_associations_opened_total",
            "N-PAMP associations established, by this gateway's role in them.",
        );
        for side in Side::ALL.into_iter().filter(|&s| self.shows(s)) {
            opened.with(
                &[("role", side.name())],
                load(&self.associations_opened[side as usize]),
            );
        }
        let failed_handshakes =
            self.handshake_failures.load(Relaxed) + self.serve.handshake_failures.load(Relaxed);
        o.counters([
            (
                "npamp_handshake_failures_total",
                "N-PAMP handshakes that failed (both roles).",
                failed_handshakes,
            ),
            (
                "npamp_association_errors_total",
                "Associations that ended with an error (tampered, out-of-sequence, I/O).",
                self.association_errors.load(Relaxed),
            ),
            (
                "npamp_dropped_total",
                "Messages dropped: malformed frames, unknown correlation ids, no client.",
                self.dropped.load(Relaxed),
            ),
        ]);
        self.render_peer_faults(o);
    }

    /// What peers did wrong: frames dropped, associations closed for an
    /// error.
    fn render_peer_faults(&self, o: &mut Families) {
        let a = &self.assoc;
        let mut dropped = o.counter(
            "npamp_frames_dropped_total",
            "Frames dropped under the receive rules without closing the association, by reason.",
        );
        for (reason, v) in [
            ("unknown_channel", &a.dropped_unknown_channel),
            ("forged_close", &a.dropped_forged_close),
            ("unknown_frame_type", &a.dropped_unknown_frame_type),
        ] {
            dropped.with(&[("reason", reason)], load(v));
        }
        let mut failed = o.counter(
            "npamp_associations_failed_total",
            "Associations closed for an error, by class (tampered, out_of_sequence, malformed, io).",
        );
        for class in crate::assoc::ErrorClass::ALL {
            failed.with(&[("class", class.name())], load(a.closed_counter(class)));
        }
    }

    /// An edge's: its clients' requests, replies and refusals, and the
    /// handshakes it makes.
    fn render_edge(&self, o: &mut Families) {
        let mut replies = o.counter(
            "npamp_replies_total",
            "Answers given to client requests, by class.",
        );
        for c in ReplyClass::ALL {
            replies.with(&[("class", c.name())], load(&self.replies[c as usize]));
        }
        let n = |v: &AtomicU64| v.load(Relaxed);
        o.counters([
                (
                    "npamp_handshake_spares_total",
                    "Handshakes that ran far past the last one's time, so that a spare was made beside them (edge).",
                    n(&self.handshake_spares),
                ),
                (
                    "npamp_handshakes_queued_total",
                    "Handshakes that waited for a turn: as many were under way to their origin as it takes from one source (edge).",
                    n(&self.handshakes_queued),
                ),
                (
                    "npamp_unauthorized_total",
                    "Client requests and WebSocket handshakes refused: missing or unknown bearer token.",
                    n(&self.unauthorized),
                ),
                (
                    "npamp_foreign_origins_total",
                    "Client requests and WebSocket handshakes refused: from a page of an origin not allowed (--cors-origin).",
                    n(&self.foreign_origins),
                ),
                (
                    "npamp_mcp_sessions_refused_total",
                    "MCP initialize refused: the sessions at --max-connections or --max-sessions-per-client (edge).",
                    n(&self.sessions_refused),
                ),
                (
                    "npamp_source_connections_refused_total",
                    "Client connections closed at once: their source address held --max-connections-per-source already.",
                    n(&self.source_connections_refused),
                ),
                (
                    "npamp_foreign_hosts_total",
                    "Client requests and WebSocket handshakes refused: for a host name not allowed (--allowed-host; DNS rebinding).",
                    n(&self.foreign_hosts),
                ),
                (
                    "npamp_client_tls_failures_total",
                    "Client TLS handshakes at a TLS ingress that failed (no or an untrusted client certificate, no common protocol).",
                    n(&self.client_tls_failures),
                ),
                (
                    "npamp_rate_limited_total",
                    "Client requests and notifications refused: over the client's rate limit (--rate-limit, --rate-limit-octets).",
                    n(&self.rate_limited),
                ),
                (
                    "npamp_stalled_clients_total",
                    "Clients dropped for not moving data within the stall timeout.",
                    n(&self.stalled_clients),
                ),
        ]);
        o.histogram(
            "npamp_request_duration_seconds",
            "Edge: time from a request's arrival to its answer.",
            &self.latency,
        );
    }

    /// An origin's: its upstream, and the connections its listeners take.
    fn render_origin(&self, o: &mut Families) {
        o.gauge(
            "npamp_upstream_sessions",
            "Upstream sessions (WebSocket connections, child processes), one per association.",
        )
        .value(self.upstream_sessions.load(Relaxed) as f64);
        let n = |v: &AtomicU64| v.load(Relaxed);
        o.counters([
                (
                    "npamp_upstream_requests_total",
                    "Requests delivered to the upstream.",
                    n(&self.upstream_requests),
                ),
                (
                    "npamp_upstream_replies_total",
                    "Requests the upstream answered (a result or a JSON-RPC error).",
                    n(&self.upstream_replies),
                ),
                (
                    "npamp_upstream_notifications_total",
                    "Notifications the upstream took (origin); their answers are not replies.",
                    n(&self.upstream_notifications),
                ),
                (
                    "npamp_upstream_failures_total",
                    "Requests the upstream could not be reached for (answered NotDelivered).",
                    n(&self.upstream_failures),
                ),
                (
                    "npamp_upstream_restarts_total",
                    "Upstream child processes restarted.",
                    n(&self.upstream_restarts),
                ),
                (
                    "npamp_upstream_processes_refused_total",
                    "Upstream sessions that started no process: --max-upstream-processes ran already (origin).",
                    n(&self.upstream_processes_refused),
                ),
                (
                    "npamp_stalled_upstreams_total",
                    "Upstream sessions (stdio, WebSocket) restarted for taking no message within the stall timeout.",
                    n(&self.stalled_upstreams),
                ),
        ]);
        self.render_listeners(o);
        o.histogram(
            "npamp_upstream_duration_seconds",
            "Origin: time the upstream took to answer a request.",
            &self.upstream_latency,
        );
    }

    /// An origin's listeners: connections refused or dropped before their
    /// handshake, QUIC retries.
    fn render_listeners(&self, o: &mut Families) {
        let a = &self.assoc;
        let n = |v: &AtomicU64| v.load(Relaxed);
        o.counters([
            (
                "npamp_handshakes_refused_total",
                "Connections refused because too many handshakes were in progress.",
                n(&a.handshakes_refused),
            ),
            (
                "npamp_quic_retries_total",
                "QUIC connection attempts answered with a Retry (address validation) while many handshakes were in progress.",
                n(&a.quic_retries),
            ),
        ]);
        let mut dropped = o.counter(
            "npamp_connections_dropped_total",
            "Connections dropped before their handshake began, by reason (silent: nothing sent within --first-octets-timeout; evicted: pushed out of a full waiting room by newer ones).",
        );
        for (reason, v) in [
            ("silent", &a.connections_silent),
            ("evicted", &a.connections_evicted),
        ] {
            dropped.with(&[("reason", reason)], load(v));
        }
    }
}

/// A counter's value as the exposition has it.
fn load(v: &AtomicU64) -> f64 {
    v.load(Relaxed) as f64
}

/// The process's own metrics, named as Prometheus's client libraries name
/// them (`process_cpu_seconds_total`, `process_resident_memory_bytes`,
/// ...; read from `/proc` at each scrape, on Linux), and the build's
/// (`npamp_build_info`).
pub struct Process;

impl Section for Process {
    fn name(&self) -> &'static str {
        "process"
    }

    fn render(&self, _: &Metrics, o: &mut Families) {
        o.gauge(
            "npamp_build_info",
            "The gateway's version (the value is 1).",
        )
        .with(&[("version", env!("CARGO_PKG_VERSION"))], 1.0);
        #[cfg(target_os = "linux")]
        if let Some(p) = proc_self::read() {
            p.render(o);
        }
    }
}

#[cfg(target_os = "linux")]
mod proc_self {
    use crate::gateway::metrics::Families;

    /// What `/proc` says of this process.
    pub struct ProcSelf {
        cpu_seconds: f64,
        resident_bytes: u64,
        virtual_bytes: u64,
        threads: u64,
        start_time_seconds: f64,
        open_fds: u64,
        max_fds: Option<u64>,
    }

    /// `None` where `/proc` cannot be read or says something else than
    /// Linux's layout (the metrics are then left out, not made up).
    pub fn read() -> Option<ProcSelf> {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        // The command's name, in parentheses, may hold spaces: the fields
        // are counted from after its last `)`, which is field 2.
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
        let ticks = rustix::param::clock_ticks_per_second() as f64;
        let boot: u64 = std::fs::read_to_string("/proc/stat")
            .ok()?
            .lines()
            .find_map(|l| l.strip_prefix("btime ")?.trim().parse().ok())?;
        let page = rustix::param::page_size() as u64;
        let open_fds = std::fs::read_dir("/proc/self/fd").ok()?.count() as u64;
        let max_fds = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
        Some(ProcSelf {
            cpu_seconds: (field(14)? + field(15)?) as f64 / ticks,
            threads: field(20)?,
            start_time_seconds: boot as f64 + field(22)? as f64 / ticks,
            virtual_bytes: field(23)?,
            resident_bytes: field(24)? * page,
            open_fds,
            max_fds,
        })
    }

    impl ProcSelf {
        pub fn render(&self, o: &mut Families) {
            o.counter(
                "process_cpu_seconds_total",
                "User and system CPU time spent, in seconds.",
            )
            .value(self.cpu_seconds);
            for (name, help, v) in [
                (
                    "process_resident_memory_bytes",
                    "Resident memory size in bytes.",
                    self.resident_bytes,
                ),
                (
                    "process_virtual_memory_bytes",
                    "Virtual memory size in bytes.",
                    self.virtual_bytes,
                ),
                ("process_threads", "Threads of the process.", self.threads),
                ("process_open_fds", "Open file descriptors.", self.open_fds),
            ] {
                o.gauge(name, help).value(v as f64);
            }
            if let Some(max) = self.max_fds {
                o.gauge(
                    "process_max_fds",
                    "The most file descriptors the process may open.",
                )
                .value(max as f64);
            }
            o.gauge(
                "process_start_time_seconds",
                "When the process started, in seconds since the Unix epoch.",
            )
            .value(self.start_time_seconds);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_and_cumulative_buckets() {
        let m = Metrics::default();
        m.reply(ReplyClass::Success);
        m.transport_error(TransportError::NOT_DELIVERED, true);
        m.transport_error(TransportError::NOT_DELIVERED, false);
        m.transport_error(TransportError::NOT_DELIVERED, false);
        m.latency.observe(Duration::from_micros(300));
        m.latency.observe(Duration::from_micros(30));
        m.latency.observe(Duration::from_micros(25));
        m.latency.observe(Duration::from_secs(60));
        let text = m.render();
        assert!(text.contains("npamp_replies_total{class=\"success\"} 1"));
        assert!(
            text.contains("npamp_transport_errors_total{code=\"NotDelivered\",side=\"sent\"} 1")
        );
        assert!(
            text.contains(
                "npamp_transport_errors_total{code=\"NotDelivered\",side=\"received\"} 2"
            )
        );
        // 25 µs is in the first bucket (bounds are inclusive), 30 µs in the
        // second, 300 µs in the 0.0003 one; 60 s only in +Inf.
        for (le, n) in [
            ("0.000025", 1),
            ("0.00005", 2),
            ("0.0002", 2),
            ("0.0003", 3),
            ("10", 3),
            ("+Inf", 4),
        ] {
            let line = format!("npamp_request_duration_seconds_bucket{{le=\"{le}\"}} {n}\n");
            assert!(text.contains(&line), "{line}{text}");
        }
        assert!(text.contains("npamp_request_duration_seconds_count 4"));
    }

    #[test]
    fn each_role_shows_its_own_metrics() {
        let edge = Metrics::default();
        edge.for_roles(true, false);
        edge.association_opened(Side::Edge);
        let text = edge.render();
        assert!(
            text.contains("npamp_associations{role=\"edge\"} 1"),
            "{text}"
        );
        assert!(text.contains("npamp_replies_total{class=\"success\"} 0"));
        assert!(text.contains("npamp_request_duration_seconds_count 0"));
        for origin_only in [
            "npamp_associations{role=\"origin\"}",
            "npamp_upstream_",
            "npamp_quic_retries_total",
        ] {
            assert!(!text.contains(origin_only), "{origin_only} at an edge");
        }
        let origin = Metrics::default();
        origin.for_roles(false, true);
        origin.association_opened(Side::Origin);
        origin.association_opened(Side::Origin);
        origin.association_closed(Side::Origin);
        let text = origin.render();
        assert!(
            text.contains("npamp_associations{role=\"origin\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("npamp_associations_opened_total{role=\"origin\"} 2"),
            "{text}"
        );
        assert!(text.contains("npamp_upstream_duration_seconds_count 0"));
        for edge_only in [
            "role=\"edge\"",
            "npamp_replies_total",
            "npamp_request_duration",
            "npamp_stalled_clients_total",
        ] {
            assert!(!text.contains(edge_only), "{edge_only} at an origin");
        }
        // Both, when no role was said (the library's own uses).
        let both = Metrics::default().render();
        assert!(
            both.contains("npamp_replies_total") && both.contains("npamp_upstream_requests_total")
        );
    }

    #[test]
    fn shows_the_process_and_the_build() {
        let m = Metrics::default();
        m.show(std::sync::Arc::new(Process));
        let text = m.render();
        let value = |name: &str| -> Option<f64> {
            text.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        };
        let version = format!(
            "npamp_build_info{{version=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION")
        );
        assert!(text.contains(&version), "{text}");
        if cfg!(target_os = "linux") {
            let rss = value("process_resident_memory_bytes").expect("RSS");
            assert!(rss > 1e6, "{rss}");
            assert!(value("process_open_fds").expect("fds") >= 3.0);
            assert!(value("process_threads").expect("threads") >= 1.0);
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .expect("clock")
                .as_secs_f64();
            let started = value("process_start_time_seconds").expect("start");
            assert!(
                started <= now + 1.0 && started > now - 86_400.0,
                "{started} {now}"
            );
            assert!(value("process_cpu_seconds_total").expect("CPU") >= 0.0);
        }
    }

    #[test]
    fn renders_what_peers_did_wrong() {
        use crate::assoc::{ErrorClass, stats::AssocStats};
        let stats = std::sync::Arc::new(AssocStats::default());
        let m = Metrics::with_assoc_stats(stats.clone());
        stats.dropped(crate::assoc::Drop::ForgedClose);
        stats.closed(ErrorClass::OutOfSequence);
        stats.closed(ErrorClass::OutOfSequence);
        stats.handshakes_refused.fetch_add(3, Relaxed);
        let text = m.render();
        assert!(text.contains("npamp_frames_dropped_total{reason=\"forged_close\"} 1"));
        assert!(text.contains("npamp_frames_dropped_total{reason=\"unknown_channel\"} 0"));
        assert!(text.contains("npamp_associations_failed_total{class=\"out_of_sequence\"} 2"));
        assert!(text.contains("npamp_associations_failed_total{class=\"tampered\"} 0"));
        assert!(text.contains("npamp_handshakes_refused_total 3"));
        stats.connections_evicted.fetch_add(2, Relaxed);
        let text = m.render();
        assert!(text.contains("npamp_connections_dropped_total{reason=\"evicted\"} 2"));
        assert!(text.contains("npamp_quic_retries_total 0"));
    }
}
