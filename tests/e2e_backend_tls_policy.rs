//! End-to-end: Gateway API BackendTLSPolicy, offline (`--manifests`), with a real TLS backend
//! on 127.0.0.1 whose certificate names `abc.example.com` (as upstream's conformance backend),
//! on both engines. An HTTPRoute's Service without a policy is spoken to in clear (the TLS
//! backend refuses: 502); with the policy, over TLS with its hostname and its ConfigMap's CA
//! (200); a hostname the certificate does not name, a CA that did not issue it, a ConfigMap
//! that does not exist: 5xx, never served unverified (upstream's BackendTLSPolicy cases).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod tls_client;

use std::time::Duration;

use common::*;
use serde_json::{Value, json};
use tls_client::{Ca, server_config};

fn objects(backend: &Backend, extra: &[Value]) -> Vec<Value> {
    let mut v = vec![
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
            "metadata": {"name": "sy"},
            "spec": {"controllerName": "switchyard.io/gateway-controller"}}),
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"name": "gw", "namespace": "default"},
            "spec": {"gatewayClassName": "sy",
                "listeners": [{"name": "http", "port": 80, "protocol": "HTTP"}]}}),
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": {"name": "r", "namespace": "default"},
            "spec": {"parentRefs": [{"name": "gw"}], "hostnames": ["abc.example.com"],
                "rules": [{"backendRefs": [{"name": "tls-backend", "port": 443}]}]}}),
        json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "tls-backend", "namespace": "default"},
            "spec": {"ports": [{"name": "btls", "port": 443, "protocol": "TCP"}],
                "clusterIP": "10.96.0.12"}}),
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "tls-backend-1", "namespace": "default",
                "labels": {"kubernetes.io/service-name": "tls-backend"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["127.0.0.1"], "conditions": {"ready": true}}],
            "ports": [{"name": "btls", "port": backend.port, "protocol": "TCP"}]}),
    ];
    v.extend_from_slice(extra);
    v
}

fn ca_map(name: &str, ca: &Ca) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default"},
        "data": {"ca.crt": ca.pem}})
}

fn policy(hostname: &str, config_map: &str) -> Value {
    json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "BackendTLSPolicy",
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {"targetRefs": [{"group": "", "kind": "Service", "name": "tls-backend",
                "sectionName": "btls"}],
            "validation": {"caCertificateRefs": [{"group": "", "kind": "ConfigMap",
                "name": config_map}], "hostname": hostname}}})
}

async fn status(sy: &Switchyard) -> u16 {
    sy.get_host("abc.example.com", "/x").await.status
}

