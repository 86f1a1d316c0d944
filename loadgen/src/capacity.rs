//! `npamp-loadgen capacity`: the highest open-loop rate at which a target
//! still meets an SLO. Steps up by doubling until a step fails (or, when
//! the first one fails, down by halving until one passes), then bisects
//! between the highest rate that passed and the lowest that failed until
//! they are within the asked precision. A step passes when the SLO holds
//! *and* the target kept up (its achieved rate is within 3 % of the offered
//! one); a step in which the generator itself fell behind is not the
//! target's knee, and the search stops there and says so. A step in which
//! no request got a successful reply (an unreachable target, or one that
//! refuses every request: `run`'s "not served") ends the search at once,
//! with its cause.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::chart::{self, Axes, BLUE, Chart, GREEN, ORANGE, RED, Scale, Series, label};
use crate::summary::Summary;

/// `--slo "p99<50ms,errors<0.1%"`: every term must hold.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Slo {
    /// (quantile name, limit in ms): `p50`, `p90`, `p99`, `p99.9`.
    pub latency: Vec<(String, f64)>,
    /// Failed requests (unexpected errors, transport errors, timeouts,
    /// lost) over requests sent.
    pub errors: Option<f64>,
}

impl std::str::FromStr for Slo {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let mut slo = Slo::default();
        for term in s.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let (name, limit) = term.split_once('<').ok_or_else(|| {
                format!("{term:?}: expected NAME<LIMIT, e.g. p99<50ms or errors<0.1%")
            })?;
            let (name, limit) = (name.trim(), limit.trim().trim_start_matches('='));
            match name {
                "p50" | "p90" | "p99" | "p99.9" => {
                    let ms = latency_ms(limit).ok_or_else(|| {
                        format!("{term:?}: a latency limit is a time, e.g. 50ms, 2s, 500us")
                    })?;
                    slo.latency.push((name.to_owned(), ms));
                }
                "errors" => {
                    let share = match limit.strip_suffix('%') {
                        Some(p) => p.trim().parse::<f64>().map(|p| p / 100.0),
                        None => limit.parse::<f64>(),
                    }
                    .ok()
                    .filter(|v| (0.0..=1.0).contains(v))
                    .ok_or_else(|| {
                        format!("{term:?}: an error limit is a share, e.g. 0.1% or 0.001")
                    })?;
                    slo.errors = Some(share);
                }
                other => {
                    return Err(format!(
                        "{other:?}: expected p50, p90, p99, p99.9 or errors"
                    ));
                }
            }
        }
        if slo.latency.is_empty() && slo.errors.is_none() {
            return Err("an empty SLO: give e.g. \"p99<50ms,errors<0.1%\"".into());
        }
        Ok(slo)
    }
}

impl std::fmt::Display for Slo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut terms: Vec<String> = self
            .latency
            .iter()
            .map(|(q, ms)| format!("{q}<{ms}ms"))
            .collect();
        if let Some(e) = self.errors {
            terms.push(format!("errors<{}%", e * 100.0));
        }
        f.write_str(&terms.join(","))
    }
}

fn latency_ms(text: &str) -> Option<f64> {
    let t = text.trim();
    let (number, scale) = if let Some(n) = t.strip_suffix("ms") {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix("us") {
        (n, 1e-3)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1e3)
    } else {
        return None;
    };
    number
        .trim()
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v > 0.0)
        .map(|v| v * scale)
}

/// The target must answer at least this share of the offered rate for a
/// step to pass: below it, it did not keep up, whatever its latency.
pub const KEPT_UP: f64 = 0.97;

/// One measured step of the search.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Step {
    /// Offered, requests per second.
    pub rate: f64,
    /// Replies per second of the measured span.
    pub achieved: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub error_share: f64,
    /// The generator fell behind its schedule on its own (no connection
    /// was busy): this step measured the generator, not the target.
    pub generator_bound: bool,
    pub pass: bool,
    /// Why it failed, when it did.
    pub why: Option<String>,
    /// No request got a successful reply (transport errors, timeouts,
    /// errors only: `run`'s "not served"): why, when so. The search ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_served: Option<String>,
}

