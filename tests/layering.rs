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
    Layer {
        // The gateway's policy: health, choice, retry budget, a request's
        // way across members. The shell reads the clock for it; it shows
        // its metrics through telemetry (the rooms' doors below).
        name: "gateway policy",
        paths: &["src/gateway/policy"],
        must_not_use: &[
            "assoc",
            "handshake",
            "record",
            "wire",
            "gateway::edge",
            "gateway::ingress",
            "gateway::upstream",
            "gateway::origin",
            "gateway::exec",
            "gateway::session",
            "gateway::context",
            "gateway::config",
        ],
        pure: true,
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

/// The functions of a file's code (unit tests beside it left out) longer
/// than `most` lines, from the line of `fn` to the brace that closes it at
/// the same indentation: `(name, first line, lines)`.
fn long_functions(text: &str, most: usize) -> Vec<(String, usize, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let tests = lines
        .iter()
        .position(|l| l.trim_start().starts_with("#[cfg(test)]"))
        .unwrap_or(lines.len());
    let mut long = Vec::new();
    for (i, line) in lines[..tests].iter().enumerate() {
        let body = line.trim_start();
        let indent = &line[..line.len() - body.len()];
        let mut words = body.split_whitespace().peekable();
        while let Some(w) = words.peek() {
            if w.starts_with("pub") || ["async", "const", "unsafe", "extern"].contains(w) {
                words.next();
            } else {
                break;
            }
        }
        if words.next() != Some("fn") {
            continue;
        }
        let name: String = words
            .next()
            .unwrap_or_default()
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        // A declaration without a body (a trait's), or a body on one line:
        // nothing to measure.
        let opens = lines[i..tests]
            .iter()
            .map(|l| code(l).trim_end())
            .find(|l| l.ends_with('{') || l.ends_with(';') || l.ends_with('}'));
        if !opens.is_some_and(|l| l.ends_with('{')) {
            continue;
        }
        let close = format!("{indent}}}");
        if let Some(end) = lines[i + 1..tests].iter().position(|l| *l == close) {
            let n = end + 2;
            if n > most {
                long.push((name, i + 1, n));
            }
        }
    }
    long
}

/// No function of the gateway's shell is over 80 lines: a longer one does
/// several things, each of which deserves a name.
#[test]
fn no_function_in_the_gateway_is_over_80_lines() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut paths = Vec::new();
    rust_files(&root.join("src/gateway"), &mut paths);
    assert!(paths.len() > 30, "only {} files read", paths.len());
    let long: Vec<String> = paths
        .iter()
        .filter(|p| !is_test_file(p))
        .flat_map(|p| {
            let text = std::fs::read_to_string(p).expect("source");
            long_functions(&text, 80)
                .into_iter()
                .map(move |(name, line, n)| {
                    let shown = p.strip_prefix(root).unwrap_or(p);
                    format!("{}:{line}: {name}: {n} lines", shown.display())
                })
        })
        .collect();
    assert!(
        long.is_empty(),
        "split these by what they do:\n{}",
        long.join("\n")
    );
}

#[test]
fn the_function_measure_counts_from_fn_to_its_closing_brace() {
    let short = "fn a() {\n    x;\n}\n";
    assert!(
        long_functions(short, 2)
            .iter()
            .any(|(n, l, len)| n == "a" && *l == 1 && *len == 3)
    );
    assert!(long_functions(short, 3).is_empty());
    let nested =
        "impl X {\n    pub(crate) async fn b(\n        &self,\n    ) {\n        y;\n    }\n}\n";
    assert_eq!(long_functions(nested, 1), vec![("b".to_owned(), 2, 5)]);
    let tests_too =
        "fn c() {}\n#[cfg(test)]\nmod tests {\n    fn long() {\n        a;\n        b;\n    }\n}\n";
    assert!(
        long_functions(tests_too, 1).is_empty(),
        "unit tests are not counted"
    );
    let declared = "trait T {\n    fn d(&self);\n}\nfn e() {\n    z;\n}\n";
    assert_eq!(long_functions(declared, 1), vec![("e".to_owned(), 4, 3)]);
}

// ---- Import circles, across the workspace ----

/// The crates of the workspace: where their sources are.
const CRATES: &[&str] = &["src", "cli/src", "loadgen/src", "testkit/src"];

