//! How a run is judged and reported: verdict, exit code, metrics, reproduction line.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde::Serialize;

use crate::check::Violation;
use crate::scenario::Scenario;
use crate::world::Options;

/// Exit codes of `murmur-sim`.
pub mod exit {
    /// Every check passed and every fault was exercised.
    pub const PASS: u8 = 0;
    /// Bad command line or scenario file.
    pub const USAGE: u8 = 2;
    /// The protocol code panicked.
    pub const CRASH: u8 = 3;
    /// A safety property broke.
    pub const SAFETY: u8 = 4;
    /// The mesh did not converge within the bound after faults stopped.
    pub const LIVENESS: u8 = 5;
    /// A configured fault had no effect, so the run proved less than it claims.
    pub const VACUOUS: u8 = 6;
}

/// The verdict on a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Pass,
    Crash,
    Safety,
    Liveness,
    Vacuous,
}

impl Verdict {
    /// The process exit code for this verdict.
    #[must_use]
    pub const fn exit_code(self) -> u8 {
        match self {
            Self::Pass => exit::PASS,
            Self::Crash => exit::CRASH,
            Self::Safety => exit::SAFETY,
            Self::Liveness => exit::LIVENESS,
            Self::Vacuous => exit::VACUOUS,
        }
    }
}

/// How often an injected fault acted (messages a partition dropped, nodes crashed, …).
#[derive(Clone, Debug, Serialize)]
pub struct FaultEffect {
    pub fault: String,
    pub effects: u64,
}

/// Convergence of individual adverts: time from publication until every live node held it.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Convergence {
    pub adverts: usize,
    pub p50_ms: u64,
    pub p99_ms: u64,
    pub max_ms: u64,
}

/// How long one kind of advert took to reach nodes of one region from nodes of another:
/// every acceptance by a node that was up when it was published (later ones caught up by
/// sync), from publication (not only the last node's).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Propagation {
    /// `join` (a node's first advert) or `change` (a later one).
    pub kind: &'static str,
    pub from: String,
    pub to: String,
    /// The one-way latency between the regions: no delivery can be faster.
    pub floor_ms: u64,
    pub deliveries: u64,
    pub p50_ms: u64,
    pub p99_ms: u64,
    pub max_ms: u64,
}

/// A delivery slower than this (ms) is counted apart, by whether gossip or anti-entropy
/// brought it: three times the slowest one-way path of the shipped scenarios.
pub const SLOW_DELIVERY_MS: u64 = 330;

/// A node up for less than this (ms) when an advert is published is still joining.
pub const YOUNG_MS: u64 = 5_000;

/// The value at quantile `p` of `sorted` (0 when empty).
#[must_use]
pub fn quantile(sorted: &[u64], p: f64) -> u64 {
    sorted.get(((sorted.len() as f64 - 1.0) * p).round() as usize).copied().unwrap_or(0)
}

impl Convergence {
    /// The summary of sorted per-advert times.
    #[must_use]
    pub fn of(sorted: &[u64]) -> Self {
        Self {
            adverts: sorted.len(),
            p50_ms: quantile(sorted, 0.5),
            p99_ms: quantile(sorted, 0.99),
            max_ms: sorted.last().copied().unwrap_or(0),
        }
    }
}

