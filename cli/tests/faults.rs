//! Faults under load, each short enough for CI (the long versions, with the
//! load generator and RSS bounds: `results/faults/run-faults.sh`). Every
//! request gets exactly one answer, its own (id and echoed payload): a
//! success or the documented error, never a made-up success.

use crate::support;

use std::time::Duration;

use support::udp_relay::Hang;
use support::*;

/// 16 closed-loop HTTP clients for `secs` through the pair's edge.
fn load(pair: &Pair, secs: u64) -> tokio::task::JoinHandle<npamp_testkit::exactly_once::Tally> {
    let url = pair.ingress("http://");
    tokio::spawn(async move {
        npamp_testkit::exactly_once::run(&url, 16, Duration::from_secs(secs))
            .await
            .expect("run")
    })
}

/// After the fault, a request is served.
async fn served_again(pair: &Pair) {
    let echo = r#"{"jsonrpc":"2.0","id":1,"method":"echo","params":[1]}"#;
    let (status, body) = post(&pair.ingress("http://"), echo).await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_killed_and_restarted_under_load() {
    let mut pair = Pair::start(PairOptions::default()).await;
    let url = pair.upstream_url.clone().expect("an HTTP mock");
    let running = load(&pair, 4);
    tokio::time::sleep(Duration::from_secs(1)).await;
    pair.kill_upstream();
    tokio::time::sleep(Duration::from_secs(1)).await;
    pair.restart_upstream(&url).await;
    let tally = running.await.expect("load");
    assert!(tally.exact(), "{tally:?}");
    assert!(tally.ok > 100, "{tally:?}");
    // While it was down: NotDelivered, as 502.
    assert!(
        tally.errors.get(&502).copied().unwrap_or(0) > 0,
        "{tally:?}"
    );
    assert_eq!(
        tally.errors.keys().copied().collect::<Vec<_>>(),
        vec![502],
        "{tally:?}"
    );
    // And served again after the restart.
    served_again(&pair).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peer_gateway_restarted_under_load() {
    let mut pair = Pair::start(PairOptions::default()).await;
    let running = load(&pair, 5);
    tokio::time::sleep(Duration::from_secs(1)).await;
    // SIGTERM: the origin drains (in-flight requests finish) and closes
    // its associations; the edge reconnects to the new process.
    pair.restart_origin().await;
    let tally = running.await.expect("load");
    assert!(tally.exact(), "{tally:?}");
    assert!(tally.ok > 100, "{tally:?}");
    for status in tally.errors.keys() {
        assert!([502, 503].contains(status), "{tally:?}");
    }
    served_again(&pair).await;
}

/// kill -9 of the origin and a restart on the same address: the new process
/// answers its predecessor's QUIC packets with a stateless reset the edge
/// can verify (the reset key is derived from the identity), so the edge
/// learns within a round trip that the association is gone, not after the
/// 8 s idle timeout, and the next request is carried by a new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_and_restarted_peer_is_noticed_at_once() {
    let mut pair = Pair::start(PairOptions::default()).await;
    let http = pair.ingress("http://");
    let echo = r#"{"jsonrpc":"2.0","id":1,"method":"echo","params":[1]}"#;
    assert_eq!(post(&http, echo).await.0, 200);
    pair.restart_origin_with("-KILL").await;
    let started = std::time::Instant::now();
    let mut answers = Vec::new();
    while started.elapsed() < Duration::from_secs(6) {
        let (status, _) = post(&http, echo).await;
        answers.push((status, started.elapsed()));
        if status == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (status, at) = *answers.last().expect("an answer");
    assert_eq!(status, 200, "{answers:?}");
    assert!(
        at < Duration::from_secs(3),
        "served again only after {at:?}: {answers:?}"
    );
    // Before that, only the documented answers for a lost association.
    for (status, _) in &answers[..answers.len() - 1] {
        assert!([502, 503].contains(status), "{answers:?}");
    }
}

/// A pair with an HTTP ingress and a pool of 2 whose second association
/// hangs mid-handshake ([`PairOptions::hang`]), once it does.
async fn pair_with_a_hanging_handshake() -> Pair {
    let pair = Pair::start(PairOptions {
        ingresses: &["http"],
        edge_extra: &["--pool-size", "2"],
        hang: Some(Hang {
            flow: 1,
            connection: 0,
        }),
        ..PairOptions::default()
    })
    .await;
    let relay = pair.relay.as_ref().expect("a relay");
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while relay.held() == 0 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(relay.held() > 0, "the second association never hung");
    pair
}

/// Kills the origin with SIGKILL, restarts it, and waits (at most 5 s)
/// until every association the edge had with the old one has ended with
/// an error. Each learns of the restart from the new origin's stateless
/// reset, at its next keep-alive at the latest. A handshake that hangs
/// is no association; one made with the new origin meanwhile (a spare
/// made beside a hanging handshake) may serve already.
async fn kill_and_restart_the_origin(pair: &mut Pair) {
    let live = metric(&pair.edge, "npamp_associations{role=\"edge\"}").await;
    let errors = metric(&pair.edge, "npamp_association_errors_total").await;
    pair.restart_origin_with("-KILL").await;
    let ended = metric_reaches(
        &pair.edge,
        "npamp_association_errors_total",
        errors + live,
        Duration::from_secs(5),
    )
    .await;
    assert!(
        ended >= errors + live,
        "the edge never noticed the restart: {} of {live} associations ended",
        ended - errors
    );
}

/// An origin killed while one of the edge's pooled associations is
/// mid-handshake (its QUIC handshake done, the origin's HANDSHAKE_DONE and
/// N-PAMP reply not yet out) leaves that handshake hanging: the restarted
/// origin ignores its datagrams, which lead with a Handshake packet and so
/// get no stateless reset, until the handshake timeout. A relay makes that
/// happen every time by holding back all but the origin's handshake flight
/// on the pool's second association. Requests after the restart, one per
/// slot at once, are served at once, by new associations, not after that
/// timeout: whether or not the spare made beside the hanging handshake
/// (half a second after it began) has come yet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handshake_left_hanging_by_a_killed_peer_holds_up_no_request() {
    let mut pair = pair_with_a_hanging_handshake().await;
    let http = pair.ingress("http://");
    let echo = r#"{"jsonrpc":"2.0","id":1,"method":"echo","params":[1]}"#;
    assert_eq!(post(&http, echo).await.0, 200);
    kill_and_restart_the_origin(&mut pair).await;
    // Two requests at once, on connections of their own: each slot is one
    // of theirs first (a shard's own slot, or every slot in turn).
    let started = std::time::Instant::now();
    let (a, b) = tokio::join!(post(&http, echo), post(&http, echo));
    let took = started.elapsed();
    assert_eq!((a.0, b.0), (200, 200), "{a:?} {b:?}");
    assert!(took < Duration::from_secs(3), "served only after {took:?}");
}

/// The edge's ejections of its origin so far (`npamp_origin_ejections_total`).
async fn origin_ejections(edge: &Proc) -> u64 {
    let (status, text) = http_get(&edge.printed("metrics ")).await;
    assert_eq!(status, 200, "{text}");
    text.lines()
        .filter(|l| l.starts_with("npamp_origin_ejections_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// With one pooled association (`--pool-size 1`, the default on one CPU)
/// there is no other slot to make a new association on while the one
/// slot's handshake hangs: the restarted origin ignores it (as above; here
/// the relay holds back all but its handshake flight). A handshake that
/// has run well past the time the last one took gets a spare, made beside
/// it, and the requests waiting for it are served by that. The hanging
/// one is dropped then: it neither fails later (here it would at the
/// edge's 2 s handshake timeout) nor takes the origin, which answers, out
/// of rotation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_slot_whose_handshake_hangs_gets_a_spare() {
    let mut pair = Pair::start(PairOptions {
        ingresses: &["http"],
        edge_extra: &["--pool-size", "1", "--handshake-timeout", "2"],
        hang: Some(Hang {
            flow: 1,
            connection: 0,
        }),
        ..PairOptions::default()
    })
    .await;
    let http = pair.ingress("http://");
    let echo = r#"{"jsonrpc":"2.0","id":1,"method":"echo","params":[1]}"#;
    assert_eq!(post(&http, echo).await.0, 200);
    kill_and_restart_the_origin(&mut pair).await;
    let (ejections, failures) = (
        origin_ejections(&pair.edge).await,
        metric(&pair.edge, "npamp_handshake_failures_total").await,
    );
    let started = std::time::Instant::now();
    let (a, b) = tokio::join!(post(&http, echo), post(&http, echo));
    let took = started.elapsed();
    assert_eq!((a.0, b.0), (200, 200), "{a:?} {b:?}");
    assert!(took < Duration::from_secs(3), "served only after {took:?}");
    let relay = pair.relay.as_ref().expect("a relay");
    assert!(relay.held() > 0, "no handshake hung");
    assert_eq!(metric(&pair.edge, "npamp_handshake_spares_total").await, 1);
    // Past the 2 s at which the hanging handshake would have failed.
    tokio::time::sleep(Duration::from_millis(2500).saturating_sub(started.elapsed())).await;
    assert_eq!(
        metric(&pair.edge, "npamp_handshake_failures_total").await,
        failures
    );
    assert_eq!(origin_ejections(&pair.edge).await, ejections);
    assert_eq!(post(&http, echo).await.0, 200);
}

/// A session (WebSocket, TCP) has an association of its own, on the one
/// client socket the edge's sessions share. Its handshake, left hanging as
/// above (here the first after the restart on that socket), gets a spare
/// as a pooled one does: the client that comes back after the restart is
/// served within a second or so, not failed at the edge's 2 s handshake
/// timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_whose_handshake_hangs_gets_a_spare() {
    let mut pair = Pair::start(PairOptions {
        ingresses: &["ws"],
        edge_extra: &["--handshake-timeout", "2"],
        // No HTTP ingress, so no pool: flow 0 is the sessions' socket, and
        // connection 1 the first association on it after the restart.
        hang: Some(Hang {
            flow: 0,
            connection: 1,
        }),
        ..PairOptions::default()
    })
    .await;
    let ws = pair.ingress("ws://");
    let echo = |i: u64| serde_json::json!({"jsonrpc":"2.0","id":i,"method":"echo","params":[i]});
    let mut first = Client::ws(&ws).await;
    let reply = first.call(echo(1)).await;
    assert_eq!(reply["result"], serde_json::json!([1]), "{reply}");
    kill_and_restart_the_origin(&mut pair).await;
    drop(first);
    let started = std::time::Instant::now();
    let mut again = Client::ws(&ws).await;
    let reply = again.call(echo(2)).await;
    let took = started.elapsed();
    assert_eq!(reply["result"], serde_json::json!([2]), "{reply}");
    assert!(
        took < Duration::from_millis(1800),
        "served only after {took:?}"
    );
    let relay = pair.relay.as_ref().expect("a relay");
    assert!(relay.held() > 0, "no handshake hung");
    assert_eq!(metric(&pair.edge, "npamp_handshake_spares_total").await, 1);
}

/// While one pooled association's handshake hangs (seconds, until its idle
/// timeout) and the other serves, each request whose first slot is the
/// hanging one used to leave a task of about 13 KB waiting for that
/// handshake: the edge grew 83–86 MB in 5 s of this load (debug build).
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_handshake_does_not_grow_the_edge_per_request() {
    let rss_kb = |pid: i32| -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmRSS")
    };
    let pair = pair_with_a_hanging_handshake().await;
    let before = rss_kb(pair.edge.pid());
    let tally = load(&pair, 4).await.expect("load");
    let grown = rss_kb(pair.edge.pid()).saturating_sub(before);
    assert!(tally.exact(), "{tally:?}");
    assert!(tally.ok > 100, "{tally:?}");
    // Now about 2 MB; the tasks took 83–86 MB at 13 000 requests.
    assert!(grown < 32 * 1024, "the edge grew {grown} kB over {tally:?}");
}
