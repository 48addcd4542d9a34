//! The architecture guard. Every file under `src/` belongs to a wing (`control`, `table`,
//! `decide`, `data`, `ops`, and the top-level `app`, `config`, `demo`, `lib`, `main`); a wing
//! may name only the wings and crates [`WINGS`] allows it, `control/translate` stays pure
//! ([`PURE`]), and no import cycle runs between wings or between the modules of one wing. It reads the sources as text, with comments,
//! literals and test code taken out, because it must keep working while the library does not
//! compile: it uses std only, never builds or runs the crate, and writes nothing outside its
//! own temporary directory.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// What one wing may name besides its own modules and std, core and alloc.
struct Wing {
    name: &'static str,
    /// Other wings of this crate; `lib` stands for items defined in `lib.rs`. `"*"`: any.
    wings: &'static [&'static str],
    /// External crates as code spells them (`k8s_openapi`, not `k8s-openapi`). `"*"`: any.
    crates: &'static [&'static str],
}

const ANY: &[&str] = &["*"];

/// The allowlist: anything a wing names that is not here is a violation. Names of wings or
/// crates that do not exist (yet) are harmless.
const WINGS: &[Wing] = &[
    Wing {
        name: "table",
        wings: &[],
        crates: &[
            "arc_swap",
            "ahash",
            "serde",
            "serde_json",
            "http",
            "thiserror",
            // Gateway RegularExpression matches (table/pattern.rs).
            "regex",
            // htpasswd's {SHA}/{SSHA} hashes (table/auth.rs).
            "base64",
        ],
    },
    Wing {
        name: "decide",
        wings: &["table"],
        // table's list, plus request parsing.
        crates: &[
            "arc_swap",
            "ahash",
            "serde",
            "serde_json",
            "http",
            "bytes",
            "httparse",
            "thiserror",
            // Basic authentication: the Authorization value and the hashes htpasswd writes
            // (decide/auth.rs); pure functions, no I/O.
            "base64",
            "sha1",
            "md5",
            "bcrypt",
        ],
    },
    Wing {
        name: "control",
        // ops for the metrics only.
        wings: &["table", "ops"],
        crates: &[
            "k8s_openapi",
            "kube",
            "tokio",
            "futures",
            "serde",
            "serde_json",
            "serde_yaml_ng",
            // Names the fields a manifest's object has that its kind does not (spec.prots).
            "serde_ignored",
            "tracing",
            "thiserror",
            "ahash",
            "arc_swap",
            "http",
            "humantime",
            // The PEM syntax of an Ingress's TLS Secret (types and parsing only, no TLS).
            "rustls_pki_types",
        ],
    },
    Wing {
        name: "data",
        wings: &["decide", "table", "ops"],
        crates: &[
            "pingora",
            // Which of Pingora's per-thread runtimes a TCP connection goes to.
            "pingora_runtime",
            // Pingora's timer wheel: the write timeout of the fast path's own HTTP/2 server's
            // streams, as Pingora's session times its writes.
            "pingora_timeout",
            "tokio",
            "bytes",
            "http",
            "httparse",
            "rustls",
            // The fast path's TLS connections to `https` backends (rustls over tokio, the
            // crate Pingora's rustls connector uses).
            "tokio_rustls",
            "x509_parser",
            // The TLS port's self-signed default certificate when no --ssl-cert is given.
            "rcgen",
            "async_trait",
            "tracing",
            "thiserror",
            "prometheus",
            "arc_swap",
            "futures",
            "ahash",
            "log",
            "h2",
        ],
    },
    Wing {
        name: "ops",
        // decide for rendering explanations and error pages.
        wings: &["table", "decide"],
        crates: &[
            "prometheus",
            "pingora",
            "tokio",
            "async_trait",
            "serde",
            "serde_json",
            "tracing",
            "http",
            "bytes",
            "thiserror",
            "tikv_jemalloc_ctl",
            "ahash",
            "arc_swap",
        ],
    },
    Wing {
        name: "config",
        // It builds every wing's option structs; only app (and main) read it.
        // demo: `--demo` names its manifest.
        wings: &["control", "table", "decide", "data", "ops", "demo"],
        crates: &["clap", "thiserror", "http", "serde"],
    },
    Wing {
        name: "demo",
        wings: &[],
        crates: &[
            "tokio",
            "pingora",
            "async_trait",
            "tracing",
            "bytes",
            "http",
        ],
    },
    Wing {
        name: "app",
        wings: ANY,
        crates: ANY,
    },
    Wing {
        name: "main",
        wings: &["app", "config", "lib"],
        crates: ANY,
    },
    Wing {
        name: "lib",
        // Module declarations only.
        wings: &[],
        crates: &[],
    },
];

/// A subtree held to more than its wing allows.
struct Pure {
    /// Under `src/`: the directory, or the file without `.rs`.
    under: &'static str,
    crates: &'static [&'static str],
    /// Token sequences it must not contain.
    tokens: &'static [&'static str],
}

/// The translator is a function of its inputs: no runtime, no logging, no clock.
const PURE: &[Pure] = &[Pure {
    under: "control/translate",
    crates: &[
        "kube",
        "tokio",
        "tracing",
        "futures",
        "prometheus",
        "pingora",
    ],
    tokens: &["Instant::now", "SystemTime::now"],
}];

const ALWAYS: &[&str] = &["std", "core", "alloc"];

fn root() -> &'static Path {
    Path::new(option_env!("CARGO_MANIFEST_DIR").unwrap_or("."))
}

#[test]
fn the_tree_keeps_to_its_wings() {
    let report = check(root()).expect("reading src/");
    assert!(report.is_clean(), "{report}");
}

#[test]
fn every_module_has_a_doc_paragraph() {
    let mut files = Vec::new();
    rust_files(&root().join("src"), &mut files).expect("reading src/");
    let missing: Vec<_> = files
        .iter()
        .filter(|f| fs::read_to_string(f).is_ok_and(|text| !text.trim_start().starts_with("//!")))
        .map(|f| f.display().to_string())
        .collect();
    assert!(
        missing.is_empty(),
        "modules without a //! paragraph: {missing:?}"
    );
}

/// `cargo test --test architecture -- --ignored --nocapture` shows what the rules see.
#[test]
#[ignore = "prints the dependency graph, for tuning WINGS"]
fn print_the_dependency_graph() {
    let report = check(root()).expect("reading src/");
    for (edges, what) in [(&report.wing_edges, "wing"), (&report.edges, "module")] {
        println!("{what} edges:");
        for ((from, to), evidence) in edges {
            println!(
                "  {from} -> {to}: {} (first {})",
                evidence.len(),
                evidence[0]
            );
        }
    }
    println!("{report}");
}

