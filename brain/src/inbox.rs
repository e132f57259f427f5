//! One agent's inbox: bounded, one consumer (the agent's run), many producers (messages,
//! timers, lifecycle, streams). Lifecycle events have a small reserve of their own, so a
//! full inbox never hides a `shutdown` or a `reload` from the brain.

use std::collections::VecDeque;
use std::sync::Mutex;

use murmur_runtime::brain::EventEnvelope;
use tokio::sync::Notify;

/// Lifecycle events (`reload`, `shutdown`, reload-failure `error`) kept beside a full
/// inbox: a few at most arrive between two receives.
pub const LIFECYCLE_EVENTS_MAX: usize = 8;

/// The inbox is full.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the inbox is full ({0} events)")]
pub struct Full(pub usize);

/// Events waiting for the run.
#[derive(Debug)]
pub struct Inbox {
    capacity: usize,
    queues: Mutex<Queues>,
    ready: Notify,
}

#[derive(Debug, Default)]
struct Queues {
    lifecycle: VecDeque<EventEnvelope>,
    events: VecDeque<EventEnvelope>,
}

impl Inbox {
    /// An inbox of `capacity` events (lifecycle events aside).
    #[must_use]
    pub fn new(capacity: usize) -> Self {
        Self { capacity, queues: Mutex::default(), ready: Notify::new() }
    }

    fn queues(&self) -> std::sync::MutexGuard<'_, Queues> {
        self.queues.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Queues `event`, or refuses it when full.
    pub fn push(&self, event: EventEnvelope) -> Result<(), Full> {
        {
            let mut queues = self.queues();
            if queues.events.len() >= self.capacity {
                return Err(Full(self.capacity));
            }
            queues.events.push_back(event);
        }
        self.ready.notify_one();
        Ok(())
    }

    /// Queues `event`, or hands it back when full (for a producer that waits for room).
    pub fn offer(&self, event: EventEnvelope) -> Result<(), Box<EventEnvelope>> {
        {
            let mut queues = self.queues();
            if queues.events.len() >= self.capacity {
                return Err(Box::new(event));
            }
            queues.events.push_back(event);
        }
        self.ready.notify_one();
        Ok(())
    }

    /// Queues a lifecycle event ahead of the others; past the reserve, the oldest is
    /// dropped (a later `reload` or `shutdown` supersedes it).
    pub fn push_lifecycle(&self, event: EventEnvelope) {
        {
            let mut queues = self.queues();
            if queues.lifecycle.len() >= LIFECYCLE_EVENTS_MAX {
                queues.lifecycle.pop_front();
            }
            queues.lifecycle.push_back(event);
        }
        self.ready.notify_one();
    }

    /// The next event, lifecycle first.
    pub fn pop(&self) -> Option<EventEnvelope> {
        let mut queues = self.queues();
        queues.lifecycle.pop_front().or_else(|| queues.events.pop_front())
    }

    /// Waits for the next event (the one consumer's call).
    pub async fn next(&self) -> EventEnvelope {
        loop {
            if let Some(event) = self.pop() {
                return event;
            }
            // `notify_one` stores a permit when nobody waits: a push between the pop above
            // and this wait is not lost.
            self.ready.notified().await;
        }
    }

    /// Events waiting.
    #[must_use]
    pub fn depth(&self) -> usize {
        let queues = self.queues();
        queues.events.len() + queues.lifecycle.len()
    }

    /// Drops everything (a new run starts: the old run's handles mean nothing to it).
    pub fn clear(&self) {
        let mut queues = self.queues();
        queues.events.clear();
        queues.lifecycle.clear();
    }
}

#[cfg(test)]
mod tests {
    use murmur_runtime::brain::Event;

    use super::*;

    fn event(id: &str, event: Event) -> EventEnvelope {
        EventEnvelope { id: id.into(), event }
    }

    #[tokio::test]
    async fn lifecycle_events_pass_a_full_inbox_and_come_first() {
        let inbox = Inbox::new(2);
        inbox.push(event("a", Event::Message("1".into()))).unwrap();
        inbox.push(event("a", Event::Message("2".into()))).unwrap();
        assert_eq!(inbox.push(event("a", Event::Message("3".into()))), Err(Full(2)));
        inbox.push_lifecycle(event("l", Event::Shutdown));
        assert_eq!(inbox.depth(), 3);
        assert!(matches!(inbox.next().await.event, Event::Shutdown));
        assert!(matches!(inbox.next().await.event, Event::Message(text) if text == "1"));
        inbox.clear();
        assert!(inbox.pop().is_none());
    }

    #[tokio::test]
    async fn a_waiting_consumer_wakes_for_a_push() {
        let inbox = std::sync::Arc::new(Inbox::new(4));
        let waiter = tokio::spawn({
            let inbox = inbox.clone();
            async move { inbox.next().await }
        });
        tokio::task::yield_now().await;
        inbox.push(event("t", Event::Timer)).unwrap();
        let got = tokio::time::timeout(std::time::Duration::from_secs(5), waiter).await.unwrap().unwrap();
        assert_eq!(got.id, "t");
    }
}
