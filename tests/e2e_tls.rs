//! End-to-end checks of TLS termination: real handshakes from a rustls client against a
//! switchyard subprocess on 127.0.0.1, certificates made here with rcgen. Every wait is bounded.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod tls_client;

use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use common::*;
use http::Request;
use http_body_util::Empty;
use hyper_util::rt::TokioIo;
use rcgen::{CertificateParams, KeyPair};
use serde_json::Value;
use tls_client::{Ca, Client, IO_TIMEOUT, sni};
use tokio::net::TcpStream;

/// Tests run in parallel: none may take the fixed default stats port.
const NO_STATS: &[&str] = &["--stats-port", "0"];
const ANN_SSL: &str = "serviceloadbalancer/lb.sslTerm";

// ---------------------------------------------------------------------------
// Certificates (the CA and its leaves are `tls_client`'s)
// ---------------------------------------------------------------------------

/// Writes `contents` to `path` atomically (temp file + rename), as a rotation tool would.
fn replace(path: &Path, contents: &str) {
    let tmp = path.with_extension("tmp-write");
    std::fs::write(&tmp, contents).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

// ---------------------------------------------------------------------------
// Setup
// ---------------------------------------------------------------------------

/// `secure` (lb.sslTerm) and `plain` Services, each with one backend.
fn objs(secure: &Backend, plain: &Backend) -> Vec<Value> {
    let mut objs: Vec<Value> = vec![
        svc("secure", 80).ann(ANN_SSL, "true").into(),
        svc("plain", 80).into(),
    ];
    objs.extend(slices("secure", &[secure]));
    objs.extend(slices("plain", &[plain]));
    objs
}

struct Tls {
    sy: Switchyard,
    port: u16,
    secure: Backend,
    _plain: Backend,
}

async fn start(args: &[&str]) -> Tls {
    let secure = Backend::start("secure").await;
    let plain = Backend::start("plain").await;
    let port = free_port();
    let port_s = port.to_string();
    let sy = switchyard(objs(&secure, &plain))
        .args(&["--https-port", &port_s])
        .args(args)
        .start()
        .await;
    let up = eventually(Duration::from_secs(10), || async {
        TcpStream::connect(("127.0.0.1", port)).await.is_ok()
    })
    .await;
    assert!(up, "TLS port never opened; stderr:\n{}", sy.stderr());
    Tls {
        sy,
        port,
        secure,
        _plain: plain,
    }
}

fn path_str(p: &Path) -> &str {
    p.to_str().unwrap()
}

// ---------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------

#[tokio::test]
async fn sni_picks_the_certificate_and_the_default_serves_clients_without_sni() {
    let ca = Ca::new("server CA");
    let (a, b, w, d) = (
        ca.server(&["a.test"]),
        ca.server(&["b.test"]),
        ca.server(&["*.wild.test"]),
        ca.server(&["default.test"]),
    );
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    std::fs::create_dir(&certs).unwrap();
    std::fs::write(certs.join("a.pem"), a.bundle()).unwrap();
    std::fs::write(certs.join("b.pem"), b.bundle()).unwrap();
    std::fs::write(certs.join("c-wild.pem"), w.bundle()).unwrap();
    std::fs::write(certs.join("d-default.pem"), d.bundle()).unwrap();
    let t = start(&[
        "--ssl-cert",
        path_str(&certs),
        "--ssl-default-cert",
        "d-default.pem",
    ])
    .await;

    assert_eq!(sni("a.test").presented(t.port).await, a.der);
    assert_eq!(sni("b.test").presented(t.port).await, b.der);
    assert_eq!(sni("B.TEST").presented(t.port).await, b.der);
    assert_eq!(sni("x.wild.test").presented(t.port).await, w.der);
    assert_eq!(Client::default().presented(t.port).await, d.der);
    assert_eq!(sni("unknown.test").presented(t.port).await, d.der);

    // sslTerm Services are served on the TLS port, with HSTS, and only there.
    let r = sni("a.test").get(t.port, "/secure/x", &[]).await.unwrap();
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.backend().as_deref(), Some("secure"));
    assert_eq!(r.seen_header("x-forwarded-proto").as_deref(), Some("https"));
    assert_eq!(
        r.header("strict-transport-security").as_deref(),
        Some("max-age=15768000")
    );
    // Without --ssl-ca-cert nobody vouches for a client, whatever it claims.
    let r = sni("a.test")
        .get(t.port, "/secure/", &[("x-client-verify", "SUCCESS")])
        .await
        .unwrap();
    assert_eq!(r.seen_header("x-client-verify"), None);
    let r = sni("a.test").get(t.port, "/plain/", &[]).await.unwrap();
    assert_eq!(r.status, 404, "plain Services are not on the TLS port");
    assert_eq!(
        r.header("strict-transport-security").as_deref(),
        Some("max-age=15768000"),
        "switchyard's own pages carry HSTS too"
    );
    assert_eq!(
        t.sy.get("/secure/").await.status,
        404,
        "not on the plain port"
    );
    assert_eq!(t.sy.get("/plain/").await.status, 200);
}