/// What a run measured.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Metrics {
    pub events: u64,
    /// Most events ever queued at once.
    pub queue_max: u64,
    pub wall_ms: f64,
    pub events_per_sec: f64,
    pub trace_records: u64,
    pub nodes_total: u64,
    /// Most connections one live node has at the end (nodes that every other node dials
    /// would sit at `topology.connections_max` and refuse newcomers).
    pub peers_max: u64,
    pub messages_sent: u64,
    pub bytes_sent: u64,
    pub messages_per_node_per_sec: f64,
    pub bytes_per_node_per_sec: f64,
    pub lost: u64,
    pub duplicated: u64,
    pub gossip_duplicates: u64,
    /// Lazy gossip: IHAVE messages sent, and messages fetched with IWANT (each one a node
    /// had not seen when the IHAVE arrived).
    pub gossip_ihave: u64,
    pub gossip_iwant: u64,
    pub gossip_rejected: u64,
    pub oversized_dropped: u64,
    pub byzantine_messages: u64,
    /// Adverts of identities Sybil nodes minted, accepted across all directories; adverts
    /// full directories evicted, and of them those of real (not minted) nodes.
    pub sybil_accepted: u64,
    pub evicted: u64,
    pub evicted_real: u64,
    pub queries: u64,
    pub refusals: BTreeMap<String, u64>,
    pub adverts_published: u64,
    /// Departure notices witnesses signed, those whose subject was alive when signed (a
    /// partition or lost link taken for a crash; each refuted by its subject), and adverts
    /// dropped by notices across all directories.
    pub departures_declared: u64,
    pub departures_false: u64,
    pub departures_applied: u64,
    /// Connections closed for an unanswered ping (a partition cut them).
    pub connections_cut: u64,
    pub convergence: Convergence,
    /// The same, for joins (each node's first advert) and for changes apart.
    pub convergence_joins: Convergence,
    pub convergence_changes: Convergence,
    /// Adverts whose convergence ended with a node that came up at or after their
    /// publication (it learnt of them by sync once connected, not by gossip).
    pub converged_by_later_nodes: u64,
    /// Convergence of the other adverts: propagation to nodes up when they were published.
    pub convergence_propagated: Convergence,
    /// From a node's start (during the run) until every live node held an advert of it,
    /// whichever advert got there first (`adverts` counts the nodes).
    pub joins_known_after_start: Convergence,
    /// Of those deliveries, the ones slower than [`SLOW_DELIVERY_MS`], by how they came.
    pub slow_deliveries_by_gossip: u64,
    pub slow_deliveries_by_sync: u64,
    /// Of those, the ones to a node that had joined less than [`YOUNG_MS`] before.
    pub slow_deliveries_to_joiners: u64,
    /// Every acceptance's delay from publication, by advert kind and region pair.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub propagation: Vec<Propagation>,
    pub liveness_after_faults_ms: Option<u64>,
    pub ed25519_checks: u64,
    pub verify_cache_hits: u64,
    /// Task traffic, for scenarios with a `[tasks]` section.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tasks: Option<TaskMetrics>,
    /// Artifact traffic, for scenarios with an `[artifacts]` section.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub artifacts: Option<ArtifactMetrics>,
    /// Revocations, for scenarios with a `revoke` fault.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revocations: Option<RevocationMetrics>,
    /// Model traffic, for scenarios with a `[models]` section.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub models: Option<ModelMetrics>,
}

/// What the model traffic of a run did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ModelMetrics {
    /// Requests the workload made, and of them: served (a node accepted them; `served_local`
    /// by the requesting node's own agents), failed by reason (`not_found`: no candidate at
    /// all; `exhausted`: every candidate provably refused, or `CANDIDATES_MAX` did;
    /// `unknown`: a candidate may have taken it, so it went nowhere else), dropped because
    /// the requesting node crashed, and still under way at the end.
    pub requests: u64,
    pub served: u64,
    pub served_local: u64,
    pub failed: BTreeMap<String, u64>,
    pub requester_crashed: u64,
    pub pending_at_end: u64,
    /// Moves to the next candidate, and by what the one before did: `dead` (dial refused),
    /// `unreachable` (no stream within the open timeout), `not_served`, `not_member`
    /// (refusals). With a plant, also moves after an acceptance (`after_accept`).
    pub failovers: u64,
    pub failovers_by_reason: BTreeMap<String, u64>,
    /// Most candidates one request tried.
    pub attempts_max: u64,
    /// From a request to its acceptance (served requests).
    pub accept_p50_ms: u64,
    pub accept_p99_ms: u64,
    pub accept_max_ms: u64,
    /// Sessions that ran to their end, ended early because their serving node crashed,
    /// or ended because the requesting node crashed.
    pub sessions_completed: u64,
    pub sessions_broken: u64,
    pub sessions_cancelled: u64,
    /// Requests the served checker judged (some node had served the model long enough and
    /// was reachable), and of them those not served.
    pub judged: u64,
    pub missed: u64,
    /// Acceptances over the whole run, by model and serving node.
    pub accepted_by_node: BTreeMap<String, BTreeMap<u32, u64>>,
    /// The spread checker's window, when the scenario sets one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spread: Option<SpreadMetrics>,
}

