//! Scenario files (`scenarios/*.toml`): what to send, how fast, for how
//! long, and what counts as passing. A mistake is reported with the key and
//! its line.

use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

/// A whole scenario as written in its file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// `http://`, `mcp+http://`, `ws://`, `tcp://`, `tcp+lsp://`, `npamp://`, `npamp+quic://`,
    /// `npamp+tls://`; none: an embedded gateway pair.
    pub target: Option<String>,
    /// Seconds measured (after the warm-up); ignored when `stages` are set.
    /// Times are seconds, or text with a unit: `"500ms"`, `"5s"`, `"2m"`.
    #[serde(default = "default_duration", deserialize_with = "time")]
    pub duration: f64,
    /// Closed loop: the measured part ends after this many sends (a
    /// request, a notification or a batch each), or at `duration`,
    /// whichever comes first (`run -n`).
    #[serde(default)]
    pub requests: Option<u64>,
    /// Seconds sent but not measured, before the measured part.
    #[serde(default, deserialize_with = "time")]
    pub warmup: f64,
    /// Connections to the target (HTTP: at most this many requests in flight).
    #[serde(default = "default_connections")]
    pub connections: usize,
    /// Seconds before an unanswered request counts as timed out.
    #[serde(default = "default_timeout", deserialize_with = "time")]
    pub timeout: f64,
    pub load: Load,
    pub mix: Mix,
    #[serde(default)]
    pub slo: Slo,
    /// What each connection to a `tcp+lsp://` target does before its load:
    /// `initialize`, `initialized`, then a `didOpen` of each document.
    #[serde(default)]
    pub lsp: Option<LspSession>,
    /// Headers of every HTTP request and WebSocket handshake, each as
    /// `"Name: value"` (`run --header` adds to them, replacing one of its
    /// name).
    #[serde(default)]
    pub headers: Vec<crate::header::Header>,
    /// HTTP/2 to an `http(s)://` or `mcp+http(s)://` target: by ALPN over
    /// TLS, with prior knowledge (h2c) over TCP.
    #[serde(default)]
    pub http2: bool,
    /// HTTP/2: requests in flight on each connection (open loop: the run
    /// has `connections` × `streams` of them).
    #[serde(default = "one")]
    pub streams: usize,
    /// `replay`: a capture sent again at its own times (the load's rate is
    /// then its average; the schedule and the messages are the capture's).
    #[serde(skip)]
    pub replay: Option<crate::replay::Replay>,
    /// How a TLS target's server is checked (`run --ca`, `--insecure`: a
    /// machine's, not the scenario's).
    #[serde(skip)]
    pub tls: crate::tls::TlsOptions,
    /// Which part of a run across machines this is (`run --shard I/N`).
    #[serde(skip)]
    pub shard: Option<Shard>,
    /// The first request id is one above this (a shard's ids are its own).
    #[serde(skip)]
    pub id_base: u64,
    /// `run --run-id`: the run this worker is part of, as its launcher
    /// names it (a Kubernetes Job's uid); `merge` refuses workers of
    /// different ones.
    #[serde(skip)]
    pub run_id: Option<String>,
    /// The run's hash as planned, kept by [`Scenario::cut`]: an
    /// interrupted worker is still of the run it began.
    #[serde(skip)]
    planned_hash: Option<String>,
}

/// `[lsp]`: an editor's opening of an LSP session on each connection.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LspSession {
    /// `initialize`'s `rootUri` (none: `null`, no workspace).
    #[serde(default)]
    pub root_uri: Option<String>,
    /// The documents opened (`textDocument/didOpen`) before the load, the
    /// ones its requests name.
    #[serde(default)]
    pub open: Vec<LspDocument>,
}

/// `[[lsp.open]]`: one document an LSP connection opens.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LspDocument {
    pub uri: String,
    pub language_id: String,
    pub text: String,
}

/// Part `index` of `count` (0-based) of a run spread over `count` workers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, Deserialize)]
pub struct Shard {
    pub index: u32,
    pub count: u32,
}

impl std::str::FromStr for Shard {
    type Err = String;

    /// `I/N`: worker I (0 to N-1) of N.
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("{s:?}: expected I/N, a worker I from 0 to N-1 of N workers");
        let (i, n) = s.split_once('/').ok_or_else(bad)?;
        let (index, count): (u32, u32) = (
            i.trim().parse().map_err(|_| bad())?,
            n.trim().parse().map_err(|_| bad())?,
        );
        if count == 0 || index >= count || count > Shard::MAX {
            return Err(bad());
        }
        Ok(Self { index, count })
    }
}

impl Shard {
    /// Ids stay below 2^53 (exact in every JSON parser): 2^40 per shard.
    pub const MAX: u32 = 8192;
    const IDS_PER_SHARD: u64 = 1 << 40;
}

/// The longest time a scenario may give (about 115 days): far beyond any
/// run, well inside what a `Duration` holds.
pub const MAX_SECONDS: f64 = 1e7;

fn default_duration() -> f64 {
    10.0
}
fn one() -> usize {
    1
}
fn default_connections() -> usize {
    16
}
fn default_timeout() -> f64 {
    10.0
}

