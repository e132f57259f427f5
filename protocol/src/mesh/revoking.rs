//! Revoking takes authorities' revocation lists in (from the operator, gossip or a sync
//! answer), spreads each new one, and expels the nodes it revokes: a connected revoked
//! peer is disconnected and held off, and its reconnections are closed as they arrive (see
//! [`crate::revocation`]).

use super::{Event, MeshNode, Output, Verdict};
use crate::identity::NodeId;
use crate::revocation::{RevocationRefusal, Taken};
use crate::signed::Envelope;
use crate::time::Millis;

/// Where a revocation list came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Via {
    /// This node's operator, or its own store at start.
    Local,
    /// Gossip or a sync answer from this peer.
    Peer(NodeId),
}

impl MeshNode {
    /// Hands the mesh a revocation list from this node's operator: taken if it is a valid,
    /// trusted list newer than the one held, then gossiped; the peers it revokes are
    /// expelled. A refusal changes nothing. (The same as [`super::Input::Revoke`], with the
    /// answer.)
    pub fn revoke(&mut self, now: Millis, envelope: Envelope) -> Result<Taken, RevocationRefusal> {
        let taken = self.take_revocation(now, envelope, Via::Local, true);
        self.drain_directory(now);
        taken
    }

    /// [`MeshNode::take_revocation`], as gossip's verdict: `Accept` when taken or identical
    /// to the list held, `Reject` when the list itself is bad, `Ignore` otherwise.
    pub(super) fn on_revocation(
        &mut self,
        now: Millis,
        envelope: Envelope,
        via: Via,
        relay: bool,
    ) -> Verdict {
        let identical = self.directory.revocations().envelopes().any(|held| *held == envelope);
        match self.take_revocation(now, envelope, via, relay) {
            Ok(_) => Verdict::Accept,
            Err(_) if identical => Verdict::Accept,
            Err(refusal) if refusal.is_invalid() => Verdict::Reject,
            Err(_) => Verdict::Ignore,
        }
    }

    /// Takes `envelope` if it is a new list of a trusted authority, gossips it when `relay`
    /// (a list that came by gossip is relayed by the verdict instead), and expels the peers
    /// it revokes.
    fn take_revocation(
        &mut self,
        now: Millis,
        envelope: Envelope,
        via: Via,
        relay: bool,
    ) -> Result<Taken, RevocationRefusal> {
        let authority = envelope.signer();
        let bytes = relay.then(|| envelope.clone());
        let identical = self.directory.revocations().envelopes().any(|held| *held == envelope);
        match self.directory.revoke(envelope) {
            Ok(taken) => {
                self.stats.revocations_taken += 1;
                if let Some(envelope) = bytes {
                    self.publish_revocation(&envelope);
                }
                for node in &taken.nodes {
                    if self.peers.contains_key(node)
                        && self.directory.revocations().node_revoked(node).is_some()
                    {
                        let reason = format!(
                            "revoked by authority {} (revocation list {})",
                            taken.authority, taken.seq
                        );
                        self.hold_off(now, *node, reason);
                    }
                }
                self.push(Output::Event(Event::Revoked {
                    authority: taken.authority,
                    seq: taken.seq,
                    nodes: taken.nodes.clone(),
                    grants: taken.grants,
                }));
                Ok(taken)
            }
            Err(refusal) => {
                self.stats.revocations_refused += 1;
                if !identical {
                    self.push(Output::Event(Event::RevocationRefused {
                        authority,
                        from: match via {
                            Via::Local => None,
                            Via::Peer(peer) => Some(peer),
                        },
                        reason: refusal.clone(),
                    }));
                }
                Err(refusal)
            }
        }
    }

    /// A connected peer that a list held here revokes is expelled; true when it was.
    pub(super) fn expel_if_revoked(&mut self, now: Millis, peer: NodeId) -> bool {
        let Some((authority, seq)) = self.directory.revocations().node_revoked(&peer) else { return false };
        self.hold_off(now, peer, format!("revoked by authority {authority} (revocation list {seq})"));
        true
    }

    /// Gossips a revocation list on [`super::REVOCATION_TOPIC`].
    pub(super) fn publish_revocation(&mut self, envelope: &Envelope) {
        let bytes = envelope.encode();
        self.stats.gossip_out_messages += 1;
        self.stats.gossip_out_bytes += bytes.len() as u64;
        self.push(Output::PublishRevocation { bytes });
    }
}
