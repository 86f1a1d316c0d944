//! The crate's layering, held by a test (DESIGN.md, "Sans-IO protocol core"):
//! dependencies point one way, wire → record → handshake / bridge / jsonrpc →
//! relay / assoc → gateway, and the pure layers (and the association's core state
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
        // The exchange: what crossing the bridge means for JSON-RPC.
        name: "relay",
        paths: &["src/relay"],
        must_not_use: &["handshake", "assoc", "gateway"],
        pure: true,
    },
    Layer {
        // The association's state machine; its async shell (driver,
        // transport) is the I/O layer and may use the runtime.
        name: "assoc core",
        paths: &["src/assoc/association.rs"],
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

/// Unit-test files beside the code (`tests.rs`, `*_tests.rs`) are tests.
fn is_test_file(p: &Path) -> bool {
    p.file_stem()
        .and_then(|s| s.to_str())
        .is_some_and(|s| s == "tests" || s.ends_with("_tests"))
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
                if is_test_file(&p) {
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

/// The modules of `src/assoc` (a file each; `*_tests.rs` belong to their
/// module) and the siblings each names through `super::`, from the code
/// before its unit tests.
fn assoc_imports(root: &Path) -> Vec<(String, Vec<String>)> {
    let mut paths = Vec::new();
    rust_files(&root.join("src/assoc"), &mut paths);
    let mut modules = Vec::new();
    for p in paths.iter().filter(|p| !is_test_file(p)) {
        let name = p.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
        if name == "mod" {
            continue;
        }
        let text = std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        let code: String = text
            .lines()
            .take_while(|l| !l.trim_start().starts_with("#[cfg(test)]"))
            .map(|l| format!("{}\n", code(l)))
            .collect();
        modules.push((name.to_owned(), super_names(&code)));
    }
    modules
}

/// Every name `super::` is followed by: `super::a::B` gives `a`,
/// `super::{a, b::C}` gives `a` and `b`.
fn super_names(code: &str) -> Vec<String> {
    let ident = |s: &str| -> String {
        s.trim_start()
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    let mut names = Vec::new();
    for (at, _) in code.match_indices("super::") {
        let rest = &code[at + "super::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let group = group.split('}').next().unwrap_or_default();
            names.extend(group.split(',').map(ident).filter(|n| !n.is_empty()));
        } else {
            names.push(ident(rest));
        }
    }
    names
}

#[test]
fn assoc_modules_name_their_siblings_and_form_no_cycle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let modules = assoc_imports(root);
    let known: Vec<&str> = modules.iter().map(|(m, _)| m.as_str()).collect();
    assert!(known.len() >= 10, "only {known:?} found: wrong path?");
    let mut found = Vec::new();
    for (module, names) in &modules {
        for n in names {
            if !known.contains(&n.as_str()) && n != "self" {
                found.push(format!(
                    "src/assoc/{module}.rs takes {n} through the facade (name its module: super::MODULE::{n})"
                ));
            }
        }
    }
    // Depth-first search for a cycle among the modules.
    fn visit<'a>(
        m: &'a str,
        edges: &'a [(String, Vec<String>)],
        path: &mut Vec<&'a str>,
        done: &mut Vec<&'a str>,
        found: &mut Vec<String>,
    ) {
        if done.contains(&m) {
            return;
        }
        if let Some(i) = path.iter().position(|p| *p == m) {
            found.push(format!("import cycle: {} -> {m}", path[i..].join(" -> ")));
            return;
        }
        path.push(m);
        if let Some((_, names)) = edges.iter().find(|(n, _)| n == m) {
            for n in names {
                if edges.iter().any(|(e, _)| e == n) && n != m {
                    visit(n, edges, path, done, found);
                }
            }
        }
        path.pop();
        done.push(m);
    }
    let (mut path, mut done) = (Vec::new(), Vec::new());
    for (m, _) in &modules {
        visit(m, &modules, &mut path, &mut done, &mut found);
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn the_cycle_checker_reads_grouped_and_nested_imports() {
    let names = super_names("use super::{a, b::C};\nuse super::d::E;\nlet x = super::f(1);\n");
    assert_eq!(names, ["a", "b", "d", "f"]);
}

#[test]
fn no_file_in_assoc_is_over_600_lines() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut paths = Vec::new();
    rust_files(&root.join("src/assoc"), &mut paths);
    let long: Vec<String> = paths
        .iter()
        .filter_map(|p| {
            let lines = std::fs::read_to_string(p).ok()?.lines().count();
            (lines > 600).then(|| format!("{}: {lines} lines", p.display()))
        })
        .collect();
    assert!(long.is_empty(), "split these by what they own: {long:?}");
}
