//! Leader election and the Ingress status writer against the in-process fake API server (real
//! HTTP): two `switchyard` binaries elect one leader through a Lease, a killed leader is
//! replaced within the lease duration and a stopped one at once; the status writer, driven
//! through the library, sets and clears `status.loadBalancer.ingress`, writes only while
//! leading, leaves other controllers' addresses alone and costs one write per Ingress that
//! differs, not one per Ingress.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod kube_api;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{eventually, poll, try_request};
use kube_api::{FakeApi, Kind, Watching};
use serde_json::{Value, json};
use switchyard::control::lease::{self, Election};
use switchyard::control::status::{Address, Limits, Publish, Served, StatusWriter};
use switchyard::ops::metrics::Metrics;
use tokio::sync::watch;

const LEASE: &str = "switchyard-leader";

fn client(api: &FakeApi) -> kube::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = kube::Config::new(format!("http://127.0.0.1:{}", api.port).parse().unwrap());
    kube::Client::try_from(config).unwrap()
}

fn ingress(name: &str, addresses: &[&str]) -> Value {
    let lb: Vec<Value> = addresses.iter().map(|a| json!({ "ip": a })).collect();
    json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"ingressClassName": "switchyard",
                 "rules": [{"host": format!("{name}.example.com")}]},
        "status": {"loadBalancer": if lb.is_empty() { json!({}) } else { json!({"ingress": lb}) }},
    })
}

/// The IPs in an Ingress's status, as stored by the fake.
fn status_of(api: &FakeApi, name: &str) -> Vec<String> {
    let obj = api.object(Kind::Ingress, "default", name).unwrap();
    obj["status"]["loadBalancer"]["ingress"]
        .as_array()
        .map(|l| {
            l.iter()
                .map(|i| {
                    i["ip"]
                        .as_str()
                        .or(i["hostname"].as_str())
                        .unwrap()
                        .to_string()
                })
                .collect()
        })
        .unwrap_or_default()
}

fn served(names: &[&str]) -> Served {
    Arc::new(
        names
            .iter()
            .map(|n| ("default".to_string(), n.to_string()))
            .collect(),
    )
}

const OURS: &str = "203.0.113.7";
const OTHER: &str = "198.51.100.1";

/// A status writer with a static address, fast limits, and its inputs.
struct Writer {
    served: watch::Sender<Served>,
    leader: watch::Sender<bool>,
    _stop: watch::Sender<bool>,
    metrics: Arc<Metrics>,
}

fn start_writer(api: &FakeApi, publish: Publish, leading: bool, limits: Limits) -> Writer {
    let (served_tx, served_rx) = watch::channel(Served::default());
    let (leader_tx, leader_rx) = watch::channel(leading);
    let (stop_tx, stop_rx) = watch::channel(false);
    let metrics = Arc::new(Metrics::new());
    StatusWriter {
        client: client(api),
        namespace: None,
        publish,
        served: served_rx,
        leader: leader_rx,
        limits,
        metrics: Arc::clone(&metrics),
    }
    .spawn(stop_rx);
    Writer {
        served: served_tx,
        leader: leader_tx,
        _stop: stop_tx,
        metrics,
    }
}

fn fast() -> Limits {
    Limits {
        coalesce: Duration::from_millis(100),
        concurrency: 16,
        per_second: 10_000.0,
        burst: 10_000,
    }
}

fn ours() -> Publish {
    Publish::Static(vec![Address::parse(OURS)])
}

