//! Gateway API status through the cluster source, against the in-process fake API server over
//! real HTTP: one test per upstream conformance case (Gateway API v1.6.1,
//! `conformance/tests/<case>.go`) that checks status only, with the upstream manifests
//! (`tests/data/gateway-api/conformance/`, applied with the suite's base manifests and its
//! TLS Secrets) and the upstream expectations, judged as the suite's helpers judge them
//! (`conformance/utils/kubernetes/helpers.go`: a condition matches on type and status, and on
//! reason unless the expectation leaves it empty; listeners and parents must be exactly the
//! expected ones). And the CRDs' absence: one warning, Services still served, the Gateway API
//! picked up once installed and dropped once deleted; older CRDs without TCPRoute, TLSRoute,
//! UDPRoute and ListenerSet, or without BackendTLSPolicy, the other kinds' status still written;
//! ListenerSet status (a set a Gateway allows, Accepted and Programmed, its listener counting
//! the route attached through it; a set a Gateway does not allow, NotAllowed); UDPRoute status
//! (a UDP listener's route, Accepted and ResolvedRefs); BackendTLSPolicy status
//! (`status.ancestors`: our Gateways whose routes reach its Service, Accepted and ResolvedRefs,
//! a missing CA ConfigMap, a conflict); and the status writer's own promises (other
//! controllers' entries kept, times kept, nothing rewritten, followers quiet), for TCPRoutes,
//! TLSRoutes and BackendTLSPolicies too.
//!
//! switchyard runs as the suite runs an implementation: watching every namespace, with an
//! address to publish (`--publish-status-address 127.0.0.1`) and port 80/443 listeners as its
//! frontends. Every wait is bounded (`TIMEOUT`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod kube_api;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{Backend, free_port, try_request};
use kube_api::{FakeApi, Kind, Watching, service, slice};
use serde_json::{Value, json};

const CONTROLLER: &str = "switchyard.io/gateway-controller";
const CLASS: &str = "switchyard-conformance";
const INFRA: &str = "gateway-conformance-infra";
const GROUP: &str = "gateway.networking.k8s.io";
/// The suite's timeouts are 60 s and more for a real cluster; here nothing waits on a network.
const TIMEOUT: Duration = Duration::from_secs(20);

// === manifests ===

/// The documents of a copied upstream manifest with the suite's placeholders filled in, keeping
/// the kinds the fake serves (Deployments and ConfigMaps are the suite's backends' own).
fn manifest(rel: &str) -> Vec<Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/gateway-api/conformance")
        .join(rel);
    let text = std::fs::read_to_string(&path)
        .unwrap()
        .replace("{GATEWAY_CLASS_NAME}", CLASS)
        .replace("{GATEWAY_CONTROLLER_NAME}", CONTROLLER);
    serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .filter(|v: &Value| {
            matches!(
                v["kind"].as_str(),
                Some(
                    "Namespace"
                        | "Service"
                        | "Secret"
                        | "GatewayClass"
                        | "Gateway"
                        | "ListenerSet"
                        | "HTTPRoute"
                        | "GRPCRoute"
                        | "TCPRoute"
                        | "TLSRoute"
                        | "UDPRoute"
                        | "BackendTLSPolicy"
                        | "ReferenceGrant"
                )
            )
        })
        .collect()
}

/// A self-signed `kubernetes.io/tls` Secret, as the suite creates for its HTTPS listeners.
fn tls_secret(ns: &str, name: &str, hosts: &[&str]) -> Value {
    let ck =
        rcgen::generate_simple_self_signed(hosts.iter().map(|h| h.to_string()).collect::<Vec<_>>())
            .unwrap();
    let secret = k8s_openapi::api::core::v1::Secret {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            ..Default::default()
        },
        type_: Some("kubernetes.io/tls".into()),
        data: Some(
            [
                ("tls.crt", ck.cert.pem()),
                ("tls.key", ck.signing_key.serialize_pem()),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), k8s_openapi::ByteString(v.into_bytes())))
            .collect(),
        ),
        ..Default::default()
    };
    let mut v = serde_json::to_value(secret).unwrap();
    v["apiVersion"] = json!("v1");
    v["kind"] = json!("Secret");
    v
}

/// The GatewayClass the suite is run with (`--gateway-class`), ours.
fn gateway_class() -> Value {
    json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
           "metadata": {"name": CLASS}, "spec": {"controllerName": CONTROLLER}})
}

/// What the suite sets up before any case: the class, the base manifests and the Secrets its
/// setup creates.
fn base() -> Vec<Value> {
    let mut objs = vec![gateway_class()];
    objs.extend(manifest("base/manifests.yaml"));
    objs.push(tls_secret(
        INFRA,
        "tls-validity-checks-certificate",
        &["*", "*.org"],
    ));
    objs.push(tls_secret(
        "gateway-conformance-web-backend",
        "certificate",
        &["*"],
    ));
    objs
}

/// A switchyard watching a fake API server that holds the base and `case`'s manifests.
struct Case {
    api: FakeApi,
    sy: Watching,
    _cert: tempfile::TempDir,
}

async fn start(case: &str) -> Case {
    start_with(case, |_| {}).await
}

/// `start` with the objects edited first (a status another controller wrote, say).
async fn start_with(case: &str, edit: impl FnOnce(&mut Vec<Value>)) -> Case {
    let mut objs = base();
    objs.extend(manifest(&format!("{case}.yaml")));
    edit(&mut objs);
    start_objects(objs, &[]).await
}

/// A switchyard watching a fake API server that holds `objs`, with `extra` arguments.
async fn start_objects(objs: Vec<Value>, extra: &[&str]) -> Case {
    start_on(FakeApi::start().await, objs, extra)
}

/// `start_objects` on a fake set up first (some CRDs not installed, say).
fn start_on(api: FakeApi, objs: Vec<Value>, extra: &[&str]) -> Case {
    api.apply_all(objs);
    let cert = tempfile::tempdir().unwrap();
    let ck = rcgen::generate_simple_self_signed(vec!["default.invalid".to_string()]).unwrap();
    let bundle = cert.path().join("default.pem");
    std::fs::write(
        &bundle,
        format!("{}{}", ck.cert.pem(), ck.signing_key.serialize_pem()),
    )
    .unwrap();
    let https = free_port().to_string();
    let sy = api.spawn_switchyard(
        &[
            "--gateway-http-port",
            "80",
            "--gateway-https-port",
            "443",
            "--https-port",
            &https,
            "--ssl-cert",
            bundle.to_str().unwrap(),
            "--publish-status-address",
            "127.0.0.1",
        ]
        .into_iter()
        .chain(extra.iter().copied())
        .collect::<Vec<_>>(),
        "info",
    );
    Case {
        api,
        sy,
        _cert: cert,
    }
}

impl Case {
    fn get(&self, kind: Kind, ns: &str, name: &str) -> Value {
        self.api
            .object(kind, ns, name)
            .unwrap_or_else(|| panic!("{kind:?} {ns}/{name} not in the fake"))
    }

    /// Waits until `check` passes, up to `TIMEOUT`; panics with its last complaint and the log.
    async fn must(&self, what: &str, check: impl Fn(&Case) -> Result<(), String>) {
        self.must_within(what, TIMEOUT, check).await
    }

    /// `must` with a limit of its own (what waits for a CRD's slow retry).
    async fn must_within(
        &self,
        what: &str,
        limit: Duration,
        check: impl Fn(&Case) -> Result<(), String>,
    ) {
        let start = Instant::now();
        let mut last;
        loop {
            last = check(self);
            if last.is_ok() || start.elapsed() > limit {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        if let Err(why) = last {
            let log = self.sy.stderr();
            let tail: String = log
                .lines()
                .rev()
                .take(30)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect::<Vec<_>>()
                .join("\n");
            panic!("{what}: {why}\n--- switchyard log (last lines) ---\n{tail}");
        }
    }

    /// Patches a Gateway's spec as a client's merge patch would (the generation grows).
    fn update(&self, kind: Kind, ns: &str, name: &str, f: impl FnOnce(&mut Value)) {
        let mut obj = self.get(kind, ns, name);
        f(&mut obj);
        self.api.apply(obj);
    }
}

// === the suite's judgements (conformance/utils/kubernetes/helpers.go) ===

/// (type, status, reason); an empty reason matches any.
type Cond<'a> = (&'a str, &'a str, &'a str);

fn find_condition(actual: &Value, (ty, status, reason): Cond<'_>) -> bool {
    actual.as_array().into_iter().flatten().any(|c| {
        c["type"] == ty && c["status"] == status && (reason.is_empty() || c["reason"] == reason)
    })
}

fn conditions_match(expected: &[Cond<'_>], actual: &Value) -> Result<(), String> {
    for e in expected {
        if !find_condition(actual, *e) {
            return Err(format!("no condition {e:?} in {actual}"));
        }
    }
    Ok(())
}

/// One expected listener status.
struct Listener<'a> {
    name: &'a str,
    /// Kinds of the Gateway API group.
    kinds: &'a [&'a str],
    conditions: &'a [Cond<'a>],
    attached: i64,
}

fn http_listener<'a>(name: &'a str, conditions: &'a [Cond<'a>], attached: i64) -> Listener<'a> {
    Listener {
        name,
        kinds: &["HTTPRoute"],
        conditions,
        attached,
    }
}

/// `GatewayStatusMustHaveListeners`: exactly these listeners, each with these supported
/// kinds (group set) among its own (none when none is expected), this many attached routes,
/// and these conditions among its own.
fn listeners_match(gw: &Value, expected: &[Listener<'_>]) -> Result<(), String> {
    let actual = gw["status"]["listeners"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if actual.len() != expected.len() {
        return Err(format!(
            "expected {} listeners, got {actual:?}",
            expected.len()
        ));
    }
    for e in expected {
        let a = actual
            .iter()
            .find(|a| a["name"] == e.name)
            .ok_or_else(|| format!("no listener {} in {actual:?}", e.name))?;
        let kinds: Vec<Value> = e
            .kinds
            .iter()
            .map(|k| json!({"group": GROUP, "kind": k}))
            .collect();
        let got = a["supportedKinds"].as_array().cloned().unwrap_or_default();
        // As upstream's `listenersMatch`: the expected kinds must be among those supported
        // (an implementation may support more, here GRPCRoute), and none expected means none.
        let matches = if kinds.is_empty() {
            got.is_empty()
        } else {
            kinds.iter().all(|k| got.contains(k))
        };
        if !matches {
            return Err(format!(
                "listener {}: supportedKinds {got:?}, expected {kinds:?}",
                e.name
            ));
        }
        if a["attachedRoutes"].as_i64().unwrap_or(0) != e.attached {
            return Err(format!(
                "listener {}: attachedRoutes {}, expected {}",
                e.name, a["attachedRoutes"], e.attached
            ));
        }
        conditions_match(e.conditions, &a["conditions"])
            .map_err(|w| format!("listener {}: {w}", e.name))?;
    }
    Ok(())
}

/// `*ConditionsHaveLatestObservedGeneration`: conditions exist and all observed this generation.
fn latest_conditions(obj: &Value, conditions: &Value) -> Result<(), String> {
    let generation = obj["metadata"]["generation"].as_i64();
    let list = conditions.as_array().cloned().unwrap_or_default();
    if list.is_empty() {
        return Err("no conditions".into());
    }
    for c in &list {
        if c["observedGeneration"].as_i64() != generation {
            return Err(format!(
                "condition {} observedGeneration {}, generation {generation:?}",
                c["type"], c["observedGeneration"]
            ));
        }
    }
    Ok(())
}

/// Our parents' entries of a route that name the Gateway `gw` (namespace absent or equal).
fn parents_for<'a>(route: &'a Value, gw: (&str, &str)) -> Vec<&'a Value> {
    route["status"]["parents"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| {
            p["parentRef"]["name"] == gw.1
                && (p["parentRef"]["namespace"].is_null() || p["parentRef"]["namespace"] == gw.0)
        })
        .collect()
}

