//! `--capture FILE`: an edge records what its clients send (off by
//! default), for `npamp-loadgen replay` to send again with its original
//! timing.
//!
//! The file is JSON Lines: a first line that names the format, then one
//! line per message or batch as it arrived at an ingress:
//!
//! ```text
//! {"npamp_capture":1,"started_unix_ms":1796580000000}
//! {"at_us":1234,"method":"eth_call","message":{"jsonrpc":"2.0","id":7,"method":"eth_call","params":[…]}}
//! {"at_us":1290,"method":null,"message":[…a batch…]}
//! ```
//!
//! `at_us` is microseconds since the capture began. A message is written
//! as it came (its octets), or re-serialized when a `--capture-redact`
//! rule changed it or it spans lines. The ingress hands each message over
//! without waiting (a reference to its octets, no copy); a thread of its
//! own decodes, redacts and writes it. While that thread is behind by
//! [`QUEUE`] messages, or by more octets than the file has room left for,
//! further messages are not recorded but counted (what waits is bounded in
//! memory as in count); at `--capture-max` octets the capture ends. Both
//! are logged: a capture is a bounded sample, and says how it was bounded.
//! The file holds what clients sent: it is created readable by its owner
//! alone.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::time::Instant;

use bytes::Bytes;
use serde_json::Value;
use tracing::{info, warn};

/// Messages the writer may be behind by.
pub const QUEUE: usize = 16 * 1024;

/// The default of `--capture-max`: 64 MiB of file.
pub const DEFAULT_MAX_BYTES: u64 = 64 << 20;

/// What to capture, and where.
#[derive(Clone, Debug, PartialEq)]
pub struct CaptureSpec {
    pub path: PathBuf,
    /// The file's size at most, octets.
    pub max_bytes: u64,
    pub redact: Vec<Redact>,
}

/// `--capture-redact METHOD[:POINTER]`: the params (or the part of them
/// at a JSON pointer, `/0/password`) of every message of METHOD (`*`: of
/// any method) are written as `"<redacted>"`.
#[derive(Clone, Debug, PartialEq)]
pub struct Redact {
    /// `None`: every method.
    method: Option<String>,
    pointer: Option<String>,
}

/// What a redacted value is written as.
pub const REDACTED: &str = "<redacted>";

impl std::str::FromStr for Redact {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (method, pointer) = match s.split_once(":/") {
            Some((m, p)) => (m, Some(format!("/{p}"))),
            None => (s, None),
        };
        let method = method.trim();
        if method.is_empty() {
            return Err(format!(
                "{s:?}: expected METHOD or METHOD:/json/pointer (METHOD may be *)"
            ));
        }
        Ok(Self {
            method: (method != "*").then(|| method.to_owned()),
            pointer,
        })
    }
}

impl Redact {
    /// Redacts `object` (one JSON-RPC message) if the rule is for its
    /// method; whether it changed it.
    fn apply(&self, object: &mut Value) -> bool {
        let method = object.get("method").and_then(Value::as_str);
        if method.is_none() || self.method.as_deref().is_some_and(|m| Some(m) != method) {
            return false;
        }
        let Some(params) = object.get_mut("params") else {
            return false;
        };
        let target = match &self.pointer {
            Some(p) => params.pointer_mut(p),
            None => Some(params),
        };
        match target {
            Some(v) if v.as_str() != Some(REDACTED) => {
                *v = Value::String(REDACTED.into());
                true
            }
            _ => false,
        }
    }
}

/// A capture in progress: the ingresses' side.
pub struct Capture {
    tx: SyncSender<(Instant, Bytes)>,
    /// Set when the file reached `--capture-max`: nothing more is queued.
    full: Arc<AtomicBool>,
    /// Octets queued for the writer and not yet written.
    queued: Arc<AtomicU64>,
    /// The most that may wait: the file's size limit.
    max_queued: u64,
    dropped: AtomicU64,
}

impl std::fmt::Debug for Capture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Capture")
            .field("full", &self.full.load(Relaxed))
            .field("dropped", &self.dropped.load(Relaxed))
            .finish()
    }
}

