//! Scenarios: what to simulate, as TOML files in `sim/scenarios/`.
//!
//! A scenario names the mesh (nodes, regions, protocol timings), the network (latency per
//! region pair, jitter, loss, duplication, bandwidth), the workload (capsule changes), the
//! faults with their times, and the checks (when faults stop, how long the mesh then has
//! to converge). An optional `[tasks]` section adds task traffic: services that accept
//! tasks, agent capsules that send them under signed grants, and a stream of submissions
//! (see [`TaskWorkload`]); an optional `[models]` section adds model traffic: nodes that
//! serve models and requests routed by the protocol's rule (see [`ModelWorkload`]). Every
//! field has a default; unknown keys are errors. The resolved scenario (defaults and
//! command-line overrides applied) is printed with every failure, so a run can be
//! reproduced from its seed and that text alone.

use murmur_protocol::limits::{ADVERT_TTL_MS_MAX, ADVERT_TTL_MS_MIN};
use serde::{Deserialize, Serialize};

mod artifacts;
mod models;
mod tasks;

pub use artifacts::{ArtifactExercise, ArtifactWorkload};
pub use models::{MODEL_REQUESTS_MAX, ModelChange, ModelExercise, ModelWorkload, ServedModel};
pub use tasks::{Exercise, TaskWorkload};

/// A whole scenario.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Scenario {
    pub name: String,
    pub description: String,
    /// Nodes at the start (churn adds and removes more).
    pub nodes: usize,
    /// Simulated seconds.
    pub duration_s: u64,
    pub protocol: ProtocolParams,
    pub topology: Topology,
    pub network: NetworkParams,
    pub workload: Workload,
    pub faults: Vec<Fault>,
    pub check: CheckParams,
    /// Task traffic; none when absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tasks: Option<TaskWorkload>,
    /// Artifact traffic; none when absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub artifacts: Option<ArtifactWorkload>,
    /// Model traffic; none when absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub models: Option<ModelWorkload>,
}

impl Default for Scenario {
    fn default() -> Self {
        Self {
            name: "unnamed".into(),
            description: String::new(),
            nodes: 50,
            duration_s: 120,
            protocol: ProtocolParams::default(),
            topology: Topology::default(),
            network: NetworkParams::default(),
            workload: Workload::default(),
            faults: Vec::new(),
            check: CheckParams::default(),
            tasks: None,
            artifacts: None,
            models: None,
        }
    }
}

/// Timings handed to every node's mesh state machine.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProtocolParams {
    pub refresh_s: u64,
    pub ttl_s: u64,
    pub sync_interval_s: u64,
    pub peers_target: usize,
    pub clock_skew_max_s: u64,
    /// A closed mesh: an authority (one per run) certifies every node but the
    /// `uncertified` byzantine ones, and every node admits only certified peers and adverts.
    pub closed: bool,
    /// A peer whose connection closed and that is not back within this long is declared
    /// departed with a departure notice (`MeshConfig::suspect_ms`); 0 turns notices off.
    pub suspect_s: u64,
    /// Announce early (`MeshConfig::announce_early`): a starting node republishes its advert
    /// when its first peer's gossipsub subscription arrives, as well as a second after.
    pub announce_early: bool,
    /// Nodes a directory holds (`DirectoryConfig::nodes_max`): small, to let a Sybil
    /// flood fill directories at a simulable size.
    pub directory_nodes_max: usize,
}

impl Default for ProtocolParams {
    fn default() -> Self {
        Self {
            refresh_s: 30,
            ttl_s: 90,
            sync_interval_s: 60,
            peers_target: 8,
            clock_skew_max_s: 30,
            closed: false,
            suspect_s: 10,
            announce_early: false,
            directory_nodes_max: murmur_protocol::limits::DIRECTORY_NODES_MAX,
        }
    }
}

