//! The synthetic world the benches share (not a bench target itself: cargo only discovers
//! `benches/*.rs` and `benches/*/main.rs`).
//!
//! N Services with 3 ports and 10 ready endpoints each; a third have `lb.host`, a tenth
//! `lb.aclMatch`, a tenth a cookie-sticky annotation. Every object carries a resourceVersion,
//! as objects read from the API server do.

use std::collections::BTreeMap;

// The allocator the binary ships with (src/main.rs): table builds are allocation-heavy, and a
// figure taken under glibc's malloc would describe a program nobody runs.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use switchyard::control::translate::{SERVICE_NAME_LABEL, annotation};

pub fn world(n: usize) -> (Vec<Service>, Vec<EndpointSlice>) {
    let mut services = Vec::with_capacity(n);
    let mut slices = Vec::with_capacity(n * 3);
    for i in 0..n {
        let name = format!("svc-{i}");
        let mut ann = BTreeMap::new();
        if i % 3 == 0 {
            ann.insert(annotation::HOST.to_string(), format!("{name}.example.com"));
        }
        if i % 10 == 1 {
            ann.insert(
                annotation::ACL_MATCH.to_string(),
                format!("/api/{i} /v2/{i}"),
            );
        }
        if i % 10 == 2 {
            ann.insert(annotation::COOKIE_STICKY.to_string(), "true".into());
        }
        services.push(Service {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(format!("ns-{}", i % 20)),
                annotations: Some(ann),
                // As every object read from the API server has: what incremental rebuilds key on.
                resource_version: Some(format!("{}", 100_000 + i)),
                uid: Some(format!("svc-{i}")),
                ..Default::default()
            },
            spec: Some(ServiceSpec {
                ports: Some(
                    [80, 8080, 9090]
                        .iter()
                        .map(|&p| ServicePort {
                            name: Some(format!("p{p}")),
                            port: p,
                            ..Default::default()
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        });
        for p in [80, 8080, 9090] {
            slices.push(EndpointSlice {
                metadata: ObjectMeta {
                    name: Some(format!("{name}-{p}")),
                    namespace: Some(format!("ns-{}", i % 20)),
                    resource_version: Some(format!("{}", 500_000 + i * 3 + p as usize % 3)),
                    uid: Some(format!("{name}-{p}")),
                    labels: Some(BTreeMap::from([(
                        SERVICE_NAME_LABEL.to_string(),
                        name.clone(),
                    )])),
                    ..Default::default()
                },
                address_type: "IPv4".into(),
                endpoints: Some(
                    (0..10)
                        .map(|e| Endpoint {
                            addresses: vec![format!("10.{}.{}.{}", i / 256 % 256, i % 256, e + 1)],
                            ..Default::default()
                        })
                        .collect(),
                ),
                ports: Some(vec![EndpointPort {
                    name: Some(format!("p{p}")),
                    port: Some(p + 1),
                    ..Default::default()
                }]),
            });
        }
    }
    // The cluster source hands Services over sorted by (namespace, name), as its store keeps them.
    services.sort_by(|a, b| {
        (&a.metadata.namespace, &a.metadata.name).cmp(&(&b.metadata.namespace, &b.metadata.name))
    });
    (services, slices)
}

/// One Ingress per Service of `world(n)`: host `app-N.example.com` with three Prefix paths
/// (`/`, `/api`, `/static/v1`), one to each port; and switchyard's IngressClass.
#[allow(dead_code)] // only the translate bench reads Ingresses
pub fn ingresses(
    n: usize,
) -> (
    Vec<k8s_openapi::api::networking::v1::Ingress>,
    k8s_openapi::api::networking::v1::IngressClass,
) {
    use k8s_openapi::api::networking::v1::{
        HTTPIngressPath, HTTPIngressRuleValue, Ingress, IngressBackend, IngressClass,
        IngressClassSpec, IngressRule, IngressServiceBackend, IngressSpec, ServiceBackendPort,
    };
    let class = IngressClass {
        metadata: ObjectMeta {
            name: Some("switchyard".into()),
            ..Default::default()
        },
        spec: Some(IngressClassSpec {
            controller: Some(switchyard::control::translate::DEFAULT_CONTROLLER_NAME.into()),
            parameters: None,
        }),
    };
    let ingresses = (0..n)
        .map(|i| {
            let path = |p: &str, port: i32| HTTPIngressPath {
                path: Some(p.into()),
                path_type: "Prefix".into(),
                backend: IngressBackend {
                    resource: None,
                    service: Some(IngressServiceBackend {
                        name: format!("svc-{i}"),
                        port: Some(ServiceBackendPort {
                            name: None,
                            number: Some(port),
                        }),
                    }),
                },
            };
            Ingress {
                metadata: ObjectMeta {
                    name: Some(format!("app-{i}")),
                    namespace: Some(format!("ns-{}", i % 20)),
                    resource_version: Some(format!("{}", 900_000 + i)),
                    uid: Some(format!("app-{i}")),
                    ..Default::default()
                },
                spec: Some(IngressSpec {
                    ingress_class_name: Some("switchyard".into()),
                    rules: Some(vec![IngressRule {
                        host: Some(format!("app-{i}.example.com")),
                        http: Some(HTTPIngressRuleValue {
                            paths: vec![
                                path("/", 80),
                                path("/api", 8080),
                                path("/static/v1", 9090),
                            ],
                        }),
                    }]),
                    ..Default::default()
                }),
                status: None,
            }
        })
        .collect();
    (ingresses, class)
}

/// One HTTPRoute per Service of `world(n)`, attached to one Gateway (`infra/gw`, an HTTP
/// listener on port 80 taking routes from every namespace): host `app-N.example.com` and three
/// rules, one to each port: `/` (PathPrefix), `/api` with a header and a query match, and
/// `/static/v1` (Exact, GET only). With the GatewayClass and the Gateway.
#[allow(dead_code)]
// only the translate bench reads HTTPRoutes
// The objects are fixed JSON: a failure to read them is a bug in this file, found at once.
#[allow(clippy::expect_used)]
pub fn http_routes(
    n: usize,
) -> (
    Vec<switchyard::control::translate::gateway::api::HTTPRoute>,
    switchyard::control::translate::gateway::api::GatewayClass,
    switchyard::control::translate::gateway::api::Gateway,
) {
    use switchyard::control::translate::gateway::api::{Gateway, GatewayClass, HTTPRoute};
    let class: GatewayClass = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "switchyard"},
        "spec": {"controllerName": switchyard::control::translate::DEFAULT_GATEWAY_CONTROLLER_NAME},
    }))
    .expect("GatewayClass");
    let gateway: Gateway = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "gw", "namespace": "infra"},
        "spec": {"gatewayClassName": "switchyard", "listeners": [{
            "name": "http", "port": 80, "protocol": "HTTP",
            "allowedRoutes": {"namespaces": {"from": "All"}},
        }]},
    }))
    .expect("Gateway");
    let routes = (0..n)
        .map(|i| {
            serde_json::from_value(serde_json::json!({
                "metadata": {
                    "name": format!("app-{i}"),
                    "namespace": format!("ns-{}", i % 20),
                    "resourceVersion": format!("{}", 800_000 + i),
                    "creationTimestamp": "2026-12-01T00:00:00Z",
                },
                "spec": {
                    "parentRefs": [{"name": "gw", "namespace": "infra"}],
                    "hostnames": [format!("app-{i}.example.com")],
                    "rules": [
                        {"backendRefs": [{"name": format!("svc-{i}"), "port": 80}]},
                        {
                            "matches": [{
                                "path": {"type": "PathPrefix", "value": "/api"},
                                "headers": [{"name": "x-version", "value": "v2"}],
                                "queryParams": [{"name": "debug", "value": "1"}],
                            }],
                            "backendRefs": [{"name": format!("svc-{i}"), "port": 8080}],
                        },
                        {
                            "matches": [{"path": {"type": "Exact", "value": "/static/v1"}, "method": "GET"}],
                            "backendRefs": [{"name": format!("svc-{i}"), "port": 9090}],
                        },
                    ],
                },
            }))
            .expect("HTTPRoute")
        })
        .collect::<Vec<HTTPRoute>>();
    (routes, class, gateway)
}
