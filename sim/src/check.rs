//! The oracles: ground truth about what honest nodes published, and the checks that
//! compare every node's state against it.
//!
//! Safety, checked as events happen: an advert a directory accepts must be one its node
//! really published (byte for byte), fresh by the observer's clock, and newer than any
//! advert of that node the observer accepted before; a "who hosts NAME" answer may only
//! name nodes whose genuine, unexpired advert lists NAME; every bounded structure stays
//! within its bound. Liveness, after faults stop: within the scenario's bound every live
//! node holds an advert of every live node and of no node dead longer than an advert lives.
//!
//! Tasks have their own oracle, [`TaskOracle`]: grants, at-most-once execution, no lost
//! acceptances, and every accepted task finishing once faults stop. Artifacts have
//! [`ArtifactOracle`]: no corrupted chunk or blob stored, pulls within their bounds.
//! Revocations have [`RevocationOracle`]: what an authority revoked is shut out everywhere
//! within `check.revocation_bound_s`. Models have [`ModelOracle`]: requests served when a
//! node could serve them, only where the model is served, without failover after
//! acceptance, and spread over equally good nodes.

mod artifacts;
mod models;
mod revocations;
mod tasks;

pub use artifacts::{ArtifactOracle, BlobTruth, list_digest};
pub use models::ModelOracle;
pub use revocations::{Observer, RevocationFigures, RevocationOracle, Via};
pub use tasks::{Attack, AttackCount, GrantTruth, TaskOracle};

use crate::fxhash::FxHashMap as HashMap;

use murmur_protocol::{Envelope, Millis};

/// What the oracle knows about one genuine advert.
#[derive(Clone, Debug)]
pub struct Genuine {
    pub envelope: Envelope,
    pub issued_at: Millis,
    pub ttl_ms: u64,
    pub published_at: u64,
    pub accepted_by: u32,
    pub converged_after_ms: Option<u64>,
    /// The last node to take it came up at or after its publication: it caught up by
    /// anti-entropy once connected, and its wait says nothing of propagation.
    pub completed_late: bool,
    /// Published while no advert of its node had reached every node yet: the mesh learning
    /// of a node (a join), not a change to one it knows.
    pub first: bool,
}

/// Ground truth about every advert honest nodes published.
#[derive(Debug, Default)]
pub struct Oracle {
    /// Longest TTL a directory honours.
    ttl_max_ms: u64,
    /// Clock skew a directory tolerates.
    skew_ms: u64,
    /// (node index, seq) → the advert.
    genuine: HashMap<(u32, u64), Genuine>,
    /// Publication order, for stable iteration.
    order: Vec<(u32, u64)>,
    /// Per observer, by node index: the highest seq the observer ever accepted for that
    /// node (0: none yet). Dense, since every observer ends up accepting every node: 8
    /// bytes a node pair where a map took about 35.
    highest: Vec<Vec<u64>>,
    /// A warm start's adverts, node → seq: every initial directory holds them from the
    /// start, as if accepted (see [`Oracle::published_warm`]).
    warm: HashMap<u32, u64>,
    /// Observers whose directory started from the warm adverts: the initial nodes of a
    /// warm start (below this index) that have not restarted since.
    warm_observers: u32,
    cold: Vec<bool>,
    /// Nodes with an advert that reached every live node (warm adverts included).
    known: std::collections::BTreeSet<u32>,
}

/// A broken safety property.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    pub at_ms: u64,
    pub what: String,
}

impl Oracle {
    /// An oracle judging freshness as directories configured with these bounds must.
    #[must_use]
    pub fn new(ttl_max_ms: u64, skew_ms: u64) -> Self {
        Self { ttl_max_ms, skew_ms, ..Self::default() }
    }

    /// Records an advert an honest node published.
    pub fn published(
        &mut self,
        node: u32,
        seq: u64,
        envelope: Envelope,
        issued_at: Millis,
        ttl_ms: u64,
        at: u64,
    ) {
        let first = !self.known.contains(&node);
        if self
            .genuine
            .insert(
                (node, seq),
                Genuine {
                    envelope,
                    issued_at,
                    ttl_ms,
                    published_at: at,
                    accepted_by: 1,
                    converged_after_ms: None,
                    completed_late: false,
                    first,
                },
            )
            .is_none()
        {
            self.order.push((node, seq));
        }
    }

