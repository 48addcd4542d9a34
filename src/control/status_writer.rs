//! The status writer's loop, once for both kinds of status: the Ingress side
//! (`control::status`) and the Gateway API side (`control::gateway_status`) each implement
//! [`Side`] (which objects to watch, how a watch event changes its view, how to plan, how to
//! write one) and this runs them. Only the leader (`control::lease`) watches and writes: on
//! gaining or losing leadership the view is dropped and the watches restarted or stopped. While
//! leading it keeps the view current from the watches (and the `--publish-service` Service's
//! addresses), batches changes for `Limits::coalesce`, plans against what the pipeline last
//! published (never its initial value), and writes at most `Limits::concurrency` at once and
//! `Limits::per_second` a second (token bucket), stopping a batch when leadership is lost or
//! the writer stops. A batch with a failed write or a conflict is planned again after
//! `RETRY_AFTER_FAILURE`; each watch warns once per outage (`control::retry::Outage`). It holds
//! no Ingress or Gateway API specifics, and must not touch the routing table or the data plane.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::stream::{BoxStream, SelectAll};
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Service;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use tokio::sync::watch;

use crate::control::retry::{Outage, backed_off};
use crate::ops::metrics::Metrics;

/// (namespace, name) of an object; the namespace is empty for a cluster-scoped one.
pub type Key = (String, String);

/// One `IngressLoadBalancerIngress`: an IP or a host name. Ordered IPs first, then host names
/// (ingress-nginx's order: by hostname, then IP), so equal sets compare equal.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Address {
    Ip(String),
    Hostname(String),
}

impl Address {
    /// An IP address if it parses as one, else a host name, lower-cased and without a final
    /// dot (DNS names are case-insensitive; the API server takes only the lower-case form).
    pub fn parse(s: &str) -> Address {
        let s = s.trim();
        match s.parse::<std::net::IpAddr>() {
            Ok(ip) => Address::Ip(ip.to_string()),
            Err(_) => {
                let host = s.strip_suffix('.').unwrap_or(s);
                Address::Hostname(host.to_ascii_lowercase())
            }
        }
    }

    /// Whether the API server takes this address in a status: an IP, or a host name that is a
    /// lowercase RFC 1123 subdomain (dot-separated labels of `a-z`, `0-9` and inner `-`,
    /// at most 253 characters), as an Ingress's `status.loadBalancer.ingress[].hostname` and a Gateway's
    /// `Hostname` address must be. One that is not made every status write of every Ingress
    /// and Gateway a 422 from a real API server, retried for ever.
    pub fn is_valid(&self) -> bool {
        match self {
            Address::Ip(_) => true,
            Address::Hostname(h) => {
                let label = |l: &str| {
                    !l.is_empty()
                        && l.bytes()
                            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                        && !l.starts_with('-')
                        && !l.ends_with('-')
                };
                h.len() <= 253 && h.split('.').all(label)
            }
        }
    }

    /// As an item of `status.loadBalancer.ingress`.
    pub(crate) fn to_json(&self) -> serde_json::Value {
        match self {
            Address::Ip(ip) => json!({ "ip": ip }),
            Address::Hostname(h) => json!({ "hostname": h }),
        }
    }
}

/// Where the published addresses come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Publish {
    /// `--publish-status-address`: these, always.
    Static(Vec<Address>),
    /// `--publish-service NS/NAME`: that Service's addresses ([`service_addresses`]), watched.
    Service { namespace: String, name: String },
}

/// Batching and rate limits of the writes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    /// Changes within this window from the first one make one batch.
    pub coalesce: Duration,
    /// Writes in flight at once.
    pub concurrency: usize,
    /// Sustained writes a second...
    pub per_second: f64,
    /// ...with bursts of up to this many.
    pub burst: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            coalesce: Duration::from_millis(500),
            concurrency: 8,
            per_second: 50.0,
            burst: 100,
        }
    }
}

