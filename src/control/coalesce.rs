//! When the cluster watcher builds a table: the timing of coalescing, as a pure state machine
//! with the clock passed in, so that it is tested without sleeping.
//!
//! A change on an idle pipeline is built at once (leading edge): a fixed debounce would be the
//! floor of every change's latency (it was 75 ms). Changes that arrive while a build runs, or
//! shortly after it, are coalesced into one build after it (trailing edge), which starts once
//! the pipeline has rested as long as the last build took (at least `MIN_GAP`): under a storm
//! at most about half of the watcher's time goes to builds and swaps are at most one per
//! `MIN_GAP`, whatever the event rate. `max_wait` bounds how long the first unbuilt change
//! waits, so a storm with slow builds cannot hold the swap back. The watcher, not this
//! module, reads what is already buffered before it builds; this module does no I/O.

use std::time::{Duration, Instant};

/// Builds start at least this long after the previous one ended: a storm of events makes at
/// most about 100 swaps a second (each swap also refreshes per-entry metric handles and runs
/// the swap hooks), while a change on a quiet pipeline waits for nothing.
pub const MIN_GAP: Duration = Duration::from_millis(10);

/// How events are batched into builds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Coalesce {
    /// The first change not yet in a table waits at most this long for a build to start.
    pub max_wait: Duration,
}

impl Default for Coalesce {
    fn default() -> Self {
        Coalesce {
            max_wait: Duration::from_secs(1),
        }
    }
}

/// The coalescing state: what is pending, and the last build.
#[derive(Debug, Clone)]
pub struct Coalescer {
    config: Coalesce,
    /// When the first change not yet in a build arrived.
    pending: Option<Instant>,
    /// When the last build ended, and how long it took.
    last: Option<(Instant, Duration)>,
}

impl Coalescer {
    pub fn new(config: Coalesce) -> Self {
        Coalescer {
            config,
            pending: None,
            last: None,
        }
    }

    /// A change arrived at `now`.
    pub fn changed(&mut self, now: Instant) {
        self.pending.get_or_insert(now);
    }

    /// When the next build should start; `None` while nothing is pending. It may be in the
    /// past: build at once.
    pub fn due(&self) -> Option<Instant> {
        let first = self.pending?;
        let rested = self
            .last
            .map_or(first, |(ended, took)| ended + took.max(MIN_GAP));
        Some(rested.max(first).min(first + self.config.max_wait))
    }

    /// When the first pending change will have waited `max_wait`: reading buffered events
    /// before a build stops then.
    pub fn overdue_at(&self) -> Option<Instant> {
        self.pending.map(|first| first + self.config.max_wait)
    }

    /// A build starts: returns when the first change it includes arrived (for the
    /// propagation metric); changes from now on wait for the next build.
    pub fn start(&mut self) -> Option<Instant> {
        self.pending.take()
    }

