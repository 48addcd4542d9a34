//! How every watch of the API server retries: a backoff from 100 ms doubling to 30 s with
//! jitter (client-go's reflector also ends at 30 s), reset only when a list completes or a
//! watch answers; and one probe of the API server's `/readyz` that wakes every backed-off watch
//! at once when a server that was not ready is ready again. Eleven watches at 30 s are under
//! half a request a second during a long outage, and the probe (one request a second while a
//! watch is failing) keeps a restarted API server picked up within about a second instead of
//! half a minute. It also says when a watch's error is worth a warning: the first of an outage,
//! not every retry (`Outage`). This module must not touch stores or the table.

use std::sync::LazyLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use futures::{Stream, StreamExt};
use kube::Client;
use kube::runtime::watcher::{self, Event};
use tokio::sync::watch;

/// How often a Gateway API kind whose CRD is not installed (its list answers 404) is listed
/// again. A cluster without the Gateway API is the common case and stays so for weeks: the
/// usual 1 s retry would cost four requests a second for nothing, while an operator who
/// installs the CRDs waits at most this long (plus jitter) for switchyard to notice. A watch on
/// CustomResourceDefinitions would notice at once but needs read access to every CRD of the
/// cluster, which least privilege keeps from switchyard.
pub const GATEWAY_API_RETRY: Duration = Duration::from_secs(15);

/// Retries a failing watch with `RetryBackoff`, which only a completed list or a watch event
/// resets: kube's own `backoff` adapter resets on any event, and its watcher emits `Init`
/// before every list, so a list that keeps failing (API server down, RBAC removed) was retried
/// every 100 ms forever. A 410 Gone (history compacted, as after an API-server restart)
/// re-lists at once: the API server is there and only the resume point is stale. With
/// `absent_retry`, a 404 (the resource is not served: a CRD not installed) waits that long
/// instead, with jitter. Any other error waits its backoff, or less if the `/readyz` probe
/// sees the API server come back (`HEALTH`).
pub(crate) fn backed_off<K: Send + 'static>(
    inner: impl Stream<Item = Result<Event<K>, watcher::Error>> + Send + 'static,
    absent_retry: Option<Duration>,
) -> impl Stream<Item = Result<Event<K>, watcher::Error>> + Send {
    // (stream, delays, wait before the next poll and whether the probe may cut it short, a 410
    // came since the last watch event)
    let state = (
        Box::pin(inner),
        RetryBackoff::default(),
        None::<(Duration, bool)>,
        false,
    );
    futures::stream::unfold(
        state,
        move |(mut inner, mut backoff, wait, mut gone)| async move {
            match wait {
                Some((d, true)) => HEALTH.sleep_unless_back(d).await,
                Some((d, false)) => tokio::time::sleep(d).await,
                None => {}
            }
            let item = inner.next().await?;
            let wait = match &item {
                // An event of a running watch: the API server answers.
                Ok(Event::Apply(_) | Event::Delete(_)) => {
                    backoff.reset();
                    gone = false;
                    None
                }
                // A completed list; unless a 410 keeps following lists (a server whose lists give
                // versions it cannot watch from), which must not spin.
                Ok(Event::InitDone) => {
                    if !gone {
                        backoff.reset();
                    }
                    None
                }
                Ok(Event::Init | Event::InitApply(_)) => None,
                Err(e) if is_gone(e) && !gone => {
                    gone = true;
                    None
                }
                Err(e) if absent_retry.is_some() && is_not_found(e) => {
                    absent_retry.map(|d| (d + d.mul_f64(jitter() / 4.0), false))
                }
                Err(_) => {
                    HEALTH.failed();
                    backoff.next().map(|d| (d, true))
                }
            };
            Some((item, (inner, backoff, wait, gone)))
        },
    )
}

/// A 404 Not Found answering a list or watch: the resource is not served (its CRD is not
/// installed, or was deleted).
pub(crate) fn is_not_found(e: &watcher::Error) -> bool {
    status_code(e) == Some(404)
}

/// A 410 Gone, as a watch `ERROR` event or as the answer to the watch request.
pub(crate) fn is_gone(e: &watcher::Error) -> bool {
    status_code(e) == Some(410)
}

