//! BackendTLSPolicy translation: the Service ports it targets speak TLS with its hostname and
//! trust, a policy that cannot be served fails them closed, the oldest of two applies, and its
//! status names the Gateways whose routes reach its target.

use super::*;
use crate::table::upstream::BackendProtocol;

const ROUTE: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r, namespace: infra}
spec:
  parentRefs: [{name: gw}]
  rules: [{backendRefs: [{name: v1, port: 8080}]}]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: ca, namespace: infra}
data:
  ca.crt: |
    -----BEGIN CERTIFICATE-----
    AAAA
    -----END CERTIFICATE-----
"#;

fn policy(name: &str, created: &str, target: &str, validation: &str) -> String {
    format!(
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: BackendTLSPolicy
metadata: {{name: {name}, namespace: infra, generation: 2, creationTimestamp: "{created}"}}
spec:
  targetRefs: [{target}]
  validation: {validation}
"#
    )
}

fn with_policies(policies: &[String]) -> World {
    world(&format!(
        "{BASE}\n---\n{ROUTE}\n---\n{}",
        policies.join("\n---\n")
    ))
}

fn upstream<'t>(t: &'t RoutingTable, key: &str) -> &'t crate::table::upstream::Upstream {
    &t.entries
        .iter()
        .find(|e| e.key.to_string() == key)
        .unwrap_or_else(|| panic!("no entry {key}"))
        .upstream
}

/// (type, status, reason) of a policy's conditions for its first ancestor, and how many
/// ancestors it has.
fn policy_status(b: &Built, name: &str) -> (usize, Vec<(String, String, String)>) {
    let st =
        &b.memo.gateway_status().backend_tls_policies[&("infra".to_string(), name.to_string())];
    let first = st.ancestors.first().map_or(Vec::new(), |a| {
        a.conditions
            .iter()
            .map(|c| (c.type_.clone(), c.status.clone(), c.reason.clone()))
            .collect()
    });
    (st.ancestors.len(), first)
}

const SVC_V1: &str = "{group: '', kind: Service, name: v1}";

#[test]
fn a_policy_makes_its_service_speak_tls_with_its_name_and_ca() {
    let w = with_policies(&[policy(
        "p",
        "2026-01-01T00:00:00Z",
        SVC_V1,
        "{caCertificateRefs: [{group: '', kind: ConfigMap, name: ca}], hostname: abc.example.com}",
    )]);
    let (b, warnings) = build(&w);
    let u = upstream(&b.table, "infra/v1:8080");
    assert_eq!(u.protocol, BackendProtocol::Https);
    assert_eq!(&*u.sni, "abc.example.com");
    assert!(u.verify);
    let ca = u.ca_bundle.as_ref().expect("the policy's bundle");
    assert!(
        ca.pem
            .as_ref()
            .is_some_and(|p| p.starts_with(b"-----BEGIN"))
    );
    // The other Service is untouched.
    assert_eq!(
        upstream(&b.table, "infra/v2:8080").protocol,
        BackendProtocol::Http
    );
    assert_eq!(
        policy_status(&b, "p"),
        (
            1,
            vec![
                ("Accepted".into(), "True".into(), "Accepted".into()),
                ("ResolvedRefs".into(), "True".into(), "ResolvedRefs".into())
            ]
        )
    );
    let st = &b.memo.gateway_status().backend_tls_policies[&("infra".into(), "p".into())];
    assert_eq!(st.ancestors[0].ancestor_ref.name, "gw");
    assert_eq!(st.ancestors[0].conditions[0].observed_generation, Some(2));
    assert!(
        warnings.iter().all(|w| w.object.kind != "BackendTLSPolicy"),
        "{warnings:?}"
    );
}

#[test]
fn well_known_cas_are_the_default_trust() {
    let w = with_policies(&[policy(
        "p",
        "2026-01-01T00:00:00Z",
        SVC_V1,
        "{wellKnownCACertificates: System, hostname: abc.example.com}",
    )]);
    let (b, _) = build(&w);
    let u = upstream(&b.table, "infra/v1:8080");
    assert_eq!(u.protocol, BackendProtocol::Https);
    assert!(u.ca_bundle.is_none() && u.ca_file.is_none());
}

