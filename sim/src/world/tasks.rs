//! Task traffic: the workload, the task state of every node, and the task checks' hooks.
//!
//! Every node runs the protocol's task machines beside its mesh node, the very code
//! `murnode` runs: a [`TaskExchange`] (its router; in memory, a crash loses it) and an
//! owner (`murmur_protocol::owner::Owner`, rebuilt at a restart from the node's modelled
//! task database, which survives crashes as `murnode`'s does). This module is the workload
//! and [`TaskModel`], the task part of the modelled world; `exchange` carries
//! `/murmur/task/1` over the modelled network, `owner` carries out the owner's decisions,
//! `unauthorized` is the byzantine sender. None of them decides anything the machines
//! decide.
//!
//! The workload: services `task-J` hosted by a few nodes each, agents `agent-K` (sender
//! capsules) hosted by a few nodes each with a grant signed by the scenario's authority, and
//! a steady stream of submissions from clients at random nodes and from agents.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use murmur_protocol::advert::HostedCapsule;
use murmur_protocol::exchange::{RequestFailure, TaskExchange};
use murmur_protocol::grant::Grant;
use murmur_protocol::owner::Owner;
use murmur_protocol::revocation::Revocations;
use murmur_protocol::route::RouterStats;
use murmur_protocol::task::{Sender, Submit, TaskId, TaskRefusal, TaskState, check_outgoing};
use murmur_protocol::{Envelope, Millis, NodeId, PeerUrl, PublicKey, SecretKey, Signed};

use super::{EPOCH, Event, Ix, Options, Plant, Role, Sim};
use crate::check::{Attack, GrantTruth, TaskOracle};
use crate::fxhash::FxHashMap as HashMap;
use crate::report::{AttackMetrics, FaultEffect, TaskMetrics};
use crate::rng::SimRng;
use crate::scenario::{ByzantineRole, Exercise, Fault, Scenario, TaskWorkload};

/// A day, for grant validity windows.
const DAY_MS: u64 = 86_400_000;

/// Where the services and agents of a run are, and what agents may do.
#[derive(Debug)]
pub(super) struct Service {
    pub name: String,
    /// Nodes that host it now (ground truth).
    pub hosts: BTreeSet<Ix>,
}

#[derive(Debug)]
pub(super) struct Agent {
    pub name: String,
    pub hosts: Vec<Ix>,
    pub grant: Envelope,
    /// Indices of the services its grant allows.
    pub targets: BTreeSet<usize>,
}

/// A task a node owns, as its modelled task database holds it.
#[derive(Clone, Debug)]
pub(super) struct Stored {
    pub capsule: String,
    pub state: TaskState,
    pub ticket: u64,
    /// Some write of it was synchronous (only the planted `VolatileAccept` writes an
    /// acceptance in the background): a crash forgets a row that is not.
    pub durable: bool,
}

/// A submission the entry node's client remembers until its router gives an outcome.
#[derive(Clone, Debug)]
pub(super) struct Remembered {
    pub request: Arc<Submit>,
    pub pin: Option<NodeId>,
    pub retried: bool,
}

/// One node's task state.
#[derive(Debug)]
pub(super) struct NodeTasks {
    /// In memory: lost on a crash.
    pub exchange: Option<TaskExchange>,
    pub owner: Option<Owner>,
    pub timer_at: Option<u64>,
    /// The task database: survives crashes.
    pub store: BTreeMap<TaskId, Stored>,
    /// Submissions waiting for an outcome (the clients' memory), at most the router's
    /// pending bound.
    pub remembered: BTreeMap<TaskId, Remembered>,
    pub load: u16,
    pub rng: SimRng,
}

/// The task part of the modelled world: the task workload, every node's task state and
/// the task oracle, for the whole run.
#[derive(Debug)]
pub(super) struct TaskModel {
    pub config: TaskWorkload,
    pub authorities: Vec<PublicKey>,
    authority: SecretKey,
    pub nodes: Vec<NodeTasks>,
    pub services: Vec<Service>,
    pub agents: Vec<Agent>,
    pub links: HashMap<(Ix, Ix), SimRng>,
    pub rng: SimRng,
    pub oracle: TaskOracle,
    pub stats: TaskMetrics,
    /// Router counters of routers lost to crashes.
    pub router_totals: RouterStats,
    pub next_message: u64,
    pub settled_at: Option<u64>,
    pub last_gap: String,
    pub wire: super::exchange::Wire,
    pub kits: BTreeMap<Ix, super::unauthorized::Kit>,
}