/// The addresses a Service publishes, as ingress-nginx's `statusAddressFromService`:
/// `ExternalName`: its external name; `ClusterIP`: its clusterIP; `NodePort`: its externalIPs,
/// else its clusterIP; `LoadBalancer`: its `status.loadBalancer.ingress` (IP, else host name)
/// and its externalIPs. Sorted, without duplicates; `None` (a headless clusterIP) is skipped.
pub fn service_addresses(svc: &Service) -> Vec<Address> {
    let spec = svc.spec.clone().unwrap_or_default();
    let cluster_ip = || {
        spec.cluster_ip
            .iter()
            .filter(|ip| !ip.is_empty() && *ip != "None")
            .map(|ip| Address::parse(ip))
            .collect::<Vec<_>>()
    };
    let external_ips = || {
        spec.external_ips
            .iter()
            .flatten()
            .map(|ip| Address::parse(ip))
            .collect::<Vec<_>>()
    };
    let mut out = match spec.type_.as_deref().unwrap_or("ClusterIP") {
        "ExternalName" => spec
            .external_name
            .iter()
            .map(|h| Address::Hostname(h.clone()))
            .collect(),
        "NodePort" if spec.external_ips.as_ref().is_some_and(|e| !e.is_empty()) => external_ips(),
        "NodePort" | "ClusterIP" => cluster_ip(),
        "LoadBalancer" => {
            let mut v: Vec<Address> = svc
                .status
                .as_ref()
                .and_then(|s| s.load_balancer.as_ref())
                .and_then(|lb| lb.ingress.as_ref())
                .into_iter()
                .flatten()
                .filter_map(|i| match (&i.ip, &i.hostname) {
                    (Some(ip), _) if !ip.is_empty() => Some(Address::Ip(ip.clone())),
                    (_, Some(h)) if !h.is_empty() => Some(Address::Hostname(h.clone())),
                    _ => None,
                })
                .collect();
            v.extend(external_ips());
            v
        }
        _ => Vec::new(),
    };
    out.sort();
    out.dedup();
    out
}

/// Delay before deciding again after a batch in which a write failed or met a newer version
/// (404s are not retried: the object is gone).
const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(2);

/// What one kind of status brings to the loop: its watches, its view, its plan and its write.
pub(crate) trait Side: Send + Sync {
    /// What the pipeline publishes for this side (the served set, translate's decision).
    type Desired: Clone + Send + Sync;
    /// An event of one of its watches.
    type Event: Send + 'static;
    /// What it has learned from its watches while leading.
    type View: Default + Send;
    /// One status write.
    type Write: Send + Sync;

    /// The `info` line after a batch.
    const UPDATED: &'static str;

    /// The watches to hold while leading (each already backed off).
    fn watches(&self, client: &Client) -> Vec<BoxStream<'static, Self::Event>>;

    /// Applies one watch event; returns whether a known status changed.
    fn apply(view: &mut Self::View, ev: Self::Event) -> bool;

    /// The writes due now; `None` while the view cannot tell yet.
    fn plan(
        &mut self,
        desired: &Self::Desired,
        addresses: &[Address],
        view: &Self::View,
    ) -> Option<Vec<Self::Write>>;

    /// One write; the new resourceVersion.
    fn write(
        &self,
        client: &Client,
        w: &Self::Write,
    ) -> impl Future<Output = Result<Option<String>, kube::Error>> + Send;

    /// Notes a successful write in the view: what the watch will say soon, so that a new batch
    /// does not redo it meanwhile.
    fn record(view: &mut Self::View, w: &Self::Write, rv: Option<String>);

    /// Warns of a write that failed (and will be retried).
    fn warn_failed(w: &Self::Write, e: &kube::Error);
}

/// Everything the loop needs besides its side.
pub(crate) struct Writer<S: Side> {
    pub side: S,
    pub client: Client,
    /// Where the published addresses come from; `None`: none.
    pub publish: Option<Publish>,
    /// What the pipeline publishes for the side.
    pub desired: watch::Receiver<S::Desired>,
    /// Leadership (`control::lease`); constant `true` without election.
    pub leader: watch::Receiver<bool>,
    pub limits: Limits,
    pub metrics: Arc<Metrics>,
}

/// The side's view, with the published Service as last seen.
struct State<V> {
    side: V,
    /// The published Service's addresses (`Publish::Service`); `None` while not known.
    service: Option<Vec<Address>>,
    /// One warning per outage of the Service's watch, not one per retry.
    service_outage: Outage,
}

