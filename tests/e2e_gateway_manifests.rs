//! The Gateway API through the offline source (`--manifests`), over real sockets: a
//! GatewayClass, Gateway, HTTPRoute, ReferenceGrant (`v1`) and Namespaces read from the file
//! are served, and an edit of the file (a route's hostname, a Namespace's labels that a
//! listener's `allowedRoutes` selector reads) is served within the poll interval, with no
//! restart. Every wait is bounded.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod tls_client;

use std::time::Duration;

use common::*;
use serde_json::{Value, json};

fn objects(web: &Backend, host: &str, team: &str) -> Vec<Value> {
    vec![
        svc("web", 80).ns("shop").into(),
        slice_ns("shop", "web", "", web.port),
        json!({"apiVersion": "v1", "kind": "Namespace",
               "metadata": {"name": "shop", "labels": {"team": team}}}),
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "infra"}}),
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
               "metadata": {"name": "switchyard"},
               "spec": {"controllerName": "switchyard.io/gateway-controller"}}),
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
               "metadata": {"name": "gw", "namespace": "infra"},
               "spec": {"gatewayClassName": "switchyard", "listeners": [{
                   "name": "http", "port": 80, "protocol": "HTTP",
                   "allowedRoutes": {"namespaces": {"from": "Selector",
                                     "selector": {"matchLabels": {"team": "shop"}}}}}]}}),
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
               "metadata": {"name": "web", "namespace": "shop"},
               "spec": {"parentRefs": [{"name": "gw", "namespace": "infra"}],
                        "hostnames": [host],
                        "rules": [{"backendRefs": [{"name": "web", "port": 80}]}]}}),
        // Served as v1 as well as v1beta1; nothing here needs it, it must only read.
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "ReferenceGrant",
               "metadata": {"name": "g", "namespace": "shop"},
               "spec": {"from": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute",
                                  "namespace": "infra"}],
                        "to": [{"group": "", "kind": "Service"}]}}),
    ]
}

