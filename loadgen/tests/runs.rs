//! The load generator against real targets on 127.0.0.1: every target kind
//! with exact accounting, the JSON summary against `results/schema.json`,
//! every shipped scenario parsing, and the exit codes.

use npamp_gateway::assoc::Scheme;
use npamp_loadgen::engine::{self, Target};
use npamp_loadgen::report::{self, Summary};
use npamp_loadgen::scenario::Scenario;
use npamp_testkit::exactly_once::EmbeddedPair;
use npamp_testkit::mock::{self, MockAddr};
use serde_json::Value;
use std::path::{Path, PathBuf};

const BIN: &str = env!("CARGO_BIN_EXE_npamp-loadgen");

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A JSON Schema checker for the keywords `results/schema.json` uses:
/// type, required, properties, additionalProperties (false or a schema),
/// items, minItems, maxItems, enum, const, minimum, $ref to #/$defs.
fn check(schema: &Value, root: &Value, v: &Value, at: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if let Some(r) = schema.get("$ref").and_then(Value::as_str) {
        let name = r.trim_start_matches("#/$defs/");
        return check(&root["$defs"][name], root, v, at);
    }
    // `type` is a name or a list of names.
    let types: Vec<&str> = match schema.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    if !types.is_empty() {
        let ok = types.iter().any(|t| match *t {
            "object" => v.is_object(),
            "array" => v.is_array(),
            "string" => v.is_string(),
            "integer" => v.is_u64() || v.is_i64(),
            "number" => v.is_number(),
            "boolean" => v.is_boolean(),
            "null" => v.is_null(),
            _ => false,
        });
        if !ok {
            errs.push(format!("{at}: expected {types:?}, got {v}"));
            return errs;
        }
    }
    if let Some(c) = schema.get("const")
        && c != v
    {
        errs.push(format!("{at}: expected {c}"));
    }
    if let Some(e) = schema.get("enum").and_then(Value::as_array)
        && !e.contains(v)
    {
        errs.push(format!("{at}: {v} not in {e:?}"));
    }
    if let (Some(m), Some(x)) = (schema.get("minimum").and_then(Value::as_f64), v.as_f64())
        && x < m
    {
        errs.push(format!("{at}: {x} < {m}"));
    }
    if let Some(obj) = v.as_object() {
        for r in schema
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let r = r.as_str().unwrap_or_default();
            if !obj.contains_key(r) {
                errs.push(format!("{at}: missing {r}"));
            }
        }
        let props = schema.get("properties").and_then(Value::as_object);
        for (k, x) in obj {
            match props.and_then(|p| p.get(k)) {
                Some(s) => errs.extend(check(s, root, x, &format!("{at}.{k}"))),
                None => match schema.get("additionalProperties") {
                    Some(Value::Bool(false)) => errs.push(format!("{at}: unexpected key {k}")),
                    Some(s @ Value::Object(_)) => {
                        errs.extend(check(s, root, x, &format!("{at}.{k}")))
                    }
                    _ => {}
                },
            }
        }
    }
    if let Some(arr) = v.as_array() {
        if let Some(n) = schema.get("minItems").and_then(Value::as_u64)
            && (arr.len() as u64) < n
        {
            errs.push(format!("{at}: fewer than {n} items"));
        }
        if let Some(n) = schema.get("maxItems").and_then(Value::as_u64)
            && (arr.len() as u64) > n
        {
            errs.push(format!("{at}: more than {n} items"));
        }
        if let Some(items) = schema.get("items") {
            for (i, x) in arr.iter().enumerate() {
                errs.extend(check(items, root, x, &format!("{at}[{i}]")));
            }
        }
    }
    errs
}

fn assert_schema(summary: &Summary) {
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(repo().join("results/schema.json")).expect("schema"),
    )
    .expect("schema is JSON");
    let v = serde_json::to_value(summary).expect("summary");
    let errs = check(&schema, &schema, &v, "$");
    assert!(
        errs.is_empty(),
        "summary does not match results/schema.json: {errs:#?}"
    );
}

#[test]
fn the_schema_checker_catches_what_it_must() {
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(repo().join("results/schema.json")).expect("schema"),
    )
    .expect("JSON");
    let bad = serde_json::json!({"schema": "other", "extra": 1});
    let errs = check(&schema, &schema, &bad, "$");
    assert!(
        errs.iter().any(|e| e.contains("missing accounting")),
        "{errs:?}"
    );
    assert!(
        errs.iter().any(|e| e.contains("unexpected key extra")),
        "{errs:?}"
    );
    assert!(
        errs.iter()
            .any(|e| e.contains("expected \"npamp-loadgen/summary/v2\"")),
        "{errs:?}"
    );
}

/// The shipped 4 MiB scenario against the embedded pair, as a user would
/// first run it: every message crosses (the pair takes up to 64 MiB).
#[test]
fn four_mib_messages_cross_the_embedded_pair() {
    let out = std::process::Command::new(BIN)
        .args(["run", "--quiet", "--duration", "1", "--concurrency", "2"])
        .arg(repo().join("scenarios/large-4mib.toml"))
        .output()
        .expect("run the binary");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let replied = text
        .lines()
        .find_map(|l| l.strip_prefix("replied"))
        .unwrap_or_default();
    assert!(
        replied.contains(" ok, 0 expected errors, 0 unexpected errors"),
        "{text}"
    );
    assert!(!replied.trim_start().starts_with("0 "), "{text}");
}