impl<V: Default> Default for State<V> {
    fn default() -> Self {
        State {
            side: V::default(),
            service: None,
            service_outage: Outage::default(),
        }
    }
}

type Watched<T> = BoxStream<'static, Result<Event<T>, watcher::Error>>;

impl<S: Side> Writer<S> {
    pub async fn run(mut self, mut stop: watch::Receiver<bool>) {
        let mut state = State::<S::View>::default();
        let mut objects: Option<SelectAll<BoxStream<'static, S::Event>>> = None;
        let mut service: Option<Watched<Service>> = None;
        // The pipeline has published (its initial value means nothing yet).
        let mut desired_known = false;
        let mut due: Option<Instant> = None;
        let mut leading = false;
        // A dropped leadership sender leaves its last value (constant `true` without election).
        let mut leader_open = true;
        let mut bucket = Bucket::new(self.limits.per_second, self.limits.burst);
        loop {
            let now_leading = *self.leader.borrow_and_update();
            if now_leading != leading {
                leading = now_leading;
                state = State::default();
                due = None;
                // Becoming leader: watch, and reconcile everything once the lists are in.
                objects =
                    leading.then(|| futures::stream::select_all(self.side.watches(&self.client)));
                service = if leading { self.service_stream() } else { None };
            }
            let sleep = async {
                match due {
                    Some(d) => tokio::time::sleep_until(d.into()).await,
                    None => std::future::pending().await,
                }
            };
            let mut changed = false;
            tokio::select! {
                r = self.leader.changed(), if leader_open => if r.is_err() { leader_open = false },
                r = self.desired.changed() => {
                    if r.is_err() { return }
                    desired_known = true;
                    changed = true;
                }
                Some(ev) = next(objects.as_mut()) => changed = S::apply(&mut state.side, ev),
                Some(ev) = next(service.as_mut()) => changed = self.on_service(&mut state, ev),
                _ = sleep => {
                    due = None;
                    if !(leading && desired_known) {
                        continue;
                    }
                    let Some(addresses) = self.addresses(&state) else { continue };
                    let desired = self.desired.borrow().clone();
                    let Some(writes) = self.side.plan(&desired, &addresses, &state.side) else {
                        continue;
                    };
                    if !writes.is_empty()
                        && self.write_all(writes, &mut state.side, &mut bucket, &stop).await
                    {
                        due = Some(Instant::now() + RETRY_AFTER_FAILURE);
                    }
                }
                // A dropped sender is a stop too (else this would spin).
                r = stop.changed() => if r.is_err() { return },
            }
            if *stop.borrow() {
                return;
            }
            if changed && leading && due.is_none() {
                due = Some(Instant::now() + self.limits.coalesce);
            }
        }
    }

    /// The addresses to publish now; `None` while the published Service is not known yet.
    fn addresses(&self, state: &State<S::View>) -> Option<Vec<Address>> {
        match &self.publish {
            None => Some(Vec::new()),
            Some(Publish::Static(list)) => {
                let mut v = list.clone();
                v.sort();
                v.dedup();
                Some(v)
            }
            Some(Publish::Service { .. }) => state.service.clone(),
        }
    }

    fn service_stream(&self) -> Option<Watched<Service>> {
        let Some(Publish::Service { namespace, name }) = &self.publish else {
            return None;
        };
        let api: Api<Service> = Api::namespaced(self.client.clone(), namespace);
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        Some(backed_off(watcher::watcher(api, config), None).boxed())
    }

    /// Applies a Service watch event; returns whether the published addresses changed.
    fn on_service(
        &self,
        state: &mut State<S::View>,
        ev: Result<Event<Service>, watcher::Error>,
    ) -> bool {
        let Some(Publish::Service { name, .. }) = &self.publish else {
            return false;
        };
        let before = state.service.clone();
        if ev.is_ok() {
            state.service_outage.worked();
        }
        match ev {
            Ok(Event::Apply(svc) | Event::InitApply(svc)) if svc.name_any() == *name => {
                state.service = Some(service_addresses(&svc));
            }
            Ok(Event::Delete(svc)) if svc.name_any() == *name => state.service = Some(Vec::new()),
            // A list without it: the Service does not exist; nothing to publish.
            Ok(Event::Init) => state.service = None,
            Ok(Event::InitDone) if state.service.is_none() => state.service = Some(Vec::new()),
            Ok(_) => {}
            Err(e) => {
                if state.service_outage.failed() {
                    tracing::warn!(error = %e, "status: cannot watch the --publish-service Service; retrying with backoff")
                }
            }
        }
        state.service != before
    }

