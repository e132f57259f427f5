//! The `[artifacts]` section: content-addressed blobs pulled in chunks between nodes.
//!
//! Artifacts `art-0`, `art-1`, … are blobs of a few MiB in fixed-size chunks. A few
//! initial nodes hold each one whole and announce it in their adverts. From `start_s` to
//! `until_s` a pull request arrives every `pull_interval_ms` at a random live node for a
//! random artifact it lacks. The first `pinned` artifacts are pinned: every node
//! periodically asks `replicate::should_hold` whether it is one of the
//! `replication_factor` holders among the nodes its directory knows, and pulls the
//! artifact if so. Byzantine providers (`kind = "byzantine"`, `role = "corrupt_provider"`
//! in `[[faults]]`) announce every artifact and serve chunks that do not match.

use serde::{Deserialize, Serialize};

use murmur_protocol::limits::ADVERT_ARTIFACTS_MAX;
use murmur_protocol::pull::{PULL_CHUNKS_MAX, PullConfig};
use murmur_protocol::replicate::REPLICATION_FACTOR_MAX;
use murmur_protocol::resolve::ResolveConfig;

/// Largest artifact a scenario may ask for: the chunk digests of every blob are kept per
/// node, so a run's memory grows with it.
pub const SIZE_MIB_MAX: u64 = 1024;

/// Pull requests one run may make at most (each is tracked until the end).
pub const PULLS_MAX: u64 = 100_000;

/// Artifact traffic.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ArtifactWorkload {
    /// Blobs `art-0` … `art-{artifacts-1}`; at most what one advert may list.
    pub artifacts: usize,
    /// Each blob's size in MiB, drawn uniformly from `size_mib_min..=size_mib_max` (plus
    /// a partial last chunk: the size is drawn in bytes).
    pub size_mib_min: u64,
    pub size_mib_max: u64,
    /// Chunk size in KiB (the wire's `/murmur/artifact/1` chunk).
    pub chunk_kib: u64,
    /// Initial nodes holding each artifact whole, chosen at random.
    pub providers_initial: usize,
    /// The first `pinned` artifacts are pinned with `replication_factor` copies.
    pub pinned: usize,
    pub replication_factor: usize,
    /// Every this many ms each node checks whether it should hold each pinned artifact.
    pub pin_check_interval_ms: u64,
    /// Every this many ms a pulling node reads its directory for the providers of each
    /// blob it pulls (adding new ones, removing those no longer listed).
    pub refresh_ms: u64,
    /// Pull requests start at this second…
    pub start_s: u64,
    /// …and stop at this second.
    pub until_s: u64,
    /// One pull request every this many ms, at a random live honest node.
    pub pull_interval_ms: u64,
    /// Pulls one node runs at once; a request beyond it is refused.
    pub pulls_per_node_max: usize,
    /// The pull scheduler's settings ([`PullConfig`]).
    pub per_provider: usize,
    pub probe: usize,
    pub in_flight_max: usize,
    pub timeout_ms: u64,
    pub hedge_after_ms: u64,
    pub strikes_max: u32,
    /// How long a resolve ask may go unanswered before it counts as failed
    /// ([`ResolveConfig::timeout_ms`]; the rest of the resolution's settings are `murnode`'s).
    pub resolve_timeout_ms: u64,
    /// Once faults have ended and pull requests stopped, within this many seconds every
    /// pull at a live node of an artifact a live honest node holds must be complete, and
    /// every pinned artifact held by `min(replication_factor, live honest nodes)` nodes.
    pub liveness_bound_s: u64,
    /// Paths the run must have taken, or it is vacuous.
    pub exercise: Vec<ArtifactExercise>,
}

impl Default for ArtifactWorkload {
    fn default() -> Self {
        let pull = PullConfig::default();
        Self {
            artifacts: 4,
            size_mib_min: 4,
            size_mib_max: 8,
            chunk_kib: 1024,
            providers_initial: 2,
            pinned: 1,
            replication_factor: 3,
            pin_check_interval_ms: 5_000,
            refresh_ms: 2_000,
            start_s: 10,
            until_s: 40,
            pull_interval_ms: 500,
            pulls_per_node_max: 8,
            per_provider: pull.per_provider,
            probe: pull.probe,
            in_flight_max: pull.in_flight_max,
            timeout_ms: pull.timeout_ms,
            hedge_after_ms: pull.hedge_after_ms,
            strikes_max: pull.strikes_max,
            resolve_timeout_ms: ResolveConfig::DEFAULT.timeout_ms,
            liveness_bound_s: 60,
            exercise: Vec::new(),
        }
    }
}