    /// Records an advert every initial directory of a warm start holds from the start: it
    /// counts as accepted by each of them (a later acceptance of it is a replay), and is
    /// left out of the convergence figures.
    pub fn published_warm(
        &mut self,
        node: u32,
        seq: u64,
        envelope: Envelope,
        issued_at: Millis,
        ttl_ms: u64,
    ) {
        self.published(node, seq, envelope, issued_at, ttl_ms, 0);
        if self.order.last() == Some(&(node, seq)) {
            self.order.pop();
        }
        if let Some(genuine) = self.genuine.get_mut(&(node, seq)) {
            genuine.converged_after_ms = Some(0);
        }
        self.warm.insert(node, seq);
        self.known.insert(node);
        self.warm_observers = self.warm_observers.max(node + 1);
    }

    /// Checks an acceptance by `observer` of `node`'s advert `seq`, held as `envelope`.
    /// `live` is the number of live honest nodes now (for convergence tracking). True when
    /// this acceptance completed the advert's convergence.
    pub fn accepted(
        &mut self,
        observer: u32,
        (node, seq): (u32, u64),
        envelope: &Envelope,
        observer_now: Millis,
        at: u64,
        live: u32,
    ) -> Result<bool, String> {
        let Some(genuine) = self.genuine.get_mut(&(node, seq)) else {
            return Err(format!(
                "node {observer} accepted an advert claiming node {node} seq {seq} that node {node} never published (forged)"
            ));
        };
        if genuine.envelope != *envelope {
            return Err(format!(
                "node {observer} accepted node {node} seq {seq} with bytes node {node} never signed (forged)"
            ));
        }
        let valid_until = genuine.issued_at.plus(genuine.ttl_ms.min(self.ttl_max_ms) + self.skew_ms);
        if observer_now >= valid_until {
            return Err(format!(
                "node {observer} accepted node {node} seq {seq} after it expired (valid until {}, observer clock {})",
                valid_until.0, observer_now.0
            ));
        }
        let observer_index = observer as usize;
        if self.highest.len() <= observer_index {
            self.highest.resize_with(observer_index + 1, Vec::new);
        }
        let warm =
            if observer >= self.warm_observers || self.cold.get(observer_index).copied().unwrap_or(false) {
                0
            } else {
                self.warm.get(&node).copied().unwrap_or(0)
            };
        let seen = &mut self.highest[observer_index];
        if seen.len() <= node as usize {
            seen.resize(node as usize + 1, 0);
        }
        let highest = &mut seen[node as usize];
        if *highest == 0 {
            *highest = warm;
        }
        if seq <= *highest {
            return Err(format!(
                "node {observer} accepted node {node} seq {seq} after already accepting seq {highest} (replay)"
            ));
        }
        *highest = seq;
        genuine.accepted_by += 1;
        if genuine.converged_after_ms.is_none() && genuine.accepted_by >= live {
            genuine.converged_after_ms = Some(at.saturating_sub(genuine.published_at));
            self.known.insert(node);
            return Ok(true);
        }
        Ok(false)
    }

    /// Checks that `envelope`, which `observer` names as a provider at `observer_now`, is a
    /// genuine advert of `node` that is still valid.
    pub fn check_provider(
        &self,
        observer: u32,
        (node, seq): (u32, u64),
        envelope: &Envelope,
        observer_now: Millis,
    ) -> Result<(), String> {
        let genuine = self.genuine.get(&(node, seq)).filter(|g| g.envelope == *envelope).ok_or_else(|| {
            format!("node {observer} names node {node} (seq {seq}) as a provider from an advert node {node} never published")
        })?;
        let valid_until = genuine.issued_at.plus(genuine.ttl_ms.min(self.ttl_max_ms) + self.skew_ms);
        if observer_now >= valid_until {
            return Err(format!(
                "node {observer} names node {node} as a provider from an advert expired at {}",
                valid_until.0
            ));
        }
        Ok(())
    }

