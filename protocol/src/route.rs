//! The task router: which node runs a task sent to `mesh://NAME`, and what happens when
//! that node fails before accepting it.
//!
//! Sans-IO, like the directory: the driver feeds submissions and delivery outcomes, and
//! carries out the outputs (deliver to a node — possibly this one — over `/murmur/task/1`).
//!
//! # Choosing a provider
//!
//! Candidates are the nodes whose live advert lists the capsule (only the pinned node for
//! `mesh://NAME@PEER`). This node comes first when it hosts the capsule; the others are
//! ordered by cost = round-trip time (ms; 1,000 when unknown) + load/10 (an idle node
//! costs 0 more, a saturated one 100 ms more), ties broken by node id, so every node
//! ranks the same candidates the same way.
//!
//! # Failover without running a task twice
//!
//! A task is tried on the next candidate only when the previous one **provably did not
//! accept it**: the request could not be delivered (dial failure, no connection) or was
//! refused for a reason that says nothing ran (`not_hosted`, `not_accepting`). A grant
//! refusal is final (another node would refuse it too). When the outcome is unknown (the
//! request went out and no answer came), the task is failed rather than retried: it may
//! be running at the first node. The router remembers that node as the task's *possible*
//! owner, and a retry of the same message (task ids are derived from the message, so a
//! retry is the same task) goes to that node alone: it answers with the task if it holds
//! it (acceptance is idempotent), and whatever else happens the retry fails again rather
//! than run the task somewhere else. At most once, never twice.

use std::collections::{BTreeMap, VecDeque};

use crate::directory::Directory;
use crate::identity::NodeId;
use crate::task::{Check, Submit, TaskId, TaskResponse, TaskSnapshot};
use crate::time::Millis;

/// Tasks being routed at once (awaiting acceptance).
pub const PENDING_MAX: usize = 4096;
/// Routed tasks whose owner (or possible owner) this router remembers (oldest forgotten
/// first).
pub const ROUTES_MAX: usize = 65_536;
/// Outputs queued for the driver.
pub const ROUTER_OUTPUTS_MAX: usize = 8192;
/// Candidates tried for one task.
pub const CANDIDATES_MAX: usize = 16;
/// Cost of a node whose round-trip time is unknown.
pub const RTT_UNKNOWN_MS: u32 = 1000;

/// What sending work to `node` costs as `local` sees it: nothing for itself, else one
/// plus the round trip in ms ([`RTT_UNKNOWN_MS`] when unmeasured) plus a tenth of the
/// node's advertised load (a saturated node costs as much as 100 ms more). Tasks and
/// model requests rank their candidates by it.
#[must_use]
pub fn cost(local: NodeId, node: NodeId, rtt_ms: Option<u32>, load: u16) -> u64 {
    if node == local { 0 } else { 1 + u64::from(rtt_ms.unwrap_or(RTT_UNKNOWN_MS)) + u64::from(load) / 10 }
}

/// What a provider's answer to a submit says: the task as accepted, or the refusal's
/// (check, reason). An answer that is neither is a `protocol` refusal.
pub fn submit_outcome(response: TaskResponse) -> Result<TaskSnapshot, (Check, String)> {
    match response {
        TaskResponse::Accepted(snapshot) | TaskResponse::Snapshot(snapshot) => Ok(snapshot),
        TaskResponse::Refused { check, reason } => Err((Check::named(&check), reason)),
        other => Err((Check::Protocol, format!("unexpected answer to a submit: {other:?}"))),
    }
}

/// How the router waits.
#[derive(Clone, Debug)]
pub struct RouterConfig {
    /// A delivery with no outcome after this long counts as lost (not retried).
    pub accept_timeout_ms: u64,
}

impl Default for RouterConfig {
    fn default() -> Self {
        Self { accept_timeout_ms: 15_000 }
    }
}

