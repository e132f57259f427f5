//! Publishing decides when this node signs and gossips its own advert: at once when what it
//! hosts, where it listens, what it serves or its certificate changes; shortly after its
//! first peer connects, so gossip carries the advert to the whole mesh; on the refresh
//! interval; and early when a departure notice about it must be refuted. Every envelope the
//! node gossips (its adverts, notices it signs or relays, adverts anti-entropy brought)
//! goes out through here, so the outgoing gossip counters stay in one place.

use super::{Advertised, Event, MeshNode, Output};
use crate::NodeId;
use crate::directory::{Refusal, Source};
use crate::signed::{Envelope, Signed};
use crate::time::Millis;

/// After its first peer connects, a node republishes its advert this much later. An advert
/// published with no peers reaches the mesh only through anti-entropy with direct peers,
/// which do not re-gossip it; republishing once gossip can carry it tells every node within
/// a second instead of at the next refresh. The delay lets gossipsub exchange subscriptions
/// first (publishing before that fails with no subscribed peers), and lets the mesh around
/// a node that starts with many others form: nodes that connected meanwhile and synced with
/// peers that did not hold the advert yet learn it from this republication. Found by the
/// simulator.
///
/// With [`MeshConfig::announce_early`](super::MeshConfig::announce_early) the node also
/// republishes the moment a peer's subscription arrives. That one second is what sets the
/// convergence p99 of new nodes' adverts in `steady-10k` (a node joins every second): early
/// announcement brings it from 1.6 s to 0.3 s, for one more flood per node start (8.7 to
/// 13.0 messages per node per second there). Early announcement alone, without the later
/// republication, leaves a cold start (`models`) with a node missing ten adverts until its
/// next anti-entropy round.
pub const ANNOUNCE_DELAY_MS: u64 = 1000;

impl MeshNode {
    /// Publishes our advert if its refresh (or an earlier republication) is due.
    pub(super) fn maybe_publish(&mut self, now: Millis) {
        if now >= self.next_refresh {
            self.publish(now);
        }
    }

    /// The first peer connected: republish once gossip can carry the advert, and (announcing
    /// early) when a subscription arrives (see [`ANNOUNCE_DELAY_MS`]).
    pub(super) fn announce_soon(&mut self, now: Millis) {
        let at = now.plus(ANNOUNCE_DELAY_MS);
        self.next_refresh = self.next_refresh.min(at);
        if self.config.announce_early {
            self.announce_at = Some(at);
            self.announce_early = true;
        }
    }

    /// A peer subscribed to the advert topic: the early announcement goes out now, if it
    /// is still to come.
    pub(super) fn on_subscribed(&mut self, now: Millis, peer: NodeId) {
        if self.announce_early && self.peers.contains_key(&peer) {
            self.announce_early = false;
            self.next_refresh = self.next_refresh.min(now);
        }
    }

    /// Changes what we advertise; the change goes out at once.
    pub(super) fn update_local(&mut self, now: Millis, change: impl FnOnce(&mut Advertised)) {
        change(&mut self.local);
        // Republish at once: what we host changed.
        self.next_refresh = now;
    }

    /// Gossips `envelope` on the advert topic.
    pub(super) fn publish_envelope(&mut self, envelope: &Envelope) {
        let bytes = envelope.encode();
        self.stats.gossip_out_messages += 1;
        self.stats.gossip_out_bytes += bytes.len() as u64;
        self.push(Output::Publish { bytes });
    }

    /// Signs our next advert, stores it in our own directory and gossips it.
    fn publish(&mut self, now: Millis) {
        self.next_refresh = now.plus(self.config.refresh_ms);
        match self.announce_at {
            Some(at) if at > now => self.next_refresh = self.next_refresh.min(at),
            _ => self.announce_at = None,
        }
        let advert = self.local.next(now, self.config.ttl_ms);
        let seq = advert.seq;
        match Signed::sign(advert, &self.key) {
            Ok(signed) => {
                self.local.seq = seq;
                self.last_published = Some(now);
                let envelope = signed.into_envelope();
                let _ = self.directory.insert(now, envelope.clone(), Source::Local);
                self.publish_envelope(&envelope);
                self.push(Output::Event(Event::Published { seq }));
            }
            Err(err) => {
                // Our own inputs were out of bounds (too many capsules, a bad name): keep the
                // last good advert; the driver validated its inputs, so this is a bug there.
                self.push(Output::Event(Event::AdvertRefused {
                    node: self.id,
                    source: Source::Local,
                    reason: Refusal::Malformed(err.to_string()),
                }));
            }
        }
    }
}