/// Task events.
#[derive(Debug)]
pub(super) enum TaskEvent {
    /// The workload's next submission.
    Submit,
    /// A submission sent again with the same message id (a duplicate, or a retry).
    Resubmit {
        node: Ix,
        epoch: u32,
        request: Arc<Submit>,
        pin: Option<NodeId>,
        retry: bool,
    },
    /// A service moves between nodes.
    Move,
    RouterTimer {
        node: Ix,
        epoch: u32,
    },
    Dial {
        req: u64,
    },
    Request {
        to: Ix,
        from: Ix,
        req: u64,
        bytes: Arc<[u8]>,
        epoch: u32,
    },
    /// An answer as it travels: its bytes from the shipping codec.
    Response {
        to: Ix,
        req: u64,
        bytes: Arc<[u8]>,
        epoch: u32,
    },
    /// The request failed as libp2p would report it: never sent (a dial failure), or its
    /// connection closed after it went out.
    Failure {
        req: u64,
        failure: RequestFailure,
    },
    Timeout {
        req: u64,
    },
    Done {
        node: Ix,
        epoch: u32,
        task: TaskId,
    },
    /// The task liveness check.
    Settle,
}

impl TaskEvent {
    /// Tag and numbers for the trace hash.
    pub(super) fn trace(&self) -> (u8, u64, u64) {
        match self {
            Self::Submit => (30, 0, 0),
            Self::Resubmit { node, request, .. } => (31, u64::from(*node), task_word(&request.task)),
            Self::Move => (32, 0, 0),
            Self::RouterTimer { node, .. } => (33, u64::from(*node), 0),
            Self::Dial { req } => (34, *req, 0),
            Self::Request { to, req, .. } => (35, u64::from(*to), *req),
            Self::Response { to, req, .. } => (36, u64::from(*to), *req),
            Self::Failure { req, failure } => (37, *req, u64::from(failure.may_have_arrived())),
            Self::Timeout { req } => (38, *req, 0),
            Self::Done { node, task, .. } => (39, u64::from(*node), task_word(task)),
            Self::Settle => (40, 0, 0),
        }
    }

    /// The encoded message this event delivers, if any.
    pub(super) fn wire_bytes(&self) -> Option<&[u8]> {
        match self {
            Self::Request { bytes, .. } | Self::Response { bytes, .. } => Some(bytes),
            _ => None,
        }
    }
}

/// The first 8 bytes of a task id, for trace records.
pub(super) fn task_word(task: &TaskId) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&task.0[..8]);
    u64::from_le_bytes(word)
}

/// Whether `name` is a capsule the task workload placed (never moved by the advert
/// workload).
pub(super) fn is_task_capsule(name: &str) -> bool {
    ["task-", "agent-", "rogue-"].iter().any(|p| name.starts_with(p))
}

/// Adjusts the scenario for a planted bug: task traffic if there is none, and an
/// unauthorized sender for the grant checker to catch.
pub(super) fn prepare(scenario: &mut Scenario, options: Options) {
    let Some(plant) = options.plant else { return };
    if plant.is_model()
        || matches!(
            plant,
            Plant::WriteUnverified
                | Plant::TrustAnyOffer
                | Plant::OpenAdmission
                | Plant::RefuseWhenFull
                | Plant::IgnoreRevocations
        )
    {
        // An artifact, admission, directory or revocation bug: `artifacts::prepare`,
        // `revoking::prepare` or the world sets up what it needs. A model bug acts on the
        // scenario's own `[models]` section.
        return;
    }
    if scenario.tasks.is_none() {
        scenario.tasks = Some(TaskWorkload::default());
    }
    if plant == Plant::SkipIncomingCheck {
        let start_s = scenario.tasks.as_ref().map_or(10, |t| t.start_s);
        let until_s = scenario.faults_end_s().max(start_s + 20);
        scenario.ensure_byzantine(ByzantineRole::UnauthorizedSender, (start_s, until_s), 200);
    }
}