// ---------------------------------------------------------------------------------------------
// The checker.

#[derive(Debug)]
struct Violation {
    /// Relative to the crate root: `src/decide/attempt.rs`.
    file: String,
    line: usize,
    /// As written in the source (`tokio::spawn`, `super::pool::Pool`, `Instant::now`).
    path: String,
    rule: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}: {} {}",
            self.file, self.line, self.path, self.rule
        )
    }
}

#[derive(Debug)]
struct Cycle {
    kind: &'static str,
    /// First node repeated at the end.
    route: Vec<String>,
    /// One `file:line path` per step of the route.
    evidence: Vec<String>,
}

impl Cycle {
    fn route(&self) -> String {
        self.route.join(" -> ")
    }
}

impl fmt::Display for Cycle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{} cycle: {}", self.kind, self.route())?;
        for (step, evidence) in self.route.windows(2).zip(&self.evidence) {
            writeln!(f, "    {} -> {}: {evidence}", step[0], step[1])?;
        }
        Ok(())
    }
}

/// `file:line path` of every reference behind an edge, in file order.
type Edges = BTreeMap<(String, String), Vec<String>>;

#[derive(Debug, Default)]
struct Report {
    violations: Vec<Violation>,
    cycles: Vec<Cycle>,
    /// Between module files, test code left out.
    edges: Edges,
    /// Between different wings.
    wing_edges: Edges,
}

impl Report {
    fn is_clean(&self) -> bool {
        self.violations.is_empty() && self.cycles.is_empty()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} violations and {} cycles (the rules are WINGS and PURE at the top of \
             tests/architecture.rs):",
            self.violations.len(),
            self.cycles.len()
        )?;
        for v in &self.violations {
            writeln!(f, "{v}")?;
        }
        for c in &self.cycles {
            write!(f, "{c}")?;
        }
        Ok(())
    }
}