/// How one model's acceptances spread over its serving nodes in the spread window.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SpreadMetrics {
    pub model: String,
    pub from_s: u64,
    pub until_s: u64,
    /// Acceptances in the window by the nodes judged (those that served the model, up and
    /// unchanged, all the window).
    pub accepted: u64,
    pub nodes: u64,
    /// The largest and smallest share, as multiples of the mean share, and the bound on
    /// the largest (`models.spread_max`).
    pub share_max: f64,
    pub share_min: f64,
    pub bound: f64,
    pub shares: Vec<NodeShare>,
}

/// One serving node's part of the spread window's acceptances.
#[derive(Clone, Debug, Default, Serialize)]
pub struct NodeShare {
    pub node: u32,
    pub accepted: u64,
    /// Its fraction of the acceptances judged.
    pub share: f64,
}

/// What the revocations of a run did. "Nodes" here are the live honest nodes not revoked
/// themselves, the ones the revocation checker judges.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RevocationMetrics {
    /// The checker's bound (`check.revocation_bound_s`).
    pub bound_ms: u64,
    /// Lists the authorities signed, and the nodes and grants they revoked.
    pub lists: u64,
    pub nodes_revoked: u64,
    pub grants_revoked: u64,
    /// Lists nodes took, by how each came: gossip, an anti-entropy answer, the operator
    /// (the fault's hand-off), the node's own store as it started again.
    pub taken_gossip: u64,
    pub taken_sync: u64,
    pub taken_operator: u64,
    pub taken_store: u64,
    /// Worst time from a list's hand-off until a node that was up then took it (the last
    /// one to), and from a node coming up after a hand-off until it took the list.
    pub propagation_max_ms: Option<u64>,
    pub catch_up_max_ms: Option<u64>,
    /// What the lists stopped: adverts of revoked nodes refused, connections of revoked
    /// peers closed and held off, tasks under revoked grants refused at the sending node
    /// and at the owner.
    pub adverts_refused: u64,
    pub peers_expelled: u64,
    pub tasks_refused_sending: u64,
    pub tasks_refused_owner: u64,
    /// What nodes not holding a list yet let through within the bound: adverts of revoked
    /// nodes accepted, tasks under revoked grants let out and accepted.
    pub adverts_accepted_in_bound: u64,
    pub tasks_let_out_in_bound: u64,
    pub tasks_accepted_in_bound: u64,
    /// Revoked nodes still running at the end (they never stop on their own).
    pub revoked_alive_at_end: u64,
}

