//! Every committed fuzz input (`fuzz/seeds/TARGET/*`) replayed through its
//! target's body (`fuzz/entries/TARGET.rs`, the very function the libFuzzer
//! binary calls), uninstrumented, on every `cargo test`: a decoder change
//! that breaks an input the fuzzer once found interesting fails here in
//! seconds. The instrumented fuzz run is `fuzz/smoke.sh` (in `.ci/long`).

use std::collections::BTreeSet;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

#[path = "../../fuzz/entries/mod.rs"]
mod entries;

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz")
}

/// The names of the files in `dir` with extension `ext` (or of its folders).
fn names(dir: &Path, ext: Option<&str>) -> BTreeSet<String> {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| match ext {
            Some(ext) => p.extension().is_some_and(|x| x == ext),
            None => p.is_dir(),
        })
        .filter_map(|p| p.file_stem().and_then(|s| s.to_str()).map(str::to_owned))
        .collect()
}

#[test]
fn every_fuzz_target_has_an_entry_and_seeds() {
    let fuzz = fuzz_dir();
    let entries: BTreeSet<String> = entries::TARGETS
        .iter()
        .map(|(n, _)| (*n).to_owned())
        .collect();
    assert_eq!(
        names(&fuzz.join("fuzz_targets"), Some("rs")),
        entries,
        "fuzz/fuzz_targets and fuzz/entries/mod.rs's TARGETS name different targets"
    );
    assert_eq!(
        names(&fuzz.join("seeds"), None),
        entries,
        "every target has a seed folder, and only targets do"
    );
}

#[test]
fn every_committed_fuzz_input_passes_its_target() {
    let seeds = fuzz_dir().join("seeds");
    let mut failed = Vec::new();
    let mut replayed = 0;
    for (name, run) in entries::TARGETS {
        let dir = seeds.join(name);
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_file())
            .collect();
        files.sort();
        assert!(!files.is_empty(), "{}: no seed", dir.display());
        for file in files {
            let input = std::fs::read(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            if catch_unwind(AssertUnwindSafe(|| run(&input))).is_err() {
                failed.push(file.display().to_string());
            }
            replayed += 1;
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {replayed} committed fuzz inputs fail their target (the panic is printed above each):\n{}",
        failed.len(),
        failed.join("\n")
    );
}
