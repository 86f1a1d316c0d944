//! A configuration reload under load (SIGHUP): the origin's trusted peer
//! keys, the edge's token file and its ingress certificate change while a
//! client keeps sending; that client sees no failure, a WebSocket session
//! opened before carries on, a removed token is refused from then on, an
//! added one and a newly trusted edge are let in, the new certificate is
//! served; what cannot change live is left as it runs.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use support::pki::Pki;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const A: &str = "client-a-0123456789abcdef";
const B: &str = "client-b-0123456789abcdef";
const C: &str = "client-c-0123456789abcdef";

fn echo(id: u64) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"echo","params":[{id}]}}"#)
}

async fn call(url: &str, token: &str, id: u64) -> (u16, String) {
    post_headers(
        url,
        &echo(id),
        &[
            ("content-type", "application/json"),
            ("authorization", &format!("Bearer {token}")),
        ],
    )
    .await
}

/// A POST over TLS with `config` (raw HTTP/1.1); the status, or `None` when
/// the handshake fails.
async fn https_status(url: &str, config: Arc<rustls::ClientConfig>) -> Option<u16> {
    let addr = url.strip_prefix("https://")?;
    let tcp = tokio::net::TcpStream::connect(addr).await.ok()?;
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").ok()?;
    let mut tls = tokio_rustls::TlsConnector::from(config)
        .connect(name, tcp)
        .await
        .ok()?;
    let body = echo(1);
    let request = format!(
        "POST / HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\nauthorization: Bearer {A}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    tls.write_all(request.as_bytes()).await.ok()?;
    let mut got = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), tls.read_to_end(&mut got)).await;
    String::from_utf8_lossy(&got)
        .split(' ')
        .nth(1)?
        .parse()
        .ok()
}

