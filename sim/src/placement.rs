//! `murmur-sim placement`: a cold start of hash placement ([`murmur_protocol::placement`]),
//! the directory that keeps (name, host) adverts at the name's `k` closest nodes instead
//! of at every node, over the same modelled world as the gossip directory's runs.
//!
//! A scenario's node count, regions, latency matrix, jitter, join spread, duration and
//! capsules per node are read as for the gossip mesh (the same names, the same hosts per
//! name), so `formation-10k` compares like with like. What this world models: one-way
//! latency per region pair plus jitter, a dial (one round trip more) the first time two
//! nodes talk, every message encoded by the sender and strictly decoded by the receiver
//! with the shipping codec, and its bytes folded into the trace hash; the scenario's loss
//! (and its `loss` faults) as TCP meets it, a segment sent again after a retransmission
//! timeout (the round trip plus Linux's 200 ms floor, doubling for each loss in a row),
//! and its duplication as a message delivered twice (which TCP would not do, so it tests
//! that every answer and store is idempotent); `crash` faults (a crashed node loses
//! everything, as placement keeps nothing on disk; what was sent to its old process is
//! dropped, dials to it are refused; with `restart_after_s` it starts again with its key,
//! joins and places anew). Homes replicate every `protocol.sync_interval_s`. Not modelled
//! here: partitions, churn, mass restarts and bandwidth (a scenario with those faults is
//! refused, not run without them). Resolves asked within a replication round of a crash
//! are not judged.
//!
//! Checks:
//! - safety: every host a resolve returns does host the name (adverts are verified by the
//!   nodes; this checks the checks);
//! - placement: once a second after the last join, every (name, host) advert must be held
//!   by a majority of the `k` nodes closest to the name among the nodes that have started,
//!   within the scenario's liveness bound (that a resolve finds it takes one; the report
//!   gives how many adverts reached all `k`, and when), and still be at the end;
//! - convergence (a figure, not a check): every 100 ms, each advert not yet seen at a
//!   majority of its name's true homes is looked at again, which gives the time from a
//!   host's start to its advert at a majority, per advert;
//! - resolves: a started node resolves a random placed name every `query_interval_ms`;
//!   each one issued after the last join must find a host, and one still unanswered 10 s
//!   before the end has failed.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use murmur_protocol::advert::HostedCapsule;
use murmur_protocol::placement::{
    Event as PlaceEvent, Input, Key, Message, Output, PlacementConfig, PlacementNode,
};
use murmur_protocol::verify::Verifier;
use murmur_protocol::{Millis, NodeId, SecretKey};
use serde::Serialize;

use crate::engine::EventQueue;
use crate::fxhash::{FxHashMap as HashMap, FxHashSet as HashSet};
use crate::report::{exit, quantile};
use crate::rng::SimRng;
use crate::scenario::{Fault, Scenario};
use crate::trace::TraceHash;
use crate::verifier::SharedVerifier;

type Ix = u32;

/// How long after its start a host's adverts are expected at their homes before a check
/// counts them: the lookup's rounds and the stores' round trip.
const SETTLE_MS: u64 = 2_000;

/// How often each advert not yet at a majority of its homes is looked at, for the
/// convergence figure (which is therefore at most this much late).
const CONVERGE_EVERY_MS: u64 = 100;

/// Linux's floor for a TCP retransmission timeout, and its ceiling (as the gossip world).
const TCP_RTO_MIN_MS: u64 = 200;
const TCP_RTO_MAX_MS: u64 = 120_000;

/// A resolve asked after the last join and unanswered this long at the end has failed.
const RESOLVE_GIVE_UP_MS: u64 = 10_000;

/// Events for a node carry the epoch (restarts so far) of the process they are for: one
/// that restarted since does not get what was meant for the process before.
#[derive(Debug)]
enum Ev {
    Start(Ix),
    Request {
        to: Ix,
        to_epoch: u32,
        from: Ix,
        from_epoch: u32,
        id: u64,
        bytes: Vec<u8>,
    },
    Response {
        to: Ix,
        epoch: u32,
        id: u64,
        bytes: Vec<u8>,
    },
    Failed {
        to: Ix,
        epoch: u32,
        id: u64,
    },
    /// The scenario's fault at this index (a crash) happens.
    Crash(usize),
    Wake(Ix),
    Query,
    Check,
    Converge,
}

#[derive(Debug)]
struct Node {
    secret: SecretKey,
    epoch: u32,
    id: NodeId,
    key: Key,
    region: usize,
    machine: PlacementNode,
    started_at: Option<u64>,
    joined: bool,
    names: Vec<String>,
    /// When each name's advert was acknowledged by its homes.
    placed: Vec<Option<u64>>,
    wake: Option<u64>,
    rng: SimRng,
}

