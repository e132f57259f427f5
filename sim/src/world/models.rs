//! Model traffic: nodes whose agents serve models, clients requesting them, and the model
//! checks' hooks.
//!
//! A node's agents serve models: the world hands them to its mesh (`Input::SetModels`) when
//! it starts and whenever the scenario changes them, so they travel in its adverts by
//! gossip and anti-entropy like every other field. A client at a random live node asks
//! for a model; the node decides where it goes as `murnode`'s model router
//! (`node/src/models.rs`, `ModelRouter::open`) does, with the protocol's
//! [`candidates`] on its own directory, its own round-trip view (connected peers, as ping
//! measures them) and its own count of sessions open to each node, and opens a session
//! on the first candidate. It moves on to the next only when that one provably did not
//! take the request, at most [`CANDIDATES_MAX`] times:
//!
//! - a dead node refuses the dial after a round trip;
//! - a node behind a partition (either way: a session needs both) gives no stream within
//!   [`OPEN_TIMEOUT_MS`] (a connection the partition has not closed yet hangs in stream
//!   negotiation the same way);
//! - a live node answers `Refused` when its agents do not serve the model (`not_served`)
//!   or its directory holds no valid advert of the caller (`not_member`, the protocol's
//!   [`check_caller`]), else `Accepted`, and the session stays open for a drawn duration.
//!
//! A node that crashes with the request written to it (or a partition that swallows the
//! answer) leaves the outcome unknown: the request ends there, sent nowhere else. A
//! session whose serving node crashes ends early, and is not sent elsewhere either. A
//! stream to a node that is not connected dials first (one more round trip) and, as for
//! tasks, leaves no mesh connection behind. Streams are reliable: no loss, no jitter.
//! Model traffic draws from a stream of its own (`models/workload`), and a scenario
//! without a `[models]` section draws and schedules nothing for it.

use std::collections::BTreeMap;

use murmur_protocol::NodeId;
use murmur_protocol::mesh::Input;
use murmur_protocol::model::{ModelCheck, candidates, check_caller};
use murmur_protocol::route::CANDIDATES_MAX;

use super::{Event, Ix, Plant, Sim};
use crate::check::ModelOracle;
use crate::report::{FaultEffect, ModelMetrics};
use crate::rng::SimRng;
use crate::scenario::{ModelExercise, ModelWorkload};

/// How long opening a stream may take before the next candidate is tried (murnode's
/// `OPEN_TIMEOUT`).
const OPEN_TIMEOUT_MS: u64 = 5_000;
/// How long a node may take to answer `Accepted` or `Refused` (murnode's `ANSWER_TIMEOUT`).
const ANSWER_TIMEOUT_MS: u64 = 10_000;
/// Served-checker findings kept in full (the rest are counted).
const MISSED_SHOWN_MAX: usize = 3;

/// The model part of the modelled world, in runs with a `[models]` section.
#[derive(Debug)]
pub(super) struct ModelTraffic {
    config: ModelWorkload,
    rng: SimRng,
    nodes: Vec<NodeModels>,
    /// Requests under way, and sessions open, by the number of their request: at most the
    /// requests a run makes, which the scenario bounds (`MODEL_REQUESTS_MAX`).
    requests: BTreeMap<u64, Request>,
    sessions: BTreeMap<u64, Session>,
    next_request: u64,
    oracle: ModelOracle,
    stats: ModelMetrics,
    accept_ms: Vec<u64>,
    missed: Vec<String>,
    spread_gap: Option<String>,
}

/// One node's model state.
#[derive(Debug, Default)]
struct NodeModels {
    /// What its agents serve (its configuration: it survives crashes).
    serves: Vec<String>,
    /// The requesting side, in memory (a crash loses it): sessions open to each other
    /// node, and the turn counter (one per request).
    open: BTreeMap<NodeId, u32>,
    turn: u64,
}

/// A request under way at its node.
#[derive(Clone, Debug)]
struct Request {
    from: Ix,
    model: String,
    made_at: u64,
    tried: Vec<NodeId>,
    turn: u64,
}

