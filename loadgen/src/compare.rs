//! `npamp-loadgen compare BASE NEW…`: each NEW summary beside BASE, each a
//! `summary.json` or the run directory that holds one.
//!
//! A comparison says when its runs are not like for like (different
//! offered rates, scenarios or targets: a `WARNING` line each, before the
//! table), and calls nothing a regression that is within the noise: a
//! change must be past the threshold (relative) *and*, for latency, past
//! the noise floor (absolute), as [`Gates`] says.

use std::fmt::Write as _;

use crate::summary::{Accounting, Summary};

/// `compare --threshold`'s default, percent.
pub const DEFAULT_THRESHOLD_PCT: f64 = 10.0;

/// `compare --noise-floor-ms`'s default: a p99 that moved by less than
/// 1 ms did not regress, whatever the percentage. A millisecond is about
/// what one scheduling hiccup of a shared machine adds to a tail (a
/// thread held off its CPU for a time slice), so a sub-millisecond p99
/// doubling (0.323 → 0.606 ms, +88 %) is noise, not a finding.
pub const DEFAULT_NOISE_FLOOR_MS: f64 = 1.0;

/// Offered rates within this share of the greater are one load: the
/// runs' rates are compared. Further apart, throughput is not compared
/// (a run offered 30 000/s answers more than one offered 2 000/s, which
/// is not a +1 400 % improvement), and a warning says so.
pub const SAME_LOAD: f64 = 0.05;

/// What `compare` calls a regression.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Gates {
    /// A gated row regresses only when it is worse by more than this,
    /// percent: the relative floor.
    pub threshold_pct: f64,
    /// A latency row regresses only when it is also worse by more than
    /// this, ms: the absolute floor ([`DEFAULT_NOISE_FLOOR_MS`]).
    pub noise_floor_ms: f64,
}

impl Default for Gates {
    fn default() -> Self {
        Self {
            threshold_pct: DEFAULT_THRESHOLD_PCT,
            noise_floor_ms: DEFAULT_NOISE_FLOOR_MS,
        }
    }
}

/// How a row is judged.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Gate {
    /// Lower is a regression past the threshold.
    Drop,
    /// Higher is a regression past the threshold and the noise floor.
    Latency,
    /// Any increase is a regression.
    AnyRise,
    /// Gated when like for like, but not here: says why.
    NotCompared,
    /// Shown, not judged.
    No,
}

/// The warnings that `base` and `new` are not like for like: offered
/// rates more than [`SAME_LOAD`] apart, other scenarios or load models,
/// other targets. The first says whether the rates may be compared.
fn warnings(base: &Summary, new: &Summary) -> (Vec<String>, bool) {
    let mut w = Vec::new();
    let rate = |s: &Summary| {
        s.rates
            .offered
            .map_or_else(|| "closed loop".to_owned(), |r| format!("{r:.0}/s"))
    };
    let same_load = match (base.rates.offered, new.rates.offered) {
        (None, None) => true,
        (Some(a), Some(b)) => (a - b).abs() <= SAME_LOAD * a.abs().max(b.abs()),
        _ => false,
    };
    if !same_load {
        w.push(format!(
            "WARNING: offered rates differ (base {}, new {}): throughput is not compared, and latency was measured under another load",
            rate(base),
            rate(new)
        ));
    }
    if base.scenario != new.scenario || base.model != new.model {
        w.push(format!(
            "WARNING: different scenarios (base {:?}, {} loop; new {:?}, {} loop): the rows may not be comparable",
            base.scenario, base.model, new.scenario, new.model
        ));
    }
    if base.target != new.target {
        w.push(format!(
            "WARNING: different targets (base {}, new {}): the rows may not be comparable",
            base.target, new.target
        ));
    }
    (w, same_load)
}

