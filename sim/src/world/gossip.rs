//! The gossipsub model: publish floods to every connected peer, an accepted message is
//! relayed to the node's mesh, and each node's gossip layer drops messages it has seen.

use std::sync::Arc;

use murmur_protocol::Envelope;
use murmur_protocol::mesh::Input;

use super::{Delivery, Event, GOSSIP_BYTES_MAX, Ix, PUBLISHED_HISTORY_MAX, Role, Sim};
use crate::scenario::ByzantineRole;

/// A gossip message: decoded once, delivered to many.
#[derive(Debug)]
pub(super) struct Message {
    /// None for malformed bytes.
    pub(super) envelope: Option<Envelope>,
    pub(super) raw: Option<Arc<[u8]>>,
    pub(super) len: usize,
    /// Nodes whose gossip layer has seen this message.
    pub(super) seen: Vec<u64>,
}

impl Message {
    fn mark_seen(&mut self, node: Ix) -> bool {
        let (word, bit) = (node as usize / 64, node % 64);
        if self.seen.len() <= word {
            self.seen.resize(word + 1, 0);
        }
        let fresh = self.seen[word] & (1 << bit) == 0;
        self.seen[word] |= 1 << bit;
        fresh
    }
}

impl Sim {
    pub(super) fn publish(&mut self, ix: Ix, bytes: &[u8]) {
        let Ok(envelope) = Envelope::decode(bytes) else {
            self.violation(format!("node {ix} published bytes that do not decode as an envelope"));
            return;
        };
        // Every node's own advert is genuine: byzantine nodes sign their own honestly too.
        if let Ok(advert) = envelope.peek::<murmur_protocol::Advert>() {
            self.oracle.published(
                ix,
                advert.seq,
                envelope.clone(),
                advert.issued_at,
                advert.ttl_ms,
                self.now,
            );
            let history = &mut self.nodes[ix as usize].published;
            if history.len() >= PUBLISHED_HISTORY_MAX {
                history.pop_front();
            }
            history.push_back((self.now, advert.seq));
        }
        let msg = self.new_message(Some(envelope), None, bytes.len(), ix);
        self.flood(ix, msg);
    }
    pub(super) fn new_message(
        &mut self,
        envelope: Option<Envelope>,
        raw: Option<Arc<[u8]>>,
        len: usize,
        origin: Ix,
    ) -> u32 {
        let mut message = Message { envelope, raw, len, seen: Vec::new() };
        message.mark_seen(origin);
        self.messages.push(message);
        (self.messages.len() - 1) as u32
    }
    /// gossipsub publishes to every connected subscriber (flood publish).
    pub(super) fn flood(&mut self, ix: Ix, msg: u32) {
        let peers: Vec<Ix> = self.nodes[ix as usize].peers.iter().copied().collect();
        let len = self.messages[msg as usize].len;
        for peer in peers {
            let epoch = self.nodes[peer as usize].epoch;
            self.send(ix, peer, len, Event::Gossip { to: peer, from: ix, msg, epoch });
        }
    }
    /// After an `Accept`, relay to the gossip mesh (not back to where it came from).
    pub(super) fn forward(&mut self, ix: Ix, delivery: Delivery) {
        let mesh_peers = self.nodes[ix as usize].gossip_mesh.clone();
        let len = self.messages[delivery.msg as usize].len;
        for peer in mesh_peers {
            if peer != delivery.from {
                let epoch = self.nodes[peer as usize].epoch;
                self.send(ix, peer, len, Event::Gossip { to: peer, from: ix, msg: delivery.msg, epoch });
            }
        }
    }
    pub(super) fn deliver_gossip(&mut self, to: Ix, from: Ix, msg: u32, epoch: u32) {
        if !self.is_current(to, epoch) {
            return;
        }
        let message = &mut self.messages[msg as usize];
        if message.len > GOSSIP_BYTES_MAX {
            self.metrics.oversized_dropped += 1;
            return;
        }
        if !message.mark_seen(to) {
            self.metrics.gossip_duplicates += 1;
            return;
        }
        let from_id = self.nodes[from as usize].id;
        let input = match (&message.envelope, &message.raw) {
            (Some(envelope), _) => Input::GossipDecoded {
                from: from_id,
                token: u64::from(msg),
                envelope: envelope.clone(),
                len: message.len,
            },
            (None, Some(raw)) => {
                Input::GossipReceived { from: from_id, token: u64::from(msg), bytes: raw.to_vec() }
            }
            (None, None) => return,
        };
        if let Role::Byzantine { role: ByzantineRole::Replayer, .. } = self.nodes[to as usize].role
            && let Some(envelope) = &self.messages[msg as usize].envelope
        {
            let captured = &mut self.nodes[to as usize].captured;
            if captured.len() >= 256 {
                captured.pop_front();
            }
            captured.push_back(envelope.clone());
        }
        self.handle(to, input, Some(Delivery { msg, from }));
    }
}