async fn status_of(sy: &Switchyard, host: &str) -> u16 {
    sy.get_host(host, "/").await.status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_objects_from_files_are_served_and_follow_edits() {
    let web = Backend::start("web").await;
    let sy = switchyard(objects(&web, "a.example", "shop"))
        .args(&["--gateway-http-port", "80"])
        .start()
        .await;
    expect_route(&sy, Some("a.example"), "/x", &web, "/x").await;
    // A new hostname: the old one stops, the new one serves.
    sy.rewrite(&objects(&web, "b.example", "shop"));
    let moved = eventually(Duration::from_secs(10), || async {
        status_of(&sy, "b.example").await == 200 && status_of(&sy, "a.example").await == 404
    })
    .await;
    assert!(moved, "the edited route was not served: {}", sy.stderr());
    // The Namespace no longer matches the listener's selector: the route detaches.
    sy.rewrite(&objects(&web, "b.example", "other"));
    let detached = eventually(Duration::from_secs(10), || async {
        status_of(&sy, "b.example").await == 404
    })
    .await;
    assert!(
        detached,
        "a Namespace label change was not read: {}",
        sy.stderr()
    );
}

/// `RequestMirror` copies a request's body too, as the client framed it (`content-length`) or
/// chunked (a chunked upload), while the client's own request is answered by its backend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mirrored_request_carries_its_body() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // The echo reads the whole body before it answers.
    let web = Backend::start("web").await;
    let copy = Backend::builder("copy")
        .behaviour(Behaviour::RecordOnce)
        .start()
        .await;
    let mut objs = objects(&web, "m.example", "shop");
    objs.push(svc("copy", 80).ns("shop").into());
    objs.push(slice_ns("shop", "copy", "", copy.port));
    // The route mirrors everything to `copy`.
    let route = objs.iter_mut().find(|o| o["kind"] == "HTTPRoute").unwrap();
    route["spec"]["rules"][0]["filters"] = json!([{"type": "RequestMirror",
        "requestMirror": {"backendRef": {"name": "copy", "port": 80}}}]);
    let sy = switchyard(objs)
        .args(&["--gateway-http-port", "80", "--check-interval", "0"])
        .start()
        .await;
    let served = eventually(Duration::from_secs(10), || async {
        status_of(&sy, "m.example").await == 200
    })
    .await;
    assert!(served, "the route was not served: {}", sy.stderr());
    let body = "x".repeat(40_000);
    let sent = [
        format!(
            "POST /up HTTP/1.1\r\nhost: m.example\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        ),
        format!(
            "POST /up HTTP/1.1\r\nhost: m.example\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n\
             {:x}\r\n{}\r\n{:x}\r\n{}\r\n0\r\n\r\n",
            30_000,
            &body[..30_000],
            10_000,
            &body[30_000..]
        ),
    ];
    for (i, request) in sent.iter().enumerate() {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", sy.http_port))
            .await
            .unwrap();
        s.write_all(request.as_bytes()).await.unwrap();
        let mut answer = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut answer)).await;
        let answer = String::from_utf8_lossy(&answer);
        assert!(
            read.is_ok_and(|r| r.is_ok())
                && answer.starts_with("HTTP/1.1 200")
                && answer.contains("x-backend: web"),
            "request {i}: {answer}\n{}",
            sy.stderr()
        );
    }
    // The copies are fire-and-forget: they land soon after the answers, complete.
    let posts = || -> Vec<String> {
        copy.used_connections()
            .iter()
            .map(|c| String::from_utf8_lossy(c).into_owned())
            .filter(|c| c.starts_with("POST /up HTTP/1.1\r\n"))
            .collect()
    };
    let complete = |c: &String| c.ends_with(&body) || c.ends_with("\r\n0\r\n\r\n");
    let copied = eventually(Duration::from_secs(10), || async {
        let p = posts();
        p.len() == 2 && p.iter().all(complete)
    })
    .await;
    let got = posts();
    assert!(
        copied,
        "two complete copies expected: {:?}",
        got.iter()
            .map(|c| (c.len(), c.get(c.len().saturating_sub(40)..).unwrap_or("")))
            .collect::<Vec<_>>()
    );
    let by_length = got.iter().find(|c| c.contains("content-length: 40000\r\n"));
    assert!(
        by_length.is_some_and(|c| c.ends_with(&body)),
        "the copy with a length"
    );
    // The chunked upload goes on chunked, all 40,000 bytes, ended.
    let chunked = got
        .iter()
        .find(|c| c.contains("transfer-encoding: chunked\r\n"))
        .expect("the chunked copy");
    let (_, chunks) = chunked.split_once("\r\n\r\n").unwrap();
    assert_eq!(dechunk(chunks), body, "the chunked copy's body");
    // The client's own backend got both requests.
    let own = web.requests();
    assert_eq!(own.iter().filter(|r| r.method == "POST").count(), 2);
}

/// A chunked body's payload (sizes in hex, no extensions or trailers).
fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(size, 16).unwrap();
        if n == 0 {
            break;
        }
        out.push_str(&rest[..n]);
        s = &rest[n + 2..];
    }
    out
}

