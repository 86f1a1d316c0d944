//! What the metrics say is what happened: a notification's answer is not
//! a reply, so it neither counts as dropped nor judges an upstream.

use crate::support;

use std::time::Duration;

use serde_json::json;
use support::*;

/// An origin with two healthy HTTP upstreams (the mock answers a
/// notification 204, no body) takes 20 notifications through an edge. The
/// origin counts 20 notifications taken, drops none and ejects neither
/// member, and requests after them are answered. (Before, each notification
/// counted as dropped, and both members were ejected: their answers were
/// read as replies that were not JSON-RPC.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notifications_are_taken_and_eject_no_upstream() {
    let (_a, a_url) = mock("http").await;
    let (_b, b_url) = mock("http").await;
    let a_url: &'static str = Box::leak(a_url.into_boxed_str());
    let pair = Pair::start(PairOptions {
        upstream: Up::Url(a_url),
        origin_extra: &["--upstream", b_url.as_str(), "--metrics", "127.0.0.1:0"],
        ingresses: &["http"],
        ..PairOptions::default()
    })
    .await;
    let http = pair.ingress("http://");
    const NOTIFICATIONS: u64 = 20;
    for n in 0..NOTIFICATIONS {
        let body = json!({"jsonrpc": "2.0", "method": "mock/notice", "params": [n]});
        let (status, text) = post(&http, &body.to_string()).await;
        assert_eq!(status, 204, "{text}");
    }
    let taken = metric_reaches(
        &pair.origin,
        "npamp_upstream_notifications_total",
        NOTIFICATIONS,
        Duration::from_secs(5),
    )
    .await;
    assert_eq!(taken, NOTIFICATIONS);
    assert_eq!(metric(&pair.origin, "npamp_dropped_total").await, 0);
    let (status, text) = http_get(&pair.origin.printed("metrics ")).await;
    assert_eq!(status, 200, "{text}");
    let members: Vec<&str> = text
        .lines()
        .filter(|l| {
            l.starts_with("npamp_group_ejections_total{") || l.starts_with("npamp_group_up{")
        })
        .collect();
    assert_eq!(members.len(), 4, "two members, two lines each: {members:?}");
    for line in &members {
        let want = if line.starts_with("npamp_group_up") {
            " 1"
        } else {
            " 0"
        };
        assert!(line.ends_with(want), "{line}");
    }
    for n in 0..4 {
        let body = json!({"jsonrpc": "2.0", "id": n, "method": "echo", "params": [n]});
        let (status, text) = post(&http, &body.to_string()).await;
        assert_eq!(status, 200, "{text}");
        assert!(text.contains("\"result\""), "{text}");
    }
    // The four requests were answered by the upstream, and counted so.
    assert_eq!(
        metric_reaches(
            &pair.origin,
            "npamp_upstream_replies_total",
            4,
            Duration::from_secs(5)
        )
        .await,
        4
    );
}

/// Where `program` is on `PATH`.
fn on_path(program: &str) -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

/// `host:port` of a gateway's `/metrics` URL.
fn scrape_target(gateway: &Proc) -> String {
    let url = gateway.printed("metrics ");
    let rest = url.trim_start_matches("http://");
    rest.split('/').next().unwrap_or(rest).to_owned()
}

