//! A small set of things made on first use and kept for the next users (`Kept`): the rustls
//! configurations that Gateway listeners need besides the TLS port's own (one per CA bundle,
//! one per certificate set). Looked up without a lock (`arc-swap`); a miss makes the value
//! once more at worst (two racing handshakes) and keeps the first stored. Bounded: past
//! `MAX_KEPT` the oldest is dropped (bundles and certificates rotated away). It must not know
//! what it keeps.

use std::sync::Arc;

use arc_swap::ArcSwap;

/// Kept values past which the oldest are dropped.
const MAX_KEPT: usize = 64;

/// Values made on first use, found again by their key.
pub(super) struct Kept<T> {
    made: ArcSwap<Vec<Arc<T>>>,
}

impl<T> Default for Kept<T> {
    fn default() -> Self {
        Kept {
            made: ArcSwap::from_pointee(Vec::new()),
        }
    }
}

impl<T> Kept<T> {
    /// The kept value `is` picks, else the one `make` makes, kept.
    pub(super) fn get_or_make(&self, is: impl Fn(&T) -> bool, make: impl FnOnce() -> T) -> Arc<T> {
        if let Some(found) = self.made.load().iter().find(|m| is(m)) {
            return Arc::clone(found);
        }
        let made = Arc::new(make());
        let mut kept = Arc::clone(&made);
        self.made.rcu(|list| {
            let mut next: Vec<Arc<T>> = list.iter().cloned().collect();
            match next.iter().find(|m| is(m)) {
                Some(first) => kept = Arc::clone(first),
                None => {
                    if next.len() >= MAX_KEPT {
                        next.remove(0);
                    }
                    next.push(Arc::clone(&made));
                }
            }
            next
        });
        kept
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.made.load().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_is_made_once_and_the_oldest_go_past_the_bound() {
        let kept: Kept<u32> = Kept::default();
        let made = std::cell::Cell::new(0);
        let get = |n: u32| {
            *kept.get_or_make(
                |v| *v == n,
                || {
                    made.set(made.get() + 1);
                    n
                },
            )
        };
        assert_eq!(get(7), 7);
        assert_eq!(get(7), 7);
        assert_eq!(made.get(), 1);
        for n in 0..100 {
            get(1000 + n);
        }
        assert_eq!(kept.len(), MAX_KEPT);
        // 7 was the oldest: made again.
        get(7);
        assert_eq!(made.get(), 102);
    }
}