/// `--gateway-addresses`: two Gateways with the same listeners (port 80 and 443, host
/// `gw.test`), each routing `/` to its own backend, get an address each (`one` the one it
/// names in `spec.addresses`, `two` the free one); a connection to an address is answered by
/// that Gateway's route alone, over HTTP/1, HTTP/2 (prior knowledge and over TLS) and TLS, on
/// both engines. A host no listener takes, and any other address, are the Service routes'.
/// `/explain` says the same with `local=`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_gateway_answers_alone_on_its_own_address() {
    let a = Backend::start("a").await;
    let b = Backend::start("b").await;
    let web = Backend::start("web").await;
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["gw.test".to_string()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let default_pem = dir.path().join("default.pem");
    std::fs::write(
        &default_pem,
        format!("{}{}", cert.pem(), key.serialize_pem()),
    )
    .unwrap();
    let gateway = |name: &str, addresses: Value| {
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
               "metadata": {"name": name, "namespace": "default"},
               "spec": {"gatewayClassName": "switchyard", "addresses": addresses, "listeners": [
                   {"name": "http", "port": 80, "protocol": "HTTP", "hostname": "gw.test"},
                   {"name": "https", "port": 443, "protocol": "HTTPS", "hostname": "gw.test",
                    "tls": {"certificateRefs": [{"name": "gw-cert"}]}}]}})
    };
    let route = |name: &str, gw: &str, svc: &str| {
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
               "metadata": {"name": name, "namespace": "default"},
               "spec": {"parentRefs": [{"name": gw}],
                        "rules": [{"backendRefs": [{"name": svc, "port": 80}]}]}})
    };
    let mut objs: Vec<Value> = vec![
        svc("a", 80).into(),
        svc("b", 80).into(),
        svc("web", 80).into(),
        slice("a", "", a.port),
        slice("b", "", b.port),
        slice("web", "", web.port),
        tls_secret("gw-cert", &cert.pem(), &key.serialize_pem()),
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
               "metadata": {"name": "switchyard"},
               "spec": {"controllerName": "switchyard.io/gateway-controller"}}),
        gateway("one", json!([{"type": "IPAddress", "value": "127.0.0.3"}])),
        gateway("two", json!([])),
    ];
    objs.push(route("to-a", "one", "a"));
    objs.push(route("to-b", "two", "b"));
    for engine in ENGINES {
        let https_port = free_port().to_string();
        let sy = switchyard_on(
            objs.clone(),
            engine,
            &[
                "--gateway-addresses",
                "127.0.0.2,127.0.0.3",
                "--gateway-http-port",
                "80",
                "--gateway-https-port",
                "443",
                "--https-port",
                &https_port,
                "--ssl-cert",
                default_pem.to_str().unwrap(),
            ],
        )
        .await;
        let http = sy.http_port.to_string();
        // (curl arguments, the backend that must answer)
        let url = |ip: &str, path: &str| format!("http://{ip}:{http}{path}");
        let tls = |ip: &str| {
            vec![
                "-k".to_string(),
                "--resolve".to_string(),
                format!("gw.test:{https_port}:{ip}"),
                format!("https://gw.test:{https_port}/"),
            ]
        };
        let host = |h: &str| vec!["-H".to_string(), format!("Host: {h}")];
        let cases: Vec<(Vec<String>, &str)> = vec![
            ([host("gw.test"), vec![url("127.0.0.3", "/")]].concat(), "a"),
            (
                [host("gw.test"), vec![url("127.0.0.2", "/web/x")]].concat(),
                "b",
            ),
            (
                [
                    host("gw.test"),
                    vec!["--http2-prior-knowledge".into(), url("127.0.0.3", "/")],
                ]
                .concat(),
                "a",
            ),
            (
                [
                    host("gw.test"),
                    vec!["--http2-prior-knowledge".into(), url("127.0.0.2", "/")],
                ]
                .concat(),
                "b",
            ),
            (tls("127.0.0.3"), "a"),
            (tls("127.0.0.2"), "b"),
            (
                [vec!["--http2".to_string()], tls("127.0.0.2")].concat(),
                "b",
            ),
            // A host no listener takes, and an address no Gateway has: the Service routes.
            (
                [host("other.test"), vec![url("127.0.0.2", "/web/x")]].concat(),
                "web",
            ),
            (
                [host("gw.test"), vec![url("127.0.0.1", "/web/x")]].concat(),
                "web",
            ),
        ];
        for (args, want) in cases {
            let ok = eventually(Duration::from_secs(10), || {
                let args = args.clone();
                async move { curl_backend(&args).await.as_deref() == Some(want) }
            })
            .await;
            assert!(
                ok,
                "engine {engine}: curl {args:?} did not reach {want} (last: {:?}):\n{}",
                curl_backend(&args).await,
                sy.stderr()
            );
            // The HTTP/2 cases did speak HTTP/2 (prior knowledge, or ALPN over TLS).
            if args.iter().any(|a| a.starts_with("--http2")) {
                let mut asked: Vec<String> = ["-o", "/dev/null", "-w", "%{http_version}"]
                    .iter()
                    .map(|s| s.to_string())
                    .collect();
                asked.extend(args.iter().cloned());
                let version = curl(&asked).await;
                assert_eq!(version, "2", "curl {args:?}");
            }
        }
        // /explain decides alike.
        for (local, backend) in [("127.0.0.3", &a), ("127.0.0.2", &b)] {
            let x = sy
                .admin(&format!("/explain?host=gw.test&path=/&local={local}"))
                .await
                .json();
            assert_eq!(x["endpoint"], format!("127.0.0.1:{}", backend.port), "{x}");
        }
    }
}

