//! The Ingress status writer: sets `status.loadBalancer.ingress` of every Ingress switchyard
//! serves to the addresses it is reached at (`--publish-service NS/NAME` or
//! `--publish-status-address`), and clears it on Ingresses it stopped serving that still carry
//! its addresses. Only the leader writes (`control::lease`); a replica that is not leading
//! watches nothing here.
//!
//! While leading it keeps a store of every Ingress's current status (a watch, status only), so
//! an Ingress that is already correct costs no request: a change writes only the Ingresses
//! whose status differs. Changes are coalesced for a short window, and writes are merge patches
//! of the `status` subresource, at most `Limits::concurrency` at once and `Limits::per_second`
//! a second (token bucket). An Ingress whose status holds addresses switchyard never published
//! belongs to another controller and is left alone; a clear carries the `resourceVersion` it was
//! decided on, so one that raced with another writer fails with 409 instead of erasing it.
//!
//! The served set comes from the pipeline (after each swap) on a `watch` channel; its initial
//! value is never acted on, only what is sent, so a restarted leader does not clear everything
//! before the first table. The decision is the pure [`plan`]. This module must not touch the
//! routing table or the data plane.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::networking::v1::Ingress;
use kube::api::Patch;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use tokio::sync::watch;

use crate::control::retry::{Outage, backed_off};
use crate::ops::metrics::Metrics;

/// (namespace, name) of an Ingress.
pub type Key = (String, String);

/// The served set as the pipeline publishes it.
pub type Served = Arc<BTreeSet<Key>>;

/// One `IngressLoadBalancerIngress`: an IP or a host name. Ordered IPs first, then host names
/// (ingress-nginx's order: by hostname, then IP), so equal sets compare equal.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Address {
    Ip(String),
    Hostname(String),
}

impl Address {
    /// An IP address if it parses as one, else a host name.
    pub fn parse(s: &str) -> Address {
        let s = s.trim();
        match s.parse::<std::net::IpAddr>() {
            Ok(ip) => Address::Ip(ip.to_string()),
            Err(_) => Address::Hostname(s.to_string()),
        }
    }

    fn to_json(&self) -> serde_json::Value {
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

/// An Ingress's status as last seen, with the version it was seen at.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Current {
    /// Sorted; entries with neither ip nor hostname are dropped.
    pub addresses: Vec<Address>,
    pub resource_version: Option<String>,
}

impl Current {
    pub fn of(ing: &Ingress) -> Current {
        let mut addresses: Vec<Address> = ing
            .status
            .as_ref()
            .and_then(|s| s.load_balancer.as_ref())
            .and_then(|lb| lb.ingress.as_ref())
            .map(|list| {
                list.iter()
                    .filter_map(|i| match (&i.ip, &i.hostname) {
                        (Some(ip), _) if !ip.is_empty() => Some(Address::Ip(ip.clone())),
                        (_, Some(h)) if !h.is_empty() => Some(Address::Hostname(h.clone())),
                        _ => None,
                    })
                    .collect()
            })
            .unwrap_or_default();
        addresses.sort();
        Current {
            addresses,
            resource_version: ing.metadata.resource_version.clone(),
        }
    }
}

/// One status write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Write {
    pub key: Key,
    /// The addresses to set; empty: clear.
    pub addresses: Vec<Address>,
    /// For a clear: the version it was decided on (a precondition of the patch).
    pub precondition: Option<String>,
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

/// The writes that bring every known Ingress to what it should be: a served Ingress gets
/// `ours`, an unserved one that carries `ours` or an address set published earlier (`history`)
/// is cleared, anything else is left alone. With no address to publish (a LoadBalancer still
/// pending), served Ingresses are treated as unserved: cleared of old addresses, never set to
/// nothing over another controller's. Served keys with no Ingress (not yet seen) are skipped.
pub fn plan(
    served: &BTreeSet<Key>,
    ours: &[Address],
    history: &[Vec<Address>],
    current: &BTreeMap<Key, Current>,
) -> Vec<Write> {
    let is_ours = |a: &[Address]| !a.is_empty() && (a == ours || history.iter().any(|h| h == a));
    current
        .iter()
        .filter_map(|(key, cur)| {
            if served.contains(key) && !ours.is_empty() {
                (cur.addresses != ours).then(|| Write {
                    key: key.clone(),
                    addresses: ours.to_vec(),
                    precondition: None,
                })
            } else {
                is_ours(&cur.addresses).then(|| Write {
                    key: key.clone(),
                    addresses: Vec::new(),
                    precondition: cur.resource_version.clone(),
                })
            }
        })
        .collect()
}

/// Address sets published before, kept to recognise (and clear) what an earlier address of the
/// published Service left on Ingresses no longer served.
const HISTORY: usize = 8;

/// Delay before deciding again after a batch in which a write failed or met a newer version
/// (404s are not retried: the Ingress is gone).
const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(2);

/// Everything the status writer needs.
pub struct StatusWriter {
    pub client: Client,
    /// The Ingress namespace watched (`--namespace`), `None` for all.
    pub namespace: Option<String>,
    pub publish: Publish,
    /// The served Ingresses, as the pipeline publishes them after each swap.
    pub served: watch::Receiver<Served>,
    /// Leadership (`control::lease`); constant `true` without election.
    pub leader: watch::Receiver<bool>,
    pub limits: Limits,
    pub metrics: Arc<Metrics>,
}

type Stream_<T> = std::pin::Pin<Box<dyn Stream<Item = Result<Event<T>, watcher::Error>> + Send>>;

/// What the writer has learned while leading.
#[derive(Default)]
struct View {
    ingresses: BTreeMap<Key, Current>,
    relist: Option<BTreeMap<Key, Current>>,
    synced: bool,
    /// The published Service as last seen (`Publish::Service`).
    service: Option<Vec<Address>>,
    /// One warning per outage of each watch, not one per retry.
    outage: Outage,
    service_outage: Outage,
}

impl StatusWriter {
    /// Runs in a task of its own until `stop` turns true.
    pub fn spawn(self, stop: watch::Receiver<bool>) -> tokio::task::JoinHandle<()> {
        tokio::spawn(self.run(stop))
    }