async fn until(what: &str, mut check: impl FnMut() -> bool) {
    let ok = eventually(Duration::from_secs(10), || {
        let v = check();
        async move { v }
    })
    .await;
    assert!(ok, "{what}: not within 10 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn served_ingresses_get_the_address_and_unserved_ones_are_cleared() {
    let api = FakeApi::start().await;
    api.apply_all(vec![
        ingress("a", &[]),
        ingress("b", &[]),
        ingress("other", &[OTHER]),
    ]);
    let w = start_writer(&api, ours(), true, fast());
    w.served.send(served(&["a", "b"])).unwrap();
    until("a and b get the address", || {
        status_of(&api, "a") == [OURS] && status_of(&api, "b") == [OURS]
    })
    .await;
    w.served.send(served(&["a"])).unwrap();
    until("b is cleared", || status_of(&api, "b").is_empty()).await;
    assert_eq!(status_of(&api, "a"), [OURS]);
    // Another controller's Ingress, never served here, is left alone throughout.
    assert_eq!(status_of(&api, "other"), [OTHER]);
    let (writes, busiest) = api.status_writes(Kind::Ingress);
    assert_eq!((writes, busiest), (3, 2), "a set, b set, b cleared");
    // Nothing happens without a change.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(api.status_writes(Kind::Ingress).0, 3);
    let text = w.metrics.render();
    assert!(
        text.contains("switchyard_status_writes_total{result=\"written\"} 3"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_leader_writes_and_a_new_leader_reconciles_everything() {
    let api = FakeApi::start().await;
    api.apply_all(vec![ingress("a", &[]), ingress("b", &[OURS])]);
    let w = start_writer(&api, ours(), false, fast());
    w.served.send(served(&["a"])).unwrap();
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(
        api.status_writes(Kind::Ingress).0,
        0,
        "a replica that is not leading writes nothing"
    );
    // Leading: everything is reconciled once, without another served-set change.
    w.leader.send(true).unwrap();
    until("a set and b cleared by the new leader", || {
        status_of(&api, "a") == [OURS] && status_of(&api, "b").is_empty()
    })
    .await;
    // No longer leading: a change is not written.
    w.leader.send(false).unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    w.served.send(served(&[])).unwrap();
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(status_of(&api, "a"), [OURS]);
    assert_eq!(api.status_writes(Kind::Ingress).0, 2);
}

/// 2,000 Ingresses: the first served set costs one write each; a burst of changes within the
/// coalescing window costs only the Ingresses whose status ends up different; one Ingress
/// dropped costs one write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_ingresses_cost_a_write_only_where_status_differs() {
    const N: usize = 2000;
    let api = FakeApi::start().await;
    let names: Vec<String> = (0..N).map(|i| format!("ing-{i:04}")).collect();
    api.apply_all(names.iter().map(|n| ingress(n, &[])).collect());
    let limits = Limits {
        coalesce: Duration::from_millis(400),
        ..fast()
    };
    let w = start_writer(&api, ours(), true, limits);
    let all: Served = Arc::new(
        names
            .iter()
            .map(|n| ("default".to_string(), n.clone()))
            .collect(),
    );
    let started = Instant::now();
    w.served.send(Arc::clone(&all)).unwrap();
    let done = poll(
        Duration::from_secs(60),
        Duration::from_millis(100),
        || async { (api.status_writes(Kind::Ingress).0 as usize >= N).then_some(()) },
    )
    .await;
    assert!(done.is_some(), "not all {N} written within 60 s");
    println!("{N} Ingresses set in {:?}", started.elapsed());
    assert_eq!(api.status_writes(Kind::Ingress), (N as u32, 1));
    // A burst: 20 sets in a row, each without a different ten Ingresses, ending with the
    // first ten unserved.
    for round in (0..20).rev() {
        let without: BTreeSet<(String, String)> = all
            .iter()
            .filter(|(_, n)| {
                let i: usize = n[4..].parse().unwrap();
                !(round * 10..round * 10 + 10).contains(&i)
            })
            .cloned()
            .collect();
        w.served.send(Arc::new(without)).unwrap();
    }
    until("the first ten cleared", || {
        (0..10).all(|i| status_of(&api, &names[i]).is_empty())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    let (writes, _) = api.status_writes(Kind::Ingress);
    let burst = writes as usize - N;
    println!("a burst of 20 served-set changes cost {burst} writes");
    // Exactly 10 when the burst falls in one window; a slow machine may split it once.
    assert!(
        (10..=60).contains(&burst),
        "a burst cost {burst} writes, not ~10"
    );
    for (i, n) in names.iter().enumerate() {
        let want: &[&str] = if i < 10 { &[] } else { &[OURS] };
        assert_eq!(status_of(&api, n), want, "{n}");
    }
    // One more Ingress unserved: one write.
    let mut fewer = (*all).clone();
    for n in &names[..11] {
        fewer.remove(&("default".to_string(), n.clone()));
    }
    let before = api.status_writes(Kind::Ingress).0;
    w.served.send(Arc::new(fewer)).unwrap();
    until("ing-0010 cleared", || {
        status_of(&api, &names[10]).is_empty()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(api.status_writes(Kind::Ingress).0, before + 1);
}

/// The token bucket holds the writer to its rate after the burst.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_are_rate_limited() {
    let api = FakeApi::start().await;
    let names: Vec<String> = (0..30).map(|i| format!("r-{i:02}")).collect();
    api.apply_all(names.iter().map(|n| ingress(n, &[])).collect());
    let limits = Limits {
        coalesce: Duration::from_millis(50),
        concurrency: 4,
        per_second: 20.0,
        burst: 5,
    };
    let w = start_writer(&api, ours(), true, limits);
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let started = Instant::now();
    w.served.send(served(&refs)).unwrap();
    until("all 30 written", || {
        api.status_writes(Kind::Ingress).0 == 30
    })
    .await;
    let took = started.elapsed();
    // 5 at once, then 25 at 20 a second: at least 1.25 s.
    assert!(took >= Duration::from_millis(1200), "30 writes in {took:?}");
}

/// `--publish-service`: the Service's load-balancer address is published, follows the
/// Service, and an address published before is cleared from Ingresses no longer served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_published_service_address_is_followed() {
    let api = FakeApi::start().await;
    let lb = |ip: &str| {
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "switchyard", "namespace": "infra"},
            "spec": {"type": "LoadBalancer", "clusterIP": "10.96.0.9",
                     "ports": [{"name": "http", "port": 80}]},
            "status": {"loadBalancer": {"ingress": [{"ip": ip}]}},
        })
    };
    api.apply(lb("203.0.113.10"));
    // Another Service in that namespace must not be taken for it.
    api.apply(json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "other", "namespace": "infra"},
        "spec": {"type": "ClusterIP", "clusterIP": "10.96.0.10"}}));
    api.apply_all(vec![ingress("a", &[]), ingress("b", &[])]);
    let publish = Publish::Service {
        namespace: "infra".into(),
        name: "switchyard".into(),
    };
    let w = start_writer(&api, publish, true, fast());
    w.served.send(served(&["a", "b"])).unwrap();
    until("a and b get the LB address", || {
        status_of(&api, "a") == ["203.0.113.10"] && status_of(&api, "b") == ["203.0.113.10"]
    })
    .await;
    api.apply(lb("203.0.113.11"));
    w.served.send(served(&["a"])).unwrap();
    until("a follows the Service", || {
        status_of(&api, "a") == ["203.0.113.11"]
    })
    .await;
    until("b, no longer served, loses the old address", || {
        status_of(&api, "b").is_empty()
    })
    .await;
}