/// Two Gateways with an HTTPS listener for one hostname, each naming its own certificate.
/// With `--gateway-addresses` each one's certificate is presented on its own addresses (`one`
/// has two, and its route answers on both; the shared `--ssl-cert` one for names they do not
/// take, and on any other address); without, the older Gateway's is presented although its
/// Secret sorts last, and the other's conflict is logged naming both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_gateway_presents_its_own_certificate_on_its_own_address() {
    let a = Backend::start("a").await;
    let ca = tls_client::Ca::new("gateway certificates test CA");
    let one = ca.server(&["secure.test"]);
    let two = ca.server(&["secure.test"]);
    let shared = ca.server(&["secure.test", "other.test"]);
    let dir = tempfile::tempdir().unwrap();
    let shared_pem = dir.path().join("shared.pem");
    std::fs::write(&shared_pem, shared.bundle()).unwrap();
    // A `--ssl-cert` file for the name would win over every Secret: the second run has one
    // for another name only.
    let elsewhere_pem = dir.path().join("elsewhere.pem");
    std::fs::write(&elsewhere_pem, ca.server(&["other.test"]).bundle()).unwrap();
    let gateway = |name: &str, created: &str, addresses: Value, secret: &str| {
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
               "metadata": {"name": name, "namespace": "default", "creationTimestamp": created},
               "spec": {"gatewayClassName": "switchyard", "addresses": addresses, "listeners": [
                   {"name": "https", "port": 443, "protocol": "HTTPS", "hostname": "secure.test",
                    "tls": {"certificateRefs": [{"name": secret}]}}]}})
    };
    let objects = |with_addresses: bool| {
        let ask = |ips: &[&str]| {
            if with_addresses {
                ips.iter()
                    .map(|ip| json!({"type": "IPAddress", "value": ip}))
                    .collect()
            } else {
                json!([])
            }
        };
        vec![
            svc("a", 80).into(),
            slice("a", "", a.port),
            json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
                   "metadata": {"name": "to-a", "namespace": "default"},
                   "spec": {"parentRefs": [{"name": "one"}],
                            "rules": [{"backendRefs": [{"name": "a", "port": 80}]}]}}),
            tls_secret("a-cert", &one.cert_pem, &one.key_pem),
            tls_secret("z-cert", &two.cert_pem, &two.key_pem),
            json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
                   "metadata": {"name": "switchyard"},
                   "spec": {"controllerName": "switchyard.io/gateway-controller"}}),
            gateway(
                "one",
                "2026-02-01T00:00:00Z",
                ask(&["127.0.0.3", "127.0.0.4"]),
                "a-cert",
            ),
            gateway("two", "2026-01-01T00:00:00Z", ask(&["127.0.0.2"]), "z-cert"),
        ]
    };
    // The handshake is the same for both engines (the listener guard runs it).
    let https_port = free_port();
    let port = https_port.to_string();
    let common = ["--gateway-https-port", "443", "--https-port", &port];
    let sy = switchyard_on(
        objects(true),
        "true",
        &[
            &common[..],
            &["--ssl-cert", shared_pem.to_str().unwrap()],
            &["--gateway-addresses", "127.0.0.2,127.0.0.3,127.0.0.4"],
        ]
        .concat(),
    )
    .await;
    let cases = [
        ("secure.test", "127.0.0.3", &one, "one's address: one's"),
        (
            "secure.test",
            "127.0.0.4",
            &one,
            "one's other address: one's",
        ),
        ("secure.test", "127.0.0.2", &two, "two's address: two's"),
        (
            "other.test",
            "127.0.0.2",
            &shared,
            "a name no listener takes: the shared one",
        ),
        (
            "secure.test",
            "127.0.0.1",
            &shared,
            "another address: the shared one",
        ),
    ];
    for (name, ip, want, what) in cases {
        let ok = eventually(Duration::from_secs(10), || async {
            tls_client::sni(name)
                .presented_at(ip, https_port)
                .await
                .as_deref()
                == Some(&want.der[..])
        })
        .await;
        assert!(ok, "{what} ({name} on {ip}):\n{}", sy.stderr());
    }
    // one's route answers on both its addresses, and nowhere else.
    for (ip, want) in [
        ("127.0.0.3", Some("a")),
        ("127.0.0.4", Some("a")),
        ("127.0.0.2", None),
    ] {
        let args = vec![
            "-k".to_string(),
            "--resolve".to_string(),
            format!("secure.test:{https_port}:{ip}"),
            format!("https://secure.test:{https_port}/"),
        ];
        let ok = eventually(Duration::from_secs(10), || {
            let args = args.clone();
            async move { curl_backend(&args).await.as_deref() == want }
        })
        .await;
        assert!(ok, "{ip}: {:?}\n{}", curl_backend(&args).await, sy.stderr());
    }
    drop(sy);

    let sy = switchyard_on(
        objects(false),
        "true",
        &[
            &common[..],
            &["--ssl-cert", elsewhere_pem.to_str().unwrap()],
        ]
        .concat(),
    )
    .await;
    // (Only the bind address is listened on without the flag.)
    let ok = eventually(Duration::from_secs(10), || async {
        tls_client::sni("secure.test")
            .presented_at("127.0.0.1", https_port)
            .await
            .as_deref()
            == Some(&two.der[..])
    })
    .await;
    assert!(ok, "the older Gateway's certificate:\n{}", sy.stderr());
    let logged = eventually(Duration::from_secs(10), || async {
        sy.stderr()
            .contains("also listener https of Gateway default/two")
    })
    .await;
    assert!(logged, "the conflict is logged:\n{}", sy.stderr());
}

