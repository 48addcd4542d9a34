//! BackendTLSPolicy: how switchyard speaks TLS to a Service's endpoints. Each policy is read
//! once per build into what it asks (the server name sent and verified, the CA bundle of its
//! ConfigMaps or the default trust for `wellKnownCACertificates: System`) or why it cannot be
//! served; the Service ports it targets then speak TLS (`upstream` in build.rs asks
//! `for_port`), and a policy that cannot be served makes them fail closed (a CA bundle that
//! never loads: 502), never speak without the verification it asks. Its status names the
//! Gateways whose routes reach its target (`ancestors`). Pure; it must not read anything but
//! the objects it is handed.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::api::*;
use super::view::{Gateways, created_at, gateway_host, sorted};
use crate::control::translate::annotations::show;
use crate::control::translate::inputs::{meta_key, object};
use crate::control::translate::trust::Trust;
use crate::control::translate::view::*;
use crate::table::upstream::CaBundle;
use crate::table::upstream::SubjectAltName;

/// What a policy makes of the ports it targets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PolicyTls {
    /// Sent as SNI and verified against the certificate.
    pub(crate) sni: Box<str>,
    /// The bundle that verifies the endpoints; `None`: the default trust
    /// (`--backend-ca-file`, else the system's roots). A bundle without PEM fails closed.
    pub(crate) ca: Option<CaBundle>,
    /// `subjectAltNames`: the names verified instead of `sni`.
    pub(crate) subject_alt_names: Option<Arc<[SubjectAltName]>>,
}

