//! `capacity` against a target whose capacity is known: a mock upstream
//! that answers after 20 ms, behind 4 connections, serves at most 200
//! requests a second (Little's law); past that, requests queue and the p99
//! grows without bound.

use npamp_testkit::mock::{self, MockAddr, MockOptions};

const BIN: &str = env!("CARGO_BIN_EXE_npamp-loadgen");

#[test]
fn the_knee_of_a_target_of_known_capacity() {
    knee_from("50");
}

/// The first step fails (800/s against 200/s): down by halving to a rate
/// that passes, then bisected to the precision, as from below; not a
/// factor-of-two answer.
#[test]
fn a_first_step_that_fails_is_bisected_from_below_too() {
    knee_from("800");
}

/// Searches the mock's knee from `start`, and checks it.
fn knee_from(start: &str) {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let behavior = MockOptions {
        latency: Some("fixed:20".parse().expect("latency")),
        ..Default::default()
    }
    .behavior();
    let bound = rt
        .block_on(mock::spawn(
            MockAddr::Http("127.0.0.1:0".parse().expect("addr")),
            None,
            behavior,
        ))
        .expect("mock");
    let out_dir =
        std::env::temp_dir().join(format!("loadgen-capacity-{}-{start}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out_dir);
    std::fs::create_dir_all(&out_dir).expect("dir");
    // A plain method: the mock waits its latency before answering.
    let scenario = out_dir.join("work.toml");
    std::fs::write(
        &scenario,
        "name = \"work\"\ntimeout = 5\n[load]\nmodel = \"open\"\nrate = 1\n[mix]\n[[mix.message]]\nmethod = \"work\"\nparams = '[{seq}]'\n",
    )
    .expect("scenario");
    let out = std::process::Command::new(BIN)
        .args([
            "capacity",
            "--slo",
            "p99<150ms,errors<1%",
            "--start",
            start,
            "--step",
            "1s",
            "--warmup",
            "300ms",
            "--connections",
            "4",
            "--precision",
            "10",
            "--target",
        ])
        .arg(bound.to_string())
        .arg("--out")
        .arg(&out_dir)
        .arg(&scenario)
        .output()
        .expect("capacity");
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{table}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(
        &std::fs::read(out_dir.join("capacity.json")).expect("capacity.json"),
    )
    .expect("JSON");
    // Without a knee or a failing rate, the table says which step stopped
    // the search, and why.
    let knee = doc["capacity"]["knee"]
        .as_f64()
        .unwrap_or_else(|| panic!("no knee\n{table}"));
    let failed = doc["capacity"]["failed_at"]
        .as_f64()
        .unwrap_or_else(|| panic!("no failing rate\n{table}"));
    // 200/s is the most it can serve; well below, it meets the SLO.
    assert!((100.0..=210.0).contains(&knee), "knee {knee}\n{table}");
    assert!(
        failed > knee && (failed - knee) / knee <= 0.10,
        "{knee} {failed}\n{table}"
    );
    assert!(table.contains(&format!("knee {knee:.0}/s")), "{table}");
    let svg = std::fs::read_to_string(out_dir.join("capacity.svg")).expect("svg");
    assert!(svg.contains("knee") && svg.contains("SLO p99"), "{svg}");
    let _ = std::fs::remove_dir_all(&out_dir);
}

/// A dead target: the first step gets no answer at all, and the search ends
/// there with its cause and `run`'s exit code for a target not served (6),
/// not ten steps down to 1/s each "failing" its SLO.
#[test]
fn a_dead_target_ends_the_search_at_once() {
    let dir = std::env::temp_dir().join(format!("loadgen-capacity-dead-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let scenario = dir.join("work.toml");
    std::fs::write(
        &scenario,
        "name = \"work\"\ntimeout = 1\n[load]\nmodel = \"open\"\nrate = 1\n[mix]\n[[mix.message]]\nmethod = \"work\"\n",
    )
    .expect("scenario");
    // A port nothing listens on: bound, then closed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let out = std::process::Command::new(BIN)
        .args([
            "capacity", "--slo", "p99<20ms", "--step", "500ms", "--warmup", "0s",
        ])
        .arg("--target")
        .arg(format!("http://127.0.0.1:{port}/"))
        .arg(&scenario)
        .output()
        .expect("capacity");
    let table = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(6), "{table}");
    assert!(
        table.contains("no knee: the search stopped, not served: not one of"),
        "{table}"
    );
    assert_eq!(
        table.lines().filter(|l| l.contains("not served")).count(),
        2,
        "one step, and the verdict: {table}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