/// Everything a run reports.
#[derive(Clone, Debug, Default, Serialize)]
pub struct PlacementOutcome {
    pub scenario: String,
    pub seed: u64,
    pub nodes: usize,
    pub duration_s: u64,
    pub k: usize,
    pub verdict: String,
    pub exit_code: u8,
    pub findings: Vec<String>,
    pub trace_hash: String,
    pub wall_ms: f64,
    pub events: u64,
    pub events_per_sec: f64,
    pub messages_per_node_per_sec: f64,
    pub bytes_per_node_per_sec: f64,
    /// Messages the modelled network lost once or more and TCP sent again.
    pub messages_retransmitted: u64,
    /// Node crashes the scenario's faults caused.
    pub crashes: u64,
    /// (name, host) adverts acknowledged by at least one home.
    pub placed: usize,
    /// From a host's start to its advert acknowledged by the homes, per (name, host).
    pub placed_p50_ms: u64,
    pub placed_p99_ms: u64,
    pub placed_max_ms: u64,
    /// From a host's start to its advert held by a majority of the name's true homes at
    /// that moment, per (name, host), sampled every [`CONVERGE_EVERY_MS`].
    pub converged: usize,
    pub converged_p50_ms: u64,
    pub converged_p99_ms: u64,
    pub converged_max_ms: u64,
    /// The first check at which every advert was at a majority of its homes, after the
    /// last join (`None`: never within the run).
    pub majority_after_last_join_ms: Option<u64>,
    /// The same for all `k` of its homes.
    pub all_after_last_join_ms: Option<u64>,
    /// Adverts at all `k` homes and at a majority of them at the end, of those expected.
    pub all_homes_at_end: usize,
    pub majority_at_end: usize,
    pub expected_at_end: usize,
    pub resolves: usize,
    pub resolves_failed: usize,
    pub resolve_p50_ms: u64,
    pub resolve_p99_ms: u64,
    pub resolve_requests_p50: u64,
    pub resolve_requests_p99: u64,
    pub table_mean: f64,
    pub table_max: usize,
    pub held_mean: f64,
    pub held_max: usize,
}

#[derive(Debug, Default)]
struct Placement {
    all: usize,
    majority: usize,
    expected: usize,
    example: Option<String>,
}

/// One run of hash placement.
#[derive(Debug)]
pub struct PlacementSim {
    scenario: Scenario,
    seed: u64,
    config: PlacementConfig,
    nodes: Vec<Node>,
    by_id: HashMap<NodeId, Ix>,
    /// Nodes by key, for the true homes of a name.
    sorted: Vec<(Key, Ix)>,
    started: Vec<Ix>,
    queue: EventQueue<Ev>,
    now: u64,
    connected: HashSet<(Ix, Ix)>,
    hosts: BTreeMap<String, Vec<Ix>>,
    asking: HashMap<(Ix, String), u64>,
    /// Adverts (host, index into its names) not yet seen at a majority of their homes.
    pending: Vec<(Ix, usize)>,
    /// Whether a convergence pass is scheduled.
    converging: bool,
    converged_ms: Vec<u64>,
    rng: SimRng,
    /// Loss and duplication draw from a stream of their own, and only when the scenario
    /// has them, so a lossless run's draws (and trace) do not depend on them.
    loss_rng: SimRng,
    lost: u64,
    verifier: Arc<dyn Verifier>,
    /// When crashes happened: a resolve asked within a replication round (and the
    /// settling time) of one is not judged, as the homes are still being replaced.
    crash_times: Vec<u64>,
    /// The epoch of the asker whose request is being answered (answers are given at once).
    replying_to_epoch: u32,
    crashed: u64,
    trace: TraceHash,
    events: u64,
    messages: u64,
    bytes: u64,
    placed_ms: Vec<u64>,
    majority_at: Option<u64>,
    all_at: Option<u64>,
    resolve_ms: Vec<u64>,
    resolve_asked: Vec<u64>,
    resolves: usize,
    /// Resolves asked after the last join and its settling: the ones judged.
    resolves_judged: usize,
    resolves_failed: usize,
    findings: Vec<String>,
    safety: bool,
    /// A node refused what it was given to host (a bug in this world's names).
    hosting_refused: bool,
}

impl PlacementSim {
    /// A run of `scenario` with `seed`; refused when the scenario asks for what this world
    /// does not model.
    pub fn new(scenario: Scenario, seed: u64) -> Result<Self, String> {
        if let Some(fault) =
            scenario.faults.iter().find(|f| !matches!(f, Fault::Loss { .. } | Fault::Crash { .. }))
        {
            return Err(format!(
                "{} has a {} fault; the placement world models loss, duplication and crashes but no partitions or other faults yet: use a scenario without them, such as formation-10k",
                scenario.name,
                fault.label()
            ));
        }
        if scenario.topology.warm_start {
            return Err(format!("{} is a warm start; placement runs are cold starts", scenario.name));
        }
        let verifier: Arc<dyn Verifier> = Arc::new(SharedVerifier::default());
        let config = PlacementConfig {
            ttl_ms: scenario.protocol.ttl_s * 1000,
            clock_skew_max_ms: scenario.protocol.clock_skew_max_s * 1000,
            republish_ms: scenario.protocol.refresh_s.max(1) * 1000,
            // Homes replicate what they hold as often as the gossip world's anti-entropy.
            replicate_ms: scenario.protocol.sync_interval_s.max(1) * 1000,
            request_timeout_ms: scenario.topology.request_timeout_ms.max(1),
            ..PlacementConfig::default()
        };
        let n = scenario.nodes;
        let names = scenario.capsule_names();
        let mut nodes = Vec::with_capacity(n);
        let mut by_id = HashMap::default();
        let mut hosts: BTreeMap<String, Vec<Ix>> = BTreeMap::new();
        for ix in 0..n {
            let mut rng = SimRng::stream(seed, &format!("node/{ix}"));
            let secret = SecretKey::from_seed(rng.bytes32());
            let region = scenario.pick_region(&mut rng);
            let mut hosted = scenario.hosted_names(&names, ix);
            hosted.sort();
            hosted.dedup();
            for name in &hosted {
                hosts.entry(name.clone()).or_default().push(ix as Ix);
            }
            let machine = PlacementNode::new(secret.clone(), config.clone(), verifier.clone());
            let id = machine.id();
            by_id.insert(id, ix as Ix);
            nodes.push(Node {
                secret,
                epoch: 0,
                id,
                key: Key::of_node(&id),
                region,
                machine,
                started_at: None,
                joined: false,
                placed: vec![None; hosted.len()],
                names: hosted,
                wake: None,
                rng,
            });
        }
        let mut sim = Self {
            config,
            nodes,
            by_id,
            sorted: Vec::new(),
            started: Vec::new(),
            queue: EventQueue::default(),
            now: 0,
            connected: HashSet::default(),
            hosts,
            asking: HashMap::default(),
            pending: Vec::new(),
            converging: true,
            converged_ms: Vec::new(),
            rng: SimRng::stream(seed, "placement/world"),
            loss_rng: SimRng::stream(seed, "placement/loss"),
            lost: 0,
            verifier,
            crash_times: Vec::new(),
            replying_to_epoch: 0,
            crashed: 0,
            trace: TraceHash::default(),
            events: 0,
            messages: 0,
            bytes: 0,
            placed_ms: Vec::new(),
            majority_at: None,
            all_at: None,
            resolve_ms: Vec::new(),
            resolve_asked: Vec::new(),
            resolves: 0,
            resolves_judged: 0,
            resolves_failed: 0,
            findings: Vec::new(),
            safety: false,
            hosting_refused: false,
            seed,
            scenario,
        };
        let spread_ms = sim.scenario.topology.join_spread_s * 1000;
        let mut starts = SimRng::stream(seed, "starts");
        for ix in 0..n {
            let at = starts.between(0, spread_ms);
            sim.queue.push(at, Ev::Start(ix as Ix));
        }
        if sim.scenario.workload.query_interval_ms > 0 {
            sim.queue.push(sim.scenario.workload.query_interval_ms, Ev::Query);
        }
        sim.queue.push(spread_ms + 1000, Ev::Check);
        sim.queue.push(CONVERGE_EVERY_MS, Ev::Converge);
        for (index, fault) in sim.scenario.faults.iter().enumerate() {
            if let Fault::Crash { at_s, .. } = fault {
                sim.queue.push(at_s * 1000, Ev::Crash(index));
            }
        }
        Ok(sim)
    }

