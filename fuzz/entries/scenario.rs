//! Load-generator scenario files over arbitrary text: parsing and checking
//! never panic, and a scenario that passes the check can be run: its
//! durations and rates are usable and every message it generates is JSON.

use npamp_loadgen::mix::Generator;
use npamp_loadgen::scenario::Scenario;

/// One input, as the fuzzer hands it over.
pub fn run(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(s) = Scenario::parse(text, "fuzz.toml") else {
        return;
    };
    let measured = s.measured();
    let _ = (s.warmup(), s.timeout());
    for t in [0.0, 0.5, measured.as_secs_f64(), 1e9] {
        if let Some(rate) = s.rate_at(t) {
            assert!(rate.is_finite() && rate > 0.0, "rate {rate} at {t}");
        }
    }
    // The schedule's sends are in order and within the run.
    if let Some(schedule) = s.schedule() {
        let end = s.warmup() + measured;
        let mut last = std::time::Duration::ZERO;
        for k in [0, 1, 2, 3, schedule.len().saturating_sub(1), schedule.len()] {
            if let Some(at) = schedule.at(k) {
                assert!(at >= last && at <= end, "send {k} at {at:?}, end {end:?}");
                last = at;
            }
        }
    }
    let Ok(mut generator) = Generator::new(&s, 7) else {
        return;
    };
    let mut next = 0u64;
    for _ in 0..4 {
        let out = generator.next(|| {
            next += 1;
            next
        });
        serde_json::from_str::<serde_json::Value>(&out.text)
            .unwrap_or_else(|e| panic!("generated message is not JSON ({e})"));
    }
}
