//! The revocation oracle: ground truth about what the authorities revoked and when, and
//! the bounded-revocation check built on it.
//!
//! An authority's list is handed to one node; from then on the mesh has
//! `check.revocation_bound_s` to shut out what it revokes. For an observer that was down
//! when the list was handed out, or came up later, the bound runs from when it came up:
//! a node can only learn what reaches it. Safety, checked as events happen (and every
//! second for what is held), for every live honest node not itself revoked:
//!
//! - **no acceptance after taking**: once a node has taken a list, its directory never
//!   accepts an advert of a node the list revokes, and the node never lets out (as the
//!   sending node) or accepts (as the owner) a task under a grant the list revokes (no
//!   bound: the list is right there);
//! - **no acceptance after the bound**: nor does it accept one more than the bound after the
//!   list was handed out (or it came up), whether it took the list or not;
//! - **nothing held after the bound**: its directory no longer holds an advert of a revoked
//!   node, and it holds the list (or a newer one of the same authority);
//! - **refusals are genuine**: a task refused at either end as `revoked` carries a grant an
//!   authority really revoked (the world checks the same of adverts and held-off peers).
//!
//! The truth is kept as plain sets of node indices and grant bytes, not re-derived with
//! the protocol's lists.

use std::collections::{BTreeMap, BTreeSet};

use murmur_protocol::PublicKey;
use murmur_protocol::task::TaskId;

/// One list an authority signed and handed out.
#[derive(Clone, Debug)]
struct List {
    authority: PublicKey,
    seq: u64,
    handed_at: u64,
    /// Nodes that took it (or a newer list of its authority), over all their lives.
    reached: BTreeSet<u32>,
}

/// Something revoked: when, and by which list.
#[derive(Clone, Copy, Debug)]
struct Revoked {
    at: u64,
    list: usize,
    /// The fault that revoked it.
    fault: usize,
}

/// Ways a list reaches a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via {
    /// By gossip.
    Gossip,
    /// In an anti-entropy answer.
    Sync,
    /// From the operator (the fault's hand-off).
    Operator,
    /// From the node's own store, as it starts again.
    Store,
}

/// Per observer, what the checks need from the world.
#[derive(Clone, Copy, Debug)]
pub struct Observer {
    pub node: u32,
    /// When its current life began (sim ms).
    pub up_since: u64,
}

/// Figures for the report.
#[derive(Clone, Debug, Default)]
pub struct RevocationFigures {
    pub lists: u64,
    pub nodes: u64,
    pub grants: u64,
    /// Lists taken, by how they came.
    pub by_gossip: u64,
    pub by_sync: u64,
    pub by_operator: u64,
    pub by_store: u64,
    /// Worst time from a list's hand-off to a node that was up then taking it.
    pub propagation_max_ms: Option<u64>,
    /// Worst time from a node coming up (after a hand-off) to it taking the list.
    pub catch_up_max_ms: Option<u64>,
    /// Adverts of revoked nodes, and tasks under revoked grants, that nodes not yet holding
    /// the list accepted within the bound.
    pub adverts_accepted_in_bound: u64,
    pub tasks_accepted_in_bound: u64,
    pub tasks_let_out_in_bound: u64,
}

/// Ground truth about revocations.
#[derive(Debug, Default)]
pub struct RevocationOracle {
    bound_ms: u64,
    lists: Vec<List>,
    nodes: BTreeMap<u32, Revoked>,
    /// Revoked grants, by their envelope bytes.
    grants: BTreeMap<Vec<u8>, Revoked>,
    /// Per node, this life: authority → the newest list of it taken.
    taken: BTreeMap<u32, BTreeMap<PublicKey, u64>>,
    /// Tasks sent under a grant, and the grant (for judging `revoked` refusals): grants are
    /// kept once each, by number.
    sent: BTreeMap<TaskId, u32>,
    sent_grants: BTreeMap<Vec<u8>, u32>,
    sent_grant_bytes: Vec<Vec<u8>>,
    figures: RevocationFigures,
}

