//! Keeps `deploy/` true to the code: every manifest parses into its k8s-openapi type and
//! survives a round trip unchanged (so a misspelled field fails here, not in a cluster), the
//! flags the workloads pass are flags switchyard accepts, RBAC grants exactly what the watcher,
//! the status writer and the leader election use (no wildcards), the termination grace period
//! covers the shutdown sequence, and the offline example's routing objects translate without a
//! warning.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use clap::Parser;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, PodSpec, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::{IngressClass, NetworkPolicy};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use switchyard::config::{Args, Config};
use switchyard::control::manifests::{Objects, parse_into};
use switchyard::control::translate::translate;

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy")
}

fn yaml_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        // The monitoring kit holds Prometheus operator objects and a Prometheus rules file,
        // not Kubernetes core types: tests/monitoring.rs checks it.
        if path.is_dir() && path.file_name().is_some_and(|n| n == "monitoring") {
            continue;
        }
        if path.is_dir() {
            yaml_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            out.push(path);
        }
    }
    out.sort();
}

/// Every document of every manifest under deploy/, with its file.
fn documents() -> Vec<(PathBuf, Value)> {
    let mut files = Vec::new();
    yaml_files(&deploy_dir(), &mut files);
    assert!(files.len() >= 6, "deploy/ lost files: {files:?}");
    let mut docs = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        for d in serde_yaml_ng::Deserializer::from_str(&text) {
            let v = Value::deserialize(d).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
            if !v.is_null() {
                docs.push((f.clone(), v));
            }
        }
    }
    docs
}

/// Parses into `T` and back; any field the type does not know is lost, and so detected.
fn round_trip<T: DeserializeOwned + serde::Serialize>(file: &Path, v: &Value) -> T {
    let typed: T =
        serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let back = serde_json::to_value(&typed).unwrap();
    assert_eq!(
        &back,
        v,
        "{}: a field was not understood (typo?)",
        file.display()
    );
    typed
}

#[test]
fn every_manifest_parses_into_its_type() {
    for (file, v) in documents() {
        let kind = v["kind"].as_str().unwrap_or_default().to_string();
        match kind.as_str() {
            "Namespace" => drop(round_trip::<Namespace>(&file, &v)),
            "ServiceAccount" => drop(round_trip::<ServiceAccount>(&file, &v)),
            "ClusterRole" => drop(round_trip::<ClusterRole>(&file, &v)),
            "ClusterRoleBinding" => drop(round_trip::<ClusterRoleBinding>(&file, &v)),
            "Role" => drop(round_trip::<Role>(&file, &v)),
            "RoleBinding" => drop(round_trip::<RoleBinding>(&file, &v)),
            "Deployment" => drop(round_trip::<Deployment>(&file, &v)),
            "DaemonSet" => drop(round_trip::<DaemonSet>(&file, &v)),
            "Service" => drop(round_trip::<Service>(&file, &v)),
            "ConfigMap" => drop(round_trip::<ConfigMap>(&file, &v)),
            "NetworkPolicy" => drop(round_trip::<NetworkPolicy>(&file, &v)),
            "IngressClass" => drop(round_trip::<IngressClass>(&file, &v)),
            "PodDisruptionBudget" => drop(round_trip::<PodDisruptionBudget>(&file, &v)),
            "PriorityClass" => drop(round_trip::<PriorityClass>(&file, &v)),
            "Kustomization" => {
                for r in v["resources"].as_array().unwrap() {
                    let path = file.parent().unwrap().join(r.as_str().unwrap());
                    assert!(
                        path.exists(),
                        "{}: lists missing {}",
                        file.display(),
                        path.display()
                    );
                }
            }
            other => panic!("{}: unexpected kind {other:?}", file.display()),
        }
    }
}

fn pod_specs() -> Vec<(PathBuf, PodSpec)> {
    documents()
        .into_iter()
        .filter_map(|(f, v)| match v["kind"].as_str() {
            Some("Deployment") => serde_json::from_value::<Deployment>(v)
                .ok()?
                .spec
                .template
                .spec
                .map(|s| (f, s)),
            Some("DaemonSet") => serde_json::from_value::<DaemonSet>(v)
                .ok()?
                .spec
                .template
                .spec
                .map(|s| (f, s)),
            _ => None,
        })
        .collect()
}

