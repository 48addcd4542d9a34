//! A Service's CA bundle from a Secret or ConfigMap (`lb.backend-ca-secret`,
//! `lb.backend-ca-configmap`): resolution, precedence and the warnings of what does not resolve.

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};

use super::*;

const CA: &str =
    "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUQ0E=\n-----END CERTIFICATE-----\n";

fn secret(name: &str, type_: &str, data: &[(&str, &str)]) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("shop".into()),
            ..Default::default()
        },
        type_: Some(type_.into()),
        data: Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
                .collect(),
        ),
        ..Default::default()
    }
}

fn config_map(name: &str, data: &[(&str, &str)], binary: &[(&str, &str)]) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("shop".into()),
            ..Default::default()
        },
        data: (!data.is_empty()).then(|| {
            data.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        }),
        binary_data: (!binary.is_empty()).then(|| {
            binary
                .iter()
                .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
                .collect()
        }),
        ..Default::default()
    }
}

/// `shop/api`: port 80 over TLS, 81 in clear.
fn api(annotations: &[(&str, &str)]) -> Service {
    let mut svc = mk_service("shop", "api", &[80, 81]);
    let ports = svc.spec.as_mut().unwrap().ports.as_mut().unwrap();
    ports[0].app_protocol = Some("https".into());
    annotations
        .iter()
        .fold(svc, |svc, (k, v)| annotate(svc, k, v))
}

fn run_with(
    svcs: &[Service],
    secrets: &[Secret],
    config_maps: &[ConfigMap],
) -> (RoutingTable, Vec<Warning>) {
    let secrets: Vec<&Secret> = secrets.iter().collect();
    let config_maps: Vec<&ConfigMap> = config_maps.iter().collect();
    let inputs = IngressInputs {
        secrets: &secrets,
        config_maps: &config_maps,
        ..Default::default()
    };
    let (built, w) = translate_with(
        svcs,
        &[] as &[EndpointSlice],
        inputs,
        &Options::default(),
        None,
    );
    (built.table, w)
}

fn bundle(t: &RoutingTable) -> Option<CaBundle> {
    entry(t, "shop/api").upstream.ca_bundle.clone()
}

fn pem(t: &RoutingTable) -> Option<String> {
    bundle(t)
        .and_then(|b| b.pem)
        .map(|p| String::from_utf8_lossy(&p).into_owned())
}

#[test]
fn a_tls_secrets_ca_crt_is_the_services_bundle() {
    let s = secret(
        "api-ca",
        "kubernetes.io/tls",
        &[("ca.crt", CA), ("tls.crt", "x"), ("tls.key", "y")],
    );
    let svc = api(&[(annotation::BACKEND_CA_SECRET, " api-ca ")]);
    let (t, w) = run_with(std::slice::from_ref(&svc), &[s], &[]);
    assert!(w.is_empty(), "{w:?}");
    let b = bundle(&t).unwrap();
    assert_eq!(
        (b.kind, &*b.namespace, &*b.name),
        ("Secret", "shop", "api-ca")
    );
    assert_eq!(pem(&t).as_deref(), Some(CA));
    assert_eq!(entry(&t, "shop/api").upstream.ca_file, None);
    assert_eq!(
        entry(&t, "shop/api:81").upstream.ca_bundle,
        None,
        "no TLS there"
    );
}

#[test]
fn a_config_maps_ca_crt_is_read_from_data_or_binary_data() {
    let svc = api(&[(annotation::BACKEND_CA_CONFIGMAP, "trust")]);
    for cm in [
        config_map("trust", &[("ca.crt", CA), ("other", "z")], &[]),
        config_map("trust", &[], &[("ca.crt", CA)]),
    ] {
        let (t, w) = run_with(std::slice::from_ref(&svc), &[], &[cm]);
        assert!(w.is_empty(), "{w:?}");
        assert_eq!(bundle(&t).unwrap().kind, "ConfigMap");
        assert_eq!(pem(&t).as_deref(), Some(CA));
    }
}

