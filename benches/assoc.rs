//! Associations over loopback: Bridge frames per second through one QUIC
//! association against raw quinn moving the same octets with the same
//! batching (same group), handshake latency and handshakes per second (16
//! clients at once) over QUIC and TLS, and PING/PONG round trips.
//!
//! Raw quinn: the client writes pre-built frames (the same length as the
//! sealed Bridge frames) on one stream, 64 per write; the server counts
//! octets. Association: 64 Bridge frames (256 B foreign message, or
//! `NPAMP_BENCH_FOREIGN` octets) sealed into
//! one buffer and written at once; the server deframes, opens, checks the
//! sequence and counts each frame. In both, the sending loop runs as a task
//! on the runtime's workers, as a gateway's tasks do, not on the bench's own
//! thread (which would be a third busy thread on a 2-core machine).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use npamp_gateway::assoc::{
    ALPN, Endpoint, Link, Listener, PeerAddr, Scheme, ServeStats, quic_endpoint, tls_client_config,
    tls_server_config,
};
use npamp_gateway::bridge::{
    BRIDGE_NOTIFY, BridgeEnvelope, BridgeMessage, ContentType, MessageKind, ProtocolId,
};
use npamp_gateway::handshake::Trust;

const BATCH: u64 = 64;
/// Clients handshaking at once in `handshakes_per_second`.
const HANDSHAKES_IN_FLIGHT: usize = 16;

/// Tokio worker threads: `NPAMP_BENCH_WORKERS`, default 2 (this machine's cores).
fn runtime() -> tokio::runtime::Runtime {
    let workers = std::env::var("NPAMP_BENCH_WORKERS")
        .ok()
        .and_then(|w| w.parse().ok())
        .unwrap_or(2);
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .expect("runtime")
}

fn endpoint() -> Endpoint {
    Endpoint::new([0x33; 32], Trust::InsecureAcceptAny)
}

fn addr(scheme: Scheme) -> PeerAddr {
    PeerAddr {
        scheme,
        addr: "127.0.0.1:0".parse().expect("addr"),
    }
}

/// Runs `f` as a task on the runtime's workers (as the gateway's tasks run),
/// not on the bench thread, and returns its output.
fn on_worker<T: Send + 'static>(
    rt: &tokio::runtime::Runtime,
    f: impl std::future::Future<Output = T> + Send + 'static,
) -> T {
    rt.block_on(rt.spawn(f)).expect("sender task")
}

async fn wait_for(counter: &AtomicU64, target: u64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while counter.load(Ordering::Relaxed) < target {
        assert!(Instant::now() < deadline, "receiver stalled");
        tokio::time::sleep(Duration::from_micros(100)).await;
    }
}

/// The foreign message's length: `NPAMP_BENCH_FOREIGN` octets, default 256.
fn foreign_len() -> usize {
    std::env::var("NPAMP_BENCH_FOREIGN")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256)
}

fn bridge_payload() -> Vec<u8> {
    let foreign = vec![b'x'; foreign_len()];
    let msg = BridgeMessage {
        frame_type: BRIDGE_NOTIFY,
        envelope: BridgeEnvelope {
            protocol_id: ProtocolId(0x10),
            message_kind: MessageKind::NOTIFICATION,
            content_type: ContentType::JSON,
            flags: 0,
            correlation_id: b"",
            method: "eth_subscription",
        },
        safety: None,
        foreign: &foreign,
    };
    let mut out = Vec::new();
    msg.encode_into(&mut out).expect("encode");
    out
}