fn status_code(e: &watcher::Error) -> Option<u16> {
    match e {
        watcher::Error::WatchError(status) => Some(status.code),
        watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::WatchFailed(kube::Error::Api(status))
        | watcher::Error::InitialListFailed(kube::Error::Api(status)) => Some(status.code),
        _ => None,
    }
}

/// A fraction in [0, 1) from the clock, to spread retries of many replicas.
pub(crate) fn jitter() -> f64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    f64::from(nanos % 1000) / 1000.0
}

/// Watch retry delays: 100 ms doubling to 30 s, with up to 25 % jitter, reset when a list
/// completes or the watch answers. The first retries are fast (a load balancer wants a blip
/// forgotten at once); a long outage costs one request per watch every 30 s, as client-go's.
#[derive(Debug, Clone)]
pub(crate) struct RetryBackoff {
    next: Duration,
}

impl RetryBackoff {
    const FIRST: Duration = Duration::from_millis(100);
    const MAX: Duration = Duration::from_secs(30);

    pub(crate) fn reset(&mut self) {
        self.next = Self::FIRST;
    }
}

impl Default for RetryBackoff {
    fn default() -> Self {
        RetryBackoff { next: Self::FIRST }
    }
}

impl Iterator for RetryBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let base = self.next;
        self.next = (self.next * 2).min(Self::MAX);
        // Up to 25 % jitter so that many replicas do not retry in lockstep.
        Some(base + base.mul_f64(jitter() / 4.0))
    }
}

/// What the watches of this process know of the API server: a count of failed requests (the
/// probe looks at the API server while it grows) and a signal the probe raises when the server
/// is back. One per process: every watch talks to the one API server of its client
/// configuration.
pub(crate) struct ApiHealth {
    failures: AtomicU64,
    back: watch::Sender<u64>,
    probing: AtomicBool,
}

pub(crate) static HEALTH: LazyLock<ApiHealth> = LazyLock::new(|| ApiHealth {
    failures: AtomicU64::new(0),
    back: watch::channel(0).0,
    probing: AtomicBool::new(false),
});

impl ApiHealth {
    fn failed(&self) {
        self.failures.fetch_add(1, Ordering::Relaxed);
    }

    /// Sleeps `d`, or less if the probe sees the API server come back meanwhile.
    async fn sleep_unless_back(&self, d: Duration) {
        let mut back = self.back.subscribe();
        tokio::select! {
            _ = tokio::time::sleep(d) => {}
            _ = back.changed() => {}
        }
    }

    /// Starts the `/readyz` probe of this process (once; later calls do nothing).
    pub(crate) fn start_probe(&'static self, client: Client) {
        if self.probing.swap(true, Ordering::Relaxed) {
            return;
        }
        tokio::spawn(async move {
            let mut probe = Probe::default();
            let mut seen = self.failures.load(Ordering::Relaxed);
            loop {
                tokio::time::sleep(PROBE_INTERVAL + PROBE_INTERVAL.mul_f64(jitter() / 4.0)).await;
                let failures = self.failures.load(Ordering::Relaxed);
                let failing = failures != seen;
                seen = failures;
                if !failing && !probe.outage {
                    continue;
                }
                let ready = ready(&client).await;
                if probe.observe(ready) {
                    tracing::info!("the API server is ready again; watches retry now");
                    self.back.send_modify(|n| *n += 1);
                }
            }
        });
    }
}

/// How often the probe looks while a watch is failing.
const PROBE_INTERVAL: Duration = Duration::from_secs(1);

/// The probe's memory: an outage is on from a failed watch until `/readyz` answers. Watches
/// are woken only when `/readyz` had failed first: a server that answers ready while refusing
/// switchyard (RBAC removed) gains nothing from retries sooner than their backoff.
#[derive(Debug, Default)]
struct Probe {
    outage: bool,
    saw_unready: bool,
}

impl Probe {
    /// One probe's answer; true when the watches are to be woken.
    fn observe(&mut self, ready: bool) -> bool {
        if !ready {
            self.outage = true;
            self.saw_unready = true;
            return false;
        }
        let wake = self.saw_unready;
        *self = Probe::default();
        wake
    }
}

/// Whether the API server answers `/readyz` with 200 within 2 s. Every client may ask: the
/// `system:public-info-viewer` role grants it to all.
async fn ready(client: &Client) -> bool {
    let Ok(request) = http::Request::get("/readyz").body(Vec::new()) else {
        return false;
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(2), client.request_text(request)).await,
        Ok(Ok(_))
    )
}

