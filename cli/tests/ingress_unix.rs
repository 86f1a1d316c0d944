//! Unix domain sockets for local clients: `unix:///PATH` (HTTP) and
//! `unix+lines:///PATH` (newline-delimited JSON-RPC). A socket file left by
//! a gateway that is gone is replaced; the gateway removes its own when it
//! stops.

use crate::support;

use std::time::Duration;

use support::*;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

const ECHO: &str = r#"{"jsonrpc":"2.0","id":7,"method":"echo","params":["hi"]}"#;
const REPLY: &str = r#"{"id":7,"jsonrpc":"2.0","result":["hi"]}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_clients_use_http_and_lines_over_unix_sockets() {
    let dir = tempdir::Dir::new();
    let (http_sock, lines_sock) = (dir.0.join("http.sock"), dir.0.join("lines.sock"));
    // A socket file nothing listens on any more, as a killed gateway
    // leaves it.
    drop(std::os::unix::net::UnixListener::bind(&http_sock).expect("stale socket"));
    assert!(http_sock.exists());
    let http_url = format!("unix://{}", http_sock.display());
    let lines_url = format!("unix+lines://{}", lines_sock.display());
    let mut pair = Pair::start(PairOptions {
        ingresses: &[],
        edge_extra: &["--ingress", &http_url, "--ingress", &lines_url],
        ..PairOptions::default()
    })
    .await;
    assert_eq!(pair.ingress("unix://"), http_url);
    assert_eq!(pair.ingress("unix+lines://"), lines_url);

    // HTTP/1.1 over the socket.
    let mut s = UnixStream::connect(&http_sock).await.expect("connect");
    let request = format!(
        "POST / HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{ECHO}",
        ECHO.len()
    );
    s.write_all(request.as_bytes()).await.expect("write");
    let mut answer = String::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_string(&mut answer))
        .await
        .expect("answer in time")
        .expect("read");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.ends_with(REPLY), "{answer}");

    // Lines over the other: a session of its own, several messages.
    let s = UnixStream::connect(&lines_sock).await.expect("connect");
    let (r, mut w) = s.into_split();
    let mut lines = BufReader::new(r).lines();
    for id in 1..=3 {
        let line = format!("{}\n", ECHO.replace("\"id\":7", &format!("\"id\":{id}")));
        w.write_all(line.as_bytes()).await.expect("write");
        let reply = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
            .await
            .expect("reply in time")
            .expect("read")
            .expect("a line");
        assert_eq!(reply, REPLY.replace("\"id\":7", &format!("\"id\":{id}")));
    }
    assert_eq!(
        metric(&pair.edge, "npamp_requests_total{ingress=\"tcp\"}").await,
        3
    );

    // Stopped, the edge takes its socket files with it.
    let status = std::process::Command::new("kill")
        .arg(pair.edge.pid().to_string())
        .status()
        .expect("kill");
    assert!(status.success());
    let _ = tokio::time::timeout(Duration::from_secs(15), pair.edge.child.wait()).await;
    assert!(!http_sock.exists() && !lines_sock.exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_socket_in_use_or_a_file_that_is_not_one_is_never_replaced() {
    let dir = tempdir::Dir::new();
    let sock = dir.0.join("busy.sock");
    let _live = std::os::unix::net::UnixListener::bind(&sock).expect("live socket");
    let plain = dir.0.join("plain.txt");
    std::fs::write(&plain, "keep me").expect("file");
    for path in [&sock, &plain] {
        let out = std::process::Command::new(BIN)
            .args([
                "serve",
                "--ingress",
                &format!("unix://{}", path.display()),
                "--peer",
                "quic://127.0.0.1:9",
                "--insecure-accept-any-peer",
            ])
            .output()
            .expect("run");
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("cannot listen on unix://"), "{err}");
    }
    assert_eq!(std::fs::read_to_string(&plain).expect("kept"), "keep me");
}
