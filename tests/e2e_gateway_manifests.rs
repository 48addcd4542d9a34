//! The Gateway API through the offline source (`--manifests`), over real sockets: a
//! GatewayClass, Gateway, HTTPRoute, ReferenceGrant (`v1`) and Namespaces read from the file
//! are served, and an edit of the file (a route's hostname, a Namespace's labels that a
//! listener's `allowedRoutes` selector reads) is served within the poll interval, with no
//! restart. Every wait is bounded.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use serde_json::{Value, json};

fn objects(web: &Backend, host: &str, team: &str) -> Vec<Value> {
    vec![
        svc("web", 80).ns("shop").into(),
        slice_ns("shop", "web", "", web.port),
        json!({"apiVersion": "v1", "kind": "Namespace",
               "metadata": {"name": "shop", "labels": {"team": team}}}),
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "infra"}}),
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
               "metadata": {"name": "switchyard"},
               "spec": {"controllerName": "switchyard.io/gateway-controller"}}),
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
               "metadata": {"name": "gw", "namespace": "infra"},
               "spec": {"gatewayClassName": "switchyard", "listeners": [{
                   "name": "http", "port": 80, "protocol": "HTTP",
                   "allowedRoutes": {"namespaces": {"from": "Selector",
                                     "selector": {"matchLabels": {"team": "shop"}}}}}]}}),
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
               "metadata": {"name": "web", "namespace": "shop"},
               "spec": {"parentRefs": [{"name": "gw", "namespace": "infra"}],
                        "hostnames": [host],
                        "rules": [{"backendRefs": [{"name": "web", "port": 80}]}]}}),
        // Served as v1 as well as v1beta1; nothing here needs it, it must only read.
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "ReferenceGrant",
               "metadata": {"name": "g", "namespace": "shop"},
               "spec": {"from": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute",
                                  "namespace": "infra"}],
                        "to": [{"group": "", "kind": "Service"}]}}),
    ]
}

async fn status_of(sy: &Switchyard, host: &str) -> u16 {
    sy.get_host(host, "/").await.status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_objects_from_files_are_served_and_follow_edits() {
    let web = Backend::start("web").await;
    let sy = switchyard(objects(&web, "a.example", "shop"))
        .args(&["--gateway-http-port", "80"])
        .start()
        .await;
    expect_route(&sy, Some("a.example"), "/x", &web, "/x").await;
    // A new hostname: the old one stops, the new one serves.
    sy.rewrite(&objects(&web, "b.example", "shop"));
    let moved = eventually(Duration::from_secs(10), || async {
        status_of(&sy, "b.example").await == 200 && status_of(&sy, "a.example").await == 404
    })
    .await;
    assert!(moved, "the edited route was not served: {}", sy.stderr());
    // The Namespace no longer matches the listener's selector: the route detaches.
    sy.rewrite(&objects(&web, "b.example", "other"));
    let detached = eventually(Duration::from_secs(10), || async {
        status_of(&sy, "b.example").await == 404
    })
    .await;
    assert!(
        detached,
        "a Namespace label change was not read: {}",
        sy.stderr()
    );
}