/// Whether a watch's error is worth a warning: the first of an outage is, the retries that
/// follow are debug lines (their count is in the watch error metric).
#[derive(Debug, Default)]
pub(crate) struct Outage {
    down: bool,
}

impl Outage {
    /// A request failed; true if it is the first since the watch last worked.
    pub(crate) fn failed(&mut self) -> bool {
        !std::mem::replace(&mut self.down, true)
    }

    /// The watch works; true if it had failed (worth a line saying it is back).
    pub(crate) fn worked(&mut self) -> bool {
        std::mem::replace(&mut self.down, false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Service;
    use std::time::Instant;

    fn api_error(code: u16) -> watcher::Error {
        let status = kube::core::Status::failure("x", "y").with_code(code);
        watcher::Error::InitialListFailed(kube::Error::Api(status.boxed()))
    }

    #[test]
    fn retry_backoff_grows_to_thirty_seconds_and_resets() {
        let mut b = RetryBackoff::default();
        let first = b.next().unwrap();
        assert!(first >= Duration::from_millis(100) && first <= Duration::from_millis(125));
        let delays: Vec<Duration> = (0..20).filter_map(|_| b.next()).collect();
        assert!(delays.iter().all(|d| *d <= Duration::from_millis(37_500)));
        assert!(delays.last().unwrap() >= &Duration::from_secs(30));
        // Doubling: the eighth retry is past 12.8 s, not stuck at a low cap.
        assert!(delays[6] >= Duration::from_millis(12_800), "{delays:?}");
        b.reset();
        assert!(b.next().unwrap() <= Duration::from_millis(125));
    }

    #[test]
    fn status_codes_are_read_from_every_error_form() {
        assert!(is_not_found(&api_error(404)));
        assert!(!is_not_found(&api_error(403)));
        assert!(!is_gone(&api_error(404)));
        assert!(is_gone(&api_error(410)));
        let status = kube::core::Status::failure("x", "y").with_code(410);
        assert!(is_gone(&watcher::Error::WatchError(status.boxed())));
    }

    #[test]
    fn the_probe_wakes_watches_only_after_the_server_was_unready() {
        let mut p = Probe::default();
        // Ready while a watch fails (RBAC refuses): nothing to wake.
        assert!(!p.observe(true));
        assert!(!p.observe(false));
        assert!(!p.observe(false));
        assert!(p.observe(true), "back after being unready");
        assert!(!p.observe(true), "once per outage");
    }

    #[test]
    fn an_outage_warns_once() {
        let mut o = Outage::default();
        assert!(!o.worked());
        assert!(o.failed());
        assert!(!o.failed());
        assert!(o.worked());
        assert!(o.failed());
    }

    /// The delay between a failed list and the next item of a `backed_off` stream.
    async fn delay_after(code: u16, absent_retry: Option<Duration>) -> Duration {
        let items: Vec<Result<Event<Service>, watcher::Error>> =
            vec![Err(api_error(code)), Ok(Event::InitDone)];
        let mut s = Box::pin(backed_off(futures::stream::iter(items), absent_retry));
        assert!(s.next().await.unwrap().is_err());
        let t = Instant::now();
        assert!(s.next().await.unwrap().is_ok());
        t.elapsed()
    }

    #[tokio::test]
    async fn a_missing_crd_is_looked_for_at_its_own_interval() {
        let retry = Duration::from_millis(400);
        let absent = delay_after(404, Some(retry)).await;
        assert!(absent >= retry && absent < retry * 2, "{absent:?}");
        // Other failures of the same kind, and 404s of core kinds, back off as usual.
        let forbidden = delay_after(403, Some(retry)).await;
        assert!(forbidden < Duration::from_millis(300), "{forbidden:?}");
        let core = delay_after(404, None).await;
        assert!(core < Duration::from_millis(300), "{core:?}");
    }

    #[tokio::test]
    async fn a_back_signal_cuts_a_backoff_short() {
        let sleeping = tokio::spawn(HEALTH.sleep_unless_back(Duration::from_secs(60)));
        // Signalled until it wakes: the sleeper listens from its first poll on.
        for _ in 0..100 {
            if sleeping.is_finished() {
                break;
            }
            HEALTH.back.send_modify(|n| *n += 1);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(sleeping.is_finished(), "still asleep after 5 s of signals");
    }
}
