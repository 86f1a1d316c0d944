//! `npamp-loadgen compare BASE NEW…`: each NEW summary beside BASE, each a
//! `summary.json` or the run directory that holds one.

use std::fmt::Write as _;

use crate::summary::Summary;

/// How a row is judged.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Gate {
    /// Lower is a regression past the threshold.
    Drop,
    /// Higher is a regression past the threshold.
    Rise,
    /// Any increase is a regression.
    AnyRise,
    /// Shown, not judged.
    No,
}

/// The comparison table and whether `new` regressed: throughput down or
/// p99 latency up by more than `threshold_pct`, or more requests lost. The
/// other rows are shown, not judged; the table says which is which.
pub fn compare(base: &Summary, new: &Summary, threshold_pct: f64) -> (String, bool) {
    let mut o = String::new();
    if base.scenario != new.scenario || base.model != new.model {
        let _ = writeln!(
            o,
            "warning: different scenarios ({} {} loop, {} {} loop): the rows may not be comparable",
            base.scenario, base.model, new.scenario, new.model
        );
    }
    if base.target != new.target {
        let _ = writeln!(
            o,
            "note: targets differ ({} vs {})",
            base.target, new.target
        );
    }
    let _ = writeln!(
        o,
        "{:<24} {:>14} {:>14} {:>9}  gated",
        "", "base", "new", "change"
    );
    let mut regressed = false;
    let mut row = |o: &mut String, name: &str, a: f64, b: f64, count: bool, gate: Gate| {
        let change = if a == 0.0 {
            if b == 0.0 { 0.0 } else { f64::INFINITY }
        } else {
            (b - a) / a * 100.0
        };
        let bad = match gate {
            Gate::Drop => a > 0.0 && -change > threshold_pct,
            Gate::Rise => a > 0.0 && change > threshold_pct,
            Gate::AnyRise => b > a,
            Gate::No => false,
        };
        regressed |= bad;
        let (a, b) = if count {
            (format!("{a:.0}"), format!("{b:.0}"))
        } else {
            (format!("{a:.3}"), format!("{b:.3}"))
        };
        let change = if change.is_finite() {
            format!("{change:>+8.1}%")
        } else {
            "     new".to_owned()
        };
        let gated = match (gate, bad) {
            (Gate::No, _) => "",
            (_, true) => "REGRESSED",
            (_, false) => "ok",
        };
        let _ = writeln!(o, "{name:<24} {a:>14} {b:>14} {change}  {gated}");
    };
    row(
        &mut o,
        "throughput (replies/s)",
        base.throughput,
        new.throughput,
        false,
        Gate::Drop,
    );
    let (l, m) = (&base.latency_ms, &new.latency_ms);
    row(&mut o, "p50 ms", l.p50, m.p50, false, Gate::No);
    row(&mut o, "p90 ms", l.p90, m.p90, false, Gate::No);
    row(&mut o, "p99 ms", l.p99, m.p99, false, Gate::Rise);
    row(&mut o, "p99.9 ms", l.p999, m.p999, false, Gate::No);
    row(&mut o, "max ms", l.max, m.max, false, Gate::No);
    let (a, b) = (&base.accounting, &new.accounting);
    let errors = |x: &crate::summary::Accounting| {
        (x.unexpected_errors + x.transport_errors.values().sum::<u64>() + x.timed_out) as f64
    };
    row(&mut o, "errors", errors(a), errors(b), true, Gate::No);
    row(
        &mut o,
        "lost",
        a.lost as f64,
        b.lost as f64,
        true,
        Gate::AnyRise,
    );
    let _ = writeln!(
        o,
        "{}",
        if regressed {
            format!(
                "REGRESSION: a gated row is worse (throughput or p99 beyond {threshold_pct}%, or more lost)"
            )
        } else {
            format!(
                "no regression in the gated rows (throughput and p99 within {threshold_pct}%, no more lost)"
            )
        }
    );
    (o, regressed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(scenario: &str, throughput: f64, p99: f64, p999: f64, lost: u64) -> Summary {
        let mut s: Summary =
            serde_json::from_str(include_str!("compare_fixture.json")).expect("fixture");
        s.scenario = scenario.into();
        s.throughput = throughput;
        s.latency_ms.p99 = p99;
        s.latency_ms.p999 = p999;
        s.accounting.lost = lost;
        s
    }

    #[test]
    fn only_gated_rows_regress_and_the_table_says_which() {
        let base = summary("a", 1000.0, 10.0, 20.0, 0);
        // p99.9 +43 %: shown, not gated.
        let (t, bad) = compare(&base, &summary("a", 990.0, 10.5, 28.6, 0), 10.0);
        assert!(!bad, "{t}");
        let p999 = t.lines().find(|l| l.starts_with("p99.9 ms")).unwrap();
        assert!(p999.contains("+43.0%") && !p999.contains("ok"), "{p999}");
        assert!(t.contains("no regression in the gated rows"), "{t}");
        let (t, bad) = compare(&base, &summary("a", 800.0, 10.0, 20.0, 0), 10.0);
        assert!(bad, "{t}");
        assert!(
            t.lines()
                .any(|l| l.starts_with("throughput") && l.ends_with("REGRESSED"))
        );
        let (_, bad) = compare(&base, &summary("a", 1000.0, 12.0, 20.0, 0), 10.0);
        assert!(bad, "p99 +20 %");
        let (t, bad) = compare(&base, &summary("a", 1000.0, 10.0, 20.0, 1), 10.0);
        assert!(bad, "{t}");
        // Counts are whole numbers.
        let lost = t.lines().find(|l| l.starts_with("lost")).unwrap();
        assert!(
            lost.contains(" 0 ") && lost.contains(" 1 ") && !lost.contains("0.000"),
            "{lost}"
        );
        let (t, _) = compare(&base, &summary("b", 1000.0, 10.0, 20.0, 0), 10.0);
        assert!(t.starts_with("warning: different scenarios"), "{t}");
    }
}