impl RevocationOracle {
    /// An oracle holding the mesh to `bound_ms`.
    #[must_use]
    pub fn new(bound_ms: u64) -> Self {
        Self { bound_ms, ..Self::default() }
    }

    /// Records list `seq` of `authority`, handed to a node `at`, newly revoking `nodes` and
    /// the grants whose envelope bytes are `grants`, for fault `fault`.
    pub fn issued(
        &mut self,
        (authority, seq): (PublicKey, u64),
        at: u64,
        nodes: &[u32],
        grants: &[Vec<u8>],
        fault: usize,
    ) {
        let list = self.lists.len();
        self.lists.push(List { authority, seq, handed_at: at, reached: BTreeSet::new() });
        let revoked = Revoked { at, list, fault };
        for node in nodes {
            self.nodes.entry(*node).or_insert(revoked);
        }
        for grant in grants {
            self.grants.entry(grant.clone()).or_insert(revoked);
        }
        self.figures.lists += 1;
        self.figures.nodes += nodes.len() as u64;
        self.figures.grants += grants.len() as u64;
    }

    /// The fault that revoked `node`, if one did.
    #[must_use]
    pub fn node_revoked(&self, node: u32) -> Option<usize> {
        self.nodes.get(&node).map(|r| r.fault)
    }

    /// The fault that revoked the grant `grant` (envelope bytes), if one did.
    #[must_use]
    pub fn grant_revoked(&self, grant: &[u8]) -> Option<usize> {
        self.grants.get(grant).map(|r| r.fault)
    }

