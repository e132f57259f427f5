//! Where pinned artifacts live: rendezvous (highest-random-weight) placement.
//!
//! A pinned artifact must be held by `factor` nodes of the mesh. Which ones is decided by
//! rendezvous hashing: every node scores each candidate as `SHA-256(artifact ‖ node id)`
//! and the `factor` highest scores hold the artifact.
//!
//! # Why rendezvous hashing
//!
//! - **No coordination.** Each node computes the same holders from its own directory view,
//!   with no election, lease or leader. Two nodes whose views agree agree on the holders;
//!   views that differ for a while (an advert still on its way) differ only in the nodes
//!   they disagree about, and converge as the directories do.
//! - **Minimal movement.** A score depends on the artifact and one node only, so a node
//!   that leaves moves only its own share: if it was a holder, the next-ranked candidate
//!   takes its place; if it was not, nothing moves. A node that joins takes over only the
//!   artifacts it now ranks among the top `factor` for.
//! - **Even spread.** SHA-256 scores are uniform, so each node holds about
//!   `factor / nodes` of the pinned artifacts.
//!
//! Ties (two equal scores, which needs a SHA-256 collision) fall to the lower node id, so
//! the order is total and every node breaks them the same way.
//!
//! ```
//! use murmur_protocol::digest::Digest;
//! use murmur_protocol::replicate::{holders, should_hold};
//! use murmur_protocol::SecretKey;
//!
//! let nodes: Vec<_> = (1..=5u8).map(|n| SecretKey::from_seed([n; 32]).node_id()).collect();
//! let artifact = Digest::of(b"model weights");
//! let chosen = holders(&artifact, &nodes, 2);
//! assert_eq!(chosen.len(), 2);
//! assert!(nodes.iter().all(|n| should_hold(n, &artifact, &nodes, 2) == chosen.contains(n)));
//! ```

use std::cmp::Reverse;

use crate::digest::Digest;
use crate::identity::NodeId;

/// Copies of one pinned artifact a mesh keeps at most. More copies add little
/// availability past a handful and multiply the bytes every pin costs; 16 leaves room for
/// a pin per region in a wide mesh.
pub const REPLICATION_FACTOR_MAX: usize = 16;

/// Copies kept when the operator names none: survives two simultaneous losses.
pub const REPLICATION_FACTOR_DEFAULT: usize = 3;

const _: () =
    assert!(REPLICATION_FACTOR_DEFAULT >= 1 && REPLICATION_FACTOR_DEFAULT <= REPLICATION_FACTOR_MAX);

/// The rendezvous score of `node` for `artifact`: the digest of the artifact's 32 bytes
/// followed by the node's 32 key bytes. Higher holds first.
#[must_use]
pub fn score(artifact: &Digest, node: &NodeId) -> Digest {
    let mut bytes = [0u8; 64];
    bytes[..32].copy_from_slice(&artifact.0);
    bytes[32..].copy_from_slice(node.key().as_bytes());
    Digest::of(&bytes)
}

/// The nodes among `candidates` that should hold `artifact`: the `factor` with the highest
/// [`score`], highest first, ties to the lower node id. Exactly `min(factor, distinct
/// candidates)` nodes; the order of `candidates` and repeated entries do not matter.
#[must_use]
pub fn holders(artifact: &Digest, candidates: &[NodeId], factor: usize) -> Vec<NodeId> {
    let mut ranked: Vec<(Reverse<Digest>, NodeId)> =
        candidates.iter().map(|node| (Reverse(score(artifact, node)), *node)).collect();
    ranked.sort_unstable();
    ranked.dedup_by(|a, b| a.1 == b.1);
    ranked.into_iter().take(factor).map(|(_, node)| node).collect()
}