/// What the artifact traffic of a run did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ArtifactMetrics {
    /// Pull requests the workload made, and of them: for a blob the node held or was
    /// pulling already, and refused at the node's pull bound.
    pub pulls_requested: u64,
    pub pulls_redundant: u64,
    pub pulls_refused: u64,
    /// Pinned artifacts a node started pulling because `should_hold` said so.
    pub pins_pulled: u64,
    /// Pulls started (fresh, resumed after a crash, or rebuilt), resumed from chunks on
    /// disk, rebuilt after losing every provider, and completed.
    pub pulls_started: u64,
    pub pulls_resumed: u64,
    pub pulls_rebuilt: u64,
    pub pulls_completed: u64,
    /// From request to the last chunk written (completed pulls).
    pub completion_p50_ms: u64,
    pub completion_p99_ms: u64,
    pub completion_max_ms: u64,
    /// Chunk requests the pull schedulers made, and hedges among them.
    pub chunks_requested: u64,
    pub hedges: u64,
    pub chunks_written: u64,
    /// Chunks corrupt providers served, and bad chunks the pulls detected.
    pub corrupt_served: u64,
    pub bad_chunks_detected: u64,
    /// Providers dropped from a pull (bad bytes or too many failures).
    pub penalties: u64,
    pub timeouts: u64,
    pub failures: u64,
    /// Crashes of providers with chunk requests out to them.
    pub provider_crashes: u64,
    /// Resolutions started (one before every pull, and again when one found nothing
    /// trusted), and of them those that found nothing.
    pub resolves_started: u64,
    pub resolves_empty: u64,
    /// Resolve asks sent, and asks left unanswered (failed, timed out, or cut off by the
    /// grace once a trusted offer came).
    pub resolve_asks: u64,
    pub resolve_unanswered: u64,
    /// Forged offers corrupt providers sent, and those a resolution took into account
    /// (each refused; a forged candidate fails the run).
    pub forged_offers_sent: u64,
    pub forged_offers_heard: u64,
    /// Fewest live honest holders of a pinned artifact at the last liveness check.
    pub pinned_holders_min: Option<u64>,
    /// When every pull settled, after faults ended and pull requests stopped.
    pub settled_after_ms: Option<u64>,
}

/// What the task traffic of a run did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct TaskMetrics {
    /// Submissions the workload made (client and agent; agent sends the sending node
    /// refused included).
    pub submitted: u64,
    /// Submissions sent again with the same message id while the first was under way.
    pub duplicates: u64,
    /// Failed submissions a client sent again with the same message id.
    pub retries: u64,
    /// Router outcomes.
    pub routed: u64,
    pub rejected: u64,
    pub rejected_by_check: BTreeMap<String, u64>,
    pub failed: u64,
    /// Deliveries a router moved to the next candidate.
    pub failovers: u64,
    /// Submissions a router recognized as already pending or placed.
    pub router_duplicates: u64,
    /// Retries a router sent only to the node that may hold the task (an earlier
    /// delivery had an unknown outcome).
    pub retries_to_possible_owner: u64,
    /// Deliveries whose outcome was unknown (timeout, connection closed).
    pub lost: u64,
    /// Deliveries that provably never reached the provider (dial failed).
    pub not_delivered: u64,
    /// Requests an owner could not decode.
    pub undecodable: u64,
    /// Distinct tasks accepted, and how many of them reached a terminal state.
    pub accepted: u64,
    pub terminal: u64,
    /// Accepted by nodes that left for good before finishing them (their disks left too).
    pub orphaned: u64,
    /// Deliveries of a task the owner already held, answered as it was.
    pub idempotent_accepts: u64,
    pub executions: u64,
    pub completed: u64,
    /// Tasks a restarted owner failed because they were running when it crashed.
    pub failed_on_restart: u64,
    /// Tasks a restarted owner queued again.
    pub requeued: u64,
    /// Crashes of nodes holding unfinished tasks.
    pub owner_crashes: u64,
    /// Services moved between nodes.
    pub moves: u64,
    /// Agent sends the sending node's grant check refused.
    pub outgoing_refused: u64,
    /// Owners' refusals by check.
    pub refusals: BTreeMap<String, u64>,
    /// Per flaw, what unauthorized senders sent and how it was refused.
    pub unauthorized: Vec<AttackMetrics>,
    /// When every accepted task was terminal, after faults ended and submissions stopped.
    pub settled_after_ms: Option<u64>,
}

/// One flaw of unauthorized tasks.
#[derive(Clone, Debug, Default, Serialize)]
pub struct AttackMetrics {
    pub flaw: String,
    pub sent: u64,
    /// Reached an owner's checks.
    pub delivered: u64,
    pub refused: u64,
    /// Refused with the flaw's intended check.
    pub refused_intended: u64,
}