/// What the driver tells the router.
#[derive(Clone, Debug)]
pub enum Input {
    /// Route this task; `pin` restricts it to one node (`mesh://NAME@PEER`).
    Submit { request: Submit, pin: Option<NodeId> },
    /// `provider` accepted the task (or already had it).
    Accepted { task: TaskId, provider: NodeId },
    /// The request provably did not reach `provider`, or it refused without running
    /// anything for a reason another node may not share: try the next candidate.
    NotDelivered { task: TaskId, provider: NodeId, reason: String },
    /// `provider` refused the task for a reason every node would share (a grant check).
    Refused { task: TaskId, provider: NodeId, check: Check, reason: String },
    /// The request went out and no outcome came back.
    Lost { task: TaskId, provider: NodeId, reason: String },
    /// Time passed.
    Tick,
}

impl Input {
    /// The input for `provider`'s answer to a delivery of `task` (see [`submit_outcome`]):
    /// accepted; refused with a retryable check ([`Check::is_retryable`]), so not delivered
    /// (the next candidate is tried); or refused for good.
    #[must_use]
    pub fn answered<T>(task: TaskId, provider: NodeId, outcome: Result<T, (Check, String)>) -> Self {
        match outcome {
            Ok(_) => Self::Accepted { task, provider },
            Err((check, reason)) if check.is_retryable() => {
                Self::NotDelivered { task, provider, reason: format!("{check}: {reason}") }
            }
            Err((check, reason)) => Self::Refused { task, provider, check, reason },
        }
    }
}

/// What the router asks the driver to do, or reports.
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use]
pub enum Output {
    /// Deliver `request` to `provider` (this node included) and report the outcome.
    Deliver { provider: NodeId, request: Submit },
    /// The task has an owner.
    Routed { task: TaskId, owner: NodeId },
    /// Refused for good; nothing ran.
    Rejected { task: TaskId, check: Check, reason: String },
    /// Could not be placed, or its fate is unknown.
    Failed { task: TaskId, reason: String },
}

#[derive(Clone, Debug)]
struct Pending {
    request: Submit,
    candidates: VecDeque<NodeId>,
    current: NodeId,
    deadline: Millis,
    tried: Vec<String>,
    /// A retry of a task whose first delivery had an unknown outcome: `current` may hold
    /// it, so no other node is tried.
    only: bool,
}

/// Where a routed task went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Placement {
    /// The node accepted it.
    Owner(NodeId),
    /// The request reached the node and no answer came back: it may hold the task.
    Possible(NodeId),
}

/// Counters for metrics.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RouterStats {
    pub submitted: u64,
    pub routed: u64,
    pub failovers: u64,
    pub rejected: u64,
    pub failed: u64,
    pub duplicates: u64,
    /// Retries sent only to a possible owner (an earlier delivery had no answer).
    pub retries_to_possible_owner: u64,
}

/// The task router of one node. Call order as for the directory: `handle`, then drain
/// `poll_output`, and call `handle(now, Tick)` at `poll_timeout`.
#[derive(Debug)]
pub struct Router {
    config: RouterConfig,
    local: NodeId,
    pending: BTreeMap<TaskId, Pending>,
    routes: BTreeMap<TaskId, Placement>,
    route_order: VecDeque<TaskId>,
    outputs: VecDeque<Output>,
    stats: RouterStats,
}

impl Router {
    /// A router for node `local`.
    #[must_use]
    pub fn new(local: NodeId, config: RouterConfig) -> Self {
        Self {
            config,
            local,
            pending: BTreeMap::new(),
            routes: BTreeMap::new(),
            route_order: VecDeque::new(),
            outputs: VecDeque::new(),
            stats: RouterStats::default(),
        }
    }