/// How nodes first connect and how gossip spreads.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Topology {
    /// Each starting node's bootstrap peers: this many random live nodes, which its mesh
    /// dials (and dials again while they are not connected).
    pub bootstrap_peers: usize,
    /// Initial nodes start at uniform random times within this many seconds.
    pub join_spread_s: u64,
    /// Gossipsub mesh degree D: each node forwards to at most this many peers.
    pub gossip_degree: usize,
    /// Connections a node accepts at most.
    pub connections_max: usize,
    /// A request-response exchange fails after this long without an answer.
    pub request_timeout_ms: u64,
    /// murnode pings every connection this often and closes one whose ping goes unanswered
    /// for `ping_timeout_ms`: a connection a partition cuts closes that long after the cut
    /// (plus up to one interval, when its next ping was due), and its peers are redialled
    /// and, if still cut off, declared departed. A partition shorter than that closes nothing.
    pub ping_interval_ms: u64,
    /// 0: connections outlive partitions (only their messages are dropped).
    pub ping_timeout_ms: u64,
    /// Model gossipsub's lazy gossip too (IHAVE to a few peers outside the mesh each
    /// heartbeat, IWANT for what a node has not seen). Off by default: without it the model
    /// errs pessimistic, so a gap in how the mesh spreads adverts shows as a convergence
    /// failure instead of being repaired in the background; turn it on to check whether
    /// gossipsub's own repair would hide a finding.
    pub lazy_gossip: bool,
    /// Start in the steady state: at time 0 every initial node has published its advert,
    /// every initial directory holds all of them (one shared base, see
    /// `murmur_protocol::directory::DirectoryBase`), each node is connected to about
    /// `protocol.peers_target` random others with its gossip mesh formed, and refreshes are
    /// spread over the refresh interval. For meshes too large to form in a run (10,000
    /// nodes: 10⁸ advert deliveries); churn and later joins start cold as usual. Not with
    /// `[tasks]`, `[artifacts]` or `[models]`.
    pub warm_start: bool,
}

impl Default for Topology {
    fn default() -> Self {
        Self {
            bootstrap_peers: 3,
            join_spread_s: 5,
            gossip_degree: 6,
            connections_max: 64,
            request_timeout_ms: 10_000,
            ping_interval_ms: 15_000,
            ping_timeout_ms: 20_000,
            lazy_gossip: false,
            warm_start: false,
        }
    }
}

/// One region: a share of the nodes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Region {
    pub name: String,
    /// Fraction of nodes placed here (shares are normalized).
    pub share: f64,
}

/// The modelled network.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NetworkParams {
    pub regions: Vec<Region>,
    /// One-way base latency in ms, `latency_ms[i][j]` from region i to region j.
    pub latency_ms: Vec<Vec<u64>>,
    /// Extra delay drawn uniformly from `0..=jitter_ms` per message (this also reorders).
    pub jitter_ms: u64,
    /// Probability that a message is lost.
    pub loss: f64,
    /// Probability that a message is delivered twice.
    pub duplicate: f64,
    /// Uplink bandwidth per node in kilobits per second; 0 means unlimited.
    pub bandwidth_kbps: u64,
}

impl Default for NetworkParams {
    fn default() -> Self {
        Self {
            regions: vec![Region { name: "lan".into(), share: 1.0 }],
            latency_ms: vec![vec![1]],
            jitter_ms: 1,
            loss: 0.0,
            duplicate: 0.0,
            bandwidth_kbps: 0,
        }
    }
}

/// What nodes do besides existing.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Workload {
    /// Capsules each node hosts.
    pub capsules_per_node: usize,
    /// Every this many ms a random live node changes one of its capsules (0: never).
    pub change_interval_ms: u64,
    /// Every this many ms a random live node is asked "who hosts NAME" and its answer is
    /// checked against the truth (0: never).
    pub query_interval_ms: u64,
}

impl Default for Workload {
    fn default() -> Self {
        Self { capsules_per_node: 2, change_interval_ms: 2_000, query_interval_ms: 200 }
    }
}