    /// Writes each, within the limits; returns whether any is to be decided again.
    async fn write_all(
        &self,
        writes: Vec<S::Write>,
        view: &mut S::View,
        bucket: &mut Bucket,
        stop: &watch::Receiver<bool>,
    ) -> bool {
        let total = writes.len();
        let paced = paced(writes, bucket, self.leader.clone(), stop.clone());
        let mut results = std::pin::pin!(
            paced
                .map(|w| async move {
                    let r = self.side.write(&self.client, &w).await;
                    (w, r)
                })
                .buffer_unordered(self.limits.concurrency.max(1))
        );
        let (mut written, mut failed) = (0usize, false);
        while let Some((w, result)) = results.next().await {
            let label = match result {
                Ok(rv) => {
                    written += 1;
                    S::record(view, &w, rv);
                    "written"
                }
                // Changed since it was read: decided again on the version the watch brings (which
                // may differ in what the status does not show, so no watch event would ask).
                Err(kube::Error::Api(s)) if s.code == 409 => {
                    failed = true;
                    "conflict"
                }
                // Deleted meanwhile: its Delete event removes it from the view.
                Err(kube::Error::Api(s)) if s.code == 404 => "not_found",
                Err(e) => {
                    failed = true;
                    S::warn_failed(&w, &e);
                    "failed"
                }
            };
            self.metrics
                .status_writes_total
                .with_label_values(&[label])
                .inc();
        }
        tracing::info!(planned = total, written, "{}", S::UPDATED);
        failed
    }
}

/// The next item of an optional stream; pending forever without one.
async fn next<T, St: Stream<Item = T> + Unpin>(s: Option<&mut St>) -> Option<T> {
    match s {
        Some(s) => s.next().await,
        None => std::future::pending().await,
    }
}

/// A token bucket: `take` says how long to wait before the next write.
struct Bucket {
    per_second: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl Bucket {
    fn new(per_second: f64, burst: u32) -> Bucket {
        let burst = f64::from(burst.max(1));
        Bucket {
            per_second: per_second.max(0.001),
            burst,
            tokens: burst,
            last: Instant::now(),
        }
    }

    /// Takes one token (going into debt when empty) and returns the wait that pays the debt.
    fn take(&mut self) -> Duration {
        self.take_at(Instant::now())
    }

    fn take_at(&mut self, now: Instant) -> Duration {
        let earned = now.saturating_duration_since(self.last).as_secs_f64() * self.per_second;
        self.tokens = (self.tokens + earned).min(self.burst);
        self.last = now;
        self.tokens -= 1.0;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / self.per_second)
        }
    }
}

