//! The Gateway API types of `control::translate::gateway::api` held to the v1.6.1 standard CRDs
//! (copied under `tests/data/gateway-api/crd/`, see the NOTICE there): an instance of each
//! type with every field set is serialized, and every JSON path in it must exist in the CRD's
//! `openAPIV3Schema` of the storage version, with a compatible type. A misspelt field would
//! otherwise be read as absent from every real object and written where no API server keeps
//! it (BackendTLSPolicy's `wellKnownCACertificates`, which serde's camelCase would spell
//! `wellKnownCaCertificates`, is the case in point). The conformance suite's manifests must
//! read into the same types and, for routes, policies and ListenerSets, survive a round trip.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, ObjectMeta,
};
use serde_json::Value;
use switchyard::control::translate::gateway::api::*;

fn data(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/gateway-api")
        .join(rel)
}

/// The `openAPIV3Schema` of the CRD's storage version, and that version's name.
fn storage_schema(plural: &str) -> (String, Value) {
    let path = data(&format!("crd/gateway.networking.k8s.io_{plural}.yaml"));
    let text = std::fs::read_to_string(&path).unwrap();
    let crd: Value = serde_yaml_ng::from_str(&text).unwrap();
    let version = crd["spec"]["versions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["storage"] == Value::Bool(true))
        .unwrap();
    (
        version["name"].as_str().unwrap().to_string(),
        version["schema"]["openAPIV3Schema"].clone(),
    )
}

/// Every path of `value` that `schema` does not allow, with why.
fn mismatches(value: &Value, schema: &Value, path: &str, out: &mut Vec<String>) {
    let ty = schema["type"].as_str();
    let int_or_string = schema["x-kubernetes-int-or-string"] == Value::Bool(true);
    let ok = match (value, ty) {
        (_, None) if int_or_string => value.is_string() || value.is_i64(),
        (_, None) => true,
        (Value::Object(_), Some("object"))
        | (Value::Array(_), Some("array"))
        | (Value::String(_), Some("string"))
        | (Value::Bool(_), Some("boolean")) => true,
        (Value::Number(n), Some("integer")) => n.is_i64() || n.is_u64(),
        (Value::Number(_), Some("number")) => true,
        _ => false,
    };
    if !ok {
        out.push(format!("{path}: {value} is not of type {ty:?}"));
        return;
    }
    match value {
        Value::Object(map) => {
            // ObjectMeta is `type: object` without properties in every CRD: the API server's.
            if path == ".metadata" {
                return;
            }
            for (k, v) in map {
                let sub = format!("{path}.{k}");
                if let Some(s) = schema["properties"].get(k) {
                    mismatches(v, s, &sub, out);
                } else if let Some(s) = schema.get("additionalProperties") {
                    mismatches(v, s, &sub, out);
                } else if schema["x-kubernetes-preserve-unknown-fields"] != Value::Bool(true) {
                    out.push(format!("{sub}: not in the schema"));
                }
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                mismatches(v, &schema["items"], &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

/// Every leaf path of `value` (objects and arrays that are empty count as leaves too), to
/// prove an instance is fully populated: no `null` anywhere.
fn nulls(value: &Value, path: &str, out: &mut Vec<String>) {
    match value {
        Value::Null => out.push(path.to_string()),
        Value::Object(m) => m
            .iter()
            .for_each(|(k, v)| nulls(v, &format!("{path}.{k}"), out)),
        Value::Array(a) => a
            .iter()
            .enumerate()
            .for_each(|(i, v)| nulls(v, &format!("{path}[{i}]"), out)),
        _ => {}
    }
}

fn check<T: serde::Serialize + k8s_openapi::Resource>(plural: &str, object: &T) {
    let (version, schema) = storage_schema(plural);
    assert_eq!(
        T::VERSION,
        version,
        "{plural}: the type is read at the storage version"
    );
    assert_eq!(T::URL_PATH_SEGMENT, plural);
    let mut value = serde_json::to_value(object).unwrap();
    value["apiVersion"] = T::API_VERSION.into();
    value["kind"] = T::KIND.into();
    let mut bad = Vec::new();
    mismatches(&value, &schema, "", &mut bad);
    assert!(bad.is_empty(), "{plural}: {bad:#?}");
    let mut holes = Vec::new();
    nulls(&value, "", &mut holes);
    assert!(holes.is_empty(), "{plural}: not populated: {holes:?}");
}

// === fully populated instances (every Option Some, every Vec non-empty) ===

fn meta(ns: Option<&str>) -> ObjectMeta {
    ObjectMeta {
        name: Some("x".into()),
        namespace: ns.map(Into::into),
        generation: Some(3),
        ..Default::default()
    }
}

fn condition() -> Condition {
    Condition {
        last_transition_time: Some("2026-01-01T00:00:00Z".into()),
        ..Condition::new("Accepted", true, "Accepted", "ok", Some(3))
    }
}

fn kind() -> RouteGroupKind {
    RouteGroupKind {
        group: Some(GROUP.into()),
        kind: "HTTPRoute".into(),
    }
}

fn parent_ref() -> ParentReference {
    ParentReference {
        group: Some(GROUP.into()),
        kind: Some("Gateway".into()),
        namespace: Some("ns".into()),
        name: "gw".into(),
        section_name: Some("http".into()),
        port: Some(80),
    }
}

fn backend() -> BackendObjectReference {
    BackendObjectReference {
        group: Some(String::new()),
        kind: Some("Service".into()),
        name: "web".into(),
        namespace: Some("ns".into()),
        port: Some(8080),
    }
}

fn headers() -> HTTPHeaderFilter {
    let h = HTTPHeader {
        name: "x-a".into(),
        value: "1".into(),
    };
    HTTPHeaderFilter {
        set: vec![h.clone()],
        add: vec![h],
        remove: vec!["x-b".into()],
    }
}

fn path_modifier() -> HTTPPathModifier {
    HTTPPathModifier {
        type_: "ReplacePrefixMatch".into(),
        replace_full_path: Some("/full".into()),
        replace_prefix_match: Some("/prefix".into()),
    }
}

fn filter() -> HTTPRouteFilter {
    HTTPRouteFilter {
        type_: "RequestHeaderModifier".into(),
        request_header_modifier: Some(headers()),
        response_header_modifier: Some(headers()),
        request_redirect: Some(HTTPRequestRedirectFilter {
            scheme: Some("https".into()),
            hostname: Some("example.com".into()),
            path: Some(path_modifier()),
            port: Some(8443),
            status_code: Some(301),
        }),
        url_rewrite: Some(HTTPURLRewriteFilter {
            hostname: Some("example.com".into()),
            path: Some(path_modifier()),
        }),
        request_mirror: Some(HTTPRequestMirrorFilter {
            backend_ref: backend(),
            percent: Some(50),
            fraction: Some(Fraction {
                numerator: 1,
                denominator: Some(2),
            }),
        }),
        extension_ref: Some(LocalObjectReference {
            group: "example.com".into(),
            kind: "Thing".into(),
            name: "t".into(),
        }),
        cors: Some(HTTPCORSFilter {
            allow_origins: vec!["https://*.example.com".into()],
            allow_credentials: Some(true),
            allow_methods: vec!["GET".into()],
            allow_headers: vec!["x-a".into()],
            expose_headers: vec!["x-b".into()],
            max_age: Some(60),
        }),
    }
}

fn selector() -> LabelSelector {
    LabelSelector {
        match_labels: Some(BTreeMap::from([("a".into(), "b".into())])),
        match_expressions: Some(vec![LabelSelectorRequirement {
            key: "a".into(),
            operator: "In".into(),
            values: Some(vec!["b".into()]),
        }]),
    }
}

fn gateway_class() -> GatewayClass {
    GatewayClass {
        metadata: meta(None),
        spec: GatewayClassSpec {
            controller_name: "switchyard.io/gateway-controller".into(),
            parameters_ref: Some(ParametersReference {
                group: "example.com".into(),
                kind: "Params".into(),
                name: "p".into(),
                namespace: Some("ns".into()),
            }),
            description: Some("d".into()),
        },
        status: Some(GatewayClassStatus {
            conditions: vec![condition()],
        }),
    }
}

fn gateway() -> Gateway {
    let address = GatewayAddress {
        type_: Some("IPAddress".into()),
        value: "192.0.2.1".into(),
    };
    Gateway {
        metadata: meta(Some("ns")),
        spec: GatewaySpec {
            gateway_class_name: "c".into(),
            listeners: vec![Listener {
                name: "https".into(),
                hostname: Some("*.example.com".into()),
                port: 443,
                protocol: "HTTPS".into(),
                tls: Some(ListenerTls {
                    mode: Some("Terminate".into()),
                    certificate_refs: vec![SecretObjectReference {
                        group: Some(String::new()),
                        kind: Some("Secret".into()),
                        name: "cert".into(),
                        namespace: Some("certs".into()),
                    }],
                    options: BTreeMap::from([("example.com/a".into(), "b".into())]),
                }),
                allowed_routes: Some(AllowedRoutes {
                    namespaces: Some(RouteNamespaces {
                        from: Some("Selector".into()),
                        selector: Some(selector()),
                    }),
                    kinds: vec![kind()],
                }),
            }],
            addresses: vec![address.clone()],
            infrastructure: Some(GatewayInfrastructure {
                labels: BTreeMap::from([("team".into(), "a".into())]),
                annotations: BTreeMap::from([("example.com/b".into(), "c".into())]),
                parameters_ref: Some(LocalParametersReference {
                    group: "example.com".into(),
                    kind: "Params".into(),
                    name: "p".into(),
                }),
            }),
            tls: Some(GatewayTlsConfig {
                frontend: Some(FrontendTlsConfig {
                    default: Some(TlsConfig {
                        validation: Some(FrontendTlsValidation {
                            ca_certificate_refs: vec![ObjectReference {
                                group: String::new(),
                                kind: "ConfigMap".into(),
                                name: "ca".into(),
                                namespace: Some("certs".into()),
                            }],
                            mode: Some("AllowValidOnly".into()),
                        }),
                    }),
                    per_port: vec![TlsPortConfig {
                        port: 8443,
                        tls: TlsConfig {
                            validation: Some(FrontendTlsValidation {
                                ca_certificate_refs: Vec::new(),
                                mode: Some("AllowInsecureFallback".into()),
                            }),
                        },
                    }],
                }),
            }),
            allowed_listeners: Some(AllowedListeners {
                namespaces: Some(RouteNamespaces {
                    from: Some("Selector".into()),
                    selector: Some(LabelSelector {
                        match_labels: Some(BTreeMap::from([("team".into(), "a".into())])),
                        ..LabelSelector::default()
                    }),
                }),
            }),
        },
        status: Some(GatewayStatus {
            addresses: vec![address],
            conditions: vec![condition()],
            listeners: vec![ListenerStatus {
                name: "https".into(),
                supported_kinds: vec![kind()],
                attached_routes: 1,
                conditions: vec![condition()],
            }],
            attached_listener_sets: Some(1),
        }),
    }
}

fn listener_set() -> ListenerSet {
    let gateway = gateway();
    let status = gateway.status.unwrap();
    ListenerSet {
        metadata: meta(Some("apps")),
        spec: ListenerSetSpec {
            parent_ref: ParentGatewayReference {
                group: Some(GROUP.into()),
                kind: Some("Gateway".into()),
                name: "gw".into(),
                namespace: Some("ns".into()),
            },
            listeners: gateway.spec.listeners,
        },
        status: Some(ListenerSetStatus {
            conditions: status.conditions,
            listeners: status.listeners,
        }),
    }
}

fn http_route() -> HTTPRoute {
    let header = HTTPHeaderMatch {
        type_: Some("Exact".into()),
        name: "x-a".into(),
        value: "1".into(),
    };
    HTTPRoute {
        metadata: meta(Some("ns")),
        spec: HTTPRouteSpec {
            parent_refs: vec![parent_ref()],
            hostnames: vec!["a.example.com".into()],
            rules: Some(vec![HTTPRouteRule {
                name: Some("r".into()),
                matches: Some(vec![HTTPRouteMatch {
                    path: Some(HTTPPathMatch {
                        type_: Some("PathPrefix".into()),
                        value: Some("/a".into()),
                    }),
                    headers: vec![header.clone()],
                    query_params: vec![header],
                    method: Some("GET".into()),
                }]),
                filters: vec![filter()],
                backend_refs: vec![HTTPBackendRef {
                    backend: backend(),
                    weight: Some(2),
                    filters: vec![filter()],
                }],
                timeouts: Some(HTTPRouteTimeouts {
                    request: Some("10s".into()),
                    backend_request: Some("5s".into()),
                }),
            }]),
        },
        status: Some(RouteStatus {
            parents: vec![RouteParentStatus {
                parent_ref: parent_ref(),
                controller_name: "switchyard.io/gateway-controller".into(),
                conditions: vec![condition()],
            }],
        }),
    }
}

fn grpc_route() -> GRPCRoute {
    let filter = GRPCRouteFilter {
        type_: "RequestHeaderModifier".into(),
        request_header_modifier: Some(headers()),
        response_header_modifier: Some(headers()),
        request_mirror: filter().request_mirror,
        extension_ref: Some(LocalObjectReference {
            group: "example.com".into(),
            kind: "Thing".into(),
            name: "t".into(),
        }),
    };
    GRPCRoute {
        metadata: meta(Some("ns")),
        spec: GRPCRouteSpec {
            parent_refs: vec![parent_ref()],
            hostnames: vec!["a.example.com".into()],
            rules: vec![GRPCRouteRule {
                name: Some("r".into()),
                matches: vec![GRPCRouteMatch {
                    method: Some(GRPCMethodMatch {
                        type_: Some("Exact".into()),
                        service: Some("pkg.Svc".into()),
                        method: Some("Call".into()),
                    }),
                    headers: vec![HTTPHeaderMatch {
                        type_: Some("Exact".into()),
                        name: "x-a".into(),
                        value: "1".into(),
                    }],
                }],
                filters: vec![filter.clone()],
                backend_refs: vec![GRPCBackendRef {
                    backend: backend(),
                    weight: Some(2),
                    filters: vec![filter],
                }],
            }],
        },
        status: http_route().status,
    }
}

fn stream_rule() -> StreamRouteRule {
    StreamRouteRule {
        name: Some("r".into()),
        backend_refs: vec![StreamBackendRef {
            backend: backend(),
            weight: Some(2),
        }],
    }
}

/// A TCPRoute: `hostnames` left empty, as the shared spec writes none for it (the TCPRoute
/// schema has no such field: `a_tcp_route_has_no_hostnames` shows the check would see one).
fn tcp_route() -> TCPRoute {
    TCPRoute {
        metadata: meta(Some("ns")),
        spec: StreamRouteSpec {
            parent_refs: vec![parent_ref()],
            hostnames: Vec::new(),
            rules: vec![stream_rule()],
        },
        status: http_route().status,
    }
}

/// A UDPRoute: `hostnames` left empty, as for a TCPRoute (the UDPRoute schema has no such
/// field either: `a_udp_route_has_no_hostnames`).
fn udp_route() -> UDPRoute {
    UDPRoute {
        metadata: meta(Some("ns")),
        spec: StreamRouteSpec {
            parent_refs: vec![parent_ref()],
            hostnames: Vec::new(),
            rules: vec![stream_rule()],
        },
        status: http_route().status,
    }
}

fn tls_route() -> TLSRoute {
    TLSRoute {
        metadata: meta(Some("ns")),
        spec: StreamRouteSpec {
            parent_refs: vec![parent_ref()],
            hostnames: vec!["abc.example.com".into()],
            rules: vec![stream_rule()],
        },
        status: http_route().status,
    }
}

fn reference_grant() -> ReferenceGrant {
    ReferenceGrant {
        metadata: meta(Some("ns")),
        spec: ReferenceGrantSpec {
            from: vec![ReferenceGrantFrom {
                group: GROUP.into(),
                kind: "HTTPRoute".into(),
                namespace: "other".into(),
            }],
            to: vec![ReferenceGrantTo {
                group: String::new(),
                kind: "Service".into(),
                name: Some("web".into()),
            }],
        },
    }
}

/// A BackendTLSPolicy with every field set (both CA sources and both kinds of subject
/// alternative name: the schema's structure is checked here, not its CEL rules).
fn backend_tls_policy() -> BackendTLSPolicy {
    BackendTLSPolicy {
        metadata: meta(Some("ns")),
        spec: BackendTLSPolicySpec {
            target_refs: vec![LocalPolicyTargetReference {
                group: String::new(),
                kind: "Service".into(),
                name: "web".into(),
                section_name: Some("https".into()),
            }],
            validation: BackendTLSPolicyValidation {
                ca_certificate_refs: vec![LocalObjectReference {
                    group: String::new(),
                    kind: "ConfigMap".into(),
                    name: "ca".into(),
                }],
                well_known_ca_certificates: Some("System".into()),
                hostname: "web.example.com".into(),
                subject_alt_names: vec![
                    SubjectAltName {
                        type_: "Hostname".into(),
                        hostname: Some("alt.example.com".into()),
                        uri: Some("spiffe://example.com/web".into()),
                    },
                    SubjectAltName {
                        type_: "URI".into(),
                        hostname: None,
                        uri: Some("spiffe://example.com/web".into()),
                    },
                ],
            },
            options: BTreeMap::from([("example.com/opt".to_string(), "1".to_string())]),
        },
        status: Some(PolicyStatus {
            ancestors: vec![PolicyAncestorStatus {
                ancestor_ref: parent_ref(),
                controller_name: "switchyard.io/gateway-controller".into(),
                conditions: vec![condition()],
            }],
        }),
    }
}

#[test]
fn every_field_of_every_type_is_in_the_crd_schema() {
    check("gatewayclasses", &gateway_class());
    check("gateways", &gateway());
    check("httproutes", &http_route());
    check("grpcroutes", &grpc_route());
    check("tcproutes", &tcp_route());
    check("tlsroutes", &tls_route());
    check("udproutes", &udp_route());
    check("listenersets", &listener_set());
    check("backendtlspolicies", &backend_tls_policy());
    check("referencegrants", &reference_grant());
}

/// `wellKnownCACertificates` is not what serde's camelCase makes of its Rust name
/// (`wellKnownCaCertificates`); written so, it would be a field no API server keeps, and read
/// so, absent from every real policy. The check sees the difference, and the type reads and
/// writes the CRD's spelling.
#[test]
fn a_policy_field_misnamed_by_camel_case_is_caught() {
    let (_, schema) = storage_schema("backendtlspolicies");
    let mut value = serde_json::to_value(backend_tls_policy()).unwrap();
    let validation = value["spec"]["validation"].as_object_mut().unwrap();
    let system = validation.remove("wellKnownCACertificates").unwrap();
    validation.insert("wellKnownCaCertificates".into(), system);
    let mut bad = Vec::new();
    mismatches(&value, &schema, "", &mut bad);
    assert_eq!(
        bad,
        [".spec.validation.wellKnownCaCertificates: not in the schema"]
    );
    let read: BackendTLSPolicyValidation = serde_json::from_value(serde_json::json!({
        "hostname": "web.example.com", "wellKnownCACertificates": "System"}))
    .unwrap();
    assert_eq!(read.well_known_ca_certificates.as_deref(), Some("System"));
}

/// TCPRoute and TLSRoute share `StreamRouteSpec`, but only TLSRoute's schema has `hostnames`:
/// a TCPRoute given some would be written with a field no API server keeps, and the check
/// above must be able to tell.
#[test]
fn a_tcp_route_has_no_hostnames() {
    let (_, schema) = storage_schema("tcproutes");
    let mut route = tcp_route();
    route.spec.hostnames = vec!["abc.example.com".into()];
    let mut bad = Vec::new();
    mismatches(&serde_json::to_value(route).unwrap(), &schema, "", &mut bad);
    assert_eq!(bad, [".spec.hostnames: not in the schema"]);
}

/// UDPRoute shares `StreamRouteSpec` too, and its schema has no `hostnames` either.
#[test]
fn a_udp_route_has_no_hostnames() {
    let (version, schema) = storage_schema("udproutes");
    assert_eq!(version, "v1");
    let mut route = udp_route();
    route.spec.hostnames = vec!["dns.example.com".into()];
    let mut bad = Vec::new();
    mismatches(&serde_json::to_value(route).unwrap(), &schema, "", &mut bad);
    assert_eq!(bad, [".spec.hostnames: not in the schema"]);
}

#[test]
fn the_checker_finds_a_misspelt_field_and_a_wrong_type() {
    // The check above must be able to fail: a field the schema lacks, and a number where the
    // schema says string.
    let (_, schema) = storage_schema("gateways");
    let mut value = serde_json::to_value(gateway()).unwrap();
    value["spec"]["listeners"][0]["allowedRoute"] = Value::Bool(true);
    value["spec"]["gatewayClassName"] = 7.into();
    let mut bad = Vec::new();
    mismatches(&value, &schema, "", &mut bad);
    assert_eq!(bad.len(), 2, "{bad:#?}");
    assert!(bad[0].contains(".spec.gatewayClassName") || bad[1].contains("gatewayClassName"));
    assert!(
        bad.iter()
            .any(|b| b.contains(".spec.listeners[0].allowedRoute:"))
    );
}

/// Every Gateway API document in the copied conformance manifests.
fn conformance_docs() -> Vec<(PathBuf, Value)> {
    let mut out = Vec::new();
    let mut files: Vec<PathBuf> = ["conformance", "conformance/base"]
        .iter()
        .flat_map(|d| std::fs::read_dir(data(d)).unwrap())
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for doc in serde_yaml_ng::Deserializer::from_str(&text) {
            let v: Value = serde::Deserialize::deserialize(doc).unwrap();
            if v["apiVersion"]
                .as_str()
                .is_some_and(|a| a.starts_with(GROUP))
            {
                out.push((file.clone(), v));
            }
        }
    }
    out
}

#[test]
fn the_conformance_manifests_read_into_the_types() {
    let docs = conformance_docs();
    let mut seen = BTreeMap::<String, usize>::new();
    for (file, v) in docs {
        let kind = v["kind"].as_str().unwrap().to_string();
        let name = v["metadata"]["name"].as_str().unwrap().to_string();
        let what = format!("{}: {kind} {name}", file.display());
        match kind.as_str() {
            "GatewayClass" => {
                let c: GatewayClass = serde_json::from_value(v.clone()).expect(&what);
                assert_eq!(Some(&name), c.metadata.name.as_ref());
            }
            "Gateway" => {
                let g: Gateway = serde_json::from_value(v.clone()).expect(&what);
                assert_eq!(
                    g.spec.listeners.len(),
                    v["spec"]["listeners"].as_array().map_or(0, Vec::len),
                    "{what}"
                );
                for (l, raw) in g
                    .spec
                    .listeners
                    .iter()
                    .zip(v["spec"]["listeners"].as_array().unwrap())
                {
                    assert_eq!(l.name, raw["name"].as_str().unwrap(), "{what}");
                    assert_eq!(i64::from(l.port), raw["port"].as_i64().unwrap(), "{what}");
                    assert_eq!(l.protocol, raw["protocol"].as_str().unwrap(), "{what}");
                }
            }
            "HTTPRoute" => {
                let r: HTTPRoute = serde_json::from_value(v.clone()).expect(&what);
                assert_eq!(
                    r.spec.parent_refs.len(),
                    v["spec"]["parentRefs"].as_array().map_or(0, Vec::len),
                    "{what}"
                );
                assert_eq!(
                    r.spec.rules.as_ref().map(Vec::len),
                    v["spec"]["rules"].as_array().map(Vec::len),
                    "{what}"
                );
            }
            "GRPCRoute" => {
                let r: GRPCRoute = serde_json::from_value(v.clone()).expect(&what);
                assert_eq!(
                    r.spec.rules.len(),
                    v["spec"]["rules"].as_array().map_or(0, Vec::len),
                    "{what}"
                );
                let back = serde_json::to_value(&r).unwrap();
                let mut bad = Vec::new();
                not_kept(&back["spec"], &v["spec"], "spec", &mut bad);
                assert!(bad.is_empty(), "{what}: {bad:#?}");
            }
            "TCPRoute" | "TLSRoute" | "UDPRoute" => {
                let back = if kind == "TCPRoute" {
                    let r: TCPRoute = serde_json::from_value(v.clone()).expect(&what);
                    assert!(r.spec.hostnames.is_empty(), "{what}");
                    serde_json::to_value(&r).unwrap()
                } else if kind == "UDPRoute" {
                    let r: UDPRoute = serde_json::from_value(v.clone()).expect(&what);
                    assert!(r.spec.hostnames.is_empty(), "{what}");
                    serde_json::to_value(&r).unwrap()
                } else {
                    let r: TLSRoute = serde_json::from_value(v.clone()).expect(&what);
                    serde_json::to_value(&r).unwrap()
                };
                assert_eq!(
                    back["spec"]["rules"].as_array().map_or(0, Vec::len),
                    v["spec"]["rules"].as_array().map_or(0, Vec::len),
                    "{what}"
                );
                let mut bad = Vec::new();
                not_kept(&back["spec"], &v["spec"], "spec", &mut bad);
                assert!(bad.is_empty(), "{what}: {bad:#?}");
            }
            "BackendTLSPolicy" => {
                let p: BackendTLSPolicy = serde_json::from_value(v.clone()).expect(&what);
                assert_eq!(
                    p.spec.target_refs.len(),
                    v["spec"]["targetRefs"].as_array().map_or(0, Vec::len),
                    "{what}"
                );
                assert!(!p.spec.validation.hostname.is_empty(), "{what}");
                let back = serde_json::to_value(&p).unwrap();
                let mut bad = Vec::new();
                not_kept(&back["spec"], &v["spec"], "spec", &mut bad);
                assert!(bad.is_empty(), "{what}: {bad:#?}");
            }
            "ListenerSet" => {
                let l: ListenerSet = serde_json::from_value(v.clone()).expect(&what);
                let raw = v["spec"]["listeners"].as_array().unwrap();
                assert_eq!(l.spec.listeners.len(), raw.len(), "{what}");
                for (l, raw) in l.spec.listeners.iter().zip(raw) {
                    assert_eq!(l.name, raw["name"].as_str().unwrap(), "{what}");
                    assert_eq!(i64::from(l.port), raw["port"].as_i64().unwrap(), "{what}");
                }
                assert!(!l.spec.parent_ref.name.is_empty(), "{what}");
                let back = serde_json::to_value(&l).unwrap();
                let mut bad = Vec::new();
                not_kept(&back["spec"], &v["spec"], "spec", &mut bad);
                assert!(bad.is_empty(), "{what}: {bad:#?}");
            }
            "ReferenceGrant" => {
                let g: ReferenceGrant = serde_json::from_value(v.clone()).expect(&what);
                assert!(!g.spec.from.is_empty() && !g.spec.to.is_empty(), "{what}");
            }
            _ => continue,
        }
        *seen.entry(kind).or_default() += 1;
    }
    for kind in [
        "GatewayClass",
        "Gateway",
        "HTTPRoute",
        "GRPCRoute",
        "TCPRoute",
        "TLSRoute",
        "UDPRoute",
        "ListenerSet",
        "BackendTLSPolicy",
        "ReferenceGrant",
    ] {
        assert!(
            seen.get(kind).is_some_and(|n| *n > 0),
            "no {kind} read: {seen:?}"
        );
    }
}

/// Where `back` (an object read into the types and written again) says something `orig`
/// does not: a value changed, or a field or list item that was not there. Fields the types do
/// not model (a `cors` filter's body) may be missing from `back`; an empty list and an absent
/// one are the same list.
fn not_kept(back: &Value, orig: &Value, path: &str, out: &mut Vec<String>) {
    match (back, orig) {
        (Value::Object(b), Value::Object(o)) => {
            for (k, bv) in b {
                let sub = format!("{path}.{k}");
                match o.get(k) {
                    Some(ov) => not_kept(bv, ov, &sub, out),
                    None if bv.as_array().is_some_and(Vec::is_empty) => {}
                    None => out.push(format!("{sub}: {bv} was not in the original")),
                }
            }
            for (k, ov) in o {
                if ov.as_array().is_some_and(Vec::is_empty) && !b.contains_key(k) {
                    continue;
                }
                if !b.contains_key(k) && MODELLED.contains(&k.as_str()) {
                    out.push(format!("{path}.{k}: lost"));
                }
            }
        }
        (Value::Array(b), Value::Array(o)) if b.len() == o.len() => {
            for (i, (bv, ov)) in b.iter().zip(o).enumerate() {
                not_kept(bv, ov, &format!("{path}[{i}]"), out);
            }
        }
        _ if back == orig => {}
        _ => out.push(format!("{path}: {back} instead of {orig}")),
    }
}

/// Field names the route types (HTTPRoute, GRPCRoute, TCPRoute, TLSRoute, UDPRoute) and
/// BackendTLSPolicy model: one of them in the original must survive.
const MODELLED: &[&str] = &[
    "parentRefs",
    "hostnames",
    "rules",
    "name",
    "matches",
    "filters",
    "backendRefs",
    "timeouts",
    "path",
    "headers",
    "queryParams",
    "method",
    "type",
    "value",
    "requestHeaderModifier",
    "responseHeaderModifier",
    "requestRedirect",
    "urlRewrite",
    "requestMirror",
    "extensionRef",
    "set",
    "add",
    "remove",
    "scheme",
    "hostname",
    "port",
    "statusCode",
    "replaceFullPath",
    "replacePrefixMatch",
    "backendRef",
    "percent",
    "fraction",
    "numerator",
    "denominator",
    "group",
    "kind",
    "namespace",
    "sectionName",
    "weight",
    "request",
    "backendRequest",
    "service",
    "targetRefs",
    "validation",
    "caCertificateRefs",
    "wellKnownCACertificates",
    "subjectAltNames",
    "uri",
    "options",
];

/// A round trip through the types keeps what they model: every conformance HTTPRoute's spec
/// serializes back to the same values at every path the types name, and nothing is added.
#[test]
fn a_conformance_route_survives_a_round_trip() {
    let docs = conformance_docs();
    let mut checked = 0;
    for (file, v) in docs.iter().filter(|(_, v)| v["kind"] == "HTTPRoute") {
        let r: HTTPRoute = serde_json::from_value(v.clone()).unwrap();
        let back = serde_json::to_value(&r).unwrap();
        let mut bad = Vec::new();
        not_kept(&back["spec"], &v["spec"], "spec", &mut bad);
        assert!(bad.is_empty(), "{}: {bad:#?}", file.display());
        checked += 1;
    }
    assert!(checked > 10, "only {checked} routes compared");
}

#[test]
fn the_round_trip_check_sees_a_lost_or_changed_field() {
    let orig = serde_json::json!({"rules": [{"matches": [{"path": {"type": "Exact", "value": "/a"}}],
                                             "backendRefs": []}]});
    let mut bad = Vec::new();
    not_kept(
        &serde_json::json!({"rules": [{"matches": [{"path": {"type": "Exact", "value": "/a"}}]}]}),
        &orig,
        "",
        &mut bad,
    );
    assert!(bad.is_empty(), "an empty list written as absent: {bad:?}");
    not_kept(
        &serde_json::json!({"rules": [{"matches": [{"path": {"type": "Exact"}}]}]}),
        &orig,
        "",
        &mut bad,
    );
    assert_eq!(bad.len(), 1, "{bad:?}");
    not_kept(
        &serde_json::json!({"rules": [{"matches": [{"path": {"type": "PathPrefix", "value": "/a"}}]}]}),
        &orig,
        "",
        &mut bad,
    );
    assert_eq!(bad.len(), 2, "{bad:?}");
}