/// A fault, active from `at_s` (until `until_s` where that applies).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Fault {
    /// Split the nodes in two groups that cannot reach each other (or, with `one_way`,
    /// group A cannot reach group B while B still reaches A). Group A is exactly the nodes
    /// listed in `nodes` (indices in creation order) where any are listed; otherwise
    /// `by_region` makes it the first region, and failing that it is `fraction` of the
    /// nodes, chosen at random.
    Partition {
        at_s: u64,
        until_s: u64,
        fraction: f64,
        by_region: bool,
        one_way: bool,
        #[serde(default)]
        nodes: Vec<usize>,
    },
    /// Crash `count` random live nodes, or exactly the nodes listed in `nodes` (indices in
    /// creation order); with `restart_after_s`, restart each that much later (its key
    /// survives; its directory, held in memory, does not).
    Crash {
        at_s: u64,
        #[serde(default)]
        count: usize,
        #[serde(default)]
        nodes: Vec<usize>,
        restart_after_s: Option<u64>,
    },
    /// `count` new nodes join at `at_s`, each dialling `topology.bootstrap_peers` live nodes.
    Join { at_s: u64, count: usize },
    /// Crash `fraction` of live nodes at once and restart them all `down_s` later.
    MassRestart { at_s: u64, fraction: f64, down_s: u64 },
    /// From `at_s` to `until_s`, about `per_s` times a second a random node leaves (crashes
    /// for good) and a new node joins.
    Churn { at_s: u64, until_s: u64, per_s: f64 },
    /// From `at_s` to `until_s`, `fraction` of nodes process every message `extra_ms` late.
    Slow { at_s: u64, until_s: u64, fraction: f64, extra_ms: u64 },
    /// Extra loss on every link from `at_s` to `until_s`.
    Loss { at_s: u64, until_s: u64, loss: f64 },
    /// `count` byzantine nodes join at `at_s` and misbehave every `interval_ms` until
    /// `until_s`: `forger` gossips adverts claiming other nodes' identities; `replayer`
    /// re-gossips old adverts it captured; `flooder` sends oversized and malformed messages;
    /// `unauthorized_sender` sends tasks straight onto the wire (no sending-side check) with
    /// no grant, forged, expired, stolen or mismatched grants, or to targets outside its
    /// grant (needs a `[tasks]` section); `corrupt_provider` announces every artifact and
    /// serves corrupted chunks (needs an `[artifacts]` section); `uncertified` runs a mesh
    /// node without a certificate and keeps dialling honest nodes (needs `protocol.closed`).
    Byzantine { at_s: u64, until_s: u64, role: ByzantineRole, count: usize, interval_ms: u64 },
    /// At `at_s` the authority revokes the certificates of `nodes` random live honest
    /// nodes (needs `protocol.closed`) and the grants of `grants` random agents (needs a
    /// `[tasks]` section with that many agents), signing one revocation list per key
    /// concerned (the certificate authority's, the grant authority's), and hands the
    /// lists to one random live honest node, which gossips them. The revoked nodes keep
    /// running and publishing, and the agents keep sending under their grants: the mesh
    /// must shut them out within `check.revocation_bound_s`.
    Revoke {
        at_s: u64,
        #[serde(default)]
        nodes: usize,
        #[serde(default)]
        grants: usize,
    },
}

/// What a byzantine node does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ByzantineRole {
    Forger,
    Replayer,
    Flooder,
    #[serde(alias = "unauthorized-sender")]
    UnauthorizedSender,
    /// Announces every artifact and serves chunks whose bytes do not match (needs an
    /// `[artifacts]` section).
    #[serde(alias = "corrupt-provider")]
    CorruptProvider,
    /// Has no certificate for the closed mesh; dials a random honest node every interval.
    Uncertified,
    /// Signs false departure notices about live honest nodes: a third name the advert it
    /// holds for the victim (the victim must refute them), the rest a sequence number the
    /// victim has not reached, far or near, with a made-up advert signature (they must
    /// change nothing, even once the victim publishes that sequence number).
    Liar,
    /// Mints a fresh identity every interval and gossips its advert: signed once, with the
    /// longest TTL, never refreshed, claiming an address in a random range. An open mesh's
    /// directories fill with nodes that do not exist; honest joins must still get in.
    Sybil,
}

