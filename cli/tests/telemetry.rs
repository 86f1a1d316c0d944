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
}