impl Metrics {
    /// Fills the convergence summary from sorted per-advert times.
    pub fn set_convergence(&mut self, sorted: &[u64]) {
        self.convergence = Convergence::of(sorted);
    }
}

/// A judged run.
#[derive(Clone, Debug, Serialize)]
pub struct Outcome {
    pub scenario: String,
    pub seed: u64,
    pub canary: bool,
    pub nodes: usize,
    pub duration_s: u64,
    pub verdict: Verdict,
    pub exit_code: u8,
    pub trace_hash: String,
    pub findings: Vec<String>,
    pub faults: Vec<FaultEffect>,
    pub metrics: Metrics,
}

impl Outcome {
    /// Applies the checks' results: safety first, then liveness, then fault coverage.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn judge(
        scenario: &Scenario,
        options: Options,
        trace_hash: String,
        mut metrics: Metrics,
        violations: Vec<Violation>,
        faults: Vec<FaultEffect>,
        converged_at: Option<u64>,
        liveness_gap: String,
        task_gap: Option<String>,
        artifact_gap: Option<String>,
        model_gap: Option<String>,
    ) -> Self {
        metrics.events_per_sec =
            if metrics.wall_ms > 0.0 { metrics.events as f64 / (metrics.wall_ms / 1000.0) } else { 0.0 };
        let faults_end_ms = scenario.faults_end_s().max(scenario.topology.join_spread_s) * 1000;
        metrics.liveness_after_faults_ms = converged_at.map(|at| at.saturating_sub(faults_end_ms));
        let (verdict, findings) = if !violations.is_empty() {
            (Verdict::Safety, violations.iter().map(|v| format!("at {} ms: {}", v.at_ms, v.what)).collect())
        } else if converged_at.is_none() {
            (
                Verdict::Liveness,
                vec![format!(
                    "no convergence within {} s after faults ended at {} s: {liveness_gap}",
                    scenario.check.liveness_bound_s,
                    scenario.faults_end_s()
                )],
            )
        } else if let Some(gap) = task_gap {
            let bound = scenario.tasks.as_ref().map_or(0, |t| t.terminal_bound_s);
            (
                Verdict::Liveness,
                vec![format!(
                    "tasks did not settle within {bound} s after faults ended and submissions stopped at {} s: {gap}",
                    scenario.tasks_settle_from_s()
                )],
            )
        } else if let Some(gap) = artifact_gap {
            let bound = scenario.artifacts.as_ref().map_or(0, |a| a.liveness_bound_s);
            (
                Verdict::Liveness,
                vec![format!(
                    "artifact pulls did not settle within {bound} s after faults ended and pull requests stopped at {} s: {gap}",
                    scenario.artifacts_settle_from_s()
                )],
            )
        } else if let Some(gap) = model_gap {
            (Verdict::Liveness, vec![format!("model requests: {gap}")])
        } else if let Some(idle) = faults.iter().find(|f| f.effects == 0) {
            (Verdict::Vacuous, vec![format!("fault {} never acted: this run does not test it", idle.fault)])
        } else {
            (Verdict::Pass, Vec::new())
        };
        Self {
            scenario: scenario.name.clone(),
            seed: options.seed,
            canary: options.canary,
            nodes: scenario.nodes,
            duration_s: scenario.duration_s,
            verdict,
            exit_code: verdict.exit_code(),
            trace_hash,
            findings,
            faults,
            metrics,
        }
    }

    /// A human summary; on failure, everything needed to reproduce.
    #[must_use]
    pub fn describe(&self, resolved: &Scenario, repro: &str) -> String {
        let m = &self.metrics;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{} seed {}: {:?} — {} nodes, {} s simulated in {:.0} ms ({:.0} events/s), trace {}",
            self.scenario,
            self.seed,
            self.verdict,
            m.nodes_total,
            self.duration_s,
            m.wall_ms,
            m.events_per_sec,
            &self.trace_hash[..16]
        );
        let _ = writeln!(
            out,
            "  adverts {} converged p50 {} ms p99 {} ms max {} ms; {:.1} msgs and {:.0} bytes per node per s",
            m.convergence.adverts,
            m.convergence.p50_ms,
            m.convergence.p99_ms,
            m.convergence.max_ms,
            m.messages_per_node_per_sec,
            m.bytes_per_node_per_sec
        );
        if let Some(ms) = m.liveness_after_faults_ms {
            let _ = writeln!(
                out,
                "  every live node held every advert {ms} ms after the faults and joins ended (checked each second)"
            );
        }
        if !m.propagation.is_empty() {
            let _ = writeln!(
                out,
                "  joins: {} converged p50 {} ms p99 {} ms; changes: {} converged p50 {} ms p99 {} ms; {} completed by a node up at or after publication (without them p50 {} ms p99 {} ms)",
                m.convergence_joins.adverts,
                m.convergence_joins.p50_ms,
                m.convergence_joins.p99_ms,
                m.convergence_changes.adverts,
                m.convergence_changes.p50_ms,
                m.convergence_changes.p99_ms,
                m.converged_by_later_nodes,
                m.convergence_propagated.p50_ms,
                m.convergence_propagated.p99_ms,
            );
            if m.joins_known_after_start.adverts > 0 {
                let _ = writeln!(
                    out,
                    "  {} nodes that started during the run were known to every node p50 {} ms p99 {} ms after their start",
                    m.joins_known_after_start.adverts,
                    m.joins_known_after_start.p50_ms,
                    m.joins_known_after_start.p99_ms,
                );
            }
            let _ = writeln!(
                out,
                "  deliveries over {SLOW_DELIVERY_MS} ms: {} by gossip, {} by anti-entropy; {} of them to nodes up for less than {} s",
                m.slow_deliveries_by_gossip,
                m.slow_deliveries_by_sync,
                m.slow_deliveries_to_joiners,
                YOUNG_MS / 1000
            );
            for kind in ["join", "change"] {
                let pairs: Vec<String> = m
                    .propagation
                    .iter()
                    .filter(|p| p.kind == kind)
                    .map(|p| {
                        format!("{}→{} {}/{}/{} ({})", p.from, p.to, p.p50_ms, p.p99_ms, p.max_ms, p.floor_ms)
                    })
                    .collect();
                if !pairs.is_empty() {
                    let _ = writeln!(out, "  {kind} deliveries p50/p99/max ms (floor): {}", pairs.join(", "));
                }
            }
        }
        if m.departures_declared > 0 || m.connections_cut > 0 {
            let _ = writeln!(
                out,
                "  departures: {} notices signed ({} naming live nodes), {} adverts dropped by notices; {} connections closed by unanswered pings",
                m.departures_declared, m.departures_false, m.departures_applied, m.connections_cut
            );
        }
        if let Some(t) = &m.tasks {
            let _ = writeln!(
                out,
                "  tasks {} submitted: routed {} rejected {} failed {} (lost {}), failovers {}; accepted {} executed {} completed {}, failed on restart {}, requeued {}; settled after {}",
                t.submitted,
                t.routed,
                t.rejected,
                t.failed,
                t.lost,
                t.failovers,
                t.accepted,
                t.executions,
                t.completed,
                t.failed_on_restart,
                t.requeued,
                t.settled_after_ms.map_or_else(|| "-".to_owned(), |ms| format!("{ms} ms"))
            );
        }
        if let Some(a) = &m.artifacts {
            let _ = writeln!(
                out,
                "  artifacts: {} resolves ({} asks, {} unanswered, {} found nothing, {} forged offers refused); {} pulls started, {} completed (p50 {} ms, p99 {} ms), {} resumed, {} rebuilt, {} for pins; chunks {} requested, {} written; {} corrupt served, {} detected; {} penalties; settled after {}",
                a.resolves_started,
                a.resolve_asks,
                a.resolve_unanswered,
                a.resolves_empty,
                a.forged_offers_heard,
                a.pulls_started,
                a.pulls_completed,
                a.completion_p50_ms,
                a.completion_p99_ms,
                a.pulls_resumed,
                a.pulls_rebuilt,
                a.pins_pulled,
                a.chunks_requested,
                a.chunks_written,
                a.corrupt_served,
                a.bad_chunks_detected,
                a.penalties,
                a.settled_after_ms.map_or_else(|| "-".to_owned(), |ms| format!("{ms} ms"))
            );
        }
        if let Some(r) = &m.revocations {
            let ms = |v: Option<u64>| v.map_or_else(|| "-".to_owned(), |ms| format!("{ms} ms"));
            let _ = writeln!(
                out,
                "  revocations: {} lists ({} nodes, {} grants), bound {} ms; the last node up took each after {}, nodes coming up later after {}; taken by gossip {}, anti-entropy {}, operator {}, store {}; refused {} adverts and {} + {} tasks (sending node + owner), expelled {} peers; let through before the list came {} adverts, {} + {} tasks",
                r.lists,
                r.nodes_revoked,
                r.grants_revoked,
                r.bound_ms,
                ms(r.propagation_max_ms),
                ms(r.catch_up_max_ms),
                r.taken_gossip,
                r.taken_sync,
                r.taken_operator,
                r.taken_store,
                r.adverts_refused,
                r.tasks_refused_sending,
                r.tasks_refused_owner,
                r.peers_expelled,
                r.adverts_accepted_in_bound,
                r.tasks_let_out_in_bound,
                r.tasks_accepted_in_bound
            );
        }
        if let Some(models) = &m.models {
            describe_models(&mut out, models);
        }
        for fault in &self.faults {
            let _ = writeln!(out, "  fault {}: acted {} times", fault.fault, fault.effects);
        }
        for finding in &self.findings {
            let _ = writeln!(out, "  FINDING: {finding}");
        }
        if self.verdict != Verdict::Pass {
            let _ = writeln!(out, "  reproduce: {repro}");
            let _ = writeln!(out, "  resolved scenario:\n{}", indent(&resolved.to_toml()));
        }
        out
    }
}