/// A session a node accepted.
#[derive(Clone, Debug)]
struct Session {
    server: Ix,
    /// The request, for the plant that sends a broken session elsewhere.
    request: Request,
    /// Counted in the requesting node's open sessions (once `Accepted` reached it).
    counted: bool,
}

/// What became of one attempt, as the requesting node learns it.
#[derive(Clone, Copy, Debug)]
pub(super) enum Answer {
    Accepted {
        by: Ix,
    },
    Refused {
        by: Ix,
        check: ModelCheck,
    },
    /// No stream: the dial was refused (`dead`) or nothing came within the open timeout.
    NotTaken {
        by: Ix,
        dead: bool,
    },
    /// The request went out and no answer will come.
    Unknown {
        by: Ix,
    },
}

/// Model events.
#[derive(Debug)]
pub(super) enum ModelEvent {
    /// The workload's next request.
    Request,
    /// Request `req`, written at `written_at`, reached node `to` (in its life `epoch`).
    Arrive {
        req: u64,
        to: Ix,
        epoch: u32,
        written_at: u64,
    },
    /// The requesting node learns what became of its attempt.
    Answer {
        req: u64,
        answer: Answer,
    },
    SessionEnd {
        req: u64,
    },
    /// The scenario's change `change` of what a node serves.
    Change {
        change: usize,
    },
    /// The spread checker's window ends.
    SpreadEnd,
}

impl ModelEvent {
    /// Tag and numbers for the trace hash.
    pub(super) fn trace(&self) -> (u8, u64, u64) {
        match self {
            Self::Request => (80, 0, 0),
            Self::Arrive { req, to, .. } => (81, *req, u64::from(*to)),
            Self::Answer { req, answer } => (82, *req, answer.tag()),
            Self::SessionEnd { req } => (83, *req, 0),
            Self::Change { change } => (84, *change as u64, 0),
            Self::SpreadEnd => (85, 0, 0),
        }
    }
}

impl Answer {
    const fn tag(self) -> u64 {
        match self {
            Self::Accepted { .. } => 0,
            Self::Refused { check, .. } => 1 + check as u64,
            Self::NotTaken { dead: true, .. } => 10,
            Self::NotTaken { dead: false, .. } => 11,
            Self::Unknown { .. } => 12,
        }
    }

    const fn by(self) -> Ix {
        match self {
            Self::Accepted { by }
            | Self::Refused { by, .. }
            | Self::NotTaken { by, .. }
            | Self::Unknown { by } => by,
        }
    }

    /// Why the next candidate is tried (`None`: it is not).
    const fn failover(self) -> Option<&'static str> {
        match self {
            Self::Refused { check, .. } => Some(check.as_str()),
            Self::NotTaken { dead: true, .. } => Some("dead"),
            Self::NotTaken { dead: false, .. } => Some("unreachable"),
            Self::Accepted { .. } | Self::Unknown { .. } => None,
        }
    }
}

/// How a request ended.
#[derive(Clone, Copy, Debug)]
enum End {
    Served {
        local: bool,
    },
    /// `not_found`, `refused` or `unknown` (see `ModelMetrics::failed`).
    Failed(&'static str),
}

impl ModelTraffic {
    pub(super) fn new(config: ModelWorkload, seed: u64) -> Self {
        let oracle = ModelOracle::new(
            (config.served_grace_ms, config.rejoin_grace_ms),
            (
                &config.spread_model,
                config.spread_from_s * 1000,
                config.spread_until_s * 1000,
                config.spread_max,
            ),
        );
        Self {
            rng: SimRng::stream(seed, "models/workload"),
            nodes: Vec::new(),
            requests: BTreeMap::new(),
            sessions: BTreeMap::new(),
            next_request: 0,
            oracle,
            stats: ModelMetrics::default(),
            accept_ms: Vec::new(),
            missed: Vec::new(),
            spread_gap: None,
            config,
        }
    }

    pub(super) fn add_node(&mut self, ix: Ix) {
        debug_assert_eq!(self.nodes.len(), ix as usize);
        self.nodes.push(NodeModels { serves: self.config.initial(ix as usize), ..NodeModels::default() });
        self.oracle.add_node();
    }

