//! The model oracle: ground truth about which node serves which model since when, which
//! nodes are up since when, and which partitions cut whom, and the model checks built on
//! it. The world checks the fourth, that a request goes only to nodes whose genuine
//! advert lists its model, against the advert oracle ([`super::Oracle`]).
//!
//! - **served** (liveness): a request must end accepted when some node had served its
//!   model for the grace (`models.served_grace_ms`) before the request was made, up and
//!   reachable from the requesting node all that time (the requesting node up too), and
//!   still so when the request ended. A node that came back (restarted, or across a
//!   healed partition) counts only `models.rejoin_grace_ms` after it did: late departure
//!   notices still drop such live nodes for a while (see docs/src/simulator.md). Requests
//!   whose requesting node crashed, and those that ended with an unknown outcome (a
//!   candidate may have taken it; the rule sends it nowhere else), are not judged.
//! - **accepted where served** (safety): a node accepts a request only while its agents
//!   serve the model.
//! - **attempts** (safety): a request tries at most `CANDIDATES_MAX` candidates, never one
//!   twice, and none after a candidate accepted it or may have.
//! - **spread** (liveness): in the scenario's window, no node that served the window's
//!   model all the window (up, serving and unchanged) takes more than `spread_max` times
//!   the mean share of that model's acceptances.
//!
//! The truth is kept as plain facts (node indices, times, model names), not re-derived
//! with the protocol's matching code.

use std::collections::{BTreeMap, BTreeSet};

use murmur_protocol::route::CANDIDATES_MAX;

use crate::report::{NodeShare, SpreadMetrics};

/// A partition: when it began and ended, and who was on side A. A model exchange needs
/// both directions, so a one-way cut stops it too.
#[derive(Clone, Debug)]
struct Cut {
    fault: usize,
    from: u64,
    until: Option<u64>,
    side_a: Vec<bool>,
}

/// What one request did, as far as the attempts checker cares.
#[derive(Clone, Debug, Default)]
struct Tries {
    nodes: Vec<u32>,
    /// The node that accepted it, or that may have (an unknown outcome).
    taken_by: Option<(u32, bool)>,
}

/// The spread checker's window and what it counted.
#[derive(Clone, Debug)]
struct Window {
    model: String,
    from: u64,
    until: u64,
    share_max: f64,
    accepted: BTreeMap<u32, u64>,
    /// Nodes that came up, went down, or started or stopped serving the model inside it.
    disturbed: BTreeSet<u32>,
}

/// Ground truth about models and the checks on it.
#[derive(Clone, Debug, Default)]
pub struct ModelOracle {
    grace_ms: u64,
    rejoin_grace_ms: u64,
    /// Per node: when its current life began (`None`: down), and whether it had a life
    /// before (a restart).
    up_since: Vec<Option<u64>>,
    restarted: Vec<bool>,
    /// Model → node → since when (sim ms) the node serves it, in its current life.
    hosts: BTreeMap<String, BTreeMap<u32, u64>>,
    cuts: Vec<Cut>,
    tries: BTreeMap<u64, Tries>,
    window: Option<Window>,
}

impl ModelOracle {
    /// An oracle whose served checker allows `grace_ms` after a change and
    /// `rejoin_grace_ms` after a node came back, judging spread in `[from, until)` ms of
    /// `model` against `share_max` when `until > 0`.
    #[must_use]
    pub fn new(
        (grace_ms, rejoin_grace_ms): (u64, u64),
        (model, from, until, share_max): (&str, u64, u64, f64),
    ) -> Self {
        let window = (until > 0).then(|| Window {
            model: model.to_owned(),
            from,
            until,
            share_max,
            accepted: BTreeMap::new(),
            disturbed: BTreeSet::new(),
        });
        Self { grace_ms, rejoin_grace_ms, window, ..Self::default() }
    }

    /// A node exists (indices in creation order).
    pub fn add_node(&mut self) {
        self.up_since.push(None);
        self.restarted.push(false);
    }

    /// Node `node` came up at `at`, its agents serving `models`.
    pub fn started(&mut self, node: u32, at: u64, models: &[String]) {
        self.up_since[node as usize] = Some(at);
        for model in models {
            self.hosts.entry(model.clone()).or_default().insert(node, at);
        }
        self.disturb(node, at);
    }