    /// Revoked nodes, in index order.
    pub fn revoked_nodes(&self) -> impl Iterator<Item = u32> + '_ {
        self.nodes.keys().copied()
    }

    /// `observer` took list `seq` of `authority` `at`, by `via`.
    pub fn took(&mut self, observer: Observer, (authority, seq): (PublicKey, u64), at: u64, via: Via) {
        let f = &mut self.figures;
        match via {
            Via::Gossip => f.by_gossip += 1,
            Via::Sync => f.by_sync += 1,
            Via::Operator => f.by_operator += 1,
            Via::Store => f.by_store += 1,
        }
        let newest = self.taken.entry(observer.node).or_default().entry(authority).or_insert(0);
        *newest = (*newest).max(seq);
        for list in &mut self.lists {
            if list.authority != authority || list.seq > seq || !list.reached.insert(observer.node) {
                continue;
            }
            if observer.up_since <= list.handed_at {
                let delay = at.saturating_sub(list.handed_at);
                f.propagation_max_ms = Some(f.propagation_max_ms.map_or(delay, |m| m.max(delay)));
            } else {
                let delay = at.saturating_sub(observer.up_since);
                f.catch_up_max_ms = Some(f.catch_up_max_ms.map_or(delay, |m| m.max(delay)));
            }
        }
    }

    /// `node` crashed: its directory, and the lists in it, are gone (its store keeps them).
    pub fn crashed(&mut self, node: u32) {
        self.taken.remove(&node);
    }

    /// Whether `observer` holds the list that revoked `revoked` (or a newer one).
    fn knows(&self, observer: u32, revoked: Revoked) -> bool {
        let list = &self.lists[revoked.list];
        self.taken.get(&observer).and_then(|t| t.get(&list.authority)).is_some_and(|seq| *seq >= list.seq)
    }

    /// How long before `at` `observer` could have learned of something handed out `since`
    /// (when it came up, if later), when that is more than the bound (`None`: within it).
    fn overdue(&self, observer: Observer, since: u64, at: u64) -> Option<u64> {
        at.checked_sub(since.max(observer.up_since)).filter(|age| *age > self.bound_ms)
    }

    /// Checks an acceptance by `observer`'s directory of `subject`'s advert `at`.
    pub fn advert_accepted(&mut self, observer: Observer, subject: u32, at: u64) -> Result<(), String> {
        let Some(&revoked) = self.nodes.get(&subject) else { return Ok(()) };
        let list = &self.lists[revoked.list];
        let what = format!("node {} accepted an advert of node {subject}", observer.node);
        if self.knows(observer.node, revoked) {
            return Err(format!(
                "{what}, which revocation list {} of authority {} it holds revokes",
                list.seq, list.authority
            ));
        }
        if let Some(age) = self.overdue(observer, revoked.at, at) {
            return Err(format!(
                "{what}, revoked by list {} at {} ms: {age} ms after it could first have learned of it (the hand-off, or its start), beyond the {} ms bound (check.revocation_bound_s)",
                list.seq, revoked.at, self.bound_ms
            ));
        }
        self.figures.adverts_accepted_in_bound += 1;
        Ok(())
    }

    /// Checks a task accepted by `observer` as its owner (`owner` true), or let out by it
    /// as the sending node, under the grant `grant` (envelope bytes), `at`.
    pub fn task_passed(
        &mut self,
        observer: Observer,
        grant: &[u8],
        at: u64,
        owner: bool,
    ) -> Result<(), String> {
        let Some(&revoked) = self.grants.get(grant) else { return Ok(()) };
        let list = &self.lists[revoked.list];
        let what = if owner {
            format!("node {} accepted a task under a grant", observer.node)
        } else {
            format!("node {} let a task out under a grant", observer.node)
        };
        if self.knows(observer.node, revoked) {
            return Err(format!(
                "{what} that revocation list {} of authority {} it holds revokes",
                list.seq, list.authority
            ));
        }
        if let Some(age) = self.overdue(observer, revoked.at, at) {
            return Err(format!(
                "{what} revoked by list {} at {} ms: {age} ms after it could first have learned of it (the hand-off, or its start), beyond the {} ms bound (check.revocation_bound_s)",
                list.seq, revoked.at, self.bound_ms
            ));
        }
        if owner {
            self.figures.tasks_accepted_in_bound += 1;
        } else {
            self.figures.tasks_let_out_in_bound += 1;
        }
        Ok(())
    }

    /// Remembers that `task` was sent under `grant` (envelope bytes).
    pub fn sent(&mut self, task: TaskId, grant: &[u8]) {
        let next = self.sent_grant_bytes.len() as u32;
        let id = *self.sent_grants.entry(grant.to_vec()).or_insert(next);
        if id == next {
            self.sent_grant_bytes.push(grant.to_vec());
        }
        self.sent.insert(task, id);
    }

    /// Checks a refusal as `revoked` of `task` by `node`: its grant must be revoked. Returns
    /// the fault that revoked it.
    pub fn refused(&self, node: u32, task: &TaskId) -> Result<usize, String> {
        let grant = self.sent.get(task).map(|id| self.sent_grant_bytes[*id as usize].as_slice());
        grant.and_then(|grant| self.grant_revoked(grant)).ok_or_else(|| {
            format!("node {node} refused task {} as revoked, but no authority revoked its grant", short(task))
        })
    }

    /// Checks, `at`, what `observer` holds: past the bound, no advert of a revoked node
    /// (`holds` says whether its directory holds one), and every list handed out (or a
    /// newer one of its authority).
    pub fn check_held(&self, observer: Observer, at: u64, holds: &dyn Fn(u32) -> bool) -> Result<(), String> {
        for (&subject, &revoked) in &self.nodes {
            if subject != observer.node && self.overdue(observer, revoked.at, at).is_some() && holds(subject)
            {
                let list = &self.lists[revoked.list];
                return Err(format!(
                    "node {} still holds the advert of node {subject}, revoked by list {} at {} ms, beyond the {} ms bound (check.revocation_bound_s)",
                    observer.node, list.seq, revoked.at, self.bound_ms
                ));
            }
        }
        for list in &self.lists {
            let held =
                self.taken.get(&observer.node).and_then(|t| t.get(&list.authority)).copied().unwrap_or(0);
            if held < list.seq && self.overdue(observer, list.handed_at, at).is_some() {
                return Err(format!(
                    "node {} holds no revocation list {} of authority {} (newest: {held}), handed out at {} ms, beyond the {} ms bound (check.revocation_bound_s)",
                    observer.node, list.seq, list.authority, list.handed_at, self.bound_ms
                ));
            }
        }
        Ok(())
    }

    /// The figures so far.
    #[must_use]
    pub const fn figures(&self) -> &RevocationFigures {
        &self.figures
    }
}