    /// Runs to the end and judges.
    pub fn run(mut self) -> PlacementOutcome {
        let wall = Instant::now();
        let end = self.scenario.duration_s * 1000;
        while let Some((at, event)) = self.queue.pop_until(end) {
            self.now = at;
            self.events += 1;
            self.dispatch(event);
        }
        self.judge(wall.elapsed().as_secs_f64() * 1000.0)
    }

    fn dispatch(&mut self, event: Ev) {
        match event {
            Ev::Start(ix) => {
                self.trace.record(1, self.now, u64::from(ix), u64::from(self.nodes[ix as usize].epoch));
                let want = self.scenario.topology.bootstrap_peers.max(1).min(self.started.len());
                let mut bootstrap = Vec::with_capacity(want);
                while bootstrap.len() < want {
                    let pick =
                        self.started[self.nodes[ix as usize].rng.below(self.started.len() as u64) as usize];
                    let id = self.nodes[pick as usize].id;
                    if !bootstrap.contains(&id) {
                        bootstrap.push(id);
                    }
                }
                let node = &mut self.nodes[ix as usize];
                node.started_at = Some(self.now);
                let position = self.sorted.partition_point(|(k, _)| *k < node.key);
                self.sorted.insert(position, (node.key, ix));
                self.started.push(ix);
                self.pending.extend((0..self.nodes[ix as usize].names.len()).map(|i| (ix, i)));
                if !self.converging {
                    // A restart after every advert had converged: look again.
                    self.converging = true;
                    self.queue.push(self.now + CONVERGE_EVERY_MS, Ev::Converge);
                }
                self.input(ix, Input::Start { bootstrap });
                // Placing starts with the join, from the bootstrap contacts: its lookups
                // find the name's homes as the join finds the newcomer's neighbours.
                let node = &self.nodes[ix as usize];
                let capsules = node
                    .names
                    .iter()
                    .map(|name| HostedCapsule { name: name.clone(), digest: None, version: "1.0.0".into() })
                    .collect();
                let addrs = vec![format!("/ip4/10.{}.0.1/tcp/4001", node.region)];
                self.input(ix, Input::Host { capsules, addrs });
            }
            Ev::Request { to, to_epoch, from, from_epoch, id, bytes } => {
                if self.nodes[from as usize].epoch != from_epoch
                    || self.nodes[from as usize].started_at.is_none()
                {
                    return; // the asker's process is gone, and its connection with it
                }
                if self.nodes[to as usize].epoch != to_epoch || self.nodes[to as usize].started_at.is_none() {
                    // The connection was to a process that crashed: reset, back to the asker.
                    let at = self.now + self.one_way(to, from);
                    self.queue.push(at, Ev::Failed { to: from, epoch: from_epoch, id });
                    return;
                }
                self.trace.record(2, self.now, u64::from(to), id);
                self.trace.bytes(&bytes);
                let message =
                    Message::decode(&bytes).expect("a placement message the sender encoded decodes");
                let from_id = self.nodes[from as usize].id;
                self.replying_to_epoch = from_epoch;
                self.input(to, Input::Request { from: from_id, id, message });
            }
            Ev::Response { to, epoch, .. } | Ev::Failed { to, epoch, .. }
                if self.nodes[to as usize].epoch != epoch || self.nodes[to as usize].started_at.is_none() => {
            }
            Ev::Response { to, id, bytes, .. } => {
                self.trace.record(3, self.now, u64::from(to), id);
                self.trace.bytes(&bytes);
                let message =
                    Message::decode(&bytes).expect("a placement answer the responder encoded decodes");
                self.input(to, Input::Response { id, message });
            }
            Ev::Failed { to, id, .. } => {
                self.trace.record(4, self.now, u64::from(to), id);
                self.input(to, Input::Failed { id });
            }
            Ev::Wake(ix) => {
                if self.nodes[ix as usize].wake == Some(self.now) {
                    self.nodes[ix as usize].wake = None;
                    self.input(ix, Input::Tick);
                }
            }
            Ev::Query => self.query(),
            Ev::Check => self.check(),
            Ev::Converge => self.converge(),
            Ev::Crash(index) => self.crash(index),
        }
    }