/// `HTTPRouteMustHaveCondition`.
fn route_condition(route: &Value, gw: (&str, &str), cond: Cond<'_>) -> Result<(), String> {
    if parents_for(route, gw)
        .iter()
        .any(|p| find_condition(&p["conditions"], cond))
    {
        Ok(())
    } else {
        Err(format!(
            "no parent {gw:?} with {cond:?} in {}",
            route["status"]
        ))
    }
}

/// `GatewayAndHTTPRoutesMustBeAccepted` for one route and a Gateway without section names:
/// the Gateway has an IP address, and the route exactly one parent, ours, Accepted.
fn accepted(case: &Case, route: (&str, &str), gw: (&str, &str)) -> Result<(), String> {
    let g = case.get(Kind::Gateway, gw.0, gw.1);
    let has_ip = g["status"]["addresses"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|a| a["type"] == "IPAddress");
    if !has_ip {
        return Err(format!("Gateway {gw:?} has no IPAddress: {}", g["status"]));
    }
    let r = case.get(Kind::HTTPRoute, route.0, route.1);
    let parents = r["status"]["parents"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let [p] = &parents[..] else {
        return Err(format!("expected one parent, got {parents:?}"));
    };
    let namespace_ok = route.0 == gw.0 && p["parentRef"]["namespace"].is_null()
        || p["parentRef"]["namespace"] == gw.0;
    if p["controllerName"] != CONTROLLER
        || p["parentRef"]["group"] != GROUP
        || p["parentRef"]["kind"] != "Gateway"
        || p["parentRef"]["name"] != gw.1
        || !namespace_ok
    {
        return Err(format!("parent {p} is not ours for {gw:?}"));
    }
    conditions_match(&[("Accepted", "True", "Accepted")], &p["conditions"])
}

/// `HTTPRouteMustHaveNoAcceptedParents`: no parents (seen twice, a second apart, so that "not
/// yet" is not taken for "never"), or one that is not Accepted.
async fn no_accepted_parents(case: &Case, route: (&str, &str)) {
    case.must("no accepted parents", |c| {
        let r = c.get(Kind::HTTPRoute, route.0, route.1);
        let parents = r["status"]["parents"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        match &parents[..] {
            [] => Ok(()),
            [p] => conditions_match(&[("Accepted", "False", "")], &p["conditions"]),
            _ => Err(format!("more than one parent: {parents:?}")),
        }
    })
    .await;
    let r = case.get(Kind::HTTPRoute, route.0, route.1);
    if r["status"]["parents"].as_array().is_none_or(Vec::is_empty) {
        tokio::time::sleep(Duration::from_secs(1)).await;
        case.must("no accepted parents, a second later", |c| {
            let r = c.get(Kind::HTTPRoute, route.0, route.1);
            let parents = r["status"]["parents"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            match &parents[..] {
                [] => Ok(()),
                [p] => conditions_match(&[("Accepted", "False", "")], &p["conditions"]),
                _ => Err(format!("more than one parent: {parents:?}")),
            }
        })
        .await;
    }
}

/// `GatewayMustHaveZeroRoutes`: no listeners in status, or one with no routes attached.
fn zero_routes(case: &Case, gw: (&str, &str)) -> Result<(), String> {
    let g = case.get(Kind::Gateway, gw.0, gw.1);
    let listeners = g["status"]["listeners"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    match &listeners[..] {
        [] => Ok(()),
        [l] if l["attachedRoutes"].as_i64().unwrap_or(0) == 0 => Ok(()),
        _ => Err(format!("routes attached: {listeners:?}")),
    }
}

/// `NamespacesMustBeReady` (the Gateway side): every Gateway in `ns` is Programmed.
fn namespace_ready(case: &Case, ns: &str) -> Result<(), String> {
    for g in case.api.objects(Kind::Gateway) {
        if g["metadata"]["namespace"] == ns
            && !find_condition(&g["status"]["conditions"], ("Programmed", "True", ""))
        {
            return Err(format!(
                "Gateway {} not Programmed: {}",
                g["metadata"]["name"], g["status"]
            ));
        }
    }
    Ok(())
}

fn gateway_latest(case: &Case, gw: (&str, &str)) -> Result<(), String> {
    let g = case.get(Kind::Gateway, gw.0, gw.1);
    latest_conditions(&g, &g["status"]["conditions"])
}

const OK_LISTENER: &[Cond<'static>] = &[("Accepted", "True", ""), ("ResolvedRefs", "True", "")];

// === GatewayClass ===

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gatewayclass_observed_generation_bump() {
    let c = start("gatewayclass-observed-generation-bump").await;
    let name = "gatewayclass-observed-generation-bump";
    let accepted_latest = |c: &Case| {
        let gwc = c.get(Kind::GatewayClass, "", name);
        conditions_match(&[("Accepted", "True", "")], &gwc["status"]["conditions"])?;
        latest_conditions(&gwc, &gwc["status"]["conditions"])
    };
    c.must("GWCMustBeAccepted", accepted_latest).await;
    let existing = c.get(Kind::GatewayClass, "", name);
    c.update(Kind::GatewayClass, "", name, |o| {
        o["spec"]["description"] = json!("new")
    });
    c.must("GWCMustBeAccepted after the update", accepted_latest)
        .await;
    let updated = c.get(Kind::GatewayClass, "", name);
    assert_ne!(
        existing["metadata"]["generation"],
        updated["metadata"]["generation"]
    );
    for uc in updated["status"]["conditions"].as_array().unwrap() {
        for ec in existing["status"]["conditions"].as_array().unwrap() {
            assert!(
                !(ec["type"] == uc["type"] && ec["observedGeneration"] == uc["observedGeneration"]),
                "condition {} observedGeneration remained {}",
                uc["type"],
                uc["observedGeneration"]
            );
        }
    }
    // A condition whose status did not change keeps its lastTransitionTime.
    let time = |o: &Value| {
        o["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Accepted")
            .map(|c| c["lastTransitionTime"].clone())
    };
    assert_eq!(time(&existing), time(&updated));
}

// === Gateway ===

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_observed_generation_bump() {
    let c = start("gateway-observed-generation-bump").await;
    let gw = (INFRA, "gateway-observed-generation-bump");
    c.must("NamespacesMustBeReady", |c| namespace_ready(c, INFRA))
        .await;
    c.must("GatewayMustHaveLatestConditions", |c| gateway_latest(c, gw))
        .await;
    let original = c.get(Kind::Gateway, gw.0, gw.1);
    c.update(Kind::Gateway, gw.0, gw.1, |o| {
        o["spec"]["listeners"].as_array_mut().unwrap().push(json!({
            "name": "alternate", "hostname": "foo.com", "port": 80, "protocol": "HTTP",
            "allowedRoutes": {"namespaces": {"from": "All"}}}))
    });
    c.must("NamespacesMustBeReady", |c| namespace_ready(c, INFRA))
        .await;
    c.must("GatewayMustHaveLatestConditions", |c| gateway_latest(c, gw))
        .await;
    let updated = c.get(Kind::Gateway, gw.0, gw.1);
    assert_ne!(
        original["metadata"]["generation"],
        updated["metadata"]["generation"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_with_attached_routes() {
    let c = start("gateway-with-attached-routes").await;
    c.must("one valid route attached", |c| {
        listeners_match(
            &c.get(Kind::Gateway, INFRA, "gateway-with-one-attached-route"),
            &[http_listener("http", OK_LISTENER, 1)],
        )
    })
    .await;
    c.must("two valid routes attached", |c| {
        listeners_match(
            &c.get(Kind::Gateway, INFRA, "gateway-with-two-attached-routes"),
            &[http_listener("http", OK_LISTENER, 2)],
        )
    })
    .await;
    let gw = (
        INFRA,
        "unresolved-gateway-with-one-attached-unresolved-route",
    );
    c.must("AttachedRoutes set even with unresolved refs", |c| {
        listeners_match(
            &c.get(Kind::Gateway, gw.0, gw.1),
            &[http_listener(
                "tls",
                &[("Programmed", "False", ""), ("ResolvedRefs", "False", "")],
                1,
            )],
        )
    })
    .await;
    c.must("http-route-4 ResolvedRefs False", |c| {
        route_condition(
            &c.get(Kind::HTTPRoute, INFRA, "http-route-4"),
            gw,
            ("ResolvedRefs", "False", ""),
        )
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_invalid_route_kind() {
    let c = start("gateway-invalid-route-kind").await;
    let invalid: &[Cond<'_>] = &[("ResolvedRefs", "False", "InvalidRouteKinds")];
    c.must("only an invalid kind: no supportedKinds", |c| {
        listeners_match(
            &c.get(Kind::Gateway, INFRA, "gateway-only-invalid-route-kind"),
            &[Listener {
                name: "http",
                kinds: &[],
                conditions: invalid,
                attached: 0,
            }],
        )
    })
    .await;
    c.must(
        "a supported and an invalid kind: HTTPRoute supported",
        |c| {
            listeners_match(
                &c.get(
                    Kind::Gateway,
                    INFRA,
                    "gateway-supported-and-invalid-route-kind",
                ),
                &[http_listener("http", invalid, 0)],
            )
        },
    )
    .await;
}

/// GatewayListenerUnsupportedProtocol (`gateway-invalid-listeners-unsupported-protocol`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_invalid_listeners_unsupported_protocol() {
    let c = start("gateway-invalid-listeners-unsupported-protocol").await;
    let unsupported: &[Cond<'_>] = &[("Accepted", "False", "UnsupportedProtocol")];
    let only = (INFRA, "gateway-only-unsupported-protocols");
    c.must("GatewayMustHaveLatestConditions", |c| {
        gateway_latest(c, only)
    })
    .await;
    c.must("no accepted listener: the Gateway is not accepted", |c| {
        let g = c.get(Kind::Gateway, only.0, only.1);
        conditions_match(
            &[("Accepted", "False", "ListenersNotValid")],
            &g["status"]["conditions"],
        )?;
        listeners_match(
            &g,
            &[Listener {
                name: "invalid",
                kinds: &[],
                conditions: unsupported,
                attached: 0,
            }],
        )
    })
    .await;
    let both = (INFRA, "gateway-supported-and-unsupported-protocols");
    c.must("GatewayMustHaveLatestConditions", |c| {
        gateway_latest(c, both)
    })
    .await;
    c.must("one accepted listener: the Gateway is accepted", |c| {
        let g = c.get(Kind::Gateway, both.0, both.1);
        conditions_match(
            &[("Accepted", "True", "ListenersNotValid")],
            &g["status"]["conditions"],
        )?;
        listeners_match(
            &g,
            &[
                http_listener("http", &[("Accepted", "True", "Accepted")], 0),
                Listener {
                    name: "invalid",
                    kinds: &[],
                    conditions: unsupported,
                    attached: 0,
                },
            ],
        )
    })
    .await;
}

/// GatewayInvalidParametersRef: switchyard takes no infrastructure parameters, so a
/// reference to any is invalid and the Gateway is not accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_invalid_parameters_ref() {
    let c = start("gateway-invalid-parameters-ref").await;
    let gw = (INFRA, "gateway-invalid-parameters-ref");
    c.must("GatewayMustHaveLatestConditions", |c| gateway_latest(c, gw))
        .await;
    c.must("Accepted False, InvalidParameters", |c| {
        conditions_match(
            &[("Accepted", "False", "InvalidParameters")],
            &c.get(Kind::Gateway, gw.0, gw.1)["status"]["conditions"],
        )
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_invalid_tls_configuration() {
    let c = start("gateway-invalid-tls-configuration").await;
    let invalid: &[Cond<'_>] = &[("ResolvedRefs", "False", "InvalidCertificateRef")];
    for name in [
        "gateway-certificate-nonexistent-secret",
        "gateway-certificate-unsupported-group",
        "gateway-certificate-unsupported-kind",
        "gateway-certificate-malformed-secret",
    ] {
        c.must(name, |c| {
            listeners_match(
                &c.get(Kind::Gateway, INFRA, name),
                &[http_listener("https", invalid, 0)],
            )
        })
        .await;
    }
}

async fn secret_reference_case(case: &str, conditions: &[Cond<'_>]) {
    let c = start(case).await;
    c.must(case, |c| {
        listeners_match(
            &c.get(Kind::Gateway, INFRA, case),
            &[http_listener("https", conditions, 0)],
        )
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_secret_invalid_reference_grant() {
    secret_reference_case(
        "gateway-secret-invalid-reference-grant",
        &[("ResolvedRefs", "False", "RefNotPermitted")],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_secret_missing_reference_grant() {
    secret_reference_case(
        "gateway-secret-missing-reference-grant",
        &[("ResolvedRefs", "False", "RefNotPermitted")],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_secret_reference_grant_all_in_namespace() {
    secret_reference_case(
        "gateway-secret-reference-grant-all-in-namespace",
        &[
            ("Programmed", "True", "Programmed"),
            ("ResolvedRefs", "True", ""),
        ],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_secret_reference_grant_specific() {
    secret_reference_case(
        "gateway-secret-reference-grant-specific",
        &[
            ("Programmed", "True", "Programmed"),
            ("ResolvedRefs", "True", ""),
        ],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_modify_listeners() {
    let c = start("gateway-modify-listeners").await;
    // Add a listener.
    let gw = (INFRA, "gateway-add-listener");
    c.must("NamespacesMustBeReady", |c| namespace_ready(c, INFRA))
        .await;
    c.must("GatewayMustHaveLatestConditions", |c| gateway_latest(c, gw))
        .await;
    let original = c.get(Kind::Gateway, gw.0, gw.1);
    c.update(Kind::Gateway, gw.0, gw.1, |o| {
        o["spec"]["listeners"].as_array_mut().unwrap().push(json!({
            "name": "http", "port": 80, "protocol": "HTTP", "hostname": "data.test.com",
            "allowedRoutes": {"namespaces": {"from": "All"}}}))
    });
    c.must("NamespacesMustBeReady", |c| namespace_ready(c, INFRA))
        .await;
    c.must("both listeners", |c| {
        listeners_match(
            &c.get(Kind::Gateway, gw.0, gw.1),
            &[
                http_listener("https", OK_LISTENER, 1),
                http_listener("http", OK_LISTENER, 1),
            ],
        )
    })
    .await;
    c.must("GatewayMustHaveLatestConditions", |c| gateway_latest(c, gw))
        .await;
    assert_ne!(
        original["metadata"]["generation"],
        c.get(Kind::Gateway, gw.0, gw.1)["metadata"]["generation"]
    );
    // Remove one.
    let gw = (INFRA, "gateway-remove-listener");
    c.must("GatewayMustHaveLatestConditions", |c| gateway_latest(c, gw))
        .await;
    let original = c.get(Kind::Gateway, gw.0, gw.1);
    assert_eq!(original["spec"]["listeners"].as_array().unwrap().len(), 2);
    c.update(Kind::Gateway, gw.0, gw.1, |o| {
        o["spec"]["listeners"]
            .as_array_mut()
            .unwrap()
            .retain(|l| l["name"] == "http")
    });
    c.must("NamespacesMustBeReady", |c| namespace_ready(c, INFRA))
        .await;
    c.must("one listener left", |c| {
        listeners_match(
            &c.get(Kind::Gateway, gw.0, gw.1),
            &[http_listener("http", OK_LISTENER, 1)],
        )
    })
    .await;
    c.must("GatewayMustHaveLatestConditions", |c| gateway_latest(c, gw))
        .await;
}

// === HTTPRoute ===

const SAME_NAMESPACE: (&str, &str) = (INFRA, "same-namespace");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn httproute_observed_generation_bump() {
    let c = start("httproute-observed-generation-bump").await;
    let route = (INFRA, "observed-generation-bump");
    let latest = |c: &Case| {
        accepted(c, route, SAME_NAMESPACE)?;
        let r = c.get(Kind::HTTPRoute, route.0, route.1);
        for p in r["status"]["parents"].as_array().unwrap() {
            latest_conditions(&r, &p["conditions"])?;
        }
        Ok(())
    };
    c.must("HTTPRouteMustHaveLatestConditions", latest).await;
    let original = c.get(Kind::HTTPRoute, route.0, route.1);
    c.update(Kind::HTTPRoute, route.0, route.1, |o| {
        o["spec"]["rules"][0]["backendRefs"][0]["name"] = json!("infra-backend-v2")
    });
    c.must("HTTPRouteMustHaveLatestConditions after the update", latest)
        .await;
    let updated = c.get(Kind::HTTPRoute, route.0, route.1);
    assert_ne!(
        original["metadata"]["generation"],
        updated["metadata"]["generation"]
    );
}

// === GRPCRoute ===

/// A GRPCRoute's status as upstream's `GatewayAndRoutesMustBeAccepted` (with
/// `&v1.GRPCRoute{}`) reads it, written by the same writer as HTTPRoutes': our one parent
/// Accepted, ResolvedRefs, of the route's generation; the listener counts it and lists
/// GRPCRoute among its kinds. A spec change is decided again (a backend that does not exist:
/// ResolvedRefs False, BackendNotFound).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpcroute_status_is_written_and_follows_the_spec() {
    let c = start("grpcroute-exact-method-matching").await;
    let route = (INFRA, "exact-matching");
    let decided = |cond: Cond<'static>| {
        move |c: &Case| {
            let r = c.get(Kind::GRPCRoute, route.0, route.1);
            let ours = parents_for(&r, SAME_NAMESPACE);
            if ours.len() != 1 {
                return Err(format!("expected one parent of ours: {}", r["status"]));
            }
            latest_conditions(&r, &ours[0]["conditions"])?;
            route_condition(&r, SAME_NAMESPACE, ("Accepted", "True", "Accepted"))?;
            route_condition(&r, SAME_NAMESPACE, cond)
        }
    };
    c.must(
        "GatewayAndRoutesMustBeAccepted (GRPCRoute)",
        decided(("ResolvedRefs", "True", "ResolvedRefs")),
    )
    .await;
    c.must("the listener counts the GRPCRoute", |c| {
        let g = c.get(Kind::Gateway, SAME_NAMESPACE.0, SAME_NAMESPACE.1);
        let l = &g["status"]["listeners"][0];
        let kinds = l["supportedKinds"].as_array().cloned().unwrap_or_default();
        if !kinds.contains(&json!({"group": GROUP, "kind": "GRPCRoute"})) {
            return Err(format!("no GRPCRoute in supportedKinds: {l}"));
        }
        match l["attachedRoutes"].as_i64() {
            Some(1) => Ok(()),
            n => Err(format!("attachedRoutes {n:?}, expected 1: {l}")),
        }
    })
    .await;
    c.update(Kind::GRPCRoute, route.0, route.1, |o| {
        o["spec"]["rules"][0]["backendRefs"][0]["name"] = json!("no-such-backend")
    });
    c.must(
        "the changed route decided again",
        decided(("ResolvedRefs", "False", "BackendNotFound")),
    )
    .await;
}

// === TCPRoute and TLSRoute ===

/// A Gateway of ours with a TCP listener (port 9300, TCPRoutes only) and a TLS passthrough
/// listener (`abc.example.com`, port 9443), with a TCPRoute and a TLSRoute attached to one
/// each, to `tcp-backend` of the base manifests (as upstream's `tcproute-*` and
/// `tlsroute-simple-same-namespace` cases).
fn stream_gateway_and_routes() -> Vec<Value> {
    vec![
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
        "metadata": {"name": "stream-gateway", "namespace": INFRA},
        "spec": {"gatewayClassName": CLASS, "listeners": [
            {"name": "tcp", "protocol": "TCP", "port": 9300,
             "allowedRoutes": {"kinds": [{"kind": "TCPRoute"}]}},
            {"name": "tls", "protocol": "TLS", "port": 9443,
             "hostname": "abc.example.com", "tls": {"mode": "Passthrough"}},
        ]}}),
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "TCPRoute",
               "metadata": {"name": "tcp-route", "namespace": INFRA},
               "spec": {"parentRefs": [{"name": "stream-gateway", "sectionName": "tcp"}],
                        "rules": [{"backendRefs": [{"name": "tcp-backend", "port": 3000}]}]}}),
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "TLSRoute",
               "metadata": {"name": "tls-route", "namespace": INFRA},
               "spec": {"parentRefs": [{"name": "stream-gateway", "sectionName": "tls"}],
                        "hostnames": ["abc.example.com"],
                        "rules": [{"backendRefs": [{"name": "tcp-backend", "port": 8443}]}]}}),
    ]
}

/// A TCPRoute and a TLSRoute attached to a Gateway of ours get their `status.parents` entry,
/// ours alone, Accepted and ResolvedRefs, of the route's generation, as upstream's
/// `GatewayAndRoutesMustBeAccepted` reads it; each listener lists its kind and counts its one
/// route. Through the whole pipeline: translate decides (`GatewayApiStatus::tcp_routes`,
/// `tls_routes`, the listeners' `attachedRoutes`), the writer writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcproute_and_tlsroute_status_is_written_and_counted() {
    let mut objs = base();
    objs.extend(stream_gateway_and_routes());
    let c = start_objects(objs, &[]).await;
    let gw = (INFRA, "stream-gateway");
    for (kind, name) in [(Kind::TCPRoute, "tcp-route"), (Kind::TLSRoute, "tls-route")] {
        c.must(&format!("GatewayAndRoutesMustBeAccepted ({kind:?})"), |c| {
            let r = c.get(kind, INFRA, name);
            let ours = parents_for(&r, gw);
            if ours.len() != 1 || ours[0]["controllerName"] != CONTROLLER {
                return Err(format!("expected one parent of ours: {}", r["status"]));
            }
            latest_conditions(&r, &ours[0]["conditions"])?;
            route_condition(&r, gw, ("Accepted", "True", "Accepted"))?;
            route_condition(&r, gw, ("ResolvedRefs", "True", "ResolvedRefs"))
        })
        .await;
    }
    c.must("each listener counts its route", |c| {
        listeners_match(
            &c.get(Kind::Gateway, gw.0, gw.1),
            &[
                Listener {
                    name: "tcp",
                    kinds: &["TCPRoute"],
                    conditions: OK_LISTENER,
                    attached: 1,
                },
                Listener {
                    name: "tls",
                    kinds: &["TLSRoute"],
                    conditions: OK_LISTENER,
                    attached: 1,
                },
            ],
        )
    })
    .await;
}

// === UDPRoute ===

/// A Gateway of ours with a UDP listener (port 9353, UDPRoutes only) and a UDPRoute attached
/// to it, to a Service with a UDP port 53 (`dns`, as upstream's `udproute-simple` reaches its
/// CoreDNS).
fn udp_gateway_and_route() -> Vec<Value> {
    vec![
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "dns", "namespace": INFRA},
               "spec": {"ports": [{"name": "dns", "port": 53, "protocol": "UDP"}]}}),
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
        "metadata": {"name": "udp-gateway", "namespace": INFRA},
        "spec": {"gatewayClassName": CLASS, "listeners": [
            {"name": "dns", "protocol": "UDP", "port": 9353,
             "allowedRoutes": {"kinds": [{"kind": "UDPRoute"}]}},
        ]}}),
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "UDPRoute",
               "metadata": {"name": "udp-route", "namespace": INFRA},
               "spec": {"parentRefs": [{"name": "udp-gateway", "sectionName": "dns"}],
                        "rules": [{"backendRefs": [{"name": "dns", "port": 53}]}]}}),
    ]
}

/// A UDPRoute attached to a Gateway of ours gets its `status.parents` entry, ours alone,
/// Accepted and ResolvedRefs (its Service has the UDP port it names), of the route's
/// generation, as upstream's `GatewayAndUDPRoutesMustBeAccepted` reads it; the listener lists
/// the kind and counts the route. Through the whole pipeline: translate decides
/// (`GatewayApiStatus::udp_routes`, the listener's `attachedRoutes`), the writer writes. Once the
/// route names a port the Service has not, it is decided again: `ResolvedRefs: False`,
/// `BackendNotFound`, still attached.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udproute_status_is_written_and_counted() {
    let mut objs = base();
    objs.extend(udp_gateway_and_route());
    let c = start_objects(objs, &[]).await;
    let gw = (INFRA, "udp-gateway");
    let route = (INFRA, "udp-route");
    let decided = |cond: Cond<'static>| {
        move |c: &Case| {
            let r = c.get(Kind::UDPRoute, route.0, route.1);
            let ours = parents_for(&r, gw);
            if ours.len() != 1 || ours[0]["controllerName"] != CONTROLLER {
                return Err(format!("expected one parent of ours: {}", r["status"]));
            }
            latest_conditions(&r, &ours[0]["conditions"])?;
            route_condition(&r, gw, ("Accepted", "True", "Accepted"))?;
            route_condition(&r, gw, cond)
        }
    };
    c.must(
        "GatewayAndUDPRoutesMustBeAccepted",
        decided(("ResolvedRefs", "True", "ResolvedRefs")),
    )
    .await;
    let listener_counts_it = |c: &Case| {
        listeners_match(
            &c.get(Kind::Gateway, gw.0, gw.1),
            &[Listener {
                name: "dns",
                kinds: &["UDPRoute"],
                conditions: OK_LISTENER,
                attached: 1,
            }],
        )
    };
    c.must("the listener counts the UDPRoute", listener_counts_it)
        .await;
    c.update(Kind::UDPRoute, route.0, route.1, |o| {
        o["spec"]["rules"][0]["backendRefs"][0]["port"] = json!(5353)
    });
    c.must(
        "the changed route decided again",
        decided(("ResolvedRefs", "False", "BackendNotFound")),
    )
    .await;
    c.must("the listener still counts it", listener_counts_it)
        .await;
    assert_eq!(
        c.api.status_writes(Kind::UDPRoute).1,
        2,
        "the route written once per decision"
    );
}

/// A cluster whose Gateway API CRDs predate v1.5 serves no TCPRoute, TLSRoute, UDPRoute or
/// ListenerSet (404): the other kinds' status is written as ever, nothing is written to the
/// missing kinds,
/// they are looked for again at the slow interval, and the log says so once, at `info`, not as
/// the Gateway API missing nor as a failing watch or write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn older_crds_without_tcp_tls_and_udp_routes_keep_the_other_kinds_status() {
    let api = FakeApi::start().await;
    let stream_kinds = [
        Kind::TCPRoute,
        Kind::TLSRoute,
        Kind::UDPRoute,
        Kind::ListenerSet,
    ];
    for kind in stream_kinds {
        api.set_kind_installed(kind, false);
    }
    let mut objs = base();
    objs.extend(manifest("httproute-observed-generation-bump.yaml"));
    let c = start_on(api, objs, &[]);
    let route = (INFRA, "observed-generation-bump");
    c.must("GatewayAndHTTPRoutesMustBeAccepted", |c| {
        accepted(c, route, SAME_NAMESPACE)
    })
    .await;
    c.must("NamespacesMustBeReady", |c| namespace_ready(c, INFRA))
        .await;
    for kind in stream_kinds {
        assert!(c.api.absent_answers(kind) > 0, "{kind:?} never looked for");
    }
    // Two watchers (the source and the status writer) per kind, each at 15 s: a 3 s window
    // holds at most one more try of each (8), where the watch backoff would make several.
    let absent = |c: &Case| -> u32 { stream_kinds.iter().map(|k| c.api.absent_answers(*k)).sum() };
    let tries = absent(&c);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let later = absent(&c);
    assert!(
        later <= tries + 8,
        "retried too often: {tries} then {later}"
    );
    for kind in stream_kinds {
        assert_eq!(c.api.status_requests(kind), 0, "{kind:?} written");
    }
    let log = c.sy.stderr();
    assert_eq!(
        log.matches(
            "the TCPRoute, TLSRoute, UDPRoute and ListenerSet CRDs (v1, Gateway API v1.5 and later) are not installed"
        )
        .count(),
        1,
        "one line for the four kinds: {log}"
    );
    for wrong in [
        "the Gateway API CRDs are not installed",
        "cannot watch",
        "write failed",
        "WARN",
        "ERROR",
    ] {
        assert!(!log.contains(wrong), "{wrong:?} in the log: {log}");
    }
}

// === ListenerSet ===

const SET_NS: &str = "listenerset-apps";

/// A Gateway of ours that takes ListenerSets from every namespace (`allowedListeners`), one
/// that takes none (the default), a ListenerSet of each in another namespace with an HTTP
/// listener, and an HTTPRoute whose parentRef is the first set.
fn listener_set_world() -> Vec<Value> {
    let gateway = |name: &str, allowed: Value, host: &str| {
        let mut spec = json!({"gatewayClassName": CLASS, "listeners": [
            {"name": "own", "protocol": "HTTP", "port": 80, "hostname": host}]});
        if !allowed.is_null() {
            spec["allowedListeners"] = allowed;
        }
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
               "metadata": {"name": name, "namespace": INFRA}, "spec": spec})
    };
    let set = |name: &str, parent: &str, host: &str| {
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "ListenerSet",
               "metadata": {"name": name, "namespace": SET_NS},
               "spec": {"parentRef": {"name": parent, "namespace": INFRA},
                        "listeners": [{"name": "team", "protocol": "HTTP", "port": 80,
                                       "hostname": host}]}})
    };
    vec![
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SET_NS}}),
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "app", "namespace": SET_NS},
               "spec": {"ports": [{"name": "http", "port": 8080}]}}),
        gateway(
            "open-gateway",
            json!({"namespaces": {"from": "All"}}),
            "own.example.com",
        ),
        gateway("closed-gateway", Value::Null, "closed.example.com"),
        set("team", "open-gateway", "team.example.com"),
        set("refused", "closed-gateway", "refused.example.com"),
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
               "metadata": {"name": "through-set", "namespace": SET_NS},
               "spec": {"parentRefs": [{"kind": "ListenerSet", "name": "team"}],
                        "rules": [{"backendRefs": [{"name": "app", "port": 8080}]}]}}),
    ]
}