#[tokio::test]
async fn http2_works_end_to_end_over_tls() {
    let ca = Ca::new("server CA");
    let a = ca.server(&["a.test"]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a.pem");
    std::fs::write(&file, a.bundle()).unwrap();
    let t = start(&["--ssl-cert", path_str(&file)]).await;

    let h2 = Client {
        sni: Some("a.test"),
        h2: true,
        ..Default::default()
    };
    let tls = h2.connect(t.port).await.unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    assert_eq!(
        tls.get_ref().1.protocol_version(),
        Some(rustls::ProtocolVersion::TLSv1_3)
    );
    drop(tls);
    for i in 0..3 {
        let r = h2
            .get(t.port, &format!("/secure/h2/{i}"), &[])
            .await
            .unwrap();
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(r.uri(), format!("/h2/{i}"));
        assert!(r.header("strict-transport-security").is_some());
    }
    assert_eq!(t.secure.count(), 3);
}

#[tokio::test]
async fn client_certificates_required() {
    let server_ca = Ca::new("server CA");
    let client_ca = Ca::new("client CA");
    let other_ca = Ca::new("some other CA");
    let dir = tempfile::tempdir().unwrap();
    let cert = dir.path().join("a.pem");
    let ca_file = dir.path().join("clients.pem");
    std::fs::write(&cert, server_ca.server(&["a.test"]).bundle()).unwrap();
    std::fs::write(&ca_file, &client_ca.pem).unwrap();
    let t = start(&[
        "--ssl-cert",
        path_str(&cert),
        "--ssl-ca-cert",
        path_str(&ca_file),
    ])
    .await;

    let good = client_ca.client("alice");
    let r = Client {
        sni: Some("a.test"),
        cert: Some(&good),
        ..Default::default()
    }
    .get(t.port, "/secure/", &[("x-client-dn", "/CN=mallory")])
    .await
    .unwrap();
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.seen_header("x-client-verify").as_deref(), Some("SUCCESS"));
    assert_eq!(
        r.seen_header("x-client-dn").as_deref(),
        Some("/CN=alice/O=Switchyard Tests")
    );
    let served = t.secure.count();

    let none = sni("a.test").get(t.port, "/secure/", &[]).await;
    assert!(none.is_err(), "no client certificate got through: {none:?}");
    let foreign = other_ca.client("eve");
    let r = Client {
        sni: Some("a.test"),
        cert: Some(&foreign),
        ..Default::default()
    }
    .get(t.port, "/secure/", &[])
    .await;
    assert!(
        r.is_err(),
        "a certificate from another CA got through: {r:?}"
    );
    let expired = client_ca.expired_client("old-alice");
    let r = Client {
        sni: Some("a.test"),
        cert: Some(&expired),
        ..Default::default()
    }
    .get(t.port, "/secure/", &[])
    .await;
    assert!(r.is_err(), "an expired certificate got through: {r:?}");
    assert_eq!(
        t.secure.count(),
        served,
        "no rejected client reached the backend"
    );
}

