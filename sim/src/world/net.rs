//! The network model: latency per region pair with jitter, loss, duplication, uplink
//! bandwidth, partitions (symmetric or one-way), the TCP backoff a partition leaves on the
//! connections it cut, and slow nodes.
//!
//! Each directed link draws from its own random stream, so traffic on one link never
//! shifts the draws of another; task traffic has streams of its own (`tasklink/A/B`), so
//! adding tasks to a scenario leaves the draws of its gossip and sync traffic as they were;
//! artifact traffic likewise draws from `artlink/A/B`.

use super::{Event, Ix, Sim};
use crate::rng::SimRng;

/// An active partition: messages from a node in `side_a` to one outside it (and, unless
/// one-way, back) are dropped.
#[derive(Debug)]
pub(super) struct Partition {
    pub fault: usize,
    pub side_a: Vec<bool>,
    pub one_way: bool,
}

/// Linux's floor for a TCP retransmission timeout (`TCP_RTO_MIN`).
const TCP_RTO_MIN_MS: u64 = 200;
/// Linux's ceiling for a backed-off retransmission timeout (`TCP_RTO_MAX`).
const TCP_RTO_MAX_MS: u64 = 120_000;

/// TCP on a connection that a partition cut but that stayed open (its pings had not yet
/// lapsed). What the sender wrote after the cut goes unacknowledged, and its retransmission
/// timer backs off, doubling from one timeout (RTT + 200 ms); after the heal nothing
/// crosses until the next retransmission fires, and everything written meanwhile waits
/// behind it. The lab with real processes shows this: without it, the simulator healed
/// a 6 s partition up to 2.6 s sooner than the real mesh did.
#[derive(Clone, Copy, Debug)]
pub(super) enum Stall {
    /// The first message on the connection a partition blocked was sent at this time.
    Since(u64),
    /// Healed: the retransmission that gets through fires at this time.
    Until(u64),
}

/// When the first retransmission at or after `now` fires, for a first loss at `since` and
/// a timeout of `rto` ms doubling after every try.
fn next_retransmission(since: u64, now: u64, rto: u64) -> u64 {
    let (mut at, mut step) = (since + rto, rto);
    while at < now {
        step = (step * 2).min(TCP_RTO_MAX_MS);
        at += step;
    }
    at
}

impl Sim {
    /// Whether a message from `a` to `b` is blocked by a partition now.
    pub(super) fn partitioned(&self, a: Ix, b: Ix) -> bool {
        self.partition_blocking(a, b).is_some()
    }

    fn partition_blocking(&self, a: Ix, b: Ix) -> Option<usize> {
        self.partitions.iter().position(|p| {
            let in_a = |x: Ix| p.side_a.get(x as usize).copied().unwrap_or(false);
            let (a_side, b_side) = (in_a(a), in_a(b));
            if a_side == b_side {
                return false;
            }
            // One-way: side A cannot reach the rest, while the rest still reaches A.
            !p.one_way || a_side
        })
    }

    /// One-way base latency between two nodes' regions.
    pub(super) fn base_latency(&self, a: Ix, b: Ix) -> u64 {
        let (ra, rb) = (self.nodes[a as usize].region, self.nodes[b as usize].region);
        self.scenario.network.latency_ms[ra][rb]
    }

    /// Sends `size` bytes from `a` to `b`; `event` is what arrives. Applies partitions,
    /// loss, uplink bandwidth, latency, jitter, slowness and duplication.
    pub(super) fn send(&mut self, a: Ix, b: Ix, size: usize, event: Event) {
        self.send_via(a, b, size, event, Channel::Mesh);
    }

