//! When each health-check target is next due: a map by address and a min-heap of due times,
//! so that finding the checks to start costs what is due, not what is checked. At 100,000
//! endpoint addresses the checker used to probe a hash map for every address each time one
//! check ended, and to find the earliest due time by scanning them all.
//!
//! Pure bookkeeping: no clock (callers pass `now`), no I/O, no tokio. The heap may hold stale
//! entries (a target replaced, removed or rescheduled); they are skipped when they surface and
//! the heap is rebuilt when they outnumber the live ones.

use std::cmp::Reverse;
use std::collections::hash_map::Entry as MapEntry;
use std::collections::{BinaryHeap, HashMap};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::table::{EndpointState, Entry, RoutingTable, Shared};

/// What to check at one address. Cheap to clone (two `Arc`s; a second state is rare): the
/// checker keeps one per endpoint address, 100,000 at 10,000 Services.
#[derive(Clone, Debug)]
pub struct Target {
    pub addr: SocketAddr,
    pub interval: Duration,
    /// The entry whose settings the check follows: the first (in table order) of those using
    /// the address that asks for more than a connect, else the first. Its `check.path` and
    /// `check.grpc` say what is asked; its `upstream` how to speak to the address (the
    /// protocol, and for TLS the name and verification); its name is in the logs.
    pub entry: Arc<Entry>,
    /// The address's state (translate gives every entry of a table the same one).
    pub state: Shared<EndpointState>,
    /// Other states of the same address, if entries disagree: all are kept so none is left
    /// unchecked. Empty (no allocation) in a table translate built.
    pub others: Vec<Shared<EndpointState>>,
}

/// One address's place in the schedule.
struct Slot {
    target: Target,
    /// When the next check is due (while `running`: when the one after the running one is).
    next: Instant,
    running: bool,
    /// The table (`Schedule::tables`) that last listed the address.
    seen: u64,
}

/// The targets of the current table and when each is next due.
#[derive(Default)]
pub(super) struct Schedule {
    slots: HashMap<SocketAddr, Slot, ahash::RandomState>,
    /// `(due, address)`, earliest first; an entry counts only while its slot is not running
    /// and is due at exactly that time.
    heap: BinaryHeap<Reverse<(Instant, SocketAddr)>>,
    /// Tables taken so far.
    tables: u64,
}

impl Schedule {
    /// Takes the addresses of a new table to check, in place: one map operation per endpoint
    /// and no list built on the side (at 100,000 addresses, building a fresh list and map was
    /// most of switchyard's CPU under a storm of table swaps). Each address gets the shortest
    /// interval of the entries that use it (an entry whose interval is zero does not ask for
    /// checks) and the settings of the first of them, in table order, that asks for more than
    /// a connect (else of the first). An address already scheduled keeps its due time (and a
    /// running check stays running); a new one is due `now`; one no longer listed is dropped
    /// (a check running for it ends unrecorded in the schedule).
    pub(super) fn retarget(
        &mut self,
        table: &RoutingTable,
        default_interval: Duration,
        now: Instant,
    ) {
        self.tables += 1;
        let this = self.tables;
        for entry in &table.entries {
            let interval = entry.check.interval.unwrap_or(default_interval);
            if interval.is_zero() {
                continue;
            }
            let asks = entry.check.path.is_some() || entry.check.grpc.is_some();
            for ep in &entry.endpoints {
                let fresh = |entry: &Arc<Entry>| Target {
                    addr: ep.addr,
                    interval,
                    entry: Arc::clone(entry),
                    state: ep.state.clone(),
                    others: Vec::new(),
                };
                match self.slots.entry(ep.addr) {
                    MapEntry::Vacant(v) => {
                        self.heap.push(Reverse((now, ep.addr)));
                        v.insert(Slot {
                            target: fresh(entry),
                            next: now,
                            running: false,
                            seen: this,
                        });
                    }
                    MapEntry::Occupied(mut o) => {
                        let slot = o.get_mut();
                        if slot.seen != this {
                            // First listed in this table: its settings start over.
                            slot.seen = this;
                            slot.target = fresh(entry);
                            continue;
                        }
                        let t = &mut slot.target;
                        if !t.states().any(|s| Arc::ptr_eq(&s.0, &ep.state.0)) {
                            t.others.push(ep.state.clone());
                        }
                        t.interval = t.interval.min(interval);
                        let set = t.entry.check.path.is_some() || t.entry.check.grpc.is_some();
                        if asks && !set {
                            t.entry = Arc::clone(entry);
                        }
                    }
                }
            }
        }
        self.slots.retain(|_, s| s.seen == this);
        self.compact();
    }

    /// The targets scheduled, in no particular order.
    #[cfg(test)]
    pub(super) fn targets(&self) -> impl Iterator<Item = &Target> {
        self.slots.values().map(|s| &s.target)
    }

    /// The next target due at `now` that is not being checked, marked running and rescheduled
    /// one interval from `now`; `None` when nothing is due.
    pub(super) fn take_due(&mut self, now: Instant) -> Option<Target> {
        while let Some(&Reverse((at, addr))) = self.heap.peek() {
            if at > now {
                return None;
            }
            self.heap.pop();
            let Some(slot) = self.slots.get_mut(&addr) else {
                continue;
            };
            if slot.running || slot.next != at {
                continue;
            }
            slot.running = true;
            slot.next = now + slot.target.interval;
            return Some(slot.target.clone());
        }
        None
    }

