//! Gossip judgement decides the verdict on every message that arrives on the advert topic:
//! an advert goes to the directory and a departure notice to the departure rules, and the
//! outcome becomes `Accept` (relay it), `Ignore` (late or duplicate) or `Reject` (invalid:
//! penalise the sender). The driver relays only what is accepted. In a closed mesh, a peer
//! not yet admitted that sends junk or forgeries is refused at once.

use super::revoking::Via;
use super::{MeshNode, Output, Verdict};
use crate::directory::{Refusal, Source};
use crate::identity::NodeId;
use crate::signed::{DocKind, Envelope};
use crate::time::Millis;

impl MeshNode {
    /// Judges one gossip message and reports its verdict; `envelope` is `None` when the
    /// message did not decode.
    pub(super) fn on_gossip(
        &mut self,
        now: Millis,
        from: NodeId,
        token: u64,
        envelope: Option<Envelope>,
        len: usize,
    ) {
        self.stats.gossip_in_messages += 1;
        self.stats.gossip_in_bytes += len as u64;
        // In a closed mesh too, gossip is judged on its merits, whoever relays it: every
        // advert must carry its own node's certificate, so a peer not (yet) admitted cannot
        // bring in anything a certified relay could not. Ignoring its messages instead would
        // lose adverts: gossipsub remembers an ignored message as seen and drops the copies
        // certified peers send next (found by the simulator's closed-mesh scenario: an
        // uncertified peer relaying honest adverts kept them from a node for one refresh).
        let (verdict, forged) = match envelope {
            None => (Verdict::Reject, true),
            Some(envelope) => self.judge_gossip(now, from, token, envelope),
        };
        if forged && self.closed() && !self.peers.get(&from).is_some_and(|p| p.admitted) {
            // Not admitted, and sending junk or forgeries (a clock-independent fault; an
            // honest relay never forwards either): no need to wait for its sync request.
            self.refuse_peer(
                now,
                from,
                "sent a malformed or forged advert before showing a certificate",
                true,
            );
        }
        match verdict {
            Verdict::Accept => self.stats.gossip_accepted += 1,
            Verdict::Ignore => self.stats.gossip_ignored += 1,
            Verdict::Reject => self.stats.gossip_rejected += 1,
        }
        self.push(Output::Report { token, verdict });
    }

    /// The verdict on a gossiped advert, and whether it was malformed or forged.
    fn judge_gossip(&mut self, now: Millis, from: NodeId, token: u64, envelope: Envelope) -> (Verdict, bool) {
        if envelope.kind() == DocKind::Revocation {
            let verdict = self.on_revocation(now, envelope, Via::Peer(from), false);
            return (verdict, verdict == Verdict::Reject);
        }
        if envelope.kind() == DocKind::NodeDeparture {
            return match self.on_notice(now, &envelope, Source::Gossip { from, token }) {
                // Relayed also when it names a node we never held: others may hold it.
                Ok(true) | Err(Refusal::NotHeld) => (Verdict::Accept, false),
                Ok(false) => (Verdict::Ignore, false),
                Err(reason) if reason.is_misbehaviour() => {
                    (Verdict::Reject, matches!(reason, Refusal::Malformed(_) | Refusal::BadSignature))
                }
                Err(_) => (Verdict::Ignore, false),
            };
        }
        let node = NodeId::from_key(envelope.signer());
        let identical = self.directory.get(&node).is_some_and(|r| *r.envelope() == envelope);
        match self.directory.insert(now, envelope, Source::Gossip { from, token }) {
            Ok(_) => (Verdict::Accept, false),
            // Already accepted through anti-entropy: relaying helps peers that lack it.
            Err(Refusal::Duplicate { .. }) if identical => (Verdict::Accept, false),
            Err(reason) if reason.is_misbehaviour() => {
                (Verdict::Reject, matches!(reason, Refusal::Malformed(_) | Refusal::BadSignature))
            }
            Err(_) => (Verdict::Ignore, false),
        }
    }
}
