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
//! sequence and counts each frame. With `NPAMP_BENCH_KEEP=1` its sink also
//! keeps each payload as a gateway's exchange keeps a message
//! (`Payload::keep`: sliced out of a large frame's own allocation, copied
//! out of the shared read buffer) and drops it. With `NPAMP_BENCH_CPU=1`
//! each sample is the process's CPU time (every thread: sender, receiver,
//! quinn's drivers) instead of the wall-clock time, so "throughput" is
//! frames per CPU-second: what a frame costs, less disturbed by other work
//! on a shared machine than the wall-clock rate. In both, the sending loop runs as a task
//! on the runtime's workers, as a gateway's tasks do, not on the bench's own
//! thread (which would be a third busy thread on a 2-core machine).
//!
//! `receive_path`: the receiving side alone, on one thread, without a
//! transport (frames read from memory, opened, decoded, the message kept
//! as an exchange keeps it), 256 B to 64 KiB messages.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use npamp_gateway::assoc::FrameReader;
use npamp_gateway::assoc::frames::Taken;
use npamp_gateway::assoc::{
    ALPN, AssocHandle, BridgeSink, End, Endpoint, Link, Listener, Payload, PeerAddr, Scheme,
    ServeStats, quic_endpoint, tls_client_config, tls_server_config,
};
use npamp_gateway::bridge::{
    BRIDGE_NOTIFY, BridgeEnvelope, BridgeMessage, ContentType, MessageKind, ProtocolId,
};
use npamp_gateway::handshake::Trust;
use npamp_gateway::record::{Suite, TrafficKeys};
use npamp_gateway::wire::{ChannelId, Flags};

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

/// The clock a sample is read on: the wall clock, or the process's CPU
/// time with `NPAMP_BENCH_CPU=1`.
#[derive(Clone, Copy)]
enum Clock {
    Wall(Instant),
    Cpu(Duration),
}

fn process_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write to.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

impl Clock {
    fn start() -> Self {
        if std::env::var_os("NPAMP_BENCH_CPU").is_some() {
            Clock::Cpu(process_cpu_time())
        } else {
            Clock::Wall(Instant::now())
        }
    }

    fn elapsed(self) -> Duration {
        match self {
            Clock::Wall(at) => at.elapsed(),
            Clock::Cpu(at) => process_cpu_time() - at,
        }
    }
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

/// Counts Bridge frames, and keeps each payload as an exchange keeps a
/// message (then drops it).
struct Keeping(Arc<AtomicU64>);

impl BridgeSink for Keeping {
    async fn frame(&mut self, _: npamp_gateway::wire::FrameType, payload: Payload<'_>) {
        let all = 0..payload.octets().len();
        std::hint::black_box(payload.keep(all));
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    fn ended(&mut self, _: &End) {}
}

/// The association's server: counting (`Listener::bind`), or keeping with
/// `NPAMP_BENCH_KEEP=1`.
async fn bench_listener(stats: ServeStats) -> Listener {
    if std::env::var_os("NPAMP_BENCH_KEEP").is_none() {
        return Listener::bind(addr(Scheme::Quic), endpoint(), stats)
            .await
            .expect("listener");
    }
    let frames = stats.bridge_frames.clone();
    let keeping = move |_: AssocHandle| Keeping(frames.clone());
    Listener::bind_with(addr(Scheme::Quic), endpoint(), stats, None, keeping)
        .await
        .expect("listener")
}

fn bridge_payload() -> Vec<u8> {
    notification(foreign_len())
}

/// A Bridge notification's payload carrying `len` octets of message.
fn notification(len: usize) -> Vec<u8> {
    let foreign = vec![b'x'; len];
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
        extension: None,
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
    let listener = rt.block_on(bench_listener(stats.clone()));
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

    let kept = if std::env::var_os("NPAMP_BENCH_KEEP").is_some() {
        "_kept"
    } else {
        ""
    };
    let mut group = c.benchmark_group(format!(
        "bridge_frames_{}B{kept}_quic_64_per_write",
        foreign_len()
    ));
    group.throughput(Throughput::Elements(BATCH));
    group.bench_function("raw_quinn_same_bytes", |b| {
        b.iter_custom(|iters| {
            let target = received.load(Ordering::Relaxed) + iters * (frame_len as u64 * BATCH);
            let (mut send, batch) = raw_io.take().expect("raw stream");
            let start = Clock::start();
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
            let start = Clock::start();
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

/// An endless stream of the same sealed frames, read from memory (as
/// quinn's reads copy out of its buffers): every read takes as much as it
/// asks for, up to the end of the frames, then starts over.
struct Replay {
    data: Arc<[u8]>,
    at: usize,
}

impl tokio::io::AsyncRead for Replay {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let at = self.at;
        let n = buf.remaining().min(self.data.len() - at);
        buf.put_slice(&self.data[at..at + n]);
        self.at = (at + n) % self.data.len();
        std::task::Poll::Ready(Ok(()))
    }
}

/// The receive path alone, on one thread, without a transport: whole
/// frames out of a reader's buffer, opened in place, the Bridge envelope
/// decoded, and the foreign message kept as an exchange keeps it (then
/// dropped). 64 frames a sample, read from memory.
fn receive_path(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let mut group = c.benchmark_group("receive_path");
    group.throughput(Throughput::Elements(BATCH));
    for size in [256usize, 8192, 16384, 32768, 65536] {
        let payload = notification(size);
        let keys = TrafficKeys::new(Suite::AES_256_GCM, &[7; 32], &[9; 12]).expect("keys");
        let mut data = Vec::new();
        for seq in 0..BATCH {
            keys.seal_frame_into(
                &mut data,
                Flags::NONE,
                BRIDGE_NOTIFY,
                ChannelId::BRIDGE,
                seq,
                |o| o.extend_from_slice(&payload),
            )
            .expect("seal");
        }
        let replay = Replay {
            data: data.into(),
            at: 0,
        };
        let mut reader = FrameReader::authenticated(Box::new(replay), 1 << 20);
        group.bench_function(format!("{size}B_kept"), |b| {
            b.iter(|| {
                rt.block_on(async {
                    for _ in 0..BATCH {
                        assert!(reader.fill().await.expect("fill"));
                        let span = reader.peek().expect("peek").expect("frame");
                        let taken = reader.take(&span);
                        let frame = reader.sealed(&taken);
                        let base = frame.octets().as_ptr() as usize;
                        let pt = keys.open_sealed(&span.header, frame).expect("open");
                        let range =
                            pt.as_ptr() as usize - base..pt.as_ptr() as usize - base + pt.len();
                        let payload = match &taken {
                            Taken::Shared(at) => Payload::shared(
                                reader.octets(at.start + range.start..at.start + range.end),
                            ),
                            Taken::Own => Payload::own(reader.take_own(), range),
                        };
                        // The message, as the exchange keeps it.
                        let m = BridgeMessage::decode(span.header.frame_type, &payload)
                            .expect("decode");
                        let start = m.foreign.as_ptr() as usize - payload.as_ptr() as usize;
                        let part = start..start + m.foreign.len();
                        std::hint::black_box(payload.keep(part));
                    }
                })
            })
        });
    }
    group.finish();
}

criterion_group!(
    benches,
    bridge_frames,
    receive_path,
    handshakes_and_ping,
    handshakes_per_second
);
criterion_main!(benches);