    /// The build that `start` began ran from `started` to `ended`.
    pub fn built(&mut self, started: Instant, ended: Instant) {
        self.last = Some((ended, ended.saturating_duration_since(started)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn coalescer() -> (Coalescer, Instant) {
        (Coalescer::new(Coalesce::default()), Instant::now())
    }

    #[test]
    fn nothing_pending_nothing_due() {
        let (c, _) = coalescer();
        assert_eq!(c.due(), None);
    }

    /// The old 75 ms debounce made this `t0 + 75 ms`.
    #[test]
    fn a_change_on_an_idle_pipeline_is_due_at_once() {
        let (mut c, t0) = coalescer();
        c.changed(t0);
        assert_eq!(c.due(), Some(t0));
        // Long after a build, the pipeline is idle again.
        assert_eq!(c.start(), Some(t0));
        c.built(t0, t0 + ms(3));
        c.changed(t0 + ms(500));
        assert_eq!(c.due(), Some(t0 + ms(500)));
    }

    #[test]
    fn later_changes_keep_the_first_arrival() {
        let (mut c, t0) = coalescer();
        c.changed(t0);
        c.changed(t0 + ms(5));
        assert_eq!(c.start(), Some(t0));
        assert_eq!(c.start(), None, "a build takes the pending changes");
        assert_eq!(c.due(), None);
    }

    /// Changes that came during a build wait until the pipeline has rested as long as the
    /// build took: one build for all of them, right after.
    #[test]
    fn changes_during_a_slow_build_make_one_build_after_it() {
        let (mut c, t0) = coalescer();
        c.changed(t0);
        c.start();
        // Arrived during the build (read when it ended).
        c.changed(t0 + ms(40));
        c.changed(t0 + ms(40));
        c.built(t0, t0 + ms(40));
        assert_eq!(c.due(), Some(t0 + ms(80)));
        c.changed(t0 + ms(60));
        assert_eq!(
            c.due(),
            Some(t0 + ms(80)),
            "a later change does not push it back"
        );
    }

    #[test]
    fn fast_builds_are_still_spaced_by_the_minimum_gap() {
        let (mut c, t0) = coalescer();
        c.changed(t0);
        c.start();
        c.built(t0, t0 + ms(1));
        c.changed(t0 + ms(2));
        assert_eq!(c.due(), Some(t0 + ms(1) + MIN_GAP));
        // A change after the gap is on an idle pipeline.
        let (mut c, t0) = coalescer();
        c.changed(t0);
        c.start();
        c.built(t0, t0 + ms(1));
        c.changed(t0 + ms(1) + MIN_GAP + ms(1));
        assert_eq!(c.due(), Some(t0 + ms(1) + MIN_GAP + ms(1)));
    }

    /// A build slower than the maximum wait: the next starts when the first change has
    /// waited `max_wait`, not after the rest.
    #[test]
    fn the_maximum_wait_bounds_the_rest() {
        let mut c = Coalescer::new(Coalesce { max_wait: ms(100) });
        let t0 = Instant::now();
        c.changed(t0);
        c.start();
        c.built(t0, t0 + ms(300));
        c.changed(t0 + ms(300));
        assert_eq!(c.due(), Some(t0 + ms(400)));
        // With a zero maximum wait every change is due when it arrives.
        let mut c = Coalescer::new(Coalesce {
            max_wait: Duration::ZERO,
        });
        c.changed(t0);
        c.start();
        c.built(t0, t0 + ms(50));
        c.changed(t0 + ms(51));
        assert_eq!(c.due(), Some(t0 + ms(51)));
    }

    /// A storm: a change every millisecond for 10 s, builds of 4 ms. Builds stay at most
    /// about half of the time, no change waits longer than the rest plus a build, and there
    /// is no backlog: every change is in a build by the end.
    #[test]
    fn a_storm_is_coalesced_with_bounded_builds_and_waits() {
        let (mut c, t0) = coalescer();
        let build = ms(4);
        let mut now = t0;
        let end = t0 + Duration::from_secs(10);
        let (mut builds, mut busy, mut worst) = (0u32, Duration::ZERO, Duration::ZERO);
        let mut next_change = t0;
        // Bounded: the clock moves forward by at least 1 ms a round.
        for _ in 0..20_000 {
            while next_change <= now && next_change < end {
                c.changed(next_change);
                next_change += ms(1);
            }
            if let Some(due) = c.due().filter(|d| *d <= now) {
                let first = c.start().expect("pending");
                let started = now.max(due);
                worst = worst.max(started + build - first);
                c.built(started, started + build);
                builds += 1;
                busy += build;
                // Changes that arrived during the build are read when it ends.
                now = started + build;
            } else {
                now += ms(1);
            }
            if now >= end + ms(100) {
                break;
            }
        }
        assert_eq!(c.start(), None, "changes left unbuilt");
        assert!(now >= end, "the simulation stopped early");
        // 10 s at one build per (build + max(build, gap)) = 14 ms: about 714.
        assert!((600..=800).contains(&builds), "{builds} builds");
        assert!(busy <= Duration::from_secs(3), "{busy:?} building");
        assert!(worst <= build + MIN_GAP + build + ms(1), "{worst:?}");
    }
}