/// Open loop (a schedule of intended send times) or closed loop (a fixed
/// number of requests in flight).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, tag = "model", rename_all = "kebab-case")]
pub enum Load {
    /// Constant rate, or stages of rates (steps, or linear ramps); latency
    /// is measured from each request's intended send time (no coordinated
    /// omission).
    Open {
        #[serde(default, deserialize_with = "rate")]
        rate: f64,
        #[serde(default)]
        stages: Vec<Stage>,
    },
    /// `concurrency` requests always in flight.
    Closed { concurrency: usize },
}

/// One step of a ramp: `rate` sends per second for `duration` seconds, or
/// (`ramp_to`) a rate rising (or falling) linearly from `rate` to
/// `ramp_to` over it, as k6's ramping arrival rate. In a file, `rate =
/// 1000`, `rate = "1000/s"`, `rate = "60000/m"`, or a ramp as `rate =
/// "100/s..5000/s"`.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq)]
#[serde(try_from = "RawStage")]
pub struct Stage {
    pub rate: f64,
    pub ramp_to: Option<f64>,
    pub duration: f64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStage {
    rate: RateText,
    #[serde(deserialize_with = "time")]
    duration: f64,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RateText {
    Number(f64),
    Text(String),
}

impl TryFrom<RawStage> for Stage {
    type Error = String;

    fn try_from(raw: RawStage) -> Result<Self, String> {
        let (rate, ramp_to) = match raw.rate {
            RateText::Number(r) => (r, None),
            RateText::Text(t) => match parse_ramp(&t)? {
                (from, to) if from == to => (from, None),
                (from, to) => (from, Some(to)),
            },
        };
        Ok(Self {
            rate,
            ramp_to,
            duration: raw.duration,
        })
    }
}

impl Stage {
    /// A step of `rate` for `duration` seconds.
    pub fn step(rate: f64, duration: f64) -> Self {
        Self {
            rate,
            ramp_to: None,
            duration,
        }
    }

    /// The rate at the end of the stage.
    pub fn end_rate(&self) -> f64 {
        self.ramp_to.unwrap_or(self.rate)
    }

    /// The rate `t` seconds into the stage.
    fn rate_at(&self, t: f64) -> f64 {
        let share = (t / self.duration.max(1e-9)).clamp(0.0, 1.0);
        self.rate + (self.end_rate() - self.rate) * share
    }

    /// Sends it places.
    fn sends(&self) -> f64 {
        (self.rate + self.end_rate()) / 2.0 * self.duration
    }
}

/// A rate: sends per second, `N`, `N/s`, `N/m` (per minute) or `N/h`.
pub fn parse_rate(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let (number, per) = match t.split_once('/') {
        Some((n, unit)) => (
            n.trim(),
            match unit.trim() {
                "s" => 1.0,
                "m" | "min" => 60.0,
                "h" => 3600.0,
                other => {
                    return Err(format!(
                        "{s:?}: a rate is per s, m or h (N/s, N/m, N/h), not per {other:?}"
                    ));
                }
            },
        ),
        None => (t, 1.0),
    };
    let n: f64 = number
        .parse()
        .map_err(|_| format!("{s:?}: expected a rate: N, N/s, N/m or N/h"))?;
    if !(n.is_finite() && n > 0.0) {
        return Err(format!("{s:?}: a rate must be positive"));
    }
    Ok(n / per)
}

/// A linear ramp `A..B` of two rates, or one rate (from and to alike).
pub fn parse_ramp(s: &str) -> Result<(f64, f64), String> {
    match s.split_once("..") {
        Some((_, b)) if b.trim_start().starts_with('.') => Err(format!(
            "{s:?}: expected a ramp FROM..TO, e.g. 100/s..5000/s"
        )),
        Some((a, b)) => Ok((parse_rate(a)?, parse_rate(b)?)),
        None => parse_rate(s).map(|r| (r, r)),
    }
}

fn rate<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    match RateText::deserialize(d)? {
        RateText::Number(v) => Ok(v),
        RateText::Text(s) => parse_rate(&s).map_err(serde::de::Error::custom),
    }
}

/// The open-loop schedule: when each send of a run is meant to leave,
/// counted from the run's start. Send `k` (from 0) leaves when the
/// schedule's cumulative rate reaches `k`: a stage of `r` per second for
/// `d` seconds places exactly `r × d` sends (an integer's worth), the first
/// at its start; the warm-up runs at the first stage's starting rate. A
/// replay's sends leave at their captured times instead.
#[derive(Clone, Debug)]
pub struct Schedule {
    /// Each part: where it starts (seconds), its stage, and the sends
    /// before it.
    parts: Vec<(f64, Stage, f64)>,
    sends: f64,
    replay: Option<crate::replay::Replay>,
}

impl Schedule {
    /// When send `k` is meant to leave; `None` past the schedule's end.
    pub fn at(&self, k: u64) -> Option<Duration> {
        if let Some(r) = &self.replay {
            return r.at(usize::try_from(k).ok()?);
        }
        let k = k as f64;
        if k >= self.sends - 1e-9 {
            return None;
        }
        let i = self.parts.partition_point(|(_, _, before)| *before <= k);
        let (start, stage, before) = self.parts.get(i.checked_sub(1)?)?;
        let n = k - before;
        // Solve r0 t + (r1 - r0) t² / 2d = n for t, in the form that holds
        // for rising, falling and flat rates alike.
        let slope = (stage.end_rate() - stage.rate) / stage.duration.max(1e-9);
        let root = (stage.rate * stage.rate + 2.0 * slope * n).max(0.0).sqrt();
        let t = if n == 0.0 {
            0.0
        } else {
            2.0 * n / (stage.rate + root)
        };
        // To the nanosecond: a send due exactly at a second's boundary is
        // of the second it opens.
        let nanos = ((start + t.min(stage.duration)) * 1e9).round();
        Some(Duration::from_nanos(nanos as u64))
    }