    /// A model, drawn by the shares of requests.
    fn pick_model(&mut self) -> String {
        let total: f64 = self.config.served.iter().map(|m| m.share).sum();
        let mut x = self.rng.unit() * total;
        for model in &self.config.served {
            x -= model.share;
            if x < 0.0 {
                return model.name.clone();
            }
        }
        self.config.served.last().map(|m| m.name.clone()).unwrap_or_default()
    }
}

impl Sim {
    /// Schedules the workload, the scenario's changes and the spread window's end.
    pub(super) fn models_populate(&mut self) {
        let Some(traffic) = self.models.as_deref() else { return };
        let c = &traffic.config;
        let (start, spread_until) = (c.start_s * 1000, c.spread_until_s * 1000);
        let changes: Vec<u64> = c.changes.iter().map(|ch| ch.at_s * 1000).collect();
        self.schedule(start, Event::Model(ModelEvent::Request));
        for (change, at) in changes.into_iter().enumerate() {
            self.schedule(at, Event::Model(ModelEvent::Change { change }));
        }
        if spread_until > 0 {
            self.schedule(spread_until, Event::Model(ModelEvent::SpreadEnd));
        }
    }

    pub(super) fn model_event(&mut self, event: ModelEvent) {
        match event {
            ModelEvent::Request => self.model_request(),
            ModelEvent::Arrive { req, to, epoch, written_at } => {
                self.model_arrive(req, to, epoch, written_at);
            }
            ModelEvent::Answer { req, answer } => self.model_answer(req, answer),
            ModelEvent::SessionEnd { req } => self.session_end(req),
            ModelEvent::Change { change } => self.model_change(change),
            ModelEvent::SpreadEnd => {
                let now = self.now;
                if let Some(traffic) = self.models.as_deref_mut()
                    && let Some((metrics, finding)) = traffic.oracle.spread(now)
                {
                    traffic.stats.spread = Some(metrics);
                    traffic.spread_gap = finding;
                }
            }
        }
    }

    /// Node `ix` came up: its agents serve their models again, advertised from its first
    /// advert on.
    pub(super) fn models_started(&mut self, ix: Ix) {
        let now = self.now;
        let Some(traffic) = self.models.as_deref_mut() else { return };
        let models = traffic.nodes[ix as usize].serves.clone();
        traffic.oracle.started(ix, now, &models);
        if !models.is_empty() {
            self.handle(ix, Input::SetModels { models }, None);
        }
    }

    /// Node `ix` crashed: its requests and the sessions it asked for are gone, and the
    /// sessions it served end early (never sent elsewhere, but with the planted bug).
    pub(super) fn models_crashed(&mut self, ix: Ix) {
        let now = self.now;
        let retry = self.options.plant == Some(Plant::RetryAfterAccept);
        let Some(traffic) = self.models.as_deref_mut() else { return };
        let before = traffic.requests.len();
        traffic.requests.retain(|_, r| r.from != ix);
        traffic.stats.requester_crashed += (before - traffic.requests.len()) as u64;
        let mut revived = Vec::new();
        let ended: Vec<u64> = traffic
            .sessions
            .iter()
            .filter(|(_, s)| s.server == ix || s.request.from == ix)
            .map(|(r, _)| *r)
            .collect();
        for req in ended {
            let Some(session) = traffic.sessions.remove(&req) else { continue };
            let from = session.request.from;
            if from == ix {
                traffic.stats.sessions_cancelled += 1;
                continue;
            }
            traffic.stats.sessions_broken += 1;
            if session.counted {
                uncount(&mut traffic.nodes[from as usize].open, &self.nodes[ix as usize].id);
            }
            if retry {
                traffic.requests.insert(req, session.request);
                revived.push(req);
            }
        }
        let node = &mut traffic.nodes[ix as usize];
        node.open.clear();
        node.turn = 0;
        traffic.oracle.crashed(ix, now);
        for req in revived {
            if let Some(traffic) = self.models.as_deref_mut() {
                *traffic.stats.failovers_by_reason.entry("after_accept".into()).or_default() += 1;
                traffic.stats.failovers += 1;
            }
            self.model_attempt(req);
        }
    }

