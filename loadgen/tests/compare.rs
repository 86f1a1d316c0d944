//! `compare` on the command line: its exit code (5: a regression) is not
//! set off by noise under the floor (`--noise-floor-ms`), and runs at
//! other offered rates are warned of.

use std::path::{Path, PathBuf};

const BIN: &str = env!("CARGO_BIN_EXE_npamp-loadgen");

/// A recorded worker's summary, its p99 and offered rate as given, written
/// as `DIR/NAME/summary.json`.
fn summary(dir: &Path, name: &str, p99_ms: f64, offered: f64) -> PathBuf {
    let recorded = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/pages/shard0/summary.json");
    let text = std::fs::read_to_string(recorded).expect("a recorded summary");
    let mut v: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    v["latency_ms"]["p99"] = p99_ms.into();
    v["rates"]["offered"] = offered.into();
    let path = dir.join(name).join("summary.json");
    std::fs::create_dir_all(dir.join(name)).expect("dir");
    std::fs::write(&path, v.to_string()).expect("write");
    path
}

fn compare(args: &[&Path], more: &[&str]) -> (Option<i32>, String) {
    let out = std::process::Command::new(BIN)
        .arg("compare")
        .args(args)
        .args(more)
        .output()
        .expect("compare runs");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code(), text)
}

#[test]
fn noise_under_the_floor_is_no_regression_and_other_loads_are_warned_of() {
    let dir = std::env::temp_dir().join(format!("loadgen-compare-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let base = summary(&dir, "base", 0.323, 100.0);
    let noisy = summary(&dir, "noisy", 0.606, 100.0);
    // +88 %, by 0.283 ms: under the default floor of 1 ms.
    let (code, text) = compare(&[&base, &noisy], &[]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("ok (noise: within 1 ms)"), "{text}");
    // Under a floor of 0.1 ms, it is a regression.
    let (code, text) = compare(&[&base, &noisy], &["--noise-floor-ms", "0.1"]);
    assert_eq!(code, Some(5), "{text}");
    for bad in ["-1", "x", "NaN"] {
        let (code, text) = compare(&[&base, &noisy], &["--noise-floor-ms", bad]);
        assert_eq!(code, Some(2), "{bad}: {text}");
    }
    // Another offered rate: a warning naming both.
    let faster = summary(&dir, "faster", 0.323, 1500.0);
    let (code, text) = compare(&[&base, &faster], &[]);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.lines().next().is_some_and(
            |l| l.starts_with("WARNING: offered rates differ (base 100/s, new 1500/s)")
        ),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