    /// A check of `addr` ended: it is due again at the time set when it started.
    pub(super) fn finished(&mut self, addr: SocketAddr) {
        if let Some(slot) = self.slots.get_mut(&addr)
            && slot.running
        {
            slot.running = false;
            self.heap.push(Reverse((slot.next, addr)));
        }
    }

    /// The earliest due time (possibly of a stale entry, which only wakes the caller early).
    pub(super) fn next_due(&self) -> Option<Instant> {
        self.heap.peek().map(|Reverse((at, _))| *at)
    }

    /// How many addresses are scheduled.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.slots.len()
    }

    /// Rebuilds the heap from the slots once stale entries outnumber live ones, so that it
    /// stays proportional to the targets however often tables change.
    fn compact(&mut self) {
        if self.heap.len() <= 2 * self.slots.len() + 64 {
            return;
        }
        self.heap = self
            .slots
            .iter()
            .filter(|(_, s)| !s.running)
            .map(|(addr, s)| Reverse((s.next, *addr)))
            .collect();
    }

    #[cfg(test)]
    fn heap_len(&self) -> usize {
        self.heap.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::Frontend;

    fn table(addrs: &[&str]) -> RoutingTable {
        RoutingTable {
            entries: vec![Arc::new(Entry::fixture("svc", Frontend::Http, addrs))],
            ..Default::default()
        }
    }

    fn due_now(s: &mut Schedule, now: Instant) -> Vec<String> {
        let mut got = Vec::new();
        while let Some(t) = s.take_due(now) {
            got.push(t.addr.to_string());
        }
        got.sort();
        got
    }

    #[test]
    fn each_target_is_due_once_per_interval_and_never_twice_at_once() {
        let t0 = Instant::now();
        let second = Duration::from_secs(1);
        let mut s = Schedule::default();
        s.retarget(&table(&["10.0.0.1:80", "10.0.0.2:80"]), second, t0);
        assert_eq!(due_now(&mut s, t0), ["10.0.0.1:80", "10.0.0.2:80"]);
        // Running: not due again, even past its interval.
        assert!(s.take_due(t0 + 3 * second).is_none());
        s.finished("10.0.0.1:80".parse().unwrap());
        assert_eq!(s.next_due(), Some(t0 + second));
        assert!(s.take_due(t0 + second / 2).is_none());
        assert_eq!(due_now(&mut s, t0 + second), ["10.0.0.1:80"]);
    }

    #[test]
    fn a_new_table_keeps_due_times_adds_new_addresses_and_drops_gone_ones() {
        let t0 = Instant::now();
        let second = Duration::from_secs(1);
        let mut s = Schedule::default();
        s.retarget(&table(&["10.0.0.1:80", "10.0.0.2:80"]), second, t0);
        due_now(&mut s, t0);
        s.finished("10.0.0.1:80".parse().unwrap());
        s.finished("10.0.0.2:80".parse().unwrap());
        let t1 = t0 + second / 2;
        s.retarget(&table(&["10.0.0.2:80", "10.0.0.3:80"]), second, t1);
        assert_eq!(s.len(), 2);
        // The new address at once; the kept one at its old due time; the gone one never.
        assert_eq!(due_now(&mut s, t1), ["10.0.0.3:80"]);
        assert_eq!(due_now(&mut s, t0 + second), ["10.0.0.2:80"]);
        assert!(s.take_due(t0 + 10 * second).is_none());
        // A check that was running for an address now gone ends without rescheduling it.
        s.finished("10.0.0.1:80".parse().unwrap());
        assert!(s.take_due(t0 + 10 * second).is_none());
    }

    #[test]
    fn the_heap_stays_proportional_to_the_targets_across_many_tables() {
        let t0 = Instant::now();
        let mut s = Schedule::default();
        for i in 0..1_000u32 {
            // Each table replaces one address by another.
            let a = format!("10.0.{}.{}:80", i / 250, i % 250);
            s.retarget(&table(&["10.1.0.1:80", &a]), Duration::from_secs(1), t0);
        }
        assert_eq!(s.len(), 2);
        assert!(s.heap_len() <= 2 * 2 + 64 + 1, "heap of {}", s.heap_len());
        assert_eq!(due_now(&mut s, t0), ["10.0.3.249:80", "10.1.0.1:80"]);
    }

    #[test]
    fn an_address_takes_its_settings_from_the_current_table_only() {
        let t0 = Instant::now();
        let asking = Entry {
            check: crate::table::CheckSpec {
                interval: Some(Duration::from_secs(1)),
                path: Some("/healthz".into()),
                grpc: None,
            },
            ..Entry::fixture("b", Frontend::Http, &["10.0.0.2:80"])
        };
        let both = RoutingTable {
            entries: vec![
                Arc::new(Entry::fixture("a", Frontend::Http, &["10.0.0.2:80"])),
                Arc::new(asking),
            ],
            ..Default::default()
        };
        let mut s = Schedule::default();
        s.retarget(&both, Duration::from_secs(5), t0);
        let t: Vec<_> = s.targets().collect();
        assert_eq!(t.len(), 1);
        assert_eq!(
            (t[0].interval, t[0].path()),
            (Duration::from_secs(1), Some("/healthz"))
        );
        // The entry that asked for an HTTP check is gone: a connect, at the default interval.
        s.retarget(&table(&["10.0.0.2:80"]), Duration::from_secs(5), t0);
        let t: Vec<_> = s.targets().collect();
        assert_eq!((t[0].interval, t[0].path()), (Duration::from_secs(5), None));
    }
}