    /// A partition began (`started`) or ended: the oracle's record of who could reach whom.
    pub(super) fn models_partition(&mut self, fault: usize, started: bool) {
        let now = self.now;
        let side_a = self.partitions.iter().find(|p| p.fault == fault).map(|p| p.side_a.clone());
        let Some(traffic) = self.models.as_deref_mut() else { return };
        match (started, side_a) {
            (true, Some(side_a)) => traffic.oracle.cut(fault, now, side_a),
            (false, _) => traffic.oracle.healed(fault, now),
            (true, None) => {}
        }
    }

    /// The scenario's change `i`: a node's agents serve other models from now on.
    fn model_change(&mut self, i: usize) {
        let now = self.now;
        let Some(traffic) = self.models.as_deref_mut() else { return };
        let Some(change) = traffic.config.changes.get(i).cloned() else { return };
        let ix = change.node as Ix;
        let mut models = change.models;
        models.sort();
        models.dedup();
        traffic.nodes[ix as usize].serves.clone_from(&models);
        if self.nodes[ix as usize].alive() {
            traffic.oracle.changed(ix, now, &models);
            self.handle(ix, Input::SetModels { models }, None);
        }
    }

    /// The workload's next request: a client at a random live honest node asks for a model.
    fn model_request(&mut self) {
        let live = self.live_honest();
        let now = self.now;
        let Some(traffic) = self.models.as_deref_mut() else { return };
        if now >= traffic.config.until_s * 1000 {
            return;
        }
        let interval = traffic.config.request_interval_ms;
        self.schedule(now + interval, Event::Model(ModelEvent::Request));
        let Some(traffic) = self.models.as_deref_mut() else { return };
        if live.is_empty() {
            return;
        }
        let from = live[traffic.rng.below(live.len() as u64) as usize];
        let model = traffic.pick_model();
        traffic.next_request += 1;
        let req = traffic.next_request;
        let node = &mut traffic.nodes[from as usize];
        let turn = node.turn;
        node.turn += 1;
        traffic.stats.requests += 1;
        traffic.requests.insert(req, Request { from, model, made_at: now, tried: Vec::new(), turn });
        self.model_attempt(req);
    }

    /// Request `req` tries its next candidate, or ends when there is none (or when
    /// [`CANDIDATES_MAX`] have been tried, as murnode's loop is bounded).
    fn model_attempt(&mut self, req: u64) {
        let Some(r) = self.models.as_deref().and_then(|t| t.requests.get(&req)) else { return };
        let (from, tried) = (r.from, r.tried.len());
        let choice = if tried >= CANDIDATES_MAX { Some(None) } else { self.model_choose(req) };
        let Some(choice) = choice else { return };
        let Some(node) = choice else {
            self.model_end(req, End::Failed(if tried == 0 { "not_found" } else { "refused" }));
            return;
        };
        let Some(&to) = self.index.get(&node) else {
            self.violation(format!(
                "models: routed checker: node {from} sent request {req} to {node}, a node that does not exist"
            ));
            self.model_end(req, End::Failed("refused"));
            return;
        };
        let Some(traffic) = self.models.as_deref_mut() else { return };
        let Some(r) = traffic.requests.get_mut(&req) else { return };
        r.tried.push(node);
        traffic.stats.attempts_max = traffic.stats.attempts_max.max(r.tried.len() as u64);
        let checked = traffic.oracle.attempt(req, to);
        self.trace.record(86, self.now, u64::from(from), u64::from(to));
        if let Err(what) = checked.and_then(|()| self.model_routed(req, from, to)) {
            self.violation(what);
        }
        if to == from {
            // This node's own agents: no stream.
            self.model_arrive(req, to, self.nodes[to as usize].epoch, self.now);
            return;
        }
        let (one_way, epoch) = (self.base_latency(from, to), self.nodes[to as usize].epoch);
        let (at, event) = if !self.nodes[to as usize].alive() {
            (
                self.now + 2 * one_way,
                ModelEvent::Answer { req, answer: Answer::NotTaken { by: to, dead: true } },
            )
        } else if self.partitioned(from, to) || self.partitioned(to, from) {
            (
                self.now + OPEN_TIMEOUT_MS,
                ModelEvent::Answer { req, answer: Answer::NotTaken { by: to, dead: false } },
            )
        } else {
            // A dial first when not connected, stream negotiation, then the request.
            let dial = if self.nodes[from as usize].peers.contains(&to) { 0 } else { 2 * one_way };
            let written_at = self.now + dial + 2 * one_way;
            (written_at + one_way, ModelEvent::Arrive { req, to, epoch, written_at })
        };
        self.schedule(at, Event::Model(event));
    }

