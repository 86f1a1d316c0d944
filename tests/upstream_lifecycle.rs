//! How an origin lets go of its upstream when an association ends: a stdio
//! child (an MCP server, say) gets EOF on stdin and time to exit, then
//! SIGTERM; a WebSocket upstream gets a Close frame. Real processes over
//! 127.0.0.1.

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use npamp_gateway::assoc::transport::{Endpoint, Link, PeerAddr};
use npamp_gateway::handshake::Trust;
use support::*;

async fn origin(upstream: &[&str]) -> Proc {
    let mut args = vec![
        "serve",
        "--listen",
        "quic://127.0.0.1:0",
        "--insecure-accept-any-peer",
    ];
    args.extend(upstream);
    Proc::start(&args, "listening on").await
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
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("ws://{}", listener.local_addr().expect("addr"));
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