impl Capture {
    /// Creates (truncates) the file and starts its writer.
    pub fn start(spec: &CaptureSpec) -> std::io::Result<Arc<Self>> {
        let mut open = std::fs::OpenOptions::new();
        open.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut open, 0o600);
        let file = open.open(&spec.path)?;
        let mut out = std::io::BufWriter::new(file);
        let header = serde_json::json!({"npamp_capture": 1, "started_unix_ms": unix_ms()});
        writeln!(out, "{header}")?;
        out.flush()?;
        let (tx, rx) = std::sync::mpsc::sync_channel(QUEUE);
        let full = Arc::new(AtomicBool::new(false));
        let queued = Arc::new(AtomicU64::new(0));
        let writer = Writer {
            queued: queued.clone(),
            out,
            written: header.to_string().len() as u64 + 1,
            spec: spec.clone(),
            epoch: Instant::now(),
            full: full.clone(),
        };
        std::thread::Builder::new()
            .name("capture".into())
            .spawn(move || writer.run(rx))?;
        info!(file = %spec.path.display(), max_bytes = spec.max_bytes, "capturing what clients send");
        Ok(Arc::new(Self {
            tx,
            full,
            queued,
            max_queued: spec.max_bytes,
            dropped: AtomicU64::new(0),
        }))
    }

    /// Records one message (or batch) as it arrived; never waits.
    pub fn record(&self, text: &Bytes) {
        if self.full.load(Relaxed) {
            return;
        }
        let n = text.len() as u64;
        if self.queued.fetch_add(n, Relaxed) + n > self.max_queued {
            self.queued.fetch_sub(n, Relaxed);
            return self.left_out();
        }
        match self.tx.try_send((Instant::now(), text.clone())) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                self.queued.fetch_sub(n, Relaxed);
                self.left_out();
            }
            Err(TrySendError::Disconnected(_)) => {
                self.queued.fetch_sub(n, Relaxed);
                self.full.store(true, Relaxed);
            }
        }
    }

    /// A message not recorded: the writer is too far behind.
    fn left_out(&self) {
        if self.dropped.fetch_add(1, Relaxed) == 0 {
            warn!(
                "capture: the writer is behind ({QUEUE} messages, or --capture-max octets, wait); messages are left out of the capture while it is (counted, said at the end)"
            );
        }
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        let dropped = self.dropped.load(Relaxed);
        if dropped > 0 {
            warn!(
                dropped,
                "capture: messages left out while its writer was behind"
            );
        }
    }
}

/// The writer thread's side.
struct Writer {
    queued: Arc<AtomicU64>,
    out: std::io::BufWriter<std::fs::File>,
    written: u64,
    spec: CaptureSpec,
    epoch: Instant,
    full: Arc<AtomicBool>,
}

impl Writer {
    fn run(mut self, rx: Receiver<(Instant, Bytes)>) {
        // Written as they come; flushed whenever the queue is empty, so the
        // file is current within a message.
        while let Ok(first) = rx.recv() {
            let mut next = Some(first);
            while let Some((at, text)) = next {
                let going_on = self.write(at, &text);
                self.queued.fetch_sub(text.len() as u64, Relaxed);
                if !going_on {
                    return;
                }
                next = rx.try_recv().ok();
            }
            if let Err(e) = self.out.flush() {
                return self.failed(&e);
            }
        }
        let _ = self.out.flush();
    }

    /// Writes one line; whether the capture goes on.
    fn write(&mut self, at: Instant, text: &[u8]) -> bool {
        let Some(line) = line(
            at.saturating_duration_since(self.epoch),
            text,
            &self.spec.redact,
        ) else {
            return true;
        };
        if self.written + line.len() as u64 > self.spec.max_bytes {
            self.full.store(true, Relaxed);
            let _ = self.out.flush();
            info!(
                file = %self.spec.path.display(),
                octets = self.written,
                "capture: --capture-max reached, capture ended"
            );
            return false;
        }
        if let Err(e) = self.out.write_all(line.as_bytes()) {
            self.failed(&e);
            return false;
        }
        self.written += line.len() as u64;
        true
    }

    fn failed(&self, e: &std::io::Error) {
        self.full.store(true, Relaxed);
        warn!(file = %self.spec.path.display(), "capture: cannot write ({e}): capture ended");
    }
}

/// One message's line, `at` after the capture began, with `rules` applied;
/// `None` for what is not JSON (the ingress answered it as a parse error;
/// nothing to replay).
fn line(at: std::time::Duration, text: &[u8], rules: &[Redact]) -> Option<String> {
    let mut v: Value = serde_json::from_slice(text).ok()?;
    let mut changed = false;
    match &mut v {
        Value::Array(elements) => {
            for e in elements {
                for r in rules {
                    changed |= r.apply(e);
                }
            }
        }
        object => {
            for r in rules {
                changed |= r.apply(object);
            }
        }
    }
    let method = match v.get("method") {
        Some(Value::String(m)) => Value::String(m.clone()).to_string(),
        _ => "null".to_owned(),
    };
    let message = match std::str::from_utf8(text) {
        Ok(raw) if !changed && !raw.contains(['\n', '\r']) => raw.trim().to_owned(),
        _ => v.to_string(),
    };
    Some(format!(
        "{{\"at_us\":{},\"method\":{method},\"message\":{message}}}\n",
        at.as_micros()
    ))
}

