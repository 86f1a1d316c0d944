//! `serve --capture` (issue 54): an edge records what its clients send,
//! over HTTP and over its session ingresses alike, in arrival order, with
//! `--capture-redact` applied, within `--capture-max`; what is not JSON is
//! not recorded. `npamp-loadgen replay` reads what it writes
//! (loadgen/tests/runs.rs, results/run-capture-replay.sh).

use crate::support;

use serde_json::Value;
use std::time::Duration;
use support::*;

/// The capture's lines once it holds `n` after its header, within 10 s.
async fn lines(path: &std::path::Path, n: usize) -> Vec<Value> {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let all: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).expect("every line is JSON"))
            .collect();
        if all.len() > n || std::time::Instant::now() > deadline {
            return all;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edge_captures_what_its_clients_send() {
    let dir = tempdir::Dir::new();
    let file = dir.0.join("capture.jsonl");
    let path = file.to_string_lossy().into_owned();
    let pair = Pair::start(PairOptions {
        edge_extra: &[
            "--capture",
            &path,
            "--capture-redact",
            "login:/password",
            "--capture-redact",
            "sign",
        ],
        ..PairOptions::default()
    })
    .await;
    let http = pair.ingress("http://");
    let login =
        r#"{"jsonrpc":"2.0","id":1,"method":"login","params":{"user":"u","password":"pw"}}"#;
    assert_eq!(post(&http, login).await.0, 200);
    let batch = r#"[{"jsonrpc":"2.0","id":2,"method":"echo","params":[2]},{"jsonrpc":"2.0","method":"sign","params":["key"]}]"#;
    assert_eq!(post(&http, batch).await.0, 200);
    // Not JSON: answered as a parse error, not recorded.
    let _ = post(&http, "{nope").await;
    let mut ws = Client::ws(&pair.ingress("ws://")).await;
    ws.send(r#"{"jsonrpc":"2.0","id":3,"method":"echo","params":["ws"]}"#)
        .await;
    assert!(ws.recv().await.is_some());

    let all = lines(&file, 3).await;
    assert_eq!(all.len(), 4, "a header and three sends: {all:?}");
    assert_eq!(all[0]["npamp_capture"], 1);
    let sends = &all[1..];
    let at: Vec<u64> = sends.iter().filter_map(|l| l["at_us"].as_u64()).collect();
    assert!(
        at.len() == 3 && at.windows(2).all(|w| w[0] <= w[1]),
        "{at:?}"
    );
    assert_eq!(sends[0]["method"], "login");
    assert_eq!(sends[0]["message"]["params"]["password"], "<redacted>");
    assert_eq!(sends[0]["message"]["params"]["user"], "u");
    assert_eq!(sends[1]["method"], Value::Null, "a batch");
    assert_eq!(sends[1]["message"][1]["params"], "<redacted>");
    assert_eq!(sends[1]["message"][0]["params"], serde_json::json!([2]));
    assert_eq!(sends[2]["message"]["params"], serde_json::json!(["ws"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capture_ends_at_its_size_and_needs_an_edge() {
    let dir = tempdir::Dir::new();
    let file = dir.0.join("capture.jsonl");
    let path = file.to_string_lossy().into_owned();
    let pair = Pair::start(PairOptions {
        edge_extra: &["--capture", &path, "--capture-max", "1000"],
        ..PairOptions::default()
    })
    .await;
    let http = pair.ingress("http://");
    for i in 0..40 {
        let body = format!(r#"{{"jsonrpc":"2.0","id":{i},"method":"echo","params":[{i}]}}"#);
        assert_eq!(post(&http, &body).await.0, 200);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let text = std::fs::read_to_string(&file).expect("capture");
    assert!(text.len() <= 1000, "{} octets", text.len());
    assert!(text.lines().count() > 5, "{text}");
    // The gateway goes on serving once the capture ended.
    assert_eq!(
        post(&http, r#"{"jsonrpc":"2.0","id":99,"method":"echo"}"#)
            .await
            .0,
        200
    );

    // An origin has no clients to capture; a capture's options need it.
    for (args, says) in [
        (
            vec![
                "serve",
                "--insecure-accept-any-peer",
                "--listen",
                "quic://127.0.0.1:0",
                "--upstream",
                "http://127.0.0.1:9/",
                "--capture",
                &path,
            ],
            "give --ingress too",
        ),
        (
            vec![
                "serve",
                "--insecure-accept-any-peer",
                "--ingress",
                "http://127.0.0.1:0",
                "--peer",
                "quic://127.0.0.1:9",
                "--capture-max",
                "10",
            ],
            "goes with --capture",
        ),
        (
            vec![
                "serve",
                "--insecure-accept-any-peer",
                "--ingress",
                "http://127.0.0.1:0",
                "--peer",
                "quic://127.0.0.1:9",
                "--capture",
                "/nonexistent/dir/c.jsonl",
            ],
            "does not exist",
        ),
    ] {
        let out = std::process::Command::new(BIN)
            .args(&args)
            .output()
            .expect("serve");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}