/// `writes` one at a time as `bucket` allows, while this replica leads and is not stopping
/// (leadership lost or shutting down: the rest of the batch is not ours to write).
fn paced<'b, W: 'b>(
    writes: Vec<W>,
    bucket: &'b mut Bucket,
    leader: watch::Receiver<bool>,
    stop: watch::Receiver<bool>,
) -> impl futures::Stream<Item = W> + 'b {
    futures::stream::iter(writes)
        .then(move |w| {
            let wait = bucket.take();
            async move {
                tokio::time::sleep(wait).await;
                w
            }
        })
        .take_while(move |_| {
            let go = *leader.borrow() && !*stop.borrow();
            async move { go }
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        LoadBalancerIngress, LoadBalancerStatus, ServiceSpec, ServiceStatus,
    };

    #[test]
    fn addresses_order_ips_first_and_compare_as_sets() {
        let mut v = vec![
            Address::parse("lb.example.com"),
            Address::parse("203.0.113.9"),
            Address::parse(" 2001:db8::1 "),
        ];
        v.sort();
        assert_eq!(
            v,
            vec![
                Address::Ip("2001:db8::1".into()),
                Address::Ip("203.0.113.9".into()),
                Address::Hostname("lb.example.com".into()),
            ]
        );
    }

    /// What a real API server takes as a status address (the Ingress's and the Gateway's
    /// validation alike): a host name is lower-cased and loses its final dot; one that is
    /// still no lowercase RFC 1123 subdomain is not valid.
    #[test]
    fn host_names_are_lower_cased_and_checked_as_the_api_server_checks_them() {
        assert_eq!(
            Address::parse("LB.Example.com."),
            Address::Hostname("lb.example.com".into())
        );
        for ok in [
            "lb.example.com",
            "a",
            "a-1.b2",
            "203.0.113.9",
            "2001:db8::1",
        ] {
            assert!(Address::parse(ok).is_valid(), "{ok}");
        }
        let long = format!("{}.com", "a.".repeat(126));
        for bad in [
            "lb_1.example.com",
            "-lb.example.com",
            "lb-.example.com",
            "lb..example.com",
            "*.example.com",
            "lb.example.com:80",
            long.as_str(),
        ] {
            assert!(!Address::parse(bad).is_valid(), "{bad}");
        }
    }

    fn svc(type_: &str, cluster_ip: &str, external: &[&str], lb: &[(&str, &str)]) -> Service {
        Service {
            spec: Some(ServiceSpec {
                type_: Some(type_.into()),
                cluster_ip: Some(cluster_ip.into()),
                external_ips: (!external.is_empty())
                    .then(|| external.iter().map(|s| s.to_string()).collect()),
                external_name: (type_ == "ExternalName").then(|| "lb.example.com".into()),
                ..Default::default()
            }),
            status: Some(ServiceStatus {
                load_balancer: Some(LoadBalancerStatus {
                    ingress: Some(
                        lb.iter()
                            .map(|(ip, host)| LoadBalancerIngress {
                                ip: (!ip.is_empty()).then(|| ip.to_string()),
                                hostname: (!host.is_empty()).then(|| host.to_string()),
                                ..Default::default()
                            })
                            .collect(),
                    ),
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn service_addresses_follow_ingress_nginx() {
        let p = |s: &[&str]| s.iter().map(|a| Address::parse(a)).collect::<Vec<_>>();
        let lb = svc(
            "LoadBalancer",
            "10.0.0.1",
            &["198.51.100.5"],
            &[("203.0.113.7", ""), ("", "elb.example.com")],
        );
        assert_eq!(
            service_addresses(&lb),
            p(&["198.51.100.5", "203.0.113.7", "elb.example.com"])
        );
        let pending = svc("LoadBalancer", "10.0.0.1", &[], &[]);
        assert_eq!(service_addresses(&pending), vec![]);
        assert_eq!(
            service_addresses(&svc("ClusterIP", "10.0.0.1", &["198.51.100.5"], &[])),
            p(&["10.0.0.1"])
        );
        assert_eq!(
            service_addresses(&svc("NodePort", "10.0.0.1", &[], &[])),
            p(&["10.0.0.1"])
        );
        assert_eq!(
            service_addresses(&svc("NodePort", "10.0.0.1", &["198.51.100.5"], &[])),
            p(&["198.51.100.5"])
        );
        assert_eq!(
            service_addresses(&svc("ExternalName", "", &[], &[])),
            vec![Address::Hostname("lb.example.com".into())]
        );
        assert_eq!(
            service_addresses(&svc("ClusterIP", "None", &[], &[])),
            vec![]
        );
    }

    #[test]
    fn the_bucket_allows_a_burst_then_the_rate() {
        let t0 = Instant::now();
        let mut b = Bucket::new(10.0, 3);
        b.last = t0;
        for _ in 0..3 {
            assert_eq!(b.take_at(t0), Duration::ZERO);
        }
        let wait = b.take_at(t0);
        assert!((wait.as_secs_f64() - 0.1).abs() < 1e-6, "{wait:?}");
        let wait = b.take_at(t0);
        assert!((wait.as_secs_f64() - 0.2).abs() < 1e-6, "{wait:?}");
        // A second later the debt is paid and tokens earned again.
        assert_eq!(b.take_at(t0 + Duration::from_secs(1)), Duration::ZERO);
    }
}
