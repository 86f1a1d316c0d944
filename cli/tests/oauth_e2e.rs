//! OAuth end to end with software nobody here wrote (issue 53): a real
//! authorization server from npm (`oidc-provider`, issuing JWT access tokens
//! for RFC 8707 resource indicators; `cli/tests/oauth/as.mjs`), the MCP
//! Python SDK's client with its own OAuth providers, and MCP servers on the
//! SDK's server classes (`cli/tests/oauth/server.py`), through a pair.
//!
//! - The edge as the resource server (`--oauth-issuer`): the client, given
//!   only the edge's URL, gets the 401, finds the authorization server in
//!   the edge's RFC 9728 metadata, gets a token (client credentials, and
//!   the authorization code flow with dynamic registration and PKCE, its
//!   browser step driven by the script) and calls tools through the pair.
//!   oidc-provider's tokens for another resource, or without the scope, are
//!   refused with the status and challenge the specs name.
//! - The upstream as the resource server (`--forward-authorization`): the
//!   same client, the same flows, the token checked by the server behind
//!   the pair.
//!
//! `.ci/oauth-tools.sh` installs what it drives into `target/oauth-tools`
//! (`NPAMP_OAUTH_TOOLS` elsewhere); without it the test says loudly that it
//! skipped.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use support::*;
use tokio::process::{Child, Command};

/// Where `.ci/oauth-tools.sh` installs oidc-provider and the MCP SDK.
fn tools() -> PathBuf {
    std::env::var_os("NPAMP_OAUTH_TOOLS").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/oauth-tools"),
        PathBuf::from,
    )
}

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/oauth")
        .join(name)
}