#[test]
fn a_secret_wins_over_a_config_map_which_wins_over_a_file_and_each_loser_is_warned() {
    let s = secret("api-ca", "kubernetes.io/tls", &[("ca.crt", CA)]);
    let cm = config_map("trust", &[("ca.crt", CA)], &[]);
    let all = api(&[
        (annotation::BACKEND_CA_SECRET, "api-ca"),
        (annotation::BACKEND_CA_CONFIGMAP, "trust"),
        (annotation::BACKEND_CA_FILE, "/etc/cas/shop.pem"),
    ]);
    let (t, w) = run_with(&[all], std::slice::from_ref(&s), std::slice::from_ref(&cm));
    assert_eq!(bundle(&t).unwrap().kind, "Secret");
    assert_eq!(entry(&t, "shop/api").upstream.ca_file, None);
    assert_eq!(reasons(&w), [WarningReason::InvalidAnnotation; 2], "{w:?}");
    assert!(
        w.iter()
            .any(|w| w.message.contains("lb.backend-ca-configmap"))
    );
    assert!(w.iter().any(|w| w.message.contains("lb.backend-ca-file")));

    let two = api(&[
        (annotation::BACKEND_CA_CONFIGMAP, "trust"),
        (annotation::BACKEND_CA_FILE, "/etc/cas/shop.pem"),
    ]);
    let (t, w) = run_with(&[two], &[s], &[cm]);
    assert_eq!(bundle(&t).unwrap().kind, "ConfigMap");
    assert_eq!(entry(&t, "shop/api").upstream.ca_file, None);
    assert_eq!(w.len(), 1, "{w:?}");
}

#[test]
fn an_unresolved_reference_is_a_warning_and_a_bundle_without_bytes() {
    let svc = api(&[(annotation::BACKEND_CA_SECRET, "api-ca")]);
    let cases: [(&[Secret], &str); 5] = [
        (&[], "not found"),
        (
            &[secret("api-ca", "Opaque", &[("ca.crt", CA)])],
            "not kubernetes.io/tls",
        ),
        (
            &[secret("api-ca", "kubernetes.io/tls", &[("tls.crt", CA)])],
            "has no ca.crt",
        ),
        (
            &[secret(
                "api-ca",
                "kubernetes.io/tls",
                &[("ca.crt", "not pem")],
            )],
            "no CERTIFICATE",
        ),
        (
            // Another namespace's Secret of that name is not the Service's.
            &[Secret {
                metadata: ObjectMeta {
                    namespace: Some("other".into()),
                    ..secret("api-ca", "kubernetes.io/tls", &[]).metadata
                },
                ..secret("api-ca", "kubernetes.io/tls", &[("ca.crt", CA)])
            }],
            "not found",
        ),
    ];
    for (secrets, why) in cases {
        let (t, w) = run_with(std::slice::from_ref(&svc), secrets, &[]);
        assert_eq!(
            reasons(&w),
            [WarningReason::InvalidAnnotation],
            "{why}: {w:?}"
        );
        assert!(
            w[0].message.contains("Secret shop/") && w[0].message.contains(why),
            "{why}: {}",
            w[0].message
        );
        let b = bundle(&t).expect("the reference stays, so TLS fails closed");
        assert_eq!(b.pem, None, "{why}");
    }
    let cm = api(&[(annotation::BACKEND_CA_CONFIGMAP, "trust")]);
    let (t, w) = run_with(&[cm], &[], &[config_map("trust", &[("other", CA)], &[])]);
    assert_eq!(reasons(&w), [WarningReason::InvalidAnnotation], "{w:?}");
    assert!(w[0].message.contains("ConfigMap shop/"), "{w:?}");
    assert_eq!(bundle(&t).unwrap().pem, None);
}

#[test]
fn an_incremental_build_resolves_the_bundle_as_a_full_one() {
    let (mut svcs, mut slices) = world_small();
    let https = &mut svcs[0].spec.as_mut().unwrap().ports.as_mut().unwrap()[0];
    https.app_protocol = Some("https".into());
    svcs[0] = annotate(svcs[0].clone(), annotation::BACKEND_CA_SECRET, "a-ca");
    let mut s = secret("a-ca", "kubernetes.io/tls", &[("ca.crt", CA)]);
    s.metadata.namespace = Some("default".into());
    let secrets = [&s];
    let inputs = IngressInputs {
        secrets: &secrets,
        ..Default::default()
    };
    let o = Options::default();
    let (ss, es) = stores(&svcs, &slices);
    let (b1, _) = translate_changes(&ss, &es, inputs, None, &o, None);
    slices[0] = mk_slice("default", "a", "p80", 8080, &["10.0.0.1", "10.0.0.3"]);
    slices[0].metadata.name = Some("slice-0".into());
    slices[0].metadata.resource_version = Some("9999".into());
    let (ss, es) = stores(&svcs, &slices);
    let changes = slices_changed(&[key("default", "slice-0")]);
    let (b2, w2) = translate_changes(&ss, &es, inputs, Some(&changes), &o, Some(b1.previous()));
    let a = entry(&b2.table, "a");
    assert_eq!(addrs(a).len(), 2, "rebuilt with the new slice");
    let got = a.upstream.ca_bundle.as_ref().and_then(|b| b.pem.clone());
    assert_eq!(got.as_deref(), Some(CA.as_bytes()), "{w2:?}");
}
