//! Keeps the one-way data flow of STYLE.md true: pure modules name no runtime, the translator
//! names no data plane, the data plane names no Kubernetes type. It reads the sources as text
//! and fails on a forbidden path, which is cheaper than finding the coupling in review.

use std::path::Path;

/// (module file, paths it must not name)
const RULES: &[(&str, &[&str])] = &[
    (
        "src/matcher.rs",
        &[
            "kube::",
            "k8s_openapi::",
            "pingora::",
            "tokio::",
            "prometheus::",
            "crate::table",
        ],
    ),
    (
        "src/balance.rs",
        &[
            "kube::",
            "k8s_openapi::",
            "pingora::",
            "tokio::",
            "prometheus::",
            "crate::table",
        ],
    ),
    (
        "src/sticky.rs",
        &[
            "kube::",
            "k8s_openapi::",
            "pingora::",
            "tokio::",
            "prometheus::",
            "crate::table",
        ],
    ),
    (
        "src/table.rs",
        &[
            "kube::",
            "k8s_openapi::",
            "pingora::",
            "tokio::",
            "crate::control::translate",
        ],
    ),
    (
        "src/translate.rs",
        &[
            "kube::",
            "pingora::",
            "tokio::",
            "prometheus::",
            "crate::data::proxy",
            "crate::control::pipeline",
            "tracing::",
            "Instant::now",
            "SystemTime",
        ],
    ),
    (
        "src/translate/tests.rs",
        &["kube::", "pingora::", "tokio::"],
    ),
    (
        "src/http_proxy.rs",
        &[
            "kube::",
            "k8s_openapi::",
            "crate::control::translate",
            "crate::control::manifests",
            "crate::control::pipeline",
        ],
    ),
    (
        "src/http_proxy/fast_path.rs",
        &[
            "kube::",
            "k8s_openapi::",
            "crate::control::translate",
            "crate::control::manifests",
            "crate::control::pipeline",
            "crate::table",
        ],
    ),
    (
        "src/tcp_proxy.rs",
        &[
            "kube::",
            "k8s_openapi::",
            "crate::control::translate",
            "crate::control::manifests",
            "crate::control::pipeline",
        ],
    ),
    (
        "src/tls.rs",
        &[
            "kube::",
            "k8s_openapi::",
            "crate::control::translate",
            "crate::control::manifests",
            "crate::control::pipeline",
            "crate::table",
        ],
    ),
    ("src/manifests.rs", &["pingora::", "crate::data::proxy"]),
    ("src/pipeline.rs", &["pingora::", "crate::data::proxy"]),
    (
        "src/watch.rs",
        &["pingora::", "crate::data::proxy", "crate::table"],
    ),
    (
        "src/metrics.rs",
        &["kube::", "k8s_openapi::", "pingora::", "tokio::", "crate::"],
    ),
    (
        "src/lifecycle.rs",
        &[
            "kube::",
            "k8s_openapi::",
            "crate::table",
            "crate::control::translate",
        ],
    ),
    (
        "src/health.rs",
        &[
            "kube::",
            "k8s_openapi::",
            "crate::control::translate",
            "crate::data::proxy",
        ],
    ),
    (
        "src/stats.rs",
        &[
            "kube::",
            "k8s_openapi::",
            "crate::control::translate",
            "crate::data::proxy",
        ],
    ),
    (
        "src/access_log.rs",
        &[
            "kube::",
            "k8s_openapi::",
            "crate::control::translate",
            "crate::table",
        ],
    ),
    (
        "src/explain.rs",
        &[
            "kube::",
            "k8s_openapi::",
            "pingora::",
            "tokio::",
            "prometheus::",
            "crate::control::translate",
            "crate::data::proxy",
            "crate::ops::metrics",
            "SystemTime",
        ],
    ),
];

fn code_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim()))
        .filter(|(_, l)| !l.starts_with("//"))
}

#[test]
fn modules_respect_the_dependency_rules() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut violations = Vec::new();
    for (file, forbidden) in RULES {
        let text =
            std::fs::read_to_string(root.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        for (n, line) in code_lines(&text) {
            for f in *forbidden {
                // `use tokio::…`, `tokio::spawn(…)`, `use crate::{translate, …}` style alike.
                let braced = f.strip_prefix("crate::").map(|m| format!("crate::{{{m}"));
                if line.contains(f) || braced.is_some_and(|b| line.contains(&b)) {
                    violations.push(format!("{file}:{n}: names {f}: {line}"));
                }
            }
        }
    }
    assert!(
        violations.is_empty(),
        "forbidden dependencies:\n{}",
        violations.join("\n")
    );
}

#[test]
fn the_rule_catches_a_violation() {
    let sample =
        "use std::fmt;\n// tokio:: in a comment is fine\nfn f() { tokio::spawn(async {}); }\n";
    let hits: Vec<_> = code_lines(sample)
        .filter(|(_, l)| l.contains("tokio::"))
        .collect();
    assert_eq!(hits.len(), 1);
}

#[test]
fn every_module_has_a_doc_paragraph() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(root.join("src")).expect("src/") {
        let path = entry.expect("dir entry").path();
        if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).expect("read");
            if !text.trim_start().starts_with("//!") {
                missing.push(path.display().to_string());
            }
        }
    }
    assert!(
        missing.is_empty(),
        "modules without a //! paragraph: {missing:?}"
    );
}
