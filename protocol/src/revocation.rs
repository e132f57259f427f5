//! Revocation lists: an authority's signed statement that grants and node certificates it
//! issued no longer hold, before they expire.
//!
//! An authority keeps one list, cumulative: each new list (a higher `seq`) replaces the one
//! before it, so a node holds at most one list per authority it trusts, and a node that
//! missed several lists needs only the latest. A list names grants by their `serial` (the
//! authority's own serials: a list only ever revokes what its signer issued) and nodes by
//! id (a node named by any authority this node trusts is expelled from a closed mesh,
//! whatever certificate it shows). An authority may drop an entry once what it revoked has
//! expired anyway; that keeps lists within their bounds.
//!
//! Lists spread like adverts: gossip on [`crate::mesh::REVOCATION_TOPIC`] when published,
//! and anti-entropy ([`crate::sync::SyncRequest::revocations`]) for a node that was not
//! there. They are checked at both ends of every task (`task::check_outgoing`,
//! `task::check_incoming`) and at admission (the directory refuses, and drops, the adverts
//! of revoked nodes; the mesh disconnects them).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::codec::DecodeError;
use crate::identity::{NodeId, PublicKey};
use crate::limits::{
    REVOCATION_BYTES_MAX, REVOCATION_GRANTS_MAX, REVOCATION_NODES_MAX, REVOCATIONS_HELD_MAX,
};
use crate::plant::{Plant, Plants};
use crate::signed::{DocKind, Document, Envelope, Signed};
use crate::time::Millis;
use crate::trust::{TrustError, open_trusted_with};
use crate::verify::Verifier;

/// The revocation list version this build writes and reads.
pub const REVOCATION_VERSION: u16 = 1;

/// An authority's revocation list. The signer is the authority.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Revocation {
    // Fields are in canonical key order (see `codec`).
    /// Document version, [`REVOCATION_VERSION`].
    pub v: u16,
    /// When the authority signed it (informational: lists are ordered by `seq`).
    pub at: Millis,
    /// The list's number: a list replaces every list of its authority with a lower one.
    pub seq: u64,
    /// Nodes whose certificates are revoked, ascending.
    pub nodes: Vec<NodeId>,
    /// Serials of the authority's grants that are revoked, ascending.
    pub grants: Vec<u64>,
}

impl Revocation {
    /// List `seq` as of `at`, revoking `nodes` and `grants` (sorted and deduplicated here).
    #[must_use]
    pub fn new(seq: u64, at: Millis, mut nodes: Vec<NodeId>, mut grants: Vec<u64>) -> Self {
        nodes.sort_unstable();
        nodes.dedup();
        grants.sort_unstable();
        grants.dedup();
        Self { v: REVOCATION_VERSION, at, seq, nodes, grants }
    }
}

impl Document for Revocation {
    const KIND: DocKind = DocKind::Revocation;
    const VERSION: u16 = REVOCATION_VERSION;
    const BYTES_MAX: usize = REVOCATION_BYTES_MAX;

    fn version(&self) -> u16 {
        self.v
    }

    fn validate(&self) -> Result<(), DecodeError> {
        let invalid = |field, reason: String| DecodeError::Invalid { what: "revocation", field, reason };
        if self.seq == 0 {
            return Err(invalid("seq", "must be at least 1".into()));
        }
        if self.nodes.len() > REVOCATION_NODES_MAX {
            return Err(invalid(
                "nodes",
                format!("lists {} nodes, more than {REVOCATION_NODES_MAX}", self.nodes.len()),
            ));
        }
        if self.grants.len() > REVOCATION_GRANTS_MAX {
            return Err(invalid(
                "grants",
                format!("lists {} grants, more than {REVOCATION_GRANTS_MAX}", self.grants.len()),
            ));
        }
        if !self.nodes.windows(2).all(|w| w[0] < w[1]) {
            return Err(invalid("nodes", "must be ascending without repeats".into()));
        }
        if !self.grants.windows(2).all(|w| w[0] < w[1]) {
            return Err(invalid("grants", "must be ascending without repeats".into()));
        }
        Ok(())
    }
}

/// Why a revocation list was not taken.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RevocationRefusal {
    #[error("revocation list {0}")]
    Trust(#[from] TrustError),
    /// Not an error of the sender's: gossip and anti-entropy overlap.
    #[error("revocation list {seq} of {authority} is not newer than list {held}, held here")]
    NotNewer { authority: PublicKey, seq: u64, held: u64 },
    #[error("this node holds lists of {REVOCATIONS_HELD_MAX} authorities already")]
    Full,
}

impl RevocationRefusal {
    /// A stable machine-readable name for the failed check.
    #[must_use]
    pub const fn reason(&self) -> &'static str {
        match self {
            Self::Trust(err) => err.reason(),
            Self::NotNewer { .. } => "not_newer",
            Self::Full => "full",
        }
    }

    /// Whether the list itself is bad (penalise whoever sent it), rather than merely old.
    #[must_use]
    pub const fn is_invalid(&self) -> bool {
        matches!(self, Self::Trust(err) if !matches!(err, TrustError::UntrustedIssuer { .. }))
    }
}

/// A list taken: its authority and number, and the nodes it newly revokes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Taken {
    pub authority: PublicKey,
    pub seq: u64,
    pub at: Millis,
    /// Nodes this list revokes that the list it replaced did not.
    pub nodes: Vec<NodeId>,
    /// How many grants it revokes.
    pub grants: usize,
}