/// A source file as a module: its path of module names under its crate
/// (`src/gateway/edge/pool.rs` is `gateway::edge::pool`, a `mod.rs`, `lib.rs`
/// or `main.rs` is the module it opens), and whether it opens one (a facade
/// of children).
fn module_of(crate_root: &Path, file: &Path) -> (Vec<String>, bool) {
    let rel = file
        .strip_prefix(crate_root)
        .unwrap_or(file)
        .with_extension("");
    let mut names: Vec<String> = rel
        .iter()
        .filter_map(|s| s.to_str().map(str::to_owned))
        .collect();
    let opens = matches!(
        names.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    );
    if opens {
        names.pop();
    }
    (names, opens)
}

/// Every path the code names through `crate::`, `super::` or `self::`, or
/// through a `use` of a child module, as module names from the crate root;
/// `{a, b::C}` groups are opened (one level of nesting within).
fn referenced_paths(code: &str, here: &[String], children: &[String]) -> Vec<Vec<String>> {
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    // The path segments from `at` on: `a::b::{c, d::e}` gives a::b::c and
    // a::b::d::e.
    fn expand(text: &str, ident: &dyn Fn(&str) -> String) -> Vec<Vec<String>> {
        let mut segs = Vec::new();
        let mut rest = text;
        loop {
            let rest_trim = rest.trim_start();
            if let Some(group) = rest_trim.strip_prefix('{') {
                // Up to the matching brace.
                let mut depth = 1;
                let mut end = group.len();
                for (i, c) in group.char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = i;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                let inner = &group[..end];
                let mut out = Vec::new();
                let mut depth = 0;
                let mut start = 0;
                for (i, c) in inner.char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' => depth -= 1,
                        ',' if depth == 0 => {
                            for mut p in expand(&inner[start..i], ident) {
                                let mut full = segs.clone();
                                full.append(&mut p);
                                out.push(full);
                            }
                            start = i + 1;
                        }
                        _ => {}
                    }
                }
                for mut p in expand(&inner[start..], ident) {
                    let mut full = segs.clone();
                    full.append(&mut p);
                    out.push(full);
                }
                return out;
            }
            let name = ident(rest_trim);
            if name.is_empty() {
                return if segs.is_empty() {
                    Vec::new()
                } else {
                    vec![segs]
                };
            }
            rest = &rest_trim[name.len()..];
            segs.push(name);
            match rest.strip_prefix("::") {
                Some(r) => rest = r,
                None => return vec![segs],
            }
        }
    }
    let mut found = Vec::new();
    let bytes = code.as_bytes();
    for (at, _) in code.match_indices("::") {
        // The start of the word before `::`.
        let start = code[..at]
            .rfind(|c: char| !(c.is_alphanumeric() || c == '_'))
            .map_or(0, |i| i + 1);
        // Only the first segment of a path.
        if start >= 2 && &bytes[start - 2..start] == b"::" {
            continue;
        }
        let first = &code[start..at];
        let base: Vec<String> = match first {
            "crate" => Vec::new(),
            "self" => here.to_vec(),
            "super" => {
                // super::super::…
                let mut up = here.to_vec();
                up.pop();
                let mut rest = &code[at + 2..];
                while let Some(r) = rest.strip_prefix("super::") {
                    up.pop();
                    rest = r;
                }
                for p in expand(rest, &ident) {
                    let mut full = up.clone();
                    full.extend(p.into_iter().filter(|s| s != "super"));
                    found.push(full);
                }
                continue;
            }
            name if children.iter().any(|c| c == name)
                && code[..start].trim_end().ends_with("use") =>
            {
                let mut b = here.to_vec();
                b.push(name.to_owned());
                for p in expand(&code[at + 2..], &ident) {
                    let mut full = b.clone();
                    full.extend(p);
                    found.push(full);
                }
                continue;
            }
            _ => continue,
        };
        for p in expand(&code[at + 2..], &ident) {
            let mut full = base.clone();
            full.extend(p);
            found.push(full);
        }
    }
    found
}