impl Fault {
    /// When the fault stops acting (for checking that faults end before the liveness phase).
    #[must_use]
    pub fn ends_at_s(&self) -> u64 {
        match self {
            Self::Partition { until_s, .. }
            | Self::Churn { until_s, .. }
            | Self::Slow { until_s, .. }
            | Self::Loss { until_s, .. }
            | Self::Byzantine { until_s, .. } => *until_s,
            Self::Crash { at_s, restart_after_s, .. } => at_s + restart_after_s.unwrap_or(0),
            Self::Join { at_s, .. } | Self::Revoke { at_s, .. } => *at_s,
            Self::MassRestart { at_s, down_s, .. } => at_s + down_s,
        }
    }

    /// A short name for reports.
    #[must_use]
    pub fn label(&self) -> String {
        match self {
            Self::Partition { one_way: true, .. } => "partition(one-way)".into(),
            Self::Partition { .. } => "partition".into(),
            Self::Crash { .. } => "crash".into(),
            Self::Join { .. } => "join".into(),
            Self::MassRestart { .. } => "mass_restart".into(),
            Self::Churn { .. } => "churn".into(),
            Self::Slow { .. } => "slow".into(),
            Self::Loss { .. } => "loss".into(),
            Self::Revoke { .. } => "revoke".into(),
            Self::Byzantine { role, .. } => {
                format!("byzantine({})", serde_json::to_string(role).unwrap_or_default().trim_matches('"'))
            }
        }
    }
}

/// When the checks switch from safety-only to liveness, and how long convergence may take.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CheckParams {
    /// Faults must have ended by then; liveness is judged after it. Default: the latest
    /// fault end (0 without faults).
    pub faults_end_s: Option<u64>,
    /// After faults end, within this many seconds every live node must hold every live
    /// node's latest advert (see `propagation_grace_ms`) and no advert of a node dead for
    /// longer than an advert lives.
    pub liveness_bound_s: u64,
    /// An advert published at least this long ago counts as "latest": it must be held
    /// everywhere. Newer ones may still be on their way.
    pub propagation_grace_ms: u64,
    /// With this set, liveness also requires that no live node lists a node down for
    /// longer than this: departure notices, not TTLs, must have removed it (`None`: only
    /// nodes dead longer than an advert lives must be gone).
    pub departed_bound_s: Option<u64>,
    /// A revocation list must have shut out what it revokes within this many seconds of
    /// being handed to a node (or of an observer coming up, for one that was down): no
    /// directory of a live honest node accepts or still holds an advert of a node revoked
    /// longer ago, no node lets out or accepts a task under a grant revoked longer ago, and
    /// every live honest node holds the list (see `check::RevocationOracle`). Default
    /// ([`Scenario::revocation_bound_s`]): one sync interval plus one request timeout plus
    /// 5 s, what anti-entropy needs to repair a missed gossip even when one request is lost.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revocation_bound_s: Option<u64>,
}

impl Default for CheckParams {
    fn default() -> Self {
        Self {
            faults_end_s: None,
            liveness_bound_s: 60,
            propagation_grace_ms: 5_000,
            departed_bound_s: None,
            revocation_bound_s: None,
        }
    }
}

impl Scenario {
    /// The capsule names the workload's nodes host: a third as many as (node, capsule)
    /// slots, so each name has about three hosts.
    #[must_use]
    pub fn capsule_names(&self) -> Vec<String> {
        let pool = (self.nodes * self.workload.capsules_per_node / 3).max(1);
        (0..pool).map(|i| format!("svc-{i}")).collect()
    }

    /// The names node `ix` hosts, drawn from `names` ([`Scenario::capsule_names`]).
    #[must_use]
    pub fn hosted_names(&self, names: &[String], ix: usize) -> Vec<String> {
        let per = self.workload.capsules_per_node;
        let pool = names.len().max(1);
        (0..per)
            .map(|k| names.get((ix * per + k * 7) % pool).cloned().unwrap_or_else(|| format!("svc-{ix}")))
            .collect()
    }