    fn input(&mut self, ix: Ix, input: Input) {
        let now = Millis(self.now);
        let node = &mut self.nodes[ix as usize];
        node.machine.handle(now, input);
        while let Some(output) = self.nodes[ix as usize].machine.poll_output() {
            self.carry_out(ix, output);
        }
        let node = &mut self.nodes[ix as usize];
        if let Some(at) = node.machine.poll_timeout().map(|t| t.0.max(self.now + 1))
            && node.wake.is_none_or(|w| at < w)
        {
            node.wake = Some(at);
            self.queue.push(at, Ev::Wake(ix));
        }
    }

    /// How many copies of a message arrive: two when duplicated.
    fn copies(&mut self) -> usize {
        let duplicate = self.scenario.network.duplicate;
        if duplicate > 0.0 && self.loss_rng.chance(duplicate) {
            return 2;
        }
        1
    }

    /// The time TCP's retransmissions add to a message from `a` to `b`: for each loss in a
    /// row, one more retransmission timeout, starting at the round trip plus 200 ms and
    /// doubling.
    fn retransmission(&mut self, a: Ix, b: Ix) -> u64 {
        let loss = self.loss_now();
        if loss <= 0.0 {
            return 0;
        }
        let (ra, rb) = (self.nodes[a as usize].region, self.nodes[b as usize].region);
        let mut rto = 2 * self.scenario.network.latency_ms[ra][rb] + TCP_RTO_MIN_MS;
        let mut extra = 0;
        while extra < TCP_RTO_MAX_MS && self.loss_rng.chance(loss) {
            extra += rto;
            rto *= 2;
        }
        if extra > 0 {
            self.lost += 1;
        }
        extra
    }

    fn loss_now(&self) -> f64 {
        let second = self.now / 1000;
        let extra: f64 = self
            .scenario
            .faults
            .iter()
            .filter_map(|f| match f {
                Fault::Loss { at_s, until_s, loss } if (*at_s..*until_s).contains(&second) => Some(*loss),
                _ => None,
            })
            .sum();
        (self.scenario.network.loss + extra).min(0.99)
    }

    fn one_way(&self, a: Ix, b: Ix) -> u64 {
        let (ra, rb) = (self.nodes[a as usize].region, self.nodes[b as usize].region);
        self.scenario.network.latency_ms[ra][rb].max(1)
    }

    /// The scenario's crash at `index`: each node chosen loses its process and everything
    /// it held in memory (placement keeps nothing on disk); with `restart_after_s` it starts
    /// again with the same key, joins and places its adverts anew.
    fn crash(&mut self, index: usize) {
        let Fault::Crash { count, nodes, restart_after_s, .. } = self.scenario.faults[index].clone() else {
            return;
        };
        let mut chosen: Vec<Ix> = nodes.iter().filter(|&&n| n < self.nodes.len()).map(|&n| n as Ix).collect();
        let mut faults = SimRng::stream(self.seed, &format!("placement/crash/{index}"));
        while chosen.len() < count && chosen.len() < self.started.len() {
            let pick = self.started[faults.below(self.started.len() as u64) as usize];
            if !chosen.contains(&pick) {
                chosen.push(pick);
            }
        }
        for ix in chosen {
            if self.nodes[ix as usize].started_at.is_none() {
                continue;
            }
            self.trace.record(5, self.now, u64::from(ix), 0);
            self.crashed += 1;
            self.crash_times.push(self.now);
            let verifier: Arc<dyn Verifier> = self.verifier.clone();
            let node = &mut self.nodes[ix as usize];
            node.started_at = None;
            node.epoch += 1;
            node.joined = false;
            node.wake = None;
            node.placed.iter_mut().for_each(|p| *p = None);
            node.machine = PlacementNode::new(node.secret.clone(), self.config.clone(), verifier);
            let key = node.key;
            self.sorted.retain(|(k, _)| *k != key);
            self.started.retain(|&n| n != ix);
            self.pending.retain(|&(host, _)| host != ix);
            self.asking.retain(|(asker, _), _| *asker != ix);
            self.connected.retain(|&(a, b)| a != ix && b != ix);
            if let Some(after) = restart_after_s {
                self.queue.push(self.now + after * 1000, Ev::Start(ix));
            }
        }
    }

    /// One-way delay from `a` to `b`, with the dial's round trip the first time they talk.
    fn delay(&mut self, a: Ix, b: Ix) -> u64 {
        let (ra, rb) = (self.nodes[a as usize].region, self.nodes[b as usize].region);
        let base = self.scenario.network.latency_ms[ra][rb];
        let jitter = self.scenario.network.jitter_ms;
        let mut delay = base + if jitter > 0 { self.rng.below(jitter + 1) } else { 0 };
        if self.connected.insert((a.min(b), a.max(b))) {
            delay += 2 * base;
        }
        delay.max(1)
    }

