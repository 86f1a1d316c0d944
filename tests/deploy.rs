//! The deployment files under `deploy/` agree with the gateway: every
//! metric (and label) the Grafana dashboard asks for is one a pair of
//! gateways serves, and the configs in the Kubernetes manifests are valid gateway
//! options. (`deploy/check.sh` validates the manifests against the
//! Kubernetes schemas and the systemd unit, where those tools are.)

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use npamp_gateway::assoc::{PeerAddr, Scheme};
use npamp_gateway::gateway::config::Sourced;
use npamp_gateway::gateway::{Gateway, IngressUrl};

fn deploy(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy")
        .join(path)
}

/// `npamp_…` names in a text.
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find("npamp_") {
        let tail = &rest[i..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        names.insert(tail[..end].to_owned());
        rest = &tail[end..];
    }
    names
}

/// What a pair of gateways serves on `/metrics`: an origin (its listener,
/// an HTTP upstream) and an edge (an HTTP ingress, the origin its peer),
/// each started through the library and showing its own role's metrics.
async fn served_by_a_pair() -> String {
    let origin = Gateway::builder()
        .identity_seed([5; 32])
        .insecure_accept_any_peer()
        .listen(PeerAddr {
            scheme: Scheme::Quic,
            addr: "127.0.0.1:0".parse().expect("addr"),
        })
        // Nothing is sent to it: only its metrics are read.
        .upstream("http://127.0.0.1:9/".parse().expect("an upstream URL"))
        .start()
        .await
        .expect("origin");
    let edge = Gateway::builder()
        .identity_seed([6; 32])
        .insecure_accept_any_peer()
        .peer(origin.listening[0])
        .ingress(IngressUrl::http("127.0.0.1:0".parse().expect("addr")))
        .start()
        .await
        .expect("edge");
    format!("{}{}", origin.metrics().render(), edge.metrics().render())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_asks_only_for_metrics_the_gateway_serves() {
    let text = std::fs::read_to_string(deploy("grafana/npamp-gateway.json")).expect("dashboard");
    let dashboard: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    let served = served_by_a_pair().await;
    let served_names = metric_names(&served);
    let mut exprs = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().into_iter().flatten() {
            exprs.push(target["expr"].as_str().expect("expr").to_owned());
        }
    }
    let variables = dashboard["templating"]["list"]
        .as_array()
        .expect("variables");
    exprs.extend(
        variables
            .iter()
            .filter_map(|v| v["query"].as_str())
            .filter(|q| q.contains("npamp_"))
            .map(str::to_owned),
    );
    assert!(exprs.len() >= 10, "{} queries", exprs.len());
    for expr in &exprs {
        let names = metric_names(expr);
        assert!(!names.is_empty(), "{expr}");
        for name in &names {
            assert!(
                served_names.contains(name),
                "{name} (in {expr}) is not served"
            );
        }
        // `sum by (label)`: a label the metric has.
        if let Some(by) = expr.split("by (").nth(1).and_then(|s| s.split(')').next()) {
            for label in by.split(',').map(str::trim).filter(|l| *l != "le") {
                let has = served.lines().any(|l| {
                    names.iter().any(|n| {
                        l.strip_prefix(&format!("{n}{{"))
                            .and_then(|rest| rest.split('}').next())
                            .is_some_and(|set| {
                                set.split(',')
                                    .any(|pair| pair.starts_with(&format!("{label}=")))
                            })
                    })
                });
                assert!(has, "no {label:?} label on {names:?} (in {expr})");
            }
        }
    }
}

#[test]
fn the_kubernetes_configs_are_valid_gateway_options() {
    for (file, config) in [
        ("kubernetes/origin.yaml", "origin.toml"),
        ("kubernetes/edge.yaml", "edge.toml"),
    ] {
        let yaml = std::fs::read_to_string(deploy(file)).expect("manifest");
        // The ConfigMap's block: the lines indented under `NAME.toml: |`.
        let mut lines = yaml
            .lines()
            .skip_while(|l| l.trim() != format!("{config}: |"));
        assert!(lines.next().is_some(), "{file}: no {config}");
        let toml: String = lines
            .take_while(|l| l.starts_with("    "))
            .map(|l| format!("{}\n", &l[4..]))
            .collect();
        // What a user fills in (the peer's key), and the origin's Service
        // name, which resolves only inside the cluster (addresses are
        // resolved as they are parsed).
        let toml = toml
            .replace("EDGE_PUBLIC_KEY", &"0".repeat(64))
            .replace("ORIGIN_PUBLIC_KEY", &"0".repeat(64))
            .replace("//npamp-origin:", "//localhost:");
        let sourced = Sourced::parse(Path::new(config), &toml)
            .unwrap_or_else(|e| panic!("{file}: {e}\n{toml}"));
        let options = sourced.options();
        assert!(
            options.metrics.is_some(),
            "{file}: the probes need /healthz"
        );
        assert_eq!(
            options.identity.as_deref(),
            Some(Path::new(&format!(
                "keys/{}",
                config.replace(".toml", ".key")
            ))),
            "{file}: the key is the Secret mounted beside the config"
        );
    }
}