    /// A region index drawn by the regions' shares.
    pub fn pick_region(&self, rng: &mut crate::rng::SimRng) -> usize {
        let regions = &self.network.regions;
        let total: f64 = regions.iter().map(|r| r.share.max(0.0)).sum();
        let mut x = rng.unit() * total;
        for (i, region) in regions.iter().enumerate() {
            x -= region.share.max(0.0);
            if x < 0.0 {
                return i;
            }
        }
        regions.len().saturating_sub(1)
    }

    /// Parses a scenario file.
    pub fn parse(text: &str) -> anyhow::Result<Self> {
        let scenario: Self = toml::from_str(text)?;
        scenario.validate()?;
        Ok(scenario)
    }

    /// The resolved scenario as TOML.
    #[must_use]
    pub fn to_toml(&self) -> String {
        toml::to_string(self).unwrap_or_else(|err| format!("# cannot print scenario: {err}"))
    }

    /// Adds one byzantine node of `role`, acting every `interval_ms` from `at_s` to
    /// `until_s`, unless the scenario declares one already: what the canary and the planted
    /// bugs need in order to act.
    pub fn ensure_byzantine(&mut self, role: ByzantineRole, (at_s, until_s): (u64, u64), interval_ms: u64) {
        if !self.faults.iter().any(|f| matches!(f, Fault::Byzantine { role: r, .. } if *r == role)) {
            self.faults.push(Fault::Byzantine { at_s, until_s, role, count: 1, interval_ms });
        }
    }

    /// When faults are over.
    #[must_use]
    pub fn faults_end_s(&self) -> u64 {
        self.check.faults_end_s.unwrap_or_else(|| self.faults.iter().map(Fault::ends_at_s).max().unwrap_or(0))
    }

    /// The revocation checker's bound in seconds (see [`CheckParams::revocation_bound_s`]).
    #[must_use]
    pub fn revocation_bound_s(&self) -> u64 {
        self.check.revocation_bound_s.unwrap_or_else(|| {
            self.protocol.sync_interval_s + self.topology.request_timeout_ms.div_ceil(1000) + 5
        })
    }

    /// When the task liveness phase starts: faults over, every initial node started, and no
    /// more submissions (seconds).
    #[must_use]
    pub fn tasks_settle_from_s(&self) -> u64 {
        let until = self.tasks.as_ref().map_or(0, |t| t.until_s);
        self.faults_end_s().max(self.topology.join_spread_s).max(until)
    }

    /// When the artifact liveness phase starts: faults over, every initial node started,
    /// and no more pull requests (seconds).
    #[must_use]
    pub fn artifacts_settle_from_s(&self) -> u64 {
        let until = self.artifacts.as_ref().map_or(0, |a| a.until_s);
        self.faults_end_s().max(self.topology.join_spread_s).max(until)
    }

