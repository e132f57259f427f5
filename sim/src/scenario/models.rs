//! The `[models]` section: agents served as OpenAI-compatible models across the mesh.
//!
//! Some nodes serve models (their agents subscribe a model name; the node's advert lists
//! it), clients at random nodes request a model at a steady rate, and each request goes
//! where the protocol's `murmur_protocol::model::candidates` sends it, failing over only
//! past nodes that provably did not take it. Changes at set times make nodes start or stop
//! serving a model mid-run, so directories go stale and requests meet refusals.

use murmur_protocol::model::{ADVERT_MODELS_MAX, check_model_name};
use serde::{Deserialize, Serialize};

/// Requests one run may make at most (each is tracked until it ends).
pub const MODEL_REQUESTS_MAX: u64 = 1_000_000;

/// Model traffic.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModelWorkload {
    /// Requests start at this second…
    pub start_s: u64,
    /// …and stop at this second.
    pub until_s: u64,
    /// One request every this many ms, at a random live node.
    pub request_interval_ms: u64,
    /// How long a session stays open once accepted, drawn uniformly from
    /// `session_ms_min..=session_ms_max`.
    pub session_ms_min: u64,
    pub session_ms_max: u64,
    /// The served checker's grace: a request must be served when some node has served its
    /// model for this long, has been up and reachable from the requesting node (and the
    /// requesting node up) for this long, and stays so until the request ends. What a
    /// change needs to reach every directory: gossip takes under a second, a node that
    /// comes up fills its directory from its first sync.
    pub served_grace_ms: u64,
    /// A node that came back (restarted, or across a healed partition) counts for the
    /// served checker only this long after it did: a peer that lost it and dialled it once
    /// in vain may still declare it departed up to a dial backoff (30 s) plus a suspicion
    /// (up to 1.5 × `protocol.suspect_s`) later, without dialling again, and every
    /// directory then drops that live node until it refutes (see docs/src/simulator.md).
    /// Requests under way within this long after a partition healed are not judged.
    pub rejoin_grace_ms: u64,
    /// The spread checker: in `[spread_from_s, spread_until_s)` (0: no check), no node
    /// that served `spread_model` all that window (up, serving, unchanged) may take more
    /// than `spread_max` times the mean share of that model's acceptances.
    pub spread_model: String,
    pub spread_from_s: u64,
    pub spread_until_s: u64,
    pub spread_max: f64,
    /// The models requested, who serves them at the start, and how often each is asked for.
    pub served: Vec<ServedModel>,
    /// Nodes that start or stop serving models mid-run.
    pub changes: Vec<ModelChange>,
    /// Paths the run must have taken, or it is vacuous.
    pub exercise: Vec<ModelExercise>,
}

impl Default for ModelWorkload {
    fn default() -> Self {
        Self {
            start_s: 10,
            until_s: 40,
            request_interval_ms: 20,
            session_ms_min: 200,
            session_ms_max: 3_000,
            served_grace_ms: 10_000,
            rejoin_grace_ms: 45_000,
            spread_model: String::new(),
            spread_from_s: 0,
            spread_until_s: 0,
            spread_max: 3.0,
            served: Vec::new(),
            changes: Vec::new(),
            exercise: Vec::new(),
        }
    }
}

/// One model: the nodes that serve it from the start and its share of requests.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServedModel {
    pub name: String,
    /// Indices (in creation order) of the nodes whose agents serve it from the start; none
    /// for a model nobody serves (its requests must end "not found").
    #[serde(default)]
    pub nodes: Vec<usize>,
    /// Relative share of requests asking for it (shares are normalized).
    pub share: f64,
}

/// At `at_s`, node `node`'s agents serve exactly `models` from then on (empty: none). A
/// node that is down then serves them when it comes back.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelChange {
    pub at_s: u64,
    pub node: usize,
    pub models: Vec<String>,
}

