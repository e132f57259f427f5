//! Admission decides who may stay connected to a closed mesh. A peer shows its node
//! certificate in its sync requests: a valid one admits it, and a missing or invalid one,
//! or junk and forgeries gossiped before it was admitted, gets it refused and held off
//! for [`REFUSED_HOLD_MS`] (the driver blocks it both ways). A peer that has shown nothing
//! within [`MeshConfig::admission_timeout_ms`](super::MeshConfig::admission_timeout_ms)
//! is disconnected but not held off. An open mesh admits every peer.

use super::{MeshNode, Output};
use crate::cert::verify_cert_with;
use crate::directory::Admission;
use crate::identity::NodeId;
use crate::limits::REFUSED_PEERS_MAX;
use crate::sync::SyncRequest;
use crate::time::Millis;

/// A peer refused admission to a closed mesh is held off this long: the driver blocks its
/// connections ([`Output::Block`]) and the mesh closes any that still arrive. Without the
/// hold, whatever dials it again (its bootstrap retries, either side's Kademlia) would bring
/// it back as a connected peer until its next refused sync. A node that has since been
/// certified gets in once the hold ends.
pub const REFUSED_HOLD_MS: u64 = 60_000;

impl MeshNode {
    /// Whether this mesh is closed (admission by certificate).
    pub(super) fn closed(&self) -> bool {
        matches!(self.config.directory.admission, Admission::Closed { .. })
    }

    /// Closes a new connection from a peer that is still held off; true when it did.
    pub(super) fn turned_away(&mut self, now: Millis, peer: NodeId) -> bool {
        let Some(until) = self.held.get(&peer).filter(|until| **until > now) else { return false };
        let wait = until.since(now);
        self.push(Output::Disconnect {
            peer,
            reason: format!("held off for {wait} ms more (refused admission, or cut off)"),
        });
        true
    }

    /// Whether `from`'s sync request may be answered: in a closed mesh, the certificate it
    /// carries admits the peer, or the peer is refused and held off.
    pub(super) fn admits_requester(&mut self, now: Millis, from: NodeId, request: &SyncRequest) -> bool {
        let Admission::Closed { authorities } = &self.config.directory.admission else { return true };
        let admitted =
            request.cert.clone().ok_or_else(|| "presented no node certificate".to_owned()).and_then(|cert| {
                verify_cert_with(cert, authorities, now, &from, self.directory.verifier())
                    .map_err(|e| e.to_string())
            });
        let admitted = admitted.and_then(|cert| match self.directory.revocations().node_revoked(&from) {
            Some((authority, seq)) => {
                Err(format!("revoked by authority {authority} (revocation list {seq})"))
            }
            None => Ok(cert),
        });
        match admitted {
            Ok(_) => {
                if let Some(peer) = self.peers.get_mut(&from) {
                    peer.admitted = true;
                }
                true
            }
            Err(reason) => {
                self.refuse_peer(now, from, &reason, true);
                false
            }
        }
    }

    /// Disconnects the peers that showed no certificate in time.
    pub(super) fn enforce_admission(&mut self, now: Millis) {
        let timeout = self.config.admission_timeout_ms;
        let late: Vec<NodeId> = self
            .peers
            .iter()
            .filter(|(_, p)| !p.admitted && now >= p.connected_at.plus(timeout))
            .map(|(id, _)| *id)
            .collect();
        for peer in late {
            // Not held off: its certificate may be stuck behind our own queued sync
            // requests (one at a time), so it may reconnect at once.
            self.refuse_peer(now, peer, &format!("no certificate within {timeout} ms"), false);
        }
    }

    /// Refuses `peer` admission: disconnects it and, when `hold`, holds it off for
    /// [`REFUSED_HOLD_MS`].
    pub(super) fn refuse_peer(&mut self, now: Millis, peer: NodeId, reason: &str, hold: bool) {
        self.stats.peers_refused += 1;
        let reason = format!("not admitted to this closed mesh: {reason}");
        if hold {
            self.hold_off(now, peer, reason);
        } else {
            self.peers.remove(&peer);
            self.push(Output::Disconnect { peer, reason });
            self.start_waiting_sync();
        }
    }

    /// Disconnects `peer` and holds it off for [`REFUSED_HOLD_MS`] (the driver blocks it
    /// both ways; a connection that still arrives is closed).
    pub(super) fn hold_off(&mut self, now: Millis, peer: NodeId, reason: String) {
        self.peers.remove(&peer);
        if !self.held.contains_key(&peer) && self.held.len() >= REFUSED_PEERS_MAX {
            // Full: the hold that ends first ends now.
            if let Some(first) = self.held.iter().min_by_key(|(id, until)| (**until, **id)).map(|(id, _)| *id)
            {
                self.unhold(now, first);
            }
        }
        self.held.insert(peer, now.plus(REFUSED_HOLD_MS));
        self.push(Output::Block { peer, reason });
        self.start_waiting_sync();
    }

    /// Ends the holds that are over.
    pub(super) fn release_held(&mut self, now: Millis) {
        let over: Vec<NodeId> =
            self.held.iter().filter(|(_, until)| **until <= now).map(|(id, _)| *id).collect();
        for peer in over {
            self.unhold(now, peer);
        }
    }

    /// When admission next has something due: a peer's time to show a certificate, or
    /// the end of a hold.
    pub(super) fn admission_timeout(&self) -> Option<Millis> {
        let deadline = if self.closed() {
            self.peers
                .values()
                .filter(|p| !p.admitted)
                .map(|p| p.connected_at.plus(self.config.admission_timeout_ms))
                .min()
        } else {
            None
        };
        deadline.into_iter().chain(self.held.values().copied()).min()
    }

    /// Ends `peer`'s hold; a bootstrap peer may be dialled again at once (its hold may have
    /// ended early, when the map was full).
    fn unhold(&mut self, now: Millis, peer: NodeId) {
        self.held.remove(&peer);
        self.retry_bootstrap_now(now, &peer);
        self.push(Output::Unblock { peer });
    }
}
