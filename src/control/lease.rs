//! Leader election over a `coordination.k8s.io/v1` Lease, the way client-go's `leaderelection`
//! does it: every replica reads the Lease each retry period; one that finds it absent creates
//! it, one that finds it released or not renewed for a whole lease duration (as observed on its
//! own clock, so clock skew between nodes does not matter) takes it over with an update guarded
//! by the `resourceVersion` it read (a 409 Conflict means another replica was faster), and the
//! holder renews it. A holder that cannot renew within the renew deadline steps down by itself,
//! before any other replica may take over; on a graceful shutdown it releases the Lease (no
//! holder, 1 s duration) so another replica takes over at its next retry.
//!
//! Leadership is published as a `watch::Receiver<bool>`, the `switchyard_leader` gauge and one
//! log line per transition. It decides only who writes what is not per replica (Ingress status,
//! Events about objects): every replica serves traffic, leader or not. The decision itself is
//! the pure [`decide`]; this module must not touch the routing table or the data plane.
//!
//! Not `kube-lease-manager` (the one maintained crate for kube 5): it takes an orphaned Lease
//! with a server-side apply and relies on field-manager conflicts for exclusion, and takes an
//! expired one over with a strategic-merge patch that carries no `resourceVersion`, so two
//! replicas can both believe they won until the next read.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use tokio::sync::watch;

use crate::ops::metrics::Metrics;

/// How long a Lease holds without renewal before another replica may take it over.
pub const LEASE_DURATION: Duration = Duration::from_secs(15);
/// A leader that has not renewed for this long steps down; shorter than the lease duration so
/// that it stops leading before anyone else may start.
pub const RENEW_DEADLINE: Duration = Duration::from_secs(10);
/// How often every replica reads (and the leader renews) the Lease.
pub const RETRY_PERIOD: Duration = Duration::from_secs(2);

/// The Lease name when `--election-id` is not given.
pub const DEFAULT_ELECTION_ID: &str = "switchyard-leader";

/// Where the pod's namespace is mounted with its service account token.
const NAMESPACE_FILE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

/// One election: which Lease, who we are, and its timing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Election {
    /// The Lease's name (`--election-id`).
    pub name: String,
    /// The Lease's namespace: the controller's own.
    pub namespace: String,
    /// This replica's `holderIdentity`; unique among the replicas.
    pub identity: String,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

impl Election {
    /// An election with the default timing (15 s lease, 10 s renew deadline, 2 s retry).
    pub fn new(name: &str, namespace: &str, identity: &str) -> Election {
        Election {
            name: name.to_string(),
            namespace: namespace.to_string(),
            identity: identity.to_string(),
            lease_duration: LEASE_DURATION,
            renew_deadline: RENEW_DEADLINE,
            retry_period: RETRY_PERIOD,
        }
    }
}

/// This replica's identity: `POD_NAME` (the Deployment sets it from the downward API), else the
/// host name with a random suffix, so two processes on one machine never share one.
pub fn identity() -> String {
    if let Ok(pod) = std::env::var("POD_NAME")
        && !pod.is_empty()
    {
        return pod;
    }
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_string())
        })
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "switchyard".to_string());
    format!("{host}_{}", random_suffix())
}

/// Eight hex digits from std's randomly seeded hasher and the process id (no `rand` crate for
/// one identity).
fn random_suffix() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    format!("{:08x}", h.finish() as u32)
}

/// The controller's own namespace: `POD_NAMESPACE`, else the service account's namespace file,
/// else `default`.
pub fn own_namespace() -> String {
    std::env::var("POD_NAMESPACE")
        .ok()
        .filter(|n| !n.is_empty())
        .or_else(|| {
            std::fs::read_to_string(NAMESPACE_FILE)
                .ok()
                .map(|n| n.trim().to_string())
        })
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "default".to_string())
}

