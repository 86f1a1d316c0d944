//! Real sockets on 127.0.0.1: handshake, PING/PONG, Bridge frames and CLOSE
//! over QUIC and over TLS, and the failures a server must survive.

use std::sync::atomic::Ordering;
use std::time::Duration;

use npamp_gateway::assoc::{
    Endpoint, Link, LinkError, Listener, PeerAddr, Scheme, ServeStats, SharedClientEndpoint,
};
use npamp_gateway::handshake::{HandshakeError, Identity, Trust};
use npamp_gateway::wire::{ChannelId, Flags, FrameType, Header};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const SERVER_SEED: [u8; 32] = [0x51; 32];
const CLIENT_SEED: [u8; 32] = [0xC1; 32];

fn public(seed: &[u8; 32]) -> [u8; 32] {
    Identity::from_seed(seed)
        .expect("seed")
        .public_key()
        .try_into()
        .expect("32 octets")
}

async fn server(scheme: Scheme, trust: Trust) -> (Listener, ServeStats) {
    let stats = ServeStats::default();
    let mut ep = Endpoint::new(SERVER_SEED, trust);
    ep.handshake_timeout = Duration::from_millis(500);
    let addr = PeerAddr {
        scheme,
        addr: "127.0.0.1:0".parse().expect("addr"),
    };
    let l = Listener::bind(addr, ep, stats.clone()).await.expect("bind");
    (l, stats)
}

fn client(trust: Trust) -> Endpoint {
    Endpoint::new(CLIENT_SEED, trust)
}

async fn eventually(what: &str, f: impl Fn() -> bool) {
    for _ in 0..200 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for {what}");
}

async fn round_trip(scheme: Scheme) {
    let (listener, stats) = server(scheme, Trust::Pinned(vec![public(&CLIENT_SEED)])).await;
    let transport = round_trip_to(listener.local_addr, &stats).await;
    assert_eq!(transport, scheme);
}

/// Handshake, PINGs, 100 Bridge frames and CLOSE with the server at `to`
/// (whose counters are `stats`); returns the transport the link ran on.
async fn round_trip_to(to: PeerAddr, stats: &ServeStats) -> Scheme {
    let (associations, frames_before) = (
        stats.associations.load(Ordering::Relaxed),
        stats.bridge_frames.load(Ordering::Relaxed),
    );
    let mut link = Link::connect(to, &client(Trust::Pinned(vec![public(&SERVER_SEED)])))
        .await
        .unwrap_or_else(|e| panic!("connect to {to}: {e}"));
    assert_eq!(link.peer_identity(), public(&SERVER_SEED));
    for _ in 0..5 {
        let rtt = link.ping().await.expect("ping");
        assert!(rtt < Duration::from_secs(1));
    }
    let payload = [0x5A; 256];
    let frames = (0..100).map(|_| (npamp_gateway::bridge::BRIDGE_NOTIFY, &payload[..]));
    assert_eq!(
        link.send_bridge_batch(frames).await.expect("bridge batch"),
        100
    );
    eventually("bridge frames", || {
        stats.bridge_frames.load(Ordering::Relaxed) == frames_before + 100
    })
    .await;
    assert_eq!(stats.associations.load(Ordering::Relaxed), associations + 1);
    let transport = link.transport();
    link.close().await.expect("close");
    transport
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quic_handshake_ping_bridge_close() {
    round_trip(Scheme::Quic).await;
}

/// `npamp://` (draft §9.2, transport negotiated): one port number serves
/// QUIC and TCP + TLS, and an `npamp://` client prefers QUIC.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn npamp_listener_serves_both_transports_on_one_port() {
    let (listener, stats) = server(Scheme::Npamp, Trust::Pinned(vec![public(&CLIENT_SEED)])).await;
    assert_eq!(listener.local_addr.scheme, Scheme::Npamp);
    assert_ne!(listener.local_addr.addr.port(), 0);
    for (scheme, expected) in [
        (Scheme::Quic, Scheme::Quic),
        (Scheme::Tls, Scheme::Tls),
        (Scheme::Npamp, Scheme::Quic),
    ] {
        let to = PeerAddr {
            scheme,
            addr: listener.local_addr.addr,
        };
        assert_eq!(round_trip_to(to, &stats).await, expected, "{to}");
    }
}