impl Step {
    /// One verdict from several trials of one rate: it passes when most of
    /// them pass (so one noisy trial does not move the knee), and its
    /// numbers are the median trial's by p99. `None` for no trials.
    pub fn of_trials(mut trials: Vec<Step>) -> Option<Step> {
        let n = trials.len();
        let passed = trials.iter().filter(|s| s.pass).count();
        let bound = trials.iter().filter(|s| s.generator_bound).count();
        // Most trials not served: the target is gone (one such trial, a
        // restart mid-trial, is outvoted as any other).
        let gone = trials.iter().filter(|s| s.not_served.is_some()).count();
        let not_served = (2 * gone > n)
            .then(|| trials.iter().find_map(|s| s.not_served.clone()))
            .flatten();
        let failing_why = trials.iter().find_map(|s| s.why.clone());
        trials.sort_by(|a, b| a.p99_ms.total_cmp(&b.p99_ms));
        let mut step = trials.into_iter().nth(n / 2)?;
        step.pass = 2 * passed > n && not_served.is_none();
        step.generator_bound = 2 * bound > n;
        step.not_served = not_served;
        step.why = match (step.pass, n) {
            (true, _) => None,
            (false, 1) => failing_why,
            (false, _) => Some(format!(
                "{} of {n} trials failed ({})",
                n - passed,
                failing_why.unwrap_or_else(|| "the generator fell behind".into())
            )),
        };
        Some(step)
    }

    /// Judges a step's summary against `slo`.
    pub fn judge(rate: f64, summary: &Summary, slo: &Slo) -> Self {
        let a = &summary.accounting;
        let failed =
            a.unexpected_errors + a.transport_errors.values().sum::<u64>() + a.timed_out + a.lost;
        let error_share = failed as f64 / a.sent_requests.max(1) as f64;
        let l = &summary.latency_ms;
        let mut why = Vec::new();
        for (q, limit) in &slo.latency {
            let v = match q.as_str() {
                "p50" => l.p50,
                "p90" => l.p90,
                "p99" => l.p99,
                _ => l.p999,
            };
            if l.count == 0 {
                why.push(format!("{q}: no reply measured"));
            } else if v > *limit {
                why.push(format!("{q} {v:.3} ms > {limit} ms"));
            }
        }
        if let Some(limit) = slo.errors
            && error_share > limit
        {
            why.push(format!(
                "errors {:.3} % > {:.3} %",
                error_share * 100.0,
                limit * 100.0
            ));
        }
        if summary.throughput < KEPT_UP * rate {
            why.push(format!(
                "achieved {:.0}/s of {rate:.0}/s offered",
                summary.throughput
            ));
        }
        // A schedule that slipped while sends waited for busy connections
        // is the target's (or too few connections'); one that slipped
        // without that is the generator's own.
        let held_back = summary.held_back_sends as f64 > 0.01 * a.sent_requests as f64;
        let generator_bound = !summary.generator_kept_schedule && !held_back;
        if !summary.generator_kept_schedule {
            why.push(if held_back {
                format!(
                    "{} sends waited for a busy connection",
                    summary.held_back_sends
                )
            } else {
                "the generator fell behind its schedule".into()
            });
        }
        // As `run` judges a target not served: no successful reply at all.
        let not_served = (a.sent_requests > 0 && a.ok + a.expected_errors == 0).then(|| {
            let causes: Vec<String> = a
                .transport_errors
                .iter()
                .map(|(what, n)| format!("{what} ({n})"))
                .chain(a.http_status.iter().map(|(s, n)| format!("HTTP {s} ({n})")))
                .chain(
                    a.error_codes
                        .iter()
                        .map(|(c, n)| format!("error {c} ({n})")),
                )
                .chain((a.timed_out > 0).then(|| format!("timed out ({})", a.timed_out)))
                .collect();
            let causes = match causes.is_empty() {
                true => "no reply".to_owned(),
                false => causes.join(", "),
            };
            format!(
                "not one of {} requests got a successful reply: {causes}",
                a.sent_requests
            )
        });
        Step {
            rate,
            achieved: summary.throughput,
            p50_ms: l.p50,
            p99_ms: l.p99,
            p999_ms: l.p999,
            error_share,
            generator_bound,
            pass: why.is_empty() && not_served.is_none(),
            why: (!why.is_empty()).then(|| why.join("; ")),
            not_served,
        }
    }
}