#[test]
fn workload_flags_parse_and_grace_period_covers_shutdown() {
    let specs = pod_specs();
    assert!(
        specs.len() >= 3,
        "Deployment, DaemonSet and the offline Deployment"
    );
    for (file, spec) in specs {
        let c = &spec.containers[0];
        let args = c.args.clone().unwrap_or_default();
        let parsed = Args::try_parse_from(std::iter::once("switchyard".to_string()).chain(args))
            .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let config = Config::from_args(parsed).unwrap();
        let grace = spec.termination_grace_period_seconds.unwrap_or(30);
        // A preStop sleep runs before SIGTERM, inside the same grace period.
        let pre_stop = c
            .lifecycle
            .as_ref()
            .and_then(|l| l.pre_stop.as_ref())
            .and_then(|h| h.sleep.as_ref())
            .map_or(0, |s| u64::try_from(s.seconds).unwrap());
        let needed = pre_stop + (config.shutdown_delay + config.shutdown_grace).as_secs();
        assert!(
            needed < u64::try_from(grace).unwrap(),
            "{}: preStop + delay + grace {needed}s must fit in terminationGracePeriodSeconds \
             {grace}",
            file.display()
        );
        // An image that says which release it is, the crate's own.
        assert_eq!(
            c.image.as_deref(),
            Some(concat!("switchyard:", env!("CARGO_PKG_VERSION"))),
            "{}",
            file.display()
        );
        let ready = c.readiness_probe.as_ref().unwrap();
        assert!(
            ready.failure_threshold.unwrap_or(3) >= 2,
            "{}: one slow probe must not take the pod out",
            file.display()
        );
        let probe = c
            .readiness_probe
            .as_ref()
            .and_then(|p| p.http_get.as_ref())
            .map(|h| h.path.clone());
        assert_eq!(probe, Some(Some("/readyz".into())), "{}", file.display());
        let live = c
            .liveness_probe
            .as_ref()
            .and_then(|p| p.http_get.as_ref())
            .map(|h| h.path.clone());
        assert_eq!(live, Some(Some("/healthz".into())), "{}", file.display());
        let sc = c.security_context.as_ref().unwrap();
        assert_eq!(
            sc.read_only_root_filesystem,
            Some(true),
            "{}",
            file.display()
        );
        assert_eq!(
            spec.security_context.as_ref().unwrap().run_as_non_root,
            Some(true)
        );
        // No capability beyond binding low ports, no way to gain more, nothing shared with
        // the node beyond the DaemonSet's host port.
        let caps = sc.capabilities.as_ref();
        let drop = caps.and_then(|c| c.drop.clone()).unwrap_or_default();
        let add = caps.and_then(|c| c.add.clone()).unwrap_or_default();
        assert_eq!(drop, ["ALL"], "{}: capabilities.drop", file.display());
        assert!(
            add.iter().all(|c| c == "NET_BIND_SERVICE"),
            "{}: capabilities.add {add:?}",
            file.display()
        );
        assert_eq!(
            sc.allow_privilege_escalation,
            Some(false),
            "{}",
            file.display()
        );
        assert_ne!(sc.privileged, Some(true), "{}", file.display());
        assert_ne!(sc.run_as_user, Some(0), "{}", file.display());
        assert_ne!(
            spec.security_context.as_ref().unwrap().run_as_user,
            Some(0),
            "{}",
            file.display()
        );
        assert_ne!(spec.host_network, Some(true), "{}", file.display());
        assert_ne!(spec.host_pid, Some(true), "{}", file.display());
        assert_ne!(spec.host_ipc, Some(true), "{}", file.display());
    }
}

/// Every Role and ClusterRole under deploy/: (file, kind, namespace, name, rules).
fn roles() -> Vec<(PathBuf, String, String, String, Vec<PolicyRule>)> {
    documents()
        .into_iter()
        .filter(|(_, v)| v["kind"] == "Role" || v["kind"] == "ClusterRole")
        .map(|(f, v)| {
            let s = |p: &Value| p.as_str().unwrap_or_default().to_string();
            (
                f,
                s(&v["kind"]),
                s(&v["metadata"]["namespace"]),
                s(&v["metadata"]["name"]),
                serde_json::from_value(v["rules"].clone()).unwrap(),
            )
        })
        .collect()
}

/// (apiGroup, resource, resourceNames, verbs): one rule each.
type Grant = (
    &'static str,
    &'static str,
    &'static [&'static str],
    &'static [&'static str],
);

const READ: &[&str] = &["get", "list", "watch"];