/// The files of the workspace and, for each, the files it depends on: the
/// module each path it names falls in (the longest module prefix). A
/// facade's use of its own descendants is its shape, not a dependency.
fn file_graph(root: &Path) -> Vec<(String, Vec<String>)> {
    let mut graph = Vec::new();
    for krate in CRATES {
        let crate_root = root.join(krate);
        let mut paths = Vec::new();
        rust_files(&crate_root, &mut paths);
        let paths: Vec<PathBuf> = paths.into_iter().filter(|p| !is_test_file(p)).collect();
        let modules: Vec<(Vec<String>, bool, String)> = paths
            .iter()
            .map(|p| {
                let (m, opens) = module_of(&crate_root, p);
                let name = p.strip_prefix(root).unwrap_or(p).display().to_string();
                (m, opens, name)
            })
            .collect();
        for (p, (here, opens, name)) in paths.iter().zip(&modules) {
            let text =
                std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            let code: String = text
                .lines()
                .take_while(|l| !l.trim_start().starts_with("#[cfg(test)]"))
                .map(|l| format!("{}\n", code(l)))
                .collect();
            let children: Vec<String> = modules
                .iter()
                .filter(|(m, _, _)| m.len() == here.len() + 1 && m.starts_with(here))
                .filter_map(|(m, _, _)| m.last().cloned())
                .collect();
            let mut deps = Vec::new();
            for path in referenced_paths(&code, here, &children) {
                // The longest module prefix of the path.
                let Some((target, _, file)) = modules
                    .iter()
                    .filter(|(m, _, _)| path.starts_with(m))
                    .max_by_key(|(m, _, _)| m.len())
                else {
                    continue;
                };
                let own_descendant =
                    *opens && target.len() > here.len() && target.starts_with(here);
                if file != name && !own_descendant && !deps.contains(file) {
                    deps.push(file.clone());
                }
            }
            graph.push((name.clone(), deps));
        }
    }
    graph
}

/// The groups of two or more files that depend on each other, round a
/// cycle (Tarjan's strongly connected components), each sorted.
fn circles(graph: &[(String, Vec<String>)]) -> Vec<Vec<String>> {
    struct Walk<'a> {
        graph: &'a [(String, Vec<String>)],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        found: Vec<Vec<String>>,
    }
    impl Walk<'_> {
        fn visit(&mut self, v: usize) {
            self.index[v] = Some(self.next);
            self.low[v] = self.next;
            self.next += 1;
            self.stack.push(v);
            self.on_stack[v] = true;
            for dep in &self.graph[v].1 {
                let Some(w) = self.graph.iter().position(|(n, _)| n == dep) else {
                    continue;
                };
                match self.index[w] {
                    None => {
                        self.visit(w);
                        self.low[v] = self.low[v].min(self.low[w]);
                    }
                    Some(i) if self.on_stack[w] => self.low[v] = self.low[v].min(i),
                    Some(_) => {}
                }
            }
            if Some(self.low[v]) == self.index[v] {
                let mut group = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack[w] = false;
                    group.push(self.graph[w].0.clone());
                    if w == v {
                        break;
                    }
                }
                if group.len() > 1 {
                    group.sort();
                    self.found.push(group);
                }
            }
        }
    }
    let n = graph.len();
    let mut walk = Walk {
        graph,
        index: vec![None; n],
        low: vec![0; n],
        on_stack: vec![false; n],
        stack: Vec::new(),
        next: 0,
        found: Vec::new(),
    };
    for v in 0..n {
        if walk.index[v].is_none() {
            walk.visit(v);
        }
    }
    walk.found.sort();
    walk.found
}

/// No file of the workspace depends on itself round a cycle of imports:
/// every dependency between files is one-way, so each room can be read,
/// tested and changed from the rooms below it alone.
#[test]
fn no_import_circle_in_the_workspace() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let graph = file_graph(root);
    assert!(
        graph.len() >= 100,
        "only {} files read: wrong paths?",
        graph.len()
    );
    let wrong: Vec<String> = circles(&graph)
        .iter()
        .map(|c| {
            format!(
                "import circle: {} (these files depend on each other round a cycle: make the dependency one-way)",
                c.join(", ")
            )
        })
        .collect();
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_circle_finder_reads_every_kind_of_path_and_finds_cycles() {
    let here = ["m".to_owned(), "n".to_owned()];
    let children = ["child".to_owned()];
    let code = "use super::{a, b::C};\nuse crate::x::{y::{Z, W}, v};\nlet q = self::k::f();\nuse child::T;\nlet s = super::super::top::g();\nlet t = std::mem::take(x);\n";
    let paths: Vec<String> = referenced_paths(code, &here, &children)
        .iter()
        .map(|p| p.join("::"))
        .collect();
    assert_eq!(
        paths,
        [
            "m::a",
            "m::b::C",
            "x::y::Z",
            "x::y::W",
            "x::v",
            "m::n::k::f",
            "m::n::child::T",
            "top::g",
        ]
    );
    let edge = |from: &str, to: &[&str]| {
        (
            from.to_owned(),
            to.iter().map(|t| (*t).to_owned()).collect::<Vec<_>>(),
        )
    };
    let graph = [
        edge("a", &["b"]),
        edge("b", &["c"]),
        edge("c", &["a"]),
        edge("d", &["a"]),
        edge("e", &["e", "d"]),
    ];
    assert_eq!(circles(&graph), [["a", "b", "c"]]);
}