/// A path through model routing a scenario claims to exercise.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelExercise {
    /// A request moved on to the next candidate (any provable refusal).
    Failover,
    /// A candidate answered `Refused` with `not_served` (it stopped serving the model).
    NotServed,
    /// A candidate was down: the dial was refused.
    Dead,
    /// A candidate was behind a partition: no stream within the open timeout.
    Unreachable,
    /// A session ended early because its serving node crashed (never sent elsewhere).
    Broken,
    /// A request found no node serving its model.
    NotFound,
    /// The spread checker judged acceptances.
    Spread,
}

impl ModelExercise {
    /// The name used in scenarios and reports.
    #[must_use]
    pub fn name(self) -> String {
        serde_json::to_string(&self).unwrap_or_default().trim_matches('"').to_owned()
    }
}

impl ModelWorkload {
    /// Requests this workload makes at most.
    #[must_use]
    pub fn requests_max(&self) -> u64 {
        let span_ms = self.until_s.saturating_sub(self.start_s) * 1000;
        span_ms / self.request_interval_ms.max(1) + 1
    }

    /// The models node `ix` serves from the start, sorted.
    #[must_use]
    pub fn initial(&self, ix: usize) -> Vec<String> {
        let mut models: Vec<String> =
            self.served.iter().filter(|m| m.nodes.contains(&ix)).map(|m| m.name.clone()).collect();
        models.sort();
        models
    }

    /// Checks the rules a run depends on; each error names its field.
    pub fn validate(&self, nodes: usize, duration_s: u64) -> anyhow::Result<()> {
        anyhow::ensure!(!self.served.is_empty(), "models.served: at least one model");
        anyhow::ensure!(self.start_s < self.until_s, "models.until_s: must be after start_s");
        anyhow::ensure!(self.until_s <= duration_s, "models.until_s: at most duration_s ({duration_s})");
        anyhow::ensure!(self.request_interval_ms >= 1, "models.request_interval_ms: at least 1");
        anyhow::ensure!(
            self.session_ms_min >= 1 && self.session_ms_min <= self.session_ms_max,
            "models.session_ms_min/max: 1 <= min <= max"
        );
        anyhow::ensure!(
            self.requests_max() <= MODEL_REQUESTS_MAX,
            "models: {} requests at most, above the {MODEL_REQUESTS_MAX} a run tracks",
            self.requests_max()
        );
        let mut names: Vec<&str> = Vec::new();
        for model in &self.served {
            check_model_name(&model.name).map_err(|e| anyhow::anyhow!("models.served: {e}"))?;
            anyhow::ensure!(!names.contains(&model.name.as_str()), "models.served: `{}` twice", model.name);
            names.push(&model.name);
            anyhow::ensure!(
                model.share.is_finite() && model.share >= 0.0,
                "models.served: the share of `{}` must be at least 0",
                model.name
            );
            anyhow::ensure!(
                model.nodes.iter().all(|&n| n < nodes),
                "models.served: `{}` names a node beyond the {nodes} initial nodes",
                model.name
            );
        }
        anyhow::ensure!(self.served.iter().any(|m| m.share > 0.0), "models.served: some share above 0");
        for change in &self.changes {
            anyhow::ensure!(
                change.node < nodes,
                "models.changes: node {} beyond the {nodes} initial nodes",
                change.node
            );
            anyhow::ensure!(
                change.at_s < duration_s,
                "models.changes: at_s {} beyond duration_s",
                change.at_s
            );
            anyhow::ensure!(
                change.models.len() <= ADVERT_MODELS_MAX,
                "models.changes: at most {ADVERT_MODELS_MAX} models"
            );
            for name in &change.models {
                check_model_name(name).map_err(|e| anyhow::anyhow!("models.changes: {e}"))?;
            }
        }
        if self.spread_until_s > 0 {
            anyhow::ensure!(
                self.served.iter().any(|m| m.name == self.spread_model),
                "models.spread_model: `{}` is not among models.served",
                self.spread_model
            );
            anyhow::ensure!(
                self.spread_from_s < self.spread_until_s && self.spread_until_s <= self.until_s,
                "models.spread_from_s/until_s: a window within the requests (from < until <= until_s)"
            );
            anyhow::ensure!(self.spread_max >= 1.0, "models.spread_max: at least 1 (the mean share)");
        }
        Ok(())
    }
}
