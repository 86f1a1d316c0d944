//! The final table of a run (or a merge), as `run` and `merge` print it:
//! what ran, every count, the rates, the latency, the schedule and the
//! verdicts.

use std::fmt::Write as _;

use crate::summary::{Accounting, Summary};

impl Summary {
    /// The final table.
    pub fn table(&self) -> String {
        let mut o = String::new();
        what_ran(&mut o, self);
        counts(&mut o, &self.accounting, self.interrupted);
        rates_and_latency(&mut o, self);
        schedule_and_verdicts(&mut o, self);
        o
    }
}

/// The scenario, its target and how long it was measured.
fn what_ran(o: &mut String, s: &Summary) {
    if s.interrupted {
        let _ = writeln!(
            o,
            "INTERRUPTED after {:.1} s: the figures are of the part that ran; what it had queued is dropped, and what was unanswered {} ms after is lost",
            s.warmup_s + s.duration_s,
            crate::engine::DRAIN_GRACE.as_millis()
        );
    }
    let _ = writeln!(
        o,
        "scenario   {} ({} loop) against {}",
        s.scenario, s.model, s.target
    );
    let late = if s.measured_span_s > s.duration_s + 0.05 {
        format!(" (its last reply came at {:.1} s)", s.measured_span_s)
    } else {
        String::new()
    };
    let _ = writeln!(
        o,
        "measured   {:.1} s{late} after {:.1} s warm-up, {} connections",
        s.duration_s, s.warmup_s, s.connections
    );
}

/// What was sent and how each request ended.
fn counts(o: &mut String, a: &Accounting, interrupted: bool) {
    let _ = writeln!(
        o,
        "sent       {} requests ({} measured, {} in warm-up), {} notifications, {} batches",
        a.sent_requests,
        a.sent_measured,
        a.sent_requests.saturating_sub(a.sent_measured),
        a.sent_notifications,
        a.sent_batches
    );
    if a.dropped > 0 && interrupted {
        let _ = writeln!(
            o,
            "DROPPED    {} requests not sent: queued for a busy connection when the run was interrupted",
            a.dropped
        );
    } else if a.dropped > 0 {
        let _ = writeln!(
            o,
            "DROPPED    {} requests not sent: the run fell so far behind that they would have left after its schedule's end",
            a.dropped
        );
    }
    let _ = writeln!(
        o,
        "replied    {} ({} ok, {} expected errors, {} unexpected errors)",
        a.replied, a.ok, a.expected_errors, a.unexpected_errors
    );
    if !a.error_codes.is_empty() {
        let _ = writeln!(o, "  codes    {:?}", a.error_codes);
    }
    if !a.http_status.is_empty() {
        let _ = writeln!(o, "  HTTP     {:?}", a.http_status);
    }
    let transport: u64 = a.transport_errors.values().sum();
    if transport == 0 {
        let _ = writeln!(o, "transport  no errors");
    } else {
        let _ = writeln!(o, "transport  {transport} errors {:?}", a.transport_errors);
    }
    let _ = writeln!(
        o,
        "timed out  {} ({} answered late)   lost {}   duplicated {}   mismatched {}   wrong result {}",
        a.timed_out, a.late, a.lost, a.duplicated, a.mismatched, a.wrong_result
    );
}

/// The rates, and the latency of all and of each method.
fn rates_and_latency(o: &mut String, s: &Summary) {
    let r = &s.rates;
    let offered = r
        .offered
        .map_or_else(|| "closed loop".to_owned(), |v| format!("{v:.0}/s"));
    let _ = writeln!(
        o,
        "rate       offered {offered}   sent {:.0}/s   achieved {:.0} replies/s",
        r.sent, r.achieved
    );
    let l = &s.latency_ms;
    // No reply measured: no latency to show (its figures would be 0).
    let _ = match l.count {
        0 => writeln!(o, "latency ms no reply measured (n=0)"),
        _ => writeln!(
            o,
            "latency ms p50 {:.3}  p90 {:.3}  p99 {:.3}  p99.9 {:.3}  max {:.3}  (n={})",
            l.p50, l.p90, l.p99, l.p999, l.max, l.count
        ),
    };
    for (m, l) in &s.per_method {
        let _ = match l.count {
            0 => writeln!(o, "  {m:<20} no reply measured (n=0)"),
            _ => writeln!(
                o,
                "  {m:<20} p50 {:.3}  p99 {:.3}  max {:.3}  (n={})",
                l.p50, l.p99, l.max, l.count
            ),
        };
    }
}

/// How late the generator was, whether the target was measured at all,
/// and each SLO check.
fn schedule_and_verdicts(o: &mut String, s: &Summary) {
    let lag = match s.schedule_lag_ms.count {
        0 => "no send measured".to_owned(),
        _ => format!(
            "p99 lag {:.3} ms, max {:.3} ms",
            s.schedule_lag_ms.p99, s.schedule_lag_ms.max
        ),
    };
    let _ = writeln!(
        o,
        "schedule   {lag}{}",
        match (s.generator_kept_schedule, s.held_back_sends) {
            (true, _) => String::new(),
            (false, 0) =>
                "  — THE GENERATOR COULD NOT KEEP ITS SCHEDULE: the target got less load than asked"
                    .to_owned(),
            (false, n) => format!(
                "  — the schedule slipped: {n} sends waited for a busy connection (the target, or too few connections)"
            ),
        }
    );
    if let Some(why) = s.not_served() {
        let _ = writeln!(o, "NOT SERVED {why}");
    }
    for c in &s.slo {
        let measured = match (c.name.as_str(), s.latency_ms.count) {
            ("p99_ms", 0) => "no reply measured".to_owned(),
            _ => format!("measured {:.4}", c.value),
        };
        let _ = writeln!(
            o,
            "SLO        {:<16} {} (limit {}, {measured})",
            c.name,
            if c.pass { "pass" } else { "FAIL" },
            c.limit,
        );
    }
}
