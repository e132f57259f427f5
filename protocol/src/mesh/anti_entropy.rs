//! Anti-entropy decides what this node asks of its peers and what it answers them, so
//! that directories converge on what gossip missed: every new connection starts an
//! exchange and one peer in turn gets one on the sync interval; a large directory is
//! summarized first (bucket sums), and only the buckets that still differ are settled by
//! their digest; answers carry the adverts the asker lacks and the departure notices for
//! adverts it still holds. Adverts and notices learned this way that are news here are
//! gossiped on, and only one request is in flight at a time.

use std::collections::BTreeSet;

use super::revoking::Via;
use super::{MeshNode, Output, Peer};
use crate::digest::Digest;
use crate::directory::{DirectoryDigest, Source};
use crate::identity::NodeId;
use crate::limits::{
    ENVELOPE_OVERHEAD_MAX, SYNC_ADVERTS_MAX, SYNC_INLINE_ADVERTS_MAX, SYNC_NOTICES_MAX,
    SYNC_RESPONSE_BYTES_MAX, SYNC_SUMMARY_NODES_MIN,
};
use crate::signed::Envelope;
use crate::sync::{BucketSum, Buckets, Scope, SyncRequest, SyncResponse};
use crate::time::Millis;

/// Anti-entropy requests in flight at once. A node that connects to many peers at once (a
/// newcomer dialling its bootstrap list) would otherwise download the whole directory from
/// each of them in parallel; with one at a time, the next request carries the digest the
/// previous answer filled in, and its answer is nearly empty. Found by the simulator.
pub const SYNCS_IN_FLIGHT_MAX: usize = 1;

impl MeshNode {
    /// Sends `peer` a sync request, a summary when our directory is large and the digest
    /// otherwise; with another request in flight, the sync waits for the slot (see
    /// [`SYNCS_IN_FLIGHT_MAX`]).
    pub(super) fn start_sync(&mut self, peer: NodeId) {
        self.start_sync_with(peer, false);
    }

    /// As [`MeshNode::start_sync`]; `urgent` skips the wait for a free slot (one peer holds
    /// a revocation list this node lacks: worth one more exchange in flight, not the wait
    /// behind a request that may be lost).
    fn start_sync_with(&mut self, peer: NodeId, urgent: bool) {
        let in_flight = self.peers.values().filter(|p| p.syncing).count();
        let Some(state) = self.peers.get_mut(&peer) else { return };
        if state.syncing {
            return;
        }
        if in_flight >= SYNCS_IN_FLIGHT_MAX && !urgent {
            state.sync_wanted = true;
            return;
        }
        state.sync_wanted = false;
        state.syncing = true;
        self.stats.syncs_sent += 1;
        // A large directory is summarized first (see `crate::sync`); the salt differs per
        // exchange, so two directories that differ cannot collide twice in a row.
        let nodes = self.directory.len();
        let catching_up = std::mem::take(&mut state.catching_up);
        let (summary, request) = if nodes >= SYNC_SUMMARY_NODES_MIN && !catching_up {
            let salt = sync_salt(self.dial_salt, self.stats.syncs_sent);
            let buckets = Buckets::for_nodes(salt, nodes);
            self.stats.sync_summaries += 1;
            (
                Some(buckets),
                SyncRequest::summarized(self.local.cert.clone(), self.directory.summary(&buckets)),
            )
        } else {
            (None, SyncRequest::new(self.local.cert.clone(), self.directory.digest()))
        };
        if let Some(state) = self.peers.get_mut(&peer) {
            state.summary = summary;
        }
        let request = request.with_revocations(self.directory.revocations().seen());
        self.push(Output::SendSyncRequest { peer, request });
    }

    /// Starts the periodic sync with the next peer in turn, if it is due.
    pub(super) fn maybe_sync(&mut self, now: Millis) {
        if now >= self.next_sync {
            self.next_sync = now.plus(self.config.sync_interval_ms);
            if let Some(peer) = self.next_sync_peer() {
                self.start_sync(peer);
            }
        }
    }

    /// Starts the first waiting sync (peers in order), if a slot is free.
    pub(super) fn start_waiting_sync(&mut self) {
        if let Some(peer) = self.peers.iter().find(|(_, p)| p.sync_wanted).map(|(id, _)| *id) {
            self.start_sync(peer);
        }
    }