    /// The first candidate for request `req` as its node ranks them now (`Some(None)`: no
    /// candidate; `None`: no such request). With `route-ignores-directory` planted, a
    /// random live node instead.
    fn model_choose(&mut self, req: u64) -> Option<Option<NodeId>> {
        let plant = self.options.plant;
        let traffic = self.models.as_deref()?;
        let r = traffic.requests.get(&req)?;
        let from = r.from;
        if plant == Some(Plant::RouteIgnoresDirectory) {
            let others: Vec<Ix> = self.live_honest().into_iter().filter(|&n| n != from).collect();
            let traffic = self.models.as_deref_mut()?;
            let pick = (!others.is_empty()).then(|| others[traffic.rng.below(others.len() as u64) as usize]);
            return Some(pick.map(|ix| self.nodes[ix as usize].id));
        }
        let mesh = self.nodes[from as usize].mesh.as_ref()?;
        let (nodes, index, latency) = (&self.nodes, &self.index, &self.scenario.network.latency_ms);
        let me = &nodes[from as usize];
        // Round-trip times are known for connected peers, as ping measures them.
        let rtt = |peer: &NodeId| {
            let p = *index.get(peer)?;
            let one_way = latency[me.region][nodes[p as usize].region];
            me.peers.contains(&p).then(|| u32::try_from(2 * one_way).unwrap_or(u32::MAX))
        };
        let spread = plant != Some(Plant::NoSpread);
        let state = &traffic.nodes[from as usize];
        let open = |node: &NodeId| if spread { state.open.get(node).copied().unwrap_or(0) } else { 0 };
        let local_serves = state.serves.contains(&r.model);
        let turn = if spread { r.turn } else { 0 };
        let now = self.clock(from);
        let ranked =
            candidates(mesh.directory(), now, me.id, local_serves, &r.model, &r.tried, &rtt, &open, turn);
        Some(ranked.first().copied())
    }

    /// The routed checker: node `from` may send request `req` only to a node whose
    /// genuine, unexpired advert it holds lists the model, or to itself when its own agents
    /// serve it.
    fn model_routed(&self, req: u64, from: Ix, to: Ix) -> Result<(), String> {
        let Some(traffic) = self.models.as_deref() else { return Ok(()) };
        let Some(r) = traffic.requests.get(&req) else { return Ok(()) };
        let model = &r.model;
        if to == from {
            return if traffic.oracle.serves(from, model) {
                Ok(())
            } else {
                Err(format!(
                    "models: routed checker: node {from} served request {req} for {model} itself, which its agents do not serve"
                ))
            };
        }
        let id = self.nodes[to as usize].id;
        let now = self.clock(from);
        let record = self.nodes[from as usize].mesh.as_ref().and_then(|m| m.directory().get(&id));
        let Some(record) = record.filter(|r| r.expires_at() > now && r.advert().serves_model(model)) else {
            return Err(format!(
                "models: routed checker: node {from} sent request {req} for {model} to node {to}, which no valid advert it holds lists as serving it"
            ));
        };
        self.oracle
            .check_provider(from, (to, record.advert().seq), record.envelope(), now)
            .map_err(|what| format!("models: routed checker: request {req} for {model}: {what}"))
    }

