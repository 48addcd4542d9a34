//! Annotation parsing: a Service with an arbitrary annotation value (first byte picks the key)
//! next to a good Service; never a panic, and the good Service routes as it does alone.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use serde_json::json;
use switchyard::control::manifests::{Objects, parse_into};
use switchyard::table::{Frontend, RoutingTable};
use switchyard::control::translate::{Options, translate};

const KEYS: &[&str] = &[
    "serviceloadbalancer/lb.host",
    "serviceloadbalancer/lb.aclMatch",
    "serviceloadbalancer/lb.algorithm",
    "serviceloadbalancer/lb.maxconn",
    "serviceloadbalancer/lb.cookie-sticky-session",
    "serviceloadbalancer/lb.sslTerm",
    "serviceloadbalancer/lb.check-interval",
    "serviceloadbalancer/lb.check-path",
];

fn service(name: &str, annotations: serde_json::Value) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": "default", "annotations": annotations},
        "spec": {"ports": [{"port": 80, "protocol": "TCP"}]}})
}

fn slice(name: &str, ip: &str) -> serde_json::Value {
    json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": "default",
            "labels": {"kubernetes.io/service-name": name}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": [ip]}], "ports": [{"port": 8080}]})
}

fn build(docs: &[serde_json::Value]) -> RoutingTable {
    let list = json!({"apiVersion": "v1", "kind": "List", "items": docs}).to_string();
    let mut objects = Objects::default();
    parse_into(&list, Path::new("fuzz.json"), &mut objects).expect("our own JSON parses");
    translate(
        &objects.services,
        &objects.slices,
        &Options::default(),
        None,
    )
    .0
}

fn good(t: &RoutingTable) -> (serde_json::Value, serde_json::Value) {
    let j = t.to_json();
    (
        j["entries"]["good"].clone(),
        j["http"]["hosts"]["good.test"].clone(),
    )
}

fuzz_target!(|data: &[u8]| {
    let Some((&k, value)) = data.split_first() else {
        return;
    };
    let key = KEYS[k as usize % KEYS.len()];
    let value = String::from_utf8_lossy(value);
    let good_docs = [
        service("good", json!({"serviceloadbalancer/lb.host": "good.test"})),
        slice("good", "10.0.0.1"),
    ];
    let alone = build(&good_docs);
    let mut docs = good_docs.to_vec();
    docs.push(service("zz-hostile", json!({ key: value })));
    docs.push(slice("zz-hostile", "10.0.0.2"));
    let mixed = build(&docs);
    assert_eq!(good(&alone), good(&mixed), "{key}: {value:?}");
    if let Some(router) = mixed.router(Frontend::Http) {
        let _ = router.lookup(Some(value.as_bytes()), "/");
    }
});