/// The wall-clock time now, milliseconds since the Unix epoch.
fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Whether `path` can be created for a capture (its directory exists).
pub fn check_path(path: &Path) -> Result<(), String> {
    match path.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(dir) if !dir.is_dir() => {
            Err(format!("{}: its directory does not exist", path.display()))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn lines_keep_the_octets_and_redact_by_rule() {
        let at = Duration::from_micros(1500);
        let raw =
            br#"{"jsonrpc":"2.0","id":1,"method":"login","params":{"user":"a","password":"p"}}"#;
        // No rule: the message as it came.
        let l = line(at, raw, &[]).expect("line");
        assert_eq!(
            l,
            format!(
                "{{\"at_us\":1500,\"method\":\"login\",\"message\":{}}}\n",
                std::str::from_utf8(raw).expect("utf-8")
            )
        );
        let rules: Vec<Redact> = ["login:/password", "*:/0"]
            .iter()
            .map(|r| r.parse().expect("rule"))
            .collect();
        let l = line(at, raw, &rules).expect("line");
        let v: Value = serde_json::from_str(&l).expect("a JSON line");
        assert_eq!(v["message"]["params"]["password"], REDACTED);
        assert_eq!(v["message"]["params"]["user"], "a");
        // A batch: each element by its own method; the line's method null.
        let batch = br#"[{"jsonrpc":"2.0","id":1,"method":"sign","params":["key",2]},
            {"jsonrpc":"2.0","method":"other"}]"#;
        let l = line(at, batch, &rules).expect("line");
        assert_eq!(l.matches('\n').count(), 1, "one line: {l}");
        let v: Value = serde_json::from_str(&l).expect("a JSON line");
        assert_eq!(v["method"], Value::Null);
        assert_eq!(v["message"][0]["params"], serde_json::json!([REDACTED, 2]));
        // A whole method's params.
        let all: Redact = "login".parse().expect("rule");
        let v: Value = serde_json::from_str(&line(at, raw, &[all]).expect("line")).expect("JSON");
        assert_eq!(v["message"]["params"], REDACTED);
        // Not JSON: nothing to replay.
        assert_eq!(line(at, b"{nope", &rules), None);
        assert!(":/x".parse::<Redact>().is_err());
    }

    #[test]
    fn a_capture_is_bounded_by_its_size() {
        let dir = std::env::temp_dir().join(format!("npamp-capture-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let spec = CaptureSpec {
            path: dir.join("c.jsonl"),
            max_bytes: 2000,
            redact: Vec::new(),
        };
        let capture = Capture::start(&spec).expect("start");
        let msg = Bytes::from_static(br#"{"jsonrpc":"2.0","id":1,"method":"echo","params":[1]}"#);
        for _ in 0..100 {
            capture.record(&msg);
            std::thread::sleep(Duration::from_millis(1));
        }
        drop(capture);
        std::thread::sleep(Duration::from_millis(100));
        let text = std::fs::read_to_string(&spec.path).expect("read");
        assert!(text.len() <= 2000, "{} octets", text.len());
        let mut lines = text.lines();
        let header: Value = serde_json::from_str(lines.next().expect("header")).expect("JSON");
        assert_eq!(header["npamp_capture"], 1);
        let mut last = 0;
        let mut n = 0;
        for l in lines {
            let v: Value = serde_json::from_str(l).expect("JSON line");
            let at = v["at_us"].as_u64().expect("at_us");
            assert!(at >= last, "in order");
            last = at;
            n += 1;
        }
        assert!(n > 10 && n < 100, "{n} lines within 2000 octets");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&spec.path)
                .expect("file")
                .permissions()
                .mode();
            assert_eq!(mode & 0o077, 0, "readable by its owner alone: {mode:o}");
        }
        let _ = std::fs::remove_dir_all(dir);
    }

    /// What waits for the writer is bounded in octets too: a message that
    /// would take the queue past `--capture-max` is left out, not held.
    #[test]
    fn what_waits_is_bounded_in_octets() {
        let dir = std::env::temp_dir().join(format!("npamp-capture-q-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let spec = CaptureSpec {
            path: dir.join("c.jsonl"),
            max_bytes: 1000,
            redact: Vec::new(),
        };
        let capture = Capture::start(&spec).expect("start");
        let big = Bytes::from(vec![b' '; 4000]);
        capture.record(&big);
        assert_eq!(capture.dropped.load(Relaxed), 1);
        assert_eq!(capture.queued.load(Relaxed), 0);
        let _ = std::fs::remove_dir_all(dir);
    }
}