/// What the cluster watcher, the status writer and the Event sink use, in the watched scope.
const WATCHER: &[Grant] = &[
    ("", "services", &[], READ),
    ("discovery.k8s.io", "endpointslices", &[], READ),
    ("networking.k8s.io", "ingresses", &[], READ),
    ("", "secrets", &[], READ),
    ("", "configmaps", &[], READ),
    (
        "networking.k8s.io",
        "ingresses/status",
        &[],
        &["update", "patch"],
    ),
    ("events.k8s.io", "events", &[], &["create", "patch"]),
    (GW, "gateways", &[], READ),
    (GW, "httproutes", &[], READ),
    (GW, "grpcroutes", &[], READ),
    (GW, "tcproutes", &[], READ),
    (GW, "tlsroutes", &[], READ),
    (GW, "udproutes", &[], READ),
    (GW, "listenersets", &[], READ),
    (GW, "backendtlspolicies", &[], READ),
    (GW, "referencegrants", &[], READ),
    (GW, "gateways/status", &[], PATCH),
    (GW, "httproutes/status", &[], PATCH),
    (GW, "grpcroutes/status", &[], PATCH),
    (GW, "tcproutes/status", &[], PATCH),
    (GW, "tlsroutes/status", &[], PATCH),
    (GW, "udproutes/status", &[], PATCH),
    (GW, "listenersets/status", &[], PATCH),
    (GW, "backendtlspolicies/status", &[], PATCH),
];
const GW: &str = "gateway.networking.k8s.io";
/// The Gateway API status writer writes merge patches only.
const PATCH: &[&str] = &["patch"];
/// Cluster-scoped: read cluster-wide in both variants (Namespaces for allowedRoutes selectors),
/// and the GatewayClass status written.
const GATEWAY_CLUSTER: &[Grant] = &[
    ("", "namespaces", &[], READ),
    (GW, "gatewayclasses", &[], READ),
    (GW, "gatewayclasses/status", &[], PATCH),
];
/// IngressClasses are cluster-scoped: read cluster-wide in both variants.
const INGRESS_CLASSES: Grant = ("networking.k8s.io", "ingressclasses", &[], READ);
/// The leader election, in the controller's own namespace: create the Lease, read and renew
/// only the one named by --election-id.
const LEADER_ELECTION: &[Grant] = &[
    ("coordination.k8s.io", "leases", &[], &["create"]),
    (
        "coordination.k8s.io",
        "leases",
        &["switchyard-leader"],
        &["get", "update"],
    ),
];

fn assert_exactly(what: &str, rules: &[PolicyRule], grants: &[Grant]) {
    assert_eq!(
        rules.len(),
        grants.len(),
        "{what}: extra or missing rules {rules:#?}"
    );
    for (group, resource, names, verbs) in grants {
        let names: Option<Vec<String>> =
            (!names.is_empty()).then(|| names.iter().map(|n| n.to_string()).collect());
        let found = rules.iter().any(|r| {
            r.api_groups.as_deref() == Some(&[group.to_string()][..])
                && r.resources.as_deref() == Some(&[resource.to_string()][..])
                && r.resource_names == names
                && r.verbs == *verbs
        });
        assert!(
            found,
            "{what}: no rule {group}/{resource} {names:?} {verbs:?} in {rules:#?}"
        );
    }
}

#[test]
fn rbac_is_exactly_what_switchyard_uses_without_wildcards() {
    let roles = roles();
    let find = |kind: &str, ns: &str, name: &str| {
        roles
            .iter()
            .find(|(_, k, n, m, _)| k == kind && n == ns && m == name)
            .map(|r| r.4.clone())
            .unwrap_or_else(|| panic!("no {kind} {ns}/{name}"))
    };
    let mut cluster: Vec<Grant> = WATCHER.to_vec();
    cluster.insert(3, INGRESS_CLASSES);
    cluster.extend_from_slice(GATEWAY_CLUSTER);
    assert_exactly(
        "ClusterRole switchyard",
        &find("ClusterRole", "", "switchyard"),
        &cluster,
    );
    assert_exactly(
        "Role apps/switchyard",
        &find("Role", "apps", "switchyard"),
        WATCHER,
    );
    assert_exactly(
        "ClusterRole switchyard-ingressclasses",
        &find("ClusterRole", "", "switchyard-ingressclasses"),
        &[INGRESS_CLASSES],
    );
    assert_exactly(
        "ClusterRole switchyard-gateway-api",
        &find("ClusterRole", "", "switchyard-gateway-api"),
        GATEWAY_CLUSTER,
    );
    // The Lease only in the controller's own namespace, and never cluster-wide.
    assert_exactly(
        "Role switchyard/switchyard-leader-election",
        &find("Role", "switchyard", "switchyard-leader-election"),
        LEADER_ELECTION,
    );
    assert_eq!(roles.len(), 5, "unexpected roles: {roles:#?}");
    for (file, kind, _, name, rules) in &roles {
        for r in rules {
            let all = r
                .verbs
                .iter()
                .chain(r.resources.iter().flatten())
                .chain(r.api_groups.iter().flatten())
                .chain(r.resource_names.iter().flatten());
            for v in all {
                assert!(
                    !v.contains('*'),
                    "{}: {kind} {name}: wildcard {v:?}",
                    file.display()
                );
            }
            assert!(
                r.non_resource_urls.is_none(),
                "{}: {kind} {name}",
                file.display()
            );
        }
    }
    // Every binding names a role that exists and the switchyard ServiceAccount.
    for (file, v) in documents() {
        let kind = v["kind"].as_str().unwrap_or_default();
        if kind != "RoleBinding" && kind != "ClusterRoleBinding" {
            continue;
        }
        let ns = v["metadata"]["namespace"].as_str().unwrap_or_default();
        let role_kind = v["roleRef"]["kind"].as_str().unwrap();
        let role_ns = if role_kind == "Role" { ns } else { "" };
        let role = v["roleRef"]["name"].as_str().unwrap();
        assert!(
            roles
                .iter()
                .any(|(_, k, n, m, _)| k == role_kind && n == role_ns && m == role),
            "{}: {kind} refers to a missing {role_kind} {role}",
            file.display()
        );
        assert_eq!(
            v["subjects"],
            serde_json::json!([{"kind": "ServiceAccount", "name": "switchyard", "namespace": "switchyard"}]),
            "{}",
            file.display()
        );
    }
    // The default --election-id is the Lease the Role lets the replicas renew.
    assert_eq!(
        switchyard::control::lease::DEFAULT_ELECTION_ID,
        "switchyard-leader"
    );
}