/// Two runs of the embedded pair are runs of one target: its name in the
/// summary does not carry the ports it happened to listen on, so `compare`
/// does not call them different targets.
#[test]
fn runs_of_the_embedded_pair_compare_as_one_target() {
    let dir = std::env::temp_dir().join(format!("npamp-loadgen-pair-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("mkdir");
    let scenario = dir.join("pair.toml");
    std::fs::write(
        &scenario,
        "name = \"pair\"\nduration = \"500ms\"\n[load]\nmodel = \"open\"\nrate = 100\n[mix]\n[[mix.message]]\nmethod = \"echo\"\n",
    )
    .expect("write");
    let mut targets = Vec::new();
    for run in ["a", "b"] {
        let out = std::process::Command::new(BIN)
            .args(["run", "--quiet", "--out"])
            .arg(dir.join(run))
            .arg(&scenario)
            .output()
            .expect("run the binary");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let summary: Value = serde_json::from_slice(
            &std::fs::read(dir.join(run).join("summary.json")).expect("summary"),
        )
        .expect("JSON");
        targets.push(summary["target"].as_str().expect("a target").to_owned());
    }
    assert_eq!(targets[0], targets[1]);
    assert!(
        targets[0].starts_with("embedded gateway pair"),
        "{targets:?}"
    );
    let out = std::process::Command::new(BIN)
        .arg("compare")
        .args([dir.join("a"), dir.join("b")])
        .output()
        .expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains("targets differ"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn every_shipped_scenario_parses() {
    let dir = repo().join("scenarios");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).expect("scenarios/") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "toml") {
            Scenario::load(&path).unwrap_or_else(|e| panic!("{e}"));
            n += 1;
        }
    }
    for name in [
        "quickstart",
        "mcp-tools",
        "eth-mixed",
        "notify-flood",
        "large-payloads",
        "batch",
        "error-storm",
        "ramp-to-saturation",
    ] {
        assert!(
            dir.join(format!("{name}.toml")).exists(),
            "{name}.toml is missing"
        );
    }
    assert!(n >= 8);
}

/// A short scenario: requests, notifications and batches, one expected-error method.
fn short(rate: f64) -> Scenario {
    Scenario::parse(
        &format!(
            r#"
name = "short"
duration = 1.0
warmup = 0.2
connections = 4
timeout = 5
[load]
model = "open"
rate = {rate}
[mix]
notification_share = 0.1
batch_share = 0.1
batch_size = 3
[[mix.message]]
method = "echo"
params = '{{"n": {{seq}}}}'
[[mix.message]]
method = "fail"
weight = 0.5
expect_error = true
"#
        ),
        "short",
    )
    .expect("scenario")
}

fn exact(summary: &Summary) {
    let a = &summary.accounting;
    assert_eq!(a.lost + a.duplicated + a.mismatched + a.late, 0, "{a:?}");
    assert_eq!(a.timed_out, 0, "{a:?}");
    assert!(a.transport_errors.is_empty(), "{a:?}");
    assert_eq!(a.replied, a.sent_requests, "{a:?}");
    assert_eq!(a.unexpected_errors, 0, "{a:?}");
    assert!(a.expected_errors > 0 && a.ok > 0, "{a:?}");
    assert!(a.sent_batches > 0 && a.sent_notifications > 0, "{a:?}");
}

async fn run(target: Target) -> Summary {
    let s = short(300.0);
    let described = target.describe();
    let stats = engine::run(&s, target, 7, |_, _| {}).await.expect("run");
    let summary = report::summarize(&stats, &s, &described, "test".into());
    assert_schema(&summary);
    summary
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_ws_tcp_and_lsp_targets_account_for_every_request() {
    for kind in ["http", "ws", "tcp", "lsp"] {
        let scheme = if kind == "lsp" { "tcp" } else { kind };
        let addr: MockAddr = format!("{scheme}://127.0.0.1:0").parse().expect("addr");
        let bound = mock::spawn(addr, None, Default::default())
            .await
            .expect("mock");
        let target = match bound {
            MockAddr::Http(a) => Target::Http(format!("http://{a}/").parse().expect("uri")),
            MockAddr::Ws(a) => Target::Ws(format!("ws://{a}").parse().expect("url")),
            // The mock answers in LSP's framing when spoken to in it.
            MockAddr::Tcp(a) if kind == "lsp" => {
                let session = npamp_loadgen::scenario::LspSession {
                    root_uri: None,
                    open: vec![npamp_loadgen::scenario::LspDocument {
                        uri: "file:///w/mod.py".into(),
                        language_id: "python".into(),
                        text: "x = 1\n".into(),
                    }],
                };
                Target::Lsp(a.to_string(), std::sync::Arc::new(session))
            }
            MockAddr::Tcp(a) => Target::Tcp(a.to_string()),
            _ => unreachable!("plain mocks only"),
        };
        let summary = run(target).await;
        exact(&summary);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_a_gateway_pair_and_straight_to_its_association_port() {
    let pair = EmbeddedPair::start(Scheme::Quic, Default::default())
        .await
        .expect("pair");
    let summary = run(Target::Http(pair.ingress.parse().expect("uri"))).await;
    exact(&summary);
    // npamp+quic: frames straight to the origin, pinned to nothing here.
    let origin = pair.origin.listening[0];
    let out = std::process::Command::new(BIN)
        .args([
            "run",
            "--quiet",
            "--insecure-accept-any-peer",
            "--duration",
            "1",
            "--rate",
            "200",
        ])
        .arg("--target")
        .arg(format!("npamp+{origin}"))
        .arg(repo().join("scenarios/quickstart.toml"))
        .output()
        .expect("run the binary");
    let text = String::from_utf8_lossy(&out.stdout);
    // The origin pins the embedded edge's key: a stranger is refused, and
    // the run says so (transport errors), it does not hang or pass.
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("transport"), "{text}");
}

#[test]
fn exit_codes_say_what_went_wrong() {
    let dir = std::env::temp_dir().join(format!("loadgen-exit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    // 2: a scenario with a mistake, named with its line.
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "name = \"x\"\n[load]\nmodel = \"open\"\nrate = 0\n[mix]\n[[mix.message]]\nmethod = \"echo\"\n").expect("write");
    let out = std::process::Command::new(BIN)
        .args(["run"])
        .arg(&bad)
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("line 4") && err.contains("rate"), "{err}");
    // 2 as well: command-line overrides are checked like the file; a
    // time that is no time, before anything runs; an output directory that
    // cannot be written, before the run; --duration on a ramp, which would
    // flatten it.
    let ramp = repo().join("scenarios/ramp-to-saturation.toml");
    let quickstart = repo().join("scenarios/quickstart.toml");
    for (args, says) in [
        (
            &[quickstart.to_str().unwrap(), "--rate=-5"][..],
            "must be positive",
        ),
        (
            &[quickstart.to_str().unwrap(), "--duration=1e300"],
            "expected a time",
        ),
        (
            &[quickstart.to_str().unwrap(), "--duration=5x"],
            "expected a time",
        ),
        (
            &[quickstart.to_str().unwrap(), "--out", "/dev/null"],
            "cannot create",
        ),
        (&[ramp.to_str().unwrap(), "--duration", "5s"], "flatten"),
        // Closed loop or open loop: refused, not one of them dropped.
        (
            &[
                quickstart.to_str().unwrap(),
                "--concurrency",
                "16",
                "--rate",
                "1000",
            ],
            "cannot be used with",
        ),
        // Target flags that do not fit the target (issue 54).
        (
            &[
                quickstart.to_str().unwrap(),
                "--target",
                "tcp://127.0.0.1:9",
                "-H",
                "X-Api-Key: k",
            ],
            "headers go with",
        ),
        (
            &[
                quickstart.to_str().unwrap(),
                "--header",
                "Content-Length: 5",
            ],
            "sets it itself",
        ),
        (
            &[quickstart.to_str().unwrap(), "--streams", "8"],
            "need HTTP/2",
        ),
        (
            &[
                quickstart.to_str().unwrap(),
                "--http2",
                "--streams",
                "8",
                "--concurrency",
                "4",
            ],
            "streams go with an open loop",
        ),
        (
            &[quickstart.to_str().unwrap(), "--ramp", "1...5"],
            "expected a ramp FROM..TO",
        ),
        (
            &[
                quickstart.to_str().unwrap(),
                "--target",
                "https://user:secret@127.0.0.1:9/",
            ],
            "credentials in a URL",
        ),
        (
            &[
                quickstart.to_str().unwrap(),
                "--target",
                "ws://127.0.0.1:9",
                "--http2",
            ],
            "HTTP/2 goes with",
        ),
        (
            &[quickstart.to_str().unwrap(), "--insecure"],
            "--ca and --insecure go with",
        ),
        (
            &[
                quickstart.to_str().unwrap(),
                "--bearer-file",
                "/nonexistent/token",
            ],
            "--bearer-file /nonexistent/token",
        ),
        (
            &[
                quickstart.to_str().unwrap(),
                "--target",
                "https://127.0.0.1:9/",
                "--ca",
                "/nonexistent/ca.pem",
            ],
            "--ca /nonexistent/ca.pem",
        ),
    ] {
        let started = std::time::Instant::now();
        let out = std::process::Command::new(BIN)
            .arg("run")
            .args(args)
            .output()
            .expect("run");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(
            started.elapsed() < std::time::Duration::from_secs(5),
            "{args:?} ran"
        );
    }

    // 3: an SLO no run can meet (embedded pair, 0.2 s).
    let slo = dir.join("slo.toml");
    std::fs::write(
        &slo,
        "name = \"slo\"\nduration = \"500ms\"\n[load]\nmodel = \"open\"\nrate = 100\n[mix]\n[[mix.message]]\nmethod = \"echo\"\n[slo]\nmin_throughput = 1000000\n",
    )
    .expect("write");
    let out = std::process::Command::new(BIN)
        .args(["run", "--quiet"])
        .arg(&slo)
        .output()
        .expect("run");
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );

    // 4: a server that answers with the wrong ids.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        use std::io::{BufRead, Write};
        for stream in listener.incoming().flatten() {
            let mut w = stream.try_clone().expect("clone");
            for line in std::io::BufReader::new(stream)
                .lines()
                .map_while(Result::ok)
            {
                let v: Value = serde_json::from_str(&line).unwrap_or_default();
                let id = v["id"].as_u64().unwrap_or(0) + 1_000_000;
                let _ = writeln!(w, r#"{{"jsonrpc":"2.0","id":{id},"result":1}}"#);
            }
        }
    });
    let out = std::process::Command::new(BIN)
        .args([
            "run",
            "--quiet",
            "--duration",
            "500ms",
            "--rate",
            "50",
            "--target",
        ])
        .arg(format!("tcp://{addr}"))
        .arg(&slo)
        .output()
        .expect("run");
    assert_eq!(
        out.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );

    // 6: a target that serves nothing (connection refused), even without
    // an SLO.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a port");
    let out = std::process::Command::new(BIN)
        .args([
            "run",
            "--quiet",
            "--duration",
            "300ms",
            "--rate",
            "50",
            "--target",
        ])
        .arg(format!("http://{closed}/"))
        .arg(&quickstart)
        .output()
        .expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(6), "{text}");
    assert!(text.contains("NOT SERVED no request of"), "{text}");

    // 5: compare finds a regression.
    let base = dir.join("base.json");
    let new = dir.join("new.json");
    let mut s = report::summarize(
        &tokio::runtime::Runtime::new().expect("rt").block_on(async {
            let bound = mock::spawn(
                MockAddr::Http("127.0.0.1:0".parse().expect("addr")),
                None,
                Default::default(),
            )
            .await
            .expect("mock");
            let MockAddr::Http(a) = bound else {
                unreachable!()
            };
            engine::run(
                &short(100.0),
                Target::Http(format!("http://{a}/").parse().expect("uri")),
                1,
                |_, _| {},
            )
            .await
            .expect("run")
        }),
        &short(100.0),
        "mock",
        "test".into(),
    );
    std::fs::write(&base, serde_json::to_string(&s).expect("json")).expect("write");
    s.throughput /= 2.0;
    std::fs::write(&new, serde_json::to_string(&s).expect("json")).expect("write");
    let out = std::process::Command::new(BIN)
        .arg("compare")
        .arg(&base)
        .arg(&new)
        .output()
        .expect("run");
    assert_eq!(
        out.status.code(),
        Some(5),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let out = std::process::Command::new(BIN)
        .arg("compare")
        .arg(&base)
        .arg(&base)
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0));
    // Three runs: each later one against the first; one regressed is enough.
    let out = std::process::Command::new(BIN)
        .arg("compare")
        .args([&base, &base, &new])
        .output()
        .expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(5), "{text}");
    assert_eq!(text.matches(" against ").count(), 2, "{text}");
    assert_eq!(text.matches("REGRESSION:").count(), 1, "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// npamp+quic, npamp+tls and npamp:// (negotiated): Bridge frames straight
/// to an origin's association port, no ingress in between.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn npamp_targets_send_frames_straight_to_an_origin() {
    use npamp_gateway::assoc::PeerAddr;
    use npamp_gateway::gateway::{Client, Gateway};
    use std::sync::Arc;

    let bound = mock::spawn(
        MockAddr::Http("127.0.0.1:0".parse().expect("addr")),
        None,
        Default::default(),
    )
    .await
    .expect("mock");
    let seed = |s: u8| [s; 32];
    for scheme in [Scheme::Quic, Scheme::Tls, Scheme::Npamp] {
        let origin = Gateway::builder()
            .identity_seed(seed(3))
            .insecure_accept_any_peer()
            .listen(PeerAddr {
                scheme,
                addr: "127.0.0.1:0".parse().expect("addr"),
            })
            .upstream(bound.to_string().parse().expect("an upstream URL"))
            .start()
            .await
            .expect("origin");
        let peer = origin.listening[0];
        let edge_config = Gateway::builder()
            .identity_seed(seed(4))
            .insecure_accept_any_peer()
            .peer(peer)
            .config()
            .expect("edge");
        let client = Arc::new(Client::new(&edge_config).expect("client"));
        let summary = run(Target::Npamp(client)).await;
        exact(&summary);
        let prefix = match scheme {
            Scheme::Npamp => "npamp://",
            _ => "npamp+",
        };
        assert!(summary.target.starts_with(prefix), "{}", summary.target);
        origin.shutdown().await;
    }
}