#[derive(Clone, Debug)]
struct Held {
    envelope: Envelope,
    seq: u64,
    at: Millis,
    nodes: BTreeSet<NodeId>,
    grants: BTreeSet<u64>,
}

/// The latest revocation list of each trusted authority, and the questions the checks ask.
#[derive(Clone, Debug, Default)]
pub struct Revocations {
    authorities: Vec<PublicKey>,
    lists: BTreeMap<PublicKey, Held>,
    plants: Plants,
}

/// One authority's list, for listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListSummary {
    pub authority: PublicKey,
    pub seq: u64,
    pub at: Millis,
    pub nodes: Vec<NodeId>,
    pub grants: Vec<u64>,
}

impl Revocations {
    /// Lists are taken from `authorities` only.
    #[must_use]
    pub fn new(authorities: Vec<PublicKey>, plants: Plants) -> Self {
        Self { authorities, lists: BTreeMap::new(), plants }
    }

    /// Takes `envelope` if it is a valid list from a trusted authority, newer than the one
    /// held. A refusal changes nothing.
    pub fn insert(
        &mut self,
        envelope: Envelope,
        verifier: &dyn Verifier,
    ) -> Result<Taken, RevocationRefusal> {
        let authority = envelope.signer();
        // Cheap refusals first: an old list is dropped before its signature is checked.
        if self.authorities.contains(&authority)
            && let Some(held) = self.lists.get(&authority)
            && let Ok(seq) = envelope.peek::<Revocation>().map(|list| list.seq)
            && seq <= held.seq
        {
            return Err(RevocationRefusal::NotNewer { authority, seq, held: held.seq });
        }
        let signed: Signed<Revocation> = open_trusted_with(envelope.clone(), &self.authorities, verifier)?;
        let list = signed.doc();
        if let Some(held) = self.lists.get(&authority)
            && list.seq <= held.seq
        {
            return Err(RevocationRefusal::NotNewer { authority, seq: list.seq, held: held.seq });
        }
        if !self.lists.contains_key(&authority) && self.lists.len() >= REVOCATIONS_HELD_MAX {
            return Err(RevocationRefusal::Full);
        }
        let before = self.lists.get(&authority).map(|h| h.nodes.clone()).unwrap_or_default();
        let held = Held {
            envelope,
            seq: list.seq,
            at: list.at,
            nodes: list.nodes.iter().copied().collect(),
            grants: list.grants.iter().copied().collect(),
        };
        let taken = Taken {
            authority,
            seq: list.seq,
            at: list.at,
            nodes: held.nodes.difference(&before).copied().collect(),
            grants: held.grants.len(),
        };
        self.lists.insert(authority, held);
        Ok(taken)
    }

    /// The number of the list of `issuer` that revokes its grant `serial`, if one does.
    #[must_use]
    pub fn grant_revoked(&self, issuer: &PublicKey, serial: u64) -> Option<u64> {
        if self.plants.has(Plant::IgnoreRevocations) {
            return None;
        }
        self.lists.get(issuer).filter(|held| held.grants.contains(&serial)).map(|held| held.seq)
    }

    /// The authority (and its list number) that revoked `node`, if any did.
    #[must_use]
    pub fn node_revoked(&self, node: &NodeId) -> Option<(PublicKey, u64)> {
        if self.plants.has(Plant::IgnoreRevocations) {
            return None;
        }
        self.lists.iter().find(|(_, held)| held.nodes.contains(node)).map(|(key, held)| (*key, held.seq))
    }

    /// What this node holds: (authority, list number) of each list, for a sync request.
    #[must_use]
    pub fn seen(&self) -> Vec<(PublicKey, u64)> {
        self.lists.iter().map(|(key, held)| (*key, held.seq)).collect()
    }

    /// The lists newer than what a peer said it holds (`seen`, at most
    /// [`REVOCATIONS_HELD_MAX`] entries are read).
    #[must_use]
    pub fn newer_than(&self, seen: &[(PublicKey, u64)]) -> Vec<Envelope> {
        let seen: BTreeMap<PublicKey, u64> = seen.iter().take(REVOCATIONS_HELD_MAX).copied().collect();
        self.lists
            .iter()
            .filter(|(key, held)| seen.get(*key).is_none_or(|seq| *seq < held.seq))
            .map(|(_, held)| held.envelope.clone())
            .collect()
    }

    /// Whether a peer that holds `seen` holds a newer list of an authority this node trusts
    /// (then it is worth asking it: see the mesh's anti-entropy).
    #[must_use]
    pub fn lacks(&self, seen: &[(PublicKey, u64)]) -> bool {
        seen.iter().take(REVOCATIONS_HELD_MAX).any(|(authority, seq)| {
            self.authorities.contains(authority)
                && self.lists.get(authority).is_none_or(|held| held.seq < *seq)
        })
    }

    /// Every list held, as signed (for storing them).
    pub fn envelopes(&self) -> impl Iterator<Item = &Envelope> {
        self.lists.values().map(|held| &held.envelope)
    }

    /// Every list held, by authority.
    #[must_use]
    pub fn lists(&self) -> Vec<ListSummary> {
        self.lists
            .iter()
            .map(|(key, held)| ListSummary {
                authority: *key,
                seq: held.seq,
                at: held.at,
                nodes: held.nodes.iter().copied().collect(),
                grants: held.grants.iter().copied().collect(),
            })
            .collect()
    }

    /// How many lists are held (one per authority at most).
    #[must_use]
    pub fn len(&self) -> usize {
        self.lists.len()
    }

    /// Whether any list is held.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.lists.is_empty()
    }
}

#[cfg(test)]
mod tests;