    /// Answers `from`'s sync request (in a closed mesh, only once its certificate admits
    /// it): a summary with the buckets that differ, a digest with what the peer lacks.
    pub(super) fn on_sync_request(&mut self, now: Millis, from: NodeId, token: u64, request: SyncRequest) {
        if !self.admits_requester(now, from, &request) {
            return;
        }
        // The requester holds a list we lack (we were down when it spread, or our own
        // request to someone else was lost): ask it, rather than wait for the next sync.
        if request.revocations.as_ref().is_some_and(|seen| self.directory.revocations().lacks(seen)) {
            match self.peers.get_mut(&from) {
                Some(state) if state.syncing => state.sync_wanted = true,
                Some(_) => self.start_sync_with(from, true),
                None => {}
            }
        }
        // Lists the requester lacks go first (at most 16 of 16 KiB); adverts get the rest.
        let revocations = request
            .revocations
            .as_ref()
            .map(|seen| self.directory.revocations().newer_than(seen))
            .unwrap_or_default();
        let budget = SYNC_RESPONSE_BYTES_MAX
            - revocations.iter().map(|e| e.body().len() + ENVELOPE_OVERHEAD_MAX).sum::<usize>();
        if let Some(summary) = &request.summary {
            self.stats.syncs_answered += 1;
            let response = if self.directory.len() < SYNC_SUMMARY_NODES_MIN {
                // We hold little (a newcomer): all of it is smaller than a second round trip
                // for the requester's digest. It judges each advert as usual.
                let (adverts, more) =
                    self.directory.missing_for(&DirectoryDigest::default(), SYNC_ADVERTS_MAX, budget);
                SyncResponse::new(adverts, more)
            } else {
                let buckets = summary.buckets();
                let differ = summary.differing(&self.directory.summary(&buckets));
                let scope = Scope::new(buckets, differ.iter().map(|b| b.0).collect());
                let inline = self.directory.adverts_in(&scope, SYNC_INLINE_ADVERTS_MAX).unwrap_or_default();
                SyncResponse::differing(differ, inline)
            };
            let response = response.with_revocations(revocations);
            self.push(Output::SendSyncResponse { token, response });
            return;
        }
        // Notices (with the adverts they ended, for a peer holding an older one) take at most
        // half the response; what they leave goes to adverts the peer lacks. (A scoped digest
        // lists only its buckets, so the notices are for those buckets alone.)
        let size = |envelope: &Envelope| envelope.body().len() + ENVELOPE_OVERHEAD_MAX;
        let (mut gone, mut adverts, mut bytes) = (Vec::new(), Vec::new(), 0);
        for (notice, advert) in self.directory.notices_for(&request.digest, SYNC_NOTICES_MAX) {
            let cost = size(&notice) + advert.as_ref().map_or(0, size);
            if bytes + cost > budget / 2 || adverts.len() == SYNC_ADVERTS_MAX / 2 {
                break;
            }
            bytes += cost;
            gone.push(notice);
            adverts.extend(advert);
        }
        let (missing, more) = self.directory.missing_in(
            &request.digest,
            request.scope.as_ref(),
            SYNC_ADVERTS_MAX - adverts.len(),
            budget - bytes,
        );
        adverts.extend(missing);
        self.stats.syncs_answered += 1;
        let response = SyncResponse::new(adverts, more).with_notices(gone).with_revocations(revocations);
        self.push(Output::SendSyncResponse { token, response });
    }