#[test]
fn offline_configmap_routes_translate_cleanly() {
    let (_, cm) = documents()
        .into_iter()
        .find(|(_, v)| v["kind"] == "ConfigMap")
        .expect("ConfigMap");
    let routes = cm["data"]["routes.yaml"].as_str().expect("routes.yaml");
    let mut objects = Objects::default();
    parse_into(routes, Path::new("routes.yaml"), &mut objects).expect("routes parse");
    let config =
        Config::from_args(Args::try_parse_from(["switchyard", "--manifests", "x"]).unwrap())
            .unwrap();
    let (table, warnings) = translate(&objects.services, &objects.slices, &config.translate, None);
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(table.entries.len(), 1);
    assert_eq!(table.entries[0].endpoints.len(), 2);
}

/// The cluster install ships what an ingress pod needs to be served and kept: an IngressClass
/// of switchyard's controller (not the cluster default unless the user opts in), a disruption
/// budget that selects the Deployment's pods, replicas spread over nodes, and a priority
/// class that exists.
#[test]
fn the_install_ships_a_class_a_budget_spread_and_priority() {
    let docs = documents();
    let of = |kind: &str| -> Vec<Value> {
        docs.iter()
            .filter(|(f, v)| {
                v["kind"] == kind
                    && f.parent() == Some(deploy_dir().as_path())
                    && !f.ends_with("offline.yaml")
            })
            .map(|(_, v)| v.clone())
            .collect()
    };
    let classes = of("IngressClass");
    assert_eq!(classes.len(), 1);
    let class: IngressClass = serde_json::from_value(classes[0].clone()).unwrap();
    assert_eq!(
        class.spec.unwrap().controller.as_deref(),
        Some(switchyard::control::translate::DEFAULT_CONTROLLER_NAME)
    );
    assert!(
        !class
            .metadata
            .annotations
            .unwrap_or_default()
            .contains_key("ingressclass.kubernetes.io/is-default-class"),
        "the default class is the user's choice"
    );
    let deployment: Deployment = serde_json::from_value(of("Deployment")[0].clone()).unwrap();
    let labels = deployment
        .spec
        .template
        .metadata
        .as_ref()
        .unwrap()
        .labels
        .clone()
        .unwrap();
    let pdb: PodDisruptionBudget =
        serde_json::from_value(of("PodDisruptionBudget")[0].clone()).unwrap();
    let selects = pdb.spec.unwrap().selector.unwrap().match_labels.unwrap();
    assert!(
        selects.iter().all(|(k, v)| labels.get(k) == Some(v)),
        "{selects:?} against {labels:?}"
    );
    let pod = deployment.spec.template.spec.unwrap();
    let spread = pod.topology_spread_constraints.unwrap_or_default();
    assert!(
        spread
            .iter()
            .any(|t| t.topology_key == "kubernetes.io/hostname"),
        "{spread:?}"
    );
    let priority: PriorityClass = serde_json::from_value(of("PriorityClass")[0].clone()).unwrap();
    assert_eq!(pod.priority_class_name, priority.metadata.name);
    let kustomization = std::fs::read_to_string(deploy_dir().join("kustomization.yaml")).unwrap();
    for file in ["ingressclass.yaml", "pdb.yaml", "priorityclass.yaml"] {
        assert!(kustomization.contains(file), "{file} is not installed");
    }
}