    /// Forgets what `observer` accepted: its directory was lost (crash). A replay check
    /// across a restart would wrongly call the fresh directory's first acceptance a replay.
    pub fn forget_observer(&mut self, observer: u32) {
        if let Some(seen) = self.highest.get_mut(observer as usize) {
            seen.clear();
        }
        let observer = observer as usize;
        if self.cold.len() <= observer {
            self.cold.resize(observer + 1, false);
        }
        self.cold[observer] = true;
    }

    /// For an advert published during the run (not a warm start's): when it was published,
    /// and whether it was its node's first (a join).
    #[must_use]
    pub fn published_during_run(&self, node: u32, seq: u64) -> Option<(u64, bool)> {
        if self.warm.get(&node) == Some(&seq) {
            return None;
        }
        self.genuine.get(&(node, seq)).map(|g| (g.published_at, g.first))
    }

    /// Convergence times (ms) of adverts that reached every live node, split into joins
    /// (a node's first advert) and changes, in publication order.
    #[must_use]
    pub fn convergence_by_kind(&self) -> (Vec<u64>, Vec<u64>) {
        let (mut joins, mut changes) = (Vec::new(), Vec::new());
        for g in self.order.iter().filter_map(|key| self.genuine.get(key)) {
            if let Some(ms) = g.converged_after_ms {
                if g.first { joins.push(ms) } else { changes.push(ms) }
            }
        }
        (joins, changes)
    }

    /// Notes that node `node`'s advert `seq` converged at a node that came up at or after its
    /// publication.
    pub fn completed_late(&mut self, node: u32, seq: u64) {
        if let Some(g) = self.genuine.get_mut(&(node, seq)) {
            g.completed_late = true;
        }
    }

    /// How many adverts converged at a node that came up at or after their publication.
    #[must_use]
    pub fn completed_late_count(&self) -> u64 {
        self.genuine.values().filter(|g| g.completed_late).count() as u64
    }

    /// Convergence times (ms) of the adverts that reached every live node and whose last
    /// node was up before they were published: propagation alone, in publication order.
    #[must_use]
    pub fn convergence_propagated_ms(&self) -> Vec<u64> {
        self.order
            .iter()
            .filter_map(|key| self.genuine.get(key))
            .filter(|g| !g.completed_late)
            .filter_map(|g| g.converged_after_ms)
            .collect()
    }

    /// Convergence times (ms) of adverts that reached every live node, in publication order.
    pub fn convergence_ms(&self) -> Vec<u64> {
        self.order.iter().filter_map(|key| self.genuine.get(key)?.converged_after_ms).collect()
    }

    /// Per advert in publication order: (node, seq, published at ms, nodes that accepted it).
    pub fn acceptance(&self) -> Vec<(u32, u64, u64, u32)> {
        self.order
            .iter()
            .filter_map(|k| self.genuine.get(k).map(|g| (k.0, k.1, g.published_at, g.accepted_by)))
            .collect()
    }

    /// Whether `node` published an advert with sequence number `seq` (warm ones included).
    #[must_use]
    pub fn is_genuine(&self, node: u32, seq: u64) -> bool {
        self.genuine.contains_key(&(node, seq))
    }

    /// Adverts published.
    #[must_use]
    pub fn published_count(&self) -> usize {
        self.order.len()
    }
}

#[cfg(test)]
mod tests {
    use murmur_protocol::{Advert, SecretKey, Signed};

    use super::*;

    const TTL_MS: u64 = 90_000;
    const SKEW_MS: u64 = 30_000;

    /// Node 3's advert `seq`, issued at `issued_at`.
    fn advert(seq: u64, issued_at: Millis) -> Envelope {
        let key = SecretKey::from_seed([3; 32]);
        Signed::sign(Advert::new(seq, issued_at, TTL_MS), &key).unwrap().into_envelope()
    }

    /// An oracle that saw node 3 publish seqs 1 and 2 at time 1000 (ms on its clock).
    fn oracle() -> Oracle {
        let mut oracle = Oracle::new(TTL_MS, SKEW_MS);
        for seq in [1, 2] {
            oracle.published(3, seq, advert(seq, Millis(1000)), Millis(1000), TTL_MS, 0);
        }
        oracle
    }

