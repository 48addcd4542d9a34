//! Keeps `deploy/` true to the code: the flags the Deployment passes parse, and the routing
//! objects its ConfigMap carries load and translate without a warning.

use std::path::Path;

use clap::Parser;
use serde::Deserialize;
use switchyard::config::{Args, Config};
use switchyard::manifests::{Objects, parse_into};
use switchyard::translate::translate;

fn documents() -> Vec<serde_json::Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/offline.yaml");
    let text = std::fs::read_to_string(path).expect("deploy/offline.yaml");
    serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| serde_json::Value::deserialize(d).expect("valid YAML"))
        .collect()
}

fn kind<'a>(docs: &'a [serde_json::Value], kind: &str) -> &'a serde_json::Value {
    docs.iter()
        .find(|d| d["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind}"))
}

#[test]
fn deployment_args_parse() {
    let docs = documents();
    let container = &kind(&docs, "Deployment")["spec"]["template"]["spec"]["containers"][0];
    let args: Vec<&str> = container["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(|a| a.as_str())
        .collect();
    let parsed =
        Args::try_parse_from(std::iter::once("switchyard").chain(args)).expect("flags parse");
    let config = Config::from_args(parsed).expect("valid config");
    assert_eq!(config.http_port, 8080);
    assert_eq!(config.admin_port, 8081);
    let probe_path = container["readinessProbe"]["httpGet"]["path"].as_str();
    assert_eq!(probe_path, Some("/readyz"));
}

#[test]
fn configmap_routes_translate_cleanly() {
    let docs = documents();
    let routes = kind(&docs, "ConfigMap")["data"]["routes.yaml"]
        .as_str()
        .expect("routes.yaml");
    let mut objects = Objects::default();
    parse_into(routes, Path::new("routes.yaml"), &mut objects).expect("routes parse");
    let config =
        Config::from_args(Args::try_parse_from(["switchyard", "--manifests", "x"]).expect("args"))
            .expect("config");
    let (table, warnings) = translate(&objects.services, &objects.slices, &config.translate, None);
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(table.entries.len(), 1);
    assert_eq!(table.entries[0].endpoints.len(), 2);
}
