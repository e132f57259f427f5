//! Dialling decides whom this node connects to and when: its bootstrap peers at start and
//! then, while they stay away, with a doubling wait; the nodes it ranks first in its
//! directory while it is below its peer target (every node ranks them in an order of its
//! own, so dials spread over the mesh); and, one at a time, nodes a departure notice
//! dropped, so that the two sides of a healed partition find each other. No node is
//! dialled again within the dial backoff, and no held-off peer is dialled at all.

use std::collections::BTreeMap;

use super::{MeshNode, Output};
use crate::digest::Digest;
use crate::identity::{NodeId, SecretKey};
use crate::limits::{BOOTSTRAP_ADDRS_MAX, BOOTSTRAP_PEERS_MAX, DEPARTED_NODES_MAX, DIAL_BACKOFF_ENTRIES_MAX};
use crate::time::Millis;

/// How often, at most, the mesh looks for nodes to dial while below its peer target: often
/// enough to fill gaps within a second, rarely enough that scanning a large directory stays
/// a negligible cost.
pub const DIAL_CHECK_INTERVAL_MS: u64 = 1000;

/// A bootstrap peer that is not connected is dialled again after this long, then after
/// twice as long each time up to [`BOOTSTRAP_RETRY_MAX_MS`] (plus a little per-node
/// jitter): one that was down or unreachable when this node started is found once it is
/// up, whatever order the nodes started in.
pub const BOOTSTRAP_RETRY_MS: u64 = 5_000;
/// The longest wait between dials of a bootstrap peer that stays unreachable.
pub const BOOTSTRAP_RETRY_MAX_MS: u64 = 300_000;
/// A connection to a bootstrap peer that lasted this long resets its wait to
/// [`BOOTSTRAP_RETRY_MS`] (one that a peer keeps refusing, say for a missing certificate,
/// does not).
pub const BOOTSTRAP_STABLE_MS: u64 = 60_000;

/// A node dials one node that departed (a notice dropped its advert, see
/// [`MeshConfig::suspect_ms`](super::MeshConfig::suspect_ms)) this often, in an order of its own, for
/// [`RECONNECT_WINDOW_MS`] after the departure, at the addresses its last advert listed.
/// After a partition each side has declared the other departed and nothing else would dial
/// across once it heals unless a bootstrap peer happens to sit on the other side; with every
/// node trying one departed node per interval, the first connection across comes within a
/// fraction of a second in a large mesh, and it carries the notices to the nodes they name,
/// which refute them. A node that crashed for good costs each node one failed dial per
/// interval at most. (Serf's reconnect does the same, every 30 s for a day.)
pub const RECONNECT_INTERVAL_MS: u64 = 30_000;
/// How long after its departure a node is still dialled again.
pub const RECONNECT_WINDOW_MS: u64 = 24 * 60 * 60 * 1000;

impl MeshNode {
    /// Replaces the bootstrap peers (entries for one peer merged, within the limits); each
    /// is due for a dial at once.
    pub(super) fn set_bootstrap(&mut self, now: Millis, peers: Vec<(NodeId, Vec<String>)>) {
        let mut bootstrap: BTreeMap<NodeId, Bootstrap> = BTreeMap::new();
        for (peer, addrs) in peers {
            if peer == self.id || (bootstrap.len() >= BOOTSTRAP_PEERS_MAX && !bootstrap.contains_key(&peer)) {
                continue;
            }
            let entry = bootstrap.entry(peer).or_insert_with(|| Bootstrap {
                addrs: Vec::new(),
                next_at: now,
                wait_ms: BOOTSTRAP_RETRY_MS,
            });
            for addr in addrs {
                if entry.addrs.len() < BOOTSTRAP_ADDRS_MAX && !entry.addrs.contains(&addr) {
                    entry.addrs.push(addr);
                }
            }
        }
        self.bootstrap = bootstrap;
    }

    /// A connection to `peer`, open since `connected_at`, closed: if it is a bootstrap peer,
    /// its next dial waits, from the start again if the connection was stable (see
    /// [`BOOTSTRAP_STABLE_MS`]).
    pub(super) fn rearm_bootstrap(&mut self, now: Millis, peer: &NodeId, connected_at: Millis) {
        if let Some(entry) = self.bootstrap.get_mut(peer) {
            if now.since(connected_at) >= BOOTSTRAP_STABLE_MS {
                entry.wait_ms = BOOTSTRAP_RETRY_MS;
            }
            entry.next_at = now.plus(entry.wait_ms);
        }
    }

