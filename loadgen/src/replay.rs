//! Replay of real traffic: a gateway's capture (`serve --capture FILE`,
//! JSON Lines of arrival time, method and message) sent again, open loop,
//! each send at its original time from the first (divided by `--speed`),
//! with the accounting, reports and SLOs of `run`.
//!
//! Each recorded message keeps its method and its params as they were
//! captured (octets, redacted or not); its id is the run's own (replies are
//! matched and counted by it), a notification stays one, a batch stays a
//! batch. What is not a request or a notification (a client's answer to a
//! server's request in a session) is not replayed: it is counted and said.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde_json::value::RawValue;

/// One recorded send: when, and what.
#[derive(Clone, Debug)]
pub struct Recorded {
    /// Since the first send of the capture.
    pub at: Duration,
    pub objects: Vec<Object>,
    pub batch: bool,
}

/// One JSON-RPC message of a send.
#[derive(Clone, Debug)]
pub struct Object {
    /// Index into [`Recording::methods`].
    pub method: usize,
    /// A request (it had an id), else a notification.
    pub request: bool,
    /// `params` as captured, JSON text.
    pub params: Option<String>,
}

/// A capture, read.
pub struct Recording {
    pub sends: Vec<Recorded>,
    /// The methods, each once, in order of first appearance.
    pub methods: Vec<String>,
    /// Lines (messages) not replayed: answers, not requests.
    pub skipped: usize,
    /// SHA-256 of the file, hex (a run's hash names what it replayed).
    pub digest: String,
}

impl std::fmt::Debug for Recording {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "capture {} ({} sends)", self.digest, self.sends.len())
    }
}

#[derive(Deserialize)]
struct Line<'a> {
    at_us: u64,
    #[serde(borrow)]
    message: &'a RawValue,
}

#[derive(Deserialize)]
struct Message<'a> {
    #[serde(default)]
    id: Option<&'a RawValue>,
    #[serde(default)]
    method: Option<String>,
    #[serde(default, borrow)]
    params: Option<&'a RawValue>,
}

impl Recording {
    /// Reads a capture file; an error names the line.
    pub fn read(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
        Self::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    pub fn parse(text: &str) -> Result<Self, String> {
        let mut lines = text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty());
        match lines.next() {
            Some((_, header))
                if serde_json::from_str::<serde_json::Value>(header)
                    .ok()
                    .and_then(|h| h.get("npamp_capture")?.as_u64())
                    == Some(1) => {}
            _ => {
                return Err(
                    "line 1: not a capture (expected {\"npamp_capture\":1,…}, as `npamp-gateway serve --capture` writes)"
                        .into(),
                );
            }
        }
        let mut r = Recording {
            sends: Vec::new(),
            methods: Vec::new(),
            skipped: 0,
            digest: digest(text),
        };
        let mut index: std::collections::HashMap<String, usize> = Default::default();
        for (i, l) in lines {
            let at = |e: String| format!("line {}: {e}", i + 1);
            let line: Line = serde_json::from_str(l).map_err(|e| at(e.to_string()))?;
            let objects: Vec<Message> = match line.message.get().trim_start().as_bytes().first() {
                Some(b'[') => serde_json::from_str(line.message.get()),
                _ => serde_json::from_str(line.message.get()).map(|m| vec![m]),
            }
            .map_err(|e| at(format!("a message that is not JSON-RPC: {e}")))?;
            let batch = line.message.get().trim_start().starts_with('[');
            let objects: Vec<Object> = objects
                .into_iter()
                .filter_map(|m| {
                    let Some(name) = m.method else {
                        r.skipped += 1;
                        return None;
                    };
                    let method = *index.entry(name).or_insert_with_key(|name| {
                        r.methods.push(name.clone());
                        r.methods.len() - 1
                    });
                    Some(Object {
                        method,
                        request: m.id.is_some_and(|id| id.get() != "null"),
                        params: m.params.map(|p| p.get().to_owned()),
                    })
                })
                .collect();
            if objects.is_empty() {
                continue;
            }
            r.sends.push(Recorded {
                at: Duration::from_micros(line.at_us),
                objects,
                batch,
            });
        }
        if r.sends.is_empty() {
            return Err("no request or notification to replay".into());
        }
        // A gateway's threads stamp what arrives, then queue it for the
        // file: two messages microseconds apart may be written in the other
        // order. Replayed in the order they arrived, from the first.
        r.sends.sort_by_key(|s| s.at);
        let first = r.sends.first().map_or(Duration::ZERO, |s| s.at);
        for s in &mut r.sends {
            s.at -= first;
        }
        Ok(r)
    }

    /// From the first send to the last, as captured.
    pub fn span(&self) -> Duration {
        self.sends.last().map_or(Duration::ZERO, |s| s.at)
    }

    /// Requests in all (a batch's each, notifications not).
    pub fn requests(&self) -> u64 {
        self.sends
            .iter()
            .flat_map(|s| &s.objects)
            .filter(|o| o.request)
            .count() as u64
    }
}