/// A ListenerSet whose Gateway allows it gets its status written by the writer through the
/// fake API server (held to the CRD's schema): `Accepted` and `Programmed`, of its
/// generation, and its listener's status counting the HTTPRoute attached through the set; the
/// Gateway lists its own listener only and counts the set in `attachedListenerSets`; the
/// route's parent entry names the set, Accepted. A set of a Gateway that allows none is
/// `Accepted: False`, `NotAllowed`, and that Gateway counts nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listenerset_status_is_written_and_its_routes_counted() {
    let mut objs = base();
    objs.extend(listener_set_world());
    let c = start_objects(objs, &[]).await;
    c.must(
        "the set Accepted and Programmed, its listener counting the route",
        |c| {
            let s = c.get(Kind::ListenerSet, SET_NS, "team");
            conditions_match(
                &[
                    ("Accepted", "True", "Accepted"),
                    ("Programmed", "True", "Programmed"),
                ],
                &s["status"]["conditions"],
            )?;
            latest_conditions(&s, &s["status"]["conditions"])?;
            listeners_match(
                &s,
                &[http_listener("team", &[("Programmed", "True", "")], 1)],
            )
        },
    )
    .await;
    c.must("the Gateway: its own listener, one set attached", |c| {
        let g = c.get(Kind::Gateway, INFRA, "open-gateway");
        listeners_match(&g, &[http_listener("own", OK_LISTENER, 0)])?;
        match g["status"]["attachedListenerSets"].as_i64() {
            Some(1) => Ok(()),
            n => Err(format!("attachedListenerSets {n:?}: {}", g["status"])),
        }
    })
    .await;
    c.must("the route's parent is the set, Accepted", |c| {
        let r = c.get(Kind::HTTPRoute, SET_NS, "through-set");
        let ours = parents_for(&r, (SET_NS, "team"));
        let [p] = &ours[..] else {
            return Err(format!("expected one parent: {}", r["status"]));
        };
        if p["parentRef"]["kind"] != "ListenerSet" || p["controllerName"] != CONTROLLER {
            return Err(format!("parent {p} is not the set, ours"));
        }
        conditions_match(&[("Accepted", "True", "Accepted")], &p["conditions"])
    })
    .await;
    c.must("the set of the closed Gateway NotAllowed", |c| {
        let s = c.get(Kind::ListenerSet, SET_NS, "refused");
        conditions_match(
            &[("Accepted", "False", "NotAllowed")],
            &s["status"]["conditions"],
        )
    })
    .await;
    let closed = c.get(Kind::Gateway, INFRA, "closed-gateway");
    assert!(
        closed["status"]["attachedListenerSets"].is_null(),
        "{}",
        closed["status"]
    );
    let log = c.sy.stderr();
    assert!(!log.contains("write failed"), "{log}");
}

