//! The crate's layering, held by a test (DESIGN.md, "Sans-IO protocol core"):
//! dependencies point one way, wire → record → handshake / bridge / jsonrpc →
//! assoc → gateway, and the pure layers (and the association's core state
//! machine) do no I/O, read no clock and draw no randomness themselves: time
//! and randomness are parameters, so their tests are deterministic.
//!
//! It reads the source files, so a violation names the file and the line.

use std::path::{Path, PathBuf};

/// A layer: its source files, the layers it must not name, and whether it
/// must stay pure (no runtime, sockets, clock or OS randomness).
struct Layer {
    name: &'static str,
    paths: &'static [&'static str],
    must_not_use: &'static [&'static str],
    pure: bool,
}

const LAYERS: &[Layer] = &[
    Layer {
        name: "wire",
        paths: &["src/wire"],
        must_not_use: &[
            "record",
            "handshake",
            "bridge",
            "jsonrpc",
            "assoc",
            "gateway",
        ],
        pure: true,
    },
    Layer {
        name: "record",
        paths: &["src/record"],
        must_not_use: &["handshake", "bridge", "jsonrpc", "assoc", "gateway"],
        pure: true,
    },
    Layer {
        name: "handshake",
        paths: &["src/handshake"],
        must_not_use: &["bridge", "jsonrpc", "assoc", "gateway"],
        pure: true,
    },
    Layer {
        name: "bridge",
        paths: &["src/bridge"],
        must_not_use: &["handshake", "jsonrpc", "assoc", "gateway"],
        pure: true,
    },
    Layer {
        name: "jsonrpc",
        paths: &["src/jsonrpc"],
        must_not_use: &["handshake", "assoc", "gateway"],
        pure: true,
    },
    Layer {
        // The association's state machine; its async shell (driver,
        // transport) is the I/O layer and may use the runtime.
        name: "assoc core",
        paths: &["src/assoc/mod.rs"],
        must_not_use: &["gateway"],
        pure: true,
    },
    Layer {
        name: "assoc shell",
        paths: &["src/assoc"],
        must_not_use: &["gateway"],
        pure: false,
    },
];

/// What a pure layer must not contain: a runtime, sockets, the clock, the
/// OS random number generator.
const IMPURE: &[&str] = &[
    "tokio",
    "quinn",
    "std::net",
    "std::fs",
    "Instant::now",
    "SystemTime::now",
    "SystemRandom",
    "OsRng",
    "getrandom",
    "thread_rng",
];

fn rust_files(path: &Path, out: &mut Vec<PathBuf>) {
    if path.is_file() {
        out.push(path.to_owned());
        return;
    }
    let mut entries: Vec<_> = std::fs::read_dir(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .map(|e| e.expect("directory entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() || p.extension().is_some_and(|x| x == "rs") {
            rust_files(&p, out);
        }
    }
}

/// The code of a line, without a `//` comment (doc comments may mention
/// anything); unit tests are cut off at `#[cfg(test)]` by the caller.
fn code(line: &str) -> &str {
    line.split("//").next().unwrap_or_default()
}

/// Violations in one file's text: `path:line: what`.
fn violations(file: &str, text: &str, layer: &Layer) -> Vec<String> {
    let mut found = Vec::new();
    for (n, line) in text.lines().enumerate() {
        // Tests beside the code may use what they like.
        if line.trim_start().starts_with("#[cfg(test)]") {
            break;
        }
        let code = code(line);
        for other in layer.must_not_use {
            if code.contains(&format!("crate::{other}")) {
                found.push(format!(
                    "{file}:{}: {} uses crate::{other}: {}",
                    n + 1,
                    layer.name,
                    line.trim()
                ));
            }
        }
        if layer.pure {
            for word in IMPURE {
                if code.contains(word) {
                    found.push(format!(
                        "{file}:{}: {} is pure but uses {word}: {}",
                        n + 1,
                        layer.name,
                        line.trim()
                    ));
                }
            }
        }
    }
    found
}

#[test]
fn dependencies_point_one_way_and_pure_layers_do_no_io() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut found = Vec::new();
    let mut files = 0;
    for layer in LAYERS {
        for path in layer.paths {
            let mut paths = Vec::new();
            rust_files(&root.join(path), &mut paths);
            for p in paths {
                // Unit-test files of a layer (`tests.rs`) are tests.
                if p.file_name().is_some_and(|f| f == "tests.rs") {
                    continue;
                }
                let text =
                    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
                let name = p.strip_prefix(root).unwrap_or(&p).display().to_string();
                found.extend(violations(&name, &text, layer));
                files += 1;
            }
        }
    }
    assert!(files >= 20, "only {files} source files found: wrong paths?");
    assert!(
        found.is_empty(),
        "layering violations:\n{}",
        found.join("\n")
    );
}

/// The checker itself finds what it is meant to find, and ignores comments
/// and unit tests.
#[test]
fn the_checker_finds_violations_and_ignores_comments_and_tests() {
    let wire = &LAYERS[0];
    let bad = "use crate::record::Keys;\nlet t = std::time::Instant::now();\nuse tokio::io;\n";
    let found = violations("src/wire/x.rs", bad, wire);
    assert_eq!(found.len(), 3, "{found:?}");
    assert!(found[0].starts_with("src/wire/x.rs:1: wire uses crate::record"));
    assert!(found[1].contains("Instant::now"));
    assert!(found[2].contains("tokio"));
    let fine = "// tokio is not used here\n/// Instant::now is a parameter\n#[cfg(test)]\nmod tests { use tokio; }\n";
    assert!(violations("src/wire/y.rs", fine, wire).is_empty());
}
