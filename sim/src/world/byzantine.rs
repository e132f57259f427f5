//! Byzantine nodes: each runs an honest mesh node for its own identity (so it is connected
//! and trusted as a relay, and a known witness) and, every interval, misbehaves as its role
//! says. The
//! unauthorized sender's tasks are in `unauthorized`.

use std::sync::Arc;

use murmur_protocol::advert::HostedCapsule;
use murmur_protocol::departure::Departure;
use murmur_protocol::limits::{ADVERT_TTL_MS_MAX, GOSSIP_TRANSMIT_BYTES_MAX};
use murmur_protocol::{Advert, Envelope, SecretKey, Signature, Signed};

use super::{Event, Ix, Role, Sim};
use crate::scenario::{ByzantineRole, Fault};

impl Sim {
    pub(super) fn misbehave(&mut self, ix: Ix) {
        let Role::Byzantine { role, fault } = self.nodes[ix as usize].role else { return };
        let Fault::Byzantine { until_s, interval_ms, .. } = self.scenario.faults[fault] else { return };
        if !self.nodes[ix as usize].alive() || self.now >= until_s * 1000 {
            return;
        }
        let sent = match role {
            ByzantineRole::Forger => self.forge(ix),
            ByzantineRole::Replayer => self.replay(ix),
            ByzantineRole::Flooder => self.flood_junk(ix),
            ByzantineRole::Liar => self.lie(ix),
            ByzantineRole::Sybil => self.mint_sybil(ix),
            ByzantineRole::UnauthorizedSender => self.send_unauthorized(ix),
            // It acts when asked for chunks (`pulls`), not on a timer.
            ByzantineRole::CorruptProvider => return,
            // Its effect is each refusal an honest node makes (counted where it happens).
            ByzantineRole::Uncertified => {
                self.dial_uncertified(ix);
                false
            }
        };
        if sent {
            self.effects[fault].effects += 1;
            self.metrics.byzantine_messages += 1;
        }
        self.schedule(self.now + interval_ms, Event::Misbehave { node: ix });
    }

    /// Gossips an advert that claims a random honest node's identity, with a signature made
    /// by the forger's own key.
    fn forge(&mut self, ix: Ix) -> bool {
        let Some(victim) = self.pick_honest(ix, |_| true) else { return false };
        let now = self.clock(ix);
        let mut advert = Advert::new(now.0.saturating_add(1_000_000_000), now, self.mesh_config.ttl_ms);
        advert.capsules =
            vec![HostedCapsule { name: format!("forged-{ix}"), digest: None, version: "6.6.6".into() }];
        let Ok(signed) = Signed::sign(advert, &self.nodes[ix as usize].key) else { return false };
        let Some(forged) =
            with_signer(signed.envelope(), self.nodes[victim as usize].key.public().as_bytes())
        else {
            return false;
        };
        let len = forged.encode().len();
        let msg = self.new_message(Some(forged), None, len, ix);
        self.flood(ix, msg);
        true
    }

    /// Gossips a false departure notice about a random live honest node: naming the advert
    /// the liar holds for it (which the victim must refute), or, with a made-up advert
    /// signature, a sequence number the victim has not reached or may reach soon (which must
    /// change nothing, ever).
    fn lie(&mut self, ix: Ix) -> bool {
        let Some(victim) = self.pick_honest(ix, |_| true) else { return false };
        let victim_id = self.nodes[victim as usize].id;
        let held = self.nodes[ix as usize]
            .mesh
            .as_ref()
            .and_then(|mesh| mesh.directory().get(&victim_id))
            .map(|record| (record.advert().seq, *record.envelope().signature()));
        let Some((held, signature)) = held else { return false };
        let ahead = self.mesh_config.refresh_ms.max(2);
        let (seq, advert) = match self.nodes[ix as usize].rng.below(3) {
            0 => (held, signature),
            1 => (u64::MAX, Signature([7; 64])),
            _ => (held + self.nodes[ix as usize].rng.between(1, ahead), Signature([7; 64])),
        };
        let now = self.clock(ix);
        let notice = Departure::new(victim_id, seq, advert, now);
        let Ok(signed) = Signed::sign(notice, &self.nodes[ix as usize].key) else { return false };
        let envelope = signed.into_envelope();
        let len = envelope.encode().len();
        let msg = self.new_message(Some(envelope), None, len, ix);
        self.flood(ix, msg);
        true
    }