/// Whether `me` is among the holders of `artifact` when the mesh is `candidates` plus
/// `me` (a node always counts itself, listed or not). Agrees with [`holders`]; costs one
/// hash per candidate and no sorting, so a node can run it for every pin on every check.
#[must_use]
pub fn should_hold(me: &NodeId, artifact: &Digest, candidates: &[NodeId], factor: usize) -> bool {
    if factor == 0 {
        return false;
    }
    let mine = (Reverse(score(artifact, me)), *me);
    let mut ahead: Vec<&NodeId> = candidates
        .iter()
        .filter(|node| *node != me && (Reverse(score(artifact, node)), **node) < mine)
        .collect();
    // A candidate listed twice is still one node ahead.
    ahead.sort_unstable();
    ahead.dedup();
    ahead.len() < factor
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::identity::SecretKey;

    fn node(n: u16) -> NodeId {
        let mut seed = [0u8; 32];
        seed[..2].copy_from_slice(&n.to_le_bytes());
        SecretKey::from_seed(seed).node_id()
    }

    fn nodes(count: u16) -> Vec<NodeId> {
        (0..count).map(node).collect()
    }

    #[test]
    fn holders_are_the_highest_scores_in_order() {
        let all = nodes(20);
        let artifact = Digest::of(b"a");
        let chosen = holders(&artifact, &all, 4);
        assert_eq!(chosen.len(), 4);
        let scores: Vec<Digest> = chosen.iter().map(|n| score(&artifact, n)).collect();
        assert!(scores.windows(2).all(|w| w[0] > w[1]), "highest first");
        let lowest_chosen = scores[3];
        for other in all.iter().filter(|n| !chosen.contains(n)) {
            assert!(score(&artifact, other) < lowest_chosen);
        }
    }

    #[test]
    fn fewer_candidates_than_the_factor_all_hold() {
        let all = nodes(3);
        let artifact = Digest::of(b"b");
        let mut chosen = holders(&artifact, &all, 5);
        chosen.sort_unstable();
        let mut expected = all.clone();
        expected.sort_unstable();
        assert_eq!(chosen, expected);
        assert!(all.iter().all(|n| should_hold(n, &artifact, &all, 5)));
        assert!(holders(&artifact, &[], 3).is_empty());
        assert!(!should_hold(&all[0], &artifact, &all, 0), "a factor of 0 places nothing");
    }

    #[test]
    fn a_node_counts_itself_and_duplicates_count_once() {
        let all = nodes(10);
        let artifact = Digest::of(b"c");
        let top = holders(&artifact, &all, 1)[0];
        let others: Vec<NodeId> = all.iter().copied().filter(|n| *n != top).collect();
        assert!(should_hold(&top, &artifact, &others, 1), "unlisted, still the top score");
        let doubled: Vec<NodeId> = all.iter().chain(all.iter()).copied().collect();
        assert_eq!(holders(&artifact, &doubled, 3), holders(&artifact, &all, 3));
        for n in &all {
            assert_eq!(should_hold(n, &artifact, &doubled, 3), should_hold(n, &artifact, &all, 3));
        }
    }

    #[test]
    fn different_artifacts_spread_over_the_nodes() {
        let all = nodes(10);
        let mut held = [0usize; 10];
        for a in 0..200u32 {
            for h in holders(&Digest::of(&a.to_le_bytes()), &all, 2) {
                held[all.iter().position(|n| *n == h).unwrap()] += 1;
            }
        }
        // 400 copies over 10 nodes: 40 each on average; none is starved or swamped.
        assert!(held.iter().all(|&h| (15..=70).contains(&h)), "{held:?}");
    }

    proptest! {
        #[test]
        fn placement_is_stable_exact_and_order_independent(
            count in 1u16..40,
            factor in 0usize..8,
            artifact in any::<[u8; 8]>(),
            leaver in any::<prop::sample::Index>(),
            shuffle_seed in any::<u64>(),
        ) {
            let all = nodes(count);
            let artifact = Digest::of(&artifact);
            let before = holders(&artifact, &all, factor);
            prop_assert_eq!(before.len(), factor.min(all.len()));

            // Order-independent: a shuffled candidate list gives the same holders.
            let mut shuffled = all.clone();
            let mut state = shuffle_seed | 1;
            for i in (1..shuffled.len()).rev() {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                shuffled.swap(i, (state % (i as u64 + 1)) as usize);
            }
            prop_assert_eq!(&holders(&artifact, &shuffled, factor), &before);
            for n in &all {
                prop_assert_eq!(should_hold(n, &artifact, &shuffled, factor), before.contains(n));
            }

            // Stable: a node leaving moves nothing unless it held the artifact, and then
            // only its own place (the rest stay, the next-ranked node joins).
            let gone = all[leaver.index(all.len())];
            let rest: Vec<NodeId> = all.iter().copied().filter(|n| *n != gone).collect();
            let after = holders(&artifact, &rest, factor);
            if before.contains(&gone) {
                let kept: Vec<NodeId> = before.iter().copied().filter(|n| *n != gone).collect();
                prop_assert_eq!(&after[..kept.len()], &kept[..]);
                prop_assert!(after.len() <= kept.len() + 1);
            } else {
                prop_assert_eq!(after, before);
            }
        }
    }
}