    fn carry_out(&mut self, ix: Ix, output: Output) {
        match output {
            Output::Request { to, id, message } => {
                let epoch = self.nodes[ix as usize].epoch;
                let Some(&peer) = self.by_id.get(&to) else {
                    self.queue
                        .push(self.now + self.config.request_timeout_ms, Ev::Failed { to: ix, epoch, id });
                    return;
                };
                if self.nodes[peer as usize].started_at.is_none() {
                    // Not listening (not yet, or crashed): the dial is refused, or times out
                    // for a node that never started.
                    let after = if self.nodes[peer as usize].epoch > 0 {
                        2 * self.one_way(ix, peer)
                    } else {
                        self.config.request_timeout_ms
                    };
                    self.queue.push(self.now + after, Ev::Failed { to: ix, epoch, id });
                    return;
                }
                let to_epoch = self.nodes[peer as usize].epoch;
                let bytes = message.encode();
                self.messages += 1;
                self.bytes += bytes.len() as u64;
                for _ in 0..self.copies() {
                    let at = self.now + self.delay(ix, peer) + self.retransmission(ix, peer);
                    self.queue.push(
                        at,
                        Ev::Request {
                            to: peer,
                            to_epoch,
                            from: ix,
                            from_epoch: epoch,
                            id,
                            bytes: bytes.clone(),
                        },
                    );
                }
            }
            Output::Respond { to, id, message } => {
                let Some(&peer) = self.by_id.get(&to) else { return };
                let bytes = message.encode();
                self.messages += 1;
                self.bytes += bytes.len() as u64;
                for _ in 0..self.copies() {
                    let at = self.now + self.delay(ix, peer) + self.retransmission(ix, peer);
                    let epoch = self.replying_to_epoch;
                    self.queue.push(at, Ev::Response { to: peer, epoch, id, bytes: bytes.clone() });
                }
            }
            Output::Event(event) => self.on_event(ix, event),
        }
    }

    fn on_event(&mut self, ix: Ix, event: PlaceEvent) {
        let node = &mut self.nodes[ix as usize];
        match event {
            PlaceEvent::Joined { .. } => node.joined = true,
            // This world's hosts never stop hosting a name.
            PlaceEvent::Withdrawn { .. } => {}
            PlaceEvent::HostRefused { reason } => {
                if self.findings.len() < 20 {
                    self.findings.push(format!("liveness: node {ix} could not host: {reason}"));
                }
                self.hosting_refused = true;
            }
            PlaceEvent::Placed { name, homes } => {
                if let Some(at) = node.names.iter().position(|n| *n == name)
                    && node.placed[at].is_none()
                    && homes > 0
                {
                    node.placed[at] = Some(self.now);
                    self.placed_ms.push(self.now - node.started_at.unwrap_or(0));
                }
            }
            PlaceEvent::Resolved { name, hosts, asked } => {
                let Some(since) = self.asking.remove(&(ix, name.clone())) else { return };
                self.resolve_ms.push(self.now - since);
                self.resolve_asked.push(asked as u64);
                let truth = self.hosts.get(&name);
                for host in &hosts {
                    let real = self.by_id.get(host).is_some_and(|h| truth.is_some_and(|t| t.contains(h)));
                    if !real {
                        self.safety = true;
                    }
                    if !real && self.findings.len() < 20 {
                        self.findings.push(format!(
                            "safety: a resolve of {name} returned {host}, which does not host it"
                        ));
                    }
                }
            }
            PlaceEvent::Unresolved { name, asked, why } => {
                let Some(since) = self.asking.remove(&(ix, name.clone())) else { return };
                if self.judged(since) {
                    self.resolves_failed += 1;
                    if self.findings.len() < 20 {
                        let homes = self.homes(&Key::of_name(&name));
                        let now = Millis(self.now);
                        let hosts = self.hosts.get(&name).cloned().unwrap_or_default();
                        let holding = homes
                            .iter()
                            .filter(|&&h| {
                                hosts.iter().any(|&host| {
                                    self.nodes[h as usize].machine.holds(
                                        &name,
                                        &self.nodes[host as usize].id,
                                        now,
                                    )
                                })
                            })
                            .count();
                        self.findings.push(format!(
                            "liveness: node {ix} could not resolve {name} at {since} ms though its hosts had placed it ({why:?} after {asked} requests, {} ms; {holding} of its {} true homes hold one of its adverts)",
                            self.now - since,
                            homes.len()
                        ));
                    }
                }
            }
        }
    }

    fn liveness_from(&self) -> u64 {
        self.scenario.topology.join_spread_s * 1000 + SETTLE_MS
    }

    /// Whether a resolve asked at `since` is judged: after the last join has settled, and
    /// not within a replication round (and the settling time) of a crash.
    fn judged(&self, since: u64) -> bool {
        let repair = self.config.replicate_ms + SETTLE_MS;
        since >= self.liveness_from()
            && !self.crash_times.iter().any(|&at| at <= since && since < at + repair)
    }

    /// A started, joined node resolves a name some started host has placed.
    fn query(&mut self) {
        self.queue.push(self.now + self.scenario.workload.query_interval_ms, Ev::Query);
        if self.started.is_empty() {
            return;
        }
        let asker = self.started[self.rng.below(self.started.len() as u64) as usize];
        let host = self.started[self.rng.below(self.started.len() as u64) as usize];
        let node = &self.nodes[host as usize];
        let placed: Vec<&String> =
            node.names.iter().zip(&node.placed).filter(|(_, p)| p.is_some()).map(|(n, _)| n).collect();
        if placed.is_empty() || !self.nodes[asker as usize].joined {
            return;
        }
        let name = placed[self.rng.below(placed.len() as u64) as usize].clone();
        if self.asking.contains_key(&(asker, name.clone())) {
            return;
        }
        self.resolves += 1;
        self.resolves_judged += usize::from(self.judged(self.now));
        self.asking.insert((asker, name.clone()), self.now);
        self.input(asker, Input::Resolve { name });
    }