#[tokio::test]
async fn client_certificates_optional() {
    let server_ca = Ca::new("server CA");
    let client_ca = Ca::new("client CA");
    let other_ca = Ca::new("some other CA");
    let dir = tempfile::tempdir().unwrap();
    let cert = dir.path().join("a.pem");
    let ca_file = dir.path().join("clients.pem");
    std::fs::write(&cert, server_ca.server(&["a.test"]).bundle()).unwrap();
    std::fs::write(&ca_file, &client_ca.pem).unwrap();
    let t = start(&[
        "--ssl-cert",
        path_str(&cert),
        "--ssl-ca-cert",
        path_str(&ca_file),
        "--ssl-verify",
        "optional",
    ])
    .await;

    let r = sni("a.test")
        .get(
            t.port,
            "/secure/",
            &[
                ("x-client-verify", "SUCCESS"),
                ("x-client-dn", "/CN=mallory"),
            ],
        )
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.seen_header("x-client-verify").as_deref(), Some("NONE"));
    assert_eq!(r.seen_header("x-client-dn"), None, "a forged DN is removed");

    let good = client_ca.client("bob");
    let with_cert = Client {
        sni: Some("a.test"),
        cert: Some(&good),
        h2: true,
    };
    let r = with_cert.get(t.port, "/secure/", &[]).await.unwrap();
    assert_eq!(r.seen_header("x-client-verify").as_deref(), Some("SUCCESS"));
    assert_eq!(
        r.seen_header("x-client-dn").as_deref(),
        Some("/CN=bob/O=Switchyard Tests")
    );

    let foreign = other_ca.client("eve");
    let r = Client {
        sni: Some("a.test"),
        cert: Some(&foreign),
        ..Default::default()
    }
    .get(t.port, "/secure/", &[])
    .await;
    assert!(
        r.is_err(),
        "an invalid certificate fails even when optional: {r:?}"
    );
}

