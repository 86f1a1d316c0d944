//! Every output of a run's numbers, from fixed inputs, byte for byte: the
//! summary's JSON, the final table, `report.svg`, the run page, the
//! comparison page, the capacity chart and its page.
//!
//! The inputs are two recorded workers of one run (`pages/shard0`,
//! `pages/shard1`: `run --shard I/2 --out`, the embedded pair at 200/s for
//! 2 s) and a recorded capacity search (`pages/capacity.json`); what each
//! output must be is in `pages/expected/`. `NPAMP_PIN_PAGES=1` writes those
//! anew from the code as it is (then read their diff).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use npamp_loadgen::capacity::{self, Capacity, Step};
use npamp_loadgen::html::{self, Compared};
use npamp_loadgen::merge::{self, Measured};
use npamp_loadgen::report;

fn pages() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/pages")
}

/// `text` is what `pages/expected/NAME` holds; with `NPAMP_PIN_PAGES` set,
/// it is written there instead.
fn pinned(name: &str, text: &str) {
    let path = pages().join("expected").join(name);
    if std::env::var_os("NPAMP_PIN_PAGES").is_some() {
        std::fs::write(&path, text).expect("write the pinned output");
        return;
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (NPAMP_PIN_PAGES=1 writes it)", path.display()));
    if want != text {
        let got = std::env::temp_dir().join(format!("pages-{}-{name}", std::process::id()));
        std::fs::write(&got, text).expect("write what was drawn");
        panic!(
            "{name} is not what was pinned: diff {} {}",
            path.display(),
            got.display()
        );
    }
}

fn shard(i: usize) -> Measured {
    Measured::read(&pages().join(format!("shard{i}"))).expect("a recorded worker")
}

fn merged() -> Measured {
    merge::merge(&[shard(0), shard(1)]).expect("the workers merge")
}

/// A run that went wrong in every way the table tells apart: errors of
/// each kind, a measured span past its end, a schedule that slipped.
fn troubled(mut m: Measured, held_back: u64, ok: u64) -> Measured {
    let s = &mut m.summary;
    let a = &mut s.accounting;
    a.error_codes = BTreeMap::from([("-32000".into(), 3), ("-32601".into(), 1)]);
    a.http_status = BTreeMap::from([("503".into(), 2)]);
    a.transport_errors = BTreeMap::from([("connect: refused <x> & y".into(), 90)]);
    a.unexpected_errors = 4;
    a.timed_out = 2;
    a.late = 1;
    a.ok = ok;
    s.measured_span_s = s.duration_s + 1.25;
    s.generator_kept_schedule = false;
    s.held_back_sends = held_back;
    s.pass = false;
    s.scenario = "a <scenario> & more".into();
    m
}

#[test]
fn the_summaries_and_their_tables_are_what_was_pinned() {
    let cases = [
        ("shard0", shard(0)),
        ("merged", merged()),
        ("held-back", troubled(shard(0), 17, 300)),
        ("not-served", troubled(shard(0), 0, 0)),
    ];
    for (name, m) in &cases {
        let json = serde_json::to_string_pretty(&m.summary).expect("json");
        pinned(&format!("{name}.summary.json"), &json);
        pinned(&format!("{name}.table.txt"), &m.summary.table());
        // The schema reads back what it wrote.
        let back: report::Summary = serde_json::from_str(&json).expect("read back");
        assert_eq!(&back, &m.summary, "{name}");
    }
}

#[test]
fn the_run_report_and_its_page_are_what_was_pinned() {
    for (name, m) in [("shard0", shard(0)), ("merged", merged())] {
        let svg = report::svg(&m.summary, &m.overall, &m.intervals);
        pinned(&format!("{name}.report.svg"), &svg);
        pinned(&format!("{name}.report.html"), &html::page(&m, None));
    }
    // Two methods (a chart of them), no outstanding series, a capacity
    // curve, and text that needs escaping.
    let mut m = troubled(shard(0), 17, 300);
    let other = m.overall.clone();
    m.per_method.insert("other <method>".into(), other);
    m.summary.outstanding_per_second.clear();
    let curve = capacity::svg(&recorded_capacity(), "quickstart");
    pinned("troubled.report.html", &html::page(&m, Some(&curve)));
    pinned(
        "troubled.report.svg",
        &report::svg(&m.summary, &m.overall, &m.intervals),
    );
}

#[test]
fn the_comparison_page_is_what_was_pinned() {
    let side = |label: &str, run: Measured, histograms: bool| Compared {
        label: label.into(),
        run,
        histograms,
    };
    let (table, regressed) = npamp_loadgen::compare::compare(
        &shard(0).summary,
        &merged().summary,
        &npamp_loadgen::compare::Gates::default(),
    );
    pinned("compare.table.txt", &table);
    let two = [
        side("shard0", shard(0), true),
        side("merged", merged(), true),
    ];
    pinned("compare.html", &html::compare_page(&two, &table, regressed));
    let summary_only = Measured::of_summary(merged().summary);
    let three = [
        side("a <b>", shard(0), true),
        side("shard1", shard(1), true),
        side("merged summary", summary_only, false),
    ];
    pinned(
        "compare-three.html",
        &html::compare_page(&three, "the tables", true),
    );
}

fn recorded_capacity() -> Capacity {
    let text = std::fs::read_to_string(pages().join("capacity.json")).expect("capacity.json");
    let v: serde_json::Value = serde_json::from_str(&text).expect("json");
    serde_json::from_value(v["capacity"].clone()).expect("a capacity search")
}

/// A search with failing steps (hollow marks), two latency limits and a
/// knee in the middle of the chart (its label right of its line).
fn searched_capacity() -> Capacity {
    let step = |rate: f64, achieved: f64, p99_ms: f64, why: Option<&str>| Step {
        rate,
        achieved,
        p50_ms: p99_ms / 3.0,
        p99_ms,
        p999_ms: p99_ms * 1.5,
        error_share: if why.is_some() { 0.002 } else { 0.0 },
        generator_bound: false,
        pass: why.is_none(),
        why: why.map(str::to_owned),
        not_served: None,
    };
    Capacity {
        slo: "p50<5ms,p99<20ms,errors<1%".parse().expect("slo"),
        knee: Some(600.0),
        failed_at: Some(700.0),
        generator_bound: false,
        not_served: None,
        steps: vec![
            step(100.0, 100.0, 2.0, None),
            step(200.0, 199.5, 2.5, None),
            step(400.0, 400.0, 4.0, None),
            step(800.0, 640.0, 55.0, Some("p99 55.000 ms > 20 ms <&>")),
            step(600.0, 598.0, 12.0, None),
            step(700.0, 650.0, 31.0, Some("achieved 650/s of 700/s offered")),
        ],
    }
}

#[test]
fn the_capacity_chart_and_page_are_what_was_pinned() {
    for (name, c) in [
        ("recorded", recorded_capacity()),
        ("searched", searched_capacity()),
    ] {
        pinned(
            &format!("{name}.capacity.svg"),
            &capacity::svg(&c, "quick<start>"),
        );
        pinned(&format!("{name}.capacity.txt"), &c.table());
        pinned(
            &format!("{name}.capacity.html"),
            &html::capacity_page(&c, "quickstart", "a & b"),
        );
    }
}

#[test]
fn a_chart_of_lines_over_time_is_what_was_pinned() {
    let replies: Vec<(f64, f64)> = (1..=12)
        .map(|i| (f64::from(i), f64::from(i * 37 % 101)))
        .collect();
    let offered: Vec<(f64, f64)> = (1..=12).map(|i| (f64::from(i), 80.0)).collect();
    let lines = [
        ("replies <all>", "#1f77b4", replies.as_slice()),
        ("offered", "#ff7f0e", offered.as_slice()),
    ];
    pinned("series.svg", &report::series_svg("per second", &lines, 2.0));
    pinned(
        "series-one.svg",
        &report::series_svg("one", &lines[..1], 0.0),
    );
    let ticks: Vec<String> = [0.37, 5.0, 10075.0, 0.0, f64::NAN, 1e-4]
        .iter()
        .map(|m| {
            let t: Vec<String> = report::ticks(*m, 5)
                .into_iter()
                .map(report::label)
                .collect();
            t.join(" ")
        })
        .collect();
    pinned("ticks.txt", &(ticks.join("\n") + "\n"));
}