/// How the search goes.
#[derive(Clone, Copy, Debug)]
pub struct Search {
    /// Times each rate is measured; the rate passes when most of them do
    /// (see [`Step::of_trials`]).
    pub trials: usize,
    /// The first rate tried.
    pub start: f64,
    /// No rate above this is tried.
    pub max: f64,
    /// Stop bisecting when the failing rate is within this share above the
    /// passing one (0.05: 5 %).
    pub precision: f64,
}

/// What the search found.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Capacity {
    pub slo: Slo,
    /// The highest rate that passed (none: not even the first).
    pub knee: Option<f64>,
    /// The lowest rate above it that failed (none: none failed up to
    /// `max`).
    pub failed_at: Option<f64>,
    /// The search stopped because the generator, not the target, could not
    /// go faster.
    pub generator_bound: bool,
    /// The search ended at once because a step got no answer at all: why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_served: Option<String>,
    /// Every step, in the order run.
    pub steps: Vec<Step>,
}

/// The lowest rate the search goes down to when even the first step fails.
pub const MIN_RATE: f64 = 1.0;

/// A step's verdict, as the search reads it.
struct Verdict {
    pass: bool,
    generator_bound: bool,
    not_served: Option<String>,
}

impl Capacity {
    /// Runs the search; `measure(rate)` runs one step.
    pub fn search<E>(
        slo: &Slo,
        how: Search,
        mut measure: impl FnMut(f64) -> Result<Step, E>,
    ) -> Result<Self, E> {
        let mut steps: Vec<Step> = Vec::new();
        // A step in which the generator fell behind is run once more, and
        // the second one decides: one stall of a shared machine (a thread
        // held off its CPU for tens of milliseconds mid-step) says nothing
        // of the generator's limit; two in a row do. Both are in the table.
        let mut step_at = |rate: f64, steps: &mut Vec<Step>| -> Result<Verdict, E> {
            let mut step = measure(rate)?;
            if step.generator_bound && step.not_served.is_none() {
                steps.push(step);
                step = measure(rate)?;
            }
            let verdict = Verdict {
                pass: step.pass && !step.generator_bound,
                generator_bound: step.generator_bound,
                not_served: step.not_served.clone(),
            };
            steps.push(step);
            Ok(verdict)
        };
        let mut lo: Option<f64> = None;
        let mut hi: Option<f64> = None;
        let mut generator_bound = false;
        let mut not_served = None;
        // What a verdict does to the bracket; `false` ends the search.
        let mut take = |rate: f64, v: Verdict, lo: &mut Option<f64>, hi: &mut Option<f64>| {
            if v.not_served.is_some() {
                not_served = v.not_served;
                return false;
            }
            if v.generator_bound {
                generator_bound = true;
                return false;
            }
            match v.pass {
                true => *lo = Some(lo.map_or(rate, |l| l.max(rate))),
                false => *hi = Some(hi.map_or(rate, |h| h.min(rate))),
            }
            true
        };
        let mut rate = how.start.min(how.max);
        // Up, doubling, until a step fails or the top is reached.
        let mut going = loop {
            let v = step_at(rate, &mut steps)?;
            if !take(rate, v, &mut lo, &mut hi) {
                break false;
            }
            if hi.is_some() || rate >= how.max {
                break true;
            }
            rate = (rate * 2.0).min(how.max);
        };
        // The first step failed: down, halving, until one passes.
        while going && lo.is_none() && rate / 2.0 >= MIN_RATE && steps.len() < 64 {
            rate /= 2.0;
            let v = step_at(rate, &mut steps)?;
            going = take(rate, v, &mut lo, &mut hi);
        }
        // Then halve the bracket until it is narrow enough.
        while going
            && let (Some(l), Some(h)) = (lo, hi)
            && (h - l) / l > how.precision
            && steps.len() < 64
        {
            let mid = (l + h) / 2.0;
            let v = step_at(mid, &mut steps)?;
            going = take(mid, v, &mut lo, &mut hi);
        }
        Ok(Capacity {
            slo: slo.clone(),
            knee: lo,
            failed_at: hi,
            generator_bound,
            not_served,
            steps,
        })
    }