/// A clear is conditional on the version it was decided on: the fake answers 409 to a
/// stale one, as a real server does, and the status written meanwhile survives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fake_refuses_stale_versions_and_missing_objects() {
    use k8s_openapi::api::coordination::v1::Lease;
    use k8s_openapi::api::networking::v1::Ingress;
    use kube::api::{Patch, PatchParams, PostParams};
    let api = FakeApi::start().await;
    let c = client(&api);
    let leases: kube::Api<Lease> = kube::Api::namespaced(c.clone(), "default");
    let mut l: Lease = serde_json::from_value(json!({
        "metadata": {"name": "x"}, "spec": {"holderIdentity": "a"}}))
    .unwrap();
    let created = leases.create(&PostParams::default(), &l).await.unwrap();
    let again = leases.create(&PostParams::default(), &l).await.unwrap_err();
    assert!(matches!(&again, kube::Error::Api(s) if s.code == 409 && s.reason == "AlreadyExists"));
    l.metadata.resource_version = created.metadata.resource_version.clone();
    let updated = leases
        .replace("x", &PostParams::default(), &l)
        .await
        .unwrap();
    assert_ne!(
        updated.metadata.resource_version,
        l.metadata.resource_version
    );
    // The version read before the update is stale now.
    let stale = leases
        .replace("x", &PostParams::default(), &l)
        .await
        .unwrap_err();
    assert!(
        matches!(&stale, kube::Error::Api(s) if s.code == 409 && s.reason == "Conflict"
            && s.message.contains("the object has been modified")),
        "{stale:?}"
    );
    assert!(leases.get_opt("missing").await.unwrap().is_none());
    let ingresses: kube::Api<Ingress> = kube::Api::namespaced(c, "default");
    let patch = json!({"status": {"loadBalancer": {"ingress": [{"ip": OURS}]}}});
    let missing = ingresses
        .patch_status("nope", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap_err();
    assert!(matches!(&missing, kube::Error::Api(s) if s.code == 404 && s.reason == "NotFound"));
    api.apply(ingress("a", &[]));
    let set = ingresses
        .patch_status("a", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    // The status subresource changes the status only.
    let sneaky = json!({"spec": {"ingressClassName": "other"},
                        "status": {"loadBalancer": {"ingress": [{"ip": OURS}]}}});
    ingresses
        .patch_status("a", &PatchParams::default(), &Patch::Merge(&sneaky))
        .await
        .unwrap();
    assert_eq!(
        api.object(Kind::Ingress, "default", "a").unwrap()["spec"]["ingressClassName"],
        "switchyard"
    );
    // A clear carrying the version before another write fails; the status stays.
    api.apply(ingress("a", &[OTHER]));
    let clear = json!({"metadata": {"resourceVersion": set.metadata.resource_version},
                       "status": {"loadBalancer": {"ingress": null}}});
    let e = ingresses
        .patch_status("a", &PatchParams::default(), &Patch::Merge(&clear))
        .await
        .unwrap_err();
    assert!(matches!(&e, kube::Error::Api(s) if s.code == 409));
    assert_eq!(status_of(&api, "a"), [OTHER]);
}

// === leader election ===

fn election(identity: &str, lease: Duration) -> Election {
    Election {
        lease_duration: lease,
        renew_deadline: lease * 2 / 3,
        retry_period: lease * 2 / 15,
        ..Election::new(LEASE, "default", identity)
    }
}

fn holder(api: &FakeApi) -> Option<String> {
    api.object(Kind::Lease, "default", LEASE)?["spec"]["holderIdentity"]
        .as_str()
        .map(str::to_string)
}

/// Two electors in one process: exactly one leads, the Lease names it; stopped, it releases
/// the Lease and the other leads within a retry period, far inside the lease duration.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_elector_leads_and_a_stopped_one_hands_over_at_once() {
    let api = FakeApi::start().await;
    let lease = Duration::from_secs(6);
    let (stop_a, rx_a) = watch::channel(false);
    let (_stop_b, rx_b) = watch::channel(false);
    let metrics = Arc::new(Metrics::new());
    let a = lease::spawn(
        client(&api),
        election("a", lease),
        Arc::clone(&metrics),
        rx_a,
    );
    // b starts once a leads, so which one leads is known.
    until("a leads", || *a.borrow()).await;
    assert!(metrics.render().contains("switchyard_leader 1"));
    let b = lease::spawn(
        client(&api),
        election("b", lease),
        Arc::new(Metrics::new()),
        rx_b,
    );
    assert_eq!(holder(&api).as_deref(), Some("a"));
    // Renewals go on; b never leads meanwhile.
    let renewals = api.writes(Kind::Lease);
    let ok = eventually(Duration::from_secs(3), || async {
        assert!(!*b.borrow(), "two leaders");
        api.writes(Kind::Lease) >= renewals + 2
    })
    .await;
    assert!(ok, "a does not renew");
    let started = Instant::now();
    stop_a.send(true).unwrap();
    until("b leads after a's release", || *b.borrow()).await;
    let took = started.elapsed();
    println!("takeover after a release: {took:?}");
    assert!(!*a.borrow());
    assert!(took < lease / 2, "took {took:?}: the release was not used");
    assert_eq!(holder(&api).as_deref(), Some("b"));
    assert_eq!(
        api.object(Kind::Lease, "default", LEASE).unwrap()["spec"]["leaseTransitions"],
        1
    );
    assert!(metrics.render().contains("switchyard_leader 0"));
}