/// The backend that answered a curl run with `args`, if one of ours did.
async fn curl_backend(args: &[String]) -> Option<String> {
    let body: Value = serde_json::from_str(&curl(args).await).ok()?;
    body["backend"].as_str().map(str::to_string)
}

/// What a curl run with `args` wrote to stdout.
async fn curl(args: &[String]) -> String {
    let args = args.to_vec();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("curl")
            .args(["-sS", "--max-time", "5"])
            .args(&args)
            .output()
            .expect("run curl")
    })
    .await
    .expect("curl task");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// What curl got: the status (`000` when the handshake or connection failed) and the body.
async fn curl_status(args: &[String]) -> (String, String) {
    let mut args = args.to_vec();
    args.extend(["-w".to_string(), "\n%{http_code}".to_string()]);
    let out = curl(&args).await;
    let (body, code) = out.rsplit_once('\n').unwrap_or(("", &out));
    (code.to_string(), body.to_string())
}

/// Client-certificate validation on Gateway HTTPS listeners (`spec.tls.frontend`), both
/// engines, HTTP/1.1 and HTTP/2: `secure` (the default mode, AllowValidOnly) refuses the
/// handshake of a client without a certificate or with one of another CA and tells its
/// backend the verified subject; a request for it on a connection made to another listener's
/// name (which asked for no certificate) is answered 421, never routed; `open`
/// (AllowInsecureFallback) serves everyone and tells the backend whether the certificate
/// verified; `plain` asks nothing. The CA rotates live with its ConfigMap, and without it the
/// listener is not served at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_listeners_verify_client_certificates() {
    let a = Backend::start("a").await;
    let server_ca = tls_client::Ca::new("gateway frontend validation server CA");
    let server = server_ca.server(&["secure.test", "open.test", "plain.test"]);
    let trusted = tls_client::Ca::new("gateway frontend validation client CA");
    let other = tls_client::Ca::new("another client CA");
    let dir = tempfile::tempdir().unwrap();
    let pem = dir.path().join("server.pem");
    std::fs::write(&pem, server.bundle()).unwrap();
    let write_client = |name: &str, leaf: &tls_client::Leaf| {
        let cert = dir.path().join(format!("{name}.crt"));
        let key = dir.path().join(format!("{name}.key"));
        std::fs::write(&cert, &leaf.cert_pem).unwrap();
        std::fs::write(&key, &leaf.key_pem).unwrap();
        (cert.display().to_string(), key.display().to_string())
    };
    let alice = write_client("alice", &trusted.client("alice"));
    let mallory = write_client("mallory", &other.client("mallory"));
    let gateway = |name: &str, mode: Option<&str>| {
        let mut spec = json!({"gatewayClassName": "switchyard", "listeners": [
            {"name": "https", "port": 443, "protocol": "HTTPS", "hostname": format!("{name}.test"),
             "tls": {"certificateRefs": [{"name": "cert"}]}}]});
        if let Some(mode) = mode {
            spec["tls"] = json!({"frontend": {"default": {"validation": {
                "mode": mode,
                "caCertificateRefs": [{"group": "", "kind": "ConfigMap", "name": "client-ca"}]}}}});
        }
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
               "metadata": {"name": name, "namespace": "default"}, "spec": spec})
    };
    let objects = |ca: Option<&str>| {
        let mut objs = vec![
            svc("a", 80).into(),
            slice("a", "", a.port),
            tls_secret("cert", &server.cert_pem, &server.key_pem),
            json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
                   "metadata": {"name": "switchyard"},
                   "spec": {"controllerName": "switchyard.io/gateway-controller"}}),
            gateway("secure", Some("AllowValidOnly")),
            gateway("open", Some("AllowInsecureFallback")),
            gateway("plain", None),
            json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
                   "metadata": {"name": "to-a", "namespace": "default"},
                   "spec": {"parentRefs": [{"name": "secure"}, {"name": "open"}, {"name": "plain"}],
                            "rules": [{"backendRefs": [{"name": "a", "port": 80}]}]}}),
        ];
        if let Some(ca) = ca {
            objs.push(json!({"apiVersion": "v1", "kind": "ConfigMap",
                             "metadata": {"name": "client-ca", "namespace": "default"},
                             "data": {"ca.crt": ca}}));
        }
        objs
    };
    for engine in ENGINES {
        let https_port = free_port();
        let port = https_port.to_string();
        let sy = switchyard_on(
            objects(Some(&trusted.pem)),
            engine,
            &[
                "--gateway-https-port",
                "443",
                "--https-port",
                &port,
                "--ssl-cert",
                pem.to_str().unwrap(),
            ],
        )
        .await;
        // A request made to `sni`, for `host`, with `cert`, over `http`.
        let ask = |sni: &str, host: &str, cert: Option<&(String, String)>, http: &str| {
            let mut args = vec![
                "-k".to_string(),
                http.to_string(),
                "--resolve".to_string(),
                format!("{sni}:{https_port}:127.0.0.1"),
                "-H".to_string(),
                format!("Host: {host}"),
                format!("https://{sni}:{https_port}/private"),
            ];
            if let Some((crt, key)) = cert {
                args.extend(["--cert".into(), crt.clone(), "--key".into(), key.clone()]);
            }
            args
        };
        let seen = |body: &str, name: &str| -> Option<String> {
            let v: Value = serde_json::from_str(body).ok()?;
            v["headers"][name].as_str().map(str::to_string)
        };
        let before = a.count();
        for http in ["--http1.1", "--http2"] {
            let what = format!("{engine} {http}");
            // No certificate, or one of another CA: no handshake.
            let (code, _) = curl_status(&ask("secure.test", "secure.test", None, http)).await;
            assert_eq!(code, "000", "{what}");
            let (code, _) =
                curl_status(&ask("secure.test", "secure.test", Some(&mallory), http)).await;
            assert_eq!(code, "000", "{what}");
            // Made to a name that asks nothing, for the verifying host: 421, not routed.
            let (code, _) = curl_status(&ask("plain.test", "secure.test", None, http)).await;
            assert_eq!(code, "421", "{what}");
            // Made to the fallback listener with a certificate it did not verify: 421 too.
            let (code, _) =
                curl_status(&ask("open.test", "secure.test", Some(&mallory), http)).await;
            assert_eq!(
                code, "421",
                "{what}: not verified by the fallback's handshake"
            );
        }
        assert_eq!(
            a.count(),
            before,
            "nothing unverified reached the backend ({engine})"
        );
        for http in ["--http1.1", "--http2"] {
            let what = format!("{engine} {http}");
            let (code, body) =
                curl_status(&ask("secure.test", "secure.test", Some(&alice), http)).await;
            assert_eq!(code, "200", "{what}: {body}");
            assert_eq!(seen(&body, "x-client-verify").as_deref(), Some("SUCCESS"));
            let dn = seen(&body, "x-client-dn").unwrap_or_default();
            assert!(dn.contains("alice"), "{what}: {dn}");
            // Verified against the same CA by the fallback listener's handshake: it proved
            // what `secure` asks.
            let (code, _) = curl_status(&ask("open.test", "secure.test", Some(&alice), http)).await;
            assert_eq!(code, "200", "{what}");
            // A verified connection may ask a host that verifies nothing.
            let (code, body) =
                curl_status(&ask("secure.test", "plain.test", Some(&alice), http)).await;
            assert_eq!(code, "200", "{what}: {body}");
            assert_eq!(seen(&body, "x-client-verify"), None, "{what}");
            // The fallback listener serves everyone, and says who was verified.
            for (cert, verify) in [
                (None, "NONE"),
                (Some(&mallory), "NONE"),
                (Some(&alice), "SUCCESS"),
            ] {
                let (code, body) = curl_status(&ask("open.test", "open.test", cert, http)).await;
                assert_eq!(code, "200", "{what}: {body}");
                assert_eq!(
                    seen(&body, "x-client-verify").as_deref(),
                    Some(verify),
                    "{what}"
                );
            }
            // A client cannot claim a verification itself.
            let mut args = ask("plain.test", "plain.test", None, http);
            args.extend(["-H".into(), "x-client-verify: SUCCESS".into()]);
            let (code, body) = curl_status(&args).await;
            assert_eq!(code, "200", "{what}: {body}");
            assert_eq!(seen(&body, "x-client-verify"), None, "{what}");
        }
        // The CA rotates with its ConfigMap.
        sy.rewrite(&objects(Some(&other.pem)));
        let rotated = eventually(Duration::from_secs(10), || async {
            curl_status(&ask(
                "secure.test",
                "secure.test",
                Some(&mallory),
                "--http1.1",
            ))
            .await
            .0 == "200"
        })
        .await;
        assert!(rotated, "{engine}:\n{}", sy.stderr());
        let (code, _) = curl_status(&ask(
            "secure.test",
            "secure.test",
            Some(&alice),
            "--http1.1",
        ))
        .await;
        assert_eq!(code, "000", "{engine}: the old CA no longer verifies");
        // Without its CA the listener is not served at all (no route takes the host: 404),
        // and says why.
        sy.rewrite(&objects(None));
        let before = a.count();
        let unserved = eventually(Duration::from_secs(10), || async {
            curl_status(&ask("secure.test", "secure.test", None, "--http1.1"))
                .await
                .0
                == "404"
        })
        .await;
        assert!(unserved, "{engine}:\n{}", sy.stderr());
        assert_eq!(a.count(), before, "{engine}");
        let log = sy.stderr();
        assert!(
            log.lines().any(|l| l.contains("default/secure")
                && l.contains("NotServed")
                && l.contains("caCertificateRef")),
            "{engine}:\n{log}"
        );
    }
}

