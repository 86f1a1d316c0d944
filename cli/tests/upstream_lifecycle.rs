//! How an origin lets go of its upstream when an association ends: a stdio
//! child (an MCP server, say) gets EOF on stdin and time to exit, then
//! SIGTERM; a WebSocket upstream gets a Close frame. And how long an
//! upstream that takes nothing may hold an association's reader up: no
//! longer than the stall timeout, well inside the peer's keepalive. Real
//! processes over 127.0.0.1.

use crate::support;

use std::path::Path;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use npamp_gateway::assoc::{Endpoint, Link, PeerAddr};
use npamp_gateway::handshake::Trust;
use support::*;

async fn origin(upstream: &[&str]) -> Proc {
    origin_until(upstream, "listening on").await
}

/// An origin with `--metrics` as well.
async fn origin_with_metrics(upstream: &[&str]) -> Proc {
    let args = [upstream, &["--metrics", "127.0.0.1:0"]].concat();
    origin_until(&args, "metrics").await
}

async fn origin_until(upstream: &[&str], ready: &str) -> Proc {
    let mut args = vec![
        "serve",
        "--listen",
        "quic://127.0.0.1:0",
        "--insecure-accept-any-peer",
    ];
    args.extend(upstream);
    Proc::start(&args, ready).await
}

async fn associate(origin: &Proc) -> Link {
    let at: PeerAddr = origin
        .printed("listening on ")
        .parse()
        .expect("listen address");
    Link::connect(at, &Endpoint::new([0x3C; 32], Trust::InsecureAcceptAny))
        .await
        .expect("association")
}

/// A listener on 127.0.0.1 for a WebSocket upstream, and its ws:// URL.
async fn ws_listener() -> (tokio::net::TcpListener, String) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("ws://{}", listener.local_addr().expect("addr"));
    (listener, url)
}