/// A recording as a run sends it: the capture, and how much faster.
#[derive(Clone)]
pub struct Replay {
    pub recording: Arc<Recording>,
    pub speed: f64,
}

impl std::fmt::Debug for Replay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?} at {}x", self.recording, self.speed)
    }
}

impl Replay {
    /// When send `k` leaves, from the run's start.
    pub fn at(&self, k: usize) -> Option<Duration> {
        let s = self.recording.sends.get(k)?;
        Some(Duration::from_nanos(
            (s.at.as_nanos() as f64 / self.speed).round() as u64,
        ))
    }

    /// The run's length: the last send's time, and the rest of its second's
    /// share of the capture's rate (a capture of N sends over T places N
    /// in T + T / (N - 1), so that rates over it are the captured ones).
    pub fn duration(&self) -> Duration {
        let n = self.recording.sends.len().max(2) as f64;
        let span = self.recording.span().as_secs_f64() / self.speed;
        Duration::from_secs_f64((span * n / (n - 1.0)).max(1e-6))
    }

    /// Requests whose send falls in each second of the run.
    pub fn requests_per_second(&self, seconds: usize) -> Vec<f64> {
        let mut per = vec![0.0; seconds];
        for (k, s) in self.recording.sends.iter().enumerate() {
            let second = self.at(k).map_or(0, |t| t.as_secs() as usize);
            if let Some(slot) = per.get_mut(second) {
                *slot += s.objects.iter().filter(|o| o.request).count() as f64;
            }
        }
        per
    }
}

/// `--speed 2x` (or `2`, `0.5x`): how much faster than captured.
pub fn parse_speed(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .trim_end_matches(['x', 'X'])
        .parse()
        .map_err(|_| format!("{s:?}: expected a speed, e.g. 1x, 2x, 0.5x"))?;
    if !(v.is_finite() && v > 0.0 && v <= 1e6) {
        return Err(format!("{s:?}: a speed is above 0 (and at most 1000000x)"));
    }
    Ok(v)
}

fn digest(text: &str) -> String {
    let d = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, text.as_bytes());
    d.as_ref()[..8].iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAPTURE: &str = r#"{"npamp_capture":1,"started_unix_ms":1}
{"at_us":5000000,"method":"eth_call","message":{"jsonrpc":"2.0","id":"a","method":"eth_call","params":[{"to":"0x1"},"latest"]}}
{"at_us":5000500,"method":"note","message":{"jsonrpc":"2.0","method":"note"}}
{"at_us":5001000,"method":null,"message":[{"jsonrpc":"2.0","id":1,"method":"eth_call","params":[]},{"jsonrpc":"2.0","id":2,"result":7}]}
{"at_us":5003000,"method":null,"message":{"jsonrpc":"2.0","id":9,"result":true}}
"#;

    #[test]
    fn a_capture_reads_as_sends_at_their_times() {
        let r = Recording::parse(CAPTURE).expect("capture");
        assert_eq!(r.methods, ["eth_call", "note"]);
        assert_eq!(r.sends.len(), 3);
        assert_eq!(r.skipped, 2, "two answers are not replayed");
        assert_eq!(r.sends[0].at, Duration::ZERO);
        assert_eq!(r.sends[2].at, Duration::from_micros(1000));
        assert_eq!(
            r.sends[0].objects[0].params.as_deref(),
            Some(r#"[{"to":"0x1"},"latest"]"#)
        );
        assert!(!r.sends[1].objects[0].request && r.sends[2].batch);
        assert_eq!(r.requests(), 2);
        let fast = Replay {
            recording: Arc::new(r),
            speed: 2.0,
        };
        assert_eq!(fast.at(2), Some(Duration::from_micros(500)));
        assert_eq!(fast.at(3), None);
        // 3 sends over 0.5 ms: the run is 0.75 ms long, 4000 sends/s.
        assert_eq!(fast.duration(), Duration::from_micros(750));
        for bad in [
            "",
            "{\"at_us\":1}\n",
            "{\"npamp_capture\":1}\n{\"at_us\":2,\"message\":{nope}}\n",
            "{\"npamp_capture\":1}\n{\"at_us\":2,\"message\":{\"id\":1,\"result\":1}}\n",
        ] {
            assert!(Recording::parse(bad).is_err(), "{bad:?}");
        }
        // Written out of arrival order: replayed in it.
        let r = Recording::parse(
            "{\"npamp_capture\":1}\n{\"at_us\":9,\"message\":{\"method\":\"b\"}}\n{\"at_us\":2,\"message\":{\"method\":\"a\"}}\n",
        )
        .expect("capture");
        assert_eq!(r.sends[0].at, Duration::ZERO);
        assert_eq!(r.sends[1].at, Duration::from_micros(7));
        assert_eq!(r.methods[r.sends[0].objects[0].method], "a");
        assert_eq!(parse_speed("2x"), Ok(2.0));
        assert_eq!(parse_speed("0.5"), Ok(0.5));
        assert!(parse_speed("0x").is_err() && parse_speed("fast").is_err());
    }
}