/// What to do with the Lease as it was just read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// There is none: create it, holding it.
    Create,
    /// Released or expired: take it over (an update guarded by its resourceVersion).
    Acquire,
    /// We hold it: renew it.
    Renew,
    /// Someone else holds it and renews it: wait.
    Wait,
}

/// The decision, given the Lease as read (`None`: absent), how long it has been unchanged as
/// this replica observed it, and the duration to assume when the Lease names none.
///
/// Expiry is measured on this replica's clock from when it first saw the Lease in its current
/// state, not from the Lease's `renewTime` (another node's clock): a replica that just started
/// waits one whole lease duration before taking over a Lease it has never seen renewed.
pub fn decide(
    identity: &str,
    lease: Option<&Lease>,
    unchanged_for: Duration,
    default_duration: Duration,
) -> Step {
    let Some(lease) = lease else {
        return Step::Create;
    };
    let spec = lease.spec.as_ref();
    let holder = spec
        .and_then(|s| s.holder_identity.as_deref())
        .filter(|h| !h.is_empty());
    let duration = spec
        .and_then(|s| s.lease_duration_seconds)
        .and_then(|s| u64::try_from(s).ok())
        .filter(|s| *s > 0)
        .map_or(default_duration, Duration::from_secs);
    match holder {
        None => Step::Acquire,
        Some(h) if h == identity => Step::Renew,
        Some(_) if unchanged_for >= duration => Step::Acquire,
        Some(_) => Step::Wait,
    }
}

/// Why one round with the Lease failed.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error("Lease {0}: {1}")]
    Api(String, kube::Error),
    #[error("Lease {0}: no answer within {1:?}")]
    Timeout(String, Duration),
}

/// Runs the election until `stop` turns true; leadership goes out on the returned receiver.
/// Needs a runtime (kube's client lives in it).
pub fn spawn(
    client: kube::Client,
    election: Election,
    metrics: Arc<Metrics>,
    stop: watch::Receiver<bool>,
) -> watch::Receiver<bool> {
    let (tx, rx) = watch::channel(false);
    metrics.leader.set(0);
    let elector = Elector {
        api: Api::namespaced(client, &election.namespace),
        election,
        metrics,
        leader: tx,
        observed: None,
        last_renew: None,
    };
    tokio::spawn(elector.run(stop));
    rx
}

struct Elector {
    api: Api<Lease>,
    election: Election,
    metrics: Arc<Metrics>,
    leader: watch::Sender<bool>,
    /// The Lease's resourceVersion as last read, and when it was first seen at it.
    observed: Option<(String, Instant)>,
    /// While leading: the last successful renewal (or acquisition).
    last_renew: Option<Instant>,
}