    /// Sends the schedule places, in all.
    pub fn len(&self) -> u64 {
        if let Some(r) = &self.replay {
            return r.recording.sends.len() as u64;
        }
        (self.sends - 1e-9).ceil().max(0.0) as u64
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What a target URL speaks, as far as the options that go with it care.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TargetKind {
    /// `http(s)://`, `mcp+http(s)://`: headers, TLS, HTTP/2.
    Http,
    /// `ws(s)://`: headers, TLS.
    Ws,
    /// `tcp://`, `tcp+lsp://`, `npamp://`…
    Other,
}

impl TargetKind {
    pub fn of(url: &str) -> Self {
        let http = |u: &str| u.starts_with("http://") || u.starts_with("https://");
        if http(url) || url.strip_prefix("mcp+").is_some_and(http) {
            Self::Http
        } else if url.starts_with("ws://") || url.starts_with("wss://") {
            Self::Ws
        } else {
            Self::Other
        }
    }
}

/// A time in seconds: `0`, `2.5`, or text with a unit (`"0"`, `"500ms"`,
/// `"5s"`, `"2m"`, `"1h"`), as the gateway's options take it.
pub fn parse_time(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let number = t.trim_end_matches(|c: char| c.is_ascii_alphabetic()).trim();
    if number.parse::<f64>() == Ok(0.0)
        && matches!(
            &t[number.len()..].trim(),
            &("" | "ms" | "s" | "m" | "min" | "h")
        )
    {
        return Ok(0.0);
    }
    t.parse::<npamp_gateway::gateway::config::Seconds>()
        .map(|d| d.0.as_secs_f64())
}

fn time<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Time {
        Number(f64),
        Text(String),
    }
    match Time::deserialize(d)? {
        Time::Number(v) => Ok(v),
        Time::Text(s) => parse_time(&s).map_err(serde::de::Error::custom),
    }
}

/// The message mix.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mix {
    /// Share of sends that are notifications (no reply expected).
    #[serde(default)]
    pub notification_share: f64,
    /// Share of sends that are batches.
    #[serde(default)]
    pub batch_share: f64,
    /// Elements per batch.
    #[serde(default = "default_batch_size")]
    pub batch_size: usize,
    #[serde(rename = "message")]
    pub messages: Vec<Message>,
}

fn default_batch_size() -> usize {
    10
}

/// One kind of message in the mix.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Message {
    pub method: String,
    #[serde(default = "default_weight")]
    pub weight: f64,
    /// JSON text of `params` with placeholders: `{seq}` (a counter),
    /// `{rand:N}` (an integer below N), `{hex:N}` (N random hex digits),
    /// `{bytes:N}` (N filler characters).
    #[serde(default)]
    pub params: Option<String>,
    /// JSON-RPC errors are the expected answer (not counted against the
    /// error-rate SLO).
    #[serde(default)]
    pub expect_error: bool,
    /// The upstream echoes (the mock's `echo`): a success must carry this
    /// request's own `params` as its `result`. Anything else (a reply
    /// made up on the way, or another request's) counts as `wrong_result`
    /// and fails the accounting. Checked on http:// and npamp targets.
    #[serde(default)]
    pub verify_echo: bool,
}

fn default_weight() -> f64 {
    1.0
}

/// Pass/fail thresholds; each is optional.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Slo {
    pub p99_ms: Option<f64>,
    /// Unexpected errors / requests.
    pub max_error_rate: Option<f64>,
    /// Replies per second over the measured part.
    pub min_throughput: Option<f64>,
}

/// A scenario that cannot be used: where and why.
#[derive(Debug, thiserror::Error)]
#[error("{at}: {message}")]
pub struct ScenarioError {
    pub at: String,
    pub message: String,
}

