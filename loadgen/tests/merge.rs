//! Runs across machines: N workers' results merged are exactly the sum of
//! their accountings, and their latency is that of one histogram of every
//! sample (HdrHistograms of one precision add without loss).

use std::path::PathBuf;
use std::time::Duration;

use hdrhistogram::Histogram;
use npamp_loadgen::merge::{self, Measured};
use npamp_loadgen::report::{Latency, Summary};
use npamp_loadgen::scenario::Shard;
use proptest::prelude::*;

const BIN: &str = env!("CARGO_BIN_EXE_npamp-loadgen");

fn temp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("loadgen-merge-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

fn hist(samples: &[u64]) -> Histogram<u64> {
    let mut h = Histogram::new(3).expect("precision");
    for &s in samples {
        h.record(s).expect("record");
    }
    h
}

/// A worker's result made of `samples` (µs), as `run --shard` writes it.
fn part(index: u32, count: u32, samples: &[u64], start_ms: u64) -> Measured {
    let mut summary: Summary =
        serde_json::from_str(include_str!("../src/compare_fixture.json")).expect("fixture");
    summary.shard = Some(Shard { index, count });
    summary.started_at_ms = start_ms;
    summary.accounting.sent_requests = samples.len() as u64 + u64::from(index);
    summary.accounting.ok = samples.len() as u64;
    summary.accounting.replied = samples.len() as u64;
    summary.accounting.lost = 0;
    // What the worker's schedule could not send (issue 54): summed too.
    summary.accounting.dropped = 2 * u64::from(index);
    summary
        .accounting
        .transport_errors
        .insert("reset".into(), u64::from(index));
    summary.slo.clear();
    let overall = hist(samples);
    let per_second = samples.chunks(samples.len().div_ceil(3).max(1));
    Measured {
        summary,
        overall: overall.clone(),
        schedule_lag: hist(&[1]),
        per_method: [("echo".to_owned(), overall)].into_iter().collect(),
        intervals: per_second
            .enumerate()
            .map(|(i, c)| (Duration::from_secs(i as u64 + 1), hist(c)))
            .collect(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn merged_shards_are_one_histogram_of_every_sample(
        shards in prop::collection::vec(
            prop::collection::vec(1u64..60_000_000, 1..400),
            1..6,
        ),
        skew in 0u64..1500,
    ) {
        let dir = temp("prop");
        let count = shards.len() as u32;
        let mut parts = Vec::new();
        for (i, samples) in shards.iter().enumerate() {
            // Written and read back, as `merge` reads them.
            let d = dir.join(i.to_string());
            npamp_loadgen::run_dir::write(
                &part(i as u32, count, samples, 1_000_000 + skew * i as u64),
                &d,
            )
            .expect("write");
            parts.push(Measured::read(&d).expect("read"));
        }
        let merged = merge::merge(&parts).expect("merge");
        let all: Vec<u64> = shards.concat();
        let one = hist(&all);
        prop_assert_eq!(merged.overall.len(), one.len());
        for q in [0.0, 0.25, 0.5, 0.9, 0.99, 0.999, 1.0] {
            prop_assert_eq!(merged.overall.value_at_quantile(q), one.value_at_quantile(q));
        }
        prop_assert_eq!(&merged.summary.latency_ms, &Latency::of(&one));
        prop_assert_eq!(&merged.summary.per_method["echo"], &Latency::of(&one));
        let a = &merged.summary.accounting;
        prop_assert_eq!(a.ok, all.len() as u64);
        prop_assert_eq!(a.sent_requests, all.len() as u64 + (0..u64::from(count)).sum::<u64>());
        prop_assert_eq!(
            a.transport_errors.get("reset").copied().unwrap_or(0),
            (0..u64::from(count)).sum::<u64>()
        );
        prop_assert_eq!(a.dropped, 2 * (0..u64::from(count)).sum::<u64>());
        // The per-second histograms hold every sample once, too.
        let seconds: u64 = merged.intervals.iter().map(|(_, h)| h.len()).sum();
        prop_assert_eq!(seconds, all.len() as u64);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn a_merge_refuses_what_is_not_one_run() {
    let p = |i, n| part(i, n, &[10, 20], 1_000);
    let e = merge::merge(&[p(0, 3), p(1, 3)]).unwrap_err();
    assert!(e.contains("shards [0, 1] of 3"), "{e}");
    let e = merge::merge(&[p(0, 2), p(0, 2)]).unwrap_err();
    assert!(e.contains("once"), "{e}");
    let e = merge::merge(&[p(0, 2), p(1, 3)]).unwrap_err();
    assert!(e.contains("not a shard"), "{e}");
    let mut other = p(1, 2);
    other.summary.scenario = "another".into();
    let e = merge::merge(&[p(0, 2), other]).unwrap_err();
    assert!(e.contains("different scenarios"), "{e}");
}

/// Workers started 0.7 s apart, as a Kubernetes Job's pods start: second N
/// of each schedule is second N of the run's, so the merged series is the
/// sum of theirs and the rate is over the schedule's duration (the issue's
/// "sent 2000/s, achieved 1429 replies/s" and its half-rate edge stages
/// came from lining them up on the wall clock).
#[test]
fn staggered_workers_line_up_on_their_schedules() {
    let parts: Vec<Measured> = (0..4)
        .map(|i| {
            let mut p = part(i, 4, &[10; 300], 1_000_000 + 700 * u64::from(i));
            let s = &mut p.summary;
            (s.duration_s, s.warmup_s, s.measured_span_s) = (3.0, 0.0, 3.0);
            s.per_second = vec![[100, 0]; 3];
            s.offered_per_second = vec![100.0; 3];
            s.rates.offered = Some(100.0);
            s.run_hash = "00000000000000aa".into();
            p
        })
        .collect();
    let m = merge::merge(&parts).expect("one run");
    assert_eq!(m.summary.per_second, vec![[400, 0]; 3]);
    assert_eq!(m.summary.offered_per_second, vec![400.0; 3]);
    assert_eq!(m.summary.rates.offered, Some(400.0));
    assert!(
        (m.summary.throughput - 400.0).abs() < 1e-9,
        "{}",
        m.summary.throughput
    );
    assert_eq!(
        m.summary.started_at_ms, 1_000_000,
        "the earliest worker's start"
    );
}

/// Workers of two runs are refused, saying why: schedules that do not
/// overlap (runs 12 s apart), or scenarios run differently.
#[test]
fn workers_of_different_runs_are_refused() {
    let worker = |i: u32, start_ms: u64, hash: &str| {
        let mut p = part(i, 2, &[10, 20], start_ms);
        (p.summary.duration_s, p.summary.warmup_s) = (5.0, 1.0);
        p.summary.run_hash = hash.into();
        p
    };
    let h = "00000000000000aa";
    let e = merge::merge(&[worker(0, 1_000_000, h), worker(1, 1_018_000, h)]).unwrap_err();
    assert!(
        e.contains("not one run: worker 1 started 12.0 s after worker 0's schedule had ended"),
        "{e}"
    );
    let e = merge::merge(&[
        worker(0, 1_000_000, h),
        worker(1, 1_001_000, "00000000000000bb"),
    ])
    .unwrap_err();
    assert!(e.contains("workers of different runs"), "{e}");
    assert!(merge::merge(&[worker(0, 1_000_000, h), worker(1, 1_005_900, h)]).is_ok());
    // Two runs of one scenario that overlap are told apart by their ids
    // (a Kubernetes Job's uid).
    let named = |i: u32, id: &str| {
        let mut p = worker(i, 1_000_000, h);
        p.summary.run_id = id.into();
        p
    };
    let e = merge::merge(&[named(0, "job-a"), named(1, "job-b")]).unwrap_err();
    assert!(e.contains("run ids (run --run-id) job-a and job-b"), "{e}");
    // A worker from before run hashes does not let two others differ.
    let three = |i: u32, hash: &str| {
        let mut p = part(i, 3, &[10, 20], 1_000_000);
        p.summary.run_hash = hash.into();
        p
    };
    let e = merge::merge(&[three(0, ""), three(1, h), three(2, "00000000000000bb")]).unwrap_err();
    assert!(e.contains("run hashes"), "{e}");
}

/// Four worker processes against one mock upstream, then `merge`.
#[test]
fn four_workers_merged_are_the_sum_of_their_shards() {
    let dir = temp("workers");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let bound = rt
        .block_on(npamp_testkit::mock::spawn(
            npamp_testkit::mock::MockAddr::Http("127.0.0.1:0".parse().expect("addr")),
            None,
            Default::default(),
        ))
        .expect("mock");
    // Quickstart's mix, with SLOs a loaded test machine meets.
    let scenario = dir.join("steady.toml");
    std::fs::write(
        &scenario,
        "name = \"steady\"\nwarmup = 1\nconnections = 8\ntimeout = 5\n[load]\nmodel = \"open\"\nrate = 500\n[mix]\n[[mix.message]]\nmethod = \"echo\"\nparams = '[{seq}]'\n[slo]\np99_ms = 5000\nmin_throughput = 100\n",
    )
    .expect("scenario");
    let workers: Vec<_> = (0..4)
        .map(|i| {
            std::process::Command::new(BIN)
                .args(["run", "--quiet", "--rate", "500", "--duration", "1s"])
                .arg("--shard")
                .arg(format!("{i}/4"))
                .arg("--target")
                .arg(format!("{bound}"))
                .arg("--out")
                .arg(dir.join(i.to_string()))
                .arg(&scenario)
                .stdout(std::process::Stdio::piped())
                .spawn()
                .expect("worker")
        })
        .collect();
    for w in workers {
        let out = w.wait_with_output().expect("worker ran");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
    let parts: Vec<Measured> = (0..4)
        .map(|i| Measured::read(&dir.join(i.to_string())).expect("shard"))
        .collect();
    for p in &parts {
        let s = &p.summary;
        assert_eq!(s.rates.offered, Some(125.0), "a quarter of the rate each");
        assert_eq!(s.accounting.mismatched + s.accounting.duplicated, 0);
    }
    let out = std::process::Command::new(BIN)
        .arg("merge")
        .args((0..4).map(|i| dir.join(i.to_string())))
        .arg("--out")
        .arg(dir.join("merged"))
        .output()
        .expect("merge");
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{table}");
    let merged = Measured::read(&dir.join("merged")).expect("merged");
    let m = &merged.summary;
    let sum = |f: fn(&Summary) -> u64| parts.iter().map(|p| f(&p.summary)).sum::<u64>();
    assert_eq!(
        m.accounting.sent_requests,
        sum(|s| s.accounting.sent_requests)
    );
    assert_eq!(
        m.accounting.sent_measured,
        sum(|s| s.accounting.sent_measured)
    );
    assert_eq!(m.accounting.ok, sum(|s| s.accounting.ok));
    assert_eq!(m.accounting.replied, sum(|s| s.accounting.replied));
    assert_eq!(m.accounting.lost, 0);
    assert_eq!(m.rates.offered, Some(500.0));
    let mut all = Histogram::<u64>::new(3).expect("precision");
    for p in &parts {
        all.add(&p.overall).expect("add");
    }
    assert_eq!(m.latency_ms, Latency::of(&all));
    assert_eq!(
        m.latency_ms.count,
        m.accounting.ok.min(m.accounting.sent_measured)
    );
    // The SLOs are the whole run's: min_throughput is 100/s at 500/s;
    // each worker judged a quarter of it.
    let limit = |s: &Summary| {
        s.slo
            .iter()
            .find(|c| c.name == "min_throughput")
            .map(|c| c.limit)
    };
    assert_eq!(limit(&parts[0].summary), limit(m).map(|l| l / 4.0));
    let _ = std::fs::remove_dir_all(&dir);
}