/// A Gateway that stops allowing ListenerSets (its `allowedListeners` removed) loses its
/// `attachedListenerSets`, and its set is `NotAllowed`. Found against the real API server: the
/// writer's merge patch left the count out, which keeps it, so the Gateway said 1 for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_that_stops_allowing_listener_sets_loses_their_count() {
    let mut objs = base();
    objs.extend(listener_set_world());
    let c = start_objects(objs, &[]).await;
    let count = |c: &Case| {
        c.get(Kind::Gateway, INFRA, "open-gateway")["status"]["attachedListenerSets"].clone()
    };
    c.must("one set attached", |c| match count(c).as_i64() {
        Some(1) => Ok(()),
        n => Err(format!("attachedListenerSets {n:?}")),
    })
    .await;
    c.update(Kind::Gateway, INFRA, "open-gateway", |o| {
        o["spec"]
            .as_object_mut()
            .unwrap()
            .remove("allowedListeners");
    });
    c.must("the set NotAllowed", |c| {
        let s = c.get(Kind::ListenerSet, SET_NS, "team");
        conditions_match(
            &[("Accepted", "False", "NotAllowed")],
            &s["status"]["conditions"],
        )
    })
    .await;
    c.must("no count of sets on the Gateway", |c| match count(c) {
        Value::Null => Ok(()),
        n => Err(format!("attachedListenerSets {n}")),
    })
    .await;
}

