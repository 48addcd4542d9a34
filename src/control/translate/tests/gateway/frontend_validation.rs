//! Client-certificate validation on Gateway HTTPS listeners (`spec.tls.frontend`): the table
//! holds each validating listener's CA bundle by frontend and hostname, a listener with no
//! usable CA is not served, a bad ref among good ones is said, and two Gateways asking
//! different things for one hostname do not weaken each other.

use super::*;

/// Gateways asking for client-certificate validation: `mtls` on every HTTPS port, `fallback`
/// with `AllowInsecureFallback`, `perport` by default but not on 443 (its `perPort` entry
/// there asks for none). One route attached to all three; the CA in ConfigMap `client-ca`.
const FRONTEND_VALIDATION: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: mtls, namespace: infra, generation: 1}
spec:
  gatewayClassName: sy
  tls:
    frontend:
      default:
        validation:
          caCertificateRefs: [{group: "", kind: ConfigMap, name: client-ca}]
  listeners:
  - {name: https, port: 443, protocol: HTTPS, hostname: secure.test,
     tls: {certificateRefs: [{name: young-cert}]}}
  - {name: http, port: 80, protocol: HTTP, hostname: plain.test}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: fallback, namespace: infra}
spec:
  gatewayClassName: sy
  tls:
    frontend:
      default:
        validation:
          caCertificateRefs: [{group: "", kind: ConfigMap, name: client-ca}]
          mode: AllowInsecureFallback
  listeners:
  - {name: https, port: 443, protocol: HTTPS, hostname: fallback.test,
     tls: {certificateRefs: [{name: young-cert}]}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: perport, namespace: infra}
spec:
  gatewayClassName: sy
  tls:
    frontend:
      default:
        validation:
          caCertificateRefs: [{group: "", kind: ConfigMap, name: client-ca}]
      perPort:
      - {port: 443, tls: {}}
  listeners:
  - {name: https, port: 443, protocol: HTTPS, hostname: perport.test,
     tls: {certificateRefs: [{name: young-cert}]}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r, namespace: infra}
spec:
  parentRefs: [{name: mtls}, {name: fallback}, {name: perport}]
  rules: [{backendRefs: [{name: v1, port: 8080}]}]
"#;

const CA: &str = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";

fn config_map(ns: &str, name: &str, pem: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: {ns}}}\n\
         data:\n  ca.crt: |\n    {}\n",
        pem.trim_end().replace('\n', "\n    ")
    )
}

/// `https_world` with the Gateways and routes of `yaml` instead of its own, and its other
/// objects (ConfigMaps, grants) added.
fn validation_world(yaml: &str) -> World {
    let mut w = https_world();
    let more = world(yaml);
    w.gateways = more.gateways;
    w.routes.extend(more.routes);
    w.config_maps.extend(more.config_maps);
    w.grants.extend(more.grants);
    w
}

/// Whether the Gateway routes take `host` on the TLS port.
fn https(t: &RoutingTable, host: &str) -> &'static str {
    match t
        .gateway
        .lookup(true, Some(host.as_bytes()), "/", &BareRequest::GET)
    {
        GatewayMatch::Matched(..) => "served",
        GatewayMatch::NoRoute => "404",
        GatewayMatch::NotTaken => "not gateway",
    }
}

/// What the listener of `host` asks: `None`, or (insecure fallback, origin, CA bundle).
fn asked(t: &RoutingTable, host: &str) -> Option<(bool, String, String)> {
    t.client_validation((None, None), Some(host.as_bytes()))
        .map(|v| {
            (
                v.insecure_fallback,
                v.origin.to_string(),
                String::from_utf8_lossy(&v.ca).into_owned(),
            )
        })
}