/// The comparison table and whether `new` regressed: throughput down by
/// more than the threshold (at one offered rate), p99 latency up by more
/// than the threshold and the noise floor, or more requests lost. The
/// other rows are shown, not judged; the table says which is which, and
/// its columns are as wide as their widest entry.
pub fn compare(base: &Summary, new: &Summary, gates: &Gates) -> (String, bool) {
    let Gates {
        threshold_pct,
        noise_floor_ms,
    } = *gates;
    let mut o = String::new();
    let (warned, same_load) = warnings(base, new);
    for w in &warned {
        let _ = writeln!(o, "{w}");
    }
    let mut rows: Vec<[String; 5]> = vec![["", "base", "new", "change", "gated"].map(String::from)];
    let mut regressed = false;
    let mut row = |name: &str, a: f64, b: f64, count: bool, gate: Gate| {
        let change = if a == 0.0 {
            if b == 0.0 { 0.0 } else { f64::INFINITY }
        } else {
            (b - a) / a * 100.0
        };
        let past = match gate {
            Gate::Drop => a > 0.0 && -change > threshold_pct,
            Gate::Latency => a > 0.0 && change > threshold_pct,
            Gate::AnyRise => b > a,
            Gate::NotCompared | Gate::No => false,
        };
        // Past the threshold, but by less than the floor: noise.
        let noise = gate == Gate::Latency && past && b - a <= noise_floor_ms;
        regressed |= past && !noise;
        let gated = match (gate, past, noise) {
            (Gate::No, ..) => String::new(),
            (Gate::NotCompared, ..) => "not compared".to_owned(),
            (_, true, true) => format!("ok (noise: within {} ms)", noise_floor_ms),
            (_, true, false) => "REGRESSED".to_owned(),
            (_, false, _) => "ok".to_owned(),
        };
        let (a, b) = match count {
            true => (format!("{a:.0}"), format!("{b:.0}")),
            false => (format!("{a:.3}"), format!("{b:.3}")),
        };
        let change = match change.is_finite() {
            true => format!("{change:+.1}%"),
            false => "new".to_owned(),
        };
        rows.push([name.to_owned(), a, b, change, gated]);
    };
    let throughput = match same_load {
        true => Gate::Drop,
        false => Gate::NotCompared,
    };
    row(
        "throughput (replies/s)",
        base.throughput,
        new.throughput,
        false,
        throughput,
    );
    let (l, m) = (&base.latency_ms, &new.latency_ms);
    row("p50 ms", l.p50, m.p50, false, Gate::No);
    row("p90 ms", l.p90, m.p90, false, Gate::No);
    row("p99 ms", l.p99, m.p99, false, Gate::Latency);
    row("p99.9 ms", l.p999, m.p999, false, Gate::No);
    row("max ms", l.max, m.max, false, Gate::No);
    let (a, b) = (&base.accounting, &new.accounting);
    let errors = |x: &Accounting| {
        (x.unexpected_errors + x.transport_errors.values().sum::<u64>() + x.timed_out) as f64
    };
    row("errors", errors(a), errors(b), true, Gate::No);
    row("lost", a.lost as f64, b.lost as f64, true, Gate::AnyRise);
    o.push_str(&aligned(&rows));
    let floor = format!("p99 also by more than the {noise_floor_ms} ms noise floor");
    let _ = writeln!(
        o,
        "{}{}",
        if regressed {
            format!(
                "REGRESSION: a gated row is worse (throughput or p99 beyond {threshold_pct}%, {floor}; or more lost)"
            )
        } else {
            format!(
                "no regression in the gated rows (throughput and p99 within {threshold_pct}%, or p99 within the {noise_floor_ms} ms noise floor; no more lost)"
            )
        },
        match warned.is_empty() {
            true => "",
            false => " — the runs are not like for like: see the WARNING above",
        }
    );
    (o, regressed)
}

