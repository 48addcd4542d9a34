//! Kubernetes Events about the objects switchyard routes: one Warning Event per distinct
//! warning (object version, reason, message), and a Normal `WarningsResolved` Event when an
//! object that was warned about has no warning left. Only the leader writes them; a rate limit
//! and a bounded queue keep a storm of warnings from becoming a storm of writes.
//!
//! kube-runtime's `Recorder` folds Events whose object, reason and action are equal into one
//! series whatever their note, so a second warning with the same reason was only a count on the
//! first. Here each Event's name is derived from what it says (`event_name`): distinct warnings
//! are distinct Events, and the same warning written again — by this replica or by a new leader
//! republishing what it saw while it followed — is the same name, answered 409 and counted on
//! the existing Event's series instead of written twice. This module must not block the
//! watch: it is fed through a channel that drops when full.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::Patch;
use kube::{Api, Client};
use tokio::sync::mpsc;

use crate::control::translate::Warning;
use crate::control::{FIELD_MANAGER, patch_params, post_params};
use crate::ops::metrics::Metrics;

/// What the watch hands the sink.
#[derive(Debug, Clone)]
pub enum Report {
    /// A warning that is new in the latest build, about the object referenced.
    Warning(Warning, ObjectReference),
    /// The object referenced had warnings and has none now.
    Resolved(ObjectReference),
}

/// The reason of the Normal Event that says an object's warnings are gone.
pub const RESOLVED_REASON: &str = "WarningsResolved";
/// What every Event says switchyard was doing (events.k8s.io requires an action).
const ACTION: &str = "Route";

/// Reports waiting for the API server at most.
const QUEUE: usize = 256;
/// Global rate: one Event per this interval, with a burst of `BURST`.
const INTERVAL: Duration = Duration::from_millis(500);
const BURST: u32 = 10;
/// Names already written (or counted) that this replica remembers; past it, it forgets all and
/// lets the API server's 409 tell it again.
const MEMORY: usize = 10_000;
/// An Event's note is cut to this many bytes, at a character's end (the API server refuses
/// notes over 1 kB).
const NOTE_MAX: usize = 1024;

/// `message` cut to `NOTE_MAX` bytes at a character boundary.
fn note_of(message: &str) -> String {
    let mut end = message.len().min(NOTE_MAX);
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    message[..end].to_string()
}

