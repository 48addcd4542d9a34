//! The publish path shared by every source (manifest files, the cluster watcher): translate
//! against the table built last (whole snapshots, or keyed stores with what changed since),
//! skip the swap when nothing changed, store once, and report warnings.
//!
//! Warnings are logged when they first appear, not on every rebuild, so a bad object does not
//! flood the log. This module owns no I/O besides logging and reading the clock for the build
//! duration; it must not touch the data plane.

use std::borrow::Borrow;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;

use crate::control::translate::{
    Built, Changes, IngressInputs, Memo, ObjectRef, Options, Previous, Store, Warning,
    WarningReason, translate_changes, translate_with,
};
use crate::ops::metrics::{INGRESS_STATES, Metrics};
use crate::table::{RoutingTable, TableWriter};

/// What one `apply` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// A new table was swapped in.
    pub swapped: bool,
    /// Generation of the table now serving.
    pub generation: u64,
    pub warnings: usize,
    /// Warnings that were not present after the previous apply (just logged).
    pub new_warnings: Vec<Warning>,
    /// Objects that had a warning after the previous apply and have none now.
    pub resolved: Vec<ObjectRef>,
}

/// What runs with each table swapped in.
type SwapHook = Box<dyn FnMut(&RoutingTable) + Send>;

/// Translates and publishes; one per source.
pub struct Pipeline {
    writer: TableWriter,
    options: Options,
    metrics: Arc<Metrics>,
    /// Warnings already reported.
    reported: HashSet<Warning>,
    /// The table built last, swapped in or not (an equal table is not): a change set is
    /// relative to it, so it is the next build's `previous`. With the memo of its build when
    /// that was a keyed one (`apply_changes`), for the next incremental build.
    last: Option<(Arc<RoutingTable>, Option<Memo>)>,
    /// The table serving now, when nothing was built yet.
    current: Arc<RoutingTable>,
    /// Called with each table swapped in (the TLS side loads its Secrets' certificates).
    on_swap: Vec<SwapHook>,
    /// Where the set of served Ingresses (namespace, name) goes after each build, for the
    /// status writer (`control::status`); `None` when no status is written. The writer
    /// ignores the channel's initial value, so the first build always sends.
    served: Option<tokio::sync::watch::Sender<crate::control::status::Served>>,
    /// A build has sent the served set.
    served_sent: bool,
    /// Where the Gateway API status translate decided goes after each build, for
    /// `control::gateway_status`; sent as `served` is (first build, then on change).
    gateway_status: Option<tokio::sync::watch::Sender<crate::control::gateway_status::Desired>>,
    gateway_status_sent: bool,
}

impl Pipeline {
    pub fn new(writer: TableWriter, options: Options, metrics: Arc<Metrics>) -> Self {
        // Every reason's series exists from the start, at 0, so a rate() over it works before
        // the first warning and an alert on it sees the first one.
        for reason in WarningReason::ALL {
            metrics
                .translate_warnings_total
                .with_label_values(&[reason.as_str()]);
        }
        Pipeline {
            writer,
            options,
            metrics,
            reported: HashSet::new(),
            last: None,
            current: Arc::default(),
            on_swap: Vec::new(),
            served: None,
            served_sent: false,
            gateway_status: None,
            gateway_status_sent: false,
        }
    }

    /// Calls `f` with every table swapped in, after the swap.
    pub fn on_swap(&mut self, f: impl FnMut(&RoutingTable) + Send + 'static) {
        self.on_swap.push(Box::new(f));
    }

    /// Publishes the served Ingresses on `tx` (see the `served` field).
    pub fn with_served(
        mut self,
        tx: tokio::sync::watch::Sender<crate::control::status::Served>,
    ) -> Self {
        self.served = Some(tx);
        self
    }

