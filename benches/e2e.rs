//! End to end through one association, in process: a JSON-RPC request goes
//! through the edge's carriage (scan, envelope, correlation id, seal), over
//! QUIC or TLS on loopback, is opened and checked at the origin, answered by
//! an echo sink (no upstream: the bench measures the bridge), and the reply
//! is matched back by correlation id.
//!
//! - `correlation/round-trip/*`: one request at a time (latency), against a
//!   bare PING/PONG on the same transport in the same group — the ratio is
//!   the cost of carriage and correlation over the association's own RTT.
//! - `correlation/64-in-flight/*`: 64 requests in flight (frames/s: each
//!   request is two frames).

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use npamp_gateway::assoc::{AssocHandle, BridgeSink, End, Payload};
use npamp_gateway::assoc::{Endpoint, Link, Listener, PeerAddr, Scheme, ServeStats};
use npamp_gateway::bridge::ProtocolId;
use npamp_gateway::gateway::config::GatewayOptions;
use npamp_gateway::gateway::edge::Edge;
use npamp_gateway::gateway::exec::send;
use npamp_gateway::gateway::metrics::Metrics;
use npamp_gateway::gateway::{Ctx, GatewayConfig};
use npamp_gateway::handshake::Trust;
use npamp_gateway::jsonrpc::carriage::Inbound;
use npamp_gateway::jsonrpc::{Kind, Limits, Scanned, scan};
use npamp_gateway::relay::{Received, Reply, ToPeer, receive};
use npamp_gateway::wire::FrameType;

const REQUEST: &str = r#"{"jsonrpc":"2.0","id":7,"method":"eth_getBalance","params":["0x407d73d8a49eeb85d32cf465507dd71d507100c1","latest"]}"#;
const IN_FLIGHT: usize = 64;

/// The origin's stand-in: answers every request with a small result,
/// carrying its id, on the request's correlation id.
struct Echo {
    assoc: AssocHandle,
}

impl BridgeSink for Echo {
    async fn frame(&mut self, frame_type: FrameType, payload: Payload<'_>) {
        let corr;
        let reply;
        match receive(
            frame_type,
            payload.octets(),
            ProtocolId::JSONRPC_EXPERIMENTAL,
            &Limits::default(),
        ) {
            Received::Message(Inbound::JsonRpc {
                kind: Kind::Request { id, .. },
                text,
                correlation_id,
                ..
            }) => {
                corr = correlation_id.to_vec();
                let id = std::str::from_utf8(&text[id.token]).unwrap_or("null");
                reply = format!(r#"{{"jsonrpc":"2.0","id":{id},"result":"0x0234c8a3397aab58"}}"#);
            }
            _ => return,
        }
        let Ok(Scanned::Single(kind)) = scan(reply.as_bytes(), &Limits::default()) else {
            return;
        };
        let reply = ToPeer::Message {
            text: reply.into(),
            kind,
            corr: corr[..].into(),
            label: None,
            attached: None,
        };
        let _ = send(&self.assoc, ProtocolId::JSONRPC_EXPERIMENTAL, &reply).await;
    }

    fn ended(&mut self, _: &End) {}
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// An echo origin and an edge with a pool of one association to it.
async fn setup(scheme: Scheme) -> (Listener, Arc<Edge>) {
    let ep = Endpoint::new([0x44; 32], Trust::InsecureAcceptAny);
    let listener = Listener::bind_with(
        PeerAddr {
            scheme,
            addr: "127.0.0.1:0".parse().expect("addr"),
        },
        ep,
        ServeStats::default(),
        None,
        |assoc| Echo { assoc },
    )
    .await
    .expect("origin");
    let options = GatewayOptions {
        insecure_accept_any_peer: true,
        peer: vec![listener.local_addr],
        pool_size: Some("1".parse().expect("a count")),
        ..Default::default()
    };
    let config: GatewayConfig = options.resolve().expect("config");
    let ctx = Arc::new(Ctx::new(&config, Arc::new(Metrics::default())));
    let edge = Arc::new(Edge::new(listener.local_addr, config.endpoint, ctx));
    (listener, edge)
}

async fn call(edge: &Arc<Edge>, text: &Bytes, kind: &Kind) {
    match edge.call(text.clone(), kind.clone(), None, None).await {
        Reply::Message { .. } => {}
        Reply::Failed(f) => panic!("call failed: {f:?}"),
    }
}

fn correlation(c: &mut Criterion) {
    let text = Bytes::from_static(REQUEST.as_bytes());
    let Ok(Scanned::Single(kind)) = scan(&text, &Limits::default()) else {
        panic!("the request scans");
    };
    let rt = runtime();
    let mut g = c.benchmark_group("correlation/round-trip");
    g.measurement_time(Duration::from_secs(5));
    for scheme in [Scheme::Quic, Scheme::Tls] {
        let name = if scheme == Scheme::Quic {
            "quic"
        } else {
            "tls"
        };
        let (listener, edge) = rt.block_on(setup(scheme));
        rt.block_on(call(&edge, &text, &kind));
        g.bench_function(format!("{name}/json-rpc request"), |b| {
            b.to_async(&rt).iter(|| call(&edge, &text, &kind));
        });
        let mut link = rt
            .block_on(Link::connect(
                listener.local_addr,
                &Endpoint::new([0x55; 32], Trust::InsecureAcceptAny),
            ))
            .expect("link");
        g.bench_function(format!("{name}/ping (baseline)"), |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let start = Instant::now();
                    for _ in 0..iters {
                        link.ping().await.expect("ping");
                    }
                    start.elapsed()
                })
            });
        });
    }
    g.finish();

    let mut g = c.benchmark_group("correlation/64-in-flight");
    g.measurement_time(Duration::from_secs(5));
    g.throughput(Throughput::Elements(IN_FLIGHT as u64 * 2));
    for scheme in [Scheme::Quic, Scheme::Tls] {
        let name = if scheme == Scheme::Quic {
            "quic"
        } else {
            "tls"
        };
        let (_listener, edge) = rt.block_on(setup(scheme));
        g.bench_function(format!("{name}/64 requests"), |b| {
            b.to_async(&rt).iter(|| async {
                let calls = (0..IN_FLIGHT).map(|_| call(&edge, &text, &kind));
                futures_util::future::join_all(calls).await;
            });
        });
    }
    g.finish();
}

criterion_group!(benches, correlation);
criterion_main!(benches);