    /// The `k` started nodes closest to `key`.
    fn homes(&self, key: &Key) -> Vec<Ix> {
        let k = self.config.k;
        let sorted = &self.sorted;
        if sorted.len() <= k {
            return sorted.iter().map(|(_, ix)| *ix).collect();
        }
        // Nodes sharing the first `bits` bits with `key` are one run of the sorted keys; the
        // k closest are in the longest such run that still has k nodes.
        let run = |bits: usize| {
            let mut lo = key.0;
            let mut hi = key.0;
            for bit in bits..256 {
                let (byte, mask) = (bit / 8, 0x80u8 >> (bit % 8));
                lo[byte] &= !mask;
                hi[byte] |= mask;
            }
            let a = sorted.partition_point(|(k, _)| k.0 < lo);
            let b = sorted.partition_point(|(k, _)| k.0 <= hi);
            a..b
        };
        let mut bits = 0;
        while bits < 256 && run(bits + 1).len() >= k {
            bits += 1;
        }
        let mut candidates: Vec<_> = sorted[run(bits)].iter().map(|(k, ix)| (k.distance(key), *ix)).collect();
        candidates.sort_unstable();
        candidates.into_iter().take(k).map(|(_, ix)| ix).collect()
    }

    /// Adverts of hosts started `SETTLE_MS` ago: how many are at all their homes, at a
    /// majority of them, and of how many; and one that is not at a majority.
    fn placement(&self) -> Placement {
        let settled = self.now.saturating_sub(SETTLE_MS);
        let mut out = Placement::default();
        for (name, hosts) in &self.hosts {
            let homes = self.homes(&Key::of_name(name));
            for &host in hosts {
                let node = &self.nodes[host as usize];
                if node.started_at.is_none_or(|s| s > settled) {
                    continue;
                }
                out.expected += 1;
                let holding = self.holding(&homes, name, &node.id);
                out.all += usize::from(holding == homes.len());
                if 2 * holding > homes.len() {
                    out.majority += 1;
                } else if out.example.is_none() {
                    out.example = Some(format!(
                        "{name} of node {host} is held by {holding} of its {} homes",
                        homes.len()
                    ));
                }
            }
        }
        out
    }

    /// How many of `homes` hold `host`'s advert for `name` now.
    fn holding(&self, homes: &[Ix], name: &str, host: &NodeId) -> usize {
        let now = Millis(self.now);
        homes.iter().filter(|&&h| self.nodes[h as usize].machine.holds(name, host, now)).count()
    }

    /// Records each pending advert that a majority of its name's true homes now hold.
    fn converge(&mut self) {
        let spread_ms = self.scenario.topology.join_spread_s * 1000;
        self.converging = !self.pending.is_empty() || self.now <= spread_ms;
        if self.converging {
            self.queue.push(self.now + CONVERGE_EVERY_MS, Ev::Converge);
        }
        let mut pending = std::mem::take(&mut self.pending);
        pending.retain(|&(host, i)| {
            let node = &self.nodes[host as usize];
            let name = &node.names[i];
            let homes = self.homes(&Key::of_name(name));
            let holding = self.holding(&homes, name, &node.id);
            if 2 * holding > homes.len() {
                self.converged_ms.push(self.now - node.started_at.unwrap_or(0));
                return false;
            }
            true
        });
        self.pending = pending;
    }

    fn check(&mut self) {
        self.queue.push(self.now + 1000, Ev::Check);
        if self.all_at.is_some() || self.now < self.liveness_from() {
            return;
        }
        let placement = self.placement();
        if placement.expected > 0 && placement.majority == placement.expected {
            self.majority_at.get_or_insert(self.now);
        }
        if placement.expected > 0 && placement.all == placement.expected {
            self.all_at = Some(self.now);
        }
    }

    fn judge(mut self, wall_ms: f64) -> PlacementOutcome {
        let placement = self.placement();
        let spread_ms = self.scenario.topology.join_spread_s * 1000;
        let bound_ms = self.scenario.check.liveness_bound_s * 1000;
        let end = self.scenario.duration_s * 1000;
        let unanswered = self
            .asking
            .iter()
            .filter(|(_, since)| self.judged(**since) && **since + RESOLVE_GIVE_UP_MS <= end)
            .count();
        if unanswered > 0 {
            self.resolves_failed += unanswered;
            self.findings.push(format!(
                "liveness: {unanswered} resolves asked after the last join had no answer {} s later",
                RESOLVE_GIVE_UP_MS / 1000
            ));
        }
        let mut liveness = self.resolves_failed > 0 || self.hosting_refused;
        if placement.majority < placement.expected && self.majority_at.is_some() {
            liveness = true;
            self.findings.push(format!(
                "liveness: {} of {} adverts at a majority of their homes at the end, after all were{}",
                placement.majority,
                placement.expected,
                placement.example.clone().map(|e| format!(" (for one: {e})")).unwrap_or_default()
            ));
        }
        let placed_in_time = self.majority_at.is_some_and(|at| at <= spread_ms + bound_ms);
        if !placed_in_time {
            liveness = true;
            self.findings.push(format!(
                "liveness: {} of {} adverts at a majority of their homes at the end; not all within {} s of the last join{}",
                placement.majority,
                placement.expected,
                self.scenario.check.liveness_bound_s,
                placement.example.clone().map(|e| format!(" (for one: {e})")).unwrap_or_default()
            ));
        }
        if self.resolves_judged == 0 {
            liveness = true;
            self.findings.push("vacuous: no resolve was asked after the last join".into());
        }
        let (verdict, exit_code) = if self.safety {
            ("safety", exit::SAFETY)
        } else if liveness {
            ("liveness", exit::LIVENESS)
        } else {
            ("pass", exit::PASS)
        };
        self.placed_ms.sort_unstable();
        self.converged_ms.sort_unstable();
        self.resolve_ms.sort_unstable();
        self.resolve_asked.sort_unstable();
        let started: Vec<&Node> = self.nodes.iter().filter(|n| n.started_at.is_some()).collect();
        let count = started.len().max(1) as f64;
        let duration_s = self.scenario.duration_s.max(1) as f64;
        let n = self.scenario.nodes.max(1) as f64;
        PlacementOutcome {
            scenario: self.scenario.name.clone(),
            seed: self.seed,
            nodes: self.scenario.nodes,
            duration_s: self.scenario.duration_s,
            k: self.config.k,
            verdict: verdict.into(),
            exit_code,
            findings: self.findings,
            trace_hash: self.trace.hex(),
            wall_ms,
            events: self.events,
            events_per_sec: self.events as f64 / (wall_ms / 1000.0).max(1e-9),
            messages_per_node_per_sec: self.messages as f64 / n / duration_s,
            bytes_per_node_per_sec: self.bytes as f64 / n / duration_s,
            messages_retransmitted: self.lost,
            crashes: self.crashed,
            placed: self.placed_ms.len(),
            placed_p50_ms: quantile(&self.placed_ms, 0.5),
            placed_p99_ms: quantile(&self.placed_ms, 0.99),
            placed_max_ms: self.placed_ms.last().copied().unwrap_or(0),
            converged: self.converged_ms.len(),
            converged_p50_ms: quantile(&self.converged_ms, 0.5),
            converged_p99_ms: quantile(&self.converged_ms, 0.99),
            converged_max_ms: self.converged_ms.last().copied().unwrap_or(0),
            majority_after_last_join_ms: self.majority_at.map(|at| at.saturating_sub(spread_ms)),
            all_after_last_join_ms: self.all_at.map(|at| at.saturating_sub(spread_ms)),
            all_homes_at_end: placement.all,
            majority_at_end: placement.majority,
            expected_at_end: placement.expected,
            resolves: self.resolves,
            resolves_failed: self.resolves_failed,
            resolve_p50_ms: quantile(&self.resolve_ms, 0.5),
            resolve_p99_ms: quantile(&self.resolve_ms, 0.99),
            resolve_requests_p50: quantile(&self.resolve_asked, 0.5),
            resolve_requests_p99: quantile(&self.resolve_asked, 0.99),
            table_mean: started.iter().map(|n| n.machine.table().len()).sum::<usize>() as f64 / count,
            table_max: started.iter().map(|n| n.machine.table().len()).max().unwrap_or(0),
            held_mean: started.iter().map(|n| n.machine.held_len()).sum::<usize>() as f64 / count,
            held_max: started.iter().map(|n| n.machine.held_len()).max().unwrap_or(0),
        }
    }
}