impl Scenario {
    /// The scenario of a one-liner (`run --target URL --method NAME
    /// [--params JSON]`, no file): that one request, at the defaults of a
    /// scenario file (10 s, 16 connections, a 10 s timeout), closed loop
    /// with a request in flight on each connection until a load is given.
    pub fn one_request(
        target: Option<String>,
        method: &str,
        params: Option<String>,
    ) -> Result<Self, ScenarioError> {
        let s = Self {
            name: format!("{method} (command line)"),
            description: String::new(),
            target,
            duration: default_duration(),
            requests: None,
            warmup: 0.0,
            connections: default_connections(),
            timeout: default_timeout(),
            load: Load::Closed {
                concurrency: default_connections(),
            },
            mix: Mix {
                notification_share: 0.0,
                batch_share: 0.0,
                batch_size: default_batch_size(),
                messages: vec![Message {
                    method: method.to_owned(),
                    weight: 1.0,
                    params,
                    expect_error: false,
                    verify_echo: false,
                }],
            },
            slo: Slo::default(),
            lsp: None,
            headers: Vec::new(),
            http2: false,
            streams: 1,
            tls: Default::default(),
            replay: None,
            shard: None,
            id_base: 0,
            run_id: None,
            planned_hash: None,
        };
        s.check().map_err(|(key, message)| ScenarioError {
            at: match key {
                "params" => "--params".into(),
                "message" | "method" => "--method".into(),
                key => format!("key `{key}`"),
            },
            message,
        })?;
        Ok(s)
    }

    /// Reads and checks a scenario file.
    pub fn load(path: &Path) -> Result<Self, ScenarioError> {
        let text = std::fs::read_to_string(path).map_err(|e| ScenarioError {
            at: path.display().to_string(),
            message: format!("cannot read: {e}"),
        })?;
        Self::parse(&text, &path.display().to_string())
    }