#[test]
fn a_listener_verifies_clients_against_the_ca_its_gateway_names() {
    let w = validation_world(&format!(
        "{FRONTEND_VALIDATION}\n---\n{}",
        config_map("infra", "client-ca", CA)
    ));
    let (b, warnings) = build_at_warned(&w, &Options::default(), None);
    let t = &b.table;
    let (fallback, origin, ca) = asked(t, "secure.test").expect("secure.test verifies clients");
    assert!(!fallback);
    assert_eq!(origin, "infra/mtls/https");
    assert!(ca.contains("AAAA"), "{ca}");
    assert_eq!(https(t, "secure.test"), "served");
    // Its routes and certificates are served as any listener's.
    assert!(
        certificates(t)
            .iter()
            .any(|(_, _, hosts)| hosts.contains(&"secure.test".to_string())),
        "{:?}",
        certificates(t)
    );
    let conditions = listener_conditions(&b, "mtls", "https");
    for c in ["Accepted", "ResolvedRefs", "Programmed"] {
        assert!(
            conditions.contains(&(c.into(), "True".into(), c.into())),
            "{conditions:?}"
        );
    }
    // Validation is about HTTPS listeners: the plain one asks nothing.
    assert_eq!(get(t, "plain.test", "/"), "infra/v1:8080");
    assert_eq!(asked(t, "plain.test"), None);
    // AllowInsecureFallback: asked, not required; the Gateway says so.
    assert_eq!(asked(t, "fallback.test").map(|a| a.0), Some(true));
    assert_eq!(
        condition(&b, "fallback", "InsecureFrontendValidationMode"),
        ("True".into(), "ConfigurationChanged".into())
    );
    assert!(
        !gateway_status(&b, "mtls")
            .1
            .iter()
            .any(|c| c.0 == "InsecureFrontendValidationMode")
    );
    assert!(
        warnings
            .iter()
            .any(|w| w.object.name == "fallback" && w.message.contains("AllowInsecureFallback")),
        "{warnings:?}"
    );
    // `perPort` for 443 asks for none: that port's listeners verify nothing.
    assert_eq!(https(t, "perport.test"), "served");
    assert_eq!(asked(t, "perport.test"), None);
    assert!(
        !warnings
            .iter()
            .any(|w| w.object.name == "mtls" || w.object.name == "perport"),
        "{warnings:?}"
    );
    // The dump says which listeners verify, not the bundle.
    let json = t.to_json().to_string();
    assert!(
        json.contains("infra/mtls/https") && !json.contains("AAAA"),
        "{json}"
    );
}

#[test]
fn a_listener_with_no_usable_ca_is_not_served() {
    let gateway = |name: &str, refs: &str| {
        format!(
            r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: {name}, namespace: infra, generation: 4}}
spec:
  gatewayClassName: sy
  tls: {{frontend: {{default: {{validation: {{caCertificateRefs: [{refs}]}}}}}}}}
  listeners:
  - {{name: https, port: 443, protocol: HTTPS, hostname: {name}.test,
     tls: {{certificateRefs: [{{name: young-cert}}]}}}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: {name}, namespace: infra}}
spec:
  parentRefs: [{{name: {name}}}]
  rules: [{{backendRefs: [{{name: v1, port: 8080}}]}}]
"#
        )
    };
    let yaml = [
        gateway("missing", "{kind: ConfigMap, name: nowhere}"),
        gateway("kind", "{kind: Service, name: v1}"),
        gateway(
            "grant",
            "{kind: ConfigMap, name: client-ca, namespace: apps}",
        ),
        gateway(
            "granted",
            "{kind: ConfigMap, name: client-ca, namespace: shared}",
        ),
        gateway("empty", "{kind: ConfigMap, name: no-cert}"),
        gateway(
            "partly",
            "{kind: ConfigMap, name: client-ca}, {kind: ConfigMap, name: nowhere}",
        ),
        config_map("infra", "client-ca", CA),
        config_map("apps", "client-ca", CA),
        config_map("shared", "client-ca", CA),
        config_map("infra", "no-cert", "just text"),
        r#"
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {name: g, namespace: shared}
spec:
  from: [{group: gateway.networking.k8s.io, kind: Gateway, namespace: infra}]
  to: [{group: "", kind: ConfigMap}]
"#
        .to_string(),
    ]
    .join("\n---\n");
    let (b, warnings) = build_at_warned(&validation_world(&yaml), &Options::default(), None);
    let t = &b.table;
    for (name, reason) in [
        ("missing", "InvalidCACertificateRef"),
        ("kind", "InvalidCACertificateKind"),
        ("grant", "RefNotPermitted"),
        ("empty", "InvalidCACertificateRef"),
    ] {
        let conditions = listener_conditions(&b, name, "https");
        let expected = [
            ("Accepted", "False", "NoValidCACertificate"),
            ("ResolvedRefs", "False", reason),
            ("Programmed", "False", "Invalid"),
        ];
        for (ty, status, why) in expected {
            assert!(
                conditions.contains(&(ty.into(), status.into(), why.into())),
                "{name}: {conditions:?}"
            );
        }
        // Not served at all: neither its routes nor its certificate.
        assert_eq!(https(t, &format!("{name}.test")), "not gateway", "{name}");
        assert!(
            warnings.iter().any(|w| w.object.name == name
                && w.reason == WarningReason::NotServed
                && w.message.contains("NoValidCACertificate")
                    | w.message.contains("no caCertificateRef")),
            "{name}: {warnings:?}"
        );
    }
    // A ReferenceGrant opens the other namespace's ConfigMap.
    assert_eq!(https(t, "granted.test"), "served");
    assert!(asked(t, "granted.test").is_some());
    // One good ref of two: served, verifying against the good one, and the bad one said.
    assert_eq!(https(t, "partly.test"), "served");
    let conditions = listener_conditions(&b, "partly", "https");
    assert!(
        conditions.contains(&("Accepted".into(), "True".into(), "Accepted".into()))
            && conditions.contains(&(
                "ResolvedRefs".into(),
                "False".into(),
                "InvalidCACertificateRef".into()
            ))
            && conditions.contains(&("Programmed".into(), "True".into(), "Programmed".into())),
        "{conditions:?}"
    );
    let (_, _, ca) = asked(t, "partly.test").unwrap();
    assert_eq!(ca.matches("BEGIN CERTIFICATE").count(), 1, "{ca}");
}

