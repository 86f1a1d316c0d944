//! Browsers at the edge: CORS for allowed origins (`--cors-origin`), 403
//! for pages of other origins over HTTP and WebSocket, and the HTTP answers
//! and close codes RFC 6455 asks of a WebSocket endpoint. Raw sockets, so
//! that every header and frame is what a browser (or a broken client)
//! would send.

use crate::support;

use std::time::Duration;

use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const APP: &str = "http://app.example:3000";
const ECHO: &str = r#"{"jsonrpc":"2.0","id":7,"method":"echo","params":["hi"]}"#;

fn addr(url: &str) -> &str {
    url.split_once("://").map_or(url, |(_, a)| a)
}

/// Sends `request` on a new connection; returns what comes back until the
/// server closes it (or 20 s pass, or the head and `Content-Length` octets
/// of body are in, or a 101).
async fn raw(url: &str, request: &str) -> String {
    let mut tcp = TcpStream::connect(addr(url)).await.expect("connect");
    // Not a handshake: the server closes after its answer, so a body
    // without a length (204) is not waited for.
    let request = if request.to_ascii_lowercase().contains("upgrade: websocket") {
        request.to_owned()
    } else {
        request.replacen("\r\n", "\r\nconnection: close\r\n", 1)
    };
    tcp.write_all(request.as_bytes()).await.expect("write");
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let n = match tokio::time::timeout_at(deadline, tcp.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => n,
            _ => break,
        };
        got.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&got);
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let len = header(head, "content-length").and_then(|v| v.parse::<usize>().ok());
            if len.is_some_and(|l| body.len() >= l) || head.starts_with("HTTP/1.1 101") {
                break;
            }
        }
    }
    String::from_utf8_lossy(&got).into_owned()
}