impl TaskModel {
    pub(super) fn new(config: TaskWorkload, seed: u64) -> Self {
        let authority = SecretKey::from_seed(SimRng::stream(seed, "tasks/authority").bytes32());
        Self {
            authorities: vec![authority.public()],
            authority,
            nodes: Vec::new(),
            services: Vec::new(),
            agents: Vec::new(),
            links: HashMap::default(),
            rng: SimRng::stream(seed, "tasks/workload"),
            oracle: TaskOracle::default(),
            stats: TaskMetrics::default(),
            router_totals: RouterStats::default(),
            next_message: 0,
            settled_at: None,
            last_gap: String::new(),
            wire: super::exchange::Wire::default(),
            kits: BTreeMap::new(),
            config,
        }
    }

    pub(super) fn add_node(&mut self, ix: Ix, seed: u64) {
        debug_assert_eq!(self.nodes.len(), ix as usize);
        self.nodes.push(NodeTasks {
            exchange: None,
            owner: None,
            timer_at: None,
            store: BTreeMap::new(),
            remembered: BTreeMap::new(),
            load: 0,
            rng: SimRng::stream(seed, &format!("task/{ix}")),
        });
    }

    /// A grant from the scenario's authority for `capsule`, allowing `targets`, valid in
    /// `[not_before, not_after)`, recorded as genuine.
    pub(super) fn issue(
        &mut self,
        capsule: &str,
        serial: u64,
        targets: &BTreeSet<String>,
        not_before: Millis,
        not_after: Millis,
    ) -> Envelope {
        let mut grant = Grant::new(capsule, serial, not_before, not_after);
        // Every name and pattern here is built from valid capsule names.
        grant.network = targets.iter().filter_map(|t| format!("mesh://{t}").parse().ok()).collect();
        let envelope = Signed::sign(grant, &self.authority)
            .expect("a grant of valid capsule names signs")
            .into_envelope();
        let truth =
            GrantTruth { capsule: capsule.to_owned(), targets: targets.clone(), not_before, not_after };
        self.oracle.issued(&envelope, truth);
        envelope
    }

    /// The key that signs the grants (and the lists revoking them).
    pub(super) const fn authority_key(&self) -> &SecretKey {
        &self.authority
    }

    fn next_message(&mut self) -> String {
        self.next_message += 1;
        format!("m{}", self.next_message)
    }
}

impl Sim {
    /// Places services and agents on the initial nodes, issues the agents' grants and
    /// schedules the workload.
    pub(super) fn tasks_populate(&mut self) {
        let Some(model) = self.tasks.as_deref_mut() else { return };
        let n = self.nodes.len();
        let c = model.config.clone();
        let mut all: Vec<Ix> = (0..n as Ix).collect();
        for j in 0..c.services {
            model.rng.shuffle(&mut all);
            let hosts: BTreeSet<Ix> = all.iter().take(c.hosts_per_service).copied().collect();
            model.services.push(Service { name: format!("task-{j}"), hosts });
        }
        let (not_before, not_after) = (EPOCH.minus(DAY_MS), EPOCH.plus(30 * DAY_MS));
        for k in 0..c.agents {
            model.rng.shuffle(&mut all);
            let hosts: Vec<Ix> = all.iter().take(c.hosts_per_agent).copied().collect();
            let mut services: Vec<usize> = (0..c.services).collect();
            model.rng.shuffle(&mut services);
            let targets: BTreeSet<usize> = services.into_iter().take(c.grant_targets).collect();
            let names = targets.iter().map(|j| format!("task-{j}")).collect();
            let name = format!("agent-{k}");
            let grant = model.issue(&name, k as u64 + 1, &names, not_before, not_after);
            for &h in &hosts {
                model.oracle.hosts_sender(&name, h);
            }
            model.agents.push(Agent { name, hosts, grant, targets });
        }
        let placed: Vec<(Ix, String)> = model
            .services
            .iter()
            .flat_map(|s| s.hosts.iter().map(|h| (*h, s.name.clone())))
            .chain(model.agents.iter().flat_map(|a| a.hosts.iter().map(|h| (*h, a.name.clone()))))
            .collect();
        for (ix, name) in placed {
            self.add_capsule(ix, &name, false);
        }
        let start = c.start_s * 1000;
        self.schedule(start, Event::Task(TaskEvent::Submit));
        if c.move_interval_ms > 0 {
            self.schedule(start + c.move_interval_ms, Event::Task(TaskEvent::Move));
        }
        self.schedule(self.scenario.tasks_settle_from_s() * 1000, Event::Task(TaskEvent::Settle));
    }