impl Elector {
    async fn run(mut self, mut stop: watch::Receiver<bool>) {
        tracing::info!(lease = %self.lease_name(), identity = %self.election.identity,
            "leader election: candidate");
        let mut held: Option<Lease> = None;
        loop {
            if *stop.borrow() {
                break;
            }
            // A leader's round may last only as long as its renew deadline leaves it.
            let limit = match self.last_renew {
                Some(t) => (t + self.election.renew_deadline)
                    .saturating_duration_since(Instant::now())
                    .min(self.election.renew_deadline / 2),
                None => self.election.renew_deadline / 2,
            };
            let round = tokio::time::timeout(limit, self.round());
            let outcome = tokio::select! {
                r = round => r.unwrap_or_else(|_| Err(LeaseError::Timeout(self.lease_name(), limit))),
                // A dropped sender is a stop too (else this would spin).
                r = stop.changed() => if r.is_err() { break } else { continue },
            };
            match outcome {
                Ok(Some(lease)) => {
                    self.last_renew = Some(Instant::now());
                    held = Some(lease);
                    self.set_leader(true);
                }
                Ok(None) => {
                    held = None;
                    self.last_renew = None;
                    self.set_leader(false);
                }
                Err(e) => {
                    let expired = self
                        .last_renew
                        .is_none_or(|t| t.elapsed() >= self.election.renew_deadline);
                    if self.is_leader() && expired {
                        tracing::warn!(error = %e, "leader election: could not renew within the renew deadline");
                        held = None;
                        self.last_renew = None;
                        self.set_leader(false);
                    } else {
                        tracing::debug!(error = %e, "leader election: round failed; retrying");
                    }
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(self.election.retry_period) => {}
                r = stop.changed() => if r.is_err() { break },
            }
        }
        if let Some(lease) = held.filter(|_| self.is_leader()) {
            self.release(lease).await;
        }
        self.set_leader(false);
    }

    fn lease_name(&self) -> String {
        format!("{}/{}", self.election.namespace, self.election.name)
    }

    fn is_leader(&self) -> bool {
        *self.leader.borrow()
    }

    fn set_leader(&self, leading: bool) {
        let was = self.leader.send_replace(leading);
        self.metrics.leader.set(i64::from(leading));
        if was != leading {
            if leading {
                tracing::info!(lease = %self.lease_name(), identity = %self.election.identity,
                    "leader election: leading (writing Ingress and Gateway API status and Events)");
            } else {
                tracing::info!(lease = %self.lease_name(), identity = %self.election.identity,
                    "leader election: not leading");
            }
        }
    }

    /// One read and at most one write. `Ok(Some(lease))`: we hold it now (as written);
    /// `Ok(None)`: someone else does, or another replica won a race for it.
    async fn round(&mut self) -> Result<Option<Lease>, LeaseError> {
        let name = self.election.name.clone();
        let label = self.lease_name();
        let api_err = |e| LeaseError::Api(label.clone(), e);
        let current = self.api.get_opt(&name).await.map_err(api_err)?;
        let now = Instant::now();
        let version = current
            .as_ref()
            .and_then(|l| l.metadata.resource_version.clone())
            .unwrap_or_default();
        let since = match &self.observed {
            Some((v, t)) if *v == version => *t,
            _ => {
                self.observed = Some((version, now));
                now
            }
        };
        let step = decide(
            &self.election.identity,
            current.as_ref(),
            now - since,
            self.election.lease_duration,
        );
        let written = match (step, current) {
            (Step::Wait, _) => return Ok(None),
            (Step::Create, _) => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(name.clone()),
                        namespace: Some(self.election.namespace.clone()),
                        ..Default::default()
                    },
                    spec: Some(self.spec_taking_over(None)),
                };
                self.api
                    .create(&crate::control::post_params(), &lease)
                    .await
            }
            (Step::Acquire, Some(mut lease)) => {
                lease.spec = Some(self.spec_taking_over(lease.spec.as_ref()));
                self.api
                    .replace(&name, &crate::control::post_params(), &lease)
                    .await
            }
            (Step::Renew, Some(mut lease)) => {
                let spec = lease.spec.get_or_insert_with(Default::default);
                spec.renew_time = Some(MicroTime(Timestamp::now()));
                spec.lease_duration_seconds = Some(seconds(self.election.lease_duration));
                self.api
                    .replace(&name, &crate::control::post_params(), &lease)
                    .await
            }
            (Step::Acquire | Step::Renew, None) => return Ok(None),
        };
        match written {
            Ok(lease) => {
                // Our own write is a change we made, not one to wait out.
                self.observed = lease
                    .metadata
                    .resource_version
                    .clone()
                    .map(|v| (v, Instant::now()));
                Ok(Some(lease))
            }
            // Another replica created or updated it since we read it: it won this round.
            Err(kube::Error::Api(s)) if s.code == 409 && step != Step::Renew => Ok(None),
            Err(e) => Err(api_err(e)),
        }
    }

    /// The spec of a Lease this replica takes (from `previous`, counting the transition).
    fn spec_taking_over(&self, previous: Option<&LeaseSpec>) -> LeaseSpec {
        let now = MicroTime(Timestamp::now());
        LeaseSpec {
            holder_identity: Some(self.election.identity.clone()),
            lease_duration_seconds: Some(seconds(self.election.lease_duration)),
            acquire_time: Some(now.clone()),
            renew_time: Some(now),
            lease_transitions: Some(
                previous
                    .and_then(|s| s.lease_transitions)
                    .map_or(0, |t| t.saturating_add(1)),
            ),
            ..Default::default()
        }
    }

    /// Gives the Lease up at once (no holder, 1 s duration), as client-go's `ReleaseOnCancel`:
    /// the next replica takes over at its next retry instead of after a whole lease duration.
    async fn release(&self, mut lease: Lease) {
        let spec = lease.spec.get_or_insert_with(Default::default);
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(MicroTime(Timestamp::now()));
        let pp = crate::control::post_params();
        let write = self.api.replace(&self.election.name, &pp, &lease);
        match tokio::time::timeout(self.election.retry_period, write).await {
            Ok(Ok(_)) => tracing::info!(lease = %self.lease_name(), "leader election: released"),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "leader election: could not release; it expires instead")
            }
            Err(_) => tracing::warn!("leader election: release timed out; it expires instead"),
        }
    }
}