// === BackendTLSPolicy ===

/// A Service of `INFRA` with an HTTPS port, an HTTPRoute of `same-namespace` to it, and a
/// ConfigMap `web-ca` whose `ca.crt` is a PEM certificate (self-signed, as a private CA's).
fn policy_world() -> Vec<Value> {
    let ca = rcgen::generate_simple_self_signed(vec!["web.example.com".to_string()]).unwrap();
    let mut objs = base();
    objs.extend([
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "tls-web", "namespace": INFRA},
               "spec": {"clusterIP": "10.96.0.200",
                        "ports": [{"name": "https", "port": 443, "protocol": "TCP"}]}}),
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
               "metadata": {"name": "tls-web", "namespace": INFRA},
               "spec": {"parentRefs": [{"name": SAME_NAMESPACE.1}],
                        "rules": [{"backendRefs": [{"name": "tls-web", "port": 443}]}]}}),
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "web-ca", "namespace": INFRA},
               "data": {"ca.crt": ca.cert.pem()}}),
    ]);
    objs
}

/// A BackendTLSPolicy on the whole Service `tls-web`, verifying with the CA of ConfigMap
/// `config_map`, created at `created` (what decides which of two policies applies).
fn backend_tls_policy(name: &str, config_map: &str, created: &str) -> Value {
    json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "BackendTLSPolicy",
           "metadata": {"name": name, "namespace": INFRA, "creationTimestamp": created},
           "spec": {"targetRefs": [{"group": "", "kind": "Service", "name": "tls-web"}],
                    "validation": {"hostname": "web.example.com",
                                   "caCertificateRefs": [{"group": "", "kind": "ConfigMap",
                                                          "name": config_map}]}}})
}

/// The policy's `status.ancestors` entries of ours: exactly one, for `same-namespace` (group,
/// kind and namespace set), with conditions `accepted` and `resolved` of the policy's
/// generation.
fn our_ancestor(
    case: &Case,
    policy: &str,
    accepted: Cond<'_>,
    resolved: Cond<'_>,
) -> Result<(), String> {
    let p = case.get(Kind::BackendTLSPolicy, INFRA, policy);
    let ours: Vec<&Value> = p["status"]["ancestors"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|a| a["controllerName"] == CONTROLLER)
        .collect();
    let [a] = &ours[..] else {
        return Err(format!("expected one ancestor of ours: {}", p["status"]));
    };
    let gateway = json!({"group": GROUP, "kind": "Gateway", "namespace": SAME_NAMESPACE.0,
                         "name": SAME_NAMESPACE.1});
    if a["ancestorRef"] != gateway {
        return Err(format!(
            "ancestorRef {}, expected {gateway}",
            a["ancestorRef"]
        ));
    }
    latest_conditions(&p, &a["conditions"])?;
    conditions_match(&[accepted, resolved], &a["conditions"])
}

/// A policy on a Service an HTTPRoute of our Gateway reaches, with a CA ConfigMap holding a
/// certificate, names that Gateway in `status.ancestors`, ours alone, Accepted and
/// ResolvedRefs, of its generation; a spec change is decided again (a ConfigMap that does not
/// exist: both False, with the reasons the spec gives for it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backendtlspolicy_status_names_our_gateway_as_its_ancestor() {
    let mut objs = policy_world();
    objs.push(backend_tls_policy(
        "web-tls",
        "web-ca",
        "2026-01-01T00:00:00Z",
    ));
    let c = start_objects(objs, &[]).await;
    c.must("the policy Accepted, its references resolved", |c| {
        our_ancestor(
            c,
            "web-tls",
            ("Accepted", "True", "Accepted"),
            ("ResolvedRefs", "True", "ResolvedRefs"),
        )
    })
    .await;
    let p = c.get(Kind::BackendTLSPolicy, INFRA, "web-tls");
    assert_eq!(
        p["status"]["ancestors"].as_array().map(Vec::len),
        Some(1),
        "{}",
        p["status"]
    );
    c.update(Kind::BackendTLSPolicy, INFRA, "web-tls", |o| {
        o["spec"]["validation"]["caCertificateRefs"][0]["name"] = json!("no-such-ca")
    });
    c.must("the changed policy decided again", |c| {
        our_ancestor(
            c,
            "web-tls",
            ("Accepted", "False", "NoValidCACertificate"),
            ("ResolvedRefs", "False", "InvalidCACertificateRef"),
        )
    })
    .await;
}

/// A policy whose only CA ConfigMap does not exist: `Accepted: False` (NoValidCACertificate)
/// and `ResolvedRefs: False` (InvalidCACertificateRef), as upstream's
/// BackendTLSPolicyInvalidCACertificateRef expects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backendtlspolicy_naming_a_missing_configmap_is_not_accepted() {
    let mut objs = policy_world();
    objs.push(backend_tls_policy(
        "web-tls",
        "nonexistent-ca-certificate",
        "2026-01-01T00:00:00Z",
    ));
    let c = start_objects(objs, &[]).await;
    c.must("NoValidCACertificate, InvalidCACertificateRef", |c| {
        our_ancestor(
            c,
            "web-tls",
            ("Accepted", "False", "NoValidCACertificate"),
            ("ResolvedRefs", "False", "InvalidCACertificateRef"),
        )
    })
    .await;
}

/// Two policies on the same Service: the older applies (Accepted), the newer is
/// `Accepted: False`, reason Conflicted; by age, not by name (the newer sorts first).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_two_backendtlspolicies_on_a_service_the_newer_is_conflicted() {
    let mut objs = policy_world();
    objs.push(backend_tls_policy(
        "z-older",
        "web-ca",
        "2026-01-01T00:00:00Z",
    ));
    objs.push(backend_tls_policy(
        "a-newer",
        "web-ca",
        "2026-01-02T00:00:00Z",
    ));
    let c = start_objects(objs, &[]).await;
    c.must("the older Accepted", |c| {
        our_ancestor(
            c,
            "z-older",
            ("Accepted", "True", "Accepted"),
            ("ResolvedRefs", "True", "ResolvedRefs"),
        )
    })
    .await;
    c.must("the newer Conflicted", |c| {
        our_ancestor(
            c,
            "a-newer",
            ("Accepted", "False", "Conflicted"),
            ("ResolvedRefs", "True", "ResolvedRefs"),
        )
    })
    .await;
}

/// Another controller's entry in `status.ancestors` (for the same Gateway: the entries are
/// keyed by ancestorRef and controllerName together) is kept beside ours; a settled status is
/// not written again; once no route of ours reaches the policy's Service, our entry goes and
/// theirs stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_controllers_ancestors_are_kept_and_ours_go_when_no_route_reaches_the_policy() {
    let theirs = json!({
        "ancestorRef": {"group": GROUP, "kind": "Gateway", "namespace": INFRA,
                        "name": SAME_NAMESPACE.1},
        "controllerName": "example.com/other-controller",
        "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted", "message": "",
                        "observedGeneration": 1, "lastTransitionTime": "2026-01-01T00:00:00Z"}],
    });
    let mut objs = policy_world();
    let mut policy = backend_tls_policy("web-tls", "web-ca", "2026-01-01T00:00:00Z");
    policy["status"] = json!({"ancestors": [theirs.clone()]});
    objs.push(policy);
    let c = start_objects(objs, &[]).await;
    let kept = |c: &Case| {
        let p = c.get(Kind::BackendTLSPolicy, INFRA, "web-tls");
        let ancestors = p["status"]["ancestors"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if ancestors.first() != Some(&theirs) {
            return Err(format!("their entry changed, moved or went: {ancestors:?}"));
        }
        Ok(ancestors.len())
    };
    c.must("ours beside theirs", |c| {
        kept(c)?;
        our_ancestor(
            c,
            "web-tls",
            ("Accepted", "True", "Accepted"),
            ("ResolvedRefs", "True", "ResolvedRefs"),
        )
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = c.api.status_requests(Kind::BackendTLSPolicy);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        c.api.status_requests(Kind::BackendTLSPolicy),
        before,
        "written again with nothing changed"
    );
    // The route goes elsewhere: no Gateway of ours reaches the Service any more.
    c.update(Kind::HTTPRoute, INFRA, "tls-web", |o| {
        o["spec"]["rules"][0]["backendRefs"][0]["name"] = json!("infra-backend-v1");
        o["spec"]["rules"][0]["backendRefs"][0]["port"] = json!(8080);
    });
    c.must("ours gone, theirs kept", |c| match kept(c)? {
        1 => Ok(()),
        n => Err(format!("{n} ancestors, expected theirs alone")),
    })
    .await;
}

/// A cluster without the BackendTLSPolicy CRD (before v1.4): the other kinds' status is
/// written, nothing is asked of the missing kind but its list, quietly (no warning, no failing
/// watch or write); once the CRD is installed and a policy applied, its status is written
/// within the slow retry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_backendtlspolicy_crd_the_rest_is_written_and_it_is_picked_up_later() {
    let api = FakeApi::start().await;
    api.set_kind_installed(Kind::BackendTLSPolicy, false);
    let c = start_on(api, policy_world(), &[]);
    c.must("the HTTPRoute Accepted", |c| {
        route_condition(
            &c.get(Kind::HTTPRoute, INFRA, "tls-web"),
            SAME_NAMESPACE,
            ("Accepted", "True", "Accepted"),
        )
    })
    .await;
    assert!(
        c.api.absent_answers(Kind::BackendTLSPolicy) > 0,
        "never looked for"
    );
    assert_eq!(c.api.status_requests(Kind::BackendTLSPolicy), 0);
    let log = c.sy.stderr();
    assert_eq!(
        log.matches("the BackendTLSPolicy CRD (v1, Gateway API v1.4 and later) is not installed")
            .count(),
        1,
        "one info line: {log}"
    );
    for wrong in [
        "the Gateway API CRDs are not installed",
        "cannot watch",
        "write failed",
        "WARN",
        "ERROR",
    ] {
        assert!(!log.contains(wrong), "{wrong:?} in the log: {log}");
    }
    c.api.set_kind_installed(Kind::BackendTLSPolicy, true);
    c.api.apply(backend_tls_policy(
        "web-tls",
        "web-ca",
        "2026-01-01T00:00:00Z",
    ));
    // The source and the writer each look again within 15 s (jittered by up to a quarter).
    c.must_within(
        "the policy's status once its CRD is there",
        Duration::from_secs(40),
        |c| {
            our_ancestor(
                c,
                "web-tls",
                ("Accepted", "True", "Accepted"),
                ("ResolvedRefs", "True", "ResolvedRefs"),
            )
        },
    )
    .await;
}