    /// The table of steps and the verdict.
    pub fn table(&self) -> String {
        let mut o = String::new();
        let _ = writeln!(
            o,
            "{:>10} {:>10} {:>9} {:>9} {:>9} {:>8}  verdict",
            "offered/s", "achieved/s", "p50 ms", "p99 ms", "p99.9 ms", "errors"
        );
        for s in &self.steps {
            // A step with no reply has no latency: dashes, not zeros.
            let ms = |v: f64| match s.achieved > 0.0 {
                true => format!("{v:>9.3}"),
                false => format!("{:>9}", "-"),
            };
            let _ = writeln!(
                o,
                "{:>10.0} {:>10.0} {} {} {} {:>7.3}%  {}",
                s.rate,
                s.achieved,
                ms(s.p50_ms),
                ms(s.p99_ms),
                ms(s.p999_ms),
                s.error_share * 100.0,
                match (&s.not_served, &s.why) {
                    (Some(gone), _) => format!("not served: {gone}"),
                    (None, Some(w)) => format!("fail: {w}"),
                    (None, None) => "pass".to_owned(),
                }
            );
        }
        let _ = writeln!(o, "{}", self.verdict());
        o
    }

    pub fn verdict(&self) -> String {
        if let Some(why) = &self.not_served {
            return match self.knee {
                Some(k) => format!(
                    "knee at least {k:.0}/s ({}), then the search stopped, not served: {why}",
                    self.slo
                ),
                None => format!("no knee: the search stopped, not served: {why}"),
            };
        }
        match (self.knee, self.failed_at, self.generator_bound) {
            (Some(k), _, true) => format!(
                "knee at least {k:.0}/s ({}): the generator could not offer more; run more workers (--shard) to find the target's",
                self.slo
            ),
            (None, _, true) => "no knee: the generator fell behind at the first step".into(),
            (Some(k), Some(f), false) => format!(
                "knee {k:.0}/s ({}): passes; {f:.0}/s fails ({:.1} % above)",
                self.slo,
                (f - k) / k * 100.0
            ),
            (Some(k), None, false) => {
                format!(
                    "knee at least {k:.0}/s ({}): every step up to the top passed",
                    self.slo
                )
            }
            (None, _, false) => format!("no rate tried meets {}", self.slo),
        }
    }
}

/// Which of a step's latencies a line shows.
type Quantile = fn(&Step) -> f64;

/// Latency (p50 and p99) against the offered rate, a mark per step (the
/// failing ones hollow, each one's tip saying what it achieved), the SLO's
/// limits and the knee marked.
///
/// The x axis is the offered rate, not the achieved one: the steps and
/// the knee are offered rates, and an overloaded target answers *fewer*
/// replies a second the more it is offered, so a line through achieved
/// rates runs back on itself. Each line joins one point a rate, the step
/// that decided it (the last one measured: a generator-bound step is run
/// twice), in order of rate. Both axes are `Scale::fit`: logarithmic
/// where their values span more than a decade (a search doubling from
/// 100/s to 6 400/s; 2 ms under a 20 ms limit and 1 s past the knee), the
/// limits counted in, so that each lies clear of the x axis. The limits
/// are named right of the frame and the knee above it: off the lines.
pub fn svg(c: &Capacity, title: &str) -> String {
    let w = 760.0;
    let mut o = String::new();
    let top = chart::heading(
        &mut o,
        10.0,
        w - 20.0,
        &format!("{title} — {}", c.verdict()),
    );
    let limits: Vec<(f64, &str, String)> = c
        .slo
        .latency
        .iter()
        .map(|(q, ms)| (*ms, ORANGE, format!("SLO {q} < {} ms", label(*ms))))
        .collect();
    let room = chart::level_room(limits.iter().map(|l| l.2.as_str())).max(30.0);
    let frame = Chart {
        x0: 80.0,
        // A line for the knee's name between the heading and the frame.
        y0: top + 22.0,
        width: w - 80.0 - room,
        height: 300.0,
    };
    let decided = by_rate(&c.steps);
    let lines: [(&str, &str, Quantile); 2] =
        [("p50", GREEN, |s| s.p50_ms), ("p99", BLUE, |s| s.p99_ms)];
    let points: Vec<Vec<(f64, f64)>> = lines
        .iter()
        .map(|(_, _, of)| decided.iter().map(|s| (s.rate, of(s))).collect())
        .collect();
    let series: Vec<Series<'_>> = lines
        .iter()
        .zip(&points)
        .map(|((name, colour, _), p)| Series::line(colour, name, p))
        .collect();
    let latencies = c.steps.iter().flat_map(|s| [s.p50_ms, s.p99_ms]);
    let axes = Axes {
        // Room right of the last step, for its marks and the knee's line.
        x: Scale::fit(c.steps.iter().map(|s| s.rate)).with_headroom(),
        y: Scale::fit(latencies.chain(limits.iter().map(|l| l.0))),
        x_title: "offered rate, requests/s (hollow marks: failed steps)",
        y_title: "latency, ms",
        shade: None,
    };
    let plot = frame.draw(&mut o, &axes, &series);
    for (name, colour, of) in lines {
        for s in &c.steps {
            let tip = format!(
                "{name} {:.3} ms at {:.0}/s offered, {:.0}/s achieved{}",
                of(s),
                s.rate,
                s.achieved,
                s.why.as_deref().map_or(String::new(), |w| format!(": {w}"))
            );
            plot.point(&mut o, (s.rate, of(s)), colour, !s.pass, &tip);
        }
    }
    plot.levels(&mut o, &limits);
    if let Some(k) = c.knee {
        let text = format!("knee {}/s", label(k.round()));
        plot.upright(&mut o, k, RED, &text);
    }
    let bottom = frame.y0 + frame.height + chart::below(&series, frame.width);
    chart::finish(chart::document(w, bottom + 10.0) + &o)
}

