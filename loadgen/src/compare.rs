//! `npamp-loadgen compare BASE.json NEW.json`: two summaries side by side.

use std::fmt::Write as _;

use crate::report::Summary;

/// The comparison table and whether `new` regressed past `threshold_pct`
/// (throughput down, or p99 latency up, by more than that).
pub fn compare(base: &Summary, new: &Summary, threshold_pct: f64) -> (String, bool) {
    let mut o = String::new();
    let _ = writeln!(o, "{:<22} {:>14} {:>14} {:>9}", "", "base", "new", "change");
    let row = |o: &mut String, name: &str, a: f64, b: f64| {
        let change = if a == 0.0 { 0.0 } else { (b - a) / a * 100.0 };
        let _ = writeln!(o, "{name:<22} {a:>14.3} {b:>14.3} {change:>+8.1}%");
    };
    row(
        &mut o,
        "throughput (replies/s)",
        base.throughput,
        new.throughput,
    );
    let (l, m) = (&base.latency_ms, &new.latency_ms);
    row(&mut o, "p50 ms", l.p50, m.p50);
    row(&mut o, "p90 ms", l.p90, m.p90);
    row(&mut o, "p99 ms", l.p99, m.p99);
    row(&mut o, "p99.9 ms", l.p999, m.p999);
    row(&mut o, "max ms", l.max, m.max);
    let (a, b) = (&base.accounting, &new.accounting);
    let errors = |x: &crate::report::Accounting| {
        (x.unexpected_errors + x.transport_errors.values().sum::<u64>() + x.timed_out) as f64
    };
    row(&mut o, "errors", errors(a), errors(b));
    row(&mut o, "lost", a.lost as f64, b.lost as f64);
    let slower = base.throughput > 0.0
        && (base.throughput - new.throughput) / base.throughput * 100.0 > threshold_pct;
    let later = l.p99 > 0.0 && (m.p99 - l.p99) / l.p99 * 100.0 > threshold_pct;
    let regressed = slower || later || b.lost > a.lost;
    let _ = writeln!(
        o,
        "{}",
        if regressed {
            format!("REGRESSION beyond {threshold_pct}%")
        } else {
            format!("within {threshold_pct}%")
        }
    );
    (o, regressed)
}