    /// Mints a fresh identity and gossips its only advert: the longest TTL, never
    /// refreshed, an address in a random range of 172.16.0.0/12 (so no range bound stops
    /// it; the directories' freshness order must).
    fn mint_sybil(&mut self, ix: Ix) -> bool {
        let rng = &mut self.nodes[ix as usize].rng;
        let key = SecretKey::from_seed(rng.bytes32());
        let (b, c, d) = (16 + rng.below(16), rng.below(256), 1 + rng.below(254));
        let mut advert = Advert::new(1, self.clock(ix), ADVERT_TTL_MS_MAX);
        advert.addrs = vec![format!("/ip4/172.{b}.{c}.{d}/tcp/7421")];
        let Ok(signed) = Signed::sign(advert, &key) else { return false };
        self.sybils.insert(key.node_id(), ix);
        let envelope = signed.into_envelope();
        let len = envelope.encode().len();
        let msg = self.new_message(Some(envelope), None, len, ix);
        self.flood(ix, msg);
        true
    }

    /// Dials a random live honest node it is not connected to (honest nodes must refuse it:
    /// it has no certificate for this closed mesh).
    fn dial_uncertified(&mut self, ix: Ix) {
        let connected = self.nodes[ix as usize].peers.clone();
        if let Some(target) = self.pick_honest(ix, |v| !connected.contains(&v)) {
            self.dial(ix, target);
        }
    }

    /// A random live honest node other than `ix` that passes `also`, drawn from `ix`'s
    /// random stream.
    fn pick_honest(&mut self, ix: Ix, also: impl Fn(Ix) -> bool) -> Option<Ix> {
        let candidates: Vec<Ix> = (0..self.nodes.len() as Ix)
            .filter(|&v| {
                let n = &self.nodes[v as usize];
                v != ix && n.alive() && n.role == Role::Honest && also(v)
            })
            .collect();
        if candidates.is_empty() {
            return None;
        }
        Some(candidates[self.nodes[ix as usize].rng.below(candidates.len() as u64) as usize])
    }

    /// Gossips an advert captured earlier (as a new message: the duplicate cache has
    /// forgotten it, or the replayer re-wrapped it).
    fn replay(&mut self, ix: Ix) -> bool {
        let node = &mut self.nodes[ix as usize];
        if node.captured.is_empty() {
            return false;
        }
        // The oldest half: the ones most likely superseded or expired.
        let pick = node.rng.below(node.captured.len().div_ceil(2) as u64) as usize;
        let envelope = node.captured[pick].clone();
        let len = envelope.encode().len();
        let msg = self.new_message(Some(envelope), None, len, ix);
        self.flood(ix, msg);
        true
    }

    /// Gossips an oversized message and a malformed one.
    fn flood_junk(&mut self, ix: Ix) -> bool {
        let oversized =
            self.new_message(None, Some(Arc::from(vec![0u8; 16])), GOSSIP_TRANSMIT_BYTES_MAX + 1024, ix);
        self.flood(ix, oversized);
        let junk: Vec<u8> = (0..200).map(|_| self.nodes[ix as usize].rng.below(256) as u8).collect();
        let malformed = self.new_message(None, Some(Arc::from(junk)), 200, ix);
        self.flood(ix, malformed);
        true
    }
}

/// The same envelope with its `signer` field replaced: a forgery whose signature cannot
/// verify for the claimed signer.
pub(super) fn with_signer(envelope: &Envelope, signer: &[u8; 32]) -> Option<Envelope> {
    let mut value: ciborium::Value = ciborium::de::from_reader(envelope.encode().as_slice()).ok()?;
    for (key, field) in value.as_map_mut()? {
        if key.as_text() == Some("signer") {
            *field = ciborium::Value::Bytes(signer.to_vec());
        }
    }
    Envelope::decode(&murmur_protocol::codec::encode(&value)).ok()
}