/// The name of the Event that says `note` with `reason` about the object version `regarding`:
/// the object's name, a dot, and 16 hex digits of a hash of the object's UID and
/// resourceVersion, the reason and the note. Equal inputs give equal names in every replica
/// (FNV-1a, not the std hasher whose keys may change between Rust releases).
pub fn event_name(regarding: &ObjectReference, reason: &str, note: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let parts = [
        regarding.uid.as_deref().unwrap_or(""),
        regarding.resource_version.as_deref().unwrap_or(""),
        reason,
        note,
    ];
    for part in parts {
        // A separator no part holds, so ("ab", "c") and ("a", "bc") differ.
        for &b in part.as_bytes().iter().chain([0xffu8].iter()) {
            hash ^= u64::from(b);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    let object = regarding.name.as_deref().unwrap_or(FIELD_MANAGER);
    // A name is a DNS subdomain of at most 253 characters; object names already are one.
    let object: String = object.chars().take(253 - 17).collect();
    format!("{object}.{hash:016x}")
}

/// The Event for one report, as written on first sight.
pub fn event_for(report: &Report, instance: &str, now: Timestamp) -> Event {
    let (type_, reason, note, regarding) = match report {
        Report::Warning(w, r) => (
            "Warning",
            w.reason.as_str().to_string(),
            note_of(&w.message),
            r,
        ),
        Report::Resolved(r) => (
            "Normal",
            RESOLVED_REASON.to_string(),
            "switchyard has no warning about this object now; the earlier warnings are resolved"
                .to_string(),
            r,
        ),
    };
    Event {
        metadata: ObjectMeta {
            name: Some(event_name(regarding, &reason, &note)),
            namespace: Some(
                regarding
                    .namespace
                    .clone()
                    .unwrap_or_else(|| "default".into()),
            ),
            ..Default::default()
        },
        action: Some(ACTION.into()),
        reason: Some(reason),
        note: Some(note),
        type_: Some(type_.into()),
        regarding: Some(regarding.clone()),
        event_time: Some(MicroTime(now)),
        reporting_controller: Some(FIELD_MANAGER.into()),
        reporting_instance: Some(instance.into()),
        ..Default::default()
    }
}

/// Starts the task that writes Events; returns its queue. `leader` is the election's view
/// (`None`: a single replica, always writing).
pub fn spawn(
    client: Client,
    metrics: Arc<Metrics>,
    leader: Option<tokio::sync::watch::Receiver<bool>>,
) -> mpsc::Sender<Report> {
    let (tx, rx) = mpsc::channel::<Report>(QUEUE);
    let instance = std::env::var("POD_NAME").unwrap_or_else(|_| FIELD_MANAGER.into());
    tokio::spawn(
        Sink {
            client,
            metrics,
            instance,
            warned: HashSet::new(),
            written: HashMap::new(),
            tokens: BURST,
            refill: Instant::now(),
        }
        .run(rx, leader),
    );
    tx
}

struct Sink {
    client: Client,
    metrics: Arc<Metrics>,
    instance: String,
    /// UIDs of objects a Warning Event was written about and no `WarningsResolved` since.
    warned: HashSet<String>,
    /// Event names written, with the UID of the object each is about and the count its series
    /// has reached.
    written: HashMap<String, (String, i32)>,
    tokens: u32,
    refill: Instant,
}

impl Sink {
    async fn run(
        mut self,
        mut rx: mpsc::Receiver<Report>,
        mut leader: Option<tokio::sync::watch::Receiver<bool>>,
    ) {
        // Reports that came while another replica led: written if this one comes to lead (at
        // startup the first tables are built before the first election round).
        let mut parked: VecDeque<Report> = VecDeque::new();
        let mut ready: VecDeque<Report> = VecDeque::new();
        loop {
            if ready.is_empty() {
                let leading = async {
                    match leader.as_mut() {
                        Some(l) => l.changed().await.is_ok(),
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    item = rx.recv() => match item {
                        Some(item) => ready.push_back(item),
                        None => return,
                    },
                    open = leading => {
                        if !open {
                            // The election ended (shutting down): nothing more to write.
                            return;
                        }
                        if leader.as_ref().is_some_and(|l| *l.borrow()) {
                            ready.extend(parked.drain(..));
                        }
                    }
                }
            }
            let Some(report) = ready.pop_front() else {
                continue;
            };
            // Every replica sees the same warning; the leader's Event is the one.
            if leader.as_ref().is_some_and(|l| !*l.borrow()) {
                self.count("not_leader");
                parked.push_back(report);
                if parked.len() > QUEUE {
                    parked.pop_front();
                }
                continue;
            }
            self.write(&report).await;
        }
    }

    fn count(&self, outcome: &str) {
        self.metrics
            .kube_events_total
            .with_label_values(&[outcome])
            .inc();
    }

    async fn write(&mut self, report: &Report) {
        let (uid, regarding) = match report {
            Report::Warning(_, r) | Report::Resolved(r) => (r.uid.clone().unwrap_or_default(), r),
        };
        // A resolution is only news about an object this replica warned about.
        if matches!(report, Report::Resolved(_)) && !self.warned.contains(&uid) {
            return;
        }
        let event = event_for(report, &self.instance, Timestamp::now());
        let name = event.metadata.name.clone().unwrap_or_default();
        if matches!(report, Report::Warning(..)) && self.written.contains_key(&name) {
            // The same warning about the same object version, already on record.
            return;
        }
        let earned = (self.refill.elapsed().as_millis() / INTERVAL.as_millis()) as u32;
        if earned > 0 {
            self.tokens = (self.tokens + earned).min(BURST);
            self.refill = Instant::now();
        }
        if self.tokens == 0 {
            self.count("rate_limited");
            return;
        }
        self.tokens -= 1;
        if self.written.len() >= MEMORY {
            self.written.clear();
        }
        let namespace = regarding.namespace.as_deref().unwrap_or("default");
        let api: Api<Event> = Api::namespaced(self.client.clone(), namespace);
        let result = match api.create(&post_params(), &event).await {
            Err(kube::Error::Api(status)) if status.code == 409 => {
                // Written before (by this replica, or by a former leader): one more sighting on
                // its series, as kube's recorder counts repeats.
                let count = self.written.get(&name).map_or(1, |&(_, n)| n) + 1;
                let series = EventSeries {
                    count,
                    last_observed_time: MicroTime(Timestamp::now()),
                };
                let patch = serde_json::json!({ "series": series });
                let done = api
                    .patch(&name, &patch_params(), &Patch::Merge(&patch))
                    .await
                    .map(|_| ());
                if done.is_ok() {
                    self.written.insert(name.clone(), (uid.clone(), count));
                }
                done
            }
            Ok(_) => {
                self.written.insert(name.clone(), (uid.clone(), 1));
                Ok(())
            }
            Err(e) => Err(e),
        };
        match result {
            Ok(()) => {
                self.count("published");
                match report {
                    Report::Warning(..) => {
                        self.warned.insert(uid);
                    }
                    Report::Resolved(_) => {
                        self.warned.remove(&uid);
                        // The warnings may come back at this same version (a Secret deleted
                        // again): their Events must be counted again, not skipped.
                        self.written
                            .retain(|n, (about, _)| *about != uid || *n == name);
                    }
                }
            }
            Err(e) => {
                self.count("failed");
                tracing::warn!(error = %e, event = %name, "could not write a Kubernetes Event");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::translate::{ObjectRef, WarningReason};

    fn svc(version: &str) -> ObjectReference {
        ObjectReference {
            kind: Some("Service".into()),
            namespace: Some("shop".into()),
            name: Some("web".into()),
            uid: Some("u-1".into()),
            resource_version: Some(version.into()),
            ..Default::default()
        }
    }

    fn warning(message: &str) -> Warning {
        Warning {
            object: ObjectRef {
                kind: "Service",
                namespace: "shop".into(),
                name: "web".into(),
            },
            reason: WarningReason::InvalidAnnotation,
            message: message.into(),
        }
    }

    #[test]
    fn two_warnings_with_one_reason_are_two_events() {
        let r = svc("7");
        let a = event_name(&r, "InvalidAnnotation", "lb.algorithm: \"nope\"");
        let b = event_name(&r, "InvalidAnnotation", "lb.maxconn: \"-1\"");
        assert_ne!(a, b);
        assert!(a.starts_with("web.") && a.len() == "web.".len() + 16, "{a}");
    }

    #[test]
    fn the_same_warning_has_the_same_name_and_a_new_version_a_new_one() {
        let note = "lb.algorithm: \"nope\"";
        assert_eq!(
            event_name(&svc("7"), "InvalidAnnotation", note),
            event_name(&svc("7"), "InvalidAnnotation", note)
        );
        assert_ne!(
            event_name(&svc("7"), "InvalidAnnotation", note),
            event_name(&svc("8"), "InvalidAnnotation", note)
        );
        // Parts are separated: moving a byte from one part to the next changes the name.
        assert_ne!(
            event_name(&svc("7"), "ab", "c"),
            event_name(&svc("7"), "a", "bc")
        );
    }

    #[test]
    fn a_long_object_name_still_makes_a_valid_name() {
        let mut r = svc("1");
        r.name = Some("x".repeat(253));
        assert_eq!(event_name(&r, "R", "n").len(), 253);
    }

    #[test]
    fn events_say_what_they_are_about() {
        let now = Timestamp::UNIX_EPOCH;
        let w = event_for(&Report::Warning(warning("bad"), svc("7")), "pod-a", now);
        assert_eq!(w.type_.as_deref(), Some("Warning"));
        assert_eq!(w.reason.as_deref(), Some("InvalidAnnotation"));
        assert_eq!(w.note.as_deref(), Some("bad"));
        assert_eq!(w.metadata.namespace.as_deref(), Some("shop"));
        assert_eq!(w.reporting_instance.as_deref(), Some("pod-a"));
        assert_eq!(
            w.regarding.as_ref().and_then(|r| r.uid.as_deref()),
            Some("u-1")
        );
        let r = event_for(&Report::Resolved(svc("8")), "pod-a", now);
        assert_eq!(r.type_.as_deref(), Some("Normal"));
        assert_eq!(r.reason.as_deref(), Some(RESOLVED_REASON));
        let long = event_for(
            &Report::Warning(warning(&"é".repeat(2000)), svc("7")),
            "p",
            now,
        );
        // Two bytes a character: cut at a character's end, within the API server's limit.
        assert_eq!(long.note.map(|n| n.len()), Some(NOTE_MAX));
        let odd = event_for(
            &Report::Warning(warning(&format!("a{}", "é".repeat(600))), svc("7")),
            "p",
            now,
        );
        assert_eq!(odd.note.map(|n| n.len()), Some(NOTE_MAX - 1));
    }
}