/// `rows` (the first the header) in columns as wide as their widest
/// entry, two spaces apart: the name left, the numbers right, the verdict
/// left; no column is pushed out of line by a wide percentage.
fn aligned(rows: &[[String; 5]]) -> String {
    let mut widths = [0; 5];
    for r in rows {
        for (w, cell) in widths.iter_mut().zip(r) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut o = String::new();
    for [name, a, b, change, gated] in rows {
        let line = format!(
            "{name:<w0$}  {a:>w1$}  {b:>w2$}  {change:>w3$}  {gated}",
            w0 = widths[0],
            w1 = widths[1],
            w2 = widths[2],
            w3 = widths[3]
        );
        let _ = writeln!(o, "{}", line.trim_end());
    }
    o
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

    /// `base` against `new` by the default gates.
    fn judged(base: &Summary, new: &Summary) -> (String, bool) {
        compare(base, new, &Gates::default())
    }

    #[test]
    fn only_gated_rows_regress_and_the_table_says_which() {
        let base = summary("a", 1000.0, 10.0, 20.0, 0);
        // p99.9 +43 %: shown, not gated.
        let (t, bad) = judged(&base, &summary("a", 990.0, 10.5, 28.6, 0));
        assert!(!bad, "{t}");
        let p999 = t.lines().find(|l| l.starts_with("p99.9 ms")).unwrap();
        assert!(p999.contains("+43.0%") && !p999.contains("ok"), "{p999}");
        assert!(t.contains("no regression in the gated rows"), "{t}");
        let (t, bad) = judged(&base, &summary("a", 800.0, 10.0, 20.0, 0));
        assert!(bad, "{t}");
        assert!(
            t.lines()
                .any(|l| l.starts_with("throughput") && l.ends_with("REGRESSED"))
        );
        let (_, bad) = judged(&base, &summary("a", 1000.0, 12.0, 20.0, 0));
        assert!(bad, "p99 +20 %, +2 ms");
        let (t, bad) = judged(&base, &summary("a", 1000.0, 10.0, 20.0, 1));
        assert!(bad, "{t}");
        // Counts are whole numbers.
        let lost = t.lines().find(|l| l.starts_with("lost")).unwrap();
        assert!(
            lost.contains(" 0 ") && lost.contains(" 1 ") && !lost.contains("0.000"),
            "{lost}"
        );
    }

    #[test]
    fn sub_millisecond_noise_is_not_a_regression() {
        // The user's: p99 0.323 → 0.606 ms, +88 %, by 0.283 ms.
        let base = summary("a", 1000.0, 0.323, 1.0, 0);
        let (t, bad) = judged(&base, &summary("a", 1000.0, 0.606, 1.0, 0));
        assert!(!bad, "{t}");
        let p99 = t.lines().find(|l| l.starts_with("p99 ms")).unwrap();
        assert!(
            p99.contains("+87.6%") && p99.ends_with("ok (noise: within 1 ms)"),
            "{p99}"
        );
        // Past the floor, it is one.
        let (t, bad) = judged(&base, &summary("a", 1000.0, 1.5, 1.0, 0));
        assert!(bad, "{t}");
        // A floor of one's own: 0.1 ms.
        let fine = Gates {
            noise_floor_ms: 0.1,
            ..Gates::default()
        };
        let (t, bad) = compare(&base, &summary("a", 1000.0, 0.606, 1.0, 0), &fine);
        assert!(bad && t.contains("0.1 ms noise floor"), "{t}");
        // Within the threshold, a rise past the floor is not one either.
        let (t, bad) = judged(
            &summary("a", 1000.0, 40.0, 1.0, 0),
            &summary("a", 1000.0, 43.0, 1.0, 0),
        );
        assert!(!bad, "{t}");
    }

    #[test]
    fn runs_not_like_for_like_are_warned_of() {
        let mut base = summary("a", 2000.0, 10.0, 20.0, 0);
        base.rates.offered = Some(2000.0);
        let mut new = summary("a", 16440.0, 10.0, 20.0, 0);
        new.rates.offered = Some(30000.0);
        let (t, bad) = judged(&base, &new);
        assert!(!bad, "{t}");
        let first = t.lines().next().unwrap_or_default();
        assert!(
            first.starts_with("WARNING: offered rates differ")
                && first.contains("base 2000/s")
                && first.contains("new 30000/s"),
            "{t}"
        );
        let throughput = t.lines().find(|l| l.starts_with("throughput")).unwrap();
        assert!(
            throughput.contains("+722.0%") && throughput.ends_with("not compared"),
            "{throughput}"
        );
        assert!(t.contains("not like for like"), "{t}");
        // A throughput that fell at another load is not a regression.
        let mut fell = summary("a", 500.0, 10.0, 20.0, 0);
        fell.rates.offered = Some(500.0);
        let (t, bad) = judged(&base, &fell);
        assert!(!bad, "{t}");
        // Within 5 %: one load, compared, no warning.
        new.rates.offered = Some(2080.0);
        new.throughput = 2080.0;
        let (t, _) = judged(&base, &new);
        assert!(!t.contains("WARNING"), "{t}");
        // Open against closed loop.
        new.rates.offered = None;
        let (t, _) = judged(&base, &new);
        assert!(t.contains("(base 2000/s, new closed loop)"), "{t}");
        // Other scenarios, other targets.
        let mut other = summary("b", 1000.0, 10.0, 20.0, 0);
        other.target = "http://elsewhere:1/".into();
        let (t, _) = judged(&summary("a", 1000.0, 10.0, 20.0, 0), &other);
        let warned: Vec<&str> = t.lines().filter(|l| l.starts_with("WARNING")).collect();
        assert_eq!(warned.len(), 2, "{t}");
        assert!(
            warned[0].contains(r#"base "a", closed loop; new "b""#),
            "{t}"
        );
        assert!(
            warned[1].starts_with("WARNING: different targets")
                && warned[1].contains("new http://elsewhere:1/"),
            "{t}"
        );
    }

    #[test]
    fn the_columns_stay_in_line_for_any_change() {
        let base = summary("a", 2000.0, 10.0, 20.0, 0);
        let mut new = summary("a", 16440.0, 0.01, 19980.0, 3);
        new.latency_ms.max = 999_999.0;
        let (t, _) = judged(&base, &new);
        let table: Vec<&str> = t
            .lines()
            .filter(|l| !l.starts_with("WARNING") && !l.starts_with("REGRESSION"))
            .filter(|l| !l.starts_with("no regression"))
            .collect();
        for change in ["+722.0%", "-99.9%", "+99800.0%", "new"] {
            assert!(table.iter().any(|l| l.contains(change)), "{change}\n{t}");
        }
        // The change column ends at one place in every row, the header's.
        let end = |l: &str, word: &str| l.find(word).map(|i| i + word.len());
        let header = end(table[0], "change").expect("the header");
        for l in &table[1..] {
            let change = l
                .split_whitespace()
                .find(|w| w.ends_with('%') || *w == "new")
                .unwrap_or_else(|| panic!("a change in {l}"));
            assert_eq!(end(l, change), Some(header), "{l}\n{t}");
        }
        // And the numbers' columns too.
        let new_col = end(table[0], "new").expect("the header");
        let lost = table.iter().find(|l| l.starts_with("lost")).unwrap();
        assert_eq!(end(lost, " 3"), Some(new_col), "{t}");
    }
}
