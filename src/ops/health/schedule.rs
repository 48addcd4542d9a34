//! When each health-check target is next due: a map by address and a min-heap of due times,
//! so that finding the checks to start costs what is due, not what is checked. At 100,000
//! endpoint addresses the checker used to probe a hash map for every address each time one
//! check ended, and to find the earliest due time by scanning them all.
//!
//! Pure bookkeeping: no clock (callers pass `now`), no I/O, no tokio. The heap may hold stale
//! entries (a target replaced, removed or rescheduled); they are skipped when they surface and
//! the heap is rebuilt when they outnumber the live ones.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::net::SocketAddr;
use std::time::Instant;

use super::Target;

/// One address's place in the schedule.
struct Slot {
    target: Target,
    /// When the next check is due (while `running`: when the one after the running one is).
    next: Instant,
    running: bool,
}

/// The targets of the current table and when each is next due.
#[derive(Default)]
pub(super) struct Schedule {
    slots: HashMap<SocketAddr, Slot, ahash::RandomState>,
    /// `(due, address)`, earliest first; an entry counts only while its slot is not running
    /// and is due at exactly that time.
    heap: BinaryHeap<Reverse<(Instant, SocketAddr)>>,
}

impl Schedule {
    /// Takes the targets of a new table. An address already scheduled keeps its due time (and a
    /// running check stays running); a new one is due `now`; one no longer listed is dropped
    /// (a check running for it ends unrecorded in the schedule).
    pub(super) fn replace(&mut self, targets: Vec<Target>, now: Instant) {
        let mut slots = HashMap::with_capacity_and_hasher(targets.len(), Default::default());
        for target in targets {
            let addr = target.addr;
            let slot = match self.slots.remove(&addr) {
                Some(old) => Slot { target, ..old },
                None => {
                    self.heap.push(Reverse((now, addr)));
                    Slot {
                        target,
                        next: now,
                        running: false,
                    }
                }
            };
            slots.insert(addr, slot);
        }
        self.slots = slots;
        self.compact();
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
    use crate::table::{Entry, Frontend, RoutingTable};
    use std::sync::Arc;
    use std::time::Duration;

    fn targets(addrs: &[&str], interval: Duration) -> Vec<Target> {
        let table = RoutingTable {
            entries: vec![Arc::new(Entry::fixture("svc", Frontend::Http, addrs))],
            ..Default::default()
        };
        super::super::targets(&table, interval)
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
        s.replace(targets(&["10.0.0.1:80", "10.0.0.2:80"], second), t0);
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
        s.replace(targets(&["10.0.0.1:80", "10.0.0.2:80"], second), t0);
        due_now(&mut s, t0);
        s.finished("10.0.0.1:80".parse().unwrap());
        s.finished("10.0.0.2:80".parse().unwrap());
        let t1 = t0 + second / 2;
        s.replace(targets(&["10.0.0.2:80", "10.0.0.3:80"], second), t1);
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
            s.replace(targets(&["10.1.0.1:80", &a], Duration::from_secs(1)), t0);
        }
        assert_eq!(s.len(), 2);
        assert!(s.heap_len() <= 2 * 2 + 64 + 1, "heap of {}", s.heap_len());
        assert_eq!(due_now(&mut s, t0), ["10.0.3.249:80", "10.1.0.1:80"]);
    }
}