/// Waits (up to `limit`) until `path` holds `want`; how long that took.
async fn file_says(path: &Path, want: &str, limit: Duration) -> Duration {
    let started = Instant::now();
    while started.elapsed() < limit {
        if std::fs::read_to_string(path).is_ok_and(|s| s.trim() == want) {
            return started.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{} never said {want:?}", path.display());
}

/// A shell script as the upstream command; `MARKER` in it becomes a file
/// path in the same directory.
fn child(dir: &tempdir::Dir, script: &str) -> (String, std::path::PathBuf) {
    let marker = dir.0.join("marker");
    let path = dir.0.join("child.sh");
    std::fs::write(&path, script.replace("MARKER", &marker.to_string_lossy())).expect("script");
    (format!("sh {}", path.display()), marker)
}

/// An origin running `script` (after it writes `started` to MARKER) as its
/// upstream command, and an association to it that has just been closed.
async fn child_of_ended_association(script: &str) -> (tempdir::Dir, Proc, std::path::PathBuf) {
    let dir = tempdir::Dir::new();
    let (cmd, marker) = child(&dir, &format!("echo started > MARKER\n{script}"));
    let origin = origin(&["--upstream-cmd", &cmd]).await;
    let link = associate(&origin).await;
    file_says(&marker, "started", Duration::from_secs(5)).await;
    link.close().await.expect("close");
    (dir, origin, marker)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_upstream_reads_eof_when_its_association_ends() {
    let (_dir, _origin, marker) =
        child_of_ended_association("cat > /dev/null\necho eof > MARKER\n").await;
    let took = file_says(&marker, "eof", Duration::from_secs(5)).await;
    assert!(took < Duration::from_secs(1), "EOF after {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_upstream_that_ignores_eof_gets_sigterm() {
    let (_dir, _origin, marker) = child_of_ended_association(
        "trap 'echo term > MARKER; exit 0' TERM\nwhile :; do sleep 0.1; done\n",
    )
    .await;
    // Two seconds' grace after EOF, then SIGTERM.
    let took = file_says(&marker, "term", Duration::from_secs(6)).await;
    assert!(
        took >= Duration::from_millis(1500) && took < Duration::from_secs(4),
        "SIGTERM after {took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_upstream_gets_a_close_frame() {
    use tokio_tungstenite::tungstenite::Message;
    let (listener, url) = ws_listener().await;
    let upstream = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.expect("accept");
        let mut ws = tokio_tungstenite::accept_async(tcp).await.expect("ws");
        while let Some(msg) = ws.next().await {
            match msg {
                Ok(Message::Close(frame)) => return Ok(frame.map(|f| u16::from(f.code))),
                Ok(_) => {}
                Err(e) => return Err(e.to_string()),
            }
        }
        Err("the stream ended without a Close frame".to_owned())
    });
    let origin = origin(&["--upstream", &url]).await;
    let link = associate(&origin).await;
    // Let the origin connect to the upstream before the association ends.
    tokio::time::sleep(Duration::from_millis(300)).await;
    link.close().await.expect("close");
    let code = tokio::time::timeout(Duration::from_secs(5), upstream)
        .await
        .expect("the upstream heard the end within 5 s")
        .expect("upstream task");
    assert_eq!(
        code,
        Ok(Some(1001)),
        "a Close frame with code 1001 (going away)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
// tungstenite's handshake callback returns its own (large) error response.
#[allow(clippy::result_large_err)]
async fn a_websocket_upstream_gets_the_upstream_headers_in_its_handshake() {
    use tokio_tungstenite::tungstenite::handshake::server::{Request, Response};
    let (listener, url) = ws_listener().await;
    let upstream = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.expect("accept");
        let mut seen = None;
        let callback = |req: &Request, resp: Response| {
            seen = req
                .headers()
                .get("x-api-key")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            Ok(resp)
        };
        let _ws = tokio_tungstenite::accept_hdr_async(tcp, callback)
            .await
            .expect("ws");
        seen
    });
    let origin = origin(&["--upstream", &url, "--upstream-header", "X-Api-Key: k-123"]).await;
    let _link = associate(&origin).await;
    let seen = tokio::time::timeout(Duration::from_secs(5), upstream)
        .await
        .expect("the origin connected within 5 s")
        .expect("upstream task");
    assert_eq!(seen.as_deref(), Some("k-123"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_sigterm_the_origin_waits_for_its_child_to_exit() {
    let dir = tempdir::Dir::new();
    // The child takes half a second to finish after EOF.
    let (cmd, marker) = child(
        &dir,
        "echo started > MARKER\ncat > /dev/null\nsleep 0.5\necho eof > MARKER\n",
    );
    let mut origin = origin(&["--upstream-cmd", &cmd]).await;
    let _link = associate(&origin).await;
    file_says(&marker, "started", Duration::from_secs(5)).await;
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &origin.pid().to_string()])
        .status();
    let status = tokio::time::timeout(Duration::from_secs(20), origin.child.wait())
        .await
        .expect("the origin exits")
        .expect("wait");
    assert!(status.success(), "{status}");
    // Already there when the origin has exited: it waited for the child.
    assert_eq!(
        std::fs::read_to_string(&marker).expect("marker").trim(),
        "eof"
    );
}

/// A child that stops reading its stdin holds up, in turn, its queue at the
/// origin, the association's reader, and the PONGs the edge waits for. The
/// origin gives such an upstream up after the stall timeout and restarts
/// it: what waited for it is answered NotDelivered (or MayHaveExecuted),
/// and the association and the client's session live on past the peer
/// timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_stops_reading_is_restarted_before_the_peer_gives_up() {
    let dir = tempdir::Dir::new();
    // The first run reads nothing; the restarted one is the mock upstream.
    let (cmd, marker) = child(
        &dir,
        &format!(
            "if [ -e MARKER ]; then exec '{BIN}' mock-upstream --stdio; fi\necho stuck > MARKER\nexec sleep 600\n"
        ),
    );
    let timeouts = ["--stall-timeout", "0.5", "--peer-timeout", "2"];
    let upstream = ["--upstream-cmd", &cmd, "--session-buffer", "65536"];
    let origin = origin_with_metrics(&[&upstream[..], &timeouts].concat()).await;
    let peer = origin.printed("listening on ");
    let mut args = vec!["serve", "--ingress", "tcp://127.0.0.1:0", "--peer", &peer];
    args.extend(timeouts);
    args.extend(["--insecure-accept-any-peer", "--metrics", "127.0.0.1:0"]);
    let edge = Proc::start(&args, "metrics").await;
    let mut client = Client::tcp(&edge.printed("ingress ")).await;

    // 100 requests of 4 KiB: far more than the child's pipe and the
    // origin's 64 KiB session buffer take.
    let pad = "x".repeat(4096);
    let sent = 100u64;
    for id in 0..sent {
        let req = serde_json::json!({"jsonrpc":"2.0","id":id,"method":"echo","params":[pad]});
        client.send(&req.to_string()).await;
    }
    file_says(&marker, "stuck", Duration::from_secs(5)).await;
    let mut answered = std::collections::BTreeSet::new();
    let mut not_delivered = 0;
    for _ in 0..sent {
        let r = client.recv().await.expect("an answer");
        let id = r["id"].as_u64().expect("the request's id");
        assert!(answered.insert(id), "{id} answered twice: {r}");
        if r.get("result").is_some() {
            // Arrived after the restart: the mock echoed it.
            assert_eq!(r["result"][0].as_str(), Some(pad.as_str()));
        } else if r["error"]["data"]["npamp_error"] == "Unavailable" {
            // Never sent: it waited at the edge for room on the session
            // (the stuck child holds the session's budget) longer than
            // the stall timeout.
            let detail = r["error"]["data"]["detail"].as_str().unwrap_or_default();
            assert!(detail.contains("--stall-timeout"), "{r}");
        } else {
            // Handed to the child (`echo` is a plain method, so it must not
            // be sent twice): it may have executed. Still queued at the
            // origin: not delivered.
            let code = &r["error"]["data"]["npamp_error"];
            assert!(code == "MayHaveExecuted" || code == "NotDelivered", "{r}");
            not_delivered += 1;
        }
    }
    assert!(not_delivered > 0, "nothing waited for the stuck child?");

    // Past the peer timeout, the same association still carries the session.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let r = client
        .call(serde_json::json!({"jsonrpc":"2.0","id":"after","method":"echo","params":[1]}))
        .await;
    assert_eq!(r["result"], serde_json::json!([1]), "{r}");
    assert_eq!(metric(&origin, "npamp_stalled_upstreams_total").await, 1);
    assert_eq!(metric(&origin, "npamp_upstream_restarts_total").await, 1);
    assert_eq!(
        metric(&edge, "npamp_associations_opened_total{role=\"edge\"}").await,
        1
    );
    assert_eq!(metric(&edge, "npamp_association_errors_total").await, 0);
}

/// An HTTP upstream that finishes nothing while the origin's requests in
/// flight are at `--max-in-flight`: a further request waits for room no
/// longer than the stall timeout (the association's reader waits with it),
/// then is answered NotDelivered, saying why. The edge's pool may carry the
/// three on one association or on two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_waits_for_a_full_http_upstream_no_longer_than_the_stall_timeout() {
    waits_for_a_full_http_upstream(&[]).await;
}

/// The same on one association: the third request waits in the origin's
/// exchange (its room for the association is `--max-in-flight`), not for a
/// permit, and is bounded the same (it used to wait for a slot up to the
/// request timeout, then went to the upstream).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_held_on_one_association_waits_for_a_full_http_upstream_no_longer_than_the_stall_timeout()
 {
    waits_for_a_full_http_upstream(&["--pool-size", "1"]).await;
}

async fn waits_for_a_full_http_upstream(edge_extra: &[&str]) {
    let (_upstream, url) = mock("http").await;
    let origin = origin_with_metrics(&[
        "--upstream",
        &url,
        "--max-in-flight",
        "2",
        "--stall-timeout",
        "0.5",
        "--peer-timeout",
        "2",
    ])
    .await;
    let mut edge_args = vec!["--insecure-accept-any-peer"];
    edge_args.extend(edge_extra);
    let (_edge, http) = http_edge(&origin.printed("listening on "), &edge_args).await;
    let slow = |id: u32| {
        let http = http.clone();
        tokio::spawn(async move {
            // Long enough that the third request cannot come after they
            // finish, however loaded the machine (at 3 s it once did, with
            // the whole suite running on 2 cores).
            let body = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"sleep","params":[6000]}}"#);
            post(&http, &body).await
        })
    };
    let busy = [slow(1), slow(2)];
    // Both hold the origin's room before the third comes (on a loaded
    // machine a fixed pause is not enough).
    let delivered = metric_reaches(
        &origin,
        "npamp_upstream_requests_total",
        2,
        Duration::from_secs(5),
    )
    .await;
    assert_eq!(delivered, 2);
    let started = Instant::now();
    let (status, body) = post(
        &http,
        r#"{"jsonrpc":"2.0","id":3,"method":"echo","params":[3]}"#,
    )
    .await;
    let waited = started.elapsed();
    assert_eq!(status, 502, "answered after {waited:?}: {body}");
    let v = parse(&body);
    assert_eq!(v["id"], 3);
    assert_eq!(v["error"]["data"]["npamp_error"], "NotDelivered", "{body}");
    let detail = v["error"]["data"]["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("--max-in-flight"), "{body}");
    assert!(
        waited >= Duration::from_millis(400) && waited < Duration::from_millis(2500),
        "answered after {waited:?}"
    );
    // The two that held the room were delivered and answered.
    for b in busy {
        let (status, body) = b.await.expect("slow request");
        assert_eq!(status, 200, "{body}");
    }
}

/// The origin's method policy and `--max-body` apply to notifications for a
/// session upstream as to requests: what it would refuse as a request it
/// drops as a notification (and counts), rather than pass on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_upstream_gets_no_notification_the_origin_refuses() {
    let dir = tempdir::Dir::new();
    let (cmd, marker) = child(
        &dir,
        "while read -r line; do echo \"$line\" >> MARKER; done\n",
    );
    let origin = origin_with_metrics(&[
        "--upstream-cmd",
        &cmd,
        "--deny-method",
        "tools/call",
        "--max-body",
        "65536",
    ])
    .await;
    let peer = origin.printed("listening on ");
    let args = ["serve", "--ingress", "tcp://127.0.0.1:0", "--peer", &peer];
    let edge = Proc::start(
        &[&args[..], &["--insecure-accept-any-peer"]].concat(),
        "ingress",
    )
    .await;
    let mut client = Client::tcp(&edge.printed("ingress ")).await;
    let big = "z".repeat(70_000);
    client
        .send(r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"rm"}}"#)
        .await;
    client
        .send(&format!(
            r#"{{"jsonrpc":"2.0","method":"log","params":["{big}"]}}"#
        ))
        .await;
    client
        .send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
        .await;
    // The last one arrives; the two before it never do.
    let started = Instant::now();
    let seen = loop {
        let seen = std::fs::read_to_string(&marker).unwrap_or_default();
        if seen.contains("notifications/initialized") {
            break seen;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "nothing arrived: {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(seen.lines().count(), 1, "{seen}");
    assert_eq!(metric(&origin, "npamp_dropped_total").await, 2);
}

/// A child that answers requests with lines over `--max-body`: each line
/// is dropped, and the child is neither restarted nor cut off from its
/// other requests. A reply whose head names its id (the usual member order)
/// gets its request answered NotDelivered at once, saying why; one that
/// does not (a nested member first) leaves its request to time out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_over_max_body_is_dropped_without_restarting_the_upstream() {
    let dir = tempdir::Dir::new();
    let (cmd, _) = child(
        &dir,
        r#"while IFS= read -r line; do
  id=$(printf '%s' "$line" | sed -n 's/.*"id":\([0-9]*\).*/\1/p')
  case "$line" in
    *'"big"'*) printf '{"jsonrpc":"2.0","id":%s,"result":"' "$id"; head -c 200000 /dev/zero | tr '\0' x; printf '"}\n' ;;
    *'"odd"'*) printf '{"jsonrpc":"2.0","meta":{"n":1},"id":%s,"result":"' "$id"; head -c 200000 /dev/zero | tr '\0' x; printf '"}\n' ;;
    *) printf '{"jsonrpc":"2.0","id":%s,"result":"ok"}\n' "$id" ;;
  esac