/// A deliberately faulty upstream (drops 1 % of replies, duplicates 1 %,
/// answers 1 % with a wrong id) is reported with the exact counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_faulty_upstream_is_reported_with_exact_counts() {
    use npamp_testkit::mock::{Behavior, Faults};
    use std::sync::Arc;
    let faults = Faults {
        drop: 1,
        duplicate: 1,
        wrong_id: 1,
    };
    for kind in ["tcp", "ws"] {
        let behavior = Arc::new(Behavior::new(Default::default(), 0.0, 0, faults));
        let addr: MockAddr = format!("{kind}://127.0.0.1:0").parse().expect("addr");
        let target = match mock::spawn(addr, None, behavior).await.expect("mock") {
            MockAddr::Tcp(a) => Target::Tcp(a.to_string()),
            MockAddr::Ws(a) => Target::Ws(format!("ws://{a}").parse().expect("url")),
            _ => unreachable!("tcp and ws only"),
        };
        let s = Scenario::parse(
            r#"
name = "faulty"
duration = 1.5
connections = 4
timeout = 0.5
[load]
model = "open"
rate = 1000
[mix]
[[mix.message]]
method = "echo"
params = '[{seq}]'
"#,
            "faulty",
        )
        .expect("scenario");
        let stats = engine::run(&s, target, 3, |_, _| {}).await.expect("run");
        let summary = report::summarize(&stats, &s, kind, "test".into());
        let a = &summary.accounting;
        let n = a.sent_requests;
        let count = |k: u64| (0..n).filter(|i| i % 100 == k).count() as u64;
        let (drops, dups, wrong) = (count(0), count(1), count(2));
        assert!(drops > 10, "{a:?}");
        assert_eq!(a.duplicated, dups, "{kind}: {a:?}");
        assert_eq!(a.mismatched, wrong, "{kind}: {a:?}");
        assert_eq!(a.lost, drops + wrong, "{kind}: {a:?}");
        assert_eq!(a.ok, n - drops - wrong, "{kind}: {a:?}");
        assert_eq!(a.late, 0, "{kind}: {a:?}");
        assert!(summary.accounting_failed());
    }
}

