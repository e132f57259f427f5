//! Departures decide when a peer counts as departed and what a departure notice about this
//! node calls for. A peer whose last connection closes is suspected and dialled again; if
//! it is not back within [`MeshConfig::suspect_ms`](super::MeshConfig::suspect_ms) (plus a jitter of its own) and has
//! published nothing newer, this node signs a notice as its witness, applies it and
//! gossips it. A notice about this node, naming its current advert, is refuted by
//! republishing early (at most every [`REFUTE_INTERVAL_MS`]); any other notice goes to
//! the directory.

use super::dialling::dial_rank;
use super::{MeshNode, Output};
use crate::departure::Departure;
use crate::directory::{Refusal, Source};
use crate::identity::NodeId;
use crate::limits::MESH_PEERS_MAX;
use crate::signed::{Envelope, Signed};
use crate::time::Millis;

/// A node refutes departure notices about itself by republishing, at most this often: a
/// stream of false notices costs the mesh one advert a second, not one per notice.
pub const REFUTE_INTERVAL_MS: u64 = 1_000;

impl MeshNode {
    /// Handles a departure notice: one about this node is refuted (when it names our
    /// current advert and verifies), any other goes to the directory. Ok(true) when it
    /// dropped an advert.
    pub(super) fn on_notice(
        &mut self,
        now: Millis,
        envelope: &Envelope,
        source: Source,
    ) -> Result<bool, Refusal> {
        let about_us =
            self.directory.verifier().peek_notice(envelope).is_ok_and(|notice| notice.node == self.id);
        if !about_us {
            return self.directory.depart(now, envelope, source).map(|_| true);
        }
        let notice = self.directory.check_notice_about_self(now, envelope)?;
        // Only a notice naming the advert we hold now: an older one is answered already, and
        // a newer one names an advert we never signed (forged by its witness).
        if notice.seq == self.local.seq {
            let earliest = self.last_published.map_or(now, |at| at.plus(REFUTE_INTERVAL_MS)).max(now);
            if earliest < self.next_refresh {
                self.stats.refutations += 1;
                self.next_refresh = earliest;
            }
        }
        Ok(false)
    }

    /// A connected peer's connection closed: dial it again, and declare it departed if it is not
    /// back in time (see [`MeshConfig::suspect_ms`](super::MeshConfig::suspect_ms)).
    pub(super) fn suspect(&mut self, now: Millis, peer: NodeId, dialled_since_loss: bool) {
        if self.config.suspect_ms == 0
            || self.held.contains_key(&peer)
            || self.suspects.len() >= MESH_PEERS_MAX
        {
            return;
        }
        let Some(record) = self.directory.get(&peer) else { return };
        let (seq, addrs) = (record.advert().seq, record.advert().addrs.clone());
        // Up to half as long again, fixed per node and peer: the peers of a crashed node
        // all lose it at once, and the first to declare it spares the others their notices
        // (each would be one more message to every node).
        let jitter = dial_rank(self.dial_salt, &peer) % (self.config.suspect_ms / 2 + 1);
        // Within the dial backoff, a peer that keeps closing our connections (it holds us
        // off, or is full) is not redialled at the speed of a round trip: the dial waits for
        // the backoff to end, and the suspicion runs from that dial (a peer is declared departed
        // only after a dial that did not bring it back).
        let deadline = now.plus(self.config.suspect_ms + jitter);
        let backoff_ends = self.dialed.get(&peer).map(|at| at.plus(self.config.dial_backoff_ms));
        match backoff_ends.filter(|end| *end > now) {
            Some(_) if dialled_since_loss => {
                self.suspects.insert(peer, Suspect { seq, deadline, dialled: true });
            }
            Some(end) => {
                self.suspects.insert(peer, Suspect { seq, deadline: end, dialled: false });
            }
            None => {
                self.suspects.insert(peer, Suspect { seq, deadline, dialled: true });
                if !addrs.is_empty() {
                    self.note_dialed(now, peer);
                    self.push(Output::Dial { peer, addrs });
                }
            }
        }
    }

    /// Declares the suspects whose time is up departed: signs a departure notice, applies it,
    /// gossips it.
    pub(super) fn declare_departures(&mut self, now: Millis) {
        let due: Vec<(NodeId, Suspect)> =
            self.suspects.iter().filter(|(_, s)| s.deadline <= now).map(|(peer, s)| (*peer, *s)).collect();
        for (peer, Suspect { seq, dialled, .. }) in due {
            self.suspects.remove(&peer);
            let Some((held, advert)) =
                self.directory.get(&peer).map(|r| (r.advert().seq, *r.envelope().signature()))
            else {
                continue;
            };
            if self.peers.contains_key(&peer) {
                continue;
            }
            if held != seq || !dialled {
                // A newer advert came since: it may have left the peer just before it died
                // (in flight when the connection closed), so it is no proof of life. Or the
                // dial waited for the backoff. Suspect it afresh, dialling: a live peer comes
                // back.
                self.suspect(now, peer, dialled);
                continue;
            }
            let Ok(signed) = Signed::sign(Departure::new(peer, seq, advert, now), &self.key) else {
                continue;
            };
            let envelope = signed.into_envelope();
            if self.directory.depart(now, &envelope, Source::Local).is_ok() {
                self.stats.departures_declared += 1;
                self.publish_envelope(&envelope);
            }
        }
    }

    /// When the first suspect's time is up.
    pub(super) fn departure_timeout(&self) -> Option<Millis> {
        self.suspects.values().map(|s| s.deadline).min()
    }
}

/// A peer whose connection closed: the advert seq held then, when to act, and whether it
/// was dialled since (if not, the dial is what is due).
#[derive(Clone, Copy, Debug)]
pub(super) struct Suspect {
    seq: u64,
    deadline: Millis,
    dialled: bool,
}