fn bridge_frames(c: &mut Criterion) {
    let rt = runtime();
    let payload = bridge_payload();
    let frame_len = 36 + payload.len() + 16;

    // The association under test.
    let stats = ServeStats::default();
    let listener = rt
        .block_on(Listener::bind(
            addr(Scheme::Quic),
            endpoint(),
            stats.clone(),
        ))
        .expect("listener");
    let link = rt
        .block_on(Link::connect(listener.local_addr, &endpoint()))
        .expect("link");

    // Raw quinn with the same TLS configuration and the same write sizes.
    let received = Arc::new(AtomicU64::new(0));
    let (raw_endpoint, raw_send) = rt.block_on(async {
        let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(
            tls_server_config(None).expect("tls"),
        )
        .expect("quic server crypto");
        let server = quic_endpoint(
            "127.0.0.1:0".parse().expect("addr"),
            Some(quinn::ServerConfig::with_crypto(Arc::new(crypto))),
            quinn::EndpointConfig::default(),
        )
        .expect("server endpoint");
        let server_addr = server.local_addr().expect("addr");
        let counter = received.clone();
        tokio::spawn(async move {
            let conn = server
                .accept()
                .await
                .expect("incoming")
                .await
                .expect("conn");
            let (_s, mut r) = conn.accept_bi().await.expect("stream");
            let mut buf = vec![0u8; 64 << 10];
            while let Ok(Some(n)) = r.read(&mut buf).await {
                counter.fetch_add(n as u64, Ordering::Relaxed);
            }
        });
        let client = quic_endpoint(
            "127.0.0.1:0".parse().expect("addr"),
            None,
            quinn::EndpointConfig::default(),
        )
        .expect("client");
        let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(
            tls_client_config(ALPN).expect("tls"),
        )
        .expect("quic client crypto");
        let conn = client
            .connect_with(
                quinn::ClientConfig::new(Arc::new(crypto)),
                server_addr,
                "localhost",
            )
            .expect("connect")
            .await
            .expect("conn");
        let (send, _r) = conn.open_bi().await.expect("stream");
        ((client, conn), send)
    });
    let mut raw_io = Some((raw_send, vec![0xA5u8; frame_len * BATCH as usize]));

    let mut group = c.benchmark_group(format!(
        "bridge_frames_{}B_quic_64_per_write",
        foreign_len()
    ));
    group.throughput(Throughput::Elements(BATCH));
    group.bench_function("raw_quinn_same_bytes", |b| {
        b.iter_custom(|iters| {
            let target = received.load(Ordering::Relaxed) + iters * (frame_len as u64 * BATCH);
            let (mut send, batch) = raw_io.take().expect("raw stream");
            let start = Instant::now();
            let (send, batch) = on_worker(&rt, async move {
                for _ in 0..iters {
                    send.write_all(&batch).await.expect("write");
                }
                (send, batch)
            });
            rt.block_on(wait_for(&received, target));
            let elapsed = start.elapsed();
            raw_io = Some((send, batch));
            elapsed
        })
    });
    let mut assoc_io = Some((link, payload));
    group.bench_function("npamp_association", |b| {
        b.iter_custom(|iters| {
            let target = stats.bridge_frames.load(Ordering::Relaxed) + iters * BATCH;
            let (mut link, payload) = assoc_io.take().expect("link");
            let start = Instant::now();
            let io = on_worker(&rt, async move {
                for _ in 0..iters {
                    let frames = (0..BATCH).map(|_| (BRIDGE_NOTIFY, &payload[..]));
                    link.send_bridge_batch(frames).await.expect("send");
                }
                (link, payload)
            });
            rt.block_on(wait_for(&stats.bridge_frames, target));
            let elapsed = start.elapsed();
            assoc_io = Some(io);
            elapsed
        })
    });
    group.finish();
    drop(raw_endpoint);
}

fn handshakes_and_ping(c: &mut Criterion) {
    let rt = runtime();
    let mut group = c.benchmark_group("association");
    group.sample_size(20);
    for scheme in [Scheme::Quic, Scheme::Tls] {
        let name = if scheme == Scheme::Quic {
            "quic"
        } else {
            "tls"
        };
        let listener = rt
            .block_on(Listener::bind(
                addr(scheme),
                endpoint(),
                ServeStats::default(),
            ))
            .expect("listener");
        let at = listener.local_addr;
        group.bench_function(format!("handshake_{name}"), |b| {
            b.iter(|| {
                rt.block_on(async {
                    let link = Link::connect(at, &endpoint()).await.expect("connect");
                    link.close().await.expect("close");
                })
            })
        });
        let mut link = rt
            .block_on(Link::connect(at, &endpoint()))
            .expect("connect");
        group.bench_function(format!("ping_rtt_{name}"), |b| {
            b.iter(|| rt.block_on(link.ping()).expect("ping"))
        });
    }
    group.finish();
}

/// Throughput rather than latency: HANDSHAKES_IN_FLIGHT clients connecting
/// at once (as after a restart), on the server's runtime, so client and
/// server CPU share the cores.
fn handshakes_per_second(c: &mut Criterion) {
    let rt = runtime();
    let mut group = c.benchmark_group("handshakes_per_second");
    group.sample_size(10);
    group.throughput(Throughput::Elements(HANDSHAKES_IN_FLIGHT as u64));
    for scheme in [Scheme::Quic, Scheme::Tls] {
        let mut ep = endpoint();
        ep.max_handshakes = HANDSHAKES_IN_FLIGHT;
        let listener = rt
            .block_on(Listener::bind(addr(scheme), ep, ServeStats::default()))
            .expect("listener");
        let at = listener.local_addr;
        group.bench_function(
            format!("{}_{HANDSHAKES_IN_FLIGHT}_in_flight", scheme.name()),
            |b| {
                b.iter(|| {
                    rt.block_on(async {
                        let clients: Vec<_> = (0..HANDSHAKES_IN_FLIGHT)
                            .map(|_| {
                                tokio::spawn(async move {
                                    let link =
                                        Link::connect(at, &endpoint()).await.expect("connect");
                                    link.close().await.expect("close");
                                })
                            })
                            .collect();
                        for client in clients {
                            client.await.expect("client task");
                        }
                    })
                })
            },
        );
    }
    group.finish();
}

criterion_group!(
    benches,
    bridge_frames,
    handshakes_and_ping,
    handshakes_per_second
);
criterion_main!(benches);