fn short(task: &TaskId) -> String {
    task.to_string()[..8].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use murmur_protocol::SecretKey;

    fn oracle() -> (RevocationOracle, PublicKey) {
        let authority = SecretKey::from_seed([7; 32]).public();
        let mut oracle = RevocationOracle::new(10_000);
        oracle.issued((authority, 1), 1_000, &[3], &[b"grant".to_vec()], 0);
        (oracle, authority)
    }

    const UP: Observer = Observer { node: 5, up_since: 0 };

    #[test]
    fn an_advert_of_a_revoked_node_may_be_accepted_only_within_the_bound_and_before_the_list() {
        let (mut oracle, authority) = oracle();
        oracle.advert_accepted(UP, 4, 50_000).unwrap();
        oracle.advert_accepted(UP, 3, 11_000).unwrap();
        let err = oracle.advert_accepted(UP, 3, 11_001).unwrap_err();
        assert!(err.contains("bound"), "{err}");
        // A node that came up later has the bound from then.
        oracle.advert_accepted(Observer { node: 6, up_since: 30_000 }, 3, 39_000).unwrap();
        oracle.took(UP, (authority, 1), 2_000, Via::Gossip);
        let err = oracle.advert_accepted(UP, 3, 2_500).unwrap_err();
        assert!(err.contains("it holds revokes"), "{err}");
        assert_eq!(oracle.figures().propagation_max_ms, Some(1_000));
        // After a crash the directory is new: only the bound holds it.
        oracle.crashed(5);
        oracle.advert_accepted(Observer { node: 5, up_since: 3_000 }, 3, 4_000).unwrap();
    }

    #[test]
    fn held_adverts_and_missing_lists_fail_after_the_bound() {
        let (mut oracle, authority) = oracle();
        let holds_three = |n: u32| n == 3;
        oracle.check_held(UP, 11_000, &|_| false).unwrap();
        let err = oracle.check_held(UP, 11_001, &|_| false).unwrap_err();
        assert!(err.contains("holds no revocation list"), "{err}");
        oracle.took(UP, (authority, 1), 3_000, Via::Sync);
        let err = oracle.check_held(UP, 11_001, &holds_three).unwrap_err();
        assert!(err.contains("still holds"), "{err}");
        oracle.check_held(UP, 11_001, &|_| false).unwrap();
        // The revoked node itself is not asked to forget itself.
        oracle.check_held(Observer { node: 3, up_since: 0 }, 5_000, &holds_three).unwrap();
    }

    #[test]
    fn tasks_under_revoked_grants_and_revoked_refusals_are_judged() {
        let (mut oracle, authority) = oracle();
        oracle.task_passed(UP, b"other", 90_000, true).unwrap();
        oracle.task_passed(UP, b"grant", 5_000, false).unwrap();
        assert!(oracle.task_passed(UP, b"grant", 20_000, true).unwrap_err().contains("bound"));
        oracle.took(UP, (authority, 1), 1_500, Via::Operator);
        assert!(oracle.task_passed(UP, b"grant", 2_000, false).unwrap_err().contains("it holds"));
        let (revoked, kept) = (TaskId::derive("a", "1"), TaskId::derive("a", "2"));
        oracle.sent(revoked, b"grant");
        oracle.sent(kept, b"other");
        assert_eq!(oracle.refused(5, &revoked), Ok(0));
        assert!(oracle.refused(5, &kept).is_err());
    }
}