    /// Node `ix` hosts `name` from now on (telling its mesh node when `announce`).
    pub(super) fn add_capsule(&mut self, ix: Ix, name: &str, announce: bool) {
        let capsules = &mut self.nodes[ix as usize].capsules;
        if capsules.iter().any(|c| c.name == name) {
            return;
        }
        capsules.push(HostedCapsule { name: name.to_owned(), digest: None, version: "1.0.0".into() });
        capsules.sort();
        if announce && self.nodes[ix as usize].alive() {
            let capsules = self.nodes[ix as usize].capsules.clone();
            self.handle(ix, murmur_protocol::mesh::Input::SetHosted { capsules }, None);
        }
    }

    pub(super) fn task_event(&mut self, event: TaskEvent) {
        match event {
            TaskEvent::Submit => self.workload_submit(),
            TaskEvent::Resubmit { node, epoch, request, pin, retry } => {
                if self.is_current(node, epoch)
                    && let Some(model) = self.tasks.as_deref_mut()
                {
                    // A duplicate is a second send of a message whose first send has not
                    // failed (a double click, a proxy re-sending an open request): the
                    // router must recognize it. A send after a failure is a retry.
                    let task = request.task;
                    let under_way = model.nodes[node as usize]
                        .exchange
                        .as_ref()
                        .map(TaskExchange::router)
                        .is_some_and(|r| r.is_pending(&task) || r.owner(&task).is_some());
                    if retry {
                        model.stats.retries += 1;
                    } else if under_way {
                        model.stats.duplicates += 1;
                    } else {
                        return;
                    }
                    self.submit_task(node, request, pin, retry);
                }
            }
            TaskEvent::Move => self.move_service(),
            TaskEvent::RouterTimer { node, epoch } => {
                let now = self.now;
                if self.is_current(node, epoch)
                    && let Some(model) = self.tasks.as_deref_mut()
                    && model.nodes[node as usize].timer_at == Some(now)
                {
                    model.nodes[node as usize].timer_at = None;
                    self.exchange(node, murmur_protocol::exchange::Input::Tick);
                }
            }
            TaskEvent::Dial { req } => self.dialled(req),
            TaskEvent::Request { to, from, req, bytes, epoch } => {
                if self.is_current(to, epoch) {
                    self.task_requested(to, from, req, &bytes);
                }
            }
            TaskEvent::Response { to, req, bytes, epoch, .. } => {
                if self.is_current(to, epoch) {
                    self.task_answered(to, req, &bytes);
                }
            }
            TaskEvent::Failure { req, failure } => self.task_failed(req, failure, "connection closed"),
            TaskEvent::Timeout { req } => self.task_failed(req, RequestFailure::Timeout, "timeout"),
            TaskEvent::Done { node, epoch, task } => {
                if self.is_current(node, epoch) {
                    self.task_done(node, task);
                }
            }
            TaskEvent::Settle => self.settle_check(),
        }
    }

    /// One submission: from an agent under its grant, or from a client.
    fn workload_submit(&mut self) {
        let Some(model) = self.tasks.as_deref_mut() else { return };
        let c = &model.config;
        if self.now >= c.until_s * 1000 {
            return;
        }
        let interval = c.submit_interval_ms;
        let agent = !model.agents.is_empty() && model.rng.chance(c.agent_share);
        self.schedule(self.now + interval, Event::Task(TaskEvent::Submit));
        if agent {
            self.agent_send();
        } else {
            self.client_send();
        }
    }

    fn text(&mut self) -> String {
        let Some(model) = self.tasks.as_deref_mut() else { return String::new() };
        let len = model.rng.between(model.config.text_bytes_min as u64, model.config.text_bytes_max as u64);
        "x".repeat(len as usize)
    }

    fn client_send(&mut self) {
        let live = self.live_honest();
        let text = self.text();
        let Some(model) = self.tasks.as_deref_mut() else { return };
        if live.is_empty() {
            return;
        }
        let entry = live[model.rng.below(live.len() as u64) as usize];
        let j = model.rng.below(model.services.len() as u64) as usize;
        let pin = if model.rng.chance(model.config.pinned_share) && !model.services[j].hosts.is_empty() {
            let hosts: Vec<Ix> = model.services[j].hosts.iter().copied().collect();
            Some(hosts[model.rng.below(hosts.len() as u64) as usize])
        } else {
            None
        };
        let message = model.next_message();
        let request = Submit {
            task: TaskId::placed(&self.nodes[entry as usize].id, &Sender::Client, &message),
            text,
            sender: Sender::Client,
            capsule: model.services[j].name.clone(),
            context: None,
            message,
            traceparent: None,
            settle_wait_ms: 0,
        };
        model.stats.submitted += 1;
        let pin = pin.map(|p| self.nodes[p as usize].id);
        self.submit_fresh(entry, request, pin);
    }