/// One step a rate, in order of rate: the last one measured at it (the
/// one that decided it).
fn by_rate(steps: &[Step]) -> Vec<&Step> {
    let mut decided: Vec<&Step> = Vec::new();
    for s in steps {
        match decided.iter_mut().find(|d| d.rate == s.rate) {
            Some(d) => *d = s,
            None => decided.push(s),
        }
    }
    decided.sort_by(|a, b| a.rate.total_cmp(&b.rate));
    decided
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chart::CHAR_WIDTH;

    #[test]
    fn slos_parse_as_a_planner_writes_them() {
        let s: Slo = "p99<50ms, errors<0.1%".parse().unwrap();
        assert_eq!(s.latency, vec![("p99".to_owned(), 50.0)]);
        assert_eq!(s.errors, Some(0.001));
        let s: Slo = "p50<500us,p99.9<2s,errors<0.01".parse().unwrap();
        assert_eq!(
            s.latency,
            vec![("p50".to_owned(), 0.5), ("p99.9".to_owned(), 2000.0)]
        );
        assert_eq!(s.errors, Some(0.01));
        for bad in ["", "p99", "p99<50", "p98<1ms", "errors<5x", "errors<200%"] {
            assert!(bad.parse::<Slo>().is_err(), "{bad}");
        }
    }

    /// A target whose p99 is 1 ms below `knee` req/s and 100 ms above.
    fn target(knee: f64, generator_max: f64) -> impl FnMut(f64) -> Result<Step, ()> {
        move |rate| {
            let over = rate > knee;
            let kept = rate <= generator_max;
            Ok(Step {
                rate,
                achieved: if over { knee } else { rate },
                p50_ms: 0.5,
                p99_ms: if over { 100.0 } else { 1.0 },
                p999_ms: 2.0,
                error_share: 0.0,
                generator_bound: !kept,
                pass: !over && kept,
                why: over.then(|| "p99".into()),
                not_served: None,
            })
        }
    }

    /// An SLO of p99 < 50 ms, and a search of one trial a step from
    /// 100/s up to 1e6/s, to `precision`.
    fn one_trial_from_100(precision: f64) -> (Slo, Search) {
        let slo = "p99<50ms".parse().unwrap();
        let how = Search {
            trials: 1,
            start: 100.0,
            max: 1e6,
            precision,
        };
        (slo, how)
    }

    #[test]
    fn the_knee_label_stays_above_the_frame_and_within_its_width() {
        let (slo, how) = one_trial_from_100(0.01);
        // A knee just below the highest step, so its line is near the
        // frame's right edge.
        let c = Capacity::search(&slo, how, target(6300.0, 1e9)).unwrap();
        let drawn = svg(&c, "test");
        let text = drawn
            .split("<text ")
            .find(|t| t.contains(">knee "))
            .expect("a knee label");
        let attr = |within: &str, name: &str| -> f64 {
            within
                .split(&format!(" {name}=\""))
                .nth(1)
                .or_else(|| within.strip_prefix(&format!("{name}=\"")))
                .and_then(|rest| rest.split('"').next())
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{name} in {within}"))
        };
        let frame = drawn
            .split("<rect ")
            .find(|r| r.contains(r#"fill="none""#))
            .expect("the frame");
        let (x0, y0, width) = (attr(frame, "x"), attr(frame, "y"), attr(frame, "width"));
        // Above the frame's top edge: over no line.
        assert!(attr(text, "y") <= y0 - 4.0, "{text}");
        let label = text
            .split('>')
            .nth(1)
            .and_then(|t| t.split('<').next())
            .expect("the label's text");
        let wide = CHAR_WIDTH * label.chars().count() as f64;
        assert!(text.contains(r#"text-anchor="middle""#), "{text}");
        let (left, right) = (attr(text, "x") - wide / 2.0, attr(text, "x") + wide / 2.0);
        assert!(left >= x0 && right <= x0 + width, "{left} {right}: {text}");
    }

    #[test]
    fn the_curve_joins_one_step_a_rate_in_order_of_rate() {
        let step = |rate: f64, p99_ms: f64| Step {
            p99_ms,
            ..target(1e9, 1e9)(rate).expect("a step")
        };
        let steps = vec![
            step(400.0, 1.0),
            step(100.0, 2.0),
            step(400.0, 3.0),
            step(200.0, 4.0),
        ];
        let rates: Vec<(f64, f64)> = by_rate(&steps).iter().map(|s| (s.rate, s.p99_ms)).collect();
        assert_eq!(rates, [(100.0, 2.0), (200.0, 4.0), (400.0, 3.0)]);
    }

    #[test]
    fn most_trials_decide_and_the_median_one_is_shown() {
        let trial = |p99_ms: f64, pass: bool| Step {
            rate: 1000.0,
            achieved: 1000.0,
            p50_ms: 1.0,
            p99_ms,
            p999_ms: p99_ms,
            error_share: 0.0,
            generator_bound: false,
            pass,
            why: (!pass).then(|| "p99".into()),
            not_served: None,
        };
        // One noisy trial does not fail the rate.
        let s = Step::of_trials(vec![
            trial(9.0, true),
            trial(80.0, false),
            trial(11.0, true),
        ]);
        let s = s.expect("a step");
        assert!(s.pass && s.why.is_none());
        assert_eq!(s.p99_ms, 11.0, "the median trial's p99");
        // Two failures of three do.
        let s = Step::of_trials(vec![
            trial(60.0, false),
            trial(9.0, true),
            trial(70.0, false),
        ]);
        let s = s.expect("a step");
        assert!(!s.pass);
        assert_eq!(s.why.as_deref(), Some("2 of 3 trials failed (p99)"));
        assert_eq!(s.p99_ms, 60.0);
        // One trial is the step itself.
        let s = Step::of_trials(vec![trial(60.0, false)]).expect("a step");
        assert_eq!((s.pass, s.why.as_deref()), (false, Some("p99")));
        assert!(Step::of_trials(Vec::new()).is_none());
    }

    #[test]
    fn the_search_brackets_the_knee_within_the_precision() {
        let (slo, how) = one_trial_from_100(0.05);
        let c = Capacity::search(&slo, how, target(4321.0, 1e9)).unwrap();
        let (k, f) = (c.knee.unwrap(), c.failed_at.unwrap());
        assert!(k <= 4321.0 && f > 4321.0, "{k} {f}");
        assert!((f - k) / k <= 0.05, "{k} {f}");
        assert!(c.steps.len() < 20, "{}", c.steps.len());
        assert!(
            c.verdict().starts_with(&format!("knee {k:.0}/s")),
            "{}",
            c.verdict()
        );
        // A knee below the first step: down by halving until a step
        // passes, then bisected to the precision as any other.
        for knee in [30.0, 77.7, 3.0] {
            let c = Capacity::search(&slo, how, target(knee, 1e9)).unwrap();
            let (k, f) = (c.knee.unwrap(), c.failed_at.unwrap());
            assert!(k <= knee && f > knee, "{knee}: {k} {f}\n{}", c.table());
            assert!((f - k) / k <= 0.05, "{knee}: {k} {f}\n{}", c.table());
        }
        // The default start of 500/s above a knee of 123/s: not a
        // factor-of-two answer.
        let high = Search {
            start: 500.0,
            ..how
        };
        let c = Capacity::search(&slo, high, target(123.0, 1e9)).unwrap();
        let (k, f) = (c.knee.unwrap(), c.failed_at.unwrap());
        assert!(
            k <= 123.0 && f > 123.0 && (f - k) / k <= 0.05,
            "{}",
            c.table()
        );
        // Below the lowest rate tried: no knee, the lowest failing rate.
        let c = Capacity::search(&slo, how, target(0.5, 1e9)).unwrap();
        assert_eq!(c.knee, None, "{}", c.table());
        assert!(c.failed_at.is_some_and(|f| f < 2.0), "{}", c.table());
        // A generator that cannot go past 2 000/s never names that the knee.
        let c = Capacity::search(&slo, how, target(4321.0, 2000.0)).unwrap();
        assert!(c.generator_bound);
        assert!(
            c.verdict().contains("the generator could not offer more"),
            "{}",
            c.verdict()
        );
        // A generator that falls behind once, at the step that fails, is
        // given that step again; twice in a row, it is the generator's.
        let mut behind_at_400 = 1;
        let once = |rate: f64| {
            let mut step = target(300.0, 1e9)(rate)?;
            if rate == 400.0 && behind_at_400 > 0 {
                behind_at_400 -= 1;
                step.generator_bound = true;
            }
            Ok::<_, ()>(step)
        };
        let c = Capacity::search(&slo, how, once).unwrap();
        assert!(!c.generator_bound, "{}", c.table());
        assert_eq!(c.knee, Some(300.0), "{}", c.table());
        assert!(c.failed_at.is_some_and(|f| f > 300.0), "{}", c.table());
        let at_400: Vec<bool> = c
            .steps
            .iter()
            .filter(|s| s.rate == 400.0)
            .map(|s| s.generator_bound)
            .collect();
        assert_eq!(at_400, [true, false], "both are in the table");
        let c = Capacity::search(&slo, how, target(4321.0, 2000.0)).unwrap();
        let behind: Vec<f64> = c
            .steps
            .iter()
            .filter(|s| s.generator_bound)
            .map(|s| s.rate)
            .collect();
        assert_eq!(behind, [3200.0, 3200.0], "run twice, then the search stops");
        // A step not served (a dead target) ends the search at once, with
        // its cause, whatever the rate; after steps that passed, the knee
        // found so far is said with it.
        let gone = |rate: f64| {
            let mut step = target(4321.0, 1e9)(rate)?;
            step.pass = false;
            step.not_served = Some("connection refused (500)".into());
            Ok::<_, ()>(step)
        };
        let c = Capacity::search(&slo, how, gone).unwrap();
        assert_eq!((c.steps.len(), c.knee), (1, None), "{}", c.table());
        assert!(
            c.verdict()
                .starts_with("no knee: the search stopped, not served: connection refused"),
            "{}",
            c.verdict()
        );
        assert!(
            c.table().contains("not served: connection refused"),
            "{}",
            c.table()
        );
        let crashes_at_800 = |rate: f64| {
            let step = target(4321.0, 1e9)(rate)?;
            Ok::<_, ()>(match rate >= 800.0 {
                true => gone(rate)?,
                false => step,
            })
        };
        let c = Capacity::search(&slo, how, crashes_at_800).unwrap();
        assert!(
            c.verdict()
                .starts_with("knee at least 400/s (p99<50ms), then the search stopped, not served"),
            "{}",
            c.verdict()
        );
        // One trial of three not served (a restart mid-trial) is outvoted.
        let trial = |gone: bool| Step {
            not_served: gone.then(|| "connection refused (3)".into()),
            ..target(4321.0, 1e9)(100.0).expect("a step")
        };
        let s = Step::of_trials(vec![trial(false), trial(true), trial(false)]).expect("a step");
        assert!(s.pass && s.not_served.is_none());
        let s = Step::of_trials(vec![trial(true), trial(true), trial(false)]).expect("a step");
        assert!(!s.pass && s.not_served.is_some());
        // Nothing fails up to the top.
        let top = Search { max: 1000.0, ..how };
        let c = Capacity::search(&slo, top, target(4321.0, 1e9)).unwrap();
        assert_eq!((c.knee, c.failed_at), (Some(1000.0), None));
    }
}