    /// Feeds one input. `rtt` gives the round-trip time to a peer in ms, when known.
    pub fn handle(
        &mut self,
        now: Millis,
        input: Input,
        directory: &Directory,
        rtt: &dyn Fn(&NodeId) -> Option<u32>,
    ) {
        match input {
            Input::Submit { request, pin } => self.submit(now, request, pin, directory, rtt),
            Input::Accepted { task, provider } => {
                if self.pending.get(&task).is_some_and(|p| p.current == provider) {
                    self.pending.remove(&task);
                    self.remember(task, Placement::Owner(provider));
                    self.stats.routed += 1;
                    self.push(Output::Routed { task, owner: provider });
                }
            }
            Input::NotDelivered { task, provider, reason } => {
                self.next_candidate(now, task, provider, reason)
            }
            Input::Refused { task, provider, check, reason } => {
                if self.pending.get(&task).is_some_and(|p| p.current == provider) {
                    self.pending.remove(&task);
                    self.stats.rejected += 1;
                    self.push(Output::Rejected { task, check, reason });
                }
            }
            Input::Lost { task, provider, reason } => {
                if self.pending.get(&task).is_some_and(|p| p.current == provider) {
                    self.pending.remove(&task);
                    self.remember(task, Placement::Possible(provider));
                    self.stats.failed += 1;
                    self.push(Output::Failed {
                        task,
                        reason: format!("no answer from {provider} ({reason}); not retried elsewhere, since it may have accepted the task"),
                    });
                }
            }
            Input::Tick => self.expire(now),
        }
    }

    /// The next queued output.
    pub fn poll_output(&mut self) -> Option<Output> {
        crate::limits::pop_output(&mut self.outputs)
    }

    /// When the router next needs a tick (the earliest acceptance deadline).
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Millis> {
        self.pending.values().map(|p| p.deadline).min()
    }

    /// The owner of a task this router placed, if remembered.
    #[must_use]
    pub fn owner(&self, task: &TaskId) -> Option<NodeId> {
        match self.routes.get(task)? {
            Placement::Owner(node) => Some(*node),
            Placement::Possible(_) => None,
        }
    }

    /// The node that may hold a task whose delivery had no answer, if remembered: a retry
    /// of the task goes there alone.
    #[must_use]
    pub fn possible_owner(&self, task: &TaskId) -> Option<NodeId> {
        match self.routes.get(task)? {
            Placement::Possible(node) => Some(*node),
            Placement::Owner(_) => None,
        }
    }

    /// Whether a task is awaiting acceptance.
    #[must_use]
    pub fn is_pending(&self, task: &TaskId) -> bool {
        self.pending.contains_key(task)
    }

    /// Counters for metrics.
    #[must_use]
    pub const fn stats(&self) -> &RouterStats {
        &self.stats
    }

    /// The candidates for capsule `name`, best first.
    #[must_use]
    pub fn candidates(
        &self,
        now: Millis,
        name: &str,
        pin: Option<NodeId>,
        directory: &Directory,
        rtt: &dyn Fn(&NodeId) -> Option<u32>,
    ) -> Vec<NodeId> {
        let mut ranked: Vec<(u64, NodeId)> = directory
            .hosts(now, name)
            .map(|(record, _)| {
                let node = record.node();
                (cost(self.local, node, rtt(&node), record.advert().load), node)
            })
            .filter(|(_, node)| pin.is_none_or(|p| p == *node))
            .collect();
        ranked.sort();
        ranked.into_iter().map(|(_, node)| node).take(CANDIDATES_MAX).collect()
    }