/// Checks the crate at `root` (its `src/` and `Cargo.toml`) against [`WINGS`] and [`PURE`].
fn check(root: &Path) -> io::Result<Report> {
    let src = root.join("src");
    let mut paths = Vec::new();
    rust_files(&src, &mut paths)?;
    paths.sort();
    let mut files = Vec::new();
    for path in &paths {
        let text = match fs::read_to_string(path) {
            Ok(text) => text,
            // The tree may be moving under us; a file gone is not a finding.
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        let rel: Vec<String> = path
            .strip_prefix(&src)
            .unwrap_or(path)
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        let rel = rel.join("/");
        let module = module_of(&rel);
        files.push((rel, module, text));
    }
    let manifest = fs::read_to_string(root.join("Cargo.toml")).unwrap_or_default();
    let (lib_name, deps) = parse_manifest(&manifest);
    let ctx = Ctx::new(lib_name, deps, files.iter().map(|f| f.1.clone()).collect());
    let scans: Vec<Scan> = files.iter().map(|(_, m, t)| scan(t, m, &ctx)).collect();
    let test_modules: Vec<&Vec<String>> = scans.iter().flat_map(|s| &s.test_modules).collect();

    let mut report = Report::default();
    let mut seen = BTreeSet::new();
    let mut push = |report: &mut Report, v: Violation| {
        if seen.insert((v.file.clone(), v.line, v.path.clone())) {
            report.violations.push(v);
        }
    };
    for ((rel, module, _), scan) in files.iter().zip(&scans) {
        let test_code = scan.test_only
            || module.iter().any(|s| s == "tests")
            || test_modules.iter().any(|t| module.starts_with(t));
        if test_code {
            continue;
        }
        let file = format!("src/{rel}");
        let from_wing = wing_of(module);
        let wing = WINGS.iter().find(|w| w.name == from_wing);
        if wing.is_none() {
            push(
                &mut report,
                Violation {
                    file: file.clone(),
                    line: 1,
                    path: module.join("::"),
                    rule: format!("is in no wing: WINGS has no `{from_wing}`"),
                },
            );
        }
        let pure = PURE.iter().find(|p| {
            rel.starts_with(&format!("{}/", p.under)) || *rel == format!("{}.rs", p.under)
        });
        for r in &scan.refs {
            if let Target::Internal(path) = &r.target {
                let to = node_of(path, &ctx);
                if to != *module {
                    let evidence = format!("{file}:{} {}", r.line, r.written);
                    let to_wing = wing_of(&to);
                    if to_wing != from_wing {
                        report
                            .wing_edges
                            .entry((from_wing.to_string(), to_wing.to_string()))
                            .or_default()
                            .push(evidence.clone());
                    }
                    report
                        .edges
                        .entry((module.join("::"), to.join("::")))
                        .or_default()
                        .push(evidence);
                }
            }
            if let Some(rule) = wing.and_then(|w| broken(w, pure, &r.target, &ctx)) {
                push(
                    &mut report,
                    Violation {
                        file: file.clone(),
                        line: r.line,
                        path: r.written.clone(),
                        rule,
                    },
                );
            }
        }
        if let Some(p) = pure {
            for banned in p.tokens {
                let pattern: Vec<String> = tokenize(banned).into_iter().map(|t| t.text).collect();
                for window in scan.code.windows(pattern.len()) {
                    if window.iter().map(|t| &t.text).eq(&pattern) {
                        let rule = format!("PURE {}.tokens forbids {}", p.under, list(p.tokens));
                        push(
                            &mut report,
                            Violation {
                                file: file.clone(),
                                line: window[0].line,
                                path: banned.to_string(),
                                rule,
                            },
                        );
                    }
                }
            }
        }
    }
    report
        .violations
        .sort_by(|a, b| (&a.file, a.line, &a.path).cmp(&(&b.file, b.line, &b.path)));

    let graph = |edges: &Edges| {
        let mut graph = Graph::new();
        for (from, to) in edges.keys() {
            graph.entry(from.clone()).or_default().insert(to.clone());
        }
        graph
    };
    let wing_graph = graph(&report.wing_edges);
    let module_graph = graph(&report.edges);
    let found: Vec<(&'static str, Vec<String>, &Edges)> = cycles(&wing_graph, |_, _| true)
        .into_iter()
        .map(|c| ("wing", c, &report.wing_edges))
        .chain(
            cycles(&module_graph, |_, _| true)
                .into_iter()
                .map(|c| ("module", c, &report.edges)),
        )
        .collect();
    let cycles: Vec<Cycle> = found
        .into_iter()
        .map(|(kind, route, edges)| Cycle {
            kind,
            evidence: route
                .windows(2)
                .map(|s| edges[&(s[0].clone(), s[1].clone())][0].clone())
                .collect(),
            route,
        })
        .collect();
    report.cycles = cycles;
    Ok(report)
}

/// The rule `target` breaks when named from a file of `wing` (and of `pure`, if any).
fn broken(wing: &Wing, pure: Option<&Pure>, target: &Target, ctx: &Ctx) -> Option<String> {
    match target {
        Target::External(c) if ALWAYS.contains(&c.as_str()) => None,
        Target::External(c) => match pure {
            Some(p) if p.crates.contains(&c.as_str()) => Some(format!(
                "names crate {c}: PURE {}.crates forbids {}",
                p.under,
                list(p.crates)
            )),
            _ if allows(wing.crates, c) => None,
            _ => Some(format!(
                "names crate {c}: WINGS {}.crates allows {}",
                wing.name,
                list(wing.crates)
            )),
        },
        Target::Internal(path) => {
            let node = node_of(path, ctx);
            let to = wing_of(&node);
            (to != wing.name && !allows(wing.wings, to)).then(|| {
                format!(
                    "names wing {to}: WINGS {}.wings allows {}",
                    wing.name,
                    list(wing.wings)
                )
            })
        }
    }
}

fn allows(allowed: &[&str], name: &str) -> bool {
    allowed.iter().any(|a| *a == "*" || *a == name)
}

fn list(items: &[&str]) -> String {
    format!("[{}]", items.join(", "))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) -> io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            rust_files(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    Ok(())
}

/// `data/fast/mod.rs` -> `crate::data::fast`. `main.rs` is the root of the binary crate, kept
/// apart as `main`.
fn module_of(rel: &str) -> Vec<String> {
    let stem = rel.strip_suffix(".rs").unwrap_or(rel);
    match stem {
        "main" => return vec!["main".into()],
        "lib" => return vec!["crate".into()],
        _ => {}
    }
    let mut path: Vec<String> = std::iter::once("crate")
        .chain(stem.split('/'))
        .map(str::to_string)
        .collect();
    if path.last().is_some_and(|p| p == "mod") {
        path.pop();
    }
    path
}

/// The wing of a module path; the crate root itself is `lib`.
fn wing_of(module: &[String]) -> &str {
    match module {
        [root, ..] if root == "main" => "main",
        [_, wing, ..] => wing,
        _ => "lib",
    }
}

/// The module a path lands in: its longest prefix that is a file of the tree or a wing of
/// [`WINGS`], else the crate root (an item of `lib.rs`).
fn node_of(path: &[String], ctx: &Ctx) -> Vec<String> {
    (1..=path.len())
        .rev()
        .map(|k| &path[..k])
        .find(|p| {
            ctx.modules.contains(*p)
                || (p.len() == 2 && p[0] == "crate" && WINGS.iter().any(|w| w.name == p[1]))
        })
        .unwrap_or(&path[..1])
        .to_vec()
}

type Graph = BTreeMap<String, BTreeSet<String>>;

/// One shortest cycle for each strongly connected part of `graph` that has an edge `crosses`
/// accepts, through such an edge, rotated to start at its smallest node.
fn cycles(graph: &Graph, crosses: impl Fn(&str, &str) -> bool) -> Vec<Vec<String>> {
    let reach: BTreeMap<&str, BTreeSet<&str>> = graph
        .keys()
        .map(|n| (n.as_str(), reachable(graph, n)))
        .collect();
    let mut parts: BTreeSet<BTreeSet<&str>> = BTreeSet::new();
    for (n, r) in &reach {
        if r.contains(n) {
            let part = r
                .iter()
                .copied()
                .filter(|m| reach.get(m).is_some_and(|back| back.contains(n)))
                .collect();
            parts.insert(part);
        }
    }
    let mut found = Vec::new();
    for part in &parts {
        let shortest = part
            .iter()
            .flat_map(|u| graph[*u].iter().map(move |v| (*u, v.as_str())))
            .filter(|(u, v)| part.contains(v) && crosses(u, v))
            .filter_map(|(u, v)| {
                let back = path_within(graph, part, v, u)?;
                Some(std::iter::once(u).chain(back).collect::<Vec<_>>())
            })
            .min_by_key(Vec::len);
        if let Some(mut cycle) = shortest {
            cycle.pop();
            let start = cycle
                .iter()
                .enumerate()
                .min_by_key(|(_, n)| **n)
                .map_or(0, |(k, _)| k);
            cycle.rotate_left(start);
            cycle.push(cycle[0]);
            found.push(cycle.into_iter().map(str::to_string).collect());
        }
    }
    found
}

/// Nodes reachable from `from` in one step or more.
fn reachable<'a>(graph: &'a Graph, from: &str) -> BTreeSet<&'a str> {
    let mut seen = BTreeSet::new();
    let mut queue: VecDeque<&str> = graph
        .get(from)
        .into_iter()
        .flatten()
        .map(String::as_str)
        .collect();
    while let Some(n) = queue.pop_front() {
        if seen.insert(n) {
            queue.extend(graph.get(n).into_iter().flatten().map(String::as_str));
        }
    }
    seen
}

/// A shortest path `from ..= to` that stays inside `part`.
fn path_within<'a>(
    graph: &'a Graph,
    part: &BTreeSet<&'a str>,
    from: &'a str,
    to: &'a str,
) -> Option<Vec<&'a str>> {
    let mut parent: BTreeMap<&str, &str> = BTreeMap::new();
    let mut queue = VecDeque::from([from]);
    let mut visited = BTreeSet::from([from]);
    while let Some(n) = queue.pop_front() {
        if n == to {
            let mut path = vec![to];
            while let Some(p) = parent.get(path[path.len() - 1]) {
                path.push(p);
            }
            path.reverse();
            return Some(path);
        }
        for next in graph.get(n).into_iter().flatten() {
            if part.contains(next.as_str()) && visited.insert(next.as_str()) {
                parent.insert(next.as_str(), n);
                queue.push_back(next.as_str());
            }
        }
    }
    None
}