    /// Node `node` went down at `at`.
    pub fn crashed(&mut self, node: u32, at: u64) {
        self.up_since[node as usize] = None;
        self.restarted[node as usize] = true;
        for hosts in self.hosts.values_mut() {
            hosts.remove(&node);
        }
        self.disturb(node, at);
    }

    /// From `at` on, live node `node`'s agents serve exactly `models`.
    pub fn changed(&mut self, node: u32, at: u64, models: &[String]) {
        if self.up_since[node as usize].is_none() {
            return;
        }
        let mut moved: Vec<String> = Vec::new();
        for (model, hosts) in &mut self.hosts {
            if !models.contains(model) && hosts.remove(&node).is_some() {
                moved.push(model.clone());
            }
        }
        for model in models {
            if let std::collections::btree_map::Entry::Vacant(entry) =
                self.hosts.entry(model.clone()).or_default().entry(node)
            {
                entry.insert(at);
                moved.push(model.clone());
            }
        }
        if let Some(w) = self.window.as_mut()
            && moved.contains(&w.model)
        {
            disturb(w, node, at);
        }
    }

    /// Partition `fault` began at `at`, with `side_a` on one side.
    pub fn cut(&mut self, fault: usize, at: u64, side_a: Vec<bool>) {
        self.cuts.push(Cut { fault, from: at, until: None, side_a });
    }

    /// Partition `fault` ended at `at`.
    pub fn healed(&mut self, fault: usize, at: u64) {
        for cut in self.cuts.iter_mut().filter(|c| c.fault == fault && c.until.is_none()) {
            cut.until = Some(at);
        }
    }

    /// Whether node `node`'s agents serve `model` now.
    #[must_use]
    pub fn serves(&self, node: u32, model: &str) -> bool {
        self.hosts.get(model).is_some_and(|h| h.contains_key(&node))
    }

    /// The served checker's question for a request by `requester` for `model` made at
    /// `made` and ending now (`at`): a node that must have served it, if there is one
    /// (see the module docs).
    #[must_use]
    pub fn available(&self, requester: u32, model: &str, made: u64, at: u64) -> Option<u32> {
        let since = made.checked_sub(self.grace_ms)?;
        let healing =
            |c: &Cut| c.until.is_some_and(|healed| healed <= at && made < healed + self.rejoin_grace_ms);
        if !self.settled(requester, made) || self.cuts.iter().any(healing) {
            return None;
        }
        let hosts = self.hosts.get(model)?;
        hosts
            .iter()
            .find(|&(&node, &serving)| {
                serving <= since
                    && self.settled(node, made)
                    && (node == requester || self.reachable(requester, node, since, at))
            })
            .map(|(&node, _)| node)
    }

    /// Whether node `node` had been up long enough at `made` to count: the grace after it
    /// first came up, the rejoin grace after a restart.
    fn settled(&self, node: u32, made: u64) -> bool {
        let grace = if self.restarted[node as usize] { self.rejoin_grace_ms } else { self.grace_ms };
        self.up_since[node as usize].is_some_and(|up| up + grace <= made)
    }

    /// Whether no partition cut `a` from `b` at any time in `[from, until]`.
    fn reachable(&self, a: u32, b: u32, from: u64, until: u64) -> bool {
        let side = |cut: &Cut, x: u32| cut.side_a.get(x as usize).copied().unwrap_or(false);
        !self
            .cuts
            .iter()
            .any(|c| c.from <= until && c.until.is_none_or(|end| end > from) && side(c, a) != side(c, b))
    }

    /// Request `req` tries node `node`: the attempts checker.
    pub fn attempt(&mut self, req: u64, node: u32) -> Result<(), String> {
        let tries = self.tries.entry(req).or_default();
        let result = if let Some((by, accepted)) = tries.taken_by {
            let how = if accepted { "had accepted it" } else { "may have taken it (unknown outcome)" };
            Err(format!("models: attempts checker: request {req} tried node {node} after node {by} {how}"))
        } else if tries.nodes.contains(&node) {
            Err(format!("models: attempts checker: request {req} tried node {node} twice"))
        } else if tries.nodes.len() >= CANDIDATES_MAX {
            Err(format!(
                "models: attempts checker: request {req} tried node {node} after {} candidates (CANDIDATES_MAX)",
                tries.nodes.len()
            ))
        } else {
            Ok(())
        };
        tries.nodes.push(node);
        result
    }