/// The value of a header in a response head (case-insensitive name).
fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|l| {
        let (n, v) = l.split_once(':')?;
        n.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

fn status(response: &str) -> u16 {
    response
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {response:?}"))
}

fn post(host: &str, origin: Option<&str>, content_type: Option<&str>) -> String {
    let mut r = format!("POST / HTTP/1.1\r\nhost: {host}\r\n");
    if let Some(o) = origin {
        r += &format!("origin: {o}\r\n");
    }
    if let Some(ct) = content_type {
        r += &format!("content-type: {ct}\r\n");
    }
    r + &format!("content-length: {}\r\n\r\n{ECHO}", ECHO.len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowed_pages_get_cors_and_foreign_pages_are_refused_over_http() {
    let pair = Pair::start(PairOptions {
        ingresses: &["http"],
        edge_extra: &["--cors-origin", APP],
        ..PairOptions::default()
    })
    .await;
    let http = pair.ingress("http://");
    let host = addr(&http);

    // A preflight from the allowed origin: what it may send, for how long.
    let preflight = raw(
        &http,
        &format!(
            "OPTIONS / HTTP/1.1\r\nhost: {host}\r\norigin: {APP}\r\naccess-control-request-method: POST\r\naccess-control-request-headers: content-type, authorization\r\n\r\n"
        ),
    )
    .await;
    assert_eq!(status(&preflight), 204, "{preflight}");
    assert_eq!(header(&preflight, "access-control-allow-origin"), Some(APP));
    assert_eq!(header(&preflight, "vary"), Some("Origin"));
    assert_eq!(
        header(&preflight, "access-control-allow-methods"),
        Some("POST, OPTIONS")
    );
    let allowed = header(&preflight, "access-control-allow-headers").unwrap_or("");
    assert!(
        allowed.contains("content-type") && allowed.contains("authorization"),
        "{preflight}"
    );
    assert!(header(&preflight, "access-control-max-age").is_some());

    // Its request: answered, with the headers that let the page read it.
    let answer = raw(&http, &post(host, Some(APP), Some("application/json"))).await;
    assert_eq!(status(&answer), 200, "{answer}");
    assert_eq!(header(&answer, "access-control-allow-origin"), Some(APP));
    assert!(answer.contains(r#""result":["hi"]"#), "{answer}");

    // A program (no Origin) is served as before, without CORS headers.
    let program = raw(&http, &post(host, None, Some("application/json"))).await;
    assert_eq!(status(&program), 200, "{program}");
    assert_eq!(header(&program, "access-control-allow-origin"), None);
    // A plain OPTIONS says what the resource allows.
    let options = raw(
        &http,
        &format!("OPTIONS / HTTP/1.1\r\nhost: {host}\r\n\r\n"),
    )
    .await;
    assert_eq!(status(&options), 204, "{options}");
    assert_eq!(header(&options, "allow"), Some("POST, OPTIONS"));

    // A foreign page: its preflight and its request are refused, also the
    // request a page can send without a preflight (no Content-Type, as a
    // Blob body sends it), which would otherwise execute unseen.
    let evil = "https://evil.example";
    let refused_preflight = raw(
        &http,
        &format!(
            "OPTIONS / HTTP/1.1\r\nhost: {host}\r\norigin: {evil}\r\naccess-control-request-method: POST\r\n\r\n"
        ),
    )
    .await;
    assert_eq!(status(&refused_preflight), 403, "{refused_preflight}");
    assert_eq!(
        header(&refused_preflight, "access-control-allow-origin"),
        None
    );
    let requests_before = metric(&pair.edge, "npamp_requests_total{ingress=\"http\"}").await;
    for ct in [None, Some("application/json"), Some("text/plain")] {
        let r = raw(&http, &post(host, Some(evil), ct)).await;
        assert_eq!(status(&r), 403, "{r}");
        assert!(r.contains("--cors-origin https://evil.example"), "{r}");
    }
    assert_eq!(
        metric(&pair.edge, "npamp_requests_total{ingress=\"http\"}").await,
        requests_before,
        "a refused page's request must not be carried"
    );
    assert_eq!(metric(&pair.edge, "npamp_foreign_origins_total").await, 4);

    // A page of the edge's own origin needs no listing.
    let own = format!("http://{host}");
    let same = raw(&http, &post(host, Some(&own), Some("application/json"))).await;
    assert_eq!(status(&same), 200, "{same}");

    // Transfer codings other than chunked are not taken apart: 501.
    let gz = raw(
        &http,
        &format!(
            "POST / HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\ntransfer-encoding: gzip, chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
        ),
    )
    .await;
    assert_eq!(status(&gz), 501, "{gz}");
}

/// A WebSocket handshake request with these extra header lines.
fn ws_handshake(host: &str, extra: &str) -> String {
    format!(
        "GET / HTTP/1.1\r\nhost: {host}\r\nupgrade: websocket\r\nconnection: Upgrade\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n{extra}\r\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_port_answers_what_is_not_a_handshake_and_refuses_foreign_pages() {
    let pair = Pair::start(PairOptions {
        ingresses: &["ws"],
        edge_extra: &["--cors-origin", APP],
        ..PairOptions::default()
    })
    .await;
    let ws = pair.ingress("ws://");
    let host = addr(&ws);

    // A handshake from a program, an allowed page and the edge's own page.
    for origin in [
        "",
        &format!("origin: {APP}\r\n"),
        &format!("origin: http://{host}\r\n"),
    ] {
        let r = raw(
            &ws,
            &ws_handshake(host, &format!("sec-websocket-version: 13\r\n{origin}")),
        )
        .await;
        assert_eq!(status(&r), 101, "{origin}: {r}");
        assert_eq!(
            header(&r, "sec-websocket-accept"),
            Some("s3pPLMBiTxaQ9kYGzzhZRbK+xOo="),
            "RFC 6455 §1.3's example key"
        );
    }
    // A foreign page: 403 (cross-site WebSocket hijacking).
    let r = raw(
        &ws,
        &ws_handshake(
            host,
            "sec-websocket-version: 13\r\norigin: https://evil.example\r\n",
        ),
    )
    .await;
    assert_eq!(status(&r), 403, "{r}");
    assert_eq!(metric(&pair.edge, "npamp_foreign_origins_total").await, 1);

    // Not a handshake: an HTTP answer that says so, not a closed socket.
    let plain = raw(&ws, &format!("GET / HTTP/1.1\r\nhost: {host}\r\n\r\n")).await;
    assert_eq!(status(&plain), 426, "{plain}");
    assert_eq!(header(&plain, "upgrade"), Some("websocket"));
    let old = raw(&ws, &ws_handshake(host, "sec-websocket-version: 8\r\n")).await;
    assert_eq!(status(&old), 426, "{old}");
    assert_eq!(header(&old, "sec-websocket-version"), Some("13"));
    let bad_key = raw(
        &ws,
        &ws_handshake(host, "sec-websocket-version: 13\r\n")
            .replace("dGhlIHNhbXBsZSBub25jZQ==", "short"),
    )
    .await;
    assert_eq!(status(&bad_key), 400, "{bad_key}");
    let post = raw(
        &ws,
        &format!("POST / HTTP/1.1\r\nhost: {host}\r\ncontent-length: 2\r\n\r\n{{}}"),
    )
    .await;
    assert_eq!(status(&post), 405, "{post}");
    assert_eq!(header(&post, "allow"), Some("GET"));
}

/// A client frame: FIN, `opcode`, masked with a zero key (RFC 6455 §5.3
/// asks for a mask; its value does not matter here).
fn frame(opcode: u8, payload: &[u8], masked: bool) -> Vec<u8> {
    let mut f = vec![0x80 | opcode];
    let mask_bit = if masked { 0x80 } else { 0 };
    match payload.len() {
        n if n < 126 => f.push(mask_bit | n as u8),
        n if n <= 0xffff => {
            f.push(mask_bit | 126);
            f.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            f.push(mask_bit | 127);
            f.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    if masked {
        f.extend_from_slice(&[0, 0, 0, 0]);
    }
    f.extend_from_slice(payload);
    f
}

/// Opens a session with a raw handshake, sends `frames`, and returns the
/// close code of the server's Close frame (`None` if none came in 5 s).
async fn close_code_after(url: &str, frames: &[u8]) -> Option<u16> {
    let mut tcp = TcpStream::connect(addr(url)).await.expect("connect");
    let hs = ws_handshake(addr(url), "sec-websocket-version: 13\r\n");
    tcp.write_all(hs.as_bytes()).await.expect("write");
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = tcp.read(&mut buf).await.expect("read");
        assert!(n > 0, "closed during the handshake");
        got.extend_from_slice(&buf[..n]);
    }
    let at = got.windows(4).position(|w| w == b"\r\n\r\n").unwrap_or(0) + 4;
    let mut rest = got.split_off(at);
    tcp.write_all(frames).await.expect("frames");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        // Server frames are unmasked; a Close is 0x88, length, code.
        let mut i = 0;
        while i + 2 <= rest.len() {
            let (op, len) = (rest[i] & 0x0f, (rest[i + 1] & 0x7f) as usize);
            let (len, start) = match len {
                126 if i + 4 <= rest.len() => (
                    u16::from_be_bytes([rest[i + 2], rest[i + 3]]) as usize,
                    i + 4,
                ),
                126 | 127 => break,
                n => (n, i + 2),
            };
            if start + len > rest.len() {
                break;
            }
            if op == 0x8 && len >= 2 {
                return Some(u16::from_be_bytes([rest[start], rest[start + 1]]));
            }
            i = start + len;
        }
        let n = match tokio::time::timeout_at(deadline, tcp.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => n,
            _ => return None,
        };
        rest.extend_from_slice(&buf[..n]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_sessions_end_with_the_close_code_of_what_went_wrong() {
    let pair = Pair::start(PairOptions {
        ingresses: &["ws"],
        edge_extra: &["--max-body", "1024"],
        ..PairOptions::default()
    })
    .await;
    let ws = pair.ingress("ws://");
    // A message over --max-body: 1009.
    let big = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"echo","params":["{}"]}}"#,
        "x".repeat(2000)
    );
    assert_eq!(
        close_code_after(&ws, &frame(0x1, big.as_bytes(), true)).await,
        Some(1009)
    );
    // A text frame that is not UTF-8: 1007.
    assert_eq!(
        close_code_after(&ws, &frame(0x1, b"\xff\xfe", true)).await,
        Some(1007)
    );
    // An unmasked client frame is a protocol error: 1002.
    assert_eq!(
        close_code_after(&ws, &frame(0x1, ECHO.as_bytes(), false)).await,
        Some(1002)
    );
    // The client says goodbye: the server answers its Close with 1000.
    let mut bye = frame(0x8, &1000u16.to_be_bytes(), true);
    bye.splice(0..0, frame(0x1, ECHO.as_bytes(), true));
    assert_eq!(close_code_after(&ws, &bye).await, Some(1000));
}

/// Debian's `chromium`, or the browser `NPAMP_CHROMIUM` names; `None` when
/// there is none.
fn chromium() -> Option<String> {
    let candidates = std::env::var("NPAMP_CHROMIUM")
        .ok()
        .into_iter()
        .chain(["chromium", "chromium-browser", "google-chrome"].map(String::from));
    candidates.into_iter().find(|c| {
        std::process::Command::new(c)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

/// A page that calls the edge with `fetch()` (a preflighted JSON POST) and
/// over a WebSocket, and writes what happened into `#out`.
fn page(http: &str, ws: &str) -> String {
    format!(
        r#"<!doctype html><meta charset="utf-8"><title>npamp-gateway from a page</title>
<style>body{{font:16px monospace;margin:24px}} b{{color:#064}}</style>
<h3>A page of another origin calls the edge (--cors-origin lists one of the two)</h3><pre id="out"></pre>
<script>
const out = document.getElementById('out');
const say = (t) => {{ out.textContent += t + '\n'; }};
say('page origin: ' + location.origin);
const call = fetch('{http}', {{method: 'POST', headers: {{'content-type': 'application/json'}},
  body: JSON.stringify({{jsonrpc: '2.0', id: 1, method: 'echo', params: ['from fetch']}})}})
  .then(r => r.json()).then(j => say('fetch: ' + JSON.stringify(j)))
  .catch(e => say('fetch failed: ' + e.name));
const socket = new Promise((done) => {{
  const w = new WebSocket('{ws}');
  w.onopen = () => w.send(JSON.stringify({{jsonrpc: '2.0', id: 2, method: 'echo', params: ['from a WebSocket']}}));
  w.onmessage = (m) => {{ say('ws: ' + m.data); w.close(); done(); }};
  w.onerror = () => {{ say('ws failed'); done(); }};
}});
Promise.all([call, socket]).then(() => {{ say('done'); fetch('/release').catch(() => {{}}); }});
</script>
<!-- Headless Chromium takes the DOM once the page has loaded, which a
     WebSocket does not hold up: this image (answered once the rest is
     done, or after 5 s) does. -->
<img src="/hold" alt="">"#
    )
}

/// Serves `html` to every request on `listener` (in the background);
/// `/hold` is answered once `/release` is asked for, or after 5 s.
fn serve_page(listener: tokio::net::TcpListener, html: String) {
    let release = std::sync::Arc::new(tokio::sync::Notify::new());
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            let (html, release) = (html.clone(), release.clone());
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let n = tcp.read(&mut buf).await.unwrap_or(0);
                let request = String::from_utf8_lossy(&buf[..n]);
                if request.starts_with("GET /hold ") {
                    let _ = tokio::time::timeout(Duration::from_secs(5), release.notified()).await;
                } else if request.starts_with("GET /release ") {
                    release.notify_waiters();
                }
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/html; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    html.len()
                );
                let _ = tcp.write_all(head.as_bytes()).await;
                let _ = tcp.write_all(html.as_bytes()).await;
            });
        }
    });
}

/// The DOM of `url` after its scripts ran, from headless Chromium; with
/// `screenshot`, a PNG of the page too.
async fn rendered(browser: &str, url: &str, screenshot: Option<&str>) -> String {
    let mut cmd = tokio::process::Command::new(browser);
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--virtual-time-budget=10000",
        "--window-size=900,300",
    ]);
    match screenshot {
        Some(path) => cmd.arg(format!("--screenshot={path}")),
        None => cmd.arg("--dump-dom"),
    };
    let out = tokio::time::timeout(Duration::from_secs(60), cmd.arg(url).output())
        .await
        .expect("chromium in time")
        .expect("chromium runs");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_of_an_allowed_origin_uses_the_edge_from_chromium_and_a_foreign_one_cannot() {
    let Some(browser) = chromium() else {
        eprintln!(
            "skipped: no chromium here (Debian's `chromium` package, or NPAMP_CHROMIUM=PATH)"
        );
        return;
    };
    let allowed = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let foreign = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let allowed_url = format!("http://{}", allowed.local_addr().expect("addr"));
    let foreign_url = format!("http://{}", foreign.local_addr().expect("addr"));
    let pair = Pair::start(PairOptions {
        ingresses: &["http", "ws"],
        edge_extra: &["--cors-origin", &allowed_url],
        ..PairOptions::default()
    })
    .await;
    let html = page(&pair.ingress("http://"), &pair.ingress("ws://"));
    serve_page(allowed, html.clone());
    serve_page(foreign, html);

    let dom = rendered(&browser, &allowed_url, None).await;
    assert!(
        dom.contains("done"),
        "the page's scripts did not finish: {dom}"
    );
    assert!(
        dom.contains(r#"fetch: {"id":1,"jsonrpc":"2.0","result":["from fetch"]}"#),
        "{dom}"
    );
    assert!(
        dom.contains(r#"ws: {"id":2,"jsonrpc":"2.0","result":["from a WebSocket"]}"#),
        "{dom}"
    );

    let dom = rendered(&browser, &foreign_url, None).await;
    assert!(
        dom.contains("done"),
        "the page's scripts did not finish: {dom}"
    );
    assert!(dom.contains("fetch failed: TypeError"), "{dom}");
    assert!(dom.contains("ws failed"), "{dom}");
    // Its preflight and its handshake were refused, nothing was carried.
    assert_eq!(metric(&pair.edge, "npamp_foreign_origins_total").await, 2);
    assert_eq!(
        metric(&pair.edge, "npamp_requests_total{ingress=\"http\"}").await,
        1
    );

    // NPAMP_BROWSER_SCREENSHOTS=DIR: both pages as PNG files there.
    if let Ok(dir) = std::env::var("NPAMP_BROWSER_SCREENSHOTS") {
        for (name, url) in [
            ("allowed-page", &allowed_url),
            ("foreign-page", &foreign_url),
        ] {
            let path = format!("{dir}/{name}.png");
            rendered(&browser, url, Some(&path)).await;
            assert!(
                std::path::Path::new(&path).exists(),
                "no screenshot at {path}"
            );
        }
    }
}
