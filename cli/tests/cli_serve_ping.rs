//! The command line as an operator runs it: `keygen`, then `serve` with a
//! QUIC, a TLS and an `npamp://` listener, and `ping` against each, as real
//! processes on 127.0.0.1. A wrong pinned key fails clearly on both sides.

use crate::support;

use std::time::Duration;

use support::*;

/// `npamp-gateway ping URL --identity KEY_FILE --trust PUBLIC_KEY --count
/// COUNT --interval-ms 10`: exit status, stdout, stderr.
async fn ping(url: &str, identity: &str, trust: &str, count: u32) -> (bool, String, String) {
    let count = count.to_string();
    let args = [
        url,
        "--identity",
        identity,
        "--trust",
        trust,
        "--count",
        &count,
        "--interval-ms",
        "10",
    ];
    let out = tokio::time::timeout(
        Duration::from_secs(30),
        tokio::process::Command::new(BIN)
            .arg("ping")
            .args(args)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .unwrap_or_else(|_| panic!("ping {args:?} did not finish"))
    .expect("run ping");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

struct Server {
    proc: Proc,
    keys: tempdir::Dir,
    server_pub: String,
    client_key: String,
    client_pub: String,
}

impl Server {
    /// `serve` with one listener per scheme, trusting one client key.
    async fn start() -> Server {
        let keys = tempdir::Dir::new();
        let server_key = keys.0.join("server.key");
        let client_key = keys.0.join("client.key");
        let (server_pub, client_pub) = (keygen(&server_key), keygen(&client_key));
        let server_key = server_key.to_string_lossy().into_owned();
        let proc = Proc::start(
            &[
                "serve",
                "--listen",
                "quic://127.0.0.1:0",
                "--listen",
                "tls://127.0.0.1:0",
                "--listen",
                "npamp://127.0.0.1:0",
                "--identity",
                &server_key,
                "--trust",
                &client_pub,
                "--metrics",
                "127.0.0.1:0",
            ],
            "metrics",
        )
        .await;
        Server {
            proc,
            client_key: client_key.to_string_lossy().into_owned(),
            keys,
            server_pub,
            client_pub,
        }
    }

    /// The address printed for the listener of `scheme`.
    fn listening(&self, scheme: &str) -> String {
        self.proc
            .lines
            .iter()
            .filter_map(|l| l.strip_prefix("listening on "))
            .find(|a| a.starts_with(&format!("{scheme}://")))
            .unwrap_or_else(|| panic!("no {scheme} listener in {:?}", self.proc.lines))
            .to_owned()
    }
}

/// A second gateway asked to listen on a QUIC port the first one holds
/// fails to start, as it does on a TLS port: the sharded listener's
/// SO_REUSEPORT must not let it join the first one's sockets and take a
/// share of its datagrams (it once said "listening on" and served nothing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quic_port_in_use_is_refused_not_shared() {
    let server = Server::start().await;
    let taken = server.listening("quic");
    let key = server.keys.0.join("second.key");
    keygen(&key);
    for shards in ["0", "1", "2", "4"] {
        let out = tokio::time::timeout(
            Duration::from_secs(20),
            tokio::process::Command::new(BIN)
                .args(["serve", "--listen", &taken, "--identity"])
                .arg(&key)
                .args(["--trust", &server.client_pub, "--shards", shards])
                .kill_on_drop(true)
                .output(),
        )
        .await
        .expect("the second gateway gives up in time")
        .expect("run serve");
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert!(!out.status.success(), "--shards {shards}: {stdout}{stderr}");
        assert!(
            stderr.contains("in use"),
            "--shards {shards}: {stdout}{stderr}"
        );
        assert!(!stdout.contains("listening on"), "{stdout}");
    }
    // The first one still serves.
    let (ok, out, err) = ping(&taken, &server.client_key, &server.server_pub, 1).await;
    assert!(ok, "{out}{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_and_ping_succeed_over_quic_tls_and_npamp() {
    let server = Server::start().await;
    for (scheme, transport) in [("quic", "quic"), ("tls", "tls"), ("npamp", "quic")] {
        let url = server.listening(scheme);
        let (ok, out, err) = ping(&url, &server.client_key, &server.server_pub, 3).await;
        assert!(ok, "ping {url}: {out}{err}");
        assert!(
            out.contains(&format!("peer     {}", server.server_pub)),
            "{url}: {out}"
        );
        assert!(
            out.contains(&format!("transport {transport}\n")),
            "{url}: {out}"
        );
        assert!(out.contains("handshake "), "{url}: {out}");
        assert!(out.contains("rtt ms   n=3 p50="), "{url}: {out}");
    }
    // The npamp:// listener's port also answers the pinned transports.
    let npamp = server.listening("npamp");
    for scheme in ["quic", "tls"] {
        let url = npamp.replacen("npamp", scheme, 1);
        let (ok, out, err) = ping(&url, &server.client_key, &server.server_pub, 1).await;
        assert!(ok, "ping {url}: {out}{err}");
        assert!(
            out.contains(&format!("transport {scheme}\n")),
            "{url}: {out}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_pinned_key_fails_clearly_on_both_sides() {
    let server = Server::start().await;
    // Someone else's key pinned for the server.
    let other = keygen(&server.keys.0.join("other.key"));
    // An identity the server does not trust.
    let stranger = server.keys.0.join("stranger.key");
    keygen(&stranger);
    let stranger = stranger.to_string_lossy().into_owned();
    for scheme in ["quic", "tls", "npamp"] {
        let url = server.listening(scheme);
        let (ok, out, err) = ping(&url, &server.client_key, &other, 1).await;
        assert!(!ok, "ping {url} with a wrong pinned key succeeded: {out}");
        assert!(
            err.contains("is not among the pinned keys") && err.contains(&url),
            "{url}: {err}"
        );
        assert!(!out.contains("rtt ms"), "{url}: {out}");

        let (ok, out, err) = ping(&url, &stranger, &server.server_pub, 1).await;
        assert!(!ok, "an unpinned client got through {url}: {out}");
        // QUIC carries the server's reason; a TLS stream can only be closed,
        // and the client says what that means.
        let why = if url.starts_with("tls") {
            "a peer that does not trust this identity does that"
        } else {
            "is not among the pinned keys"
        };
        assert!(err.contains(&url) && err.contains(why), "{url}: {err}");
    }
    // The client the server does pin still gets through afterwards.
    assert_ne!(server.client_pub, other);
    let url = server.listening("quic");
    let (ok, out, err) = ping(&url, &server.client_key, &server.server_pub, 1).await;
    assert!(ok, "ping {url} after the refusals: {out}{err}");
}

/// `serve --listen` without an upstream accepts associations (for `ping`
/// and benchmarks) and answers every request that arrives over them
/// NotDelivered, saying why: an edge in front of it fails fast and clearly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_without_an_upstream_answers_not_delivered() {
    let server = Server::start().await;
    let peer = server.listening("npamp");
    let (_edge, url) = http_edge(
        &peer,
        &[
            "--identity",
            &server.client_key,
            "--trust",
            &server.server_pub,
        ],
    )
    .await;
    let (status, body) = post(&url, r#"{"jsonrpc":"2.0","id":7,"method":"eth_chainId"}"#).await;
    assert_eq!(status, 502, "{body}");
    assert!(
        body.contains("NotDelivered") && body.contains("no upstream"),
        "{body}"
    );
    let (status, body) = post(&url, r#"{"jsonrpc":"2.0","method":"note"}"#).await;
    assert_eq!((status, body.as_str()), (204, ""));
    // The edge answers a notification at once; it reaches the origin after.
    assert_eq!(
        metric_reaches(
            &server.proc,
            "npamp_dropped_total",
            1,
            Duration::from_secs(5)
        )
        .await,
        1
    );
}

/// An edge whose identity the origin does not pin: the origin refuses it in
/// the handshake, after the edge's last flight, with requests perhaps sent
/// already. Nothing ran, so a client is told NotDelivered (never -32014
/// MayHaveExecuted, which says the upstream may have run it), with a hint,
/// and the edge counts the refusal as a failed handshake.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edge_the_origin_refuses_answers_not_delivered_and_counts_it() {
    let server = Server::start().await;
    let stranger = server.keys.0.join("stranger.key");
    keygen(&stranger);
    let stranger = stranger.to_string_lossy().into_owned();
    let peer = server.listening("quic");
    let (edge, url) = http_edge_with_metrics(
        &peer,
        &["--identity", &stranger, "--trust", &server.server_pub],
    )
    .await;
    for id in 0..5 {
        let body = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"transfer","params":[1]}}"#);
        let (status, text) = post(&url, &body).await;
        // NotDelivered, or -32011 when no association was up to send it on.
        let code = parse(&text)["error"]["code"].as_i64();
        assert!(
            (status, code) == (502, Some(-32004)) || (status, code) == (503, Some(-32011)),
            "{status} {text}"
        );
        assert!(
            text.contains("--trust") || text.contains("not among the pinned keys"),
            "{text}"
        );
    }
    assert!(metric(&edge, "npamp_handshake_failures_total").await >= 1);
}

/// An origin that never answers (a UDP port whose socket says nothing): the
/// client hears of it within `--handshake-timeout`, with a hint at what to
/// check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_origin_is_reported_in_time_with_a_hint() {
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
    let peer = format!("quic://{}", silent.local_addr().expect("address"));
    let keys = tempdir::Dir::new();
    let key = keys.0.join("edge.key");
    keygen(&key);
    let key = key.to_string_lossy().into_owned();
    let (_edge, url) = http_edge(
        &peer,
        &[
            "--identity",
            &key,
            "--insecure-accept-any-peer",
            "--handshake-timeout",
            "1",
        ],
    )
    .await;
    let started = std::time::Instant::now();
    let (status, body) = post(&url, r#"{"jsonrpc":"2.0","id":1,"method":"echo"}"#).await;
    assert_eq!(status, 503, "{body}");
    assert!(
        body.contains("is the origin running") && body.contains("UDP"),
        "{body}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "answered after {:?}",
        started.elapsed()
    );
}
