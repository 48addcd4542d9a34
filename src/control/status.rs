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
//! a second (token bucket); that loop is `control::status_writer`'s, shared with the Gateway API
//! writer, and this module supplies the Ingress specifics. An Ingress whose status holds
//! addresses switchyard never published belongs to another controller and is left alone; a
//! clear carries the `resourceVersion` it was decided on, so one that raced with another writer
//! fails with 409 instead of erasing it.
//!
//! The served set comes from the pipeline (after each swap) on a `watch` channel; its initial
//! value is never acted on, only what is sent, so a restarted leader does not clear everything
//! before the first table. The decision is the pure [`plan`]. This module must not touch the
//! routing table or the data plane.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use futures::StreamExt;
use futures::stream::BoxStream;
use k8s_openapi::api::networking::v1::Ingress;
use kube::api::Patch;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use tokio::sync::watch;

use crate::control::retry::{Outage, backed_off};
pub use crate::control::status_writer::{Address, Key, Limits, Publish, service_addresses};
use crate::control::status_writer::{Side, Writer};
use crate::ops::metrics::Metrics;

/// The served set as the pipeline publishes it.
pub type Served = Arc<BTreeSet<Key>>;

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

/// What the writer has learned while leading.
#[derive(Default)]
struct View {
    ingresses: BTreeMap<Key, Current>,
    relist: Option<BTreeMap<Key, Current>>,
    synced: bool,
    /// One warning per outage of the watch, not one per retry.
    outage: Outage,
}

impl StatusWriter {
    /// Runs in a task of its own until `stop` turns true.
    pub fn spawn(self, stop: watch::Receiver<bool>) -> tokio::task::JoinHandle<()> {
        tokio::spawn(self.run(stop))
    }

    pub async fn run(self, stop: watch::Receiver<bool>) {
        let writer = Writer {
            side: Ingresses {
                namespace: self.namespace,
                history: Vec::new(),
            },
            client: self.client,
            publish: Some(self.publish),
            desired: self.served,
            leader: self.leader,
            limits: self.limits,
            metrics: self.metrics,
        };
        writer.run(stop).await
    }
}

/// The Ingress side of the status writer.
struct Ingresses {
    namespace: Option<String>,
    /// Address sets published before, newest last.
    history: Vec<Vec<Address>>,
}

impl Side for Ingresses {
    type Desired = Served;
    type Event = Result<Event<Ingress>, watcher::Error>;
    type View = View;
    type Write = Write;

    const UPDATED: &'static str = "status: Ingress load-balancer addresses updated";

    fn watches(&self, client: &Client) -> Vec<BoxStream<'static, Self::Event>> {
        let api: Api<Ingress> = match &self.namespace {
            Some(ns) => Api::namespaced(client.clone(), ns),
            None => Api::all(client.clone()),
        };
        vec![backed_off(watcher::watcher(api, watcher::Config::default()), None).boxed()]
    }

    fn apply(view: &mut View, ev: Self::Event) -> bool {
        on_ingress(view, ev)
    }

    fn plan(&mut self, served: &Served, ours: &[Address], view: &View) -> Option<Vec<Write>> {
        if !view.synced {
            return None;
        }
        let history = &mut self.history;
        if !ours.is_empty() && history.last().map(Vec::as_slice) != Some(ours) {
            history.retain(|h| *h != ours);
            history.push(ours.to_vec());
            if history.len() > HISTORY {
                history.remove(0);
            }
        }
        Some(plan(served, ours, history, &view.ingresses))
    }

    /// One merge patch of the status subresource; the new resourceVersion.
    async fn write(&self, client: &Client, w: &Write) -> Result<Option<String>, kube::Error> {
        let api: Api<Ingress> = Api::namespaced(client.clone(), &w.key.0);
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

    fn record(view: &mut View, w: &Write, rv: Option<String>) {
        if let Some(cur) = view.ingresses.get_mut(&w.key) {
            cur.addresses = w.addresses.clone();
            cur.resource_version = rv;
        }
    }

    fn warn_failed(w: &Write, e: &kube::Error) {
        tracing::warn!(namespace = %w.key.0, ingress = %w.key.1, error = %e,
            "status: write failed; retrying");
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
