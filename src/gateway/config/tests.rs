//! The options as a user gives them: through clap (a command line) and a
//! TOML file, as `serve` reads them.

use std::time::Duration;

use super::*;
use crate::gateway::{HedgeAfter, Upstream};

/// A command line of `serve`'s options, read as `serve` reads it.
fn cli(args: &[&str]) -> Result<Sourced, ConfigError> {
    let command = <GatewayOptions as clap::Args>::augment_args(
        clap::Command::new("serve").no_binary_name(true),
    );
    let matches = command
        .try_get_matches_from(args)
        .map_err(|e| ConfigError {
            at: "command line".into(),
            message: e.to_string(),
        })?;
    Sourced::from_matches(&matches)
}

fn resolve(args: &[&str]) -> Result<GatewayConfig, ConfigError> {
    cli(args)?.resolve()
}

/// An edge's flags with `more`.
fn edge(more: &[&str]) -> Result<GatewayConfig, ConfigError> {
    let mut args = vec![
        "--insecure-accept-any-peer",
        "--ingress",
        "http://127.0.0.1:0",
        "--peer",
        "quic://127.0.0.1:7000",
    ];
    args.extend_from_slice(more);
    resolve(&args)
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("npamp-config-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Writes `text` as `NAME.toml` and returns its path.
fn file(name: &str, text: &str) -> String {
    let path = temp_dir(name).join(format!("{name}.toml"));
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

#[test]
fn paths_in_a_config_file_are_taken_from_its_directory() {
    let dir = temp_dir("relative");
    let seed = [7u8; 32];
    std::fs::write(dir.join("id.key"), hex::encode(seed)).unwrap();
    let path = file(
        "relative",
        "listen = [\"quic://127.0.0.1:0\"]\nidentity = \"id.key\"\ninsecure-accept-any-peer = true\n",
    );
    // The working directory is not the file's.
    assert_ne!(std::env::current_dir().ok(), Some(dir.clone()));
    let o = cli(&["--config", &path]).unwrap();
    for config in [o.resolve(), o.resolve_for(Command::Serve)] {
        let config = config.expect("identity next to the file");
        assert_eq!(*config.endpoint.identity_seed, seed);
    }
    assert_eq!(o.file(), Some(Path::new(&path)));
    // A relative path on the command line stays relative to the
    // working directory.
    let e = cli(&["--config", &path, "--identity", "id.key"])
        .unwrap()
        .resolve()
        .unwrap_err();
    assert_eq!(e.at, "--identity");
    // Read in code, the file is the same.
    let read = Sourced::read(Path::new(&path)).unwrap().resolve().unwrap();
    assert_eq!(*read.endpoint.identity_seed, seed);
}

#[test]
fn an_empty_serve_has_nothing_to_do_and_connect_refuses_what_only_serve_does() {
    let e = cli(&[]).unwrap().resolve_for(Command::Serve).unwrap_err();
    assert!(e.message.starts_with("nothing to do"), "{e}");
    let connect = [
        "--peer",
        "quic://127.0.0.1:4433",
        "--insecure-accept-any-peer",
    ];
    assert!(cli(&connect).unwrap().resolve_for(Command::Connect).is_ok());
    let with = |more: &[&str]| {
        let args: Vec<&str> = connect.iter().chain(more).copied().collect();
        cli(&args).unwrap().resolve_for(Command::Connect)
    };
    let e = with(&["--metrics", "127.0.0.1:9090"]).unwrap_err();
    assert_eq!(e.at, "--metrics");
    assert!(e.message.contains("belongs to `serve`"), "{e}");
    let path = file("connect", "protocol = \"mcp\"\nupstream-cmd = \"cat\"\n");
    let e = with(&["--config", &path]).unwrap_err();
    assert!(e.at.ends_with("line 2: key `upstream-cmd`"), "{e}");
    let e = cli(&["--insecure-accept-any-peer"])
        .unwrap()
        .resolve_for(Command::Connect)
        .unwrap_err();
    assert_eq!(e.at, "--peer");
    // Every serve-only id is a field clap knows.
    let ids: Vec<_> = <GatewayOptions as clap::Args>::augment_args(clap::Command::new("t"))
        .get_arguments()
        .map(|a| a.get_id().to_string())
        .collect();
    for id in GatewayOptions::SERVE_ONLY {
        assert!(ids.iter().any(|i| i == id), "{id}");
    }
}

#[test]
fn file_keys_are_flag_names_and_flags_win() {
    let path = file(
        "keys",
        "listen = [\"quic://127.0.0.1:0\"]\nupstream = \"http://127.0.0.1:8545\"\ninsecure-accept-any-peer = true\nrequest-timeout = 2.5\nidle-timeout = \"2m\"\npool-size = 3\nmax-batch = 9\nupstream-connect-timeout = \"750ms\"\n",
    );
    let c = resolve(&["--config", &path, "--pool-size", "7"]).expect("valid");
    assert_eq!(c.listen.len(), 1);
    assert_eq!(c.limits.request_timeout, Duration::from_millis(2500));
    assert_eq!(
        c.limits.upstream_connect_timeout,
        Duration::from_millis(750)
    );
    assert_eq!(c.limits.idle_timeout, Duration::from_secs(120));
    assert_eq!(c.limits.pool_size, 7, "the flag wins");
    assert_eq!(
        c.limits.max_batch, 9,
        "the file's value stays where no flag is given"
    );
    assert!(c.upstream.as_ref().and_then(|u| u.http_uri()).is_some());
    assert!(matches!(
        c.endpoint.trust.current(),
        crate::handshake::Trust::InsecureAcceptAny
    ));
}

#[test]
fn errors_name_the_key_and_the_line_or_the_flag() {
    // A value the file gets wrong: toml's error, with its line.
    let path = file(
        "lines",
        "insecure-accept-any-peer = true\n\npeer = \"udp://x\"\ningress = [\"http://127.0.0.1:0\"]\n",
    );
    let e = resolve(&["--config", &path]).unwrap_err();
    assert!(
        e.to_string().contains("line 3") && e.message.contains("udp"),
        "{e}"
    );
    let path = file("unknown", "insecure-accept-any-peer = true\npoolsize = 3\n");
    let e = resolve(&["--config", &path]).unwrap_err().to_string();
    assert!(e.contains("line 2") && e.contains("poolsize"), "{e}");
    let path = file(
        "big",
        "insecure-accept-any-peer = true\nmax-body = \"big\"\n",
    );
    let e = resolve(&["--config", &path]).unwrap_err().to_string();
    assert!(e.contains("line 2") && e.contains("at least 1"), "{e}");
    // A check across options: the line of the key it names.
    let path = file(
        "across",
        "insecure-accept-any-peer = true\ningress = [\"http://127.0.0.1:0\"]\n\n\nmemory-budget = 1000\npeer = \"quic://127.0.0.1:1\"\n",
    );
    let e = resolve(&["--config", &path]).unwrap_err();
    assert!(e.at.ends_with("line 5: key `memory-budget`"), "{e}");
    // The same key on the command line as well: the flag is named.
    let e = resolve(&["--config", &path, "--memory-budget", "2000"]).unwrap_err();
    assert_eq!(e.at, "--memory-budget");
    // A value a flag gets wrong: clap's error, naming the flag.
    for (args, says) in [
        (
            &["--listen", "npamp://127.0.0.1:0/tools"][..],
            "no resource path",
        ),
        (&["--ingress", "ftp://127.0.0.1:1"], "ftp"),
        (&["--stall-timeout", "5x"], "expected a time above 0"),
        (
            &["--upstream-connect-timeout", "0s"],
            "expected a time above 0",
        ),
        (&["--max-batch", "0"], "at least 1"),
        (&["--congestion", "reno"], "cubic or bbr"),
        (&["--protocol", "soap"], "mcp, a2a, jsonrpc or lsp"),
        (&["--trust", "ab"], "64 hex digits"),
        (&["--rate-limit", "0"], "above 0"),
    ] {
        let e = cli(args).unwrap_err().to_string();
        assert!(e.contains(args[0]) && e.contains(says), "{args:?}: {e}");
    }
    let e = cli(&[]).unwrap().resolve().unwrap_err();
    assert!(e.message.contains("--trust"), "{e}");
}

#[test]
fn options_set_in_code_name_their_flag_and_refuse_a_file() {
    let o = GatewayOptions {
        insecure_accept_any_peer: true,
        ingress: vec!["http://127.0.0.1:0".parse().unwrap()],
        memory_budget: Some(1000),
        peer: vec!["quic://127.0.0.1:7000".parse().unwrap()],
        ..Default::default()
    };
    assert_eq!(o.resolve().unwrap_err().at, "--memory-budget");
    let e = GatewayOptions {
        config: Some("gw.toml".into()),
        ..o
    }
    .resolve()
    .unwrap_err();
    assert_eq!(e.at, "--config");
}

#[test]
fn bearer_tokens_need_an_ingress_that_can_carry_them() {
    let dir = temp_dir("tokens");
    let tokens = dir.join("tokens");
    std::fs::write(&tokens, "abcdefghijklmnopqrstuvwxyz\n").unwrap();
    let tokens = tokens.display().to_string();
    let o = |ingress: &[&str], more: &[&str]| {
        let mut args = vec![
            "--insecure-accept-any-peer",
            "--peer",
            "quic://127.0.0.1:7000",
            "--auth-token-file",
            &tokens,
        ];
        for i in ingress {
            args.extend(["--ingress", i]);
        }
        args.extend_from_slice(more);
        resolve(&args)
    };
    let c = o(&["http://127.0.0.1:0", "ws://127.0.0.1:0"], &[]).expect("HTTP and WS carry tokens");
    assert!(c.tokens.is_some());
    let e = o(&["http://127.0.0.1:0", "tcp://127.0.0.1:0"], &[]).unwrap_err();
    assert_eq!(e.at, "--auth-token-file");
    assert!(e.message.contains("tcp://"), "{e}");
    // Over TLS, a line client can be authenticated by certificate.
    let cert = ["--ingress-cert", "cert.pem", "--ingress-key", "key.pem"];
    let e = o(&["tls+tcp://127.0.0.1:0"], &cert).unwrap_err();
    assert!(e.message.contains("--ingress-client-ca"), "{e}");
    let mut with_ca = cert.to_vec();
    with_ca.extend(["--ingress-client-ca", "ca.pem"]);
    let c = o(&["tls+tcp://127.0.0.1:0"], &with_ca).expect("certificates for lines");
    let t = c.ingress_tls.expect("TLS settings");
    assert!(t.certless, "token holders may come without a certificate");
    std::fs::write(dir.join("tokens"), "short\n").unwrap();
    let e = o(&["http://127.0.0.1:0"], &[]).unwrap_err();
    assert!(e.message.contains("at least 16"), "{e}");
}

#[test]
fn tls_ingresses_and_their_certificates_come_together() {
    let o = |ingress: &str, cert: bool, client_ca: bool| {
        let mut args = vec![
            "--insecure-accept-any-peer",
            "--peer",
            "quic://127.0.0.1:7000",
            "--ingress",
            ingress,
        ];
        if cert {
            args.extend(["--ingress-cert", "cert.pem", "--ingress-key", "key.pem"]);
        }
        if client_ca {
            args.extend(["--ingress-client-ca", "ca.pem"]);
        }
        resolve(&args)
    };
    let e = o("https://127.0.0.1:0", false, false).unwrap_err();
    assert!(
        e.message.contains("needs --ingress-cert and --ingress-key"),
        "{e}"
    );
    let e = o("http://127.0.0.1:0", true, false).unwrap_err();
    assert_eq!(e.at, "--ingress-cert");
    let e = o("http://127.0.0.1:0", false, true).unwrap_err();
    assert_eq!(e.at, "--ingress-client-ca");
    let c = o("wss://127.0.0.1:0", true, true).expect("wss");
    let t = c.ingress_tls.expect("TLS settings");
    assert!(
        !t.certless,
        "without tokens a client CA makes certificates required"
    );
    assert!(c.ingress[0].is_tls());
    assert!(
        o("http://127.0.0.1:0", false, false)
            .unwrap()
            .ingress_tls
            .is_none()
    );
}

#[test]
fn upstream_headers_are_checked_and_kept_secret() {
    let o = |upstream: Option<&str>, headers: &[&str]| {
        let mut args = vec![
            "--insecure-accept-any-peer",
            "--listen",
            "quic://127.0.0.1:0",
        ];
        if let Some(u) = upstream {
            args.extend(["--upstream", u]);
        }
        for h in headers {
            args.extend(["--upstream-header", h]);
        }
        cli(&args).and_then(|s| s.resolve())
    };
    let up = Some("https://rpc.example:443/");
    let c = o(up, &["Authorization: Bearer s3cret", "X-Api-Key:k"]).expect("valid");
    assert_eq!(c.upstream_headers.len(), 2);
    assert_eq!(c.upstream_headers[1].1, "k");
    assert!(!format!("{:?}", c.upstream_headers).contains("s3cret"));
    for (bad, says) in [
        ("Authorization Bearer x", "NAME: VALUE"),
        ("Bad Name: x", "not a header name"),
        ("Content-Type: text/plain", "set by the gateway"),
        ("X-A: line\nbreak", "not a valid header value"),
    ] {
        let e = o(up, &[bad]).unwrap_err();
        assert!(e.to_string().contains(says), "{bad}: {e}");
        assert!(!e.to_string().contains("s3cret"));
    }
    let e = o(None, &["X-A: b"]).unwrap_err();
    assert!(e.to_string().contains("there is none"), "{e}");
    // The options' Debug form (a log line, a panic) keeps the secret too.
    let s = cli(&["--upstream-header", "Authorization: Bearer s3cret"]).unwrap();
    assert!(!format!("{s:?}").contains("s3cret"));
}

#[test]
fn congestion_control_is_chosen_by_name() {
    use crate::assoc::Congestion;
    let congestion = |more: &[&str]| edge(more).map(|c| c.endpoint.congestion);
    assert_eq!(congestion(&[]).unwrap(), Congestion::Cubic);
    assert_eq!(
        congestion(&["--congestion", "bbr"]).unwrap(),
        Congestion::Bbr
    );
}

#[test]
fn key_update_budgets_and_peer_timeout_reach_the_associations() {
    let assoc = |more: &[&str]| edge(more).map(|c| c.endpoint.assoc);
    // A gateway takes frames up to the largest --max-body from its peer
    // (its own --max-body is checked per message).
    assert_eq!(
        assoc(&[]).unwrap(),
        crate::assoc::AssocConfig {
            max_payload_len: crate::gateway::MAX_FRAME_PAYLOAD,
            ..crate::assoc::AssocConfig::default()
        }
    );
    let set = assoc(&[
        "--key-update-after",
        "10m",
        "--key-update-after-bytes",
        "1073741824",
        "--peer-timeout",
        "30",
    ])
    .unwrap();
    assert_eq!(set.key_update_after, Duration::from_secs(600));
    assert_eq!(set.key_update_after_bytes, 1 << 30);
    assert_eq!(set.peer_timeout, Duration::from_secs(30));
    assert_eq!(set.keepalive_after, Duration::from_secs(10));
    let e = assoc(&["--key-update-after-bytes", "100"]).unwrap_err();
    assert_eq!(e.at, "--key-update-after-bytes");
    // An edge's peer timeout must exceed its stall timeout (10 s).
    let e = assoc(&["--peer-timeout", "10s"]).unwrap_err();
    assert_eq!(e.at, "--peer-timeout");
    assert!(e.message.contains("--stall-timeout"), "{e}");
    let ok = assoc(&["--peer-timeout", "1s", "--stall-timeout", "500ms"]);
    assert_eq!(ok.unwrap().peer_timeout, Duration::from_secs(1));
    // So must an origin's: its reader waits on an upstream that takes
    // nothing until the stall timeout restarts that upstream.
    let origin = |peer_timeout: &str| {
        resolve(&[
            "--insecure-accept-any-peer",
            "--listen",
            "quic://127.0.0.1:0",
            "--upstream",
            "http://127.0.0.1:8545",
            "--peer-timeout",
            peer_timeout,
        ])
    };
    let e = origin("5").unwrap_err();
    assert_eq!(e.at, "--peer-timeout");
    assert!(e.message.contains("upstream"), "{e}");
    assert!(origin("11").is_ok());
}

#[test]
fn octet_bounds_have_floors_and_ceilings() {
    let limits = |more: &[&str]| edge(more).map(|c| c.limits);
    assert_eq!(
        limits(&["--session-buffer", "1048576"])
            .unwrap()
            .session_buffer,
        1 << 20
    );
    assert_eq!(
        limits(&["--session-buffer", "100"]).unwrap_err().at,
        "--session-buffer"
    );
    let huge = usize::MAX.to_string();
    assert_eq!(
        limits(&["--session-buffer", &huge]).unwrap_err().at,
        "--session-buffer"
    );
    assert_eq!(limits(&[]).unwrap().memory_budget, 64 << 20);
    assert_eq!(
        limits(&["--memory-budget", "8388608"])
            .unwrap()
            .memory_budget,
        8 << 20
    );
    let e = limits(&["--memory-budget", "1000"]).unwrap_err();
    assert_eq!(e.at, "--memory-budget");
    assert!(e.message.contains("1 MiB"), "{e}");
    let e = limits(&["--max-body", "67108865"]).unwrap_err();
    assert!(e.message.contains("64 MiB"), "{e}");
}

#[test]
fn listening_alone_is_an_origin_for_ping() {
    let c = resolve(&[
        "--listen",
        "npamp://127.0.0.1:0",
        "--insecure-accept-any-peer",
    ]);
    assert!(c.expect("listen alone").upstream.is_none());
}

#[test]
fn the_help_shows_the_defaults_the_gateway_runs_with() {
    let command = <GatewayOptions as clap::Args>::augment_args(clap::Command::new("serve"));
    let help = |id: &str| {
        command
            .get_arguments()
            .find(|a| a.get_id() == id)
            .and_then(|a| a.get_help())
            .map(|h| h.to_string())
            .unwrap_or_default()
    };
    let config = edge(&[]).unwrap();
    let shown = |id: &str| defaults::of(id).unwrap();
    let lsp = edge(&["--protocol", "lsp"]).unwrap();
    assert_eq!(
        shown("max_body"),
        format!(
            "{}; {} with --protocol lsp",
            config.limits.max_body, lsp.limits.max_body
        )
    );
    assert_eq!(
        shown("request_timeout"),
        format!(
            "{}; {} with --protocol lsp",
            Seconds(config.limits.request_timeout),
            Seconds(lsp.limits.request_timeout)
        )
    );
    assert_eq!(
        shown("stall_timeout"),
        Seconds(config.limits.stall_timeout).to_string()
    );
    assert_eq!(
        shown("peer_timeout"),
        Seconds(config.endpoint.assoc.peer_timeout).to_string()
    );
    assert_eq!(
        shown("max_handshakes"),
        config.endpoint.max_handshakes.to_string()
    );
    for id in [
        "max_body",
        "stall_timeout",
        "protocol",
        "congestion",
        "pool_size",
    ] {
        assert!(
            help(id).ends_with(&format!("[default: {}]", shown(id))),
            "{id}: {}",
            help(id)
        );
    }
    // Every default named is an option's.
    for a in command.get_arguments() {
        let h = a.get_help().map(|h| h.to_string()).unwrap_or_default();
        assert_eq!(
            h.contains("[default:"),
            defaults::of(a.get_id().as_str()).is_some(),
            "{h}"
        );
    }
}

#[test]
fn an_edge_takes_one_origin_or_several_from_flags_and_from_a_file() {
    let c = edge(&["--peer", "tls://127.0.0.1:7001"]).unwrap();
    let shown: Vec<String> = c.peers.iter().map(ToString::to_string).collect();
    assert_eq!(shown, ["quic://127.0.0.1:7000", "tls://127.0.0.1:7001"]);
    for (text, n) in [
        ("peer = \"quic://127.0.0.1:1\"\n", 1),
        (
            "peer = [\"quic://127.0.0.1:1\", \"quic://127.0.0.1:2\"]\n",
            2,
        ),
    ] {
        let path = file(
            &format!("peers{n}"),
            &format!("insecure-accept-any-peer = true\ningress = [\"http://127.0.0.1:0\"]\n{text}"),
        );
        assert_eq!(resolve(&["--config", &path]).unwrap().peers.len(), n);
    }
    // A bad one in a list: its own error, with the line.
    let path = file(
        "peers-bad",
        "insecure-accept-any-peer = true\ningress = [\"http://127.0.0.1:0\"]\npeer = [\"quic://127.0.0.1:1\", \"udp://x\"]\n",
    );
    let e = resolve(&["--config", &path]).unwrap_err();
    assert!(
        e.to_string().contains("line 3") && e.message.contains("udp"),
        "{e}"
    );
}

#[test]
fn retries_and_hedging_are_set_and_checked() {
    let c = edge(&[]).unwrap();
    assert_eq!((c.limits.retry_budget, c.limits.hedge_after), (20, None));
    let c = edge(&["--retry-budget", "5", "--hedge-after", "30ms"]).unwrap();
    assert_eq!(
        (c.limits.retry_budget, c.limits.hedge_after),
        (5, Some(HedgeAfter::Delay(Duration::from_millis(30))))
    );
    for (given, hundredths) in [
        ("p95", 9500),
        ("p99.5", 9950),
        ("P99.99", 9999),
        ("p1", 100),
    ] {
        let c = edge(&["--hedge-after", given]).unwrap();
        assert_eq!(
            c.limits.hedge_after,
            Some(HedgeAfter::Percentile(hundredths)),
            "{given}"
        );
        let shown = HedgeAfterArg(HedgeAfter::Percentile(hundredths)).to_string();
        assert_eq!(shown, given.to_lowercase());
    }
    for bad in ["p100", "p0", "p0.5", "p99.999", "pxx", "p-5", "fast", "0ms"] {
        let e = edge(&["--hedge-after", bad]).unwrap_err();
        assert!(e.to_string().contains("--hedge-after"), "{bad}: {e}");
    }
    let e = edge(&["--hedge-after", "p100"]).unwrap_err();
    assert!(e.message.contains("p1 to below p100"), "{e}");
    let e = edge(&["--retry-budget", "101"]).unwrap_err();
    assert_eq!(e.at, "--retry-budget");
    assert!(e.message.contains("0 to 100"), "{e}");
}

#[test]
fn several_upstreams_form_a_group_of_http_ones_or_of_sessions_and_routes_are_http_ones() {
    let origin = |more: &[&str]| {
        let mut args = vec![
            "--insecure-accept-any-peer",
            "--listen",
            "quic://127.0.0.1:0",
        ];
        args.extend_from_slice(more);
        resolve(&args)
    };
    let c = origin(&[
        "--upstream",
        "http://127.0.0.1:8545",
        "--upstream",
        "http://127.0.0.1:8546",
        "--route",
        "debug_*=http://127.0.0.1:8547",
    ])
    .unwrap();
    assert_eq!(c.upstream_group.len(), 2);
    assert!(c.session_group.is_empty());
    assert_eq!(c.routes.len(), 1);
    assert_eq!(c.routes[0].0, "debug_*");
    // One upstream alone: no group.
    let one = origin(&["--upstream", "http://127.0.0.1:8545"]).unwrap();
    assert!(one.upstream_group.is_empty() && one.session_group.is_empty());
    // Sessions: WebSocket and IPC, MCP servers over HTTP, child processes.
    for (args, first) in [
        (
            &[
                "--upstream",
                "ws://127.0.0.1:8545",
                "--upstream",
                "unix:///run/geth.ipc",
            ][..],
            "ws://127.0.0.1:8545",
        ),
        (
            &[
                "--protocol",
                "mcp",
                "--upstream",
                "http://a:1/mcp",
                "--upstream",
                "http://b:1/mcp",
            ][..],
            "http://a:1",
        ),
        (
            &[
                "--upstream-cmd",
                "server --one",
                "--upstream-cmd",
                "server --two",
            ][..],
            "command server",
        ),
    ] {
        let c = origin(args).unwrap();
        assert_eq!(c.session_group.len(), 2, "{args:?}");
        assert!(c.upstream_group.is_empty(), "{args:?}");
        assert_eq!(c.upstream.as_ref(), Some(&c.session_group[0]));
        assert_eq!(c.session_group[0].to_string(), first, "{args:?}");
    }
    let c = origin(&["--upstream-cmd", "a", "--upstream-cmd", "b --x"]).unwrap();
    assert_eq!(
        c.session_group[1],
        Upstream::command(vec!["b".into(), "--x".into()]).unwrap()
    );
    for (bad, says) in [
        (
            &[
                "--upstream",
                "ws://127.0.0.1:8545",
                "--upstream",
                "http://127.0.0.1:8546",
            ][..],
            "not a mix",
        ),
        (
            &[
                "--upstream",
                "http://127.0.0.1:8545",
                "--route",
                "a*=ws://127.0.0.1:1",
            ][..],
            "a route goes to an http",
        ),
        (
            &[
                "--protocol",
                "mcp",
                "--upstream",
                "http://a:1/mcp",
                "--route",
                "tools/*=http://b:1/mcp",
            ][..],
            "routes are for HTTP",
        ),
        (
            &["--upstream-cmd", "a", "--upstream-cmd", "  "][..],
            "empty command",
        ),
    ] {
        let e = origin(bad).unwrap_err();
        assert!(e.to_string().contains(says), "{bad:?}: {e}");
    }
    let e = origin(&["--upstream", "http://127.0.0.1:8545", "--route", "nothing"]).unwrap_err();
    assert!(e.to_string().contains("GLOB=URL"), "{e}");
}

#[test]
fn lsp_sets_its_framing_and_limits_and_flags_still_win() {
    use crate::framing::Framing;
    let path = file("lsp", "protocol = \"lsp\"\nframing = \"lsp\"\n");
    let config = edge(&["--config", &path]).unwrap();
    assert_eq!(config.protocol, crate::bridge::ProtocolId::LSP_EXPERIMENTAL);
    assert_eq!(config.framing, Framing::Lsp);
    assert_eq!(config.limits.max_body, 16 << 20);
    assert_eq!(config.limits.request_timeout, Duration::from_secs(120));
    assert_eq!(config.limits.idle_timeout, Duration::from_secs(24 * 3600));
    let config = edge(&[
        "--protocol",
        "lsp",
        "--max-body",
        "1000",
        "--idle-timeout",
        "60",
    ])
    .unwrap();
    assert_eq!(config.framing, Framing::Auto, "the default");
    assert_eq!(config.limits.max_body, 1000);
    assert_eq!(config.limits.idle_timeout, Duration::from_secs(60));
    assert_eq!(
        edge(&[]).unwrap().limits.max_body,
        1 << 20,
        "other protocols as before"
    );
    let e = edge(&["--framing", "headers"]).unwrap_err();
    assert!(e.to_string().contains("expected lines, lsp or auto"), "{e}");
}

/// `--oauth-*` (issue 53): on an edge whose ingresses carry tokens, with
/// an issuer its keys can be fetched from, from flags and from a file;
/// what cannot work is refused, naming the option.
#[test]
fn an_oauth_edge_is_configured_or_refused_with_its_option() {
    let c = edge(&[
        "--oauth-issuer",
        "https://auth.example/",
        "--oauth-audience",
        "https://edge.example/rpc",
        "--oauth-scope",
        "rpc:call",
    ])
    .unwrap();
    let spec = c.oauth.expect("OAuth");
    // The issuer as given: tokens name it exactly.
    assert_eq!(spec.issuer, "https://auth.example/");
    assert_eq!(spec.scopes, ["rpc:call"]);
    // The audience defaults to the first HTTP ingress, on a fixed port.
    let fixed = resolve(&[
        "--insecure-accept-any-peer",
        "--ingress",
        "http://127.0.0.1:8545",
        "--peer",
        "quic://127.0.0.1:7000",
        "--oauth-issuer",
        "https://auth.example",
    ])
    .unwrap();
    assert_eq!(
        fixed.oauth.expect("OAuth").audience,
        "http://127.0.0.1:8545"
    );
    // Not a wildcard a client cannot call, nor a value a challenge cannot hold.
    let wildcard = resolve(&[
        "--insecure-accept-any-peer",
        "--ingress",
        "http://0.0.0.0:8545",
        "--peer",
        "quic://127.0.0.1:7000",
        "--oauth-issuer",
        "https://auth.example",
    ])
    .unwrap_err();
    assert_eq!(wildcard.at, "--oauth-audience");
    let quoted = edge(&[
        "--oauth-issuer",
        "https://auth.example",
        "--oauth-audience",
        "https://e/\"x",
    ])
    .unwrap_err();
    assert_eq!(quoted.at, "--oauth-audience");
    let toml = file(
        "oauth",
        "insecure-accept-any-peer = true\ningress = [\"http://127.0.0.1:8545\"]\npeer = [\"quic://127.0.0.1:7000\"]\noauth-issuer = \"https://auth.example\"\noauth-scope = [\"a\", \"b\"]\n",
    );
    let from_file = resolve(&["--config", &toml]).unwrap();
    assert_eq!(from_file.oauth.expect("OAuth").scopes, ["a", "b"]);
    // `--require-scope`, from flags and from a file.
    let scoped = edge(&[
        "--oauth-issuer",
        "https://auth.example",
        "--oauth-audience",
        "https://e/",
        "--require-scope",
        "tools/call:delete_repo=repo:admin",
    ])
    .unwrap();
    let rule = &scoped.oauth.expect("OAuth").rules[0];
    assert_eq!(
        (
            rule.method.as_str(),
            rule.name.as_deref(),
            rule.scope.as_str()
        ),
        ("tools/call", Some("delete_repo"), "repo:admin")
    );
    let toml = file(
        "oauth-rules",
        "insecure-accept-any-peer = true\ningress = [\"http://127.0.0.1:8545\"]\npeer = [\"quic://127.0.0.1:7000\"]\noauth-issuer = \"https://auth.example\"\nrequire-scope = \"eth_sendRawTransaction=chain:write\"\n",
    );
    let rules = resolve(&["--config", &toml])
        .unwrap()
        .oauth
        .expect("OAuth")
        .rules;
    assert_eq!(rules[0].to_string(), "eth_sendRawTransaction=chain:write");
    for (more, at) in [
        (&["--oauth-scope", "a"][..], "--oauth-scope"),
        (&["--require-scope", "m=s"], "--require-scope"),
        (
            &[
                "--oauth-issuer",
                "https://auth.example",
                "--oauth-audience",
                "https://e/",
                "--oauth-scope",
                "two words",
            ],
            "--oauth-scope",
        ),
        (&["--oauth-issuer", "http://auth.example"], "--oauth-issuer"),
        (
            &["--oauth-issuer", "https://auth.example"],
            "--oauth-audience",
        ),
        (
            &[
                "--oauth-issuer",
                "https://auth.example",
                "--oauth-audience",
                "https://e/",
                "--oauth-jwks",
                "http://keys.example/jwks",
            ],
            "--oauth-jwks",
        ),
    ] {
        let e = edge(more).unwrap_err();
        assert_eq!(e.at, at, "{more:?}: {e}");
    }
    let dir = temp_dir("oauth-tokens");
    std::fs::write(dir.join("tokens"), "a-token-of-sixteen-chars\n").unwrap();
    let tokens = dir.join("tokens").display().to_string();
    let e = edge(&[
        "--oauth-issuer",
        "https://auth.example",
        "--oauth-audience",
        "https://e/",
        "--auth-token-file",
        &tokens,
    ])
    .unwrap_err();
    assert!(e.message.contains("one place"), "{e}");
}

/// `--forward-authorization` (issue 53, item 3): on an HTTP edge with a
/// URL clients call; never beside a token of the edge's own, nor on an
/// ingress that does not forward (yet); `--public-url` goes with it.
#[test]
fn forwarding_credentials_is_configured_or_refused_with_its_option() {
    let c = edge(&[
        "--forward-authorization",
        "--public-url",
        "https://edge.example/rpc",
    ])
    .unwrap();
    assert_eq!(
        c.forwarding.expect("forwarding").public_url,
        "https://edge.example/rpc"
    );
    let fixed = resolve(&[
        "--insecure-accept-any-peer",
        "--ingress",
        "http://127.0.0.1:8545",
        "--peer",
        "quic://127.0.0.1:7000",
        "--forward-authorization",
    ])
    .unwrap();
    assert_eq!(
        fixed.forwarding.expect("forwarding").public_url,
        "http://127.0.0.1:8545"
    );
    assert!(edge(&[]).unwrap().forwarding.is_none());
    for (more, at) in [
        (&["--public-url", "https://e/"][..], "--public-url"),
        (&["--forward-authorization"], "--public-url"),
        (
            &[
                "--forward-authorization",
                "--public-url",
                "https://e/",
                "--oauth-issuer",
                "https://auth.example",
                "--oauth-audience",
                "https://e/",
            ],
            "--forward-authorization",
        ),
        (
            &["--forward-authorization", "--public-url", "not a url"],
            "--public-url",
        ),
        (
            &[
                "--forward-authorization",
                "--public-url",
                "https://e/",
                "--ingress",
                "ws://127.0.0.1:0",
            ],
            "--forward-authorization",
        ),
    ] {
        let e = edge(more).unwrap_err();
        assert_eq!(e.at, at, "{more:?}: {e}");
    }
}