    pub async fn run(mut self, mut stop: watch::Receiver<bool>) {
        let mut view = View::default();
        let mut ingresses: Option<Stream_<Ingress>> = None;
        let mut services: Option<Stream_<Service>> = None;
        let mut history: Vec<Vec<Address>> = Vec::new();
        // The pipeline has published a served set (its initial value means nothing yet).
        let mut served_known = false;
        let mut due: Option<Instant> = None;
        let mut leading = false;
        // A dropped leadership sender leaves its last value (constant `true` without election).
        let mut leader_open = true;
        let mut bucket = Bucket::new(self.limits.per_second, self.limits.burst);
        loop {
            let now_leading = *self.leader.borrow_and_update();
            if now_leading != leading {
                leading = now_leading;
                view = View::default();
                if leading {
                    // Becoming leader: watch, and reconcile everything once the list is in.
                    ingresses = Some(self.ingress_stream());
                    services = self.service_stream();
                } else {
                    ingresses = None;
                    services = None;
                    due = None;
                }
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
                r = self.served.changed() => {
                    if r.is_err() { return }
                    served_known = true;
                    changed = true;
                }
                Some(ev) = next(&mut ingresses) => changed = on_ingress(&mut view, ev),
                Some(ev) = next(&mut services) => changed = self.on_service(&mut view, ev),
                _ = sleep => {
                    due = None;
                    let Some(ours) = self.addresses(&view) else { continue };
                    if !(leading && view.synced && served_known) {
                        continue;
                    }
                    if !ours.is_empty() && history.last() != Some(&ours) {
                        history.retain(|h| *h != ours);
                        history.push(ours.clone());
                        if history.len() > HISTORY {
                            history.remove(0);
                        }
                    }
                    let served = self.served.borrow().clone();
                    let writes = plan(&served, &ours, &history, &view.ingresses);
                    if !writes.is_empty() {
                        let failed = self.write_all(writes, &mut view, &mut bucket, &stop).await;
                        if failed {
                            due = Some(Instant::now() + RETRY_AFTER_FAILURE);
                        }
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
    fn addresses(&self, view: &View) -> Option<Vec<Address>> {
        match &self.publish {
            Publish::Static(list) => {
                let mut v = list.clone();
                v.sort();
                v.dedup();
                Some(v)
            }
            Publish::Service { .. } => view.service.clone(),
        }
    }

    fn ingress_stream(&self) -> Stream_<Ingress> {
        let api: Api<Ingress> = match &self.namespace {
            Some(ns) => Api::namespaced(self.client.clone(), ns),
            None => Api::all(self.client.clone()),
        };
        backed_off(watcher::watcher(api, watcher::Config::default()), None).boxed()
    }

    fn service_stream(&self) -> Option<Stream_<Service>> {
        let Publish::Service { namespace, name } = &self.publish else {
            return None;
        };
        let api: Api<Service> = Api::namespaced(self.client.clone(), namespace);
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        Some(backed_off(watcher::watcher(api, config), None).boxed())
    }

    fn on_service(&self, view: &mut View, ev: Result<Event<Service>, watcher::Error>) -> bool {
        let Publish::Service { name, .. } = &self.publish else {
            return false;
        };
        let before = view.service.clone();
        if ev.is_ok() {
            view.service_outage.worked();
        }
        match ev {
            Ok(Event::Apply(svc) | Event::InitApply(svc)) if svc.name_any() == *name => {
                view.service = Some(service_addresses(&svc));
            }
            Ok(Event::Delete(svc)) if svc.name_any() == *name => view.service = Some(Vec::new()),
            // A list without it: the Service does not exist; nothing to publish.
            Ok(Event::Init) => view.service = None,
            Ok(Event::InitDone) if view.service.is_none() => view.service = Some(Vec::new()),
            Ok(_) => {}
            Err(e) => {
                if view.service_outage.failed() {
                    tracing::warn!(error = %e, "status: cannot watch the --publish-service Service; retrying with backoff")
                }
            }
        }
        view.service != before || view.service.is_some() && before.is_none()
    }

    /// Writes each, within the limits; returns whether any is to be decided again.
    async fn write_all(
        &self,
        writes: Vec<Write>,
        view: &mut View,
        bucket: &mut Bucket,
        stop: &watch::Receiver<bool>,
    ) -> bool {
        let total = writes.len();
        let paced = paced(writes, bucket, self.leader.clone(), stop.clone());
        let mut results = std::pin::pin!(
            paced
                .map(|w| async move {
                    let r = self.write(&w).await;
                    (w, r)
                })
                .buffer_unordered(self.limits.concurrency.max(1))
        );
        let (mut written, mut failed) = (0usize, false);
        while let Some((w, result)) = results.next().await {
            let label = match result {
                Ok(rv) => {
                    written += 1;
                    // What the watch will say soon; until then a new batch must not redo it.
                    if let Some(cur) = view.ingresses.get_mut(&w.key) {
                        cur.addresses = w.addresses.clone();
                        cur.resource_version = rv;
                    }
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
                    tracing::warn!(namespace = %w.key.0, ingress = %w.key.1, error = %e,
                        "status: write failed; retrying");
                    "failed"
                }
            };
            self.metrics
                .status_writes_total
                .with_label_values(&[label])
                .inc();
        }
        tracing::info!(
            planned = total,
            written,
            "status: Ingress load-balancer addresses updated"
        );
        failed
    }

    /// One merge patch of the status subresource; the new resourceVersion.
    async fn write(&self, w: &Write) -> Result<Option<String>, kube::Error> {
        let api: Api<Ingress> = Api::namespaced(self.client.clone(), &w.key.0);
        let patch = if w.addresses.is_empty() {
            json!({
                "metadata": { "resourceVersion": w.precondition },
                "status": { "loadBalancer": { "ingress": null } },
            })
        } else {
            let list: Vec<_> = w.addresses.iter().map(Address::to_json).collect();
            json!({ "status": { "loadBalancer": { "ingress": list } } })
        };
        let ing = api
            .patch_status(
                &w.key.1,
                &crate::control::patch_params(),
                &Patch::Merge(&patch),
            )
            .await?;
        Ok(ing.metadata.resource_version)
    }
}

/// The next item of an optional stream; pending forever without one.
async fn next<T>(s: &mut Option<Stream_<T>>) -> Option<Result<Event<T>, watcher::Error>> {
    match s {
        Some(s) => s.next().await,
        None => std::future::pending().await,
    }
}

/// Applies an Ingress watch event to the view; returns whether the known statuses changed.
fn on_ingress(view: &mut View, ev: Result<Event<Ingress>, watcher::Error>) -> bool {
    let key = |i: &Ingress| (i.namespace().unwrap_or_default(), i.name_any());
    if ev.is_ok() && view.outage.worked() {
        tracing::info!("status: watching Ingresses again");
    }
    match ev {
        Ok(Event::Init) => {
            view.relist = Some(BTreeMap::new());
            false
        }
        Ok(Event::InitApply(i)) => {
            view.relist
                .get_or_insert_with(BTreeMap::new)
                .insert(key(&i), Current::of(&i));
            false
        }
        Ok(Event::InitDone) => {
            view.ingresses = view.relist.take().unwrap_or_default();
            view.synced = true;
            true
        }
        Ok(Event::Apply(i)) => {
            let cur = Current::of(&i);
            let old = view.ingresses.insert(key(&i), cur.clone());
            // Only the status matters; a new version with the same status changes nothing
            // but the precondition a clear would carry.
            old.is_none_or(|o| o.addresses != cur.addresses)
        }
        Ok(Event::Delete(i)) => view.ingresses.remove(&key(&i)).is_some(),
        Err(e) => {
            if view.outage.failed() {
                tracing::warn!(error = %e, "status: cannot watch Ingresses; retrying with backoff");
            } else {
                tracing::debug!(error = %e, "status: watch error; backing off");
            }
            false
        }
    }
}

/// A token bucket: `take` says how long to wait before the next write (the Gateway API
/// writer, `control::gateway_status`, paces its writes with one too).
pub(crate) struct Bucket {
    per_second: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl Bucket {
    pub(crate) fn new(per_second: f64, burst: u32) -> Bucket {
        let burst = f64::from(burst.max(1));
        Bucket {
            per_second: per_second.max(0.001),
            burst,
            tokens: burst,
            last: Instant::now(),
        }
    }

    /// Takes one token (going into debt when empty) and returns the wait that pays the debt.
    pub(crate) fn take(&mut self) -> Duration {
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
/// (leadership lost or shutting down: the rest of the batch is not ours to write). Shared by
/// the Ingress and the Gateway API status writers.
pub(super) fn paced<'b, W: 'b>(
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

    fn key(n: &str) -> Key {
        ("default".to_string(), n.to_string())
    }

    fn cur(addrs: &[&str], rv: &str) -> Current {
        let mut addresses: Vec<Address> = addrs.iter().map(|a| Address::parse(a)).collect();
        addresses.sort();
        Current {
            addresses,
            resource_version: Some(rv.into()),
        }
    }

    fn ours() -> Vec<Address> {
        vec![Address::parse("203.0.113.7")]
    }

    #[test]
    fn served_ingresses_get_the_addresses_and_correct_ones_cost_nothing() {
        let current = BTreeMap::from([
            (key("a"), cur(&[], "1")),
            (key("b"), cur(&["203.0.113.7"], "2")),
            (key("c"), cur(&["198.51.100.1"], "3")),
        ]);
        let served = BTreeSet::from([key("a"), key("b"), key("c"), key("unknown")]);
        let w = plan(&served, &ours(), &[], &current);
        let keys: Vec<&str> = w.iter().map(|w| w.key.1.as_str()).collect();
        // c is served by us now: ours replaces the other address.
        assert_eq!(keys, ["a", "c"]);
        assert!(
            w.iter()
                .all(|w| w.addresses == ours() && w.precondition.is_none())
        );
    }

    #[test]
    fn unserved_ingresses_are_cleared_only_of_our_addresses() {
        let old = vec![Address::parse("192.0.2.1")];
        let current = BTreeMap::from([
            (key("ours"), cur(&["203.0.113.7"], "1")),
            (key("old"), cur(&["192.0.2.1"], "2")),
            (key("other"), cur(&["198.51.100.1"], "3")),
            (key("superset"), cur(&["203.0.113.7", "198.51.100.1"], "4")),
            (key("empty"), cur(&[], "5")),
        ]);
        let w = plan(&BTreeSet::new(), &ours(), &[old, ours()], &current);
        assert_eq!(
            w,
            vec![
                Write {
                    key: key("old"),
                    addresses: vec![],
                    precondition: Some("2".into())
                },
                Write {
                    key: key("ours"),
                    addresses: vec![],
                    precondition: Some("1".into())
                },
            ]
        );
    }

    #[test]
    fn with_nothing_to_publish_nothing_is_set() {
        let current = BTreeMap::from([
            (key("a"), cur(&[], "1")),
            (key("b"), cur(&["198.51.100.1"], "2")),
        ]);
        let served = BTreeSet::from([key("a"), key("b")]);
        assert!(plan(&served, &[], &[], &current).is_empty());
    }

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