    /// An agent sends to a service: the sending node's grant check first, as
    /// `murnode`'s message router does.
    fn agent_send(&mut self) {
        let text = self.text();
        let Some(model) = self.tasks.as_deref_mut() else { return };
        let k = model.rng.below(model.agents.len() as u64) as usize;
        let nodes = &self.nodes;
        let hosts: Vec<Ix> =
            model.agents[k].hosts.iter().copied().filter(|h| nodes[*h as usize].alive()).collect();
        if hosts.is_empty() {
            return;
        }
        let host = hosts[model.rng.below(hosts.len() as u64) as usize];
        let agent = &model.agents[k];
        let outside: Vec<usize> = (0..model.services.len()).filter(|j| !agent.targets.contains(j)).collect();
        let j = if !outside.is_empty() && model.rng.chance(model.config.outside_share) {
            outside[model.rng.below(outside.len() as u64) as usize]
        } else {
            let inside: Vec<usize> = agent.targets.iter().copied().collect();
            inside[model.rng.below(inside.len() as u64) as usize]
        };
        let service = model.services[j].name.clone();
        let (name, grant) = (agent.name.clone(), agent.grant.clone());
        let target = PeerUrl::Mesh { capsule: service.clone(), node: None };
        let now = self.clock(host);
        let Some(model) = self.tasks.as_deref_mut() else { return };
        // The sending node's lists, as `murnode`'s router reads its mesh's. A revoked node
        // is one the authority stopped trusting: it sends without checking (a compromised
        // node would), and the owners' check must stop what it should not send.
        let careless = self.nodes[host as usize].revoked.is_some();
        let none = Revocations::default();
        let lists = self.nodes[host as usize].mesh.as_ref().map_or(&none, |m| m.directory().revocations());
        let checked = if careless {
            Ok(())
        } else {
            check_outgoing(Some(&grant), &model.authorities, lists, now, &name, None, &target)
        };
        let allowed = checked.is_ok();
        model.stats.submitted += 1;
        let revoked = matches!(checked, Err(TaskRefusal::GrantRevoked { .. }));
        // A revoked grant is refused before its targets are looked at: the revocation
        // checker judges that refusal, the grant checker the others.
        let judged = if revoked || careless {
            Ok(())
        } else {
            model.oracle.outgoing(&name, &grant, &service, allowed)
        };
        if let Err(what) = judged {
            self.violation(what);
            return;
        }
        if revoked {
            self.revocation_send_refused(host, &grant);
        }
        let Some(model) = self.tasks.as_deref_mut() else { return };
        if !allowed {
            model.stats.outgoing_refused += 1;
            return;
        }
        let message = model.next_message();
        let sender = Sender::Capsule { name, grant };
        let task = TaskId::placed(&self.nodes[host as usize].id, &sender, &message);
        if let Sender::Capsule { grant, .. } = &sender {
            self.revocation_task_sent(task, grant, Some(host));
        }
        let request = Submit {
            task,
            text,
            sender,
            capsule: service,
            context: None,
            message,
            traceparent: None,
            settle_wait_ms: 0,
        };
        self.submit_fresh(host, request, None);
    }

    /// A new submission at `node`, perhaps sent again later with the same message id.
    fn submit_fresh(&mut self, node: Ix, request: Submit, pin: Option<NodeId>) {
        let request = Arc::new(request);
        let Some(model) = self.tasks.as_deref_mut() else { return };
        if model.rng.chance(model.config.duplicate_share) {
            let at = self.now + model.rng.between(0, model.config.duplicate_within_ms);
            let epoch = self.nodes[node as usize].epoch;
            let resubmit = TaskEvent::Resubmit { node, epoch, request: request.clone(), pin, retry: false };
            self.schedule(at, Event::Task(resubmit));
        }
        self.submit_task(node, request, pin, false);
    }

