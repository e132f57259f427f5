//! A run's timers as a sans-IO set: the caller passes `now` in; nothing reads a clock.
//!
//! ```
//! use murmur_brain::timers::Timers;
//! let mut timers = Timers::default();
//! timers.add(1_000, "a".into()).unwrap();
//! timers.add(500, "b".into()).unwrap();
//! assert_eq!(timers.poll_timeout(), Some(500));
//! assert_eq!(timers.expire(700), ["b"]);
//! assert!(timers.cancel("a"));
//! assert_eq!(timers.expire(2_000), Vec::<String>::new());
//! ```

use std::collections::BTreeMap;

/// Timers one run may have pending: each is a map entry and, when it fires, an inbox event.
pub const TIMERS_MAX: usize = 1024;

/// Too many timers pending.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{TIMERS_MAX} timers are already pending; cancel one first")]
pub struct TooManyTimers;

/// Pending timers by due time (ms since the epoch) and by id.
#[derive(Debug, Default)]
pub struct Timers {
    /// (due, sequence) → id: the sequence keeps timers due at one instant in the order
    /// they were set.
    due: BTreeMap<(u64, u64), String>,
    by_id: BTreeMap<String, (u64, u64)>,
    seq: u64,
}

impl Timers {
    /// A timer `id` due at `due_ms`.
    pub fn add(&mut self, due_ms: u64, id: String) -> Result<(), TooManyTimers> {
        if self.by_id.len() >= TIMERS_MAX {
            return Err(TooManyTimers);
        }
        self.seq += 1;
        let key = (due_ms, self.seq);
        self.due.insert(key, id.clone());
        self.by_id.insert(id, key);
        Ok(())
    }

    /// Cancels timer `id`; true when it was pending.
    pub fn cancel(&mut self, id: &str) -> bool {
        match self.by_id.remove(id) {
            Some(key) => self.due.remove(&key).is_some(),
            None => false,
        }
    }

    /// When the next timer is due.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<u64> {
        self.due.keys().next().map(|(due, _)| *due)
    }

    /// The timers due at `now` (in due order), removed.
    pub fn expire(&mut self, now_ms: u64) -> Vec<String> {
        let mut fired = Vec::new();
        while let Some(entry) = self.due.first_entry() {
            if entry.key().0 > now_ms {
                break;
            }
            let id = entry.remove();
            self.by_id.remove(&id);
            fired.push(id);
        }
        fired
    }

    /// Drops every timer (the run ended).
    pub fn clear(&mut self) {
        self.due.clear();
        self.by_id.clear();
    }

    /// Timers pending.
    #[must_use]
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Whether none is pending.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timers_fire_in_due_order_once_and_cancelled_ones_never() {
        let mut timers = Timers::default();
        timers.add(300, "late".into()).unwrap();
        timers.add(100, "first".into()).unwrap();
        timers.add(100, "second".into()).unwrap();
        timers.add(200, "cancelled".into()).unwrap();
        assert!(timers.cancel("cancelled"));
        assert!(!timers.cancel("cancelled"), "a cancelled timer is no longer pending");
        assert_eq!(timers.poll_timeout(), Some(100));
        assert!(timers.expire(99).is_empty());
        assert_eq!(timers.expire(250), ["first", "second"]);
        assert_eq!(timers.len(), 1);
        assert_eq!(timers.expire(10_000), ["late"]);
        assert!(timers.is_empty() && timers.poll_timeout().is_none());
    }

    #[test]
    fn the_set_is_bounded_and_clears_with_its_run() {
        let mut timers = Timers::default();
        for i in 0..TIMERS_MAX {
            timers.add(i as u64, format!("t{i}")).unwrap();
        }
        assert_eq!(timers.add(0, "one-more".into()), Err(TooManyTimers));
        timers.clear();
        assert!(timers.is_empty());
        timers.add(1, "again".into()).unwrap();
    }
}