    /// Publishes the Gateway API status on `tx` (see the `gateway_status` field).
    pub fn with_gateway_status(
        mut self,
        tx: tokio::sync::watch::Sender<crate::control::gateway_status::Desired>,
    ) -> Self {
        self.gateway_status = Some(tx);
        self
    }

    /// The served-Ingress channel, when a status writer listens.
    pub fn served(&self) -> Option<&tokio::sync::watch::Sender<crate::control::status::Served>> {
        self.served.as_ref()
    }

    /// What the next build starts from, and the options to build with.
    fn previous(&mut self) -> (Previous<'_>, &Options) {
        let previous = match &self.last {
            Some((table, memo)) => Previous {
                table,
                memo: memo.as_ref(),
            },
            None => {
                self.current = self.writer.current();
                Previous {
                    table: &self.current,
                    memo: None,
                }
            }
        };
        (previous, &self.options)
    }

    /// Builds a table from a complete set of objects, in full, and publishes it.
    pub fn apply<S: Borrow<Service>, E: Borrow<EndpointSlice>>(
        &mut self,
        services: &[S],
        slices: &[E],
    ) -> Applied {
        self.apply_with(services, slices, IngressInputs::default())
    }

    /// `apply` with Ingresses, their classes and Secrets.
    pub fn apply_with<S: Borrow<Service>, E: Borrow<EndpointSlice>>(
        &mut self,
        services: &[S],
        slices: &[E],
        ingress: IngressInputs<'_>,
    ) -> Applied {
        let started = Instant::now();
        let (previous, options) = self.previous();
        let (Built { table, memo }, warnings) =
            translate_with(services, slices, ingress, options, Some(previous.table));
        self.served_from(&memo);
        self.gateway_status_from(&memo);
        self.publish(started, table, None, &warnings)
    }

    /// Builds a table from keyed stores and what changed in them since the last `apply*`
    /// (`None`: unknown, so a full build), and publishes it.
    pub fn apply_changes(
        &mut self,
        services: &Store<Service>,
        slices: &Store<EndpointSlice>,
        ingress: IngressInputs<'_>,
        changes: Option<&Changes>,
    ) -> Applied {
        let started = Instant::now();
        let (previous, options) = self.previous();
        let (Built { table, memo }, warnings) =
            translate_changes(services, slices, ingress, changes, options, Some(previous));
        self.served_from(&memo);
        self.gateway_status_from(&memo);
        self.publish(started, table, Some(memo), &warnings)
    }