/// One policy as read.
struct Policy {
    key: ObjectKey,
    generation: Option<i64>,
    /// Age, namespace, name: of two policies on one port, the first in this order applies.
    rank: (String, String, String),
    /// Services of its namespace, and the port name (`None`: every port).
    targets: Vec<(String, Option<String>)>,
    tls: PolicyTls,
    /// `Err`: the `Accepted: False` reason and message (it then fails closed).
    accepted: Result<(), (&'static str, String)>,
    /// `Err`: the `ResolvedRefs: False` reason and message.
    resolved: Result<(), (&'static str, String)>,
    /// Another policy applies to a port it targets.
    conflicted: Option<String>,
}

/// Of one Service, per port name (`None`: every port), the index of the policy that applies.
type PortPolicies = Vec<(Option<String>, usize)>;

/// The policies of one build, by the Service they target.
#[derive(Default)]
pub(crate) struct BackendTlsPolicies {
    policies: Vec<Policy>,
    /// Namespace -> Service -> the policies that apply to its ports (looked up by `&str` for
    /// every Service port a build makes, so without allocating).
    by_service: HashMap<String, HashMap<String, PortPolicies>>,
}

impl BackendTlsPolicies {
    /// Reads `policies`, resolving their CA bundles through `trust`; warns of each that
    /// cannot be served as written.
    pub(crate) fn read(
        policies: &[&BackendTLSPolicy],
        trust: &mut Trust<'_>,
        warnings: &mut Vec<Warning>,
    ) -> BackendTlsPolicies {
        let mut out = BackendTlsPolicies::default();
        for p in sorted(policies, |p| &p.metadata) {
            let (ns, name) = meta_key(&p.metadata.namespace, &p.metadata.name);
            if name.is_empty() {
                continue;
            }
            let who = object("BackendTLSPolicy", ns, name);
            let policy = read_policy(p, (ns, name), trust);
            for (reason, outcome) in [
                ("Accepted", &policy.accepted),
                ("ResolvedRefs", &policy.resolved),
            ] {
                if let Err((why, message)) = outcome {
                    warnings.push(Warning {
                        object: who.clone(),
                        reason: WarningReason::NotServed,
                        message: format!(
                            "{reason}: False ({why}): {message}; TLS connections to its \
                             targets fail until it is corrected"
                        ),
                    });
                }
            }
            out.policies.push(policy);
        }
        // Of the policies on one Service port (or on a whole Service), the oldest applies.
        let mut claims: BTreeMap<(String, String, Option<String>), Vec<usize>> = BTreeMap::new();
        for (i, p) in out.policies.iter().enumerate() {
            for (svc, section) in &p.targets {
                claims
                    .entry((p.key.0.clone(), svc.clone(), section.clone()))
                    .or_default()
                    .push(i);
            }
        }
        for ((ns, svc, section), mut at) in claims {
            at.sort_by(|a, b| out.policies[*a].rank.cmp(&out.policies[*b].rank));
            let winner = at[0];
            for &loser in &at[1..] {
                let w = &out.policies[winner].key;
                let message = format!(
                    "Service {ns}/{svc}{} is the target of BackendTLSPolicy {}/{} (older, or \
                     first by name), which applies",
                    section
                        .as_deref()
                        .map(|s| format!(" port {s}"))
                        .unwrap_or_default(),
                    w.0,
                    w.1
                );
                let loser = &mut out.policies[loser];
                warnings.push(Warning {
                    object: object("BackendTLSPolicy", &loser.key.0, &loser.key.1),
                    reason: WarningReason::InvalidObject,
                    message: message.clone(),
                });
                loser.conflicted.get_or_insert(message);
            }
            out.by_service
                .entry(ns)
                .or_default()
                .entry(svc)
                .or_default()
                .push((section, winner));
        }
        out
    }

    /// The TLS the policy on port `port_name` of Service `namespace/service` asks: a policy
    /// naming the port first, else one on the whole Service.
    pub(crate) fn for_port(
        &self,
        namespace: &str,
        service: &str,
        port_name: Option<&str>,
    ) -> Option<&PolicyTls> {
        let on = self.by_service.get(namespace)?.get(service)?;
        let named = port_name.filter(|n| !n.is_empty()).and_then(|n| {
            on.iter()
                .find(|(s, _)| s.as_deref() == Some(n))
                .map(|(_, i)| *i)
        });
        let i = named.or_else(|| on.iter().find(|(s, _)| s.is_none()).map(|(_, i)| *i))?;
        Some(&self.policies[i].tls)
    }

    /// Each policy's status: an ancestor entry for every one of our Gateways with a route
    /// (of any kind) whose backendRef names one of its target Services.
    pub(super) fn statuses(
        &self,
        inputs: &GatewayInputs<'_>,
        gateways: &Gateways<'_>,
        controller: &str,
    ) -> BTreeMap<ObjectKey, PolicyStatus> {
        if self.policies.is_empty() {
            return BTreeMap::new();
        }
        let reached = reached_services(inputs, gateways);
        let mut out = BTreeMap::new();
        for p in &self.policies {
            let mut ancestors: BTreeSet<(String, String)> = BTreeSet::new();
            for (svc, _) in &p.targets {
                if let Some(gws) = reached.get(&(p.key.0.clone(), svc.clone())) {
                    ancestors.extend(gws.iter().cloned());
                }
            }
            let accepted = match (&p.accepted, &p.conflicted) {
                (Err((reason, message)), _) => {
                    Condition::new("Accepted", false, reason, message.clone(), p.generation)
                }
                (Ok(()), Some(message)) => Condition::new(
                    "Accepted",
                    false,
                    "Conflicted",
                    message.clone(),
                    p.generation,
                ),
                (Ok(()), None) => {
                    Condition::new("Accepted", true, "Accepted", "accepted", p.generation)
                }
            };
            let resolved = match &p.resolved {
                Ok(()) => Condition::new(
                    "ResolvedRefs",
                    true,
                    "ResolvedRefs",
                    "resolved",
                    p.generation,
                ),
                Err((reason, message)) => {
                    Condition::new("ResolvedRefs", false, reason, message.clone(), p.generation)
                }
            };
            let ancestors = ancestors
                .into_iter()
                // The spec's bound: at most 16 ancestors are listed.
                .take(16)
                .map(|(ns, name)| PolicyAncestorStatus {
                    ancestor_ref: ParentReference {
                        group: Some(GROUP.into()),
                        kind: Some("Gateway".into()),
                        namespace: Some(ns),
                        name,
                        section_name: None,
                        port: None,
                    },
                    controller_name: controller.to_string(),
                    conditions: vec![accepted.clone(), resolved.clone()],
                })
                .collect();
            out.insert(p.key.clone(), PolicyStatus { ancestors });
        }
        out
    }
}

/// One policy read: its targets, what it asks, and whether it can be served as written.
fn read_policy(p: &BackendTLSPolicy, (ns, name): (&str, &str), trust: &mut Trust<'_>) -> Policy {
    let v = &p.spec.validation;
    let mut accepted: Result<(), (&'static str, String)> = Ok(());
    let mut resolved: Result<(), (&'static str, String)> = Ok(());
    let targets = p
        .spec
        .target_refs
        .iter()
        .filter(|t| t.group.is_empty() || t.group == "core")
        .filter(|t| t.kind == "Service")
        .map(|t| {
            (
                t.name.clone(),
                t.section_name.clone().filter(|s| !s.is_empty()),
            )
        })
        .collect();
    let sni: Box<str> = v.hostname.to_ascii_lowercase().into();
    if let Err(why) = gateway_host(&sni).and_then(|h| match h {
        crate::table::matcher::HostPattern::Exact(_) => Ok(()),
        _ => Err("is a wildcard"),
    }) {
        accepted = Err((
            "Invalid",
            format!("validation.hostname {} {why}", show(&v.hostname)),
        ));
    }
    // A bundle that never loads: the ports it targets fail closed.
    let closed = || CaBundle {
        kind: "BackendTLSPolicy",
        namespace: ns.into(),
        name: name.into(),
        pem: None,
    };
    let well_known = v
        .well_known_ca_certificates
        .as_deref()
        .filter(|w| !w.is_empty());
    let ca = match (well_known, v.ca_certificate_refs.is_empty()) {
        (Some(_), false) | (None, true) => {
            accepted = accepted.and(Err((
                "Invalid",
                "exactly one of validation.caCertificateRefs and \
                 validation.wellKnownCACertificates must be given"
                    .to_string(),
            )));
            Some(closed())
        }
        (Some("System"), true) => None,
        (Some(other), true) => {
            accepted = accepted.and(Err((
                "Invalid",
                format!(
                    "validation.wellKnownCACertificates {} is not known (System is)",
                    show(other)
                ),
            )));
            Some(closed())
        }
        (None, false) => {
            let mut pem: Vec<u8> = Vec::new();
            let mut valid = 0;
            for r in &v.ca_certificate_refs {
                let core = r.group.is_empty() || r.group == "core";
                if !core || r.kind != "ConfigMap" {
                    resolved = resolved.and(Err((
                        "InvalidKind",
                        format!(
                            "caCertificateRef {} {} is not a ConfigMap",
                            show(&r.kind),
                            show(&r.name)
                        ),
                    )));
                    continue;
                }
                match trust.ca_pem("ConfigMap", ns, &r.name) {
                    Ok(bytes) => {
                        valid += 1;
                        pem.extend_from_slice(&bytes);
                        pem.push(b'\n');
                    }
                    Err(why) => {
                        resolved = resolved.and(Err((
                            "InvalidCACertificateRef",
                            format!("ConfigMap {ns}/{} {why}", show(&r.name)),
                        )));
                    }
                }
            }
            if valid == 0 {
                accepted = accepted.and(Err((
                    "NoValidCACertificate",
                    "no caCertificateRef holds a CA certificate".to_string(),
                )));
            }
            // A connection may not be verified with part of what the policy names.
            Some(match resolved {
                Ok(()) => CaBundle {
                    pem: Some(Arc::from(pem)),
                    ..closed()
                },
                Err(_) => closed(),
            })
        }
    };
    let subject_alt_names = match subject_alt_names(&v.subject_alt_names) {
        Ok(names) => names,
        Err(why) => {
            // A name that cannot be checked: verifying against the others would take a
            // certificate the policy may refuse.
            accepted = accepted.and(Err(("Invalid", why)));
            None
        }
    };
    let ca = if accepted.is_ok() && resolved.is_ok() {
        ca
    } else {
        Some(closed())
    };
    Policy {
        key: (ns.to_string(), name.to_string()),
        generation: p.metadata.generation,
        rank: (created_at(&p.metadata), ns.to_string(), name.to_string()),
        targets,
        tls: PolicyTls {
            sni,
            ca,
            subject_alt_names,
        },
        accepted,
        resolved,
        conflicted: None,
    }
}

/// A policy's `subjectAltNames` as the table holds them (`None`: none given, the hostname is
/// verified), or why one cannot be checked.
fn subject_alt_names(
    given: &[super::api::SubjectAltName],
) -> Result<Option<Arc<[SubjectAltName]>>, String> {
    if given.is_empty() {
        return Ok(None);
    }
    let mut names = Vec::with_capacity(given.len());
    for (i, n) in given.iter().enumerate() {
        let name = match (n.type_.as_str(), n.hostname.as_deref(), n.uri.as_deref()) {
            ("Hostname", Some(h), None) if !h.is_empty() => {
                let h = h.to_ascii_lowercase();
                let bare = h.strip_prefix("*.").unwrap_or(&h);
                if gateway_host(bare).is_err() || bare.contains('*') {
                    return Err(format!(
                        "validation.subjectAltNames[{i}].hostname {} is not a DNS name",
                        show(&h)
                    ));
                }
                SubjectAltName::Dns(h.into())
            }
            ("URI", None, Some(u)) if u.contains("://") => SubjectAltName::Uri(u.into()),
            _ => {
                return Err(format!(
                    "validation.subjectAltNames[{i}] is neither a Hostname with hostname nor a \
                     URI with a scheme:// uri"
                ));
            }
        };
        names.push(name);
    }
    Ok(Some(Arc::from(names)))
}

/// The Services (namespace, name) that routes of our Gateways name as backends, each with
/// those Gateways.
fn reached_services(
    inputs: &GatewayInputs<'_>,
    gateways: &Gateways<'_>,
) -> HashMap<(String, String), BTreeSet<(String, String)>> {
    let mut out: HashMap<(String, String), BTreeSet<(String, String)>> = HashMap::default();
    let mut add = |meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
                   parents: &[ParentReference],
                   backends: &mut dyn Iterator<Item = &BackendObjectReference>| {
        let (ns, _) = meta_key(&meta.namespace, &meta.name);
        let ours: Vec<(String, String)> = parents
            .iter()
            .filter(|p| p.group.as_deref().unwrap_or(GROUP) == GROUP)
            .filter(|p| p.kind.as_deref().unwrap_or("Gateway") == "Gateway")
            .map(|p| (p.namespace.as_deref().unwrap_or(ns), p.name.as_str()))
            .filter(|k| gateways.contains_key(k))
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        if ours.is_empty() {
            return;
        }
        for b in backends {
            let core = b
                .group
                .as_deref()
                .is_none_or(|g| g.is_empty() || g == "core");
            if !core || b.kind.as_deref().is_some_and(|k| k != "Service") {
                continue;
            }
            let svc_ns = b.namespace.as_deref().unwrap_or(ns).to_string();
            out.entry((svc_ns, b.name.clone()))
                .or_default()
                .extend(ours.iter().cloned());
        }
    };
    for r in inputs.routes {
        let rules = r.spec.rules.as_deref().unwrap_or(&[]);
        add(
            &r.metadata,
            &r.spec.parent_refs,
            &mut rules
                .iter()
                .flat_map(|rule| rule.backend_refs.iter().map(|b| &b.backend)),
        );
    }
    for r in inputs.grpc_routes {
        add(
            &r.metadata,
            &r.spec.parent_refs,
            &mut r
                .spec
                .rules
                .iter()
                .flat_map(|rule| rule.backend_refs.iter().map(|b| &b.backend)),
        );
    }
    for (meta, spec) in inputs
        .tcp_routes
        .iter()
        .map(|r| (&r.metadata, &r.spec))
        .chain(inputs.tls_routes.iter().map(|r| (&r.metadata, &r.spec)))
    {
        add(
            meta,
            &spec.parent_refs,
            &mut spec
                .rules
                .iter()
                .flat_map(|rule| rule.backend_refs.iter().map(|b| &b.backend)),
        );
    }
    out
}