#[test]
fn a_policy_that_cannot_be_served_fails_its_service_closed() {
    let cases = [
        (
            "{caCertificateRefs: [{group: '', kind: ConfigMap, name: missing}], hostname: a.example.com}",
            ("NoValidCACertificate", "InvalidCACertificateRef"),
        ),
        (
            "{caCertificateRefs: [{group: '', kind: Secret, name: ca}], hostname: a.example.com}",
            ("NoValidCACertificate", "InvalidKind"),
        ),
        (
            "{wellKnownCACertificates: Mine, hostname: a.example.com}",
            ("Invalid", "ResolvedRefs"),
        ),
        (
            "{caCertificateRefs: [{group: '', kind: ConfigMap, name: ca}], hostname: a.example.com, \
             subjectAltNames: [{type: Hostname}]}",
            ("Invalid", "ResolvedRefs"),
        ),
        (
            "{caCertificateRefs: [{group: '', kind: ConfigMap, name: ca}], hostname: a.example.com, \
             subjectAltNames: [{type: URI, uri: not-a-uri}]}",
            ("Invalid", "ResolvedRefs"),
        ),
        (
            "{caCertificateRefs: [{group: '', kind: ConfigMap, name: ca}], hostname: '*.example.com'}",
            ("Invalid", "ResolvedRefs"),
        ),
    ];
    for (validation, (accepted, resolved)) in cases {
        let w = with_policies(&[policy("p", "2026-01-01T00:00:00Z", SVC_V1, validation)]);
        let (b, warnings) = build(&w);
        let u = upstream(&b.table, "infra/v1:8080");
        assert_eq!(u.protocol, BackendProtocol::Https, "{validation}");
        let ca = u.ca_bundle.as_ref().expect("a bundle that never loads");
        assert!(ca.pem.is_none(), "{validation}: fails closed");
        let (_, conditions) = policy_status(&b, "p");
        assert_eq!(conditions[0].1, "False", "{validation}");
        assert_eq!(conditions[0].2, accepted, "{validation}");
        assert_eq!(conditions[1].2, resolved, "{validation}");
        assert!(
            warnings.iter().any(
                |w| w.object.kind == "BackendTLSPolicy" && w.reason == WarningReason::NotServed
            ),
            "{validation}: {warnings:?}"
        );
    }
}

#[test]
fn subject_alt_names_are_carried_to_the_services_port() {
    use crate::table::upstream::SubjectAltName;
    let w = with_policies(&[policy(
        "p",
        "2026-01-01T00:00:00Z",
        SVC_V1,
        "{caCertificateRefs: [{group: '', kind: ConfigMap, name: ca}], hostname: a.example.com, \
         subjectAltNames: [{type: Hostname, hostname: B.example.com}, \
         {type: Hostname, hostname: '*.svc.example.com'}, \
         {type: URI, uri: 'spiffe://cluster.test/ns/infra/sa/v1'}]}",
    )]);
    let (b, warnings) = build(&w);
    let u = upstream(&b.table, "infra/v1:8080");
    assert_eq!(&*u.sni, "a.example.com");
    assert_eq!(
        u.subject_alt_names.as_deref(),
        Some(
            &[
                SubjectAltName::Dns("b.example.com".into()),
                SubjectAltName::Dns("*.svc.example.com".into()),
                SubjectAltName::Uri("spiffe://cluster.test/ns/infra/sa/v1".into()),
            ][..]
        )
    );
    assert!(u.ca_bundle.as_ref().is_some_and(|c| c.pem.is_some()));
    let (_, conditions) = policy_status(&b, "p");
    assert_eq!(conditions[0].1, "True", "{conditions:?}");
    assert!(
        warnings.iter().all(|w| w.object.kind != "BackendTLSPolicy"),
        "{warnings:?}"
    );
}

#[test]
fn the_oldest_policy_on_a_port_applies_and_a_named_port_beats_the_whole_service() {
    let named = "{group: '', kind: Service, name: v1, sectionName: https}";
    let w = with_policies(&[
        policy(
            "newer",
            "2026-02-01T00:00:00Z",
            SVC_V1,
            "{wellKnownCACertificates: System, hostname: newer.example.com}",
        ),
        policy(
            "older",
            "2026-01-01T00:00:00Z",
            SVC_V1,
            "{wellKnownCACertificates: System, hostname: older.example.com}",
        ),
        policy(
            "port",
            "2026-03-01T00:00:00Z",
            named,
            "{wellKnownCACertificates: System, hostname: port.example.com}",
        ),
    ]);
    let (b, warnings) = build(&w);
    // v1's port is unnamed: the whole-Service policies apply, the older one.
    assert_eq!(
        &*upstream(&b.table, "infra/v1:8080").sni,
        "older.example.com"
    );
    assert_eq!(policy_status(&b, "newer").1[0].2, "Conflicted");
    assert_eq!(policy_status(&b, "older").1[0].2, "Accepted");
    assert!(warnings.iter().any(|w| w.message.contains("infra/older")));

    // A Service port named `https`: the policy naming it applies there.
    let named_port = r#"
apiVersion: v1
kind: Service
metadata: {name: v1, namespace: infra}
spec: {ports: [{port: 8080, name: https}, {port: 9090, name: other}]}
"#;
    let mut w = w;
    w.services
        .retain(|s| s.metadata.name.as_deref() != Some("v1"));
    w.services.extend(world(named_port).services);
    let (b, _) = build(&w);
    assert_eq!(
        &*upstream(&b.table, "infra/v1:8080").sni,
        "port.example.com"
    );
    assert_eq!(
        &*upstream(&b.table, "infra/v1:9090").sni,
        "older.example.com"
    );
}

#[test]
fn a_policy_no_route_of_ours_reaches_has_no_ancestor() {
    let w = with_policies(&[policy(
        "p",
        "2026-01-01T00:00:00Z",
        "{group: '', kind: Service, name: v2}",
        "{wellKnownCACertificates: System, hostname: abc.example.com}",
    )]);
    let (b, _) = build(&w);
    assert_eq!(policy_status(&b, "p").0, 0);
    // It still applies to the Service (for every route that reaches it later).
    assert_eq!(
        upstream(&b.table, "infra/v2:8080").protocol,
        BackendProtocol::Https
    );
}