/// (library crate name, dependency names as code spells them), from `Cargo.toml`.
fn parse_manifest(text: &str) -> (Option<String>, BTreeSet<String>) {
    let norm = |s: &str| s.trim().trim_matches('"').replace('-', "_");
    let (mut section, mut depth) = (String::new(), 0i64);
    let (mut package, mut lib, mut deps) = (None, None, BTreeSet::new());
    for raw in text.lines() {
        // A `#` after an even number of quotes starts a comment.
        let line = raw
            .char_indices()
            .find(|(k, c)| *c == '#' && raw[..*k].matches('"').count() % 2 == 0)
            .map_or(raw, |(k, _)| &raw[..k])
            .trim();
        let continued = depth != 0;
        let count = |set: [char; 2]| line.matches(set).count() as i64;
        depth += count(['{', '[']) - count(['}', ']']);
        if continued {
            continue;
        }
        if line.starts_with('[') {
            section = line.trim_matches(['[', ']']).trim().to_string();
            if let Some((_, name)) = section.rsplit_once("dependencies.") {
                deps.insert(norm(name));
            }
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let key = key.trim().trim_matches('"');
        if section.ends_with("dependencies") {
            deps.insert(norm(key.split('.').next().unwrap_or(key)));
        } else if key == "name" && section == "package" {
            package = Some(norm(value));
        } else if key == "name" && section == "lib" {
            lib = Some(norm(value));
        }
    }
    (lib.or(package), deps)
}

// ---------------------------------------------------------------------------------------------
// Reading one file.

/// What the paths of a file are resolved against.
struct Ctx {
    /// Names that start a path into another crate.
    crates: BTreeSet<String>,
    /// One per file of the tree.
    modules: BTreeSet<Vec<String>>,
    /// How `main.rs` names the library.
    lib_name: Option<String>,
}

impl Ctx {
    fn new(
        lib_name: Option<String>,
        deps: BTreeSet<String>,
        modules: BTreeSet<Vec<String>>,
    ) -> Ctx {
        let listed = WINGS
            .iter()
            .flat_map(|w| w.crates)
            .chain(PURE.iter().flat_map(|p| p.crates))
            .chain(ALWAYS)
            .filter(|c| **c != "*")
            .map(|c| c.to_string());
        Ctx {
            crates: deps.into_iter().chain(listed).collect(),
            modules,
            lib_name,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Target {
    /// An absolute path from `crate` (or `main`, the binary's root).
    Internal(Vec<String>),
    External(String),
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Internal(path) => write!(f, "{}", path.join("::")),
            Target::External(c) => write!(f, "::{c}"),
        }
    }
}

#[derive(Debug)]
struct Ref {
    line: usize,
    written: String,
    target: Target,
}

#[derive(Debug, Clone)]
struct Tok {
    text: String,
    line: usize,
}

struct Scan {
    /// Paths named outside test code, in `use` declarations first, then in code.
    refs: Vec<Ref>,
    /// Tokens outside test code, for [`Pure::tokens`].
    code: Vec<Tok>,
    /// Modules declared `#[cfg(test)] mod name;`: their files are test code.
    test_modules: Vec<Vec<String>>,
    /// `#![cfg(test)]`: the whole file is test code.
    test_only: bool,
}

/// The paths `text`, the file of `module`, names outside test code.
fn scan(text: &str, module: &[String], ctx: &Ctx) -> Scan {
    let toks = tokenize(&strip(text));
    let t = |k: usize| text_at(&toks, k);

    // Attributes and inline modules first: test blocks are skipped below, and `self` and
    // `super` inside `mod inner { .. }` start from `inner`.
    let mut test_mask = vec![false; toks.len()];
    let mut mods: Vec<(usize, usize, String)> = Vec::new();
    let mut test_modules = Vec::new();
    let (mut test_only, mut cfg_test) = (false, false);
    let mut i = 0;
    while i < toks.len() {
        match t(i) {
            "#" => {
                let inner = t(i + 1) == "!";
                let open = i + 1 + usize::from(inner);
                if t(open) == "[" {
                    let close = matching(&toks, open);
                    let is_test = toks
                        .get(open + 1..close)
                        .unwrap_or(&[])
                        .iter()
                        .map(|k| k.text.as_str())
                        .eq(["cfg", "(", "test", ")"]);
                    test_only |= inner && is_test;
                    cfg_test |= !inner && is_test;
                    i = close + 1;
                    continue;
                }
            }
            "pub" => {
                i += 1;
                if t(i) == "(" {
                    i = matching(&toks, i) + 1;
                }
                continue;
            }
            "mod" if is_ident(t(i + 1)) => {
                let name = t(i + 1).to_string();
                if t(i + 2) == "{" {
                    let close = matching(&toks, i + 2);
                    if cfg_test {
                        test_mask[i..=close].fill(true);
                        i = close + 1;
                        cfg_test = false;
                        continue;
                    }
                    mods.push((i + 2, close, name));
                } else if cfg_test && t(i + 2) == ";" {
                    let mut declared = enclosing(module, &mods, i);
                    declared.push(name);
                    test_modules.push(declared);
                }
            }
            _ => {}
        }
        cfg_test = false;
        i += 1;
    }

    let mut refs = Vec::new();
    let mut in_use = vec![false; toks.len()];
    // Names `use` brought into scope: a path starting with one is relative to an import
    // already counted, not a crate.
    let mut bound = BTreeSet::new();
    let mut i = 0;
    while i < toks.len() {
        // `use<'a>` is precise capturing in `impl Trait + use<'a>`, not an import.
        if test_mask[i] || t(i) != "use" || t(i + 1) == "<" {
            i += 1;
            continue;
        }
        let mut leaves = Vec::new();
        let mut end = use_tree(&toks, i + 1, &[], &mut leaves);
        while end < toks.len() && t(end) != ";" {
            end += 1;
        }
        let end = end.min(toks.len() - 1);
        in_use[i..=end].fill(true);
        let here = enclosing(module, &mods, i);
        for leaf in leaves {
            bound.extend(leaf.bound);
            if let Some(target) = resolve(&leaf.segs, &here, ctx) {
                refs.push(Ref {
                    line: leaf.line,
                    written: leaf.segs.join("::"),
                    target,
                });
            }
        }
        i = end + 1;
    }

    let mut i = 0;
    while i < toks.len() {
        if test_mask[i] || in_use[i] {
            i += 1;
            continue;
        }
        let prev = if i == 0 { "" } else { t(i - 1) };
        // `::tokio::spawn`, but not `Vec::<u8>::new` or `<T as Tr>::f`.
        let leading = t(i) == "::"
            && is_ident(t(i + 1))
            && !is_ident(prev)
            && !matches!(prev, ">" | ")" | "]" | "::");
        // Two segments at least: `x.collect::<V>()` is no path.
        let plain =
            is_ident(t(i)) && t(i + 1) == "::" && is_ident(t(i + 2)) && !matches!(prev, "::" | ".");
        if !leading && !plain {
            i += 1;
            continue;
        }
        let line = toks[i].line;
        let mut segs = Vec::new();
        let mut j = i;
        if leading {
            segs.push(String::new());
            j += 1;
        }
        loop {
            segs.push(t(j).to_string());
            j += 1;
            if t(j) == "::" && is_ident(t(j + 1)) {
                j += 1;
            } else {
                break;
            }
        }
        let through_import = !matches!(segs[0].as_str(), "" | "crate" | "self" | "super")
            && bound.contains(&segs[0]);
        if !through_import && let Some(target) = resolve(&segs, &enclosing(module, &mods, i), ctx) {
            refs.push(Ref {
                line,
                written: segs.join("::"),
                target,
            });
        }
        i = j;
    }

    let code = toks
        .iter()
        .zip(&test_mask)
        .filter(|(_, test)| !**test)
        .map(|(tok, _)| tok.clone())
        .collect();
    Scan {
        refs,
        code,
        test_modules,
        test_only,
    }
}

/// The module of token `at`: `module` plus the inline modules around it.
fn enclosing(module: &[String], mods: &[(usize, usize, String)], at: usize) -> Vec<String> {
    let mut path = module.to_vec();
    path.extend(
        mods.iter()
            .filter(|(open, close, _)| *open < at && at < *close)
            .map(|(_, _, name)| name.clone()),
    );
    path
}

/// One path of a `use` tree.
struct Leaf {
    segs: Vec<String>,
    line: usize,
    /// The name it brings into scope.
    bound: Option<String>,
}

/// Parses the use tree at `i` under `prefix`; returns the index after it.
fn use_tree(toks: &[Tok], mut i: usize, prefix: &[String], out: &mut Vec<Leaf>) -> usize {
    let t = |k: usize| text_at(toks, k);
    let line = toks.get(i).map_or(0, |tok| tok.line);
    let mut segs = prefix.to_vec();
    if t(i) == "::" {
        segs.push(String::new());
        i += 1;
    }
    loop {
        match t(i) {
            "{" => {
                i += 1;
                while !matches!(t(i), "}" | ";" | "") {
                    let next = use_tree(toks, i, &segs, out);
                    i = if next == i { i + 1 } else { next };
                    if t(i) == "," {
                        i += 1;
                    }
                }
                return if t(i) == "}" { i + 1 } else { i };
            }
            "*" => {
                out.push(Leaf {
                    segs,
                    line,
                    bound: None,
                });
                return i + 1;
            }
            name if is_ident(name) => {
                // `{self}` in a group is the group's own path.
                let group_self = name == "self" && !segs.is_empty();
                if !group_self {
                    segs.push(name.to_string());
                }
                i += 1;
                if t(i) == "::" && !group_self {
                    i += 1;
                    continue;
                }
                let mut bound = segs.last().cloned();
                if t(i) == "as" {
                    bound = Some(t(i + 1).to_string()).filter(|b| b != "_");
                    i += 2;
                }
                out.push(Leaf { segs, line, bound });
                return i;
            }
            _ => return i,
        }
    }
}

/// Where `segs`, written in `module`, points; `None` for local items and unknown names.
fn resolve(segs: &[String], module: &[String], ctx: &Ctx) -> Option<Target> {
    let first = segs.first()?.as_str();
    let internal = |base: &[String], rest: &[String]| {
        Some(Target::Internal(base.iter().chain(rest).cloned().collect()))
    };
    match first {
        "" => segs.get(1).map(|c| Target::External(c.clone())),
        "crate" => internal(&module[..1], &segs[1..]),
        "self" => internal(module, &segs[1..]),
        "super" => {
            let ups = segs.iter().take_while(|s| *s == "super").count();
            if ups >= module.len() {
                return None;
            }
            internal(&module[..module.len() - ups], &segs[ups..])
        }
        _ if module[0] == "main" && ctx.lib_name.as_deref() == Some(first) => {
            internal(&["crate".to_string()], &segs[1..])
        }
        _ if ctx
            .modules
            .contains(&module.iter().chain([&segs[0]]).cloned().collect::<Vec<_>>()) =>
        {
            internal(module, segs)
        }
        _ if ctx.crates.contains(first) => Some(Target::External(first.to_string())),
        _ => None,
    }
}

fn text_at(toks: &[Tok], k: usize) -> &str {
    toks.get(k).map_or("", |t| t.text.as_str())
}

fn is_ident(s: &str) -> bool {
    s.chars()
        .next()
        .is_some_and(|c| c.is_alphabetic() || c == '_')
}

/// The index of the bracket closing the one at `open`.
fn matching(toks: &[Tok], open: usize) -> usize {
    let (o, c) = match text_at(toks, open) {
        "(" => ("(", ")"),
        "[" => ("[", "]"),
        _ => ("{", "}"),
    };
    let mut depth = 0i64;
    for (k, tok) in toks.iter().enumerate().skip(open) {
        if tok.text == o {
            depth += 1;
        } else if tok.text == c {
            depth -= 1;
            if depth == 0 {
                return k;
            }
        }
    }
    toks.len().saturating_sub(1)
}

/// Identifiers (`r#type` as `type`), `::`, and single punctuation characters, with lines.
fn tokenize(code: &str) -> Vec<Tok> {
    let b = code.as_bytes();
    let mut toks = Vec::new();
    let (mut i, mut line) = (0, 1);
    while i < b.len() {
        let c = b[i];
        if c == b'\n' {
            line += 1;
            i += 1;
        } else if c.is_ascii_whitespace() {
            i += 1;
        } else if is_ident_byte(c) {
            let mut start = i;
            let mut end = word_end(b, i);
            if &b[i..end] == b"r"
                && b.get(end) == Some(&b'#')
                && b.get(end + 1).is_some_and(|x| is_ident_byte(*x))
            {
                start = end + 1;
                end = word_end(b, start);
            }
            toks.push(Tok {
                text: code[start..end].to_string(),
                line,
            });
            i = end;
        } else if c == b':' && b.get(i + 1) == Some(&b':') {
            toks.push(Tok {
                text: "::".into(),
                line,
            });
            i += 2;
        } else {
            toks.push(Tok {
                text: char::from(c).to_string(),
                line,
            });
            i += 1;
        }
    }
    toks
}

/// `src` with comments and string, byte-string and char literals (raw ones too) blanked out.
/// Newlines and byte offsets stay, so lines still count.
fn strip(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = b.to_vec();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        let blank_to = if c == b'/' && next == Some(b'/') {
            Some(
                b[i..]
                    .iter()
                    .position(|x| *x == b'\n')
                    .map_or(b.len(), |p| i + p),
            )
        } else if c == b'/' && next == Some(b'*') {
            Some(block_comment_end(b, i))
        } else if c == b'"' {
            Some(quoted_end(b, i + 1))
        } else if c == b'\'' {
            char_literal_end(b, i)
        } else if is_ident_byte(c) {
            let j = word_end(b, i);
            let literal = match &b[i..j] {
                b"r" | b"br" | b"cr" => raw_string_end(b, j),
                b"b" | b"c" if b.get(j) == Some(&b'"') => Some(quoted_end(b, j + 1)),
                _ => None,
            };
            if literal.is_none() {
                i = j;
                continue;
            }
            literal
        } else {
            None
        };
        match blank_to {
            Some(end) => {
                for x in &mut out[i..end] {
                    if *x != b'\n' {
                        *x = b' ';
                    }
                }
                i = end;
            }
            None => i += 1,
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Non-ASCII bytes count as identifier bytes: they are never Rust punctuation.
fn is_ident_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c >= 0x80
}

fn word_end(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && is_ident_byte(b[i]) {
        i += 1;
    }
    i
}

/// Block comments nest in Rust.
fn block_comment_end(b: &[u8], start: usize) -> usize {
    let (mut depth, mut i) = (0, start);
    while i < b.len() {
        if b[i..].starts_with(b"/*") {
            depth += 1;
            i += 2;
        } else if b[i..].starts_with(b"*/") {
            depth -= 1;
            i += 2;
            if depth == 0 {
                return i;
            }
        } else {
            i += 1;
        }
    }
    b.len()
}

/// The end of a `"`-quoted literal whose body starts at `i`.
fn quoted_end(b: &[u8], mut i: usize) -> usize {
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'"' => return i + 1,
            _ => i += 1,
        }
    }
    b.len()
}

/// The end of `#*"..."#*` at `i`, right after an `r` prefix; `None` when it is a raw
/// identifier or a plain `r`.
fn raw_string_end(b: &[u8], i: usize) -> Option<usize> {
    let hashes = b[i..].iter().take_while(|x| **x == b'#').count();
    if b.get(i + hashes) != Some(&b'"') {
        return None;
    }
    let close: Vec<u8> = std::iter::once(b'"')
        .chain(std::iter::repeat_n(b'#', hashes))
        .collect();
    let body = i + hashes + 1;
    Some(
        b[body..]
            .windows(close.len())
            .position(|w| w == close.as_slice())
            .map_or(b.len(), |p| body + p + close.len()),
    )
}

/// The end of the char literal at `i`; `None` for a lifetime or a label (`'a`, `'static`).
fn char_literal_end(b: &[u8], i: usize) -> Option<usize> {
    let first = *b.get(i + 1)?;
    if first == b'\\' {
        // Past the escaped character, which may itself be a quote.
        let close = b.get(i + 3..)?.iter().position(|x| *x == b'\'')?;
        return Some(i + 3 + close + 1);
    }
    let len = match first {
        0..0x80 => 1,
        0x80..0xE0 => 2,
        0xE0..0xF0 => 3,
        _ => 4,
    };
    (b.get(i + 1 + len) == Some(&b'\'')).then_some(i + 2 + len)
}

// ---------------------------------------------------------------------------------------------
// Self-tests: the checker above on a synthetic tree, and the parser case by case.

/// A crate tree under the system temporary directory, removed on drop.
struct TempTree(PathBuf);

impl TempTree {
    fn new(files: &[(&str, &str)]) -> TempTree {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let dir = std::env::temp_dir().join(format!(
            "switchyard-architecture-{}-{nanos}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let tree = TempTree(dir);
        for (path, text) in files {
            let path = tree.0.join(path);
            fs::create_dir_all(path.parent().expect("a parent")).expect("creating the tree");
            fs::write(&path, text).expect("writing the tree");
        }
        tree
    }
}

impl Drop for TempTree {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// The 1-based line of `text` that starts (after indentation) with `start`.
fn line_of(text: &str, start: &str) -> usize {
    text.lines()
        .position(|l| l.trim_start().starts_with(start))
        .map(|k| k + 1)
        .unwrap_or_else(|| panic!("no line starts with {start:?}"))
}

const FIXTURE_TRANSLATE: &str = r####"//! Pure: `tokio::spawn` and `use crate::data::X;` in a doc comment are no dependency.
use std::collections::BTreeMap;

use crate::table::Table;

#[cfg(test)]
mod tests;

/* tokio::spawn(async {}); /* nested: pingora::x */ kube::Api and Instant::now */
pub fn translate(_: BTreeMap<u8, u8>) -> Table {
    let quote = '"';
    let text = "use pingora::proxy; tokio::spawn(async {}) Instant::now()";
    let raw = r#"a "quoted" tokio::spawn and crate::data::X"#;
    tokio::spawn(async {});
    let started = std::time::Instant::now();
    Table
}
"####;

const FIXTURE_TABLE: &str = r#"//! The table; `crate::data::proxy` in a doc comment is no dependency.
pub mod sticky;

use crate::decide::Attempt;

pub struct Table;
pub struct Entry;

pub fn describe() -> &'static str {
    "use pingora::http::ResponseHeader; crate::data::X"
}

#[cfg(test)]
#[allow(dead_code)]
mod tests {
    use crate::data::proxy::Proxy;
    use pingora::http::ResponseHeader;
    fn f() { tokio::spawn(async {}); }
}
"#;

const FIXTURE_STICKY: &str = "//! Sticky sessions.
use std::{
    collections::HashMap,
    sync::{Arc, atomic::{AtomicU64, Ordering}},
};
use {
    arc_swap::ArcSwap,
    pingora::{
        http::ResponseHeader,
        upstreams::peer::HttpPeer,
    },
};
// use pingora::server::Server;
";

const FIXTURE_ATTEMPT: &str = "use crate::{table::Entry, data::proxy::X};\n";

const FIXTURE: &[(&str, &str)] = &[
    (
        "Cargo.toml",
        "[package]\nname = \"yard\" # the library too\n\n[dependencies]\n\
         kube = { version = \"1\", features = [\n  \"runtime\",\n] }\nclap = \"4\"\n",
    ),
    (
        "src/lib.rs",
        "//! Root.\npub mod app;\npub mod config;\npub mod control;\npub mod data;\n\
         pub mod decide;\npub mod demo;\npub mod ops;\npub mod table;\n",
    ),
    (
        "src/main.rs",
        "use yard::config::Config;\nfn main() { yard::app::run(Config::default()); }\n",
    ),
    (
        "src/app.rs",
        "use crate::{control::Control, data::proxy::Proxy};\nuse kube::Client;\n\
         pub fn run(_: crate::config::Config) { tokio::spawn(async {}); }\n",
    ),
    (
        "src/config.rs",
        "use clap::Parser;\nuse crate::data::proxy::Options;\n#[derive(Default)]\npub struct Config;\n",
    ),
    ("src/demo.rs", "use tokio::net::TcpListener;\n"),
    (
        "src/control/mod.rs",
        "pub mod translate;\nuse crate::table::Table;\nuse crate::ops::metrics::Metrics;\nuse kube::Api;\n",
    ),
    ("src/control/translate/mod.rs", FIXTURE_TRANSLATE),
    (
        "src/control/translate/tests.rs",
        "use kube::Api;\nuse crate::data::proxy::Proxy;\n\
         fn t() { tokio::spawn(async {}); let _ = std::time::Instant::now(); }\n",
    ),
    ("src/table/mod.rs", FIXTURE_TABLE),
    ("src/table/sticky.rs", FIXTURE_STICKY),
    (
        "src/table/matcher.rs",
        "use ahash::AHashMap;\nuse serde::Serialize;\nuse super::{Entry, sticky};\n",
    ),
    (
        "src/decide/mod.rs",
        "pub mod attempt;\nuse crate::table::Entry;\nuse bytes::Bytes;\n",
    ),
    ("src/decide/attempt.rs", FIXTURE_ATTEMPT),
    (
        "src/data/mod.rs",
        "pub mod pool;\npub mod proxy;\nuse crate::ops::metrics::Metrics;\n",
    ),
    (
        "src/data/proxy.rs",
        "use pingora::proxy::ProxyHttp;\nuse super::super::ops::metrics;\nuse super::pool::Pool;\n\
         pub fn serve() { tokio::spawn(async {}); }\n",
    ),
    // A cycle inside one wing: forbidden too.
    (
        "src/data/pool.rs",
        "//! A pool.\nuse crate::data::proxy::serve;\npub struct Pool;\n",
    ),
    ("src/ops/mod.rs", "pub mod metrics;\n"),
    ("src/ops/metrics.rs", "use prometheus::IntCounter;\n"),
    ("src/stray.rs", "//! Left behind by a move.\n"),
];

#[test]
fn the_checker_reports_exactly_the_injected_violations() {
    let tree = TempTree::new(FIXTURE);
    let report = check(&tree.0).expect("reading the synthetic tree");
    let found: Vec<(&str, usize, &str)> = report
        .violations
        .iter()
        .map(|v| (v.file.as_str(), v.line, v.path.as_str()))
        .collect();
    let translate = "src/control/translate/mod.rs";
    let expected = vec![
        (
            translate,
            line_of(FIXTURE_TRANSLATE, "tokio::spawn"),
            "tokio::spawn",
        ),
        (
            translate,
            line_of(FIXTURE_TRANSLATE, "let started"),
            "Instant::now",
        ),
        ("src/decide/attempt.rs", 1, "crate::data::proxy::X"),
        ("src/stray.rs", 1, "crate::stray"),
        (
            "src/table/mod.rs",
            line_of(FIXTURE_TABLE, "use crate::decide"),
            "crate::decide::Attempt",
        ),
        (
            "src/table/sticky.rs",
            line_of(FIXTURE_STICKY, "http::ResponseHeader"),
            "pingora::http::ResponseHeader",
        ),
        (
            "src/table/sticky.rs",
            line_of(FIXTURE_STICKY, "upstreams::"),
            "pingora::upstreams::peer::HttpPeer",
        ),
    ];
    assert_eq!(found, expected, "{report}");

    let rules: Vec<&str> = report.violations.iter().map(|v| v.rule.as_str()).collect();
    assert_eq!(
        rules[0],
        "names crate tokio: PURE control/translate.crates forbids \
         [kube, tokio, tracing, futures, prometheus, pingora]"
    );
    assert_eq!(
        rules[2],
        "names wing data: WINGS decide.wings allows [table]"
    );
    assert_eq!(
        rules[5],
        "names crate pingora: WINGS table.crates allows [arc_swap, ahash, serde, serde_json, http, thiserror, regex, base64]"
    );

    let routes: Vec<(&str, String)> = report.cycles.iter().map(|c| (c.kind, c.route())).collect();
    assert_eq!(
        routes,
        [
            ("wing", "decide -> table -> decide".to_string()),
            (
                "module",
                "crate::data::pool -> crate::data::proxy -> crate::data::pool".to_string()
            ),
            (
                "module",
                "crate::decide -> crate::table -> crate::decide".to_string()
            ),
        ],
        "{report}"
    );
    assert_eq!(
        report.cycles[0].evidence,
        [
            "src/decide/attempt.rs:1 crate::table::Entry",
            "src/table/mod.rs:4 crate::decide::Attempt"
        ]
    );
}

fn test_ctx() -> Ctx {
    let modules = [
        "crate",
        "main",
        "crate::table",
        "crate::table::sticky",
        "crate::data",
        "crate::data::proxy",
        "crate::data::fast",
        "crate::data::fast::request",
        "crate::data::fast::pool",
        "crate::ops",
        "crate::ops::metrics",
    ];
    Ctx::new(
        Some("yard".into()),
        BTreeSet::new(),
        modules.iter().map(|m| path(m)).collect(),
    )
}

fn path(module: &str) -> Vec<String> {
    module.split("::").map(str::to_string).collect()
}

/// `line target` for each path `text`, the file of `module`, names.
fn refs_in(module: &str, text: &str) -> Vec<String> {
    scan(text, &path(module), &test_ctx())
        .refs
        .iter()
        .map(|r| format!("{} {}", r.line, r.target))
        .collect()
}

#[test]
fn parses_a_grouped_use() {
    assert_eq!(
        refs_in("crate::data", "use crate::{table::Entry, decide::Attempt};"),
        ["1 crate::table::Entry", "1 crate::decide::Attempt"]
    );
}

#[test]
fn parses_nested_groups_with_self() {
    assert_eq!(
        refs_in(
            "crate::data",
            "use crate::{table::{Entry, sticky::{self, Sticky}}, decide::Attempt};"
        ),
        [
            "1 crate::table::Entry",
            "1 crate::table::sticky",
            "1 crate::table::sticky::Sticky",
            "1 crate::decide::Attempt"
        ]
    );
}

#[test]
fn resolves_self_from_the_files_module() {
    assert_eq!(
        refs_in(
            "crate::data::fast",
            "use self::request::Request;\nuse self::pool::{self as p};\n"
        ),
        [
            "1 crate::data::fast::request::Request",
            "2 crate::data::fast::pool"
        ]
    );
}

#[test]
fn resolves_super_in_use_and_in_code() {
    let text = "use super::pool::Pool;\nuse super::super::proxy::Proxy;\nuse super::*;\n\
                fn f() { super::super::super::table::Entry::new(); }\n";
    assert_eq!(
        refs_in("crate::data::fast::request", text),
        [
            "1 crate::data::fast::pool::Pool",
            "2 crate::data::proxy::Proxy",
            "3 crate::data::fast",
            "4 crate::table::Entry::new"
        ]
    );
    // Above the crate root there is nothing to name.
    assert!(refs_in("crate", "use super::x;").is_empty());
}

#[test]
fn parses_renames_and_skips_paths_through_them() {
    let text = "use crate::table::Entry as E;\nuse tokio as rt;\nuse crate::ops::metrics::{self as m};\n\
                fn f() { rt::spawn(async {}); E::new(); m::Metrics::new(); }\n";
    assert_eq!(
        refs_in("crate::data", text),
        [
            "1 crate::table::Entry",
            "2 ::tokio",
            "3 crate::ops::metrics"
        ]
    );
}

#[test]
fn parses_multi_line_and_visibility_qualified_uses() {
    let text = "pub(crate) use crate::{
    table::Entry,
    data::{
        proxy::Proxy,
        fast::pool::Pool,
    },
};
pub use
    tokio::sync::mpsc;
pub(in crate::data) use ::pingora::http;
";
    assert_eq!(
        refs_in("crate::data::fast", text),
        [
            "2 crate::table::Entry",
            "4 crate::data::proxy::Proxy",
            "5 crate::data::fast::pool::Pool",
            "9 ::tokio",
            "10 ::pingora",
            "10 crate::data",
        ]
    );
}

#[test]
fn finds_paths_written_inline() {
    let text = "#[tokio::main]
async fn f(x: Vec<u8>) {
    let m = crate::ops::metrics::Metrics::new();
    tokio::spawn(async move { ::pingora::run(); });
    let _ = x.iter().collect::<Vec<_>>();
    let _ = Vec::<u8>::new();
    let _ = Frontend::Http;
}
macro_rules! entry { () => { $crate::table::Entry::default() }; }
";
    assert_eq!(
        refs_in("crate::data", text),
        [
            "1 ::tokio",
            "3 crate::ops::metrics::Metrics::new",
            "4 ::tokio",
            "4 ::pingora",
            "9 crate::table::Entry::default",
        ]
    );
}

#[test]
fn ignores_comments_and_literals_of_every_kind() {
    let text = r####"//! kube::Api in an inner doc comment
/// crate::data in a doc comment
// tokio::spawn in a line comment
/* pingora::x /* nested */ tokio::y */
fn f<'a>(s: &'a str) -> impl Sized + use<'a> {
    let r = r#"use crate::data::proxy; "quoted" tokio::spawn"#;
    let b = br##"a "# tokio::b"##;
    let q = '"';
    let e = '\'';
    let c = b'"';
    let s = "escaped \" tokio::s";
    let l: &'static str = "multi
line tokio::m";
    'outer: loop { break 'outer; }
    let r#type = 1;
    prometheus::gather();
}
"####;
    assert_eq!(refs_in("crate::data", text), ["16 ::prometheus"]);
}