    fn submit(
        &mut self,
        now: Millis,
        request: Submit,
        pin: Option<NodeId>,
        directory: &Directory,
        rtt: &dyn Fn(&NodeId) -> Option<u32>,
    ) {
        let task = request.task;
        self.stats.submitted += 1;
        if self.pending.contains_key(&task) {
            self.stats.duplicates += 1;
            return;
        }
        let possible = match self.routes.get(&task).copied() {
            Some(Placement::Owner(owner)) => {
                // The same message again: it already has an owner.
                self.stats.duplicates += 1;
                self.push(Output::Routed { task, owner });
                return;
            }
            Some(Placement::Possible(node)) => Some(node),
            None => None,
        };
        if self.pending.len() >= PENDING_MAX {
            self.stats.failed += 1;
            self.push(Output::Failed {
                task,
                reason: format!("more than {PENDING_MAX} tasks are being placed; try again"),
            });
            return;
        }
        let deadline = now.plus(self.config.accept_timeout_ms);
        if let Some(node) = possible {
            // A retry after an unknown outcome: only the node that may hold it, whether or
            // not it still advertises the capsule.
            self.stats.retries_to_possible_owner += 1;
            self.pending.insert(
                task,
                Pending {
                    request: request.clone(),
                    candidates: VecDeque::new(),
                    current: node,
                    deadline,
                    tried: Vec::new(),
                    only: true,
                },
            );
            self.push(Output::Deliver { provider: node, request });
            return;
        }
        let mut candidates: VecDeque<NodeId> =
            self.candidates(now, &request.capsule, pin, directory, rtt).into();
        let Some(first) = candidates.pop_front() else {
            let target = match pin {
                Some(node) => format!("mesh://{}@{node}", request.capsule),
                None => format!("mesh://{}", request.capsule),
            };
            self.stats.failed += 1;
            self.push(Output::Failed { task, reason: format!("no live node hosts {target}") });
            return;
        };
        self.pending.insert(
            task,
            Pending {
                request: request.clone(),
                candidates,
                current: first,
                deadline,
                tried: Vec::new(),
                only: false,
            },
        );
        self.push(Output::Deliver { provider: first, request });
    }

    fn next_candidate(&mut self, now: Millis, task: TaskId, provider: NodeId, reason: String) {
        let Some(pending) = self.pending.get_mut(&task).filter(|p| p.current == provider) else { return };
        if pending.only {
            // The node may still hold the task from the first delivery (a busy node
            // refuses before it looks): no other node may run it.
            self.pending.remove(&task);
            self.stats.failed += 1;
            self.push(Output::Failed {
                task,
                reason: format!("{provider} may hold this task from an earlier delivery that had no answer, and it did not take the retry ({reason}); not placed elsewhere"),
            });
            return;
        }
        pending.tried.push(format!("{provider}: {reason}"));
        match pending.candidates.pop_front() {
            Some(next) => {
                pending.current = next;
                pending.deadline = now.plus(self.config.accept_timeout_ms);
                let request = pending.request.clone();
                self.stats.failovers += 1;
                self.push(Output::Deliver { provider: next, request });
            }
            None => {
                let tried = pending.tried.join("; ");
                self.pending.remove(&task);
                self.stats.failed += 1;
                self.push(Output::Failed {
                    task,
                    reason: format!("no provider accepted the task ({tried})"),
                });
            }
        }
    }

    fn expire(&mut self, now: Millis) {
        let late: Vec<(TaskId, NodeId)> =
            self.pending.iter().filter(|(_, p)| p.deadline <= now).map(|(t, p)| (*t, p.current)).collect();
        for (task, provider) in late {
            self.pending.remove(&task);
            self.remember(task, Placement::Possible(provider));
            self.stats.failed += 1;
            self.push(Output::Failed {
                task,
                reason: format!("{provider} did not answer within {} ms; not retried elsewhere, since it may have accepted the task", self.config.accept_timeout_ms),
            });
        }
    }

    fn remember(&mut self, task: TaskId, placement: Placement) {
        if self.routes.insert(task, placement).is_none() {
            self.route_order.push_back(task);
            if self.route_order.len() > ROUTES_MAX
                && let Some(oldest) = self.route_order.pop_front()
            {
                self.routes.remove(&oldest);
            }
        }
    }

    fn push(&mut self, output: Output) {
        if self.outputs.len() >= ROUTER_OUTPUTS_MAX {
            self.outputs.pop_front();
        }
        self.outputs.push_back(output);
    }
}

#[cfg(test)]
mod tests;
