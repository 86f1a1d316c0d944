//! `deploy/kubernetes/loadgen*.yaml` agree with the load generator: the
//! scenario in the ConfigMap is valid, the Job's workers, `--shards` and
//! the merge step's directories are one number, and the arguments are ones
//! `npamp-loadgen` takes.

use std::path::{Path, PathBuf};

use npamp_loadgen::scenario::Scenario;

const BIN: &str = env!("CARGO_BIN_EXE_npamp-loadgen");

fn deploy(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy/kubernetes")
        .join(file)
}

/// The value of `key: VALUE` on the first line that sets it.
fn field<'a>(yaml: &'a str, key: &str) -> &'a str {
    yaml.lines()
        .find_map(|l| l.trim().strip_prefix(&format!("{key}:")))
        .map(str::trim)
        .unwrap_or_else(|| panic!("no {key}"))
}

#[test]
fn the_loadgen_job_and_its_merge_agree() {
    let job = std::fs::read_to_string(deploy("loadgen.yaml")).expect("loadgen.yaml");
    let merge = std::fs::read_to_string(deploy("loadgen-merge.yaml")).expect("merge");
    // The scenario, as the ConfigMap holds it.
    let scenario: String = job
        .lines()
        .skip_while(|l| l.trim() != "scenario.toml: |")
        .skip(1)
        .take_while(|l| l.starts_with("    "))
        .map(|l| format!("{}\n", &l[4..]))
        .collect();
    let s = Scenario::parse(&scenario, "scenario.toml").expect("the ConfigMap's scenario");
    assert_eq!(
        s.target.as_deref(),
        Some("http://npamp-edge:8080/"),
        "the edge's Service"
    );
    let workers: u32 = field(&job, "completions").parse().expect("completions");
    assert_eq!(
        field(&job, "parallelism"),
        workers.to_string(),
        "all workers at once"
    );
    assert_eq!(field(&job, "completionMode"), "Indexed");
    let args: Vec<&str> = job
        .lines()
        .skip_while(|l| l.trim() != "args:")
        .skip(1)
        .take_while(|l| l.trim_start().starts_with("- "))
        .map(|l| l.trim().trim_start_matches("- ").trim_matches('"'))
        .collect();
    let shards = args
        .iter()
        .position(|a| *a == "--shards")
        .expect("--shards");
    assert_eq!(args[shards + 1], workers.to_string());
    let run_id = args
        .iter()
        .position(|a| *a == "--run-id")
        .expect("--run-id: merge tells runs apart by it");
    assert_eq!(args[run_id + 1], "$(JOB_UID)");
    assert!(job.contains("fieldPath: metadata.labels['batch.kubernetes.io/controller-uid']"));
    let dirs: Vec<String> = (0..workers).map(|i| format!("/results/{i}")).collect();
    let merge_args = field(&merge, "args");
    assert_eq!(
        merge_args,
        format!("[merge, {}, --out, /results/merged]", dirs.join(", ")),
        "the merge takes every worker's directory"
    );
    // The worker's arguments are ones `run` takes: here, with the index the
    // Job would give, they get as far as the scenario file.
    let out = std::process::Command::new(BIN)
        .args(args.iter().map(|a| {
            a.replace("$(JOB_COMPLETION_INDEX)", "0")
                .replace("$(JOB_UID)", "3f1c2a9e-uid")
        }))
        .env("JOB_COMPLETION_INDEX", "0")
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/etc/npamp-loadgen/scenario.toml"), "{err}");
}