/// A port nobody listens on now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Waits until `url` answers (any status), at most 30 s.
async fn answers(url: &str) {
    for _ in 0..300 {
        if tokio::net::TcpStream::connect(
            url.trim_start_matches("http://")
                .split('/')
                .next()
                .unwrap_or_default(),
        )
        .await
        .is_ok()
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{url} never answered");
}

/// oidc-provider on a port of its own: the issuer's URL.
async fn authorization_server(tools: &Path) -> (Child, String) {
    // ESM resolves a package from the script's own folder: it runs there.
    let at = tools.join("npm/as.mjs");
    std::fs::copy(script("as.mjs"), &at).expect("as.mjs");
    let port = free_port();
    let child = Command::new("node")
        .arg(&at)
        .arg(port.to_string())
        .env("AS_SCOPES", "mcp:tools")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("node");
    let issuer = format!("http://127.0.0.1:{port}");
    answers(&issuer).await;
    (child, issuer)
}

/// An MCP server on the SDK's classes at `port`, with `args`.
async fn mcp_server(tools: &Path, port: u16, args: &[&str]) -> (Child, String) {
    let child = Command::new(tools.join("venv/bin/python"))
        .arg(script("server.py"))
        .arg(port.to_string())
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("python");
    let url = format!("http://127.0.0.1:{port}/mcp");
    answers(&url).await;
    (child, url)
}

/// The SDK's client against `url` (its `auto` mode, which probes
/// `server/discover` first, unless `args` say `--legacy`): what it
/// printed, or why it failed.
async fn client(tools: &Path, url: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(tools.join("venv/bin/python"))
        .arg(script("client.py"))
        .arg(url)
        .args(["--timeout", "60"])
        .args(args)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(90), out)
        .await
        .map_err(|_| "client.py ran over 90 s".to_owned())?
        .map_err(|e| format!("client.py: {e}"))?;
    let printed = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        return Err(format!(
            "client.py {args:?}: {}\n{printed}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(printed)
}

/// A token of the issuer's for `resource` with `scope` (client
/// credentials, as `curl` would get it).
async fn token(issuer: &str, resource: &str, scope: &str) -> String {
    let form = format!(
        "grant_type=client_credentials&scope={scope}&resource={}",
        resource.replace(':', "%3A").replace('/', "%2F")
    );
    let (status, text) = post_headers(
        &format!("{issuer}/token"),
        &form,
        &[
            ("content-type", "application/x-www-form-urlencoded"),
            // e2e-client:e2e-secret, as.mjs's client.
            ("authorization", "Basic ZTJlLWNsaWVudDplMmUtc2VjcmV0"),
        ],
    )
    .await;
    assert_eq!(status, 200, "{text}");
    parse(&text)["access_token"]
        .as_str()
        .expect("an access token")
        .to_owned()
}

/// Whether the tools are there; says loudly when not.
fn installed(tools: &Path) -> bool {
    let there = tools.join("venv/bin/python").exists()
        && tools.join("npm/node_modules/oidc-provider").exists()
        && std::process::Command::new("node")
            .arg("--version")
            .output()
            .is_ok();
    if !there {
        eprintln!(
            "==== SKIPPED: oidc-provider or the MCP Python SDK is not in {} (run .ci/oauth-tools.sh) ====",
            tools.display()
        );
    }
    there
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mcp_python_sdk_gets_a_token_from_oidc_provider_and_calls_tools_through_the_pair() {
    let tools = tools();
    if !installed(&tools) {
        return;
    }
    let (_as, issuer) = authorization_server(&tools).await;

    // The edge as the resource server, in front of an open MCP server.
    let (_open, open_url) = mcp_server(&tools, free_port(), &[]).await;
    let edge_port = free_port();
    let edge_url = format!("http://127.0.0.1:{edge_port}/mcp");
    let ingress = format!("http://127.0.0.1:{edge_port}");
    let pair = Pair::start(PairOptions {
        upstream: Up::Given,
        origin_extra: &["--protocol", "mcp", "--upstream", &open_url],
        edge_extra: &[
            "--protocol",
            "mcp",
            "--ingress",
            &ingress,
            "--oauth-issuer",
            &issuer,
            "--oauth-audience",
            &edge_url,
            "--oauth-scope",
            "mcp:tools",
        ],
        ingresses: &[],
        ..PairOptions::default()
    })
    .await;
    let printed = client(&tools, &edge_url, &["--issuer", &issuer])
        .await
        .unwrap_or_else(|e| panic!("client credentials through an OAuth edge: {e}"));
    assert!(
        printed.contains("tools/call:") && printed.contains("echo: hello"),
        "{printed}"
    );
    let printed = client(
        &tools,
        &edge_url,
        &[
            "--legacy",
            "--grant",
            "authorization_code",
            "--tool",
            "add",
            "--args",
            r#"{"a":2,"b":3}"#,
        ],
    )
    .await
    .unwrap_or_else(|e| panic!("authorization code through an OAuth edge: {e}"));
    assert!(printed.contains("\"text\":\"5\""), "{printed}");

    // oidc-provider's tokens the edge must refuse: for another resource,
    // without the scope.
    let initialize = json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{
        "protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}});
    let metadata = format!("http://127.0.0.1:{edge_port}/.well-known/oauth-protected-resource/mcp");
    for (resource, scope, status, says) in [
        (
            "http://127.0.0.1:1/elsewhere",
            "mcp:tools",
            401,
            "error=\"invalid_token\"",
        ),
        (edge_url.as_str(), "", 403, "error=\"insufficient_scope\""),
    ] {
        let t = token(&issuer, resource, scope).await;
        let (got, challenge) = refusal(&edge_url, &t, &initialize).await;
        assert_eq!(got, status, "{resource} {scope:?}: {challenge}");
        assert!(
            challenge.contains(says) && challenge.contains(&metadata),
            "{challenge}"
        );
    }
    drop(pair);

    // The upstream as the resource server, behind an edge that forwards:
    // tokens are issued for the edge's public URL, which the server takes.
    let edge_port = free_port();
    let public = format!("http://127.0.0.1:{edge_port}/mcp");
    let ingress = format!("http://127.0.0.1:{edge_port}");
    let (_guarded, guarded_url) = mcp_server(
        &tools,
        free_port(),
        &["--issuer", &issuer, "--resource", &public],
    )
    .await;
    let _pair = Pair::start(PairOptions {
        upstream: Up::Given,
        origin_extra: &["--protocol", "mcp", "--upstream", &guarded_url],
        edge_extra: &[
            "--protocol",
            "mcp",
            "--ingress",
            &ingress,
            "--forward-authorization",
            "--public-url",
            &public,
        ],
        ingresses: &[],
        ..PairOptions::default()
    })
    .await;
    for args in [
        &["--issuer", issuer.as_str()][..],
        &["--legacy", "--grant", "authorization_code"],
    ] {
        let printed = client(&tools, &public, args)
            .await
            .unwrap_or_else(|e| panic!("through a forwarding edge ({args:?}): {e}"));
        assert!(
            printed.contains("echo: hello") && printed.contains("scopes=['mcp:tools']"),
            "{printed}"
        );
    }
}

/// A POST of `body` with `token`: its status and `WWW-Authenticate`.
async fn refusal(url: &str, token: &str, body: &Value) -> (u16, String) {
    let (status, challenge, _, _) =
        crate::oauth::send(url, Some(token), None, &body.to_string()).await;
    (status, challenge)
}
