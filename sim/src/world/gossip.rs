//! The gossipsub model: publish floods to every connected peer, an accepted message is
//! relayed to the node's mesh, and each node's gossip layer drops messages it has seen.
//! Lazy gossip (`topology.lazy_gossip`, off by default), as gossipsub's: every heartbeat a
//! node sends IHAVE with the ids of the
//! messages it forwarded in the last [`HISTORY_GOSSIP`] heartbeats to [`GOSSIP_LAZY`]
//! random connected peers outside its mesh; a peer asks with IWANT for those it has not
//! seen, and gets each still in the sender's cache ([`HISTORY_LENGTH`] heartbeats). It is
//! what reaches a node whose mesh links keep being pruned by oversubscribed peers.

use std::sync::Arc;

use murmur_protocol::limits::GOSSIP_TRANSMIT_BYTES_MAX;
use murmur_protocol::mesh::Input;
use murmur_protocol::{Envelope, NodeId};

use super::driver::Delivery;
use super::{Event, Ix, PUBLISHED_HISTORY_MAX, Role, Sim};
use crate::scenario::ByzantineRole;

/// gossipsub's D_lazy: peers outside the mesh sent an IHAVE each heartbeat.
const GOSSIP_LAZY: usize = 6;
/// Heartbeats whose messages an IHAVE lists (gossipsub's `history_gossip`).
const HISTORY_GOSSIP: usize = 3;
/// Heartbeats a message stays in the cache for IWANT (gossipsub's `history_length`).
const HISTORY_LENGTH: usize = 5;
/// Ids one IHAVE lists at most (gossipsub's `max_ihave_length`).
const IHAVE_IDS_MAX: usize = 5000;
/// Bytes of a message id on the wire (ours are content hashes), and of an IHAVE's or
/// IWANT's framing.
const ID_BYTES: usize = 32;
const CONTROL_OVERHEAD_BYTES: usize = 16;

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
    fn has_seen(&self, node: Ix) -> bool {
        let (word, bit) = (node as usize / 64, node % 64);
        self.seen.get(word).is_some_and(|w| w & (1 << bit) != 0)
    }

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
        // (A node also gossips others' adverts on: those of departed nodes that came back.)
        let own = NodeId::from_key(envelope.signer()) == self.nodes[ix as usize].id;
        if let Some(advert) = own.then(|| envelope.peek::<murmur_protocol::Advert>().ok()).flatten() {
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
        self.remember(ix, msg);
        self.flood(ix, msg);
    }

    /// Node `ix` publishes a revocation list. gossipsub's message ids are content hashes
    /// (`murnode` derives them from the bytes), so a list that a second node publishes (one
    /// that learned it by anti-entropy) is the message already on its way: gossipsub refuses
    /// to publish a message the node has seen, and peers that saw it drop the copy.
    pub(super) fn publish_revocation(&mut self, ix: Ix, bytes: &[u8]) {
        let known = self.revocations.as_deref().and_then(|m| m.messages.get(bytes).copied());
        let msg = match known {
            Some(msg) => {
                if !self.messages[msg as usize].mark_seen(ix) {
                    return;
                }
                msg
            }
            None => {
                let Ok(envelope) = Envelope::decode(bytes) else {
                    self.violation(format!("node {ix} published bytes that do not decode as an envelope"));
                    return;
                };
                let msg = self.new_message(Some(envelope), None, bytes.len(), ix);
                if let Some(model) = self.revocations.as_deref_mut() {
                    model.messages.insert(bytes.to_vec(), msg);
                }
                msg
            }
        };
        self.remember(ix, msg);
        self.flood(ix, msg);
    }

    /// Puts `msg` in node `ix`'s message cache (it published or forwarded it).
    fn remember(&mut self, ix: Ix, msg: u32) {
        if !self.scenario.topology.lazy_gossip {
            return;
        }
        let cache = &mut self.nodes[ix as usize].mcache;
        match cache.front_mut() {
            Some(window) => window.push(msg),
            None => cache.push_front(vec![msg]),
        }
    }

    /// Lazy gossip at a heartbeat, then the cache's shift.
    pub(super) fn emit_gossip(&mut self, ix: Ix) {
        if !self.scenario.topology.lazy_gossip {
            return;
        }
        let node = &mut self.nodes[ix as usize];
        let ids: Vec<u32> =
            node.mcache.iter().take(HISTORY_GOSSIP).flatten().copied().take(IHAVE_IDS_MAX).collect();
        node.mcache.push_front(Vec::new());
        node.mcache.truncate(HISTORY_LENGTH);
        if ids.is_empty() {
            return;
        }
        let mut outside: Vec<Ix> =
            node.peers.iter().copied().filter(|p| !node.gossip_mesh.contains(p)).collect();
        node.gossip_rng.shuffle(&mut outside);
        outside.truncate(GOSSIP_LAZY);
        let size = CONTROL_OVERHEAD_BYTES + ID_BYTES * ids.len();
        let ids: Arc<[u32]> = ids.into();
        for peer in outside {
            self.metrics.gossip_ihave += 1;
            let epoch = self.nodes[peer as usize].epoch;
            self.send(ix, peer, size, Event::IHave { to: peer, from: ix, ids: ids.clone(), epoch });
        }
    }

    /// An IHAVE reached `to`: it asks `from` for the messages it has not seen.
    pub(super) fn receive_ihave(&mut self, to: Ix, from: Ix, ids: &[u32], epoch: u32) {
        if !self.is_current(to, epoch) {
            return;
        }
        let wanted: Vec<u32> = ids
            .iter()
            .copied()
            .filter(|m| self.messages.get(*m as usize).is_some_and(|m| !m.has_seen(to)))
            .collect();
        if wanted.is_empty() {
            return;
        }
        let size = CONTROL_OVERHEAD_BYTES + ID_BYTES * wanted.len();
        let epoch = self.nodes[from as usize].epoch;
        self.send(to, from, size, Event::IWant { to: from, from: to, ids: wanted.into(), epoch });
    }

    /// An IWANT reached `to`: it sends `from` each asked message still in its cache.
    pub(super) fn receive_iwant(&mut self, to: Ix, from: Ix, ids: &[u32], epoch: u32) {
        if !self.is_current(to, epoch) {
            return;
        }
        let cached: Vec<u32> = {
            let cache = &self.nodes[to as usize].mcache;
            ids.iter().copied().filter(|m| cache.iter().any(|w| w.contains(m))).collect()
        };
        let epoch = self.nodes[from as usize].epoch;
        for msg in cached {
            self.metrics.gossip_iwant += 1;
            let len = self.messages[msg as usize].len;
            self.send(to, from, len, Event::Gossip { to: from, from: to, msg, epoch });
        }
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
        self.remember(ix, delivery.msg);
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
        if message.len > GOSSIP_TRANSMIT_BYTES_MAX {
            // Over the transmit limit `murnode` gives gossipsub: dropped before the
            // application sees it.
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