    /// Tells the status writer which Ingresses are served: after the first build, and
    /// whenever the set changed; and counts them, and those left to other controllers.
    fn served_from(&mut self, memo: &Memo) {
        let counts = [memo.served_ingresses().len(), memo.other_class_ingresses()];
        for (state, n) in INGRESS_STATES.iter().zip(counts) {
            self.metrics
                .ingresses
                .with_label_values(&[state])
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
        let Some(tx) = &self.served else {
            return;
        };
        let served = memo.served_ingresses();
        let first = !std::mem::replace(&mut self.served_sent, true);
        tx.send_if_modified(|now| {
            let send = first || **now != **served;
            if send {
                *now = Arc::clone(served);
            }
            send
        });
    }

    /// Tells the Gateway API status writer what translate decided: after the first build, and
    /// whenever it changed.
    fn gateway_status_from(&mut self, memo: &Memo) {
        let Some(tx) = &self.gateway_status else {
            return;
        };
        let status = memo.gateway_status();
        let first = !std::mem::replace(&mut self.gateway_status_sent, true);
        tx.send_if_modified(|now| {
            let send = first || **now != **status;
            if send {
                *now = Arc::clone(status);
            }
            send
        });
    }

    fn publish(
        &mut self,
        started: Instant,
        mut table: RoutingTable,
        memo: Option<Memo>,
        warnings: &[Warning],
    ) -> Applied {
        let built = started.elapsed();
        self.metrics
            .table_build_seconds
            .observe(built.as_secs_f64());
        let (entries, endpoints) = (
            table.entries.len(),
            table
                .entries
                .iter()
                .map(|e| e.endpoints.len())
                .sum::<usize>(),
        );
        // Generations count swaps of the serving table, whatever was built in between.
        table.generation = self.writer.current().generation + 1;
        let generation = table.generation;
        let table = Arc::new(table);
        let swapped = self.writer.publish_shared(Arc::clone(&table));
        self.last = Some((table, memo));
        let current = self.writer.current();
        let now = current.generation;
        if swapped {
            // Per-entry metric handles for the new table; series of removed entries go.
            let names: Vec<&str> = current.entries.iter().map(|e| &*e.name).collect();
            self.metrics.data.set_entries(now, &names);
            for f in &mut self.on_swap {
                f(&current);
            }
        }
        self.metrics
            .table_generation
            .set(i64::try_from(now).unwrap_or(i64::MAX));
        if swapped {
            self.metrics.table_swaps_total.inc();
            tracing::info!(
                generation,
                entries,
                endpoints,
                // Hundredths of a millisecond: 0.79, not 0.7884059999999999.
                build_ms = (built.as_secs_f64() * 1e5).round() / 100.0,
                "routing table swapped"
            );
        } else {
            tracing::debug!(generation = now, "routing table unchanged");
        }
        let (new_warnings, resolved) = self.report(warnings);
        Applied {
            swapped,
            generation: now,
            warnings: warnings.len(),
            new_warnings,
            resolved,
        }
    }

    /// Logs and counts the warnings not reported before; returns them, and the objects whose
    /// every warning went away.
    fn report(&mut self, warnings: &[Warning]) -> (Vec<Warning>, Vec<ObjectRef>) {
        let current: HashSet<Warning> = warnings.iter().cloned().collect();
        let warned_now: HashSet<&ObjectRef> = warnings.iter().map(|w| &w.object).collect();
        let mut resolved: Vec<ObjectRef> = self
            .reported
            .iter()
            .map(|w| &w.object)
            .filter(|o| !warned_now.contains(o))
            .cloned()
            .collect();
        resolved.sort();
        resolved.dedup();
        let mut new = Vec::new();
        for w in warnings {
            if self.reported.contains(w) {
                continue;
            }
            new.push(w.clone());
            self.metrics
                .translate_warnings_total
                .with_label_values(&[w.reason.as_str()])
                .inc();
            match w.reason {
                WarningReason::Skipped => tracing::info!(object = %w.object, "{}", w.message),
                reason => {
                    tracing::warn!(object = %w.object, reason = reason.as_str(), "{}", w.message)
                }
            }
        }
        // Forget warnings that went away, so they are reported again if they come back.
        self.reported = current;
        (new, resolved)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table;

    #[test]
    fn every_warning_reason_is_counted_from_zero() {
        let (writer, _) = table::handle(RoutingTable::default());
        let metrics = Arc::new(Metrics::new());
        let _p = Pipeline::new(writer, Options::default(), Arc::clone(&metrics));
        let text = metrics.render();
        for reason in WarningReason::ALL {
            let line = format!(
                "switchyard_translate_warnings_total{{reason=\"{}\"}} 0",
                reason.as_str()
            );
            assert!(text.contains(&line), "{line} missing:\n{text}");
        }
        assert!(text.contains("switchyard_build_info{"), "{text}");
    }

    /// An object is resolved when its last warning goes, not when one of two goes; and a
    /// warning that comes back is new again.
    #[test]
    fn objects_are_resolved_when_their_every_warning_is_gone() {
        let (w, _) = table::handle(RoutingTable::default());
        let mut p = Pipeline::new(w, Options::default(), Arc::new(Metrics::new()));
        let obj = |name: &str| ObjectRef {
            kind: "Service",
            namespace: "shop".into(),
            name: name.into(),
        };
        let warn = |name: &str, message: &str| Warning {
            object: obj(name),
            reason: WarningReason::InvalidAnnotation,
            message: message.into(),
        };
        let (new, resolved) = p.report(&[warn("web", "a"), warn("web", "b"), warn("api", "c")]);
        assert_eq!(new.len(), 3);
        assert!(resolved.is_empty());
        let (new, resolved) = p.report(&[warn("web", "b"), warn("api", "c")]);
        assert!(new.is_empty());
        assert!(resolved.is_empty(), "web still has a warning: {resolved:?}");
        let (_, resolved) = p.report(&[warn("api", "c")]);
        assert_eq!(resolved, vec![obj("web")]);
        let (new, resolved) = p.report(&[warn("web", "a")]);
        assert_eq!(new, vec![warn("web", "a")]);
        assert_eq!(resolved, vec![obj("api")]);
    }

    #[test]
    fn equal_rebuilds_do_not_swap() {
        let (w, r) = table::handle(Default::default());
        let mut p = Pipeline::new(w, Options::default(), Arc::new(Metrics::new()));
        let a = p.apply::<Service, EndpointSlice>(&[], &[]);
        assert!(a.swapped);
        assert!(r.is_published());
        let b = p.apply::<Service, EndpointSlice>(&[], &[]);
        assert!(!b.swapped);
        assert_eq!(a.generation, b.generation);
    }

    /// A build that was not swapped in (equal to the serving table) is still the base of the
    /// next change set, and generations count swaps only.
    #[test]
    fn change_sets_follow_the_last_build_swapped_or_not() {
        use k8s_openapi::api::core::v1::{ServicePort, ServiceSpec};
        use k8s_openapi::api::discovery::v1::{Endpoint, EndpointPort};
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
        use std::collections::BTreeMap;

        let meta = |name: &str, rv: &str| ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            resource_version: Some(rv.into()),
            uid: Some(name.into()),
            labels: Some(BTreeMap::from([(
                crate::control::translate::SERVICE_NAME_LABEL.to_string(),
                "web".to_string(),
            )])),
            ..Default::default()
        };
        let key = |name: &str| ("default".to_string(), name.to_string());
        let slice = |rv: &str, addr: &str| EndpointSlice {
            metadata: meta("web-1", rv),
            address_type: "IPv4".into(),
            endpoints: Some(vec![Endpoint {
                addresses: vec![addr.into()],
                ..Default::default()
            }]),
            ports: Some(vec![EndpointPort {
                port: Some(80),
                ..Default::default()
            }]),
        };
        let svc = Service {
            metadata: meta("web", "1"),
            spec: Some(ServiceSpec {
                ports: Some(vec![ServicePort {
                    port: 80,
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        };
        let services: Store<Service> = BTreeMap::from([(key("web"), svc)]);
        let mut slices: Store<EndpointSlice> =
            BTreeMap::from([(key("web-1"), slice("1", "10.0.0.1"))]);
        let (w, r) = table::handle(Default::default());
        let mut p = Pipeline::new(w, Options::default(), Arc::new(Metrics::new()));
        let first = p.apply_changes(&services, &slices, Default::default(), None);
        assert!(first.swapped);
        let changed = Changes {
            slices: [key("web-1")].into(),
            ..Default::default()
        };
        // A new version with the same endpoints: an equal table, not swapped.
        slices.insert(key("web-1"), slice("2", "10.0.0.1"));
        let same = p.apply_changes(&services, &slices, Default::default(), Some(&changed));
        assert!(!same.swapped);
        assert_eq!(same.generation, first.generation);
        // The next change is relative to that build.
        slices.insert(key("web-1"), slice("3", "10.0.0.2"));
        let moved = p.apply_changes(&services, &slices, Default::default(), Some(&changed));
        assert!(moved.swapped);
        assert_eq!(moved.generation, first.generation + 1);
        let t = r.load();
        assert_eq!(t.entries[0].endpoints[0].addr.to_string(), "10.0.0.2:80");
    }
}