#[tokio::test]
async fn certificates_rotate_without_restart_and_a_bad_replacement_keeps_the_old_one() {
    let ca = Ca::new("server CA");
    let (v1, v2) = (ca.server(&["a.test"]), ca.server(&["a.test"]));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a.pem");
    std::fs::write(&file, v1.bundle()).unwrap();
    let mut t = start(&["--ssl-cert", path_str(&file)]).await;
    assert_eq!(sni("a.test").presented(t.port).await, v1.der);

    // A connection made before the rotation keeps working after it.
    let client = sni("a.test");
    let tls = client.connect(t.port).await.unwrap();
    let (mut kept, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .unwrap();
    tokio::spawn(conn);

    replace(&file, &v2.bundle());
    let rotated = eventually(Duration::from_secs(10), || async {
        sni("a.test").presented(t.port).await == v2.der
    })
    .await;
    assert!(
        rotated,
        "new certificate never served; stderr:\n{}",
        t.sy.stderr()
    );
    assert!(t.sy.child.try_wait().unwrap().is_none(), "no restart");
    let req = Request::get("/secure/")
        .header("host", "a.test")
        .body(Empty::<Bytes>::new())
        .unwrap();
    let resp = tokio::time::timeout(IO_TIMEOUT, kept.send_request(req))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(resp.status(), 200);

    // Bad replacements: garbage, a key that does not match, an expired certificate.
    let other = ca.server(&["a.test"]);
    let expired = {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(vec!["a.test".to_string()]).unwrap();
        p.not_before = rcgen::date_time_ymd(2001, 1, 1);
        p.not_after = rcgen::date_time_ymd(2002, 1, 1);
        let c = p.signed_by(&key, &ca.issuer).unwrap();
        format!("{}{}", c.pem(), key.serialize_pem())
    };
    let bad = [
        (
            "garbage",
            "-----BEGIN CERTIFICATE-----\nnot base64 at all\n".to_string(),
        ),
        (
            "mismatched key",
            format!("{}{}", v2.cert_pem, other.key_pem),
        ),
        ("expired", expired),
    ];
    for (what, contents) in bad {
        let before =
            t.sy.stderr()
                .matches("rejected the new certificate")
                .count();
        replace(&file, &contents);
        let warned = eventually(Duration::from_secs(10), || async {
            t.sy.stderr()
                .matches("rejected the new certificate")
                .count()
                > before
        })
        .await;
        assert!(warned, "{what}: no warning; stderr:\n{}", t.sy.stderr());
        assert_eq!(
            sni("a.test").presented(t.port).await,
            v2.der,
            "{what}: the old certificate keeps serving"
        );
        let r = sni("a.test").get(t.port, "/secure/", &[]).await.unwrap();
        assert_eq!(r.status, 200);
    }
    assert!(!t.sy.stderr().contains("panicked"));

    // And a good one after the bad ones is picked up again.
    let v3 = ca.server(&["a.test"]);
    replace(&file, &v3.bundle());
    assert!(
        eventually(Duration::from_secs(10), || async {
            sni("a.test").presented(t.port).await == v3.der
        })
        .await
    );
    let _ = t.sy.child.kill();
}

#[tokio::test]
async fn a_rotated_client_ca_applies_to_the_next_handshake() {
    let server_ca = Ca::new("server CA");
    let (old_ca, new_ca) = (Ca::new("old client CA"), Ca::new("new client CA"));
    let dir = tempfile::tempdir().unwrap();
    let cert = dir.path().join("a.pem");
    let ca_file = dir.path().join("clients.pem");
    std::fs::write(&cert, server_ca.server(&["a.test"]).bundle()).unwrap();
    std::fs::write(&ca_file, &old_ca.pem).unwrap();
    let t = start(&[
        "--ssl-cert",
        path_str(&cert),
        "--ssl-ca-cert",
        path_str(&ca_file),
    ])
    .await;
    let (old_client, new_client) = (old_ca.client("old"), new_ca.client("new"));
    let with = |leaf| Client {
        sni: Some("a.test"),
        cert: Some(leaf),
        ..Default::default()
    };
    assert_eq!(
        with(&old_client)
            .get(t.port, "/secure/", &[])
            .await
            .unwrap()
            .status,
        200
    );
    assert!(
        with(&new_client)
            .get(t.port, "/secure/", &[])
            .await
            .is_err()
    );

    // An empty bundle is rejected and the old CA keeps verifying.
    replace(&ca_file, "");
    assert!(
        eventually(Duration::from_secs(10), || async {
            t.sy.stderr().contains("rejected the new client CA bundle")
        })
        .await,
        "stderr:\n{}",
        t.sy.stderr()
    );
    assert_eq!(
        with(&old_client)
            .get(t.port, "/secure/", &[])
            .await
            .unwrap()
            .status,
        200
    );

    replace(&ca_file, &new_ca.pem);
    assert!(
        eventually(Duration::from_secs(10), || async {
            with(&new_client).get(t.port, "/secure/", &[]).await.is_ok()
        })
        .await,
        "new CA never applied; stderr:\n{}",
        t.sy.stderr()
    );
    assert!(
        with(&old_client)
            .get(t.port, "/secure/", &[])
            .await
            .is_err()
    );
}

#[tokio::test]
async fn bad_tls_files_are_startup_errors_not_panics() {
    let ca = Ca::new("server CA");
    let dir = tempfile::tempdir().unwrap();
    let manifest = dir.path().join("m.yaml");
    std::fs::write(&manifest, "").unwrap();
    let good = dir.path().join("good.pem");
    std::fs::write(&good, ca.server(&["a.test"]).bundle()).unwrap();
    let cert_only = dir.path().join("cert-only.pem");
    std::fs::write(&cert_only, ca.server(&["a.test"]).cert_pem).unwrap();
    let empty = dir.path().join("empty.pem");
    std::fs::write(&empty, "").unwrap();
    let missing: PathBuf = dir.path().join("missing.pem");
    let empty_dir = dir.path().join("empty.d");
    std::fs::create_dir(&empty_dir).unwrap();
    let cases: [(&str, Vec<&str>, &str); 5] = [
        (
            "empty CA bundle",
            vec![
                "--ssl-cert",
                path_str(&good),
                "--ssl-ca-cert",
                path_str(&empty),
            ],
            "no CA certificate",
        ),
        (
            "unreadable CA bundle",
            vec![
                "--ssl-cert",
                path_str(&good),
                "--ssl-ca-cert",
                path_str(&missing),
            ],
            "missing.pem",
        ),
        (
            "certificate without key",
            vec!["--ssl-cert", path_str(&cert_only)],
            "no private key",
        ),
        (
            "missing certificate",
            vec!["--ssl-cert", path_str(&missing)],
            "missing.pem",
        ),
        (
            "empty directory",
            vec!["--ssl-cert", path_str(&empty_dir)],
            "no certificate file",
        ),
    ];
    for (what, args, expect) in cases {
        let https = free_port().to_string();
        let http = free_port().to_string();
        let admin = free_port().to_string();
        let mut all = vec![
            "--manifests",
            path_str(&manifest),
            "--bind-address",
            "127.0.0.1",
            "--https-port",
            &https,
            "--http-port",
            &http,
            "--admin-port",
            &admin,
        ];
        all.extend(NO_STATS);
        all.extend(args);
        let out = run_to_exit(&all);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{what}: started anyway");
        assert!(!stderr.contains("panicked"), "{what}: panicked:\n{stderr}");
        assert!(
            stderr.contains(expect),
            "{what}: stderr lacks {expect:?}:\n{stderr}"
        );
    }
}