fn seconds(d: Duration) -> i32 {
    i32::try_from(d.as_secs().max(1)).unwrap_or(i32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(holder: Option<&str>, duration: Option<i32>) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some("switchyard-leader".into()),
                resource_version: Some("7".into()),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_string),
                lease_duration_seconds: duration,
                ..Default::default()
            }),
        }
    }

    const D: Duration = LEASE_DURATION;

    #[test]
    fn an_absent_lease_is_created() {
        assert_eq!(decide("a", None, Duration::ZERO, D), Step::Create);
    }

    #[test]
    fn a_held_lease_is_renewed_by_its_holder_whatever_its_age() {
        let l = lease(Some("a"), Some(15));
        assert_eq!(decide("a", Some(&l), Duration::ZERO, D), Step::Renew);
        assert_eq!(decide("a", Some(&l), D * 10, D), Step::Renew);
    }

    #[test]
    fn another_holder_is_waited_out_for_the_leases_own_duration() {
        let l = lease(Some("b"), Some(15));
        assert_eq!(decide("a", Some(&l), Duration::ZERO, D), Step::Wait);
        assert_eq!(
            decide("a", Some(&l), Duration::from_millis(14_999), D),
            Step::Wait
        );
        assert_eq!(
            decide("a", Some(&l), Duration::from_secs(15), D),
            Step::Acquire
        );
        // The Lease's own duration counts, not ours.
        let short = lease(Some("b"), Some(3));
        assert_eq!(
            decide("a", Some(&short), Duration::from_secs(3), D),
            Step::Acquire
        );
        // Without one (or a nonsensical one), ours.
        for d in [None, Some(0), Some(-5)] {
            let l = lease(Some("b"), d);
            assert_eq!(decide("a", Some(&l), Duration::from_secs(3), D), Step::Wait);
            assert_eq!(decide("a", Some(&l), D, D), Step::Acquire);
        }
    }

    #[test]
    fn a_released_lease_is_taken_at_once() {
        for holder in [None, Some("")] {
            let l = lease(holder, Some(1));
            assert_eq!(decide("a", Some(&l), Duration::ZERO, D), Step::Acquire);
        }
        let no_spec = Lease {
            spec: None,
            ..lease(None, None)
        };
        assert_eq!(
            decide("a", Some(&no_spec), Duration::ZERO, D),
            Step::Acquire
        );
    }

    #[test]
    fn the_renew_deadline_ends_before_anyone_may_take_over() {
        assert!(RENEW_DEADLINE < LEASE_DURATION);
        assert!(RETRY_PERIOD < RENEW_DEADLINE);
    }

    #[test]
    fn identities_are_unique_without_a_pod_name() {
        assert_ne!(random_suffix(), random_suffix());
        assert_eq!(random_suffix().len(), 8);
    }
}