impl PlacementOutcome {
    /// The text report.
    #[must_use]
    pub fn describe(&self) -> String {
        let mut out = format!(
            "{} seed {} (hash placement, k {}): {} — {} nodes, {} s simulated in {:.0} ms ({:.0} events/s), trace {}\n",
            self.scenario,
            self.seed,
            self.k,
            self.verdict,
            self.nodes,
            self.duration_s,
            self.wall_ms,
            self.events_per_sec,
            &self.trace_hash[..16.min(self.trace_hash.len())]
        );
        out.push_str(&format!(
            "  placed: {} (name, host) adverts acknowledged by their homes p50 {} ms p99 {} ms max {} ms after the host started\n",
            self.placed,
            self.placed_p50_ms,
            self.placed_p99_ms,
            self.placed_max_ms
        ));
        out.push_str(&format!(
            "  converged: {} adverts at a majority of their true homes p50 {} ms p99 {} ms max {} ms after the host started (sampled every {} ms)\n",
            self.converged,
            self.converged_p50_ms,
            self.converged_p99_ms,
            self.converged_max_ms,
            CONVERGE_EVERY_MS
        ));
        let when = |at: Option<u64>| {
            at.map_or_else(|| "not within the run".to_owned(), |ms| format!("{ms} ms after the last join"))
        };
        out.push_str(&format!(
            "  every advert at a majority of its {} homes: {}; at all of them: {} (checked each second); at the end {} of {} at all {}, {} at a majority\n",
            self.k,
            when(self.majority_after_last_join_ms),
            when(self.all_after_last_join_ms),
            self.all_homes_at_end,
            self.expected_at_end,
            self.k,
            self.majority_at_end
        ));
        out.push_str(&format!(
            "  resolves: {} asked, {} failed after the last join; p50 {} ms p99 {} ms, {} / {} requests (p50 / p99)\n",
            self.resolves,
            self.resolves_failed,
            self.resolve_p50_ms,
            self.resolve_p99_ms,
            self.resolve_requests_p50,
            self.resolve_requests_p99
        ));
        out.push_str(&format!(
            "  per node: {:.1} contacts (max {}), {:.1} adverts held (max {}), {:.1} msgs and {:.0} bytes per s; {} sent again after a loss; {} crashes\n",
            self.table_mean,
            self.table_max,
            self.held_mean,
            self.held_max,
            self.messages_per_node_per_sec,
            self.bytes_per_node_per_sec,
            self.messages_retransmitted,
            self.crashes
        ));
        for finding in &self.findings {
            out.push_str(&format!("  {finding}\n"));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scenario(nodes: usize) -> Scenario {
        let mut s = Scenario { nodes, duration_s: 40, ..Scenario::default() };
        s.topology.join_spread_s = 10;
        s.check.liveness_bound_s = 20;
        s
    }

    #[test]
    fn a_small_cold_start_places_every_advert_and_resolves_every_name() {
        let outcome = PlacementSim::new(scenario(200), 3).expect("a fault-free scenario").run();
        assert_eq!(outcome.exit_code, 0, "{}", outcome.describe());
        assert_eq!(outcome.majority_at_end, outcome.expected_at_end);
        assert!(outcome.resolves > 50, "{}", outcome.describe());
    }

    #[test]
    fn a_run_that_ends_before_the_adverts_settle_fails_liveness() {
        // The run stops one second after the last possible join: the last hosts cannot
        // have placed their adverts, and the placement check must say so.
        let mut s = scenario(100);
        s.duration_s = s.topology.join_spread_s + 1;
        let outcome = PlacementSim::new(s, 3).expect("runs").run();
        assert_eq!(outcome.exit_code, exit::LIVENESS, "{}", outcome.describe());
        assert!(outcome.findings.iter().any(|f| f.contains("majority")), "{:?}", outcome.findings);
    }

    #[test]
    fn the_same_seed_gives_the_same_trace() {
        let a = PlacementSim::new(scenario(100), 9).expect("runs").run();
        let b = PlacementSim::new(scenario(100), 9).expect("runs").run();
        let c = PlacementSim::new(scenario(100), 10).expect("runs").run();
        assert_eq!(a.trace_hash, b.trace_hash);
        assert_ne!(a.trace_hash, c.trace_hash);
    }

    #[test]
    fn homes_are_the_k_closest_started_nodes() {
        let sim = PlacementSim::new(scenario(300), 1).expect("runs");
        let mut sim = sim;
        for ix in 0..300 {
            let key = sim.nodes[ix].key;
            sim.sorted.push((key, ix as Ix));
        }
        sim.sorted.sort();
        for name in ["svc-1", "svc-77", "other"] {
            let key = Key::of_name(name);
            let mut brute: Vec<(murmur_protocol::placement::Distance, Ix)> =
                sim.sorted.iter().map(|(k, ix)| (k.distance(&key), *ix)).collect();
            brute.sort();
            let want: Vec<Ix> = brute.into_iter().take(sim.config.k).map(|(_, ix)| ix).collect();
            assert_eq!(sim.homes(&key), want, "{name}");
        }
    }

    #[test]
    fn scenarios_with_what_this_world_does_not_model_are_refused() {
        let mut s = scenario(10);
        s.faults.push(Fault::Partition {
            at_s: 5,
            until_s: 8,
            fraction: 0.5,
            by_region: false,
            one_way: false,
            nodes: Vec::new(),
        });
        let err = PlacementSim::new(s, 1).expect_err("refused");
        assert!(err.contains("partition"), "{err}");
    }

    /// 200 nodes; 20 s in, the `nearest` nodes nearest one name crash for good, and
    /// others at random (33 in all); homes replicate every 5 s, hosts every `refresh_s`.
    fn crashing(nearest: usize, refresh_s: u64) -> PlacementOutcome {
        let mut s = scenario(200);
        s.protocol.sync_interval_s = 5;
        s.protocol.refresh_s = refresh_s;
        let probe = PlacementSim::new(s.clone(), 4).expect("runs");
        let name = Key::of_name(&s.capsule_names()[0]);
        let mut by_distance: Vec<(murmur_protocol::placement::Distance, usize)> =
            probe.nodes.iter().enumerate().map(|(ix, n)| (n.key.distance(&name), ix)).collect();
        by_distance.sort();
        let nodes = by_distance.iter().take(nearest).map(|(_, ix)| *ix).collect();
        s.faults.push(Fault::Crash { at_s: 20, count: 33, nodes, restart_after_s: None });
        PlacementSim::new(s, 4).expect("crashes are modelled").run()
    }

    #[test]
    fn homes_that_crash_are_replaced_and_names_stay_resolvable() {
        let outcome = crashing(6, 1_000);
        assert_eq!(outcome.exit_code, 0, "{}", outcome.describe());
        assert_eq!(outcome.crashes, 33);
        assert_eq!(outcome.all_homes_at_end, outcome.expected_at_end, "{}", outcome.describe());
    }

    #[test]
    fn a_name_whose_every_holder_crashed_is_found_again_once_its_hosts_republish() {
        // The 16 nearest held every copy of some adverts: nothing is left to replicate
        // them from, until their hosts store them again, which they do every refresh.
        let lost = crashing(16, 1_000);
        assert_eq!(lost.exit_code, exit::LIVENESS, "{}", lost.describe());
        assert!(lost.findings.iter().any(|f| f.contains("held by 0 of its 8 homes")), "{:?}", lost.findings);
        let found = crashing(16, 4);
        assert_eq!(found.exit_code, 0, "{}", found.describe());
    }

    #[test]
    fn a_node_that_restarts_joins_and_places_again() {
        let mut s = scenario(150);
        s.protocol.sync_interval_s = 5;
        s.faults.push(Fault::Crash { at_s: 15, count: 20, nodes: vec![0, 1], restart_after_s: Some(5) });
        let a = PlacementSim::new(s.clone(), 6).expect("runs").run();
        assert_eq!(a.exit_code, 0, "{}", a.describe());
        assert_eq!(a.crashes, 20);
        // Every node is up at the end, restarted ones included, with its adverts placed.
        assert_eq!(a.expected_at_end, 300, "{}", a.describe());
        assert_eq!(a.majority_at_end, 300);
        // The restarted nodes' adverts converge again, and are counted again.
        assert_eq!(a.converged, 300 + 2 * 20, "{}", a.describe());
        assert_eq!(a.trace_hash, PlacementSim::new(s, 6).expect("runs").run().trace_hash);
    }

    #[test]
    fn a_lossy_duplicating_cold_start_still_places_and_resolves() {
        let mut s = scenario(200);
        s.network.loss = 0.03;
        s.network.duplicate = 0.02;
        s.faults.push(Fault::Loss { at_s: 2, until_s: 8, loss: 0.2 });
        let outcome = PlacementSim::new(s.clone(), 5).expect("loss is modelled").run();
        assert_eq!(outcome.exit_code, 0, "{}", outcome.describe());
        assert!(outcome.messages_retransmitted > 100, "{}", outcome.describe());
        assert_eq!(outcome.majority_at_end, outcome.expected_at_end);
        let again = PlacementSim::new(s, 5).expect("runs").run();
        assert_eq!(outcome.trace_hash, again.trace_hash);
    }
}
