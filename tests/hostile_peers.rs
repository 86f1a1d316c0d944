//! A hostile peer against a listener, over TCP + TLS 1.3 where every octet
//! after the handshake is ours to choose: tampered, replayed and reordered
//! frames, bad CRCs, reserved octets set, oversized lengths, frames on an
//! unknown channel, a forged CLOSE, an extra critical TLV in the handshake,
//! and a flood of handshakes. Each is dropped or closes its own association
//! as the spec requires, is counted, and an honest association established
//! before the attacks keeps working throughout.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use npamp_gateway::assoc::stats::AssocStats;
use npamp_gateway::assoc::{AssocConfig, Association, Role};
use npamp_gateway::assoc::{
    BoxWrite, Endpoint, FrameReader, Link, Listener, PeerAddr, Scheme, ServeStats,
    client_handshake, tls_client_config,
};
use npamp_gateway::handshake::{Client, ClientRandom, Config, Identity, Trust};
use npamp_gateway::wire::{ChannelId, Flags, FrameType, HEADER_LEN, Header, Tlv, TlvType};
use tokio::io::AsyncWriteExt;

struct Server {
    listener: Listener,
    stats: Arc<AssocStats>,
    serve: ServeStats,
}

async fn server(max_handshakes: usize) -> Server {
    server_with(max_handshakes, AssocConfig::default()).await
}

async fn server_with(max_handshakes: usize, assoc: AssocConfig) -> Server {
    let mut ep = Endpoint::new([0x51; 32], Trust::InsecureAcceptAny);
    ep.handshake_timeout = Duration::from_millis(800);
    ep.first_octets_timeout = Duration::from_millis(300);
    ep.max_handshakes = max_handshakes;
    ep.assoc = assoc;
    let stats = ep.stats.clone();
    let serve = ServeStats::default();
    let addr = PeerAddr {
        scheme: Scheme::Tls,
        addr: "127.0.0.1:0".parse().expect("addr"),
    };
    let listener = Listener::bind(addr, ep, serve.clone()).await.expect("bind");
    Server {
        listener,
        stats,
        serve,
    }
}

/// TLS 1.3 with ALPN n-pamp/2, then nothing: the raw streams.
async fn tls(s: &Server) -> (FrameReader, BoxWrite) {
    let connector = tokio_rustls::TlsConnector::from(Arc::new(
        tls_client_config(b"n-pamp/2").expect("tls config"),
    ));
    let tcp = tokio::net::TcpStream::connect(s.listener.local_addr.addr)
        .await
        .expect("tcp");
    let name = rustls::pki_types::ServerName::try_from("localhost").expect("name");
    let stream = connector.connect(name, tcp).await.expect("tls");
    let (r, w) = tokio::io::split(stream);
    (FrameReader::new(Box::new(r)), Box::new(w))
}

/// An established association whose frames we write by hand.
struct Raw {
    assoc: Association,
    reader: FrameReader,
    writer: BoxWrite,
}

impl Raw {
    async fn connect(s: &Server) -> Raw {
        let (mut reader, mut writer) = tls(s).await;
        let ep = Endpoint::new([0xC1; 32], Trust::InsecureAcceptAny);
        let established = client_handshake(&ep, &mut reader, &mut writer)
            .await
            .expect("handshake");
        let assoc = Association::new(
            Role::Client,
            established,
            AssocConfig::default(),
            std::time::Instant::now(),
        )
        .expect("association");
        Raw {
            assoc,
            reader,
            writer,
        }
    }

    /// A sealed PING on the Control channel.
    fn ping(&mut self) -> Vec<u8> {
        self.assoc
            .seal(ChannelId::CONTROL, FrameType::PING, |o| {
                o.extend_from_slice(&7u64.to_be_bytes())
            })
            .expect("seal");
        let mut out = Vec::new();
        assert_eq!(self.assoc.poll_transmit(&mut out), Some(ChannelId::CONTROL));
        out
    }

    async fn send(&mut self, octets: &[u8]) {
        // The server may already have closed: a failed write is fine.
        let _ = self.writer.write_all(octets).await;
        let _ = self.writer.flush().await;
    }

    /// The type of the next frame the server sends; `None` once it closed
    /// the connection (or failed it).
    async fn next_type(&mut self) -> Option<FrameType> {
        match tokio::time::timeout(Duration::from_secs(5), self.reader.next()).await {
            Ok(Ok(Some((header, _)))) => Some(header.frame_type),
            Ok(_) => None,
            Err(_) => panic!("the server neither answered nor closed within 5 s"),
        }
    }

    /// Sends `octets` and expects the server to close the association.
    async fn expect_closed_after(&mut self, octets: &[u8], what: &str) {
        self.send(octets).await;
        loop {
            match self.next_type().await {
                None => return,
                // A PONG or CLOSE_ACK already in flight may come first.
                Some(t) => assert_ne!(t, FrameType::PONG, "{what}: still answering PINGs"),
            }
        }
    }