async fn until(sy: &Switchyard, want: u16) -> bool {
    poll(
        Duration::from_secs(10),
        Duration::from_millis(100),
        || async { (status(sy).await == want).then_some(()) },
    )
    .await
    .is_some()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_tls_policy_verifies_its_backend_and_fails_closed() {
    let ca = Ca::new("backend CA");
    let leaf = ca.server(&["abc.example.com"]);
    let backend = Backend::builder("tls-backend")
        .transport(Transport::Tls(server_config(&leaf, &[b"http/1.1"])))
        .start()
        .await;
    let other = Ca::new("another CA");
    for engine in ENGINES {
        // No policy: HTTP in clear to a TLS server, which refuses it.
        let sy = switchyard_on(
            objects(&backend, &[]),
            engine,
            &["--gateway-http-port", "80"],
        )
        .await;
        let plain = status(&sy).await;
        assert!(plain >= 500, "{engine}: without a policy: {plain}");

        let good = [ca_map("ca", &ca), policy("abc.example.com", "ca")];
        sy.rewrite(&objects(&backend, &good));
        assert!(
            until(&sy, 200).await,
            "{engine}: verified:\n{}",
            sy.stderr()
        );
        let r = sy.get_host("abc.example.com", "/x").await;
        assert_eq!(r.backend().as_deref(), Some("tls-backend"), "{engine}");

        // Each refused, then verified again (so each step is seen applied): the certificate
        // does not name the policy's hostname; a CA that did not issue it; the ConfigMap gone
        // (with a word of why).
        let bad: [(&str, Vec<Value>); 3] = [
            (
                "host mismatch",
                vec![ca_map("ca", &ca), policy("other.example.com", "ca")],
            ),
            (
                "wrong CA",
                vec![ca_map("ca", &other), policy("abc.example.com", "ca")],
            ),
            ("missing CA", vec![policy("abc.example.com", "ca")]),
        ];
        for (what, objs) in bad {
            sy.rewrite(&objects(&backend, &objs));
            assert!(until(&sy, 502).await, "{engine}: {what} served");
            sy.rewrite(&objects(&backend, &good));
            assert!(
                until(&sy, 200).await,
                "{engine}: after {what}, verified again"
            );
        }
        assert!(
            sy.stderr().contains("NoValidCACertificate"),
            "{engine}: {}",
            sy.stderr()
        );
    }
}

/// `subjectAltNames`: the backend's certificate names neither the policy's hostname nor the
/// Service; it is verified against the listed names instead (a DNS name, a SPIFFE URI), and the
/// hostname, then only sent as SNI, authenticates nothing: a certificate that has the hostname
/// but none of the names is refused. Both engines (Pingora's through the vendored connector's
/// verifier, vendor/README.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subject_alt_names_are_verified_instead_of_the_hostname() {
    let ca = Ca::new("backend CA");
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec![
        "abc.example.com".to_string(),
        "backend.internal".to_string(),
    ])
    .unwrap();
    params.subject_alt_names.push(rcgen::SanType::URI(
        rcgen::string::Ia5String::try_from("spiffe://cluster.test/ns/default/sa/backend").unwrap(),
    ));
    let cert = params.signed_by(&key, &ca.issuer).unwrap();
    let leaf = tls_client::Leaf {
        der: cert.der().to_vec(),
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    };
    let backend = Backend::builder("tls-backend")
        .transport(Transport::Tls(server_config(&leaf, &[b"http/1.1"])))
        .start()
        .await;
    let with_names = |hostname: &str, names: Value| {
        let mut p = policy(hostname, "ca");
        p["spec"]["validation"]["subjectAltNames"] = names;
        vec![ca_map("ca", &ca), p]
    };
    for engine in ENGINES {
        let sy = switchyard_on(
            objects(
                &backend,
                &with_names(
                    "svc.example.com",
                    json!([
                {"type": "Hostname", "hostname": "backend.internal"}]),
                ),
            ),
            engine,
            &["--gateway-http-port", "80"],
        )
        .await;
        assert!(
            until(&sy, 200).await,
            "{engine}: a listed DNS name:\n{}",
            sy.stderr()
        );
        let cases: [(&str, Value, u16); 4] = [
            (
                "a listed URI",
                json!([{"type": "Hostname", "hostname": "nope.internal"},
                       {"type": "URI", "uri": "spiffe://cluster.test/ns/default/sa/backend"}]),
                200,
            ),
            (
                "no listed name",
                json!([{"type": "URI", "uri": "spiffe://cluster.test/ns/default/sa/other"}]),
                502,
            ),
            (
                "the listed name again",
                json!([{"type": "Hostname", "hostname": "backend.internal"}]),
                200,
            ),
            (
                "the hostname on the certificate, no listed name",
                json!([{"type": "Hostname", "hostname": "nope.internal"}]),
                502,
            ),
        ];
        for (what, names, want) in cases {
            let hostname = if what.starts_with("the hostname") {
                "abc.example.com"
            } else {
                "svc.example.com"
            };
            sy.rewrite(&objects(&backend, &with_names(hostname, names)));
            assert!(
                until(&sy, want).await,
                "{engine}: {what}: not {want}\n{}",
                sy.stderr()
            );
        }
    }
}