    /// [`Sim::send`] drawing from `channel`'s streams for the link.
    pub(super) fn send_via(&mut self, a: Ix, b: Ix, size: usize, event: Event, channel: Channel) {
        self.metrics.messages_sent += 1;
        self.metrics.bytes_sent += size as u64;
        if let Some(p) = self.partition_blocking(a, b) {
            let fault = self.partitions[p].fault;
            self.effects[fault].effects += 1;
            if self.nodes[a as usize].peers.contains(&b) {
                self.stalls.entry((a, b)).or_insert(Stall::Since(self.now));
            }
            return;
        }
        let resume = self.resumes_at(a, b);
        let net = &self.scenario.network;
        let (loss, dup, jitter) = (net.loss, net.duplicate, net.jitter_ms);
        let bandwidth_kbps = net.bandwidth_kbps;
        let (extra_loss, extra_fault) = self.extra_loss;
        let base = self.base_latency(a, b);
        let seed = self.options.seed;
        let own = match channel {
            Channel::Task => self.tasks.as_deref_mut().map(|w| (&mut w.links, "tasklink")),
            Channel::Artifact => self.artifacts.as_deref_mut().map(|w| (&mut w.links, "artlink")),
            Channel::Mesh => None,
        };
        let (links, label) = own.unwrap_or((&mut self.links, "link"));
        let link = links.entry((a, b)).or_insert_with(|| SimRng::stream(seed, &format!("{label}/{a}/{b}")));
        if link.chance(loss) {
            self.metrics.lost += 1;
            return;
        }
        if extra_loss > 0.0 && link.chance(extra_loss) {
            self.metrics.lost += 1;
            if let Some(fault) = extra_fault {
                self.effects[fault].effects += 1;
            }
            return;
        }
        let first_jitter = link.between(0, jitter);
        let duplicate = link.chance(dup).then(|| link.between(0, jitter));
        let sender = &mut self.nodes[a as usize];
        let mut depart = (self.now + sender.slow_extra_ms).max(resume.unwrap_or(0));
        if bandwidth_kbps > 0 {
            // Bytes leave one after another on the sender's uplink.
            let tx_ms = (size as u64 * 8).div_ceil(bandwidth_kbps);
            depart = depart.max(sender.uplink_free_at) + tx_ms;
            sender.uplink_free_at = depart;
        }
        let receiver_extra = self.nodes[b as usize].slow_extra_ms;
        let arrive = depart + base + receiver_extra;
        if let Some(extra) = duplicate
            && let Some(copy) = event.duplicate()
        {
            self.metrics.duplicated += 1;
            self.schedule(arrive + extra, copy);
        }
        self.schedule(arrive + first_jitter, event);
    }
}

impl Sim {
    /// When a message from `a` to `b` may leave, if the connection is still backing off from
    /// a partition that has healed: the time its next retransmission fires.
    fn resumes_at(&mut self, a: Ix, b: Ix) -> Option<u64> {
        let stall = *self.stalls.get(&(a, b))?;
        let until = match stall {
            Stall::Since(since) => {
                let rto = TCP_RTO_MIN_MS + 2 * self.base_latency(a, b);
                let until = next_retransmission(since, self.now, rto);
                self.stalls.insert((a, b), Stall::Until(until));
                until
            }
            Stall::Until(until) => until,
        };
        if self.now >= until {
            self.stalls.remove(&(a, b));
            return None;
        }
        Some(until)
    }

    /// A connection that closes or opens carries no backoff.
    pub(super) fn forget_stalls(&mut self, a: Ix, b: Ix) {
        if !self.stalls.is_empty() {
            self.stalls.remove(&(a, b));
            self.stalls.remove(&(b, a));
        }
    }
}

/// Whose random streams a message draws from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Channel {
    /// Gossip and anti-entropy.
    Mesh,
    /// `/murmur/task/1`.
    Task,
    /// `/murmur/artifact/1`.
    Artifact,
}

impl Event {
    /// A second copy of a message in flight (network duplication), for gossip only: gossip
    /// can reach a node twice, but request-response (anti-entropy, tasks, artifacts) runs
    /// on libp2p streams over TCP or QUIC, which deliver what was written once. (Task
    /// requests were duplicated here once: a copy that found the owner's queue freed after
    /// the original was refused as overloaded was accepted there while the router, told
    /// "overloaded", placed the task elsewhere, and the task ran twice — the model's own
    /// artifact, found by a 100-seed sweep of `task-storm`.)
    pub(super) fn duplicate(&self) -> Option<Self> {
        Some(match self {
            Self::Gossip { to, from, msg, epoch } => {
                Self::Gossip { to: *to, from: *from, msg: *msg, epoch: *epoch }
            }
            Self::IHave { to, from, ids, epoch } => {
                Self::IHave { to: *to, from: *from, ids: ids.clone(), epoch: *epoch }
            }
            Self::IWant { to, from, ids, epoch } => {
                Self::IWant { to: *to, from: *from, ids: ids.clone(), epoch: *epoch }
            }
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::next_retransmission;

    #[test]
    fn a_retransmission_timer_doubles_until_the_link_heals() {
        // RTO 250 ms from a loss at 0: tries at 250, 750, 1,750, 3,750, 7,750 ms.
        assert_eq!(next_retransmission(0, 0, 250), 250);
        assert_eq!(next_retransmission(0, 251, 250), 750);
        assert_eq!(next_retransmission(0, 6_000, 250), 7_750);
        // The timeout stops doubling at two minutes.
        let late = next_retransmission(0, 1_000_000, 250);
        assert!(late >= 1_000_000 && late - 1_000_000 <= 120_000, "{late}");
    }
}