    /// Parses and checks a scenario; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Self, ScenarioError> {
        let s: Scenario = toml::from_str(text).map_err(|e| {
            let message = e.to_string().trim_end().to_owned();
            // Inside a tagged table the parser points at the table; name
            // the offending key's own line.
            let unknown = message
                .split_once("unknown field `")
                .and_then(|(_, rest)| rest.split_once('`'))
                .map(|(key, _)| key.to_owned());
            let at = match unknown
                .as_deref()
                .and_then(|k| line_of(text, k).map(|l| (k, l)))
            {
                Some((key, line)) => format!("{origin}: line {line}: key `{key}`"),
                None => origin.to_owned(),
            };
            ScenarioError { at, message }
        })?;
        s.check().map_err(|(key, message)| ScenarioError {
            at: match line_of(text, key) {
                Some(line) => format!("{origin}: line {line}: key `{key}`"),
                None => format!("{origin}: key `{key}`"),
            },
            message,
        })?;
        Ok(s)
    }

    /// Checks the values (again, after command-line overrides): the
    /// offending key and what is wrong with it.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        let positive = |key: &'static str, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(())
            } else {
                Err((key, format!("{v}: must be a positive number")))
            }
        };
        let seconds = |key: &'static str, v: f64| {
            positive(key, v)?;
            if v > MAX_SECONDS {
                return Err((key, format!("{v}: at most {MAX_SECONDS} seconds")));
            }
            Ok(())
        };
        let share = |key: &'static str, v: f64| {
            if (0.0..=1.0).contains(&v) {
                Ok(())
            } else {
                Err((key, format!("{v}: a share is between 0 and 1")))
            }
        };
        seconds("duration", self.duration)?;
        seconds("timeout", self.timeout)?;
        if !(self.warmup.is_finite() && self.warmup >= 0.0) {
            return Err(("warmup", format!("{}: must be 0 or more", self.warmup)));
        }
        if self.warmup > MAX_SECONDS {
            return Err((
                "warmup",
                format!("{}: at most {MAX_SECONDS} seconds", self.warmup),
            ));
        }
        if self.connections == 0 {
            return Err(("connections", "must be at least 1".into()));
        }
        if self.lsp.is_some()
            && !self
                .target
                .as_deref()
                .is_some_and(|t| t.starts_with("tcp+lsp://"))
        {
            return Err((
                "lsp",
                "an [lsp] session opens on a tcp+lsp:// target only".into(),
            ));
        }
        self.check_target()?;
        if self.requests == Some(0) {
            return Err(("requests", "must be at least 1".into()));
        }
        if self.requests.is_some() && !matches!(self.load, Load::Closed { .. }) {
            return Err((
                "requests",
                "a count of sends bounds a closed loop; open loop, the rate and duration make the count"
                    .into(),
            ));
        }
        match &self.load {
            Load::Open { rate, stages } => {
                if stages.is_empty() {
                    positive("rate", *rate)?;
                }
                for s in stages {
                    positive("rate", s.rate)?;
                    if let Some(to) = s.ramp_to {
                        positive("rate", to)?;
                    }
                    seconds("duration", s.duration)?;
                }
                seconds(
                    "duration",
                    stages.iter().map(|s| s.duration).sum::<f64>().max(1.0),
                )?;
            }
            Load::Closed { concurrency } => {
                if *concurrency == 0 {
                    return Err(("concurrency", "must be at least 1".into()));
                }
            }
        }
        share("notification_share", self.mix.notification_share)?;
        share("batch_share", self.mix.batch_share)?;
        if self.mix.notification_share + self.mix.batch_share > 1.0 {
            return Err((
                "batch_share",
                "notification_share + batch_share must not exceed 1".into(),
            ));
        }
        if self.mix.batch_size < 2 && self.mix.batch_share > 0.0 {
            return Err(("batch_size", "a batch has at least 2 elements".into()));
        }
        if self.mix.messages.is_empty() {
            return Err((
                "message",
                "the mix needs at least one [[mix.message]]".into(),
            ));
        }
        for m in &self.mix.messages {
            if m.method.is_empty() {
                return Err(("method", "a message needs a method name".into()));
            }
            positive("weight", m.weight)?;
            if let Some(p) = &m.params {
                let sample = crate::template::Template::parse(p)
                    .map_err(|e| ("params", format!("{p:?}: {e}")))?
                    .render(0, &mut crate::template::Rng::new(1));
                serde_json::from_str::<serde_json::Value>(&sample).map_err(|e| {
                    (
                        "params",
                        format!("{p:?} does not render to JSON ({e}): {sample}"),
                    )
                })?;
            }
        }
        if let Some(p) = self.slo.max_error_rate {
            share("max_error_rate", p)?;
        }
        if let Some(p) = self.slo.p99_ms {
            positive("p99_ms", p)?;
        }
        if let Some(p) = self.slo.min_throughput {
            positive("min_throughput", p)?;
        }
        Ok(())
    }

    /// What the target's kind takes: headers go with HTTP and WebSocket
    /// targets, HTTP/2 and its streams with HTTP ones.
    fn check_target(&self) -> Result<(), (&'static str, String)> {
        // None: the embedded pair's HTTP ingress.
        let target = self.target.as_deref().unwrap_or("http://");
        let kind = TargetKind::of(target);
        let (http, ws) = (kind == TargetKind::Http, kind == TargetKind::Ws);
        let headers_fit = http || ws || self.headers.is_empty();
        if !headers_fit {
            return Err((
                "headers",
                format!("{target}: headers go with http(s)://, mcp+http(s)://, ws(s):// targets"),
            ));
        }
        if self.http2 && !http {
            return Err((
                "http2",
                format!("{target}: HTTP/2 goes with http(s):// and mcp+http(s):// targets"),
            ));
        }
        let secure = ["https://", "wss://", "mcp+https://"]
            .iter()
            .any(|p| target.starts_with(p));
        if (self.tls.ca.is_some() || self.tls.insecure) && !secure {
            return Err((
                "target",
                format!(
                    "{target}: --ca and --insecure go with https://, mcp+https://, wss:// targets"
                ),
            ));
        }
        if self.streams == 0 {
            return Err(("streams", "must be at least 1".into()));
        }
        if self.streams > 1 && matches!(self.load, Load::Closed { .. }) {
            return Err((
                "streams",
                format!(
                    "{}: closed loop, the requests in flight are the concurrency, spread over the connections; streams go with an open loop",
                    self.streams
                ),
            ));
        }
        if self.streams > 1 && !self.http2 {
            return Err((
                "streams",
                format!(
                    "{}: several requests in flight on one connection need HTTP/2 (http2 = true, --http2)",
                    self.streams
                ),
            ));
        }
        Ok(())
    }

    /// The measured time: the stages' sum, or `duration`.
    pub fn measured(&self) -> Duration {
        match &self.load {
            Load::Open { stages, .. } if !stages.is_empty() => {
                Duration::from_secs_f64(stages.iter().map(|s| s.duration).sum())
            }
            _ => Duration::from_secs_f64(self.duration),
        }
    }

    pub fn warmup(&self) -> Duration {
        Duration::from_secs_f64(self.warmup)
    }

    pub fn timeout(&self) -> Duration {
        Duration::from_secs_f64(self.timeout)
    }

    /// This scenario as far as it ran when it was interrupted `ran` after
    /// its start: its warm-up and measured part (a ramp's stages too) cut
    /// there, so that rates are over the time that ran.
    pub fn cut(&self, ran: Duration) -> Scenario {
        let ran = ran.as_secs_f64();
        let measured = (ran - self.warmup).clamp(0.0, self.measured().as_secs_f64());
        let mut s = self.clone();
        s.planned_hash = Some(self.run_hash());
        s.warmup = self.warmup.min(ran);
        s.duration = measured;
        if let Load::Open { rate, stages } = &mut s.load
            && let Some(first) = stages.first().copied()
        {
            // The stages that began before the cut, the last one cut short.
            let mut left = measured;
            stages.retain_mut(|stage| {
                let kept = left > 0.0;
                if left < stage.duration && stage.ramp_to.is_some() {
                    // A ramp cut short ends at the rate it had reached.
                    stage.ramp_to = Some(stage.rate_at(left));
                }
                stage.duration = stage.duration.min(left);
                left -= stage.duration;
                kept
            });
            // Interrupted in the warm-up: it ran at the first stage's rate.
            if stages.is_empty() {
                *rate = first.rate;
            }
        }
        s
    }

    /// This scenario as worker `shard.index` of `shard.count` runs it: a
    /// `count`-th of the rate (every stage's), of the connections and of
    /// the closed loop's concurrency (rounded up, at least 1), of the
    /// `min_throughput` SLO; its request ids its own.
    pub fn shard(&mut self, shard: Shard) {
        let n = f64::from(shard.count);
        let part = |v: usize| v.div_ceil(shard.count as usize).max(1);
        match &mut self.load {
            Load::Open { rate, stages } => {
                *rate /= n;
                for s in stages {
                    s.rate /= n;
                    if let Some(to) = &mut s.ramp_to {
                        *to /= n;
                    }
                }
            }
            Load::Closed { concurrency } => *concurrency = part(*concurrency),
        }
        self.connections = part(self.connections);
        if let Some(t) = &mut self.slo.min_throughput {
            *t /= n;
        }
        self.id_base = u64::from(shard.index) * Shard::IDS_PER_SHARD;
        self.shard = Some(shard);
    }

    /// What identifies the run this scenario is (a worker's of it alike):
    /// a hash of everything it runs as planned (its target, load, mix,
    /// times, SLOs, and the number of workers, not which one), the first
    /// 16 hex digits of a SHA-256. Workers of one run, built from one
    /// version of this program, have the same; `merge` refuses workers
    /// whose differ.
    pub fn run_hash(&self) -> String {
        if let Some(planned) = &self.planned_hash {
            return planned.clone();
        }
        let mut one = self.clone();
        one.shard = self.shard.map(|s| Shard { index: 0, ..s });
        one.id_base = 0;
        one.run_id = None;
        one.tls = Default::default();
        let digest =
            aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, format!("{one:?}").as_bytes());
        digest.as_ref()[..8]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// Requests per second the schedule asks for, on average over the
    /// measured part; `None` for closed loop.
    pub fn offered_rate(&self) -> Option<f64> {
        Some(self.sends_per_second()? * self.requests_per_send())
    }

    /// Sends per second the schedule asks for, on average over the measured
    /// part (a send is one message: a request, a notification or a batch);
    /// `None` for closed loop.
    pub fn sends_per_second(&self) -> Option<f64> {
        match &self.load {
            Load::Closed { .. } => None,
            Load::Open { rate, stages } if stages.is_empty() => Some(*rate),
            Load::Open { stages, .. } => {
                let span: f64 = stages.iter().map(|s| s.duration).sum();
                Some(stages.iter().map(Stage::sends).sum::<f64>() / span.max(1e-9))
            }
        }
    }

    /// Requests a send carries on average: a notification none, a batch
    /// `batch_size` elements, each a notification at `notification_share`.
    pub fn requests_per_send(&self) -> f64 {
        if let Some(r) = &self.replay {
            let sends = r.recording.sends.len().max(1) as f64;
            return r.recording.requests() as f64 / sends;
        }
        let m = &self.mix;
        let single = (1.0 - m.notification_share - m.batch_share).max(0.0);
        let in_batch = m.batch_size as f64 * (1.0 - m.notification_share);
        single + m.batch_share * in_batch
    }

    /// The offered rate at `t` seconds after the measured part began
    /// (warm-up runs at the first stage's rate); `None` for closed loop.
    pub fn rate_at(&self, t: f64) -> Option<f64> {
        match &self.load {
            Load::Closed { .. } => None,
            Load::Open { rate, stages } if stages.is_empty() => Some(*rate),
            Load::Open { stages, .. } => {
                let mut start = 0.0;
                for s in stages {
                    if t < start + s.duration {
                        return Some(s.rate_at(t - start));
                    }
                    start += s.duration;
                }
                stages.last().map(Stage::end_rate)
            }
        }
    }

    /// The open-loop schedule of the run, warm-up included; `None` for
    /// closed loop.
    pub fn schedule(&self) -> Option<Schedule> {
        let Load::Open { rate, stages } = &self.load else {
            return None;
        };
        let flat = [Stage::step(*rate, self.duration)];
        let stages = if stages.is_empty() { &flat[..] } else { stages };
        let first = stages.first()?.rate;
        let mut parts = Vec::with_capacity(stages.len() + 1);
        let (mut start, mut sends) = (0.0, 0.0);
        for stage in std::iter::once(Stage::step(first, self.warmup))
            .chain(stages.iter().copied())
            .filter(|s| s.duration > 0.0)
        {
            parts.push((start, stage, sends));
            start += stage.duration;
            sends += stage.sends();
        }
        Some(Schedule {
            parts,
            sends,
            replay: self.replay.clone(),
        })
    }
}