    /// Hands a submission to the router of `node`.
    fn submit_task(&mut self, node: Ix, request: Arc<Submit>, pin: Option<NodeId>, retried: bool) {
        let Some(model) = self.tasks.as_deref_mut() else { return };
        let task = request.task;
        model.oracle.submitted(node, task, self.now);
        let remembered = &mut model.nodes[node as usize].remembered;
        if remembered.len() < murmur_protocol::route::PENDING_MAX {
            remembered.entry(task).or_insert(Remembered { request: request.clone(), pin, retried });
        }
        self.trace.record(41, self.now, u64::from(node), task_word(&task));
        let input = murmur_protocol::exchange::Input::Submit { request: (*request).clone(), pin };
        self.exchange(node, input);
    }

    /// The router of `node` gave `task` an outcome; a client may retry a failure.
    pub(super) fn resolved(&mut self, node: Ix, task: &TaskId, failed: bool) {
        let epoch = self.nodes[node as usize].epoch;
        let Some(model) = self.tasks.as_deref_mut() else { return };
        model.oracle.resolved(node, task);
        let Some(remembered) = model.nodes[node as usize].remembered.remove(task) else { return };
        if failed && !remembered.retried && model.rng.chance(model.config.retry_share) {
            let at = self.now + model.config.retry_after_ms;
            let Remembered { request, pin, .. } = remembered;
            self.schedule(at, Event::Task(TaskEvent::Resubmit { node, epoch, request, pin, retry: true }));
        }
    }

    /// A service moves: a live host drops it and a live honest node that lacks it takes
    /// it up. Directories learn of it at the next adverts; until then routers meet
    /// `not_hosted` and fail over.
    fn move_service(&mut self) {
        let live = self.live_honest();
        let Some(model) = self.tasks.as_deref_mut() else { return };
        let c = &model.config;
        if self.now >= c.until_s * 1000 {
            return;
        }
        let interval = c.move_interval_ms;
        let j = model.rng.below(model.services.len() as u64) as usize;
        let service = &model.services[j];
        let leaving: Vec<Ix> = service.hosts.iter().copied().filter(|h| live.contains(h)).collect();
        let joining: Vec<Ix> = live.iter().copied().filter(|n| !service.hosts.contains(n)).collect();
        let mut moved = None;
        if leaving.len() >= 2 && !joining.is_empty() {
            let from = leaving[model.rng.below(leaving.len() as u64) as usize];
            let to = joining[model.rng.below(joining.len() as u64) as usize];
            let service = &mut model.services[j];
            service.hosts.remove(&from);
            service.hosts.insert(to);
            model.stats.moves += 1;
            moved = Some((from, to, service.name.clone()));
        }
        self.schedule(self.now + interval, Event::Task(TaskEvent::Move));
        if let Some((from, to, name)) = moved {
            let capsules = &mut self.nodes[from as usize].capsules;
            capsules.retain(|c| c.name != name);
            let capsules = capsules.clone();
            self.handle(from, murmur_protocol::mesh::Input::SetHosted { capsules }, None);
            self.add_capsule(to, &name, true);
        }
    }

    /// Live honest nodes in index order, revoked ones left out: the world no longer
    /// enters tasks there, moves services there or revokes them again.
    pub(super) fn live_honest(&self) -> Vec<Ix> {
        (0..self.nodes.len() as Ix)
            .filter(|&i| {
                let n = &self.nodes[i as usize];
                n.alive() && n.role == Role::Honest && n.revoked.is_none()
            })
            .collect()
    }

    /// After faults end and submissions stop: is every accepted task of a live owner
    /// terminal, and every submission at a live node answered? Rechecked every second
    /// until it holds or the bound passes.
    fn settle_check(&mut self) {
        let nodes = &self.nodes;
        let Some(model) = self.tasks.as_deref_mut() else { return };
        match model.oracle.unsettled(&|n| nodes.get(n as usize).is_some_and(super::Node::alive)) {
            None => model.settled_at = Some(self.now),
            Some(gap) => {
                model.last_gap = gap;
                let deadline = (self.scenario.tasks_settle_from_s() + model.config.terminal_bound_s) * 1000;
                if self.now < deadline {
                    self.schedule(self.now + 1000, Event::Task(TaskEvent::Settle));
                }
            }
        }
    }