    /// Request `req`, written at `written_at`, reached node `to`: it accepts or refuses,
    /// and the answer goes back.
    fn model_arrive(&mut self, req: u64, to: Ix, epoch: u32, written_at: u64) {
        let now = self.now;
        // The requesting node crashed meanwhile: its stream is gone.
        let Some(r) = self.models.as_deref().and_then(|t| t.requests.get(&req)).cloned() else { return };
        let from = r.from;
        if !self.is_current(to, epoch) {
            // It crashed before the request was written (the stream never opened: provably
            // not taken), or after (closed under the written request: it may have been read).
            let node = &self.nodes[to as usize];
            let before = node.down_since.unwrap_or(node.up_since) < written_at;
            let answer =
                if before { Answer::NotTaken { by: to, dead: true } } else { Answer::Unknown { by: to } };
            self.schedule(now, Event::Model(ModelEvent::Answer { req, answer }));
            return;
        }
        if self.partitioned(from, to) || self.partitioned(to, from) {
            // The answer is cut off: the caller waits it out.
            let answer = Answer::Unknown { by: to };
            self.schedule(now + ANSWER_TIMEOUT_MS, Event::Model(ModelEvent::Answer { req, answer }));
            return;
        }
        let caller = match self.nodes[to as usize].mesh.as_ref() {
            _ if to == from => Ok(()),
            Some(mesh) => check_caller(mesh.directory(), self.clock(to), &self.nodes[from as usize].id),
            None => Err(ModelCheck::NotMember),
        };
        let Some(traffic) = self.models.as_deref_mut() else { return };
        let answer = match caller {
            Err(check) => Answer::Refused { by: to, check },
            Ok(()) if traffic.nodes[to as usize].serves.contains(&r.model) => {
                let checked = traffic.oracle.accepted(req, to, &r.model, now);
                *traffic.stats.accepted_by_node.entry(r.model.clone()).or_default().entry(to).or_default() +=
                    1;
                let length =
                    traffic.rng.between(traffic.config.session_ms_min, traffic.config.session_ms_max);
                traffic.sessions.insert(req, Session { server: to, request: r, counted: false });
                self.schedule(now + length, Event::Model(ModelEvent::SessionEnd { req }));
                if let Err(what) = checked {
                    self.violation(what);
                }
                Answer::Accepted { by: to }
            }
            Ok(()) => Answer::Refused { by: to, check: ModelCheck::NotServed },
        };
        if to == from {
            self.model_answer(req, answer);
        } else {
            let back = self.base_latency(to, from);
            self.schedule(now + back, Event::Model(ModelEvent::Answer { req, answer }));
        }
    }

    /// The requesting node learns what became of its attempt at request `req`.
    fn model_answer(&mut self, req: u64, answer: Answer) {
        let give_up = self.options.plant == Some(Plant::NoFailover);
        let Some(traffic) = self.models.as_deref_mut() else { return };
        let Some(r) = traffic.requests.get(&req) else { return };
        let (from, by) = (r.from, answer.by());
        match answer {
            Answer::Accepted { .. } => {
                if by != from
                    && let Some(session) = traffic.sessions.get_mut(&req)
                {
                    session.counted = true;
                    *traffic.nodes[from as usize].open.entry(self.nodes[by as usize].id).or_default() += 1;
                }
                self.model_end(req, End::Served { local: by == from });
            }
            Answer::Unknown { .. } => {
                traffic.oracle.unknown(req, by);
                self.model_end(req, End::Failed("unknown"));
            }
            Answer::Refused { .. } | Answer::NotTaken { .. } => {
                if give_up {
                    self.model_end(req, End::Failed("refused"));
                    return;
                }
                let reason = answer.failover().unwrap_or("refused");
                traffic.stats.failovers += 1;
                *traffic.stats.failovers_by_reason.entry(reason.to_owned()).or_default() += 1;
                self.model_attempt(req);
            }
        }
    }

    /// A session ran to its end.
    fn session_end(&mut self, req: u64) {
        let Some(traffic) = self.models.as_deref_mut() else { return };
        let Some(session) = traffic.sessions.remove(&req) else { return };
        traffic.stats.sessions_completed += 1;
        if session.counted {
            uncount(
                &mut traffic.nodes[session.request.from as usize].open,
                &self.nodes[session.server as usize].id,
            );
        }
    }