done
"#,
    );
    let origin = origin_with_metrics(&["--upstream-cmd", &cmd, "--max-body", "65536"]).await;
    let peer = origin.printed("listening on ");
    let args = ["serve", "--ingress", "tcp://127.0.0.1:0", "--peer", &peer];
    let extra = ["--insecure-accept-any-peer", "--request-timeout", "1"];
    let edge = Proc::start(&[&args[..], &extra].concat(), "ingress").await;
    let mut client = Client::tcp(&edge.printed("ingress ")).await;
    let started = Instant::now();
    let r = client
        .call(serde_json::json!({"jsonrpc":"2.0","id":1,"method":"big"}))
        .await;
    assert_eq!(r["error"]["data"]["npamp_error"], "NotDelivered", "{r}");
    let detail = r["error"]["data"]["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("executed the request and answered")
            && detail.contains("exceeds this gateway's --max-body 65536"),
        "{r}"
    );
    assert!(
        started.elapsed() < Duration::from_millis(900),
        "not the timeout"
    );
    let r = client
        .call(serde_json::json!({"jsonrpc":"2.0","id":6,"method":"odd"}))
        .await;
    assert_eq!(r["error"]["data"]["npamp_error"], "Timeout", "{r}");
    for id in 2..5 {
        let r = client
            .call(serde_json::json!({"jsonrpc":"2.0","id":id,"method":"small"}))
            .await;
        assert_eq!(r["result"], "ok", "{r}");
    }
    assert_eq!(metric(&origin, "npamp_upstream_restarts_total").await, 0);
    assert_eq!(metric(&origin, "npamp_dropped_total").await, 2);
}