/// Associations connected through one `SharedClientEndpoint` share its UDP
/// socket and work independently: one closing leaves the other up. Plain
/// connects get a socket each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn associations_sharing_a_client_endpoint_share_one_socket() {
    let (listener, _stats) = server(Scheme::Quic, Trust::Pinned(vec![public(&CLIENT_SEED)])).await;
    let ep = client(Trust::Pinned(vec![public(&SERVER_SEED)]));
    let shared = SharedClientEndpoint::default();
    let first = Link::connect_sharing(listener.local_addr, &ep, &shared)
        .await
        .expect("first");
    let mut second = Link::connect_sharing(listener.local_addr, &ep, &shared)
        .await
        .expect("second");
    let socket = first.quic_local_addr().expect("a QUIC socket");
    assert_eq!(second.quic_local_addr(), Some(socket));
    first.close().await.expect("close the first");
    second.ping().await.expect("the second still answers");
    let third = Link::connect_sharing(listener.local_addr, &ep, &shared)
        .await
        .expect("third");
    assert_eq!(third.quic_local_addr(), Some(socket));

    let own = Link::connect(listener.local_addr, &ep).await.expect("own");
    let own_too = Link::connect(listener.local_addr, &ep)
        .await
        .expect("own too");
    assert_ne!(own.quic_local_addr(), Some(socket));
    assert_ne!(own.quic_local_addr(), own_too.quic_local_addr());
    for link in [second, third, own, own_too] {
        link.close().await.expect("close");
    }
}