/// Waits until the gateway's /healthz reports `generation`.
async fn generation_reaches(p: &Proc, generation: u64) {
    let health = p.printed("metrics ").replace("/metrics", "/healthz");
    for _ in 0..100 {
        let (_, text) = http_get(&health).await;
        if text.contains(&format!("config generation {generation}")) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{health} never reported generation {generation}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_changes_trust_tokens_and_certificate_without_dropping_anyone() {
    let (first, second) = (Pki::new(), Pki::new());
    let dir = tempdir::Dir::new();
    let file = |name: &str| dir.0.join(name).to_string_lossy().into_owned();
    let (origin_pub, edge_pub, other_pub) = (
        keygen(&dir.0.join("origin.key")),
        keygen(&dir.0.join("edge.key")),
        keygen(&dir.0.join("other.key")),
    );
    std::fs::write(file("tokens"), format!("{A}\n{B}\n")).expect("tokens");
    for ext in ["pem", "key"] {
        std::fs::copy(
            first.path(&format!("server.{ext}")),
            file(&format!("cert.{ext}")),
        )
        .expect("cert");
    }
    let (_mock, upstream) = mock("http").await;
    let origin_toml = |trust: &[&str]| {
        format!(
            "listen = [\"quic://127.0.0.1:0\"]\nupstream = \"{upstream}\"\nidentity = \"origin.key\"\n\
             trust = {trust:?}\nmetrics = \"127.0.0.1:0\"\n"
        )
    };
    std::fs::write(file("origin.toml"), origin_toml(&[&edge_pub])).expect("origin.toml");
    let origin = Proc::start(&["serve", "--config", &file("origin.toml")], "metrics").await;
    let peer = origin.printed("listening on ");
    let edge_toml = format!(
        "ingress = [\"http://127.0.0.1:0\", \"https://127.0.0.1:0\", \"ws://127.0.0.1:0\"]\n\
         peer = \"{peer}\"\nidentity = \"edge.key\"\ntrust = [\"{origin_pub}\"]\n\
         auth-token-file = \"tokens\"\ningress-cert = \"cert.pem\"\ningress-key = \"cert.key\"\n\
         metrics = \"127.0.0.1:0\"\n"
    );
    std::fs::write(file("edge.toml"), edge_toml).expect("edge.toml");
    let edge = Proc::start(&["serve", "--config", &file("edge.toml")], "metrics").await;
    let ingress = |scheme: &str| {
        edge.lines
            .iter()
            .find_map(|l| l.strip_prefix("ingress ").filter(|u| u.starts_with(scheme)))
            .expect("ingress")
            .to_owned()
    };
    let (http, https, ws) = (ingress("http://"), ingress("https://"), ingress("ws://"));

    // Before: B gets in, C does not; the first certificate is served; an
    // edge with the other identity is refused by the origin.
    assert_eq!(call(&http, B, 1).await.0, 200);
    assert_eq!(call(&http, C, 2).await.0, 401);
    assert_eq!(https_status(&https, first.client(None)).await, Some(200));
    assert_eq!(https_status(&https, second.client(None)).await, None);
    let other_edge = || {
        let (file, peer, origin_pub) = (file("other.key"), peer.clone(), origin_pub.clone());
        async move {
            let (p, url) = http_edge(&peer, &["--identity", &file, "--trust", &origin_pub]).await;
            let status = post(&url, &echo(3)).await.0;
            drop(p);
            status
        }
    };
    assert_ne!(other_edge().await, 200, "an edge the origin does not trust");

    // A WebSocket session, opened now, used after the reload.
    let mut session = Client::ws_with_token(&ws, A).await;
    session.send(&echo(10)).await;
    assert_eq!(session.recv().await.expect("reply")["result"][0], 10);

    // Steady load from A throughout.
    let stop = Arc::new(AtomicBool::new(false));
    let (sent, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let load = {
        let (stop, sent, failed, http) = (stop.clone(), sent.clone(), failed.clone(), http.clone());
        tokio::spawn(async move {
            let mut id = 1000;
            while !stop.load(Relaxed) {
                id += 1;
                let (status, body) = call(&http, A, id).await;
                sent.fetch_add(1, Relaxed);
                if status != 200 || !body.contains(&format!("[{id}]")) {
                    failed.fetch_add(1, Relaxed);
                    eprintln!("failed: {status} {body}");
                }
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;

    // The reload: B out, C in; the second certificate over the first's
    // files; the origin trusts the other edge too. A change that cannot be
    // made live rides along and is left as it runs.
    std::fs::write(file("tokens"), format!("{A}\n{C}\n")).expect("tokens");
    for ext in ["pem", "key"] {
        std::fs::copy(
            second.path(&format!("server.{ext}")),
            file(&format!("cert.{ext}")),
        )
        .expect("cert");
    }
    std::fs::write(
        file("origin.toml"),
        origin_toml(&[&edge_pub, &other_pub]).replace("127.0.0.1:0\"]", "127.0.0.1:1\"]"),
    )
    .expect("origin.toml");
    let opened = metric(&edge, "npamp_associations_opened_total{role=\"edge\"}").await;
    hup(&edge);
    hup(&origin);
    generation_reaches(&edge, 2).await;
    generation_reaches(&origin, 2).await;
    tokio::time::sleep(Duration::from_millis(500)).await;

    assert_eq!(call(&http, B, 4).await.0, 401, "a removed token is refused");
    assert_eq!(call(&http, C, 5).await.0, 200, "an added token is let in");
    assert_eq!(https_status(&https, second.client(None)).await, Some(200));
    assert_eq!(https_status(&https, first.client(None)).await, None);
    assert_eq!(other_edge().await, 200, "the newly trusted edge");
    session.send(&echo(11)).await;
    assert_eq!(session.recv().await.expect("reply")["result"][0], 11);

    stop.store(true, Relaxed);
    load.await.expect("load");
    assert!(sent.load(Relaxed) > 20, "{} sent", sent.load(Relaxed));
    assert_eq!(failed.load(Relaxed), 0, "of {} sent", sent.load(Relaxed));
    // No association was dropped and opened again.
    assert_eq!(
        metric(&edge, "npamp_associations_opened_total{role=\"edge\"}").await,
        opened
    );
}