/// The line (1-based) of the first `key = ` in a TOML text.
fn line_of(text: &str, key: &str) -> Option<usize> {
    text.lines()
        .position(|l| {
            let l = l.trim_start().trim_start_matches('{').trim_start();
            l.strip_prefix(key)
                .is_some_and(|rest| rest.trim_start().starts_with('='))
        })
        .map(|i| i + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interrupted_ramp_is_cut_where_it_stopped() {
        let mut s = Scenario::parse(OK, "t.toml").expect("valid");
        s.warmup = 1.0;
        s.load = Load::Open {
            rate: 0.0,
            stages: vec![Stage::step(100.0, 2.0), Stage::step(500.0, 3.0)],
        };
        let cut = s.cut(Duration::from_secs_f64(4.0));
        assert_eq!(cut.warmup, 1.0);
        assert_eq!(cut.measured(), Duration::from_secs(3));
        assert_eq!(cut.rate_at(2.5), Some(500.0));
        let Load::Open { stages, .. } = &cut.load else {
            panic!("open loop")
        };
        assert_eq!(stages.len(), 2);
        assert_eq!(stages[1].duration, 1.0);
        // In the warm-up: nothing measured, the first stage's rate.
        let early = s.cut(Duration::from_millis(500));
        assert_eq!((early.warmup, early.measured()), (0.5, Duration::ZERO));
        assert_eq!(early.rate_at(0.0), Some(100.0));
        // Past the end: unchanged.
        assert_eq!(s.cut(Duration::from_secs(60)).measured(), s.measured());
        // Cut short, it is still the run it began: workers interrupted at
        // different moments merge.
        assert_eq!(cut.run_hash(), s.run_hash());
        assert_eq!(early.run_hash(), s.run_hash());
        let mut faster = s.clone();
        faster.timeout += 1.0;
        assert_ne!(faster.run_hash(), s.run_hash());
    }

    /// Sends per second of the run, by intended send time.
    fn per_second(s: &Scenario) -> Vec<u64> {
        let schedule = s.schedule().expect("open loop");
        let mut seconds = vec![0; (s.warmup + s.measured().as_secs_f64()).ceil() as usize];
        for k in 0..schedule.len() {
            let t = schedule.at(k).expect("within the schedule");
            seconds[t.as_secs() as usize] += 1;
        }
        assert_eq!(schedule.at(schedule.len()), None, "past the end");
        seconds
    }

    /// Each second of a step places exactly its rate's sends: no send
    /// short at the start ("1999 in warm-up") nor one over at the end
    /// ("150001 measured"), issue 54.
    #[test]
    fn a_schedule_places_exactly_what_its_stages_ask() {
        let mut s = Scenario::parse(OK, "t.toml").expect("valid");
        s.warmup = 1.0;
        s.load = Load::Open {
            rate: 0.0,
            stages: vec![
                Stage::step(2000.0, 2.0),
                Stage::step(5000.0, 1.0),
                Stage::step(40000.0, 3.0),
            ],
        };
        assert_eq!(
            per_second(&s),
            [2000, 2000, 2000, 5000, 40000, 40000, 40000]
        );
        // A constant rate, and one that is not a whole number per second.
        s.load = Load::Open {
            rate: 2.5,
            stages: Vec::new(),
        };
        s.duration = 4.0;
        let seconds = per_second(&s);
        assert_eq!(seconds.iter().sum::<u64>(), 13, "{seconds:?}");
    }

    /// A linear ramp (k6's ramping arrival rate): the rate rises evenly,
    /// and the stage places the area under it.
    #[test]
    fn a_ramp_rises_linearly() {
        let text = OK.replace(
            "rate = 100",
            r#"stages = [{ rate = "100/s..500/s", duration = 4 }, { rate = "30000/m", duration = 1 }]"#,
        );
        let s = Scenario::parse(&text, "t.toml").expect("valid");
        let Load::Open { stages, .. } = &s.load else {
            panic!("open loop")
        };
        assert_eq!(stages[0].ramp_to, Some(500.0));
        assert_eq!(stages[1], Stage::step(500.0, 1.0));
        assert_eq!(s.rate_at(1.0), Some(200.0));
        assert_eq!(s.sends_per_second(), Some((1200.0 + 500.0) / 5.0));
        // 150, 250, 350, 450 sends: the average rate of each second.
        assert_eq!(per_second(&s), [150, 250, 350, 450, 500]);
        // Falling as well.
        let down = OK.replace(
            "rate = 100",
            r#"stages = [{ rate = "500..100", duration = 4 }]"#,
        );
        let s = Scenario::parse(&down, "t.toml").expect("valid");
        assert_eq!(per_second(&s), [450, 350, 250, 150]);
        // Cut short, a ramp ends at the rate it reached.
        let cut = s.cut(Duration::from_secs(2));
        let Load::Open { stages, .. } = &cut.load else {
            panic!("open loop")
        };
        assert_eq!(stages[0].ramp_to, Some(300.0));
        for bad in ["0/s", "5/d", "x/s", "1..", "-3", "1...5"] {
            assert!(parse_ramp(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_rate("120/m"), Ok(2.0));
        assert_eq!(parse_rate(" 7 /s"), Ok(7.0));
    }

    const OK: &str = r#"
name = "t"
duration = 2
[load]
model = "open"
rate = 100
[mix]
[[mix.message]]
method = "echo"
params = '{"n": {seq}}'
"#;

    #[test]
    fn times_too_large_for_a_duration_are_refused() {
        // Found while writing the `scenario` fuzz target: 1e300 seconds
        // passed the check, then `Duration::from_secs_f64` panicked.
        for (from, to) in [
            ("duration = 2", "duration = 1e300"),
            ("duration = 2", "duration = 2\nwarmup = 1e300"),
            ("duration = 2", "duration = 2\ntimeout = 1e300"),
        ] {
            let e = Scenario::parse(&OK.replace(from, to), "t.toml").unwrap_err();
            assert!(e.message.contains("at most"), "{e}");
        }
        let stages = OK.replace(
            "rate = 100",
            "stages = [{ rate = 1, duration = 1e7 }, { rate = 1, duration = 1e7 }]",
        );
        let e = Scenario::parse(&stages, "t.toml").unwrap_err();
        assert!(e.message.contains("at most"), "{e}");
    }

    #[test]
    fn an_lsp_session_needs_an_lsp_target() {
        let lsp = "target = \"tcp+lsp://127.0.0.1:2087\"\nduration = 2";
        let with = format!(
            "{}\n[lsp]\nroot_uri = \"file:///w\"\n[[lsp.open]]\nuri = \"file:///w/a.py\"\nlanguage_id = \"python\"\ntext = \"x = 1\"\n",
            OK.replace("duration = 2", lsp)
        );
        let s = Scenario::parse(&with, "t.toml").expect("valid");
        let session = s.lsp.expect("an [lsp] table");
        assert_eq!(session.open[0].language_id, "python");
        let e = Scenario::parse(&with.replace("tcp+lsp://", "tcp://"), "t.toml").unwrap_err();
        assert!(e.at.ends_with("key `lsp`"), "{e}");
        assert!(e.message.contains("tcp+lsp://"), "{e}");
    }

    #[test]
    fn a_valid_scenario_parses() {
        let s = Scenario::parse(OK, "t.toml").expect("valid");
        assert_eq!(s.rate_at(0.5), Some(100.0));
        assert_eq!(s.measured(), Duration::from_secs(2));
    }

    #[test]
    fn mistakes_name_the_key_and_the_line() {
        let e = Scenario::parse(&OK.replace("rate = 100", "rate = -1"), "t.toml").unwrap_err();
        assert_eq!(e.at, "t.toml: line 6: key `rate`", "{e}");
        let e = Scenario::parse(&OK.replace("rate = 100", "rat = 100"), "t.toml").unwrap_err();
        assert_eq!(e.at, "t.toml: line 6: key `rat`", "{e}");
        let e =
            Scenario::parse(&OK.replace("duration = 2", "duration = \"x\""), "t.toml").unwrap_err();
        assert!(e.message.contains("line 3"), "{e}");
        let e = Scenario::parse(&OK.replace("{seq}}", "{seq}"), "t.toml").unwrap_err();
        assert!(e.at.ends_with("line 10: key `params`"), "{e}");
        let e = Scenario::parse(&OK.replace("{seq}", "{nope}"), "t.toml").unwrap_err();
        assert!(e.message.contains("nope"), "{e}");
    }

    #[test]
    fn stages_give_the_rate_over_time() {
        let text = OK.replace(
            "rate = 100",
            "stages = [ { rate = 10, duration = 1 }, { rate = 20, duration = 2 } ]",
        );
        let s = Scenario::parse(&text, "t.toml").expect("valid");
        assert_eq!(s.rate_at(0.5), Some(10.0));
        assert_eq!(s.rate_at(1.5), Some(20.0));
        assert_eq!(s.measured(), Duration::from_secs(3));
    }

    #[test]
    fn times_take_units_as_the_gateway_does() {
        for (t, secs) in [
            ("0", 0.0),
            ("0s", 0.0),
            ("2.5", 2.5),
            ("500ms", 0.5),
            ("5s", 5.0),
            ("2m", 120.0),
        ] {
            assert_eq!(parse_time(t), Ok(secs), "{t}");
        }
        for bad in ["5x", "", "-1", "s"] {
            assert!(parse_time(bad).is_err(), "{bad}");
        }
        let s = Scenario::parse(
            &OK.replace(
                "duration = 2",
                "duration = \"1500ms\"\nwarmup = \"0\"\ntimeout = \"1m\"",
            ),
            "t.toml",
        )
        .unwrap();
        assert_eq!((s.duration, s.warmup, s.timeout), (1.5, 0.0, 60.0));
        let e = Scenario::parse(&OK.replace("duration = 2", "duration = \"soon\""), "t.toml")
            .unwrap_err();
        assert!(e.to_string().contains("line 3"), "{e}");
    }

    #[test]
    fn the_offered_rate_counts_requests_not_sends() {
        let s = Scenario::parse(OK, "t.toml").unwrap();
        assert_eq!(s.offered_rate(), Some(100.0));
        let ramp = OK.replace(
            "rate = 100",
            "stages = [{ rate = 100, duration = 1 }, { rate = 300, duration = \"3s\" }]",
        );
        assert_eq!(
            Scenario::parse(&ramp, "t.toml").unwrap().offered_rate(),
            Some(250.0)
        );
        // Half the sends are batches of 4, a quarter notifications.
        let mixed = OK.replace(
            "[[mix.message]]",
            "batch_share = 0.5\nnotification_share = 0.25\nbatch_size = 4\n[[mix.message]]",
        );
        let s = Scenario::parse(&mixed, "t.toml").unwrap();
        // 100 sends/s: 25 single requests + 50 batches × 4 × 0.75.
        assert_eq!(s.offered_rate(), Some(175.0));
        let closed = OK.replace(
            "model = \"open\"\nrate = 100",
            "model = \"closed\"\nconcurrency = 4",
        );
        assert_eq!(
            Scenario::parse(&closed, "t.toml").unwrap().offered_rate(),
            None
        );
    }
}