/// An HTTP upstream that answers every POST with a 200 000-octet result.
async fn big_http_upstream() -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut seen = Vec::new();
                let mut buf = [0u8; 4096];
                // Headers, then the announced body.
                loop {
                    let Ok(n) = tcp.read(&mut buf).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    seen.extend_from_slice(&buf[..n]);
                    let text = String::from_utf8_lossy(&seen);
                    if let Some(end) = text.find("\r\n\r\n") {
                        let len = text[..end]
                            .lines()
                            .find_map(|l| {
                                l.to_ascii_lowercase()
                                    .strip_prefix("content-length:")
                                    .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                            })
                            .unwrap_or(0);
                        if seen.len() >= end + 4 + len {
                            break;
                        }
                    }
                }
                let body = format!(
                    r#"{{"jsonrpc":"2.0","id":1,"result":"{}"}}"#,
                    "x".repeat(200_000)
                );
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                    body.len()
                );
                let _ = tcp.write_all(head.as_bytes()).await;
                let _ = tcp.write_all(body.as_bytes()).await;
            });
        }
    });
    format!("http://{addr}/")
}

/// An HTTP upstream that runs a request and answers with a reply over the
/// origin's `--max-body`: NotDelivered (no JSON-RPC response reached the
/// client, CC-JSONRPC §6), whose detail says the request was executed and
/// which limit the reply exceeded, so a client does not retry it blindly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_executed_request_whose_reply_is_over_max_body_says_so() {
    let upstream = big_http_upstream().await;
    let origin = origin(&["--upstream", &upstream, "--max-body", "65536"]).await;
    let peer = origin.printed("listening on ");
    let (_edge, http) = http_edge(&peer, &["--insecure-accept-any-peer"]).await;
    let (status, body) = post(
        &http,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}}"#,
    )
    .await;
    assert_eq!(status, 502, "{body}");
    let v = parse(&body);
    assert_eq!(v["error"]["data"]["npamp_error"], "NotDelivered", "{body}");
    let detail = v["error"]["data"]["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("executed the request and answered")
            && detail.contains("--max-body 65536")
            && detail.contains("retrying may execute it again"),
        "{body}"
    );
}