    /// Sends `octets`, then `ping` (a valid PING): the PONG proves the
    /// association survived.
    async fn expect_alive_after(&mut self, octets: &[u8], ping: Vec<u8>, what: &str) {
        self.send(octets).await;
        self.send(&ping).await;
        assert_eq!(self.next_type().await, Some(FrameType::PONG), "{what}");
    }
}

async fn eventually(what: &str, counter: &AtomicU64, want: u64) {
    eventually_within(what, counter, want, Duration::from_secs(3)).await;
}

async fn eventually_within(what: &str, counter: &AtomicU64, want: u64, limit: Duration) {
    for _ in 0..limit.as_millis() / 10 {
        if counter.load(Relaxed) >= want {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!(
        "{what}: counter at {}, expected {want}",
        counter.load(Relaxed)
    );
}

/// An honest client's association keeps working: PING round trips.
async fn honest_still_served(link: &mut Link, what: &str) {
    tokio::time::timeout(Duration::from_secs(5), link.ping())
        .await
        .unwrap_or_else(|_| panic!("{what}: honest association stalled"))
        .unwrap_or_else(|e| panic!("{what}: honest association failed: {e}"));
}

async fn honest(s: &Server) -> Link {
    Link::connect(
        s.listener.local_addr,
        &Endpoint::new([0xC2; 32], Trust::InsecureAcceptAny),
    )
    .await
    .expect("honest association")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_frames_close_only_their_own_association() {
    let s = server(64).await;
    let mut good = honest(&s).await;

    // Tampered: one ciphertext octet flipped.
    let mut raw = Raw::connect(&s).await;
    let mut f = raw.ping();
    f[HEADER_LEN] ^= 0x01;
    raw.expect_closed_after(&f, "tampered").await;
    eventually("tampered", &s.stats.closed_tampered, 1).await;
    honest_still_served(&mut good, "after a tampered frame").await;

    // Replayed: the same valid frame twice.
    let mut raw = Raw::connect(&s).await;
    let f = raw.ping();
    raw.send(&f).await;
    assert_eq!(raw.next_type().await, Some(FrameType::PONG));
    raw.expect_closed_after(&f, "replayed").await;
    eventually("replayed", &s.stats.closed_out_of_sequence, 1).await;

    // Reordered: the second frame first.
    let mut raw = Raw::connect(&s).await;
    let (first, second) = (raw.ping(), raw.ping());
    raw.expect_closed_after(&second, "reordered").await;
    drop(first);
    eventually("reordered", &s.stats.closed_out_of_sequence, 2).await;
    honest_still_served(&mut good, "after replayed and reordered frames").await;

    // Bad CRC, a reserved octet set, an oversized length: not frames.
    let mut raw = Raw::connect(&s).await;
    let mut f = raw.ping();
    f[21] ^= 0xFF;
    raw.expect_closed_after(&f, "bad CRC").await;
    let mut raw = Raw::connect(&s).await;
    let mut f = raw.ping();
    f[30] = 0x01;
    raw.expect_closed_after(&f, "reserved octet").await;
    let mut raw = Raw::connect(&s).await;
    let h = Header::new(
        Flags::NONE,
        FrameType::PING,
        ChannelId::CONTROL,
        0,
        u32::MAX - 64,
    );
    raw.expect_closed_after(&h.encode().expect("header"), "oversized length")
        .await;
    eventually("malformed", &s.stats.closed_malformed, 3).await;
    honest_still_served(&mut good, "after malformed frames").await;

    // Nothing else was counted against the wrong class.
    assert_eq!(s.stats.closed_tampered.load(Relaxed), 1);
    assert_eq!(s.stats.closed_out_of_sequence.load(Relaxed), 2);
    assert_eq!(s.stats.closed_malformed.load(Relaxed), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_channels_and_forged_close_are_dropped_not_fatal() {
    let s = server(64).await;
    let mut raw = Raw::connect(&s).await;

    // A frame on a channel nobody advertised: dropped, counted, and the
    // association answers the next PING.
    let mut f = Header::new(Flags::NONE, FrameType(0x0100), ChannelId(0x0077), 0, 32)
        .encode()
        .expect("header")
        .to_vec();
    f.extend_from_slice(&[0xAB; 32]);
    let ping = raw.ping();
    raw.expect_alive_after(&f, ping, "unknown channel").await;
    assert_eq!(s.stats.dropped_unknown_channel.load(Relaxed), 1);

    // A CLOSE that does not authenticate, with the sequence number the
    // server expects next: dropped (an attacker on the path cannot end the
    // association), and that same number still works for a real frame.
    let ping = raw.ping();
    let seq = Header::decode(ping[..HEADER_LEN].try_into().expect("36 octets"))
        .expect("header")
        .seq;
    let mut forged = Header::new(Flags::NONE, FrameType::CLOSE, ChannelId::CONTROL, seq, 18)
        .encode()
        .expect("header")
        .to_vec();
    forged.extend_from_slice(&[0u8; 18]);
    raw.expect_alive_after(&forged, ping, "forged CLOSE").await;
    assert_eq!(s.stats.dropped_forged_close.load(Relaxed), 1);
    assert_eq!(s.stats.closed_tampered.load(Relaxed), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_critical_tlv_the_server_does_not_know_fails_the_handshake() {
    let s = server(64).await;
    let (mut reader, mut writer) = tls(&s).await;
    let random = ClientRandom {
        mlkem_seed: [3; 64],
        x25519: [4; 32],
    };
    let (_client, hello) = Client::start(
        Config::default(),
        Identity::from_seed(&[0xC3; 32]).expect("seed"),
        Trust::InsecureAcceptAny,
        &random,
    )
    .expect("hello");
    // The real CLIENT_HELLO plus a TLV with the high (critical) bit set.
    let header =
        Header::decode(hello[..HEADER_LEN].try_into().expect("36 octets")).expect("header");
    let mut payload = hello[HEADER_LEN..].to_vec();
    Tlv {
        tlv_type: TlvType(0x8F00),
        value: b"must-understand",
    }
    .encode_into(&mut payload)
    .expect("tlv");
    let mut frame = Header {
        payload_len: payload.len() as u32,
        ..header
    }
    .encode()
    .expect("header")
    .to_vec();
    frame.extend_from_slice(&payload);
    writer.write_all(&frame).await.expect("write");
    writer.flush().await.expect("flush");
    let answer = tokio::time::timeout(Duration::from_secs(5), reader.next()).await;
    assert!(
        matches!(answer, Ok(Ok(None) | Err(_))),
        "the server must close, not answer"
    );
    eventually("handshake failure", &s.serve.handshake_failures, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_sockets_never_hold_a_handshake_slot() {
    let s = server(4).await;
    let mut good = honest(&s).await;
    // 40 connections that never send a thing: ten times the handshake
    // slots, more than the waiting room holds (four per slot) and far more
    // than one source's share of it.
    let mut flood = Vec::new();
    for _ in 0..40 {
        flood.push(
            tokio::net::TcpStream::connect(s.listener.local_addr.addr)
                .await
                .expect("tcp"),
        );
    }
    // The kernel holds them first (TCP_DEFER_ACCEPT, about 3 s with its
    // SYN-ACK retransmissions), then hands them over without data. One
    // source may hold a quarter of the room (4 of 16): its oldest are
    // pushed out by its newer ones...
    eventually_within(
        "silent sockets pushed out",
        &s.stats.connections_evicted,
        36,
        Duration::from_secs(15),
    )
    .await;
    // ...and a real peer gets in during the flood, as does traffic on an
    // established association.
    let mut during = honest(&s).await;
    honest_still_served(&mut during, "a new association during the flood").await;
    honest_still_served(&mut good, "an established one during the flood").await;
    // The rest are dropped at the first-octets deadline.
    eventually("silent sockets dropped", &s.stats.connections_silent, 3).await;
    assert_eq!(s.stats.handshakes_refused.load(Relaxed), 0);
    drop(flood);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_handshakes_are_refused_beyond_the_slots_and_established_associations_carry_on() {
    let s = server(4).await;
    let mut good = honest(&s).await;
    // 40 connections that begin a TLS record and stall: each takes a slot.
    let mut flood = Vec::new();
    for _ in 0..40 {
        let mut tcp = tokio::net::TcpStream::connect(s.listener.local_addr.addr)
            .await
            .expect("tcp");
        tcp.write_all(&[0x16]).await.expect("write");
        flood.push(tcp);
    }
    eventually("refused handshakes", &s.stats.handshakes_refused, 36).await;
    honest_still_served(&mut good, "during the flood").await;
    // Once the stalled ones time out, new associations are accepted again.
    eventually(
        "stalled handshakes timed out",
        &s.serve.handshake_failures,
        4,
    )
    .await;
    drop(flood);
    let mut again = honest(&s).await;
    honest_still_served(&mut again, "after the flood").await;
    assert_eq!(s.stats.handshakes_refused.load(Relaxed), 36);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_goes_silent_is_pinged_then_dropped() {
    let s = server_with(
        8,
        AssocConfig {
            keepalive_after: Duration::from_millis(200),
            peer_timeout: Duration::from_millis(600),
            ..AssocConfig::default()
        },
    )
    .await;
    // The server's silence counts from the last frame it read of ours,
    // which the handshake sends: after this, whenever connect returns.
    let started = std::time::Instant::now();
    let mut raw = Raw::connect(&s).await;
    // The server asks after 200 ms of silence; we never answer.
    assert_eq!(raw.next_type().await, Some(FrameType::PING));
    loop {
        match raw.next_type().await {
            None => break,
            Some(t) => assert_eq!(t, FrameType::PING, "only keepalives while silent"),
        }
    }
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(600),
        "closed after {waited:?}"
    );
    eventually("closed for silence", &s.stats.closed_io, 1).await;
}