    /// If `peer` is a bootstrap peer, it may be dialled again at once.
    pub(super) fn retry_bootstrap_now(&mut self, now: Millis, peer: &NodeId) {
        if let Some(entry) = self.bootstrap.get_mut(peer) {
            entry.next_at = entry.next_at.min(now);
        }
    }

    /// Dials each bootstrap peer that is not connected and whose wait is over (at start,
    /// every one), and doubles its wait.
    pub(super) fn maybe_bootstrap(&mut self, now: Millis) {
        let mut dials = Vec::new();
        for (peer, entry) in &mut self.bootstrap {
            if self.peers.contains_key(peer) || now < entry.next_at {
                continue;
            }
            if let Some(until) = self.held.get(peer) {
                // We refused it: no dial until the hold ends (the driver would block it).
                entry.next_at = *until;
                continue;
            }
            if self.directory.revocations().node_revoked(peer).is_some() {
                // Revoked: it would be expelled on arrival; look again rarely (a newer
                // list may lift it).
                entry.next_at = now.plus(BOOTSTRAP_RETRY_MAX_MS);
                continue;
            }
            // Up to a quarter more, fixed per node and peer, so nodes restarted together do
            // not all dial at once.
            let jitter = dial_rank(self.dial_salt, peer) % (entry.wait_ms / 4 + 1);
            entry.next_at = now.plus(entry.wait_ms + jitter);
            entry.wait_ms = (entry.wait_ms * 2).min(BOOTSTRAP_RETRY_MAX_MS);
            dials.push((*peer, entry.addrs.clone()));
        }
        for (peer, addrs) in dials {
            self.push(Output::Dial { peer, addrs });
        }
    }

    /// Dials the nodes this node ranks first, as many as it lacks for its peer target.
    pub(super) fn maybe_dial(&mut self, now: Millis) {
        let mut deficit = self.config.peers_target.saturating_sub(self.peers.len());
        // Scanning the directory costs O(nodes): do it at most once per check interval.
        if deficit == 0 || now < self.next_dial_check {
            return;
        }
        self.next_dial_check = now.plus(DIAL_CHECK_INTERVAL_MS);
        // The candidates this node ranks first: every node ranks the directory in its own
        // order, so dials spread over the mesh. (In directory order every node dialled the
        // same few nodes, with the lowest ids, until their connection limits refused
        // newcomers; found by the simulator's churn scenario.)
        let mut candidates: Vec<(u64, &crate::directory::Record)> = self
            .directory
            .records(now)
            .filter(|record| {
                record.node() != self.id
                    && self.may_dial(now, &record.node())
                    && !record.advert().addrs.is_empty()
            })
            .map(|record| (dial_rank(self.dial_salt, &record.node()), record))
            .collect();
        deficit = deficit.min(candidates.len());
        if deficit < candidates.len() {
            candidates.select_nth_unstable_by_key(deficit, |(rank, record)| (*rank, record.node()));
            candidates.truncate(deficit);
        }
        candidates.sort_unstable_by_key(|(rank, record)| (*rank, record.node()));
        let dials: Vec<(NodeId, Vec<String>)> = candidates
            .into_iter()
            .map(|(_, record)| (record.node(), record.advert().addrs.clone()))
            .collect();
        for (peer, addrs) in dials {
            self.note_dialed(now, peer);
            self.push(Output::Dial { peer, addrs });
        }
    }

    /// Dials the next departed node, if one is due (see [`RECONNECT_INTERVAL_MS`]).
    pub(super) fn maybe_reconnect(&mut self, now: Millis) {
        if now < self.next_reconnect {
            return;
        }
        self.next_reconnect = now.plus(RECONNECT_INTERVAL_MS);
        self.departed.retain(|_, d| now < d.at.plus(RECONNECT_WINDOW_MS));
        // The dialable node ranked next after the last one, wrapping around.
        let ranked: Vec<(u64, NodeId)> = self
            .departed
            .keys()
            .filter(|node| self.may_dial(now, node))
            .map(|node| (dial_rank(self.dial_salt, node), *node))
            .collect();
        let after = ranked.iter().filter(|(rank, _)| *rank > self.reconnect_cursor).min();
        let Some(&(rank, node)) = after.or_else(|| ranked.iter().min()) else { return };
        self.reconnect_cursor = rank;
        if let Some(addrs) = self.departed.get(&node).map(|d| d.addrs.clone()) {
            self.note_dialed(now, node);
            self.push(Output::Dial { peer: node, addrs });
        }
    }