/// switchyard's `switchyard_leader` gauge, or `None` while its admin port does not answer.
async fn leader_gauge(w: &Watching) -> Option<u8> {
    let r = try_request(w.admin_port, "GET", "/metrics", &[])
        .await
        .ok()?;
    r.body.lines().find_map(|l| {
        l.strip_prefix("switchyard_leader ")
            .and_then(|v| v.trim().parse().ok())
    })
}

fn start(api: &FakeApi, lease: &str, extra: &[&str]) -> Watching {
    let mut args = vec!["--election-lease-duration", lease, "--shutdown-delay", "0s"];
    args.extend_from_slice(extra);
    api.spawn_switchyard(&args, "warn,switchyard=info")
}

/// Waits until exactly one of `all` reports leading, and the Lease names someone.
async fn one_leader(all: &[&Watching]) -> usize {
    let found = poll(
        Duration::from_secs(20),
        Duration::from_millis(100),
        || async {
            let mut leading = Vec::new();
            for (i, w) in all.iter().enumerate() {
                match leader_gauge(w).await {
                    Some(1) => leading.push(i),
                    Some(_) => {}
                    None => return None,
                }
            }
            (leading.len() == 1).then(|| leading[0])
        },
    )
    .await;
    found.expect("no single leader within 20 s")
}