    /// Request `req` ended with an unknown outcome at `node`: it may have been taken.
    pub fn unknown(&mut self, req: u64, node: u32) {
        self.tries.entry(req).or_default().taken_by = Some((node, false));
    }

    /// Node `node` accepted request `req` for `model` at `at`: the accepted-where-served
    /// check, and the spread checker's count.
    pub fn accepted(&mut self, req: u64, node: u32, model: &str, at: u64) -> Result<(), String> {
        self.tries.entry(req).or_default().taken_by = Some((node, true));
        if let Some(w) = self.window.as_mut()
            && w.model == model
            && (w.from..w.until).contains(&at)
        {
            *w.accepted.entry(node).or_default() += 1;
        }
        if self.serves(node, model) {
            Ok(())
        } else {
            Err(format!(
                "models: routed checker: node {node} accepted request {req} for {model}, which its agents do not serve"
            ))
        }
    }

    /// The spread checker at the end of its window (`at`): the figures, and the finding if
    /// a node took more than its bound. `None` without a window, or before its end.
    #[must_use]
    pub fn spread(&self, at: u64) -> Option<(SpreadMetrics, Option<String>)> {
        let w = self.window.as_ref().filter(|w| at >= w.until)?;
        let judged: Vec<u32> = self
            .hosts
            .get(&w.model)
            .into_iter()
            .flatten()
            .filter(|&(node, &since)| since <= w.from && !w.disturbed.contains(node))
            .map(|(&node, _)| node)
            .collect();
        let accepted: u64 = judged.iter().map(|n| w.accepted.get(n).copied().unwrap_or(0)).sum();
        let mean = 1.0 / judged.len().max(1) as f64;
        let shares: Vec<NodeShare> = judged
            .iter()
            .map(|&node| {
                let count = w.accepted.get(&node).copied().unwrap_or(0);
                NodeShare { node, accepted: count, share: count as f64 / accepted.max(1) as f64 }
            })
            .collect();
        let ratio =
            |pick: fn(f64, f64) -> f64, start: f64| shares.iter().map(|s| s.share).fold(start, pick) / mean;
        let (share_max, share_min) = (ratio(f64::max, 0.0), ratio(f64::min, 1.0));
        let finding = shares.iter().find(|s| s.share > w.share_max * mean).map(|s| {
            format!(
                "spread checker: node {} took {} of the {accepted} acceptances of {} in {}–{} s ({:.1}x the mean share of the {} nodes serving it), above the bound of {:.1}x",
                s.node,
                s.accepted,
                w.model,
                w.from / 1000,
                w.until / 1000,
                s.share / mean,
                judged.len(),
                w.share_max
            )
        });
        let metrics = SpreadMetrics {
            model: w.model.clone(),
            from_s: w.from / 1000,
            until_s: w.until / 1000,
            accepted,
            nodes: judged.len() as u64,
            share_max: if accepted == 0 { 0.0 } else { share_max },
            share_min: if accepted == 0 { 0.0 } else { share_min },
            bound: w.share_max,
            shares,
        };
        Some((metrics, finding))
    }

    fn disturb(&mut self, node: u32, at: u64) {
        if let Some(w) = self.window.as_mut() {
            disturb(w, node, at);
        }
    }
}

