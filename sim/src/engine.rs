//! The event queue: events ordered by (time, insertion order).
//!
//! Time only moves forward and many events share a millisecond, so the queue is a map from
//! time to a FIFO of the events due then: pushing appends (insertion order is the tie
//! break), popping takes the front of the earliest time. Cheaper than a binary heap of
//! (time, sequence) pairs, which must sift wide entries through every level on each pop.

use std::collections::{BTreeMap, VecDeque};

/// Events due at given times, popped in (time, insertion) order.
#[derive(Debug)]
pub struct EventQueue<E> {
    buckets: BTreeMap<u64, VecDeque<E>>,
    len: usize,
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        Self { buckets: BTreeMap::new(), len: 0 }
    }
}

impl<E> EventQueue<E> {
    /// Queues `event` at time `at`, after every event already queued for that time.
    pub fn push(&mut self, at: u64, event: E) {
        self.buckets.entry(at).or_default().push_back(event);
        self.len += 1;
    }

    /// The earliest event, first queued first.
    pub fn pop(&mut self) -> Option<(u64, E)> {
        self.pop_until(u64::MAX)
    }

    /// The earliest event if it is due by `end`; later events stay queued.
    pub fn pop_until(&mut self, end: u64) -> Option<(u64, E)> {
        let mut entry = self.buckets.first_entry()?;
        let at = *entry.key();
        if at > end {
            return None;
        }
        let event = entry.get_mut().pop_front();
        if entry.get().is_empty() {
            entry.remove();
        }
        self.len -= 1;
        event.map(|e| (at, e))
    }

    /// Events queued.
    #[must_use]
    pub const fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is queued.
    #[must_use]
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pops_by_time_then_insertion_order() {
        let mut queue = EventQueue::default();
        queue.push(5, "b");
        queue.push(3, "a");
        queue.push(5, "c");
        queue.push(9, "d");
        queue.push(3, "a2");
        let order: Vec<_> = std::iter::from_fn(|| queue.pop()).collect();
        assert_eq!(order, [(3, "a"), (3, "a2"), (5, "b"), (5, "c"), (9, "d")]);
        assert!(queue.is_empty());
    }

    #[test]
    fn pop_until_leaves_later_events_queued() {
        let mut queue = EventQueue::default();
        queue.push(3, "a");
        queue.push(7, "b");
        assert_eq!(queue.pop_until(5), Some((3, "a")));
        assert_eq!(queue.pop_until(5), None);
        assert_eq!(queue.len(), 1);
        assert_eq!(queue.pop(), Some((7, "b")));
    }
}