/// A path through the pull scheduler a scenario claims to exercise.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ArtifactExercise {
    /// A pull restarted after a crash from chunks already on disk.
    Resumed,
    /// A request went unanswered past the pull's timeout.
    Timeout,
    /// A slow request was asked of a second provider.
    Hedge,
    /// A provider crashed while a pull had requests out to it.
    ProviderCrash,
    /// A pinned artifact was pulled because `should_hold` said so.
    PinPulled,
    /// A pull that had lost every provider was rebuilt once the directory listed some.
    Rebuilt,
    /// A resolution found no trusted offer (every holder silent or unreachable) and was
    /// tried again at the node's next refresh.
    ResolveRetried,
}

impl ArtifactExercise {
    /// The name used in scenarios and reports.
    #[must_use]
    pub fn name(self) -> String {
        serde_json::to_string(&self).unwrap_or_default().trim_matches('"').to_owned()
    }
}

impl ArtifactWorkload {
    /// The pull scheduler's configuration.
    #[must_use]
    pub const fn pull_config(&self) -> PullConfig {
        PullConfig {
            per_provider: self.per_provider,
            probe: if self.probe < self.per_provider { self.probe } else { self.per_provider },
            in_flight_max: self.in_flight_max,
            timeout_ms: self.timeout_ms,
            hedge_after_ms: self.hedge_after_ms,
            strikes_max: self.strikes_max,
            plants: murmur_protocol::plant::Plants::NONE,
        }
    }

    /// Chunk size in bytes.
    #[must_use]
    pub const fn chunk_bytes(&self) -> u64 {
        self.chunk_kib * 1024
    }

    /// Checks the rules a run depends on; each error names its field.
    pub fn validate(&self, nodes: usize) -> anyhow::Result<()> {
        anyhow::ensure!(
            (1..=ADVERT_ARTIFACTS_MAX).contains(&self.artifacts),
            "artifacts.artifacts: 1 to {ADVERT_ARTIFACTS_MAX} (what one advert lists)"
        );
        anyhow::ensure!(
            self.size_mib_min >= 1
                && self.size_mib_min <= self.size_mib_max
                && self.size_mib_max <= SIZE_MIB_MAX,
            "artifacts.size_mib_min/max: 1 <= min <= max <= {SIZE_MIB_MAX}"
        );
        anyhow::ensure!(
            (1..=64 * 1024).contains(&self.chunk_kib),
            "artifacts.chunk_kib: 1 to 65536 (the pull scheduler's chunk bound)"
        );
        let chunks = (self.size_mib_max << 20).div_ceil(self.chunk_bytes());
        anyhow::ensure!(
            chunks <= PULL_CHUNKS_MAX as u64,
            "artifacts: {chunks} chunks per blob, above the pull scheduler's {PULL_CHUNKS_MAX}"
        );
        anyhow::ensure!(
            (1..=nodes).contains(&self.providers_initial),
            "artifacts.providers_initial: 1 to nodes ({nodes})"
        );
        anyhow::ensure!(self.pinned <= self.artifacts, "artifacts.pinned: at most artifacts");
        anyhow::ensure!(
            (1..=REPLICATION_FACTOR_MAX).contains(&self.replication_factor),
            "artifacts.replication_factor: 1 to {REPLICATION_FACTOR_MAX}"
        );
        anyhow::ensure!(self.pin_check_interval_ms >= 100, "artifacts.pin_check_interval_ms: at least 100");
        anyhow::ensure!(self.refresh_ms >= 100, "artifacts.refresh_ms: at least 100");
        anyhow::ensure!(self.start_s < self.until_s, "artifacts.until_s: must be after start_s");
        anyhow::ensure!(self.pull_interval_ms >= 1, "artifacts.pull_interval_ms: at least 1");
        let pulls = (self.until_s - self.start_s) * 1000 / self.pull_interval_ms + 1;
        anyhow::ensure!(
            pulls <= PULLS_MAX,
            "artifacts: {pulls} pull requests, above the {PULLS_MAX} a run tracks"
        );
        anyhow::ensure!(self.pulls_per_node_max >= 1, "artifacts.pulls_per_node_max: at least 1");
        anyhow::ensure!(
            self.per_provider >= 1 && self.per_provider <= self.in_flight_max,
            "artifacts.per_provider: 1 to in_flight_max"
        );
        anyhow::ensure!(
            self.probe >= 1,
            "artifacts.probe: at least 1 (above per_provider it is per_provider)"
        );
        anyhow::ensure!(self.timeout_ms >= 1, "artifacts.timeout_ms: at least 1");
        anyhow::ensure!(self.resolve_timeout_ms >= 1, "artifacts.resolve_timeout_ms: at least 1");
        anyhow::ensure!(self.strikes_max >= 1, "artifacts.strikes_max: at least 1");
        Ok(())
    }
}