/// One instant query of Prometheus's HTTP API: the result's samples, as
/// (labels, value).
async fn query(prometheus: &str, expr: &str) -> Vec<(serde_json::Value, f64)> {
    let mut url = format!("http://{prometheus}/api/v1/query?query=");
    for b in expr.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            url.push(char::from(b));
        } else {
            url.push_str(&format!("%{b:02X}"));
        }
    }
    let (status, text) = http_get(&url).await;
    assert_eq!(status, 200, "{expr}: {text}");
    let v: serde_json::Value = serde_json::from_str(&text).expect("Prometheus answers JSON");
    assert_eq!(v["status"], "success", "{expr}: {text}");
    v["data"]["result"]
        .as_array()
        .map(|r| {
            r.iter()
                .map(|s| {
                    let value = s["value"][1]
                        .as_str()
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(f64::NAN);
                    (s["metric"].clone(), value)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The sum of an instant query's samples (0 when it has none).
async fn total(prometheus: &str, expr: &str) -> f64 {
    query(prometheus, expr).await.iter().map(|(_, v)| v).sum()
}

/// A real Prometheus (Debian's package; the test says loudly that it was
/// skipped where `prometheus` and `promtool` are not installed) scrapes a
/// pair every second while the load generator sends successes, JSON-RPC
/// errors and notifications. `promtool check metrics` passes on both roles'
/// `/metrics`; every query of the Grafana dashboard returns data; and what
/// Prometheus holds equals what the load generator counted: requests,
/// successes, errors, the upstream's answers and the notifications it took.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_prometheus_scrapes_a_pair_and_every_panel_has_data() {
    let (Some(prometheus), Some(promtool)) = (on_path("prometheus"), on_path("promtool")) else {
        eprintln!(
            "\n\n==== SKIPPED: a_real_prometheus_scrapes_a_pair_and_every_panel_has_data: prometheus and promtool are not on PATH (Debian: apt-get install prometheus) ====\n"
        );
        return;
    };
    let pair = Pair::start(PairOptions {
        origin_extra: &["--metrics", "127.0.0.1:0"],
        ingresses: &["http"],
        ..PairOptions::default()
    })
    .await;
    let http = pair.ingress("http://");

    // Prometheus, its data in a directory of its own, scraping both.
    let dir = tempdir::Dir::new();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    let web = listener.local_addr().expect("address").to_string();
    drop(listener);
    let config = format!(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\nscrape_configs:\n  - job_name: edge\n    static_configs:\n      - targets: ['{}']\n  - job_name: origin\n    static_configs:\n      - targets: ['{}']\n",
        scrape_target(&pair.edge),
        scrape_target(&pair.origin)
    );
    let config_file = dir.0.join("prometheus.yml");
    std::fs::write(&config_file, config).expect("config");
    let _prometheus = tokio::process::Command::new(prometheus)
        .arg(format!("--config.file={}", config_file.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.0.join("data").display()
        ))
        .arg(format!("--web.listen-address={web}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("prometheus starts");

    // The load: the load generator's engine, which counts what it sent
    // and what came back. Requests (echo, and `fail`, whose JSON-RPC error
    // is expected) and notifications, at 300 a second for 1.2 s.
    let scenario = npamp_loadgen::scenario::Scenario::parse(
        r#"
name = "telemetry"
duration = 1.0
warmup = 0.2
connections = 4
timeout = 5
[load]
model = "open"
rate = 300
[mix]
notification_share = 0.2
[[mix.message]]
method = "echo"
params = '{"n": {seq}}'
[[mix.message]]
method = "fail"
weight = 0.5
expect_error = true
"#,
        "telemetry",
    )
    .expect("scenario");
    let target = npamp_loadgen::engine::Target::Http(http.parse().expect("uri"));
    let stats = npamp_loadgen::engine::run(&scenario, target, 7, |_, _| {})
        .await
        .expect("the load runs");
    let summary = npamp_loadgen::report::summarize(&stats, &scenario, "edge", "telemetry".into());
    let counted = &summary.accounting;
    assert_eq!(
        counted.unexpected_errors + counted.timed_out + counted.lost,
        0,
        "{counted:?}"
    );
    assert!(
        counted.ok > 0 && counted.expected_errors > 0 && counted.sent_notifications > 0,
        "{counted:?}"
    );
    let (successes, errors, notifications) = (
        counted.ok,
        counted.expected_errors,
        counted.sent_notifications,
    );
    let requests = counted.sent_requests;
    assert_eq!(successes + errors, requests, "{counted:?}");

    // promtool reads both roles' exposition as Prometheus does.
    for gateway in [&pair.edge, &pair.origin] {
        let (status, text) = http_get(&gateway.printed("metrics ")).await;
        assert_eq!(status, 200);
        let mut check = tokio::process::Command::new(&promtool)
            .args(["check", "metrics"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("promtool starts");
        let mut stdin = check.stdin.take().expect("stdin");
        tokio::io::AsyncWriteExt::write_all(&mut stdin, text.as_bytes())
            .await
            .expect("to promtool");
        drop(stdin);
        let out = check.wait_with_output().await.expect("promtool");
        assert!(
            out.status.success(),
            "promtool check metrics: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    // Wait (20 s at most) for a scrape of both after the load.
    let web = web.as_str();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let done = async {
            total(web, "sum(npamp_upstream_notifications_total)").await == notifications as f64
                && total(web, "sum(npamp_replies_total)").await == requests as f64
                && total(web, "sum(npamp_upstream_replies_total)").await == requests as f64
        };
        if tokio::time::timeout(Duration::from_secs(2), done).await == Ok(true) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "Prometheus never saw the load: {:?}",
            query(
                web,
                "{__name__=~\"npamp_replies_total|npamp_upstream_.*_total\"}"
            )
            .await
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // Two more scrapes, so that every rate has two samples after the load.
    tokio::time::sleep(Duration::from_secs(2)).await;

    // What Prometheus holds is what was sent.
    for (expr, want) in [
        ("sum(npamp_requests_total{job=\"edge\"})", requests),
        (
            "sum(npamp_notifications_total{job=\"edge\"})",
            notifications,
        ),
        (
            "sum(npamp_replies_total{job=\"edge\",class=\"success\"})",
            successes,
        ),
        (
            "sum(npamp_replies_total{job=\"edge\",class=\"error\"})",
            errors,
        ),
        (
            "sum(npamp_upstream_requests_total{job=\"origin\"})",
            requests,
        ),
        (
            "sum(npamp_upstream_replies_total{job=\"origin\"})",
            requests,
        ),
        (
            "sum(npamp_upstream_notifications_total{job=\"origin\"})",
            notifications,
        ),
        ("sum(npamp_dropped_total)", 0),
        ("sum(npamp_upstream_failures_total)", 0),
        (
            "sum(npamp_request_duration_seconds_count{job=\"edge\"})",
            requests,
        ),
        (
            "sum(npamp_upstream_duration_seconds_count{job=\"origin\"})",
            requests,
        ),
    ] {
        assert_eq!(total(web, expr).await, want as f64, "{expr}");
    }
    // The edge's pool holds an association or a few (one per shard); the
    // origin's end of each is counted as the origin's, not twice.
    let edge_end = total(web, "sum(npamp_associations{role=\"edge\"})").await;
    let origin_end = total(web, "sum(npamp_associations{role=\"origin\"})").await;
    assert!(
        edge_end >= 1.0 && edge_end == origin_end,
        "{edge_end} {origin_end}"
    );
    assert_eq!(
        total(web, "sum(npamp_associations{job=\"edge\",role=\"origin\"})").await,
        0.0
    );

    // Every panel's query returns data.
    let dashboard: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../deploy/grafana/npamp-gateway.json"
        ))
        .expect("dashboard"),
    )
    .expect("JSON");
    let mut asked = 0;
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().expect("expr");
            let expr = expr
                .replace("$job", ".*")
                .replace("$__rate_interval", "10s");
            let got = query(web, &expr).await;
            assert!(!got.is_empty(), "no data for {expr} ({})", panel["title"]);
            asked += 1;
        }
    }
    assert!(asked >= 30, "{asked} queries");
}