/// Marks `node` as disturbed in the window if `at` falls inside it.
fn disturb(w: &mut Window, node: u32, at: u64) {
    if (w.from..w.until).contains(&at) {
        w.disturbed.insert(node);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GRACE: u64 = 10_000;
    const REJOIN: u64 = 45_000;

    /// Three nodes: 0 asks, 1 and 2 serve `m` from `at`.
    fn oracle(at: u64) -> ModelOracle {
        let mut oracle = ModelOracle::new((GRACE, REJOIN), ("m", 20_000, 40_000, 3.0));
        for node in 0..3 {
            oracle.add_node();
            let models = if node == 0 { Vec::new() } else { vec!["m".to_owned()] };
            oracle.started(node, at, &models);
        }
        oracle
    }

    #[test]
    fn a_request_is_judged_once_a_server_has_served_for_the_grace() {
        let mut oracle = oracle(1_000);
        assert_eq!(oracle.available(0, "m", 5_000, 5_100), None, "within the grace");
        assert_eq!(oracle.available(0, "m", 11_000, 11_100), Some(1));
        assert_eq!(oracle.available(0, "other", 11_000, 11_100), None, "nobody serves it");
        oracle.changed(1, 12_000, &[]);
        assert_eq!(oracle.available(0, "m", 13_000, 13_100), Some(2), "node 1 stopped");
        oracle.crashed(2, 14_000);
        assert_eq!(oracle.available(0, "m", 15_000, 15_100), None, "node 2 is down");
        oracle.started(2, 16_000, &["m".to_owned()]);
        assert_eq!(oracle.available(0, "m", 30_000, 30_100), None, "restarted: the rejoin grace");
        assert_eq!(oracle.available(0, "m", 61_000, 61_100), Some(2));
    }

    #[test]
    fn a_partition_takes_the_servers_across_it_out_until_the_rejoin_grace_after_it_healed() {
        let mut oracle = oracle(1_000);
        // Node 2 alone on side A.
        oracle.cut(0, 20_000, vec![false, false, true]);
        assert_eq!(oracle.available(0, "m", 25_000, 25_100), Some(1));
        oracle.changed(1, 26_000, &[]);
        assert_eq!(oracle.available(0, "m", 27_000, 27_100), None, "node 2 is across the cut");
        assert_eq!(oracle.available(0, "m", 19_000, 21_000), None, "the cut came before the end");
        oracle.healed(0, 30_000);
        assert_eq!(oracle.available(0, "m", 40_000, 40_100), None, "healing");
        assert_eq!(oracle.available(0, "m", 76_000, 76_100), Some(2));
    }

    #[test]
    fn attempts_after_an_acceptance_twice_or_beyond_the_bound_are_caught() {
        let mut oracle = oracle(1_000);
        assert!(oracle.attempt(1, 1).is_ok());
        assert!(oracle.attempt(1, 1).unwrap_err().contains("twice"));
        assert!(oracle.attempt(2, 1).is_ok());
        assert!(oracle.accepted(2, 1, "m", 5_000).is_ok());
        assert!(oracle.attempt(2, 2).unwrap_err().contains("after node 1 had accepted it"));
        oracle.unknown(3, 2);
        assert!(oracle.attempt(3, 1).unwrap_err().contains("may have taken it"));
        for node in 0..CANDIDATES_MAX as u32 {
            assert!(oracle.attempt(4, 100 + node).is_ok());
        }
        assert!(oracle.attempt(4, 99).unwrap_err().contains("CANDIDATES_MAX"));
        // Accepting without serving is the routed checker's.
        assert!(oracle.accepted(5, 0, "m", 5_000).unwrap_err().contains("routed checker"));
    }

    #[test]
    fn the_spread_checker_judges_the_nodes_that_served_all_the_window() {
        let mut even = oracle(1_000);
        for req in 0..100 {
            even.accepted(req, 1 + (req % 2) as u32, "m", 25_000).unwrap();
        }
        assert!(even.spread(39_999).is_none(), "the window is still open");
        let (metrics, finding) = even.spread(40_000).unwrap();
        assert_eq!((metrics.accepted, metrics.nodes, finding), (100, 2, None));
        assert!((metrics.share_max - 1.0).abs() < 1e-9);
        // Three nodes, one taking everything: 3x the mean, over a bound of 2x. A node that
        // joined inside the window is not judged.
        let mut skewed = ModelOracle::new((GRACE, REJOIN), ("m", 20_000, 40_000, 2.0));
        for node in 0..4 {
            skewed.add_node();
            skewed.started(node, if node == 3 { 30_000 } else { 1_000 }, &["m".to_owned()]);
        }
        for req in 0..90 {
            skewed.accepted(req, 0, "m", 25_000).unwrap();
        }
        let (metrics, finding) = skewed.spread(40_000).unwrap();
        assert_eq!(metrics.nodes, 3);
        assert!(finding.unwrap().contains("node 0 took 90"));
    }
}
