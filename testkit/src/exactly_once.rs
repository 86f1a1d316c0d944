//! Exactly-once accounting of JSON-RPC over HTTP, and an embedded gateway
//! pair to run it against (`npamp-gateway exactly-once`, the default
//! command).
//!
//! `clients` closed-loop clients, each on its own keep-alive connection,
//! send `echo` requests with ids unique across the run and a payload naming
//! the client and the sequence number; every answer is checked against the
//! request it answers: its own id and its own payload back, or a JSON-RPC
//! error (counted by HTTP status), or counted lost.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use serde_json::{Value, json};

use npamp_gateway::assoc::{Endpoint, PeerAddr, Scheme};
use npamp_gateway::bridge::ProtocolId;
use npamp_gateway::gateway::config::random_seed;
use npamp_gateway::gateway::{Gateway, GatewayConfig, IngressUrl, Limits};
use npamp_gateway::handshake::{Identity, Trust};
use npamp_gateway::jsonrpc::EffectTable;

use crate::mock::{self, MockAddr};

/// What happened to every request of a run.
#[derive(Debug, Clone)]
pub struct Tally {
    pub sent: u64,
    /// Answered with its own id and its own payload echoed back.
    pub ok: u64,
    /// Answered with another request's id or payload.
    pub mismatched: u64,
    /// Answered with a JSON-RPC error (by HTTP status).
    pub errors: BTreeMap<u16, u64>,
    /// No answer at all (connection failed, no response, not JSON).
    pub lost: u64,
    /// Time from sending to the answer, microseconds.
    pub latency_us: hdrhistogram::Histogram<u64>,
    pub elapsed: Duration,
}

impl Default for Tally {
    fn default() -> Self {
        Self {
            sent: 0,
            ok: 0,
            mismatched: 0,
            errors: BTreeMap::new(),
            lost: 0,
            // Three significant digits, resized as needed.
            latency_us: hdrhistogram::Histogram::new(3)
                .expect("3 significant digits is a valid precision"),
            elapsed: Duration::ZERO,
        }
    }
}

impl Tally {
    fn merge(&mut self, o: Tally) {
        self.sent += o.sent;
        self.ok += o.ok;
        self.mismatched += o.mismatched;
        self.lost += o.lost;
        for (k, v) in o.errors {
            *self.errors.entry(k).or_default() += v;
        }
        // Both histograms auto-resize: adding cannot fail.
        let _ = self.latency_us.add(&o.latency_us);
    }

    /// Answers per second over the run.
    pub fn rate(&self) -> f64 {
        (self.ok + self.errors.values().sum::<u64>()) as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Every request got exactly one answer, and it was its own.
    pub fn exact(&self) -> bool {
        let errors: u64 = self.errors.values().sum();
        self.lost == 0 && self.mismatched == 0 && self.ok + errors == self.sent
    }
}

async fn client(url: hyper::Uri, n: u64, until: Instant) -> Tally {
    let http = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .pool_max_idle_per_host(1)
        .build_http::<Full<Bytes>>();
    let mut t = Tally::default();
    let mut seq = 0u64;
    while Instant::now() < until {
        seq += 1;
        let id = (n << 32) | seq;
        let params = json!([n, seq, format!("c{n}-s{seq}")]);
        let body = json!({"jsonrpc":"2.0","id":id,"method":"echo","params":params}).to_string();
        let req = match hyper::Request::post(url.clone())
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body)))
        {
            Ok(r) => r,
            Err(_) => break,
        };
        t.sent += 1;
        let started = Instant::now();
        let answer = tokio::time::timeout(Duration::from_secs(60), async {
            let resp = http.request(req).await.ok()?;
            let status = resp.status().as_u16();
            let body = resp.into_body().collect().await.ok()?.to_bytes();
            Some((status, serde_json::from_slice::<Value>(&body).ok()?))
        })
        .await
        .ok()
        .flatten();
        let us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
        let _ = t.latency_us.record(us.max(1));
        match answer {
            None => t.lost += 1,
            Some((_, v)) if v["id"] != json!(id) => t.mismatched += 1,
            Some((200, v)) if v.get("result").is_some() => {
                if v["result"] == params {
                    t.ok += 1;
                } else {
                    t.mismatched += 1;
                }
            }
            Some((status, _)) => *t.errors.entry(status).or_default() += 1,
        }
    }
    t
}