    /// Takes in `from`'s answer to our sync request and follows it up: the digest of the
    /// buckets a summary left differing, or the next request when the answer was cut short.
    pub(super) fn on_sync_response(&mut self, now: Millis, from: NodeId, response: SyncResponse) {
        let Some(peer) = self.peers.get_mut(&from) else { return };
        peer.syncing = false;
        let peer_admitted = peer.admitted;
        let summary = peer.summary.take();
        // Revocations first: a list may revoke a node whose advert comes in this answer.
        for list in response.revocations {
            // Relayed when new here: the gossip that brought it passed us by, and likely
            // our neighbours too.
            self.on_revocation(now, list, Via::Peer(from), true);
        }
        // Adverts that come with `differ` are all the responder holds in those buckets.
        let inline: Option<BTreeSet<NodeId>> = (response.differ.is_some() && !response.adverts.is_empty())
            .then(|| response.adverts.iter().map(|e| NodeId::from_key(e.signer())).collect());
        for envelope in response.adverts {
            // An update of a node we knew, or a node a notice dropped here coming back: gossip
            // missed it on its way to us (a partition, loss), so it likely missed the nodes
            // around us too, and anti-entropy alone would take it to them one sync interval
            // per hop. Gossip it on once accepted. (Adverts of nodes we did not know at all,
            // a newcomer's first sync, are not re-flooded.)
            let node = NodeId::from_key(envelope.signer());
            let news = self.directory.get(&node).is_some() || self.departed.contains_key(&node);
            let relay = news.then(|| envelope.clone());
            // Each advert is judged on its own; a peer relaying someone's forgery is not
            // proof the peer forged it, so refusals here only count.
            let accepted = self.directory.insert(now, envelope, Source::Sync { from }).is_ok();
            if let Some(envelope) = relay.filter(|_| accepted) {
                self.publish_envelope(&envelope);
            }
        }
        for notice in response.gone {
            // A notice news to us is news to our gossip neighbours too (they learned the
            // advert from the same side of a healed partition): relay it, so the whole
            // mesh, and the node it names, hears of it.
            if matches!(self.on_notice(now, &notice, Source::Sync { from }), Ok(true)) {
                self.publish_envelope(&notice);
            }
        }
        // A peer not admitted to a closed mesh gets one answer read, not an endless series.
        let may_continue = !self.closed() || peer_admitted;
        if let Some(differ) = response.differ {
            if self.follow_summary(from, summary, &differ, inline.as_ref(), may_continue) {
                return;
            }
        } else if response.more && may_continue {
            if let Some(peer) = self.peers.get_mut(&from) {
                peer.catching_up = true;
            }
            self.start_sync(from);
        }
        self.start_waiting_sync();
    }

    /// Our sync request to `peer` failed: its slot is free for the next waiting sync.
    pub(super) fn on_sync_failed(&mut self, peer: NodeId) {
        if let Some(state) = self.peers.get_mut(&peer) {
            state.syncing = false;
        }
        self.start_waiting_sync();
    }

    /// Follows up the answer to our summary, whose inline adverts are judged already: the
    /// buckets that still differ are settled by their digest, unless the inline adverts
    /// show the responder holds every node we hold there (then we are only ahead of it:
    /// nothing to learn, no notice to miss; its own syncs catch it up). An answer we did
    /// not ask for, or naming buckets we do not have, ends the exchange. True when the
    /// request for the digest went out.
    fn follow_summary(
        &mut self,
        from: NodeId,
        summary: Option<Buckets>,
        differ: &[BucketSum],
        inline: Option<&BTreeSet<NodeId>>,
        may_continue: bool,
    ) -> bool {
        let Some(buckets) =
            summary.filter(|buckets| differ.last().is_none_or(|last| last.0 < buckets.count()))
        else {
            return false;
        };
        let ahead_only = |bucket: u32| {
            inline.is_some_and(|theirs| {
                self.directory.nodes_in(&buckets, bucket).all(|node| theirs.contains(&node))
            })
        };
        let still: Vec<u32> = differ
            .iter()
            .filter(|b| self.directory.bucket_sum(&buckets, b.0) != b.1 && !ahead_only(b.0))
            .map(|b| b.0)
            .collect();
        if still.is_empty() {
            self.stats.sync_summaries_settled += 1;
        } else if may_continue && let Some(peer) = self.peers.get_mut(&from) {
            peer.syncing = true;
            self.stats.sync_summaries_scoped += 1;
            let scope = Scope::new(buckets, still);
            let digest = self.directory.digest_in(&scope);
            let request = SyncRequest::scoped(self.local.cert.clone(), scope, digest);
            self.push(Output::SendSyncRequest { peer: from, request });
            return true;
        }
        false
    }

    /// The connected, admitted peer after the cursor, wrapping around.
    fn next_sync_peer(&mut self) -> Option<NodeId> {
        let admitted = |p: &&Peer| p.admitted && !p.syncing && !p.sync_wanted;
        let after = self.sync_cursor.and_then(|cursor| {
            self.peers
                .range(cursor..)
                .filter(|(id, _)| **id != cursor)
                .find(|(_, p)| admitted(p))
                .map(|(id, _)| *id)
        });
        let next = after.or_else(|| self.peers.iter().find(|(_, p)| admitted(p)).map(|(id, _)| *id));
        self.sync_cursor = next;
        next
    }
}

/// The salt of our `n`th summary: one-way from our secret `dial_salt` (peers see the salt,
/// and must not learn the secret from it).
fn sync_salt(dial_salt: u64, n: u64) -> u64 {
    let mut input = b"murmur/sync-salt/1\0".to_vec();
    input.extend_from_slice(&dial_salt.to_le_bytes());
    input.extend_from_slice(&n.to_le_bytes());
    let digest = Digest::of(&input);
    u64::from_le_bytes(digest.0[..8].try_into().expect("8 bytes"))
}