/// Two binaries: one leads; SIGKILL it (no release) and the other leads within the lease
/// duration plus two retry periods (when it last saw the Lease change, then its next read).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_leader_is_replaced_within_the_lease_duration() {
    let api = FakeApi::start().await;
    let mut replicas = [start(&api, "3s", &[]), start(&api, "3s", &[])];
    let first = one_leader(&replicas.iter().collect::<Vec<_>>()).await;
    assert!(holder(&api).is_some());
    let other = 1 - first;
    // Both serve: the follower is ready like the leader.
    for w in &replicas {
        let ok = eventually(Duration::from_secs(10), || async {
            try_request(w.admin_port, "GET", "/readyz", &[])
                .await
                .is_ok_and(|r| r.status == 200)
        })
        .await;
        assert!(ok, "a replica is not ready");
    }
    let held_by = holder(&api);
    let started = Instant::now();
    replicas[first].child.kill().unwrap();
    replicas[first].child.wait().unwrap();
    let ok = eventually(Duration::from_secs(15), || async {
        leader_gauge(&replicas[other]).await == Some(1)
    })
    .await;
    let took = started.elapsed();
    println!("takeover after SIGKILL: {took:?} (lease 3 s, retry 400 ms)");
    assert!(
        ok,
        "the follower never took over:\n{}",
        replicas[other].stderr()
    );
    // 3 s lease + 2 x 400 ms retry, with 1.5 s for a loaded machine.
    assert!(took < Duration::from_millis(5300), "took {took:?}");
    assert_ne!(holder(&api), held_by);
    assert!(
        replicas[other]
            .stderr()
            .contains("leader election: leading")
    );
}

/// SIGTERM releases the Lease at once: the other replica leads within a retry period, long
/// before the (10 s) lease would expire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_leader_releases_the_lease_at_once() {
    let api = FakeApi::start().await;
    let replicas = [start(&api, "10s", &[]), start(&api, "10s", &[])];
    let first = one_leader(&replicas.iter().collect::<Vec<_>>()).await;
    let other = 1 - first;
    let started = Instant::now();
    let pid = replicas[first].child.id().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    let ok = eventually(Duration::from_secs(8), || async {
        leader_gauge(&replicas[other]).await == Some(1)
    })
    .await;
    let took = started.elapsed();
    println!("takeover after SIGTERM: {took:?} (lease 10 s, retry 1.33 s)");
    assert!(ok, "no takeover within 8 s:\n{}", replicas[other].stderr());
    assert!(took < Duration::from_secs(4), "took {took:?}");
    assert!(
        replicas[first]
            .stderr()
            .contains("leader election: released")
    );
}

/// `--leader-elect=false`: no Lease is touched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_election_no_lease_is_written() {
    let api = FakeApi::start().await;
    let w = api.spawn_switchyard(&["--leader-elect=false"], "warn");
    let ok = eventually(Duration::from_secs(10), || async {
        try_request(w.admin_port, "GET", "/readyz", &[])
            .await
            .is_ok_and(|r| r.status == 200)
    })
    .await;
    assert!(ok);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(api.writes(Kind::Lease), 0);
    assert_eq!(leader_gauge(&w).await, Some(0));
}

/// `switchyard_kube_events_total{outcome}` of one replica.
async fn events_counted(w: &Watching, outcome: &str) -> u32 {
    let Ok(r) = try_request(w.admin_port, "GET", "/metrics", &[]).await else {
        return 0;
    };
    let prefix = format!("switchyard_kube_events_total{{outcome=\"{outcome}\"}} ");
    r.body
        .lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()).and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