/// Each association to an origin with `--upstream-cmd` starts a process of
/// its own: they are bounded (once 100 unauthenticated MCP `initialize`
/// calls started 100 processes, 1.3 GiB). Past `--max-upstream-processes`
/// an association starts none and its requests get NotDelivered saying
/// so, counted; those within are served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_processes_are_bounded() {
    let pair = Pair::start(PairOptions {
        upstream: Up::Stdio,
        origin_extra: &["--max-upstream-processes", "2", "--metrics", "127.0.0.1:0"],
        ingresses: &["ws"],
        ..PairOptions::default()
    })
    .await;
    let ws = pair.ingress("ws://");
    let mut clients = Vec::new();
    for i in 0..3 {
        let mut c = Client::ws(&ws).await;
        c.send(&format!(
            r#"{{"jsonrpc":"2.0","id":{i},"method":"echo","params":[{i}]}}"#
        ))
        .await;
        let reply = tokio::time::timeout(Duration::from_secs(10), c.recv())
            .await
            .expect("a reply in time")
            .expect("a reply");
        if i < 2 {
            assert_eq!(reply["result"], serde_json::json!([i]), "{reply}");
        } else {
            assert_eq!(reply["error"]["code"], -32004, "{reply}");
            let detail = reply["error"]["data"]["detail"].to_string();
            assert!(detail.contains("--max-upstream-processes"), "{reply}");
        }
        clients.push(c);
    }
    assert!(metric(&pair.origin, "npamp_upstream_processes_refused_total").await >= 1);
}