    /// A node crashed (`for_good`: with its disk). Its router and everything in memory are
    /// lost; requests to it fail on their senders as connections close.
    pub(super) fn tasks_crashed(&mut self, ix: Ix, for_good: bool) {
        let Some(model) = self.tasks.as_deref_mut() else { return };
        let node = &mut model.nodes[ix as usize];
        if let Some(exchange) = node.exchange.take() {
            add_stats(&mut model.router_totals, exchange.stats());
        }
        node.owner = None;
        if node.store.values().any(|s| !s.state.is_terminal()) {
            model.stats.owner_crashes += 1;
        }
        node.timer_at = None;
        node.remembered.clear();
        node.load = 0;
        // The database keeps what was written synchronously (see `owner`).
        node.store.retain(|_, s| s.durable);
        model.oracle.forget_submissions(ix);
        if for_good {
            model.oracle.owner_gone(ix);
        }
        self.connections_closed(ix);
    }

    /// A dead node left for good.
    pub(super) fn tasks_gone(&mut self, ix: Ix) {
        if let Some(model) = self.tasks.as_deref_mut() {
            model.oracle.owner_gone(ix);
        }
    }

    /// Judges the task side at the end: stores still hold what they accepted; returns the
    /// liveness gap if tasks never settled, and fills the metrics and exercise counts.
    pub(super) fn tasks_finish(&mut self) -> Option<String> {
        let model = self.tasks.as_deref_mut()?;
        let owners: Vec<Ix> = model.oracle.owners().collect();
        let mut lost = Vec::new();
        for owner in owners {
            let store = &model.nodes[owner as usize].store;
            if let Err(what) = model.oracle.check_store(owner, &|t| store.contains_key(t)) {
                lost.push(what);
            }
        }
        let mut totals = model.router_totals.clone();
        for node in &model.nodes {
            if let Some(exchange) = &node.exchange {
                add_stats(&mut totals, exchange.stats());
            }
        }
        let s = &mut model.stats;
        s.failovers = totals.failovers;
        s.router_duplicates = totals.duplicates;
        s.retries_to_possible_owner = totals.retries_to_possible_owner;
        (s.accepted, s.terminal, s.orphaned) = model.oracle.totals();
        s.executions = model.oracle.executions();
        s.settled_after_ms =
            model.settled_at.map(|at| at.saturating_sub(self.scenario.tasks_settle_from_s() * 1000));
        s.unauthorized = Attack::ALL
            .iter()
            .zip(model.oracle.attack_counts())
            .filter(|(_, c)| c.sent > 0)
            .map(|(a, c)| AttackMetrics {
                flaw: a.name().into(),
                sent: c.sent,
                delivered: c.delivered,
                refused: c.refused,
                refused_intended: c.refused_intended,
            })
            .collect();
        let mut effects: Vec<FaultEffect> = model
            .config
            .exercise
            .iter()
            .map(|e| FaultEffect { fault: format!("tasks: {}", e.name()), effects: exercised(s, *e) })
            .collect();
        let senders = self
            .scenario
            .faults
            .iter()
            .any(|f| matches!(f, Fault::Byzantine { role: ByzantineRole::UnauthorizedSender, .. }));
        if senders {
            for (attack, count) in Attack::ALL.iter().zip(model.oracle.attack_counts()) {
                effects.push(FaultEffect {
                    fault: format!(
                        "byzantine(unauthorized_sender): {} refused as {}",
                        attack.name(),
                        attack.expected_checks()[0]
                    ),
                    effects: count.refused_intended,
                });
            }
        }
        let gap = model.settled_at.is_none().then(|| model.last_gap.clone());
        self.metrics.tasks = Some(model.stats.clone());
        self.effects.extend(effects);
        for what in lost {
            self.violation(what);
        }
        gap
    }
}

fn exercised(s: &TaskMetrics, e: Exercise) -> u64 {
    match e {
        Exercise::Failover => s.failovers,
        Exercise::Lost => s.lost,
        Exercise::OwnerCrash => s.owner_crashes,
        Exercise::FailedOnRestart => s.failed_on_restart,
        Exercise::Requeued => s.requeued,
        Exercise::Duplicate => s.duplicates,
        Exercise::OutgoingRefused => s.outgoing_refused,
        Exercise::NotHosted => s.refusals.get("not_hosted").copied().unwrap_or(0),
        Exercise::RetryToPossibleOwner => s.retries_to_possible_owner,
    }
}

fn add_stats(total: &mut RouterStats, more: &RouterStats) {
    total.submitted += more.submitted;
    total.routed += more.routed;
    total.failovers += more.failovers;
    total.rejected += more.rejected;
    total.failed += more.failed;
    total.duplicates += more.duplicates;
    total.retries_to_possible_owner += more.retries_to_possible_owner;
}