#[test]
fn two_gateways_asking_differently_for_one_hostname_do_not_weaken_each_other() {
    let gateway = |name: &str, created: &str, validation: &str| {
        format!(
            r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: {name}, namespace: infra, creationTimestamp: "{created}", generation: 1}}
spec:
  gatewayClassName: sy
  {validation}
  listeners:
  - {{name: https, port: 443, protocol: HTTPS, hostname: shared.test,
     tls: {{certificateRefs: [{{name: young-cert}}]}}}}
"#
        )
    };
    let verify = "tls: {frontend: {default: {validation: {caCertificateRefs: \
                  [{kind: ConfigMap, name: client-ca}]}}}}";
    let route = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r, namespace: infra}
spec:
  parentRefs: [{name: old}, {name: young}]
  rules: [{backendRefs: [{name: v1, port: 8080}]}]
"#;
    let ca = config_map("infra", "client-ca", CA);
    // The older verifies, the younger not: the younger is not served; clients are verified.
    let yaml = [
        gateway("old", "2026-01-01T00:00:00Z", verify),
        gateway("young", "2026-02-01T00:00:00Z", ""),
        route.to_string(),
        ca.clone(),
    ]
    .join("\n---\n");
    let (b, warnings) = build_at_warned(&validation_world(&yaml), &Options::default(), None);
    assert!(asked(&b.table, "shared.test").is_some());
    let young = listener_conditions(&b, "young", "https");
    assert!(
        young.contains(&(
            "Conflicted".into(),
            "True".into(),
            "HostnameConflict".into()
        )) && young.contains(&("Programmed".into(), "False".into(), "Invalid".into())),
        "{young:?}"
    );
    assert!(
        warnings
            .iter()
            .any(|w| w.object.name == "young" && w.reason == WarningReason::NotServed),
        "{warnings:?}"
    );
    // The older verifies nothing, the younger does: the younger is not served, so that its
    // routes are never served unverified under the older's listener.
    let yaml = [
        gateway("old", "2026-01-01T00:00:00Z", ""),
        gateway("young", "2026-02-01T00:00:00Z", verify),
        route.to_string(),
        ca,
    ]
    .join("\n---\n");
    let (b, _) = build_at_warned(&validation_world(&yaml), &Options::default(), None);
    assert_eq!(asked(&b.table, "shared.test"), None);
    let young = listener_conditions(&b, "young", "https");
    assert!(
        young.contains(&(
            "Conflicted".into(),
            "True".into(),
            "HostnameConflict".into()
        )),
        "{young:?}"
    );
    let old = listener_conditions(&b, "old", "https");
    assert!(
        old.contains(&("Programmed".into(), "True".into(), "Programmed".into())),
        "{old:?}"
    );
}

#[test]
fn a_gateway_only_change_redoes_the_validation_as_a_full_build_would() {
    let ca = config_map("infra", "client-ca", CA);
    let before = validation_world(&format!("{FRONTEND_VALIDATION}\n---\n{ca}"));
    let (b1, _) = build_changes(&before, None, None);
    assert_eq!(asked(&b1.table, "secure.test").map(|a| a.0), Some(false));
    // Only a Gateway changes: `mtls` falls back now.
    let fallback = FRONTEND_VALIDATION.replacen(
        "name: client-ca}]\n  listeners",
        "name: client-ca}]\n          mode: AllowInsecureFallback\n  listeners",
        1,
    );
    assert_ne!(fallback, FRONTEND_VALIDATION);
    let after = validation_world(&format!("{fallback}\n---\n{ca}"));
    let told = Changes {
        gateway: true,
        ..Default::default()
    };
    let (quick, _) = build_changes(&after, Some(&told), Some(b1.previous()));
    let (full, _) = build_changes(&after, None, Some(b1.previous()));
    assert!(quick.table == full.table);
    assert_eq!(asked(&quick.table, "secure.test").map(|a| a.0), Some(true));
}