/// A route Accepted by `same-namespace` with a ResolvedRefs condition `cond`.
async fn accepted_with_refs(case: &str, route: &str, cond: Cond<'_>) {
    let c = start(case).await;
    let route = (INFRA, route);
    c.must("GatewayAndHTTPRoutesMustBeAccepted", |c| {
        accepted(c, route, SAME_NAMESPACE)
    })
    .await;
    c.must("HTTPRouteMustHaveCondition", |c| {
        route_condition(
            &c.get(Kind::HTTPRoute, route.0, route.1),
            SAME_NAMESPACE,
            cond,
        )
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn httproute_invalid_nonexistent_backendref() {
    accepted_with_refs(
        "httproute-invalid-nonexistent-backendref",
        "invalid-nonexistent-backend-ref",
        ("ResolvedRefs", "False", "BackendNotFound"),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn httproute_invalid_backendref_unknown_kind() {
    accepted_with_refs(
        "httproute-invalid-backendref-unknown-kind",
        "invalid-backend-ref-unknown-kind",
        ("ResolvedRefs", "False", "InvalidKind"),
    )
    .await;
}

/// switchyard's own (no upstream case uses `RegularExpression`): a rule whose pattern does
/// not compile, or that holds a filter switchyard does not offer, is dropped as the spec's
/// `PartiallyInvalid` says (the route stays Accepted, the message starts "Dropped Rule"); a
/// route with no valid rule left is not Accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn httproute_invalid_regular_expression() {
    let route = |name: &str, rules: Value| {
        json!({
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "HTTPRoute",
            "metadata": {"name": name, "namespace": INFRA},
            "spec": {"parentRefs": [{"name": "same-namespace"}], "rules": rules},
        })
    };
    let backend = json!([{"name": "infra-backend-v1", "port": 8080}]);
    let bad = json!({"path": {"type": "RegularExpression", "value": "/(unclosed"}});
    let c = start_with("httproute-simple-same-namespace", |objs| {
        objs.push(route(
            "regex-partly",
            json!([
                {"matches": [{"path": {"type": "RegularExpression", "value": "/ok/.*"}}],
                 "backendRefs": backend},
                {"matches": [bad], "backendRefs": backend},
            ]),
        ));
        objs.push(route(
            "regex-wholly",
            json!([{"matches": [bad], "backendRefs": backend}]),
        ));
        // A filter switchyard does not offer (a URLRewrite on a backendRef) drops its rule
        // alone, the same way.
        objs.push(route(
            "filter-partly",
            json!([
                {"matches": [{"path": {"type": "PathPrefix", "value": "/ok"}}],
                 "backendRefs": backend},
                {"backendRefs": [{"name": "infra-backend-v1", "port": 8080, "filters": [
                    {"type": "URLRewrite", "urlRewrite": {"hostname": "b.example"}}
                ]}]},
            ]),
        ));
    })
    .await;
    c.must("unsupported filter: accepted, PartiallyInvalid", |c| {
        accepted(c, (INFRA, "filter-partly"), SAME_NAMESPACE)?;
        let r = c.get(Kind::HTTPRoute, INFRA, "filter-partly");
        route_condition(
            &r,
            SAME_NAMESPACE,
            ("PartiallyInvalid", "True", "UnsupportedValue"),
        )
    })
    .await;
    c.must("partly invalid: accepted", |c| {
        accepted(c, (INFRA, "regex-partly"), SAME_NAMESPACE)
    })
    .await;
    c.must("partly invalid: PartiallyInvalid", |c| {
        let r = c.get(Kind::HTTPRoute, INFRA, "regex-partly");
        route_condition(
            &r,
            SAME_NAMESPACE,
            ("PartiallyInvalid", "True", "UnsupportedValue"),
        )?;
        let message = parents_for(&r, SAME_NAMESPACE)[0]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "PartiallyInvalid")
            .and_then(|c| c["message"].as_str())
            .unwrap_or_default()
            .to_string();
        if message.starts_with("Dropped Rule 1: path regular expression") {
            Ok(())
        } else {
            Err(format!("message {message:?}"))
        }
    })
    .await;
    c.must("wholly invalid: not accepted", |c| {
        route_condition(
            &c.get(Kind::HTTPRoute, INFRA, "regex-wholly"),
            SAME_NAMESPACE,
            ("Accepted", "False", "UnsupportedValue"),
        )
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn httproute_invalid_cross_namespace_backend_ref() {
    accepted_with_refs(
        "httproute-invalid-cross-namespace-backend-ref",
        "invalid-cross-namespace-backend-ref",
        ("ResolvedRefs", "False", "RefNotPermitted"),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn httproute_invalid_reference_grant() {
    accepted_with_refs(
        "httproute-invalid-reference-grant",
        "reference-grant",
        ("ResolvedRefs", "False", "RefNotPermitted"),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn httproute_partially_invalid_via_invalid_reference_grant() {
    accepted_with_refs(
        "httproute-partially-invalid-via-invalid-reference-grant",
        "invalid-reference-grant",
        ("ResolvedRefs", "False", "RefNotPermitted"),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn httproute_invalid_cross_namespace_parent_ref() {
    let c = start("httproute-invalid-cross-namespace-parent-ref").await;
    let route = (
        "gateway-conformance-web-backend",
        "invalid-cross-namespace-parent-ref",
    );
    c.must("HTTPRouteMustHaveResolvedRefsConditionsTrue", |c| {
        route_condition(
            &c.get(Kind::HTTPRoute, route.0, route.1),
            SAME_NAMESPACE,
            ("ResolvedRefs", "True", ""),
        )
    })
    .await;
    c.must("Accepted False NotAllowedByListeners", |c| {
        route_condition(
            &c.get(Kind::HTTPRoute, route.0, route.1),
            SAME_NAMESPACE,
            ("Accepted", "False", "NotAllowedByListeners"),
        )
    })
    .await;
    no_accepted_parents(&c, route).await;
    c.must("GatewayMustHaveZeroRoutes", |c| {
        zero_routes(c, SAME_NAMESPACE)
    })
    .await;
}

/// A route whose parentRef matches no listener of the Gateway `gw` (in the infra namespace).
async fn no_matching_parent(case: &str, route: &str, gw: &str) {
    let c = start(case).await;
    let (route, gw) = ((INFRA, route), (INFRA, gw));
    c.must("Accepted False NoMatchingParent", |c| {
        route_condition(
            &c.get(Kind::HTTPRoute, route.0, route.1),
            gw,
            ("Accepted", "False", "NoMatchingParent"),
        )
    })
    .await;
    no_accepted_parents(&c, route).await;
    c.must("GatewayMustHaveZeroRoutes", |c| zero_routes(c, gw))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn httproute_invalid_parentref_not_matching_section_name() {
    no_matching_parent(
        "httproute-invalid-parentref-not-matching-section-name",
        "httproute-listener-not-matching-section-name",
        SAME_NAMESPACE.1,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn httproute_invalid_parentref_not_matching_listener_port() {
    no_matching_parent(
        "httproute-invalid-parentref-not-matching-listener-port",
        "httproute-listener-not-matching-route-port",
        SAME_NAMESPACE.1,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn httproute_invalid_parentref_section_name_not_matching_port() {
    no_matching_parent(
        "httproute-invalid-parentref-section-name-not-matching-port",
        "httproute-listener-section-name-not-matching-port",
        "gateway-with-one-not-matching-port-and-section-name-route",
    )
    .await;
}

// === the writer's own promises (not a conformance case) ===

/// Another controller's entry in a route's `status.parents` is kept beside ours, and once the
/// status is right nothing more is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_controllers_parents_are_kept_and_a_settled_status_is_not_rewritten() {
    let theirs = json!({
        "parentRef": {"group": GROUP, "kind": "Gateway", "name": "their-gateway", "namespace": INFRA},
        "controllerName": "example.com/other-controller",
        "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted", "message": "",
                        "observedGeneration": 1, "lastTransitionTime": "2026-01-01T00:00:00Z"}],
    });
    let route = (INFRA, "observed-generation-bump");
    let seeded = theirs.clone();
    let c = start_with("httproute-observed-generation-bump", move |objs| {
        for o in objs.iter_mut() {
            if o["kind"] == "HTTPRoute" && o["metadata"]["name"] == route.1 {
                o["status"] = json!({"parents": [seeded]});
            }
        }
    })
    .await;
    c.must("ours beside theirs", |c| {
        let r = c.get(Kind::HTTPRoute, route.0, route.1);
        let parents = r["status"]["parents"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if !parents.contains(&theirs) {
            return Err(format!("their entry changed or went: {parents:?}"));
        }
        let ours: Vec<&Value> = parents
            .iter()
            .filter(|p| p["controllerName"] == CONTROLLER)
            .collect();
        match &ours[..] {
            [p] if p["parentRef"]["name"] == SAME_NAMESPACE.1 => {
                conditions_match(&[("Accepted", "True", "Accepted")], &p["conditions"])
            }
            _ => Err(format!("expected one entry of ours: {parents:?}")),
        }
    })
    .await;
    // Settled: the Gateway is Programmed and the route Accepted; then no further writes.
    c.must("NamespacesMustBeReady", |c| namespace_ready(c, INFRA))
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = [
        c.api.status_requests(Kind::GatewayClass),
        c.api.status_requests(Kind::Gateway),
        c.api.status_requests(Kind::HTTPRoute),
    ];
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = [
        c.api.status_requests(Kind::GatewayClass),
        c.api.status_requests(Kind::Gateway),
        c.api.status_requests(Kind::HTTPRoute),
    ];
    assert_eq!(before, after, "status written again with nothing changed");
    assert!(
        before.iter().all(|n| *n > 0),
        "every kind was written: {before:?}"
    );
}

/// A judgement of the fake's objects.
type Check = dyn Fn(&FakeApi) -> Result<(), String> + Send;

/// The writer alone, in process, fed a decision by hand (so it is tested whatever translate
/// decides): it writes conditions with their times, addresses and our route parents beside
/// others', sends nothing for an unchanged decision, keeps the time of a condition whose
/// status did not change, and writes nothing while not leading.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_writer_writes_decisions_keeps_times_and_stays_quiet() {
    use std::collections::BTreeMap;
    use std::sync::Arc;
    use switchyard::control::gateway_status::GatewayStatusWriter;
    use switchyard::control::status::{Address, Limits, Publish};
    use switchyard::control::translate::gateway::api::*;
    use tokio::sync::watch;

    let api = FakeApi::start().await;
    let theirs = json!({
        "parentRef": {"group": GROUP, "kind": "Gateway", "name": "their-gateway", "namespace": INFRA},
        "controllerName": "example.com/other-controller",
        "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted", "message": "",
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}],
    });
    api.apply_all(vec![
        gateway_class(),
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": INFRA}}),
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
               "metadata": {"name": "gw", "namespace": INFRA},
               "spec": {"gatewayClassName": CLASS,
                        "listeners": [{"name": "http", "port": 80, "protocol": "HTTP"}]}}),
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
               "metadata": {"name": "r", "namespace": INFRA},
               "spec": {"parentRefs": [{"name": "gw"}]},
               "status": {"parents": [theirs.clone()]}}),
    ]);
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = kube::Config::new(format!("http://127.0.0.1:{}", api.port).parse().unwrap());
    let (desired_tx, desired_rx) = watch::channel(Arc::new(GatewayApiStatus::default()));
    let (leader_tx, leader_rx) = watch::channel(true);
    let (_stop_tx, stop_rx) = watch::channel(false);
    GatewayStatusWriter {
        client: kube::Client::try_from(config).unwrap(),
        namespace: None,
        controller_name: CONTROLLER.into(),
        publish: Some(Publish::Static(vec![
            Address::parse("127.0.0.1"),
            Address::parse("lb.example"),
        ])),
        desired: desired_rx,
        leader: leader_rx,
        limits: Limits {
            coalesce: Duration::from_millis(100),
            ..Limits::default()
        },
        metrics: Arc::new(switchyard::ops::metrics::Metrics::new()),
    }
    .spawn(stop_rx);

    let decision = |accepted: bool, generation: i64| {
        let cond = |t: &str, ok: bool| {
            Condition::new(t, ok, if ok { t } else { "Invalid" }, "", Some(generation))
        };
        Arc::new(GatewayApiStatus {
            classes: BTreeMap::from([(
                CLASS.to_string(),
                GatewayClassStatus {
                    conditions: vec![cond("Accepted", accepted)],
                },
            )]),
            gateways: BTreeMap::from([(
                (INFRA.to_string(), "gw".to_string()),
                GatewayStatus {
                    addresses: vec![],
                    conditions: vec![cond("Accepted", true), cond("Programmed", true)],
                    listeners: vec![ListenerStatus {
                        name: "http".into(),
                        supported_kinds: vec![RouteGroupKind {
                            group: Some(GROUP.into()),
                            kind: "HTTPRoute".into(),
                        }],
                        attached_routes: 1,
                        conditions: vec![cond("Accepted", true)],
                    }],
                    attached_listener_sets: None,
                },
            )]),
            http_routes: BTreeMap::from([(
                (INFRA.to_string(), "r".to_string()),
                std::sync::Arc::new(RouteStatus {
                    parents: vec![RouteParentStatus {
                        parent_ref: ParentReference {
                            group: Some(GROUP.into()),
                            kind: Some("Gateway".into()),
                            name: "gw".into(),
                            ..Default::default()
                        },
                        controller_name: CONTROLLER.into(),
                        conditions: vec![cond("Accepted", true)],
                    }],
                }),
            )]),
            own_addresses: false,
            ..Default::default()
        })
    };
    let wait = |what: &'static str, check: Box<Check>| {
        let api = &api;
        async move {
            let start = Instant::now();
            loop {
                match check(api) {
                    Ok(()) => return,
                    Err(e) if start.elapsed() > TIMEOUT => panic!("{what}: {e}"),
                    Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                }
            }
        }
    };
    let class_accepted = |api: &FakeApi| {
        let c = api.object(Kind::GatewayClass, "", CLASS).unwrap();
        c["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Accepted")
            .cloned()
            .unwrap()
    };
    // The CRD's default status (Accepted Unknown, 1970) is there before anything is written.
    assert_eq!(class_accepted(&api)["status"], "Unknown");
    desired_tx.send(decision(true, 1)).unwrap();
    wait(
        "everything written",
        Box::new(move |api| {
            let c = class_accepted(api);
            if c["status"] != "True" {
                return Err(format!("class: {c}"));
            }
            let g = api.object(Kind::Gateway, INFRA, "gw").unwrap();
            let want = json!([{"type": "IPAddress", "value": "127.0.0.1"},
                              {"type": "Hostname", "value": "lb.example"}]);
            if g["status"]["addresses"] != want
                || g["status"]["listeners"][0]["attachedRoutes"] != 1
            {
                return Err(format!("gateway: {}", g["status"]));
            }
            let r = api.object(Kind::HTTPRoute, INFRA, "r").unwrap();
            let parents = r["status"]["parents"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            if parents.len() != 2
                || parents[0] != theirs
                || parents[1]["controllerName"] != CONTROLLER
            {
                return Err(format!("route: {parents:?}"));
            }
            Ok(())
        }),
    )
    .await;
    let first = class_accepted(&api);
    let set_at = first["lastTransitionTime"].as_str().unwrap().to_string();
    assert_ne!(
        set_at, "1970-01-01T00:00:00Z",
        "a changed condition gets the time of the write"
    );
    assert!(set_at.len() == 20 && set_at.ends_with('Z'), "{set_at}");

    // The same decision again: not a request.
    let requests =
        || [Kind::GatewayClass, Kind::Gateway, Kind::HTTPRoute].map(|k| api.status_requests(k));
    let before = requests();
    desired_tx.send(decision(true, 1)).unwrap();
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(before, requests(), "an unchanged decision is written again");

    // A new generation, same status: the time stays, observedGeneration moves.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    desired_tx.send(decision(true, 2)).unwrap();
    wait(
        "observedGeneration 2",
        Box::new(move |api| {
            let c = class_accepted(api);
            (c["observedGeneration"] == 2)
                .then_some(())
                .ok_or(c.to_string())
        }),
    )
    .await;
    assert_eq!(class_accepted(&api)["lastTransitionTime"], json!(set_at));

    // Not leading: nothing is written.
    leader_tx.send(false).unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = requests();
    desired_tx.send(decision(false, 3)).unwrap();
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(before, requests(), "a follower wrote status");
    assert_eq!(class_accepted(&api)["status"], "True");
    // Leading again: the pending decision is written, with a new time (status changed).
    leader_tx.send(true).unwrap();
    wait(
        "written after taking over",
        Box::new(move |api| {
            let c = class_accepted(api);
            (c["status"] == "False" && c["observedGeneration"] == 3)
                .then_some(())
                .ok_or(c.to_string())
        }),
    )
    .await;
    assert_ne!(
        class_accepted(&api)["lastTransitionTime"],
        json!(set_at),
        "a condition whose status changed keeps its old time"
    );
}

/// Waits until `check` passes on the fake, up to `limit`; panics with its last complaint.
async fn wait_for(
    api: &FakeApi,
    what: &str,
    limit: Duration,
    check: impl Fn(&FakeApi) -> Result<(), String>,
) {
    let start = Instant::now();
    loop {
        match check(api) {
            Ok(()) => return,
            Err(e) if start.elapsed() > limit => panic!("{what}: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// The writer alone, in process, fed a decision by hand (whatever translate decides): a
/// TCPRoute gets our parent entry beside another controller's, as an HTTPRoute does; while the
/// TLSRoute CRD is not installed (older CRDs) nothing is written to TLSRoutes and the other
/// kinds are written, and once it is, the TLSRoute's entry is written within the slow retry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_writer_writes_tcp_and_tls_routes_and_waits_for_a_kind_not_served() {
    use std::collections::BTreeMap;
    use std::sync::Arc;
    use switchyard::control::gateway_status::GatewayStatusWriter;
    use switchyard::control::status::Limits;
    use switchyard::control::translate::gateway::api::*;
    use tokio::sync::watch;

    let api = FakeApi::start().await;
    api.set_kind_installed(Kind::TLSRoute, false);
    let theirs = json!({
        "parentRef": {"group": GROUP, "kind": "Gateway", "name": "their-gateway", "namespace": INFRA},
        "controllerName": "example.com/other-controller",
        "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted", "message": "",
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}],
    });
    let route = |kind: &str, name: &str, status: Option<&Value>| {
        let mut r = json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": kind,
               "metadata": {"name": name, "namespace": INFRA},
               "spec": {"parentRefs": [{"name": "gw"}],
                        "rules": [{"backendRefs": [{"name": "tcp-backend", "port": 3000}]}]}});
        if let Some(s) = status {
            r["status"] = json!({"parents": [s]});
        }
        r
    };
    api.apply_all(vec![
        gateway_class(),
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": INFRA}}),
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
               "metadata": {"name": "gw", "namespace": INFRA},
               "spec": {"gatewayClassName": CLASS,
                        "listeners": [{"name": "tcp", "port": 9300, "protocol": "TCP"}]}}),
        route("HTTPRoute", "r", None),
        route("TCPRoute", "r", Some(&theirs)),
    ]);
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = kube::Config::new(format!("http://127.0.0.1:{}", api.port).parse().unwrap());
    let ours = Arc::new(RouteStatus {
        parents: vec![RouteParentStatus {
            parent_ref: ParentReference {
                group: Some(GROUP.into()),
                kind: Some("Gateway".into()),
                name: "gw".into(),
                ..Default::default()
            },
            controller_name: CONTROLLER.into(),
            conditions: vec![
                Condition::new("Accepted", true, "Accepted", "", Some(1)),
                Condition::new("ResolvedRefs", true, "ResolvedRefs", "", Some(1)),
            ],
        }],
    });
    let key = (INFRA.to_string(), "r".to_string());
    // One name for the three kinds: three objects, each with its own status.
    let decision = GatewayApiStatus {
        http_routes: BTreeMap::from([(key.clone(), ours.clone())]),
        tcp_routes: BTreeMap::from([(key.clone(), ours.clone())]),
        tls_routes: BTreeMap::from([(key, ours)]),
        ..Default::default()
    };
    let (desired_tx, desired_rx) = watch::channel(Arc::new(GatewayApiStatus::default()));
    let (_leader_tx, leader_rx) = watch::channel(true);
    let (_stop_tx, stop_rx) = watch::channel(false);
    GatewayStatusWriter {
        client: kube::Client::try_from(config).unwrap(),
        namespace: None,
        controller_name: CONTROLLER.into(),
        publish: None,
        desired: desired_rx,
        leader: leader_rx,
        limits: Limits {
            coalesce: Duration::from_millis(100),
            ..Limits::default()
        },
        metrics: Arc::new(switchyard::ops::metrics::Metrics::new()),
    }
    .spawn(stop_rx);
    // The pipeline's first publication (the channel's initial value means "nothing yet").
    desired_tx.send(Arc::new(decision)).unwrap();

    // Ours, Accepted and ResolvedRefs, after the entries of other controllers, which are kept.
    let written = |api: &FakeApi, kind: Kind, others: &[&Value]| -> Result<(), String> {
        let r = api.object(kind, INFRA, "r").ok_or(format!("no {kind:?}"))?;
        let parents = r["status"]["parents"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let (ours, rest) = parents.split_at(parents.len().saturating_sub(1));
        let [p] = rest else {
            return Err(format!("{kind:?}: no parents"));
        };
        if ours.iter().collect::<Vec<_>>() != others
            || p["controllerName"] != CONTROLLER
            || p["parentRef"]["name"] != "gw"
        {
            return Err(format!("{kind:?}: {parents:?}"));
        }
        conditions_match(
            &[
                ("Accepted", "True", "Accepted"),
                ("ResolvedRefs", "True", "ResolvedRefs"),
            ],
            &p["conditions"],
        )
    };
    wait_for(
        &api,
        "the HTTPRoute and the TCPRoute written",
        TIMEOUT,
        |api| {
            written(api, Kind::HTTPRoute, &[])?;
            written(api, Kind::TCPRoute, &[&theirs])
        },
    )
    .await;
    assert!(
        api.absent_answers(Kind::TLSRoute) > 0,
        "TLSRoutes not looked for"
    );
    assert_eq!(api.status_requests(Kind::TLSRoute), 0);
    // The CRD installed and a TLSRoute created: found at the next look (15 s, jittered by up to
    // a quarter) and written.
    api.set_kind_installed(Kind::TLSRoute, true);
    api.apply(route("TLSRoute", "r", None));
    wait_for(
        &api,
        "the TLSRoute written once its CRD is there",
        Duration::from_secs(25),
        |api| written(api, Kind::TLSRoute, &[]),
    )
    .await;
    assert_eq!(
        api.status_writes(Kind::TCPRoute),
        (1, 1),
        "the TCPRoute was written once"
    );
}

// === CRDs absent ===

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_crds_services_are_served_and_the_gateway_api_is_picked_up_later() {
    let backend = Backend::start("web").await;
    let api = FakeApi::start_reaching_local_backends().await;
    api.set_gateway_api_installed(false);
    api.apply(service("web", &[]));
    api.apply(slice("web", "web-1", backend.port, true, true, false));
    let sy = api.spawn_switchyard(&["--gateway-http-port", "80"], "info");
    // Services are served although every Gateway API list answers 404.
    let served = common::eventually(TIMEOUT, || async {
        try_request(sy.http_port, "GET", "/web", &[])
            .await
            .is_ok_and(|r| r.status == 200)
    })
    .await;
    assert!(served, "Service not served: {}", sy.stderr());
    assert!(
        api.absent_answers(Kind::HTTPRoute) > 0,
        "the route list was tried"
    );
    // Looked for again at its own, slow interval, not at the watch backoff (which would make
    // two or three tries in 3 s for each of the two watchers: the source and the status writer).
    let tries = api.absent_answers(Kind::HTTPRoute);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        api.absent_answers(Kind::HTTPRoute) <= tries + 2,
        "retried too often: {} then {}",
        tries,
        api.absent_answers(Kind::HTTPRoute)
    );
    let log = sy.stderr();
    assert_eq!(
        log.matches("the Gateway API CRDs are not installed")
            .count(),
        1,
        "one warning for the four kinds: {log}"
    );
    assert!(
        !log.contains("cannot watch"),
        "a missing CRD is not a failing watch: {log}"
    );
    // The CRDs arrive with a class, a Gateway and a route: the route is served within the
    // retry interval (15 s, jittered by up to a quarter).
    api.set_gateway_api_installed(true);
    api.apply_all(vec![
        gateway_class(),
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
               "metadata": {"name": "gw", "namespace": "default"},
               "spec": {"gatewayClassName": CLASS,
                        "listeners": [{"name": "http", "port": 80, "protocol": "HTTP"}]}}),
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
               "metadata": {"name": "r", "namespace": "default"},
               "spec": {"parentRefs": [{"name": "gw"}], "hostnames": ["route.example"],
                        "rules": [{"backendRefs": [{"name": "web", "port": 80}]}]}}),
    ]);
    let routed = common::eventually(Duration::from_secs(25), || async {
        try_request(sy.http_port, "GET", "/", &[("Host", "route.example")])
            .await
            .is_ok_and(|r| r.status == 200)
    })
    .await;
    assert!(routed, "HTTPRoute not served: {}", sy.stderr());
    assert!(
        sy.stderr().contains("the Gateway API CRDs are installed"),
        "{}",
        sy.stderr()
    );
    // The CRDs deleted: their objects go, the route stops, the Service stays. Each kind's
    // watcher sees its deletions on its own: while the route is gone but the Gateway is not,
    // its listener (no hostname) still takes every host and answers `/web` 404, so the end
    // state is waited for, not the first request after the route goes.
    api.set_gateway_api_installed(false);
    let last = std::sync::Mutex::new(None);
    let settled = common::eventually(Duration::from_secs(10), || {
        let last = &last;
        async move {
            let route = try_request(sy.http_port, "GET", "/", &[("Host", "route.example")])
                .await
                .map(|r| r.status);
            let web = try_request(sy.http_port, "GET", "/web", &[])
                .await
                .map(|r| r.status);
            let ok = matches!((&route, &web), (Ok(404), Ok(200)));
            *last.lock().unwrap() = Some((route, web));
            ok
        }
    })
    .await;
    assert!(
        settled,
        "without its CRD the HTTPRoute must answer 404 and the Service 200, got {:?}: {}",
        last.lock().unwrap(),
        sy.stderr()
    );
}

// === not upstream cases: switchyard's own conditions ===

/// A Gateway of ours in `INFRA` with one HTTPS listener for `secure.test` naming `secret`,
/// asking for `addresses`.
fn https_gateway(name: &str, secret: &str, addresses: &[&str]) -> Value {
    json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
           "metadata": {"name": name, "namespace": INFRA},
           "spec": {"gatewayClassName": CLASS,
                    "addresses": addresses.iter()
                        .map(|a| json!({"type": "IPAddress", "value": a}))
                        .collect::<Vec<_>>(),
                    "listeners": [{"name": "https", "port": 443, "protocol": "HTTPS",
                                   "hostname": "secure.test",
                                   "tls": {"certificateRefs": [{"name": secret}]}}]}})
}

