//! The deployment files under `deploy/` agree with the gateway: every
//! metric (and label) the Grafana dashboard asks for is one the gateway
//! serves, and the configs in the Kubernetes manifests are valid gateway
//! options. (`deploy/check.sh` validates the manifests against the
//! Kubernetes schemas and the systemd unit, where those tools are.)

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use npamp_gateway::gateway::IngressCounts;
use npamp_gateway::gateway::config::Sourced;
use npamp_gateway::gateway::metrics::Metrics;

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

#[test]
fn the_dashboard_asks_only_for_metrics_the_gateway_serves() {
    let text = std::fs::read_to_string(deploy("grafana/npamp-gateway.json")).expect("dashboard");
    let dashboard: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    let metrics = Metrics::default();
    metrics.show(std::sync::Arc::new(IngressCounts));
    let served = metrics.render();
    let served_names = metric_names(&served);
    let mut exprs = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().into_iter().flatten() {
            exprs.push(target["expr"].as_str().expect("expr").to_owned());
        }
    }
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
                    names
                        .iter()
                        .any(|n| l.starts_with(&format!("{n}{{{label}=")))
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