#[test]
fn skips_test_modules() {
    let text = "#[cfg(test)]\n#[allow(dead_code)]\nmod tests {\n    use crate::data::X;\n    \
                fn f() { tokio::spawn(); }\n}\n#[cfg(test)]\nmod slow;\nuse crate::table::Entry;\n";
    let found = scan(text, &path("crate::data"), &test_ctx());
    let refs: Vec<String> = found.refs.iter().map(|r| r.target.to_string()).collect();
    assert_eq!(refs, ["crate::table::Entry"]);
    assert_eq!(found.test_modules, [path("crate::data::slow")]);
    assert!(!found.code.iter().any(|t| t.text == "tokio"));
    assert_eq!(
        scan(text, &path("crate"), &test_ctx()).test_modules,
        [path("crate::slow")]
    );
    assert!(scan("#![cfg(test)]\nuse x;", &path("crate"), &test_ctx()).test_only);
}

#[test]
fn resolves_inline_modules_child_modules_and_the_library_name() {
    let text = "mod inner {\n    use super::proxy::Proxy;\n}\n";
    assert_eq!(
        refs_in("crate::data", text),
        ["2 crate::data::proxy::Proxy"]
    );
    // From the crate root a child module is a wing; an unknown name is a local item.
    assert_eq!(
        refs_in("crate", "fn f() { table::handle(); tls::Tls::load(); }"),
        ["1 crate::table::handle"]
    );
    // The binary names the library by its crate name; its own `crate::` is itself.
    assert_eq!(
        refs_in(
            "main",
            "use yard::config::Config;\nfn main() { yard::app::run(); crate::x(); }"
        ),
        ["1 crate::config::Config", "2 crate::app::run", "2 main::x"]
    );
}

#[test]
fn reads_names_from_the_manifest() {
    let (name, deps) = parse_manifest(
        "[package]\nname = \"switch-yard\"\n[dependencies]\nk8s-openapi = { version = \"1\",\n  \
         features = [\"x\"] }\narc-swap.workspace = true\n[dev-dependencies.tempfile]\n\
         version = \"3\"\n[target.'cfg(unix)'.dependencies]\nlibc = \"0.2\" # [not a section]\n",
    );
    assert_eq!(name.as_deref(), Some("switch_yard"));
    assert_eq!(
        deps.into_iter().collect::<Vec<_>>(),
        ["arc_swap", "k8s_openapi", "libc", "tempfile"]
    );
}