/// A warning about a Service: both replicas see it, only the leader writes the Event; the
/// follower keeps it, and once the leader is gone and it leads, writes it: the API server
/// answers 409 (the Event is there) and the new leader counts it on the Event's series.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_leader_writes_events_and_a_new_leader_catches_up() {
    let api = FakeApi::start().await;
    api.apply(kube_api::slice_at(
        "web",
        "web-1",
        "192.0.2.10",
        8080,
        true,
        true,
        false,
    ));
    api.apply(kube_api::service(
        "web",
        &[("serviceloadbalancer/lb.algorithm", "bogus")],
    ));
    let mut replicas = [start(&api, "3s", &[]), start(&api, "3s", &[])];
    let first = one_leader(&replicas.iter().collect::<Vec<_>>()).await;
    let other = 1 - first;
    let posted = || {
        api.events()
            .iter()
            .filter(|e| e["_method"] == "POST" && e["reason"] == "InvalidAnnotation")
            .count()
    };
    until("the leader's Event", || posted() >= 1).await;
    let ok = eventually(Duration::from_secs(10), || async {
        events_counted(&replicas[other], "not_leader").await == 1
    })
    .await;
    assert!(ok, "the follower did not hold its Event back");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(posted(), 1, "two replicas, one Event: {:#?}", api.events());
    replicas[first].child.kill().unwrap();
    replicas[first].child.wait().unwrap();
    let ok = eventually(Duration::from_secs(15), || async {
        events_counted(&replicas[other], "published").await == 1
    })
    .await;
    assert!(
        ok,
        "the new leader did not publish what it held:\n{}",
        replicas[other].stderr()
    );
    // The same warning about the same Service version: the old leader's Event (its name is
    // made of what it says) counted once more, not a second Event.
    assert_eq!(posted(), 1, "{:#?}", api.events());
    let name = api
        .events()
        .iter()
        .find(|e| e["_method"] == "POST")
        .map(|e| e["metadata"]["name"].clone());
    let counted = api.events().iter().any(|e| {
        e["_method"] == "PATCH" && Some(&e["_name"]) == name.as_ref() && e["series"]["count"] == 2
    });
    assert!(counted, "no series count on {name:?}: {:#?}", api.events());
}

/// The kinds the Ingress source reads: IngressClasses (cluster-scoped), Secrets by type (a
/// field selector), and Ingress changes on a watch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fake_serves_ingress_classes_secrets_and_ingress_watches() {
    use futures_util::StreamExt;
    use k8s_openapi::api::core::v1::Secret;
    use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
    use kube::api::ListParams;
    use kube::runtime::watcher;
    let api = FakeApi::start().await;
    api.apply(
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass",
        "metadata": {"name": "switchyard"}, "spec": {"controller": "example.com/switchyard"}}),
    );
    for (name, ty) in [("cert", "kubernetes.io/tls"), ("token", "Opaque")] {
        api.apply(json!({"apiVersion": "v1", "kind": "Secret", "type": ty,
            "metadata": {"name": name, "namespace": "default", "labels": {"app": name}}}));
    }
    let c = client(&api);
    let classes: kube::Api<IngressClass> = kube::Api::all(c.clone());
    let list = classes.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
    assert!(list.items[0].metadata.namespace.is_none(), "cluster-scoped");
    assert!(classes.get_opt("switchyard").await.unwrap().is_some());
    let secrets: kube::Api<Secret> = kube::Api::all(c.clone());
    let tls = secrets
        .list(&ListParams::default().fields("type=kubernetes.io/tls"))
        .await
        .unwrap();
    let names: Vec<String> = tls
        .items
        .iter()
        .filter_map(|s| s.metadata.name.clone())
        .collect();
    assert_eq!(names, ["cert"]);
    let by_label = secrets
        .list(&ListParams::default().labels("app=token"))
        .await
        .unwrap();
    assert_eq!(by_label.items.len(), 1);
    api.apply(ingress("a", &[]));
    let ingresses: kube::Api<Ingress> = kube::Api::namespaced(c, "default");
    let mut events = watcher(ingresses, watcher::Config::default()).boxed();
    let mut seen_list = false;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let ev = tokio::time::timeout_at(deadline, events.next())
            .await
            .expect("no watch event within 10 s")
            .unwrap()
            .unwrap();
        match ev {
            watcher::Event::InitDone => {
                seen_list = true;
                api.apply(ingress("a", &[OTHER]));
            }
            watcher::Event::Apply(i) if seen_list => {
                assert_eq!(i.metadata.name.as_deref(), Some("a"));
                break;
            }
            _ => {}
        }
    }
    api.delete(Kind::Ingress, "default", "a");
    let ev = tokio::time::timeout(Duration::from_secs(10), events.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(matches!(ev, watcher::Event::Delete(_)), "{ev:?}");
}
