//! The `[tasks]` section: task traffic through the mesh.
//!
//! Services (`task-0`, `task-1`, …) accept tasks and are hosted by a few nodes each; agents
//! (`agent-0`, …) are sender capsules, each holding a grant the scenario's authority signed
//! that allows a few services. Submissions arrive at a steady rate: from clients at random
//! nodes, or from agents under their grants. Some are sent twice (idempotency), some retried
//! after failing, and services move between nodes so directories go stale (failover).

use murmur_protocol::limits::OWNER_QUEUE_MAX;
use serde::{Deserialize, Serialize};

/// Submissions one run may make at most (each is tracked by the oracle until the end).
pub const TASKS_MAX: u64 = 1_000_000;

/// Task traffic.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TaskWorkload {
    /// Capsules that accept tasks: `task-0` … `task-{services-1}`.
    pub services: usize,
    /// Initial nodes hosting each service, chosen at random.
    pub hosts_per_service: usize,
    /// Sender capsules `agent-0` … `agent-{agents-1}`, each with a grant.
    pub agents: usize,
    /// Initial nodes hosting each agent (agents never move).
    pub hosts_per_agent: usize,
    /// Services each agent's grant allows (`mesh://task-J` entries), chosen at random.
    pub grant_targets: usize,
    /// Submissions start at this second…
    pub start_s: u64,
    /// …and stop at this second.
    pub until_s: u64,
    /// One submission every this many ms.
    pub submit_interval_ms: u64,
    /// Share of submissions an agent sends under its grant; the rest come from clients
    /// entering at random nodes.
    pub agent_share: f64,
    /// Share of agent sends addressed to a service outside the agent's grant: the sending
    /// node's check must refuse them before anything leaves.
    pub outside_share: f64,
    /// Share of client submissions pinned to one host (`mesh://NAME@PEER`).
    pub pinned_share: f64,
    /// Share of submissions sent again at the same node with the same message id, up to
    /// `duplicate_within_ms` later, while the first is still being placed or after it
    /// was placed (a second send of an open request; the router must recognize it).
    pub duplicate_share: f64,
    pub duplicate_within_ms: u64,
    /// Share of failed submissions the client sends again with the same message id,
    /// `retry_after_ms` after the failure. After an unknown outcome (`lost`) the first
    /// owner may hold the task: the router must send the retry there alone, or the task
    /// runs twice (see docs/src/simulator.md, "What the simulator found").
    pub retry_share: f64,
    pub retry_after_ms: u64,
    /// Every this many ms a service moves: one host drops it and another node picks it up
    /// (0: never). Directories lag behind, so routers meet `not_hosted` and fail over.
    pub move_interval_ms: u64,
    /// Bytes of task text, drawn uniformly from `text_bytes_min..=text_bytes_max`.
    pub text_bytes_min: usize,
    pub text_bytes_max: usize,
    /// How long a task runs, drawn uniformly from `run_ms_min..=run_ms_max`.
    pub run_ms_min: u64,
    pub run_ms_max: u64,
    /// Tasks of one service a node runs at once.
    pub workers: usize,
    /// Tasks of one service a node holds queued; more are refused as `overloaded`. At most
    /// the owner machine's own bound, [`OWNER_QUEUE_MAX`] (what `murnode` runs with).
    pub queue_max: usize,
    /// The router's acceptance timeout (`RouterConfig::accept_timeout_ms`).
    pub accept_timeout_ms: u64,
    /// Once faults have ended and submissions stopped, every accepted task whose owner is
    /// alive must be terminal within this many seconds.
    pub terminal_bound_s: u64,
    /// Paths the run must have taken, or it is vacuous.
    pub exercise: Vec<Exercise>,
}

impl Default for TaskWorkload {
    fn default() -> Self {
        Self {
            services: 8,
            hosts_per_service: 3,
            agents: 4,
            hosts_per_agent: 2,
            grant_targets: 3,
            start_s: 10,
            until_s: 40,
            submit_interval_ms: 50,
            agent_share: 0.4,
            outside_share: 0.05,
            pinned_share: 0.05,
            duplicate_share: 0.05,
            duplicate_within_ms: 3_000,
            retry_share: 0.0,
            retry_after_ms: 2_000,
            move_interval_ms: 0,
            text_bytes_min: 16,
            text_bytes_max: 2_048,
            run_ms_min: 100,
            run_ms_max: 2_000,
            workers: 2,
            queue_max: 64,
            accept_timeout_ms: 15_000,
            terminal_bound_s: 30,
            exercise: Vec::new(),
        }
    }
}