/// HTTP and HTTPS listeners on ports of their own: each port opened as written, its requests
/// routed by its listeners alone (another host: 404, never the main port's routes), over
/// HTTP/1.1 and HTTP/2, on both engines; the port closed when its listener goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listeners_on_ports_of_their_own_are_served_there() {
    let a = Backend::start("a").await;
    let ca = tls_client::Ca::new("own ports CA");
    let server = ca.server(&["own.test"]);
    let (http_own, https_own) = (free_port(), free_port());
    let objects = |with_ports: bool| {
        let mut listeners = vec![json!({"name": "main", "port": 80, "protocol": "HTTP",
            "hostname": "main.test"})];
        if with_ports {
            listeners.push(
                json!({"name": "plain", "port": http_own, "protocol": "HTTP",
                "hostname": "own.test"}),
            );
            listeners.push(
                json!({"name": "tls", "port": https_own, "protocol": "HTTPS",
                "hostname": "own.test", "tls": {"certificateRefs": [{"name": "cert"}]}}),
            );
        }
        vec![
            svc("a", 80).into(),
            slice("a", "", a.port),
            tls_secret("cert", &server.cert_pem, &server.key_pem),
            json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
                   "metadata": {"name": "switchyard"},
                   "spec": {"controllerName": "switchyard.io/gateway-controller"}}),
            json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
                   "metadata": {"name": "gw", "namespace": "default"},
                   "spec": {"gatewayClassName": "switchyard", "listeners": listeners}}),
            json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
                   "metadata": {"name": "to-a", "namespace": "default"},
                   "spec": {"parentRefs": [{"name": "gw"}],
                            "rules": [{"backendRefs": [{"name": "a", "port": 80}]}]}}),
        ]
    };
    // The TLS port opens with a certificate of its own (offline, --ssl-cert); the listener's
    // Secret serves own.test by SNI on its port.
    let dir = tempfile::tempdir().unwrap();
    let default = dir.path().join("default.pem");
    std::fs::write(&default, ca.server(&["default.test"]).bundle()).unwrap();
    for engine in ENGINES {
        let https_port = free_port().to_string();
        let sy = switchyard_on(
            objects(true),
            engine,
            &[
                "--gateway-http-port",
                "80",
                "--https-port",
                &https_port,
                "--ssl-cert",
                default.to_str().unwrap(),
            ],
        )
        .await;
        let plain = |host: &str, http: &str| {
            vec![
                http.to_string(),
                "-H".to_string(),
                format!("Host: {host}"),
                format!("http://127.0.0.1:{http_own}/x"),
            ]
        };
        let tls = |host: &str, http: &str| {
            vec![
                "-k".to_string(),
                http.to_string(),
                "--resolve".to_string(),
                format!("own.test:{https_own}:127.0.0.1"),
                "-H".to_string(),
                format!("Host: {host}"),
                format!("https://own.test:{https_own}/x"),
            ]
        };
        let opened = eventually(Duration::from_secs(10), || async {
            curl_status(&plain("own.test", "--http1.1")).await.0 == "200"
        })
        .await;
        assert!(
            opened,
            "{engine}: port {http_own} never served:\n{}",
            sy.stderr()
        );
        for http in ["--http1.1", "--http2-prior-knowledge"] {
            let (code, body) = curl_status(&plain("own.test", http)).await;
            assert_eq!(code, "200", "{engine} {http}: {body}");
            // The main port's listener's host is not this port's.
            let (code, _) = curl_status(&plain("main.test", http)).await;
            assert_eq!(code, "404", "{engine} {http}");
        }
        for http in ["--http1.1", "--http2"] {
            let (code, body) = curl_status(&tls("own.test", http)).await;
            assert_eq!(code, "200", "{engine} {http}: {body}");
            let (code, _) = curl_status(&tls("main.test", http)).await;
            assert_eq!(code, "404", "{engine} {http}");
        }
        // The listeners go: their ports close.
        sy.rewrite(&objects(false));
        let closed = eventually(Duration::from_secs(10), || async {
            std::net::TcpStream::connect(("127.0.0.1", http_own)).is_err()
                && std::net::TcpStream::connect(("127.0.0.1", https_own)).is_err()
        })
        .await;
        assert!(closed, "{engine}: the ports stayed open:\n{}", sy.stderr());
    }
}