fn listener_conditions(case: &Case, gw: &str, conditions: &[Cond<'_>]) -> Result<(), String> {
    let g = case.get(Kind::Gateway, INFRA, gw);
    conditions_match(conditions, &g["status"]["listeners"][0]["conditions"])
}

/// Two Gateways sharing the address space whose HTTPS listeners give one hostname different
/// certificates: the first (oldest, then by namespace/name) keeps it, the other's listener
/// says `Conflicted: True` (`HostnameConflict`) and its Gateway `ListenersNotValid`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateways_giving_one_hostname_other_certificates_report_the_conflict() {
    let mut objs = base();
    objs.push(tls_secret(INFRA, "cert-a", &["secure.test"]));
    objs.push(tls_secret(INFRA, "cert-b", &["secure.test"]));
    objs.push(https_gateway("gw-a", "cert-a", &[]));
    objs.push(https_gateway("gw-b", "cert-b", &[]));
    let case = start_objects(objs, &[]).await;
    case.must("the second Gateway's listener is conflicted", |c| {
        listener_conditions(
            c,
            "gw-b",
            &[
                ("Conflicted", "True", "HostnameConflict"),
                ("Accepted", "True", "Accepted"),
                ("ResolvedRefs", "True", "ResolvedRefs"),
            ],
        )?;
        let g = c.get(Kind::Gateway, INFRA, "gw-b");
        conditions_match(
            &[("Accepted", "True", "ListenersNotValid")],
            &g["status"]["conditions"],
        )
    })
    .await;
    case.must("the first Gateway's is not", |c| {
        listener_conditions(c, "gw-a", &[("Conflicted", "False", "NoConflicts")])?;
        let g = c.get(Kind::Gateway, INFRA, "gw-a");
        conditions_match(
            &[("Accepted", "True", "Accepted")],
            &g["status"]["conditions"],
        )
    })
    .await;
    let g = case.get(Kind::Gateway, INFRA, "gw-b");
    let message = g["status"]["listeners"][0]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Conflicted")
        .unwrap()["message"]
        .to_string();
    assert!(message.contains(&format!("{INFRA}/gw-a")), "{message}");
}