/// Server-pushed notifications (the mock's `push_every`) are not replies:
/// the accounting stays exact around them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_pushes_do_not_disturb_the_accounting() {
    use npamp_testkit::mock::Behavior;
    use std::sync::Arc;
    let mut b = Behavior::new(Default::default(), 0.0, 0, Default::default());
    b.push_every = 5;
    let addr: MockAddr = "ws://127.0.0.1:0".parse().expect("addr");
    let MockAddr::Ws(a) = mock::spawn(addr, None, Arc::new(b)).await.expect("mock") else {
        unreachable!("a WebSocket mock")
    };
    let summary = run(Target::Ws(format!("ws://{a}").parse().expect("url"))).await;
    exact(&summary);
}

/// The SVG report draws the percentile spectrum, replies per second and p99
/// per second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_svg_report_has_its_three_charts() {
    let bound = mock::spawn(
        "http://127.0.0.1:0".parse().expect("addr"),
        None,
        Default::default(),
    )
    .await
    .expect("mock");
    let MockAddr::Http(a) = bound else {
        unreachable!("an HTTP mock")
    };
    let s = short(200.0);
    let stats = engine::run(
        &s,
        Target::Http(format!("http://{a}/").parse().expect("uri")),
        1,
        |_, _| {},
    )
    .await
    .expect("run");
    let summary = report::summarize(&stats, &s, "mock", "test".into());
    let intervals = vec![
        (std::time::Duration::from_secs(1), stats.overall.clone()),
        (std::time::Duration::from_secs(2), stats.overall.clone()),
    ];
    let svg = report::svg(&summary, &stats.overall, &intervals);
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    // Spectrum; offered, replies, errors; p50, p99.
    assert_eq!(svg.matches("<polyline").count(), 6, "{svg}");
    for label in [
        "latency, ms",
        "per second",
        "latency each second, ms",
        "offered",
        "warm-up",
    ] {
        assert!(svg.contains(label), "{label}");
    }
    // Tick labels are round numbers, never 10075.00-style.
    assert!(!svg.contains(".00<"), "{svg}");
}

