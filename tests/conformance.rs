//! The N-PAMP conformance corpus, graded twice: in process through
//! `conformance::run_op`, and black-box through the adapter binary speaking the
//! length-prefixed contract of `harness/INSTRUCTIONS.md`.
//!
//! The vectors are read from `$NPAMP_TEST_VECTORS` (default
//! `../shared/npamp/test-vectors` beside the repository); they are never
//! copied into the project. When they are absent the tests say so and pass
//! without grading anything.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use npamp_gateway::conformance::{IMPLEMENTED_OPS, Outcome, run_op};
use serde_json::Value;

const CORPUS_FILES: &[&str] = &["v1/conformance-corpus.json", "bridge/bridge.json"];

fn vectors_dir() -> PathBuf {
    std::env::var_os("NPAMP_TEST_VECTORS").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/npamp/test-vectors"),
        PathBuf::from,
    )
}

/// One corpus case with the group it belongs to.
struct Case {
    file: &'static str,
    op: String,
    tc_id: u64,
    requirement: String,
    comment: String,
    input: Value,
    result: String,
    expected: Option<Value>,
}

/// Every case of every corpus file, or `None` (with the reason printed) when
/// the vectors are not there.
fn load_cases() -> Option<Vec<Case>> {
    let dir = vectors_dir();
    let mut cases = Vec::new();
    for file in CORPUS_FILES {
        let path = dir.join(file);
        let Ok(text) = std::fs::read_to_string(&path) else {
            eprintln!(
                "SKIPPED: conformance vectors not found at {} (set NPAMP_TEST_VECTORS to the corpus's test-vectors directory)",
                path.display()
            );
            return None;
        };
        let doc: Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()));
        // The main corpus wraps groups in {"testGroups": [...]}; bridge.json is a bare array.
        let groups = doc.get("testGroups").unwrap_or(&doc);
        for group in groups.as_array().expect("test groups array") {
            let op = group["op"].as_str().expect("group op").to_owned();
            for t in group["tests"].as_array().expect("tests array") {
                cases.push(Case {
                    file,
                    op: op.clone(),
                    tc_id: t["tcId"].as_u64().expect("tcId"),
                    requirement: t["requirement"].as_str().unwrap_or("").to_owned(),
                    comment: t["comment"].as_str().unwrap_or("").to_owned(),
                    input: t["in"].clone(),
                    result: t["result"].as_str().expect("result").to_owned(),
                    expected: t.get("expected").cloned(),
                });
            }
        }
    }
    Some(cases)
}

#[derive(Default)]
struct Tally {
    passed: BTreeMap<String, usize>,
    skipped: BTreeMap<String, usize>,
    failures: Vec<String>,
}

impl Tally {
    fn grade(&mut self, case: &Case, outcome: &Outcome) {
        let verdict = match (case.result.as_str(), outcome) {
            (_, Outcome::Skipped(_)) => {
                *self.skipped.entry(case.op.clone()).or_default() += 1;
                return;
            }
            ("valid", Outcome::Out(out)) => match &case.expected {
                Some(Value::Null) | None => Ok(()),
                Some(expected) if expected == out => Ok(()),
                Some(expected) => Err(format!("expected {expected}, got {out}")),
            },
            ("valid", Outcome::Error(e)) => Err(format!("rejected a valid input: {e}")),
            ("invalid", Outcome::Error(_)) => Ok(()),
            ("invalid", Outcome::Out(out)) => Err(format!("accepted an invalid input: {out}")),
            ("acceptable", _) => Ok(()),
            (other, _) => Err(format!("unknown result kind `{other}`")),
        };
        match verdict {
            Ok(()) => *self.passed.entry(case.op.clone()).or_default() += 1,
            Err(why) => self.failures.push(format!(
                "FAIL {} {} tcId {} [{}] {}: {why}",
                case.file, case.op, case.tc_id, case.requirement, case.comment
            )),
        }
    }

    fn assert_clean(&self, how: &str) {
        eprintln!("{how}: passed per op {:?}", self.passed);
        eprintln!("{how}: skipped (out of scope) per op {:?}", self.skipped);
        assert!(
            self.failures.is_empty(),
            "{how}: {} failures:\n{}",
            self.failures.len(),
            self.failures.join("\n")
        );
        for op in IMPLEMENTED_OPS {
            assert!(
                !self.skipped.contains_key(*op),
                "{how}: in-scope op {op} was skipped"
            );
            assert!(
                self.passed.get(*op).copied().unwrap_or(0) > 0,
                "{how}: no case of in-scope op {op} was graded"
            );
        }
        assert!(
            self.skipped.keys().all(|op| op.ends_with(".body.decode")),
            "{how}: unexpected skipped ops {:?}",
            self.skipped.keys()
        );
    }
}

#[test]
fn corpus_in_process() {
    let Some(cases) = load_cases() else { return };
    let mut tally = Tally::default();
    for case in &cases {
        tally.grade(case, &run_op(&case.op, &case.input));
    }
    tally.assert_clean("in-process");
}