/// With `--gateway-addresses`, no conflict (each Gateway has its own addresses), a Gateway
/// asking for several addresses gets them all in its status, and one asking for an address
/// outside the pool beside a free one gets none: `Programmed: False` (`AddressNotUsable`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_with_several_addresses_lists_them_all() {
    let mut objs = base();
    objs.push(tls_secret(INFRA, "cert-a", &["secure.test"]));
    objs.push(tls_secret(INFRA, "cert-b", &["secure.test"]));
    objs.push(https_gateway("gw-a", "cert-a", &["127.0.0.4", "127.0.0.2"]));
    objs.push(https_gateway("gw-b", "cert-b", &["127.0.0.3", "10.9.9.9"]));
    let case = start_objects(
        objs,
        &["--gateway-addresses", "127.0.0.2,127.0.0.3,127.0.0.4"],
    )
    .await;
    case.must("gw-a has both addresses", |c| {
        let g = c.get(Kind::Gateway, INFRA, "gw-a");
        let want = json!([{"type": "IPAddress", "value": "127.0.0.4"},
                          {"type": "IPAddress", "value": "127.0.0.2"}]);
        if g["status"]["addresses"] != want {
            return Err(format!("addresses: {}", g["status"]["addresses"]));
        }
        conditions_match(
            &[
                ("Accepted", "True", "Accepted"),
                ("Programmed", "True", "Programmed"),
            ],
            &g["status"]["conditions"],
        )?;
        listener_conditions(c, "gw-a", &[("Conflicted", "False", "NoConflicts")])
    })
    .await;
    case.must("gw-b has none", |c| {
        let g = c.get(Kind::Gateway, INFRA, "gw-b");
        if g["status"]["addresses"]
            .as_array()
            .is_some_and(|a| !a.is_empty())
        {
            return Err(format!("addresses: {}", g["status"]["addresses"]));
        }
        conditions_match(
            &[("Programmed", "False", "AddressNotUsable")],
            &g["status"]["conditions"],
        )?;
        listener_conditions(c, "gw-b", &[("Programmed", "False", "Invalid")])
    })
    .await;
    let g = case.get(Kind::Gateway, INFRA, "gw-b");
    assert!(
        g["status"]["conditions"]
            .to_string()
            .contains("10.9.9.9 is not one of"),
        "{}",
        g["status"]
    );
}

/// The Gateway CRD takes at most 16 `status.addresses`: with 20 published (the suite's
/// 127.0.0.1 and 19 more), the Gateway gets 16 and the rest of its status. The fake refuses
/// 17 as the real API server (v1.32, `../shared/kube`) refused them, `Too many: 18: must
/// have at most 16 items`, and with them the whole status, for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_gets_sixteen_of_twenty_published_addresses() {
    let more: Vec<String> = (1..=19).map(|i| format!("192.0.2.{i}")).collect();
    let c = start_objects(base(), &["--publish-status-address", &more.join(",")]).await;
    c.must("16 addresses and the conditions written", |c| {
        let g = c.get(Kind::Gateway, SAME_NAMESPACE.0, SAME_NAMESPACE.1);
        let addresses = g["status"]["addresses"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if addresses.len() != 16 || addresses.iter().any(|a| a["type"] != "IPAddress") {
            return Err(format!("addresses: {}", g["status"]["addresses"]));
        }
        conditions_match(
            &[("Accepted", "True", ""), ("Programmed", "True", "")],
            &g["status"]["conditions"],
        )
    })
    .await;
    assert!(!c.sy.stderr().contains("write failed"), "{}", c.sy.stderr());
}

/// A published host name is written as the API server takes it, lower-cased: the real server
/// refused `LB.Example.com` in a Gateway's addresses (its CEL rule) and an Ingress's status
/// (`a lowercase RFC 1123 subdomain must consist of ...`), every write of every one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_published_host_name_is_written_in_lower_case() {
    let c = start_objects(base(), &["--publish-status-address", "LB.Example.com"]).await;
    c.must("the host name in lower case", |c| {
        let g = c.get(Kind::Gateway, SAME_NAMESPACE.0, SAME_NAMESPACE.1);
        let want = json!([{"type": "IPAddress", "value": "127.0.0.1"},
                          {"type": "Hostname", "value": "lb.example.com"}]);
        if g["status"]["addresses"] != want {
            return Err(format!("addresses: {}", g["status"]["addresses"]));
        }
        Ok(())
    })
    .await;
    assert!(!c.sy.stderr().contains("write failed"), "{}", c.sy.stderr());
}