    /// Request `req` ended: the served checker judges a failure.
    fn model_end(&mut self, req: u64, end: End) {
        let now = self.now;
        let Some(traffic) = self.models.as_deref_mut() else { return };
        let Some(r) = traffic.requests.remove(&req) else { return };
        let available = traffic.oracle.available(r.from, &r.model, r.made_at, now);
        if available.is_some() {
            traffic.stats.judged += 1;
        }
        match end {
            End::Served { local } => {
                traffic.stats.served += 1;
                traffic.stats.served_local += u64::from(local);
                traffic.accept_ms.push(now - r.made_at);
            }
            End::Failed(reason) => {
                *traffic.stats.failed.entry(reason.to_owned()).or_default() += 1;
                if let (Some(node), false) = (available, reason == "unknown") {
                    traffic.stats.missed += 1;
                    if traffic.missed.len() < MISSED_SHOWN_MAX {
                        let tried: Vec<String> = r
                            .tried
                            .iter()
                            .map(|id| self.index.get(id).map_or("?".into(), |i| i.to_string()))
                            .collect();
                        traffic.missed.push(format!(
                            "request {req} for {} at node {} (made at {} ms) ended {reason} at {now} ms after trying [{}], while node {node} had served it for at least {} ms, up and reachable",
                            r.model,
                            r.from,
                            r.made_at,
                            tried.join(", "),
                            traffic.config.served_grace_ms
                        ));
                    }
                }
            }
        }
        self.trace.record(87, now, req, matches!(end, End::Served { .. }).into());
    }

    /// Fills the model metrics and exercise counts at the end; returns the served and
    /// spread checkers' findings, if any.
    pub(super) fn models_finish(&mut self) -> Option<String> {
        let traffic = self.models.as_deref_mut()?;
        let s = &mut traffic.stats;
        s.pending_at_end = traffic.requests.len() as u64;
        traffic.accept_ms.sort_unstable();
        let pick = |sorted: &[u64], p: f64| {
            sorted.get(((sorted.len() as f64 - 1.0) * p).round() as usize).copied().unwrap_or(0)
        };
        (s.accept_p50_ms, s.accept_p99_ms) = (pick(&traffic.accept_ms, 0.5), pick(&traffic.accept_ms, 0.99));
        s.accept_max_ms = traffic.accept_ms.last().copied().unwrap_or(0);
        let count = |map: &BTreeMap<String, u64>, key: &str| map.get(key).copied().unwrap_or(0);
        let effects = traffic.config.exercise.iter().map(|e| {
            let effects = match e {
                ModelExercise::Failover => s.failovers,
                ModelExercise::NotServed => count(&s.failovers_by_reason, "not_served"),
                ModelExercise::Dead => count(&s.failovers_by_reason, "dead"),
                ModelExercise::Unreachable => count(&s.failovers_by_reason, "unreachable"),
                ModelExercise::Broken => s.sessions_broken,
                ModelExercise::NotFound => count(&s.failed, "not_found"),
                ModelExercise::Spread => s.spread.as_ref().map_or(0, |w| w.accepted),
            };
            FaultEffect { fault: format!("models: {}", e.name()), effects }
        });
        self.effects.extend(effects.collect::<Vec<_>>());
        let mut gaps = Vec::new();
        if s.missed > 0 {
            gaps.push(format!(
                "served checker: {} of the {} requests judged were not served; first: {}",
                s.missed,
                s.judged,
                traffic.missed.join("; ")
            ));
        }
        gaps.extend(traffic.spread_gap.clone());
        self.metrics.models = Some(traffic.stats.clone());
        (!gaps.is_empty()).then(|| gaps.join("; "))
    }
}

/// One session fewer open to `node`.
fn uncount(open: &mut BTreeMap<NodeId, u32>, node: &NodeId) {
    if let Some(count) = open.get_mut(node) {
        *count = count.saturating_sub(1);
        if *count == 0 {
            open.remove(node);
        }
    }
}