/// The model lines of [`Outcome::describe`]: totals, then the spread window as a table.
fn describe_models(out: &mut String, m: &ModelMetrics) {
    let counts = |map: &BTreeMap<String, u64>| {
        map.iter().map(|(k, v)| format!("{k} {v}")).collect::<Vec<_>>().join(", ")
    };
    let _ = writeln!(
        out,
        "  models: {} requests: served {} (local {}), failed {} ({}), requester crashed {}, under way at the end {}; failovers {} ({}); attempts max {}; accepted after p50 {} ms p99 {} ms max {} ms; sessions completed {} broken {} cancelled {}; served checker judged {} missed {}",
        m.requests,
        m.served,
        m.served_local,
        m.failed.values().sum::<u64>(),
        counts(&m.failed),
        m.requester_crashed,
        m.pending_at_end,
        m.failovers,
        counts(&m.failovers_by_reason),
        m.attempts_max,
        m.accept_p50_ms,
        m.accept_p99_ms,
        m.accept_max_ms,
        m.sessions_completed,
        m.sessions_broken,
        m.sessions_cancelled,
        m.judged,
        m.missed
    );
    if let Some(s) = &m.spread {
        let _ = writeln!(
            out,
            "  models spread of {} over {}–{} s: {} accepted by {} nodes, shares {:.2}x to {:.2}x the mean (bound {:.1}x)",
            s.model, s.from_s, s.until_s, s.accepted, s.nodes, s.share_min, s.share_max, s.bound
        );
        let _ = writeln!(out, "    {:>6} {:>9} {:>7}", "node", "accepted", "share");
        for share in &s.shares {
            let _ =
                writeln!(out, "    {:>6} {:>9} {:>6.1}%", share.node, share.accepted, share.share * 100.0);
        }
    }
}

fn indent(text: &str) -> String {
    text.lines().map(|l| format!("    {l}\n")).collect()
}