/// `verify_echo`: a success that is not the request's own echo (here the
/// mock pads its results, as a reply made up or cross-wired on the way
/// would differ; any method but the mock's fixed ones echoes) is counted as a wrong result and fails the accounting;
/// the true echo passes, single and in batches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_echo_catches_successes_that_are_not_the_echo() {
    use npamp_testkit::mock::Behavior;
    use std::sync::Arc;
    let s = Scenario::parse(
        r#"
name = "echo"
duration = 0.5
connections = 2
[load]
model = "open"
rate = 400
[mix]
batch_share = 0.3
batch_size = 3
[[mix.message]]
method = "get"
params = '{"n": {seq}, "r": {rand:1000}}'
verify_echo = true
"#,
        "echo",
    )
    .expect("scenario");
    for pad in [0, 8] {
        let behavior = Arc::new(Behavior::new(
            Default::default(),
            0.0,
            pad,
            Default::default(),
        ));
        let addr: MockAddr = "http://127.0.0.1:0".parse().expect("addr");
        let MockAddr::Http(a) = mock::spawn(addr, None, behavior).await.expect("mock") else {
            unreachable!("http")
        };
        let target = Target::Http(format!("http://{a}/").parse().expect("uri"));
        let stats = engine::run(&s, target, 5, |_, _| {}).await.expect("run");
        let summary = report::summarize(&stats, &s, "http", "test".into());
        let a = &summary.accounting;
        assert!(a.sent_requests > 100 && a.sent_batches > 0, "{a:?}");
        if pad == 0 {
            assert_eq!((a.wrong_result, a.ok), (0, a.sent_requests), "{a:?}");
            assert!(!summary.accounting_failed());
        } else {
            assert_eq!((a.wrong_result, a.ok), (a.sent_requests, 0), "{a:?}");
            assert!(summary.accounting_failed());
        }
    }
    // A WebSocket target cannot be checked: refused, not silently skipped.
    let e = engine::run(
        &s,
        Target::Ws("ws://127.0.0.1:9".parse().expect("url")),
        5,
        |_, _| {},
    )
    .await
    .err()
    .expect("refused");
    assert!(e.contains("verify_echo"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_targets_hold_a_session_per_connection_through_an_mcp_pair() {
    // MCP end to end: each load connection opens an MCP session at the
    // edge's HTTP ingress (initialize, notifications/initialized, then its
    // requests with Mcp-Session-Id, answered on event streams); the origin
    // holds an MCP session at the upstream, which answers with events too.
    let pair = EmbeddedPair::start_for(
        Scheme::Quic,
        Default::default(),
        npamp_gateway::bridge::ProtocolId::MCP,
    )
    .await
    .expect("pair");
    let target = Target::Mcp(pair.ingress.parse().expect("uri"));
    assert!(target.describe().starts_with("mcp+http://"));
    // MCP 2025-06-18 has no batches: the mix has none.
    let s = Scenario::parse(
        r#"
name = "mcp"
duration = 1.0
warmup = 0.2
connections = 4
timeout = 5
[load]
model = "open"
rate = 300
[mix]
notification_share = 0.1
[[mix.message]]
method = "echo"
params = '{"n": {seq}}'
verify_echo = true
[[mix.message]]
method = "fail"
weight = 0.5
expect_error = true
"#,
        "mcp",
    )
    .expect("scenario");
    let described = target.describe();
    let stats = engine::run(&s, target, 7, |_, _| {}).await.expect("run");
    let summary = report::summarize(&stats, &s, &described, "test".into());
    assert_schema(&summary);
    let a = &summary.accounting;
    assert_eq!(
        a.lost + a.duplicated + a.mismatched + a.late + a.wrong_result,
        0,
        "{a:?}"
    );
    assert!(
        a.transport_errors.is_empty() && a.http_status.is_empty(),
        "{a:?}"
    );
    assert_eq!((a.timed_out, a.unexpected_errors), (0, 0), "{a:?}");
    assert_eq!(a.replied, a.sent_requests, "{a:?}");
    assert!(
        a.ok > 200 && a.expected_errors > 0 && a.sent_notifications > 0,
        "{a:?}"
    );
    // One association per session (4), and no other: the pool of the
    // stateless path was never needed.
    let opened = pair.edge.metrics().associations_opened();
    assert_eq!(opened, 4, "associations the edge opened");
    // Each connection ended its session (DELETE): its association closed.
    let live = || pair.edge.metrics().associations_open();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while live() > 0 && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(live(), 0, "associations still open at the edge");
    assert_eq!(
        pair.origin
            .metrics()
            .upstream_requests
            .load(std::sync::atomic::Ordering::Relaxed),
        a.sent_requests + 4,
        "each request, and each session's initialize"
    );
}

/// `--duration` bounds an overloaded open-loop run (issue 54: 30 000/s for
/// 5 s ran about 10 s, sending what fell behind after the schedule ended):
/// against a target of 40 requests/s (2 connections, 50 ms each: the
/// mock's latency applies to methods it does not know) offered
/// 2000/s for 1 s, the run ends with its schedule plus the drain, every
/// request it sent is answered, and what it could not send before the end
/// is counted as dropped and fails the SLOs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overloaded_run_ends_with_its_schedule_and_counts_what_it_dropped() {
    use std::time::{Duration, Instant};
    let a = http_mock_answering_after(50).await;
    let s = Scenario::parse(
        r#"
name = "overloaded"
duration = 1
warmup = 0
connections = 2
timeout = 2
[load]
model = "open"
rate = 2000
[mix]
[[mix.message]]
method = "slow_echo"
[slo]
max_error_rate = 0.5
"#,
        "overloaded",
    )
    .expect("scenario");
    let target = Target::Http(format!("http://{a}/").parse().expect("uri"));
    let began = Instant::now();
    let run = engine::run(&s, target, 1, |_, _| {});
    // Unbounded, it would send all 2000 at 40/s: 50 s.
    let stats = tokio::time::timeout(Duration::from_secs(20), run)
        .await
        .expect("the run ended")
        .expect("run");
    let took = began.elapsed();
    let bound = s.measured() + engine::SEND_GRACE + s.timeout() + engine::DRAIN_GRACE;
    assert!(took < bound, "took {took:?}, bound {bound:?}");
    let summary = report::summarize(&stats, &s, "mock", "test".into());
    let a = &summary.accounting;
    // Every slot of the schedule was sent or dropped; all that was sent
    // was answered.
    assert!(
        (1999..=2000).contains(&(a.sent_requests + a.dropped)),
        "{a:?}"
    );
    assert!(a.dropped > 1000, "{a:?}");
    assert_eq!(
        (a.replied, a.lost, a.timed_out),
        (a.sent_requests, 0, 0),
        "{a:?}"
    );
    assert_eq!(stats.dropped_measured, a.dropped);
    assert!(!summary.generator_kept_schedule);
    // Counted where it is read: the table, the JSON, the checks (dropped
    // requests fail max_error_rate, so the exit code is 3).
    assert!(
        summary
            .table()
            .contains(&format!("DROPPED    {} requests", a.dropped))
    );
    let json = serde_json::to_value(&summary).expect("json");
    assert_eq!(json["accounting"]["dropped"], a.dropped);
    assert!(!summary.pass, "{:?}", summary.slo);
    // Seconds by intended send time: only the schedule's one second.
    assert_eq!(summary.per_second.len(), 1, "{:?}", summary.per_second);
    assert_eq!(summary.per_second[0][0], a.replied);
}

/// A mock HTTP upstream that answers methods it does not know after `ms`.
async fn http_mock_answering_after(ms: u64) -> std::net::SocketAddr {
    let latency = format!("fixed:{ms}").parse().expect("latency");
    let behavior = std::sync::Arc::new(npamp_testkit::mock::Behavior::new(
        latency,
        0.0,
        0,
        Default::default(),
    ));
    let bound = mock::spawn("http://127.0.0.1:0".parse().expect("addr"), None, behavior)
        .await
        .expect("mock");
    let MockAddr::Http(a) = bound else {
        unreachable!("an HTTP mock")
    };
    a
}

/// Ctrl-C ends a run with what it measured (issue 54: it exited 130 with
/// no summary and an empty --out): SIGINT 1.5 s into a 60 s run stops the
/// sends; the table is printed, --out written, the summary marked
/// interrupted with the time that ran, and the exit code is 130, within a
/// few seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_run_prints_and_writes_what_it_measured() {
    use std::time::{Duration, Instant};
    let a = http_mock_answering_after(1).await;
    let dir = std::env::temp_dir().join(format!("loadgen-interrupted-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let scenario = dir.join("long.toml");
    std::fs::write(
        &scenario,
        r#"
name = "long"
duration = 60
warmup = 0.5
connections = 2
[load]
model = "open"
rate = 200
[mix]
[[mix.message]]
method = "echo"
"#,
    )
    .expect("scenario");
    let out = dir.join("out");
    let began = Instant::now();
    let mut child = std::process::Command::new(BIN)
        .args([
            "run",
            "--quiet",
            "--target",
            &format!("http://{a}/"),
            "--out",
        ])
        .arg(&out)
        .arg(&scenario)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start the binary");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let kill = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(kill.success());
    // Bounded: at most 100 looks, 100 ms apart.
    let mut ended = false;
    for _ in 0..100 {
        if child.try_wait().expect("wait").is_some() {
            ended = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if !ended {
        let _ = child.kill();
    }
    let output = child.wait_with_output().expect("output");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    assert!(ended, "still running 10 s after SIGINT: {stderr}");
    assert!(began.elapsed() < Duration::from_secs(12));
    assert_eq!(output.status.code(), Some(130), "{stdout}\n{stderr}");
    assert!(stdout.contains("INTERRUPTED after"), "{stdout}\n{stderr}");
    let summary: Value = serde_json::from_slice(
        &std::fs::read(out.join("summary.json")).expect("summary.json written"),
    )
    .expect("summary.json");
    assert_eq!(summary["interrupted"], true, "{summary}");
    let a = &summary["accounting"];
    let sent = a["sent_requests"].as_u64().expect("sent_requests");
    let replied = a["replied"].as_u64().expect("replied");
    assert!(sent > 100 && replied > 100, "{a}");
    assert!(
        stdout.contains(&format!("sent       {sent} requests")),
        "{stdout}"
    );
    // The measured part ends at the interrupt: about 1 s of it, and the
    // rate is over that second, not over the 60 s planned.
    let measured = summary["duration_s"].as_f64().expect("duration_s");
    assert!((0.5..3.0).contains(&measured), "{measured}");
    let achieved = summary["throughput"].as_f64().expect("throughput");
    assert!(achieved > 100.0, "{achieved}");
    for f in ["latency.hlog", "histograms.hlog"] {
        assert!(out.join(f).exists(), "{f}");
    }
    let page = std::fs::read_to_string(out.join("report.html")).expect("report.html");
    assert!(page.contains("INTERRUPTED"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// `run` with no scenario file (issue 54): `--target URL --method NAME
/// [--params JSON]`, a count (`-n`), rates as `N/s` and `N/m`, a linear
/// `--ramp`, the summary as JSON on stdout; what contradicts itself is
/// refused, never one of it dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_liner_needs_no_scenario_file() {
    let a = http_mock_answering_after(0).await;
    let url = format!("http://{a}/");
    let json = |extra: &[&str]| {
        let out = std::process::Command::new(BIN)
            .args([
                "run", "--quiet", "--json", "--target", &url, "--method", "echo",
            ])
            .args(extra)
            .output()
            .expect("run");
        assert_eq!(
            out.status.code(),
            Some(0),
            "{extra:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        // The table goes to stderr; stdout is the summary alone.
        assert!(String::from_utf8_lossy(&out.stderr).contains("latency ms"));
        serde_json::from_slice::<Value>(&out.stdout).expect("stdout is the summary")
    };
    let sent = |v: &Value| v["accounting"]["sent_requests"].as_u64();
    // Closed loop, a count: exactly that many, every one answered.
    let v = json(&[
        "--params",
        r#"{"n": {seq}}"#,
        "-n",
        "300",
        "--concurrency",
        "4",
    ]);
    assert_eq!(sent(&v), Some(300), "{v}");
    assert_eq!(v["accounting"]["ok"].as_u64(), Some(300), "{v}");
    assert!(v["duration_s"].as_f64().is_some_and(|d| d < 30.0), "{v}");
    // A rate per minute and a count: the count makes the duration.
    let v = json(&["--rate", "1200/m", "-n", "30"]);
    assert_eq!((sent(&v), v["duration_s"].as_f64()), (Some(30), Some(1.5)));
    // A linear ramp: 50/s to 150/s over 2 s places 200, the offered
    // rate of each second rising.
    let v = json(&["--ramp", "50/s..150/s", "--duration", "2s"]);
    assert_eq!(sent(&v), Some(200), "{v}");
    let offered: Vec<f64> = v["offered_per_second"]
        .as_array()
        .expect("offered per second")
        .iter()
        .filter_map(Value::as_f64)
        .collect();
    assert_eq!(offered, [75.0, 125.0]);
    // A series per second, of the schedule's length alike.
    assert_eq!(v["per_second"].as_array().map(Vec::len), Some(2), "{v}");

    let quickstart = repo().join("scenarios/quickstart.toml");
    let quickstart = quickstart.to_str().expect("path");
    for (args, says) in [
        (&["--method", "echo", quickstart][..], "cannot be used with"),
        (&["--params", "{}"], "--method"),
        (&["--method", "echo", "--params", "{nope"], "--params"),
        (&["--method", "echo", "--rate", "10/d"], "per s, m or h"),
        (
            &["--method", "echo", "--rate", "5", "--ramp", "1..2"],
            "cannot be used with",
        ),
        (
            &[
                "--method",
                "echo",
                "-n",
                "5",
                "--rate",
                "5",
                "--duration",
                "2",
            ],
            "the count makes the duration",
        ),
        (
            &["--method", "echo", "-n", "5", "--ramp", "1..2"],
            "cannot be used with",
        ),
        (&[quickstart, "-n", "0", "--concurrency", "2"], "requests"),
        (
            &[
                "--method",
                "echo",
                "--concurrency",
                "8",
                "--connections",
                "4",
            ],
            "a connection of its own",
        ),
        (
            &[
                repo()
                    .join("scenarios/ramp-to-saturation.toml")
                    .to_str()
                    .expect("path"),
                "-n",
                "5",
            ],
            "is a ramp",
        ),
    ] {
        let out = std::process::Command::new(BIN)
            .arg("run")
            .args(args)
            .output()
            .expect("run");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

/// `replay` (issue 54): a capture, as a gateway's `--capture` writes it,
/// sent again at its own times (here twice as fast) with exact accounting;
/// answers in it are not replayed, and a file that is no capture, or a
/// speed that is none, is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capture_is_replayed_at_its_times() {
    let a = http_mock_answering_after(0).await;
    let dir = std::env::temp_dir().join(format!("loadgen-replay-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    // 200 sends 5 ms apart (199 gaps: 0.995 s): requests, every tenth a
    // notification, every twentieth a batch of two requests and a
    // notification; one answer, which is not replayed.
    let mut capture = String::from("{\"npamp_capture\":1,\"started_unix_ms\":1}\n");
    let mut requests = 0;
    for k in 0..200u64 {
        let at = 7_000_000 + k * 5000;
        let message = if k % 20 == 0 {
            requests += 2;
            format!(
                r#"[{{"jsonrpc":"2.0","id":{k},"method":"echo","params":[{k}]}},{{"jsonrpc":"2.0","method":"note"}},{{"jsonrpc":"2.0","id":"b{k}","method":"echo","params":{{"k":{k}}}}}]"#
            )
        } else if k % 10 == 0 {
            r#"{"jsonrpc":"2.0","method":"note","params":[]}"#.to_owned()
        } else {
            requests += 1;
            format!(r#"{{"jsonrpc":"2.0","id":{k},"method":"echo","params":[{k},"x"]}}"#)
        };
        capture.push_str(&format!(
            "{{\"at_us\":{at},\"method\":null,\"message\":{message}}}\n"
        ));
    }
    capture.push_str("{\"at_us\":9000000,\"method\":null,\"message\":{\"jsonrpc\":\"2.0\",\"id\":4,\"result\":1}}\n");
    let file = dir.join("capture.jsonl");
    std::fs::write(&file, &capture).expect("write");
    let url = format!("http://{a}/");
    let out = std::process::Command::new(BIN)
        .args([
            "replay", "--quiet", "--json", "--speed", "2x", "--target", &url,
        ])
        .arg(&file)
        .output()
        .expect("replay");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("1 messages that are answers"), "{err}");
    let v: Value = serde_json::from_slice(&out.stdout).expect("the summary");
    let acc = &v["accounting"];
    assert_eq!(acc["sent_requests"].as_u64(), Some(requests), "{acc}");
    assert_eq!(acc["ok"].as_u64(), Some(requests), "{acc}");
    assert_eq!(acc["sent_notifications"].as_u64(), Some(20), "{acc}");
    assert_eq!(acc["sent_batches"].as_u64(), Some(10), "{acc}");
    // At 2x: 200 sends over 0.4975 s, in a run of 0.5 s (a send's share
    // of the rate after the last), 400 sends a second.
    let duration = v["duration_s"].as_f64().expect("duration");
    assert!((duration - 0.5).abs() < 1e-6, "{duration}");
    let offered = v["rates"]["offered"].as_f64().expect("offered");
    assert!((offered - requests as f64 / 0.5).abs() < 1e-6, "{offered}");
    assert!(
        v["scenario"]
            .as_str()
            .is_some_and(|s| s.contains("capture.jsonl at 2x")),
        "{}",
        v["scenario"]
    );

    let not_a_capture = dir.join("not.jsonl");
    std::fs::write(&not_a_capture, "{\"at_us\":1}\n").expect("write");
    for (args, says) in [
        (
            vec![file.to_str().expect("path"), "--speed", "0x"],
            "a speed is above 0",
        ),
        (
            vec![not_a_capture.to_str().expect("path")],
            "line 1: not a capture",
        ),
        (
            vec![file.to_str().expect("path"), "--slo", "p50<5ms"],
            "p99 and errors",
        ),
    ] {
        let out = std::process::Command::new(BIN)
            .arg("replay")
            .args(&args)
            .output()
            .expect("replay");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
    let _ = std::fs::remove_dir_all(dir);
}