    /// Remembers a node a notice dropped, to dial it again now and then.
    pub(super) fn remember_departed(&mut self, now: Millis, node: NodeId, addrs: Vec<String>) {
        if node == self.id || addrs.is_empty() {
            return;
        }
        if self.departed.len() >= DEPARTED_NODES_MAX
            && !self.departed.contains_key(&node)
            && let Some(oldest) = self.departed.iter().min_by_key(|(id, d)| (d.at, **id)).map(|(id, _)| *id)
        {
            self.departed.remove(&oldest);
        }
        self.departed.insert(node, Departed { addrs, at: now });
    }

    /// Starts the dial backoff for `peer` (forgetting the oldest entry when full).
    pub(super) fn note_dialed(&mut self, now: Millis, peer: NodeId) {
        if self.dialed.len() >= DIAL_BACKOFF_ENTRIES_MAX
            && !self.dialed.contains_key(&peer)
            && let Some(oldest) = self.dialed.iter().min_by_key(|(_, at)| **at).map(|(id, _)| *id)
        {
            self.dialed.remove(&oldest);
        }
        self.dialed.insert(peer, now);
    }

    /// When dialling next has something due: the dial check while below the peer target,
    /// a bootstrap peer that is not connected, a departed node to dial again.
    pub(super) fn dial_timeout(&self) -> Option<Millis> {
        let check = (self.peers.len() < self.config.peers_target).then_some(self.next_dial_check);
        let bootstrap = self
            .bootstrap
            .iter()
            .filter(|(peer, _)| !self.peers.contains_key(peer))
            .map(|(_, entry)| entry.next_at)
            .min();
        let reconnect = (!self.departed.is_empty()).then_some(self.next_reconnect);
        [check, bootstrap, reconnect].into_iter().flatten().min()
    }

    /// Whether `node` may be dialled now: not connected, not held off, not revoked, and not
    /// dialled within the dial backoff.
    fn may_dial(&self, now: Millis, node: &NodeId) -> bool {
        !self.peers.contains_key(node)
            && !self.held.contains_key(node)
            && self.directory.revocations().node_revoked(node).is_none()
            && self.dialed.get(node).is_none_or(|at| now >= at.plus(self.config.dial_backoff_ms))
    }
}

/// A node a notice dropped: where its last advert said it listens, and when it departed.
#[derive(Clone, Debug)]
pub(super) struct Departed {
    addrs: Vec<String>,
    at: Millis,
}

/// A bootstrap peer: where to dial it, when next, and how long the wait after that is.
#[derive(Clone, Debug)]
pub(super) struct Bootstrap {
    addrs: Vec<String>,
    next_at: Millis,
    wait_ms: u64,
}

/// A secret of the node's own, derived from its key, that salts [`dial_rank`]: nobody else
/// can compute its order, so no one can grind keys to become a given node's first choices.
pub(super) fn dial_salt(key: &SecretKey) -> u64 {
    let mut input = b"murmur/dial-rank/1\0".to_vec();
    input.extend_from_slice(&key.to_seed());
    let digest = Digest::of(&input);
    u64::from_le_bytes([
        digest.0[0],
        digest.0[1],
        digest.0[2],
        digest.0[3],
        digest.0[4],
        digest.0[5],
        digest.0[6],
        digest.0[7],
    ])
}

/// Where a node with `salt` ranks `other` among the nodes it may dial (lowest first): each
/// node has its own order, so no node is everyone's first choice.
pub(super) fn dial_rank(salt: u64, other: &NodeId) -> u64 {
    let bytes = other.key().as_bytes();
    let word =
        u64::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7]]);
    // splitmix64's finaliser: every bit of the input moves every bit of the output.
    let mut z = salt ^ word;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}