    /// Checks the rules a run depends on; each error names its field.
    pub fn validate(&self) -> anyhow::Result<()> {
        let regions = self.network.regions.len();
        anyhow::ensure!(self.nodes >= 1, "nodes: at least 1");
        anyhow::ensure!(regions >= 1, "network.regions: at least one region");
        anyhow::ensure!(
            self.network.latency_ms.len() == regions
                && self.network.latency_ms.iter().all(|row| row.len() == regions),
            "network.latency_ms: must be a {regions}x{regions} matrix (one row and column per region)"
        );
        anyhow::ensure!((0.0..1.0).contains(&self.network.loss), "network.loss: must be in [0, 1)");
        anyhow::ensure!((0.0..1.0).contains(&self.network.duplicate), "network.duplicate: must be in [0, 1)");
        anyhow::ensure!(
            self.protocol.refresh_s >= 1 && self.protocol.refresh_s < self.protocol.ttl_s,
            "protocol.refresh_s: must be at least 1 and below ttl_s"
        );
        anyhow::ensure!(self.topology.gossip_degree >= 1, "topology.gossip_degree: at least 1");
        let nodes_max = murmur_protocol::limits::DIRECTORY_NODES_MAX;
        anyhow::ensure!(
            (16..=nodes_max).contains(&self.protocol.directory_nodes_max),
            "protocol.directory_nodes_max: must be 16..={nodes_max}"
        );
        let (ttl_min, ttl_max) = (ADVERT_TTL_MS_MIN.div_ceil(1000), ADVERT_TTL_MS_MAX / 1000);
        anyhow::ensure!(
            (ttl_min..=ttl_max).contains(&self.protocol.ttl_s),
            "protocol.ttl_s: must be {ttl_min}..={ttl_max} (what an advert may ask for)"
        );
        anyhow::ensure!(
            !self.topology.warm_start
                || (self.tasks.is_none() && self.artifacts.is_none() && self.models.is_none()),
            "topology.warm_start: not with [tasks], [artifacts] or [models] (their worlds start with the nodes)"
        );
        let end = self.faults_end_s();
        anyhow::ensure!(
            end + self.check.liveness_bound_s <= self.duration_s,
            "check: faults end at {end} s and liveness needs {} s more, beyond duration_s = {}",
            self.check.liveness_bound_s,
            self.duration_s
        );
        for fault in &self.faults {
            if let Fault::Partition { at_s, until_s, .. }
            | Fault::Churn { at_s, until_s, .. }
            | Fault::Slow { at_s, until_s, .. }
            | Fault::Loss { at_s, until_s, .. }
            | Fault::Byzantine { at_s, until_s, .. } = fault
            {
                anyhow::ensure!(at_s < until_s, "faults: {} must end after it starts", fault.label());
            }
            if let Fault::Byzantine { role: ByzantineRole::UnauthorizedSender, .. } = fault {
                anyhow::ensure!(
                    self.tasks.as_ref().is_some_and(|t| t.services >= 2 && t.agents >= 1),
                    "faults: byzantine role unauthorized_sender needs a [tasks] section with at least 2 services and 1 agent"
                );
            }
            if let Fault::Byzantine { role: ByzantineRole::CorruptProvider, .. } = fault {
                anyhow::ensure!(
                    self.artifacts.is_some(),
                    "faults: byzantine role corrupt_provider needs an [artifacts] section"
                );
            }
            if let Fault::Revoke { nodes, grants, .. } = *fault {
                anyhow::ensure!(nodes + grants >= 1, "faults: revoke must revoke at least one node or grant");
                anyhow::ensure!(
                    nodes == 0 || self.protocol.closed,
                    "faults: revoke with nodes needs a closed mesh (protocol.closed = true): node certificates are what it revokes"
                );
                anyhow::ensure!(
                    grants == 0 || self.tasks.as_ref().is_some_and(|t| t.agents >= grants),
                    "faults: revoke with grants = {grants} needs a [tasks] section with at least that many agents"
                );
            }
            if let Fault::Byzantine { role: ByzantineRole::Uncertified, .. } = fault {
                anyhow::ensure!(
                    self.protocol.closed,
                    "faults: byzantine role uncertified needs a closed mesh (protocol.closed = true)"
                );
            }
        }
        if let Some(tasks) = &self.tasks {
            tasks.validate(self.nodes)?;
            let from = self.tasks_settle_from_s();
            anyhow::ensure!(
                from + tasks.terminal_bound_s <= self.duration_s,
                "tasks.terminal_bound_s: tasks settle from {from} s and need {} s more, beyond duration_s = {}",
                tasks.terminal_bound_s,
                self.duration_s
            );
        }
        if let Some(models) = &self.models {
            models.validate(self.nodes, self.duration_s)?;
        }
        if let Some(artifacts) = &self.artifacts {
            artifacts.validate(self.nodes)?;
            let from = self.artifacts_settle_from_s();
            anyhow::ensure!(
                from + artifacts.liveness_bound_s <= self.duration_s,
                "artifacts.liveness_bound_s: pulls settle from {from} s and need {} s more, beyond duration_s = {}",
                artifacts.liveness_bound_s,
                self.duration_s
            );
        }
        Ok(())
    }
}