    /// The first instant node 3's adverts are no longer valid to an observer.
    const EXPIRED: Millis = Millis(1000 + TTL_MS + SKEW_MS);

    #[test]
    fn an_acceptance_after_the_ttl_and_the_skew_allowance_is_expired() {
        let mut oracle = oracle();
        let just_before = Millis(EXPIRED.0 - 1);
        assert_eq!(oracle.accepted(0, (3, 1), &advert(1, Millis(1000)), just_before, 0, 20), Ok(false));
        let late = oracle.accepted(1, (3, 1), &advert(1, Millis(1000)), EXPIRED, 0, 20).unwrap_err();
        assert!(late.contains("after it expired"), "{late}");
    }

    #[test]
    fn accepting_an_advert_again_or_an_older_one_is_a_replay() {
        let mut oracle = oracle();
        let now = Millis(2000);
        assert_eq!(oracle.accepted(0, (3, 2), &advert(2, Millis(1000)), now, 0, 20), Ok(false));
        for seq in [2, 1] {
            let replay = oracle.accepted(0, (3, seq), &advert(seq, Millis(1000)), now, 0, 20).unwrap_err();
            assert!(replay.contains("(replay)"), "seq {seq}: {replay}");
        }
        // Another observer, and the same one after losing its directory, may accept it.
        assert_eq!(oracle.accepted(1, (3, 1), &advert(1, Millis(1000)), now, 0, 20), Ok(false));
        oracle.forget_observer(0);
        assert_eq!(oracle.accepted(0, (3, 1), &advert(1, Millis(1000)), now, 0, 20), Ok(false));
    }

    #[test]
    fn the_acceptance_that_completes_convergence_says_so_and_makes_the_node_known() {
        let mut oracle = oracle();
        let now = Millis(2000);
        let (published_at, join) = oracle.published_during_run(3, 1).unwrap();
        assert!(join, "no advert of node 3 has reached everyone yet: a join");
        // Three live nodes: the publisher and two observers.
        assert_eq!(oracle.accepted(0, (3, 1), &advert(1, Millis(1000)), now, 400, 3), Ok(false));
        assert_eq!(oracle.accepted(1, (3, 1), &advert(1, Millis(1000)), now, 900, 3), Ok(true));
        assert_eq!(oracle.convergence_by_kind(), (vec![900 - published_at], vec![]));
        oracle.published(3, 3, advert(3, Millis(1000)), Millis(1000), TTL_MS, 1000);
        assert_eq!(oracle.published_during_run(3, 3), Some((1000, false)), "the mesh knows node 3 now");
    }

    #[test]
    fn an_advert_completed_by_a_node_that_came_up_late_is_left_out_of_propagation() {
        let mut oracle = oracle();
        let now = Millis(2000);
        for (seq, at) in [(1, 300), (2, 700)] {
            assert_eq!(oracle.accepted(0, (3, seq), &advert(seq, Millis(1000)), now, at, 2), Ok(true));
        }
        oracle.completed_late(3, 2);
        assert_eq!(oracle.convergence_ms(), vec![300, 700]);
        assert_eq!(oracle.convergence_propagated_ms(), vec![300], "seq 2 was caught up, not propagated");
    }

    #[test]
    fn a_provider_named_from_a_forged_or_expired_advert_is_refused() {
        let oracle = oracle();
        let now = Millis(2000);
        assert_eq!(oracle.check_provider(0, (3, 2), &advert(2, Millis(1000)), now), Ok(()));
        let unpublished = oracle.check_provider(0, (3, 9), &advert(9, Millis(1000)), now).unwrap_err();
        assert!(unpublished.contains("never published"), "{unpublished}");
        // Bytes node 3 never signed under a seq it did publish.
        let other_bytes = oracle.check_provider(0, (3, 2), &advert(2, Millis(1500)), now).unwrap_err();
        assert!(other_bytes.contains("never published"), "{other_bytes}");
        let expired = oracle.check_provider(0, (3, 2), &advert(2, Millis(1000)), EXPIRED).unwrap_err();
        assert!(expired.contains("expired at"), "{expired}");
    }
}