/// The gateway's rooms, each with the rooms it may use: the settings
/// (limits, errors) know no other; telemetry the settings; the policy
/// those two; the shell (executor, outboxes, stall clocks, sessions,
/// context) those two; the edge (with its ingress kinds) and the origin
/// (with its upstream kinds) those four and never each other; config, the
/// builder, the library's client and the gateway's start everything.
const ROOMS: &[(&str, &[&str], &[&str])] = &[
    ("settings", &["src/gateway/settings.rs"], &[]),
    ("telemetry", &["src/gateway/metrics.rs"], &["settings"]),
    (
        "policy",
        &["src/gateway/policy/"],
        &["settings", "telemetry"],
    ),
    (
        "shell",
        &[
            "src/gateway/exec.rs",
            "src/gateway/outbox.rs",
            "src/gateway/stall.rs",
            "src/gateway/session.rs",
            "src/gateway/context.rs",
            "src/gateway/gated.rs",
            "src/gateway/carry.rs",
            "src/gateway/quiet.rs",
            "src/gateway/redact.rs",
            "src/gateway/capture.rs",
            "src/gateway/oauth.rs",
            "src/gateway/scopes.rs",
            "src/gateway/forward.rs",
            "src/gateway/forward/",
            "src/gateway/json_stream.rs",
            "src/gateway/auth.rs",
            "src/gateway/mcp_headers.rs",
            "src/gateway/mcp_names.rs",
            "src/gateway/mcp_params.rs",
        ],
        &["settings", "telemetry"],
    ),
    (
        "edge",
        &["src/gateway/edge/", "src/gateway/ingress/"],
        &["settings", "telemetry", "policy", "shell"],
    ),
    (
        "origin",
        &["src/gateway/origin.rs", "src/gateway/upstream/"],
        &["settings", "telemetry", "policy", "shell"],
    ),
    (
        "top",
        &[
            "src/gateway/mod.rs",
            "src/gateway/builder.rs",
            "src/gateway/client.rs",
            "src/gateway/config/",
        ],
        &["settings", "telemetry", "policy", "shell", "edge", "origin"],
    ),
];

fn room_of(file: &str) -> Option<&'static str> {
    ROOMS
        .iter()
        .find(|(_, paths, _)| paths.iter().any(|p| file.starts_with(p)))
        .map(|(name, _, _)| *name)
}

/// Uses of one room by another that the room's door does not allow.
fn room_violations(graph: &[(String, Vec<String>)]) -> Vec<String> {
    let mut wrong = Vec::new();
    for (file, deps) in graph {
        let Some(room) = room_of(file) else { continue };
        let Some((_, _, may)) = ROOMS.iter().find(|(name, _, _)| *name == room) else {
            continue;
        };
        for dep in deps {
            match room_of(dep) {
                Some(other) if other != room && !may.contains(&other) => {
                    wrong.push(format!("{file} ({room}) uses {dep} ({other})"))
                }
                _ => {}
            }
        }
    }
    wrong
}

#[test]
fn the_gateways_rooms_are_used_one_way() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let graph = file_graph(root);
    let gateway: Vec<&String> = graph
        .iter()
        .map(|(f, _)| f)
        .filter(|f| f.starts_with("src/gateway/"))
        .collect();
    let homeless: Vec<&&String> = gateway.iter().filter(|f| room_of(f).is_none()).collect();
    assert!(homeless.is_empty(), "files of no room: {homeless:?}");
    let wrong = room_violations(&graph);
    assert!(
        wrong.is_empty(),
        "through a door the wrong way:\n{}",
        wrong.join("\n")
    );
    // The checker finds what it is meant to.
    let bad = vec![
        (
            "src/gateway/metrics.rs".to_owned(),
            vec!["src/gateway/edge/mod.rs".to_owned()],
        ),
        (
            "src/gateway/edge/mod.rs".to_owned(),
            vec!["src/gateway/upstream/http.rs".to_owned()],
        ),
        (
            "src/gateway/edge/pool.rs".to_owned(),
            vec!["src/gateway/policy/race.rs".to_owned()],
        ),
    ];
    assert_eq!(
        room_violations(&bad).len(),
        2,
        "{:?}",
        room_violations(&bad)
    );
}