/// A path through the task protocol a scenario claims to exercise.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Exercise {
    /// A router tried a second candidate after the first provably did not take the task.
    Failover,
    /// A delivery went out and no answer came (timeout or connection closed).
    Lost,
    /// A node crashed while owning tasks that had not finished.
    OwnerCrash,
    /// A restarted owner failed tasks that were running when it crashed.
    FailedOnRestart,
    /// A restarted owner queued again tasks it had accepted but not started.
    Requeued,
    /// A submission was sent again with the same message id while the first was under way.
    Duplicate,
    /// The sending node's grant check refused an agent's send.
    OutgoingRefused,
    /// An owner refused a task for a service it no longer hosts.
    NotHosted,
    /// A client's retry after an unknown outcome went only to the node that may hold it.
    RetryToPossibleOwner,
}

impl Exercise {
    /// The name used in scenarios and reports.
    #[must_use]
    pub fn name(self) -> String {
        serde_json::to_string(&self).unwrap_or_default().trim_matches('"').to_owned()
    }
}

impl TaskWorkload {
    /// Submissions this workload makes at most (duplicates and retries included).
    #[must_use]
    pub fn submissions_max(&self) -> u64 {
        let span_ms = self.until_s.saturating_sub(self.start_s) * 1000;
        (span_ms / self.submit_interval_ms.max(1) + 1) * 3
    }

    /// Checks the rules a run depends on; each error names its field.
    pub fn validate(&self, nodes: usize) -> anyhow::Result<()> {
        let share = |v: f64| (0.0..=1.0).contains(&v);
        anyhow::ensure!(self.services >= 1, "tasks.services: at least 1");
        anyhow::ensure!(
            (1..=nodes).contains(&self.hosts_per_service),
            "tasks.hosts_per_service: 1 to nodes ({nodes})"
        );
        anyhow::ensure!(
            self.agents == 0 || (1..=nodes).contains(&self.hosts_per_agent),
            "tasks.hosts_per_agent: 1 to nodes ({nodes})"
        );
        anyhow::ensure!(
            self.agents == 0 || (1..=self.services).contains(&self.grant_targets),
            "tasks.grant_targets: 1 to services ({})",
            self.services
        );
        anyhow::ensure!(self.start_s < self.until_s, "tasks.until_s: must be after start_s");
        anyhow::ensure!(self.submit_interval_ms >= 1, "tasks.submit_interval_ms: at least 1");
        for (field, value) in [
            ("agent_share", self.agent_share),
            ("outside_share", self.outside_share),
            ("pinned_share", self.pinned_share),
            ("duplicate_share", self.duplicate_share),
            ("retry_share", self.retry_share),
        ] {
            anyhow::ensure!(share(value), "tasks.{field}: must be in [0, 1]");
        }
        anyhow::ensure!(
            self.text_bytes_min >= 1
                && self.text_bytes_min <= self.text_bytes_max
                && self.text_bytes_max <= murmur_protocol::task::TASK_TEXT_BYTES_MAX,
            "tasks.text_bytes_min/max: 1 <= min <= max <= {}",
            murmur_protocol::task::TASK_TEXT_BYTES_MAX
        );
        anyhow::ensure!(self.run_ms_min <= self.run_ms_max, "tasks.run_ms_min: at most run_ms_max");
        anyhow::ensure!(self.workers >= 1, "tasks.workers: at least 1");
        anyhow::ensure!(
            (1..=OWNER_QUEUE_MAX).contains(&self.queue_max),
            "tasks.queue_max: 1 to {OWNER_QUEUE_MAX}"
        );
        anyhow::ensure!(self.accept_timeout_ms >= 1, "tasks.accept_timeout_ms: at least 1");
        anyhow::ensure!(
            self.submissions_max() <= TASKS_MAX,
            "tasks: {} submissions at most, above the {TASKS_MAX} a run tracks",
            self.submissions_max()
        );
        Ok(())
    }
}