/// An `npamp://` client reaches a peer that speaks only one transport: QUIC
/// at once, TCP + TLS after the fallback delay (nothing answers on UDP).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn npamp_client_reaches_a_peer_with_either_transport_alone() {
    for only in [Scheme::Quic, Scheme::Tls] {
        let (listener, stats) = server(only, Trust::Pinned(vec![public(&CLIENT_SEED)])).await;
        let to = PeerAddr {
            scheme: Scheme::Npamp,
            addr: listener.local_addr.addr,
        };
        let started = std::time::Instant::now();
        assert_eq!(round_trip_to(to, &stats).await, only, "{to}");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{only:?} only: {:?}",
            started.elapsed()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_handshake_ping_bridge_close() {
    round_trip(Scheme::Tls).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_pinned_server_key_fails_clearly() {
    for scheme in [Scheme::Quic, Scheme::Tls] {
        let (listener, _) = server(scheme, Trust::InsecureAcceptAny).await;
        let err = Link::connect(listener.local_addr, &client(Trust::Pinned(vec![[7; 32]])))
            .await
            .err()
            .expect("must fail");
        assert!(
            matches!(err, LinkError::Handshake(HandshakeError::UntrustedPeer(_))),
            "{scheme:?}: {err}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_refuses_an_unpinned_client_and_keeps_serving() {
    for scheme in [Scheme::Quic, Scheme::Tls] {
        let (listener, stats) = server(scheme, Trust::Pinned(vec![public(&CLIENT_SEED)])).await;
        let stranger = Endpoint::new([0x99; 32], Trust::InsecureAcceptAny);
        let failed = async {
            let mut link = Link::connect(listener.local_addr, &stranger).await?;
            link.ping().await
        }
        .await;
        assert!(
            failed.is_err(),
            "{scheme:?}: an unpinned client got through"
        );
        eventually("handshake failure counted", || {
            stats.handshake_failures.load(Ordering::Relaxed) >= 1
        })
        .await;
        // And the server still serves the pinned client.
        let mut link = Link::connect(listener.local_addr, &client(Trust::InsecureAcceptAny))
            .await
            .expect("pinned client");
        link.ping().await.expect("ping");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_alpn_is_refused() {
    for scheme in [Scheme::Quic, Scheme::Tls] {
        let (listener, _) = server(scheme, Trust::InsecureAcceptAny).await;
        let r = Link::connect_with_alpn(
            listener.local_addr,
            &client(Trust::InsecureAcceptAny),
            b"h2",
        )
        .await;
        assert!(r.is_err(), "{scheme:?}: ALPN h2 accepted");
    }
}

/// A TLS client that offers no ALPN at all gets through TLS (rustls lets
/// it), but the listener refuses it before the N-PAMP handshake.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_client_offering_no_alpn_is_refused() {
    let (listener, stats) = server(Scheme::Tls, Trust::InsecureAcceptAny).await;
    let mut config = npamp_gateway::assoc::tls_client_config(b"n-pamp/2").expect("tls config");
    config.alpn_protocols.clear();
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(listener.local_addr.addr)
        .await
        .expect("tcp");
    let name = rustls::pki_types::ServerName::try_from("localhost").expect("name");
    let stream = connector
        .connect(name, tcp)
        .await
        .expect("TLS itself completes");
    assert_eq!(stream.get_ref().1.alpn_protocol(), None);
    let (r, w) = tokio::io::split(stream);
    let (mut reader, mut writer): (_, npamp_gateway::assoc::BoxWrite) = (
        npamp_gateway::assoc::FrameReader::new(Box::new(r)),
        Box::new(w),
    );
    let handshake = tokio::time::timeout(
        Duration::from_secs(5),
        npamp_gateway::assoc::client_handshake(
            &client(Trust::InsecureAcceptAny),
            &mut reader,
            &mut writer,
        ),
    )
    .await
    .expect("the server answers or closes");
    assert!(
        handshake.is_err(),
        "an N-PAMP handshake without ALPN n-pamp/2"
    );
    eventually("ALPN refusal counted", || {
        stats.handshake_failures.load(Ordering::Relaxed) >= 1
    })
    .await;
}

/// A QUIC client offering no ALPN is refused too (by QUIC's own TLS or by
/// the listener's check): no stream of it is ever served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quic_client_offering_no_alpn_is_refused() {
    let (listener, _) = server(Scheme::Quic, Trust::InsecureAcceptAny).await;
    let mut tls = npamp_gateway::assoc::tls_client_config(b"n-pamp/2").expect("tls config");
    tls.alpn_protocols.clear();
    let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(tls).expect("quic tls");
    let endpoint = quinn::Endpoint::client("127.0.0.1:0".parse().expect("addr")).expect("endpoint");
    let config = quinn::ClientConfig::new(std::sync::Arc::new(crypto));
    let served = tokio::time::timeout(Duration::from_secs(5), async {
        let conn = endpoint
            .connect_with(config, listener.local_addr.addr, "localhost")
            .ok()?
            .await
            .ok()?;
        let (mut w, mut r) = conn.open_bi().await.ok()?;
        w.write_all(&[0; 64]).await.ok()?;
        let mut byte = [0u8; 1];
        r.read_exact(&mut byte).await.ok()
    })
    .await
    .expect("refused within 5 s");
    assert!(
        served.is_none(),
        "a QUIC connection without ALPN was served"
    );
}

/// A rogue server that selects no ALPN: `ping` and `--peer` (both
/// [`Link::connect`]) refuse it on either transport, saying why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_selects_no_alpn_is_refused() {
    let mut config = npamp_gateway::assoc::tls_server_config(None).expect("config");
    config.alpn_protocols.clear();
    // TLS: accept, complete TLS, then wait.
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config.clone()));
    let tcp = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let tls_addr = tcp.local_addr().expect("addr");
    let tls_server = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = tcp.accept().await {
            if let Ok(s) = acceptor.accept(s).await {
                held.push(s);
            }
        }
    });
    let r = Link::connect(
        PeerAddr {
            scheme: Scheme::Tls,
            addr: tls_addr,
        },
        &client(Trust::InsecureAcceptAny),
    )
    .await;
    match r {
        Err(e @ LinkError::Alpn(None)) => {
            assert!(e.to_string().contains("negotiated no ALPN"), "{e}");
        }
        Err(e) => panic!("TLS: refused for another reason: {e}"),
        Ok(_) => panic!("TLS: a server without ALPN n-pamp/2 was accepted"),
    }
    tls_server.abort();
    // QUIC: a server endpoint whose TLS selects no ALPN.
    let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(config).expect("quic tls");
    let server = npamp_gateway::assoc::quic_endpoint(
        "127.0.0.1:0".parse().expect("addr"),
        Some(quinn::ServerConfig::with_crypto(std::sync::Arc::new(
            crypto,
        ))),
        quinn::EndpointConfig::default(),
    )
    .expect("quic server");
    let quic_addr = server.local_addr().expect("addr");
    let quic_server = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Some(incoming) = server.accept().await {
            if let Ok(conn) = incoming.await {
                held.push(conn);
            }
        }
    });
    let r = Link::connect(
        PeerAddr {
            scheme: Scheme::Quic,
            addr: quic_addr,
        },
        &client(Trust::InsecureAcceptAny),
    )
    .await;
    match r {
        Err(LinkError::Alpn(None)) => {}
        // QUIC's TLS itself ends such a handshake (RFC 9001 §8.1: alert
        // 120, no_application_protocol) before the check is reached.
        Err(LinkError::QuicConnection(e)) => {
            assert!(e.to_string().contains("error 120"), "{e}");
        }
        Err(e) => panic!("QUIC: refused for another reason: {e}"),
        Ok(_) => panic!("QUIC: a server without ALPN n-pamp/2 was accepted"),
    }
    quic_server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_handshake_times_out_and_oversized_frame_is_refused() {
    let (listener, stats) = server(Scheme::Tls, Trust::InsecureAcceptAny).await;
    // A raw TLS client that completes TLS and then sends nothing.
    // The library's own client config: TLS 1.3, ALPN n-pamp/2, any certificate.
    let config = npamp_gateway::assoc::tls_client_config(b"n-pamp/2").expect("tls config");
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(listener.local_addr.addr)
        .await
        .expect("tcp");
    let name = rustls::pki_types::ServerName::try_from("localhost").expect("name");
    let mut stalled = connector.connect(name.clone(), tcp).await.expect("tls");
    eventually("stalled handshake dropped", || {
        stats.handshake_failures.load(Ordering::Relaxed) >= 1
    })
    .await;
    let mut byte = [0u8; 1];
    assert_eq!(
        stalled.read(&mut byte).await.unwrap_or(0),
        0,
        "server closed the stalled stream"
    );

    // A header announcing a payload over the limit: refused before buffering.
    let tcp = tokio::net::TcpStream::connect(listener.local_addr.addr)
        .await
        .expect("tcp");
    let mut s = connector.connect(name, tcp).await.expect("tls");
    let h = Header::new(
        Flags::NONE,
        FrameType(0x0100),
        ChannelId::CONTROL,
        0,
        u32::MAX,
    );
    s.write_all(&h.encode().expect("header"))
        .await
        .expect("write");
    let n = tokio::time::timeout(Duration::from_secs(2), s.read(&mut byte))
        .await
        .expect("server answers");
    assert_eq!(n.unwrap_or(0), 0, "server closed the connection");
    eventually("oversized frame counted", || {
        stats.handshake_failures.load(Ordering::Relaxed) >= 2
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_provided_pem_certificate_is_served_and_bad_files_are_named() {
    let dir = std::env::temp_dir().join(format!("npamp-pem-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let cert =
        rcgen::generate_simple_self_signed(vec!["gateway.example".to_owned()]).expect("cert");
    let (cert_path, key_path) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert_path, cert.cert.pem()).expect("write cert");
    std::fs::write(&key_path, cert.signing_key.serialize_pem()).expect("write key");
    let files = npamp_gateway::assoc::TlsFiles {
        cert_chain: cert_path.clone(),
        private_key: key_path,
    };
    for scheme in [Scheme::Quic, Scheme::Tls] {
        let mut ep = Endpoint::new(SERVER_SEED, Trust::InsecureAcceptAny);
        ep.tls_files = Some(files.clone());
        let addr = PeerAddr {
            scheme,
            addr: "127.0.0.1:0".parse().expect("addr"),
        };
        let listener = Listener::bind(addr, ep, ServeStats::default())
            .await
            .expect("bind with PEM");
        let mut link = Link::connect(listener.local_addr, &client(Trust::InsecureAcceptAny))
            .await
            .expect("connect");
        link.ping().await.expect("ping");
    }
    let mut ep = Endpoint::new(SERVER_SEED, Trust::InsecureAcceptAny);
    ep.tls_files = Some(npamp_gateway::assoc::TlsFiles {
        cert_chain: dir.join("missing.pem"),
        private_key: cert_path,
    });
    let addr = PeerAddr {
        scheme: Scheme::Tls,
        addr: "127.0.0.1:0".parse().expect("addr"),
    };
    let err = Listener::bind(addr, ep, ServeStats::default())
        .await
        .err()
        .expect("must fail");
    assert!(err.to_string().contains("missing.pem"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