fn adapter_path() -> PathBuf {
    // Integration tests run from target/<profile>/deps; examples live beside it.
    let exe = std::env::current_exe().expect("test binary path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target profile directory");
    profile_dir.join("examples").join(format!(
        "conformance_adapter{}",
        std::env::consts::EXE_SUFFIX
    ))
}

fn build_adapter_if_missing(path: &Path) {
    if path.exists() {
        return;
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "-p", "npamp-gateway", "--features", "internals"])
        .args(["--example", "conformance_adapter"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()
        .expect("run cargo build --example conformance_adapter");
    assert!(status.success(), "building the conformance adapter failed");
}

#[test]
fn corpus_through_adapter() {
    let Some(cases) = load_cases() else { return };
    let path = adapter_path();
    build_adapter_if_missing(&path);
    let mut child = Command::new(&path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {}: {e}", path.display()));
    let mut stdin = child.stdin.take().expect("adapter stdin");
    let mut stdout = child.stdout.take().expect("adapter stdout");

    // Requests go out on a thread so a full pipe cannot deadlock us. Besides the
    // corpus, a few hostile requests check the adapter survives them.
    let mut requests: Vec<Vec<u8>> = cases
        .iter()
        .map(|c| {
            serde_json::json!({ "op": c.op, "in": c.input })
                .to_string()
                .into_bytes()
        })
        .collect();
    let hostile: [&[u8]; 4] = [
        b"not json",
        b"{}",
        b"{\"op\":7}",
        b"{\"op\":\"crc32c\",\"in\":[]}",
    ];
    requests.extend(hostile.iter().map(|h| h.to_vec()));
    let writer = std::thread::spawn(move || {
        for r in &requests {
            stdin.write_all(&(r.len() as u32).to_le_bytes())?;
            stdin.write_all(r)?;
        }
        Ok::<_, std::io::Error>(())
    });

    let mut read_reply = || -> Value {
        let mut len = [0u8; 4];
        stdout.read_exact(&mut len).expect("reply length");
        let mut body = vec![0u8; u32::from_le_bytes(len) as usize];
        stdout.read_exact(&mut body).expect("reply body");
        serde_json::from_slice(&body).expect("reply is JSON")
    };
    let mut tally = Tally::default();
    for case in &cases {
        let reply = read_reply();
        let outcome = if let Some(out) = reply.get("out") {
            Outcome::Out(out.clone())
        } else if let Some(e) = reply.get("error") {
            Outcome::Error(e.to_string())
        } else if let Some(s) = reply.get("skipped") {
            Outcome::Skipped(s.to_string())
        } else {
            panic!("reply {reply} is none of out/error/skipped");
        };
        tally.grade(case, &outcome);
    }
    for h in hostile {
        let reply = read_reply();
        assert!(
            reply.get("error").is_some(),
            "hostile request {:?} got {reply}",
            String::from_utf8_lossy(h)
        );
    }
    writer
        .join()
        .expect("writer thread")
        .expect("write requests");
    let status = child.wait().expect("adapter exit");
    assert!(status.success(), "adapter exited with {status}");
    tally.assert_clean("adapter");
}

/// The record layer's real frame sealing (Payload Length = ciphertext + tag)
/// against the two AUTH frames of the handshake-flow KAT, byte for byte.
#[test]
fn record_layer_reproduces_handshake_flow_auth_frames() {
    use npamp_gateway::record::{Suite, TrafficKeys};
    use npamp_gateway::wire::{ChannelId, Flags, FrameType, HEADER_LEN};

    let path = vectors_dir().join("v1/handshake-flow-kat.json");
    let Ok(text) = std::fs::read_to_string(&path) else {
        eprintln!(
            "SKIPPED: {} not found (set NPAMP_TEST_VECTORS)",
            path.display()
        );
        return;
    };
    let kat: Value = serde_json::from_str(&text).expect("KAT is JSON");
    let exp = &kat["expected"];
    let hex = |v: &Value| hex::decode(v.as_str().expect("hex string")).expect("valid hex");
    for (frame, key, iv, frame_type) in [
        ("server_auth", "s_hs_key", "s_hs_iv", 0x0102),
        ("client_auth", "c_hs_key", "c_hs_iv", 0x0103),
    ] {
        let keys = TrafficKeys::new(
            Suite::AES_256_GCM,
            &hex(&exp["secrets"][key]),
            &hex(&exp["secrets"][iv]),
        )
        .expect("keys");
        let plaintext = hex(&exp["auth_plaintext"][frame]);
        let golden = hex(&exp["frames"][frame]);

        let mut sealed = Vec::new();
        keys.seal_frame_into(
            &mut sealed,
            Flags::ENC,
            FrameType(frame_type),
            ChannelId::CONTROL,
            0,
            |b| b.extend_from_slice(&plaintext),
        )
        .expect("seal");
        assert_eq!(hex::encode(&sealed), hex::encode(&golden), "{frame} sealed");

        let mut wire = golden.clone();
        let (header, opened) = keys.open_frame(&mut wire).expect("open golden frame");
        assert_eq!(opened, &plaintext[..], "{frame} opened");
        assert_eq!(header.payload_len as usize, golden.len() - HEADER_LEN);
    }
}