/// Runs `clients` clients against `url` for `duration`.
pub async fn run(url: &str, clients: u64, duration: Duration) -> Result<Tally, String> {
    let url: hyper::Uri = url.parse().map_err(|e| format!("bad URL {url:?}: {e}"))?;
    let started = Instant::now();
    let until = started + duration;
    let tasks: Vec<_> = (1..=clients)
        .map(|n| tokio::spawn(client(url.clone(), n, until)))
        .collect();
    let mut total = Tally::default();
    for t in tasks {
        match t.await {
            Ok(t) => total.merge(t),
            Err(_) => total.lost += 1,
        }
    }
    total.elapsed = started.elapsed();
    Ok(total)
}

/// A mock upstream, an origin and an edge gateway in this process, pinned
/// to each other's (fresh) identities: HTTP ingress → N-PAMP over
/// `transport` → HTTP upstream. Both gateways run with `limits`.
pub struct EmbeddedPair {
    pub origin: Gateway,
    pub edge: Gateway,
    pub upstream: MockAddr,
    pub ingress: String,
}

impl EmbeddedPair {
    pub async fn start(transport: Scheme, limits: Limits) -> Result<Self, String> {
        Self::start_for(transport, limits, ProtocolId::JSONRPC_EXPERIMENTAL).await
    }

    /// A pair carrying `protocol`. For MCP, both gateways speak MCP's
    /// Streamable HTTP (sessions at the edge's ingress, an MCP upstream at
    /// the origin), and the mock answers with event streams, as MCP servers
    /// do.
    pub async fn start_for(
        transport: Scheme,
        limits: Limits,
        protocol: ProtocolId,
    ) -> Result<Self, String> {
        let behavior = mock::MockOptions {
            event_stream: protocol == ProtocolId::MCP,
            ..Default::default()
        }
        .behavior();
        let upstream = mock::spawn(MockAddr::Http(loopback()), None, behavior)
            .await
            .map_err(|e| format!("mock upstream: {e}"))?;
        let (origin_seed, edge_seed) = (random_seed()?, random_seed()?);
        let public = |seed: &[u8; 32]| -> Result<[u8; 32], String> {
            let id = Identity::from_seed(seed).map_err(|e| e.to_string())?;
            id.public_key()
                .try_into()
                .map_err(|_| "identity key is not 32 octets".to_owned())
        };
        let base = |seed, peer_key| {
            let mut c = GatewayConfig::new(Endpoint::new(seed, Trust::Pinned(vec![peer_key])));
            c.limits = limits.clone();
            c.protocol = protocol;
            c.effects = EffectTable::for_protocol(protocol);
            c
        };
        let upstream_uri = upstream
            .to_string()
            .parse()
            .map_err(|e| format!("{upstream}: {e}"))?;
        let mut origin = base(origin_seed, public(&edge_seed)?);
        origin.listen = vec![PeerAddr {
            scheme: transport,
            addr: loopback(),
        }];
        origin.upstream = Some(upstream_uri);
        let origin = Gateway::start(origin).await.map_err(|e| e.to_string())?;
        let peer = *origin
            .listening
            .first()
            .ok_or("the origin has no listener")?;
        let mut edge = base(edge_seed, public(&origin_seed)?);
        edge.ingress = vec![IngressUrl::http(loopback())];
        edge.peers = vec![peer];
        let edge = Gateway::start(edge).await.map_err(|e| e.to_string())?;
        let ingress = match edge.ingress.first() {
            Some(url) => format!("{url}/"),
            None => return Err("the edge has no HTTP ingress".into()),
        };
        Ok(Self {
            origin,
            edge,
            upstream,
            ingress,
        })
    }
}

fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}
