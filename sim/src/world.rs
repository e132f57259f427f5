//! The simulated world: nodes running the real [`MeshNode`], a modelled network between
//! them, faults, a workload, and the checkers watching it all.
//!
//! One event queue ordered by (time, insertion order) drives everything; time jumps to the
//! next event. Each node sees the virtual clock plus its own fixed offset (clock skew).
//! Nodes are numbered in creation order; every collection iterated while producing events
//! is ordered (vectors, `BTreeSet`), and hash maps are used for lookups only, so nothing
//! about a run depends on hash seeds, wall time or threads.
//!
//! This module holds the world's state (the [`Sim`] and its nodes), how a run is set up,
//! the events and the loop that dispatches them, and the verdict at the end. Each part of
//! the world around the loop has a module of its own: `driver` feeds a node's mesh machine
//! and carries out its outputs, `options` is how a run is set up besides its scenario,
//! `net`, `gossip` and `topology` model the network and libp2p over it, `faults` and
//! `byzantine` break things, `revoking` plays the authorities revoking nodes and grants,
//! and `tasks`, `artifacts` and `models` hold the task, artifact and model parts of the
//! world (`TaskModel`, `ArtifactModel`, `ModelTraffic`).

mod artifacts;
mod byzantine;
mod driver;
mod exchange;
mod faults;
mod gossip;
mod models;
mod net;
mod options;
mod owner;
mod pulls;
mod resolves;
mod revoking;
mod tasks;
mod topology;
mod unauthorized;
mod warm;

pub use options::{Options, Plant};

use gossip::Message;

use std::collections::{BTreeSet, VecDeque};

use crate::fxhash::FxHashMap as HashMap;
use std::sync::Arc;
use std::time::Instant;

use murmur_protocol::advert::HostedCapsule;
use murmur_protocol::cert::NodeCert;
use murmur_protocol::directory::{Admission, DirectoryConfig};
use murmur_protocol::limits::GOSSIP_HEARTBEAT_MS;
use murmur_protocol::mesh::{MeshConfig, MeshNode};
use murmur_protocol::verify::Verifier;
use murmur_protocol::{Envelope, Millis, NodeId, SecretKey, Signed};

use crate::check::{Oracle, Violation};
use crate::engine::EventQueue;
use crate::report::{FaultEffect, Metrics, Outcome};
use crate::rng::SimRng;
use crate::scenario::{ByzantineRole, Fault, Scenario};
use crate::trace::TraceHash;
use crate::verifier::{AcceptAll, SharedVerifier};

/// Virtual time zero, as the nodes' clocks read it (a date in 2027, so grant-like windows
/// look realistic).
pub const EPOCH: Millis = Millis(1_800_000_000_000);

/// Events in flight at most. A run that needs more is a bug in the model or the protocol
/// (a message storm), reported as a bound violation.
pub const QUEUE_MAX: usize = 50_000_000;

/// gossipsub's duplicate cache; a replayed message arriving later is new to the gossip layer.
pub const GOSSIP_DUPLICATE_CACHE_MS: u64 = 60_000;

/// What one node's directory says: capsule name → indices of the nodes hosting it.
pub type DirectoryView = std::collections::BTreeMap<String, Vec<u32>>;

/// One node's directory over time: when (ms) it changed, and to what (`None`: down).
pub type ViewTimeline = Vec<(u64, Option<DirectoryView>)>;

/// Recent adverts remembered per node for the liveness check.
const PUBLISHED_HISTORY_MAX: usize = 16;

type Ix = u32;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    Honest,
    Byzantine { role: ByzantineRole, fault: usize },
}

#[derive(Debug)]
struct Node {
    key: SecretKey,
    id: NodeId,
    region: usize,
    clock_offset_ms: i64,
    role: Role,
    mesh: Option<MeshNode>,
    /// Bumped on every crash; events addressed to an older epoch are dropped.
    epoch: u32,
    /// Left for good (churn, byzantine retirement).
    gone: bool,
    down_since: Option<u64>,
    /// When this life began (the last start or restart).
    up_since: u64,
    timer_at: Option<u64>,
    peers: BTreeSet<Ix>,
    gossip_mesh: Vec<Ix>,
    /// gossipsub's message cache: ids of the messages this node forwarded, one window per
    /// heartbeat, newest first (in memory: a crash empties it).
    mcache: VecDeque<Vec<u32>>,
    /// Draws for lazy gossip (which peers get an IHAVE), apart from the node's other draws.
    gossip_rng: SimRng,
    uplink_free_at: u64,
    slow_extra_ms: u64,
    capsules: Vec<HostedCapsule>,
    rng: SimRng,
    /// Outbound sync requests: request id → peer.
    syncing: HashMap<u64, Ix>,
    /// Inbound sync requests awaiting our answer: token → (requester, request id).
    answering: HashMap<u64, (Ix, u64)>,
    /// Replayer: genuine envelopes captured from gossip.
    captured: VecDeque<Envelope>,
    /// Our recent adverts: (published at, seq), oldest first, a few at most.
    published: VecDeque<(u64, u64)>,
    /// Our certificate, in a closed mesh (none for an `uncertified` byzantine node).
    cert: Option<Envelope>,
    /// The `revoke` fault that revoked this node, if one did: it runs on, unaware.
    revoked: Option<usize>,
    /// The revocation lists its store holds (it survives crashes), handed to the mesh at
    /// every start.
    lists: Vec<Envelope>,
}

impl Node {
    /// The fault that made this node an `uncertified` byzantine node, if it is one.
    const fn uncertified(&self) -> Option<usize> {
        match self.role {
            Role::Byzantine { role: ByzantineRole::Uncertified, fault } => Some(fault),
            _ => None,
        }
    }

    fn alive(&self) -> bool {
        self.mesh.is_some()
    }

    /// Counted among the live nodes every advert must reach: not an `uncertified` node,
    /// nor a revoked one (the mesh shuts both out).
    const fn counted(&self) -> bool {
        self.uncertified().is_none() && self.revoked.is_none()
    }
}

/// Everything that happens in a run. `IHave` and `IWant` are gossipsub's lazy gossip
/// (only with `topology.lazy_gossip`): "I have these recent messages", and "send me these".
/// `PingLapse`: a ping across a partition went unanswered; the connection closes if a
/// partition still cuts it. `RevocationCheck`: the revocation checker's look at what every
/// node holds.
#[derive(Debug)]
enum Event {
    Start {
        node: Ix,
    },
    Timer {
        node: Ix,
        epoch: u32,
    },
    Heartbeat {
        node: Ix,
        epoch: u32,
    },
    Gossip {
        to: Ix,
        from: Ix,
        msg: u32,
        epoch: u32,
    },
    IHave {
        to: Ix,
        from: Ix,
        ids: Arc<[u32]>,
        epoch: u32,
    },
    IWant {
        to: Ix,
        from: Ix,
        ids: Arc<[u32]>,
        epoch: u32,
    },
    /// An anti-entropy request as it travels: its bytes from the shipping codec.
    SyncRequest {
        to: Ix,
        from: Ix,
        req: u64,
        bytes: Arc<[u8]>,
        epoch: u32,
    },
    /// An anti-entropy answer as it travels: its bytes from the shipping codec.
    SyncResponse {
        to: Ix,
        from: Ix,
        req: u64,
        bytes: Arc<[u8]>,
        epoch: u32,
    },
    SyncTimeout {
        node: Ix,
        req: u64,
        epoch: u32,
    },
    Connected {
        a: Ix,
        b: Ix,
        epoch_a: u32,
        epoch_b: u32,
    },
    PingLapse {
        a: Ix,
        b: Ix,
        epoch_a: u32,
        epoch_b: u32,
    },
    /// `from`'s gossipsub subscriptions reached `to` on their new connection.
    Subscribed {
        to: Ix,
        from: Ix,
        epoch_to: u32,
        epoch_from: u32,
    },
    FaultStart {
        fault: usize,
    },
    FaultEnd {
        fault: usize,
    },
    Restart {
        node: Ix,
    },
    ChurnStep {
        fault: usize,
    },
    Misbehave {
        node: Ix,
    },
    WorkloadChange,
    WorkloadQuery,
    LivenessCheck,
    RevocationCheck,
    Task(tasks::TaskEvent),
    Artifact(artifacts::ArtifactEvent),
    Model(models::ModelEvent),
}

impl Event {
    /// Tag and numbers for the trace hash.
    fn trace(&self) -> (u8, u64, u64) {
        match self {
            Self::Start { node } => (1, u64::from(*node), 0),
            Self::Timer { node, .. } => (2, u64::from(*node), 0),
            Self::Gossip { to, msg, .. } => (3, u64::from(*to), u64::from(*msg)),
            Self::SyncRequest { to, req, .. } => (4, u64::from(*to), *req),
            Self::SyncResponse { to, req, .. } => (5, u64::from(*to), *req),
            Self::SyncTimeout { node, req, .. } => (6, u64::from(*node), *req),
            Self::Connected { a, b, .. } => (7, u64::from(*a), u64::from(*b)),
            Self::FaultStart { fault } => (8, *fault as u64, 0),
            Self::FaultEnd { fault } => (9, *fault as u64, 0),
            Self::Restart { node } => (10, u64::from(*node), 0),
            Self::ChurnStep { fault } => (11, *fault as u64, 0),
            Self::Misbehave { node } => (12, u64::from(*node), 0),
            Self::WorkloadChange => (13, 0, 0),
            Self::WorkloadQuery => (14, 0, 0),
            Self::LivenessCheck => (15, 0, 0),
            Self::Heartbeat { node, .. } => (16, u64::from(*node), 0),
            Self::IHave { to, from, .. } => (17, u64::from(*to), u64::from(*from)),
            Self::IWant { to, from, .. } => (18, u64::from(*to), u64::from(*from)),
            Self::PingLapse { a, b, .. } => (19, u64::from(*a), u64::from(*b)),
            Self::Subscribed { to, from, .. } => (28, u64::from(*to), u64::from(*from)),
            Self::RevocationCheck => (70, 0, 0),
            Self::Task(event) => event.trace(),
            Self::Artifact(event) => event.trace(),
            Self::Model(event) => event.trace(),
        }
    }

    /// The encoded message this event delivers, if it delivers one: folded into the trace
    /// hash, so a change in what goes on the wire changes the hash.
    fn wire_bytes(&self) -> Option<&[u8]> {
        match self {
            Self::SyncRequest { bytes, .. } | Self::SyncResponse { bytes, .. } => Some(bytes),
            Self::Task(event) => event.wire_bytes(),
            Self::Artifact(event) => event.wire_bytes(),
            _ => None,
        }
    }
}
/// A running simulation.
pub struct Sim {
    scenario: Scenario,
    options: Options,
    now: u64,
    queue: EventQueue<Event>,
    nodes: Vec<Node>,
    index: HashMap<NodeId, Ix>,
    /// Identities Sybil nodes minted: real keys of nodes that do not exist.
    sybils: HashMap<NodeId, Ix>,
    messages: Vec<Message>,
    links: HashMap<(Ix, Ix), SimRng>,
    faults_rng: SimRng,
    /// When each connection a partition cuts has its next ping due.
    pings_rng: SimRng,
    workload_rng: SimRng,
    partitions: Vec<net::Partition>,
    /// Connections a partition cut, per direction: see [`net::Stall`].
    stalls: HashMap<(Ix, Ix), net::Stall>,
    extra_loss: (f64, Option<usize>),
    slowed: Vec<(usize, Ix)>,
    mesh_config: MeshConfig,
    verifier: Arc<dyn Verifier>,
    shared: Option<Arc<SharedVerifier>>,
    /// The closed mesh's certificate authority (`protocol.closed`).
    authority: Option<SecretKey>,
    oracle: Oracle,
    /// Each acceptance's delay from publication (ms), keyed by (join?, from region, to
    /// region): the propagation figures.
    delays: std::collections::BTreeMap<(bool, usize, usize), Vec<u32>>,
    /// For each node that started during the run: how long (ms) after its start every live
    /// node held an advert of it.
    known_after_start: Vec<u64>,
    /// The nodes counted there.
    known_started: std::collections::BTreeSet<u32>,
    trace: TraceHash,
    metrics: Metrics,
    effects: Vec<FaultEffect>,
    violations: Vec<Violation>,
    capsule_names: Vec<String>,
    capsule_overrides: HashMap<usize, Vec<HostedCapsule>>,
    next_req: u64,
    /// When the run was set up: its wall time includes the setup (a warm start's).
    created: Instant,
    /// Live nodes but the uncertified ones (see `live_honest_count`).
    live_honest: u32,
    converged_at: Option<u64>,
    last_liveness_gap: String,
    /// The task part of the world, when the scenario has a `[tasks]` section.
    tasks: Option<Box<tasks::TaskModel>>,
    /// The artifact part of the world, when the scenario has an `[artifacts]` section.
    artifacts: Option<Box<artifacts::ArtifactModel>>,
    /// The revocation part of the world, when the scenario has a `revoke` fault.
    revocations: Option<Box<revoking::RevocationModel>>,
    /// The model part of the world, when the scenario has a `[models]` section.
    models: Option<Box<models::ModelTraffic>>,
}

impl std::fmt::Debug for Sim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sim")
            .field("scenario", &self.scenario.name)
            .field("now", &self.now)
            .finish_non_exhaustive()
    }
}

impl Sim {
    /// Sets up a run: nodes, their start times, faults and workload.
    #[must_use]
    pub fn new(mut scenario: Scenario, options: Options) -> Self {
        tasks::prepare(&mut scenario, options);
        artifacts::prepare(&mut scenario, options);
        revoking::prepare(&mut scenario, options);
        if options.canary {
            let until_s = scenario.faults_end_s().max(10);
            scenario.ensure_byzantine(ByzantineRole::Forger, (1, until_s), 500);
        }
        let (verifier, shared): (Arc<dyn Verifier>, Option<Arc<SharedVerifier>>) = if options.canary {
            (Arc::new(AcceptAll), None)
        } else if options.uncached {
            (Arc::new(murmur_protocol::verify::Ed25519Verifier), None)
        } else {
            let shared = Arc::new(SharedVerifier::default());
            (shared.clone(), Some(shared))
        };
        if options.plant == Some(Plant::OpenAdmission) {
            prepare_open_admission(&mut scenario);
        }
        let p = &scenario.protocol;
        let authority =
            p.closed.then(|| SecretKey::from_seed(SimRng::stream(options.seed, "authority").bytes32()));
        let admission = match &authority {
            // The planted bug: certificates are handed out, but nobody checks them.
            Some(_) if options.plant == Some(Plant::OpenAdmission) => Admission::Open,
            Some(key) => Admission::Closed { authorities: vec![key.public()] },
            None => Admission::Open,
        };
        let seed = options.seed;
        let tasks = scenario.tasks.clone().map(|config| Box::new(tasks::TaskModel::new(config, seed)));
        // Every directory takes the lists of both authorities: the certificate authority's
        // (nodes) and the grant authority's (grants), as `trust.authorities` lists both.
        let authorities = authority
            .iter()
            .map(SecretKey::public)
            .chain(tasks.iter().flat_map(|t| t.authorities.iter().copied()))
            .collect();
        let mesh_config = MeshConfig {
            refresh_ms: p.refresh_s * 1000,
            ttl_ms: p.ttl_s * 1000,
            sync_interval_ms: p.sync_interval_s * 1000,
            peers_target: p.peers_target,
            suspect_ms: p.suspect_s * 1000,
            announce_early: p.announce_early,
            directory: DirectoryConfig {
                clock_skew_max_ms: p.clock_skew_max_s * 1000,
                nodes_max: p.directory_nodes_max,
                admission,
                authorities,
                plants: options.plants(),
                ..DirectoryConfig::default()
            },
            ..MeshConfig::default()
        };
        let oracle = Oracle::new(mesh_config.directory.ttl_max_ms, mesh_config.directory.clock_skew_max_ms);
        let revocations = revoking::model(&scenario);
        let artifacts =
            scenario.artifacts.clone().map(|config| Box::new(artifacts::ArtifactModel::new(config, seed)));
        let models = scenario.models.clone().map(|config| Box::new(models::ModelTraffic::new(config, seed)));
        let mut sim = Self {
            options,
            now: 0,
            queue: EventQueue::default(),
            nodes: Vec::new(),
            index: HashMap::default(),
            sybils: HashMap::default(),
            messages: Vec::new(),
            links: HashMap::default(),
            faults_rng: SimRng::stream(seed, "faults"),
            pings_rng: SimRng::stream(seed, "pings"),
            workload_rng: SimRng::stream(seed, "workload"),
            partitions: Vec::new(),
            stalls: HashMap::default(),
            extra_loss: (0.0, None),
            slowed: Vec::new(),
            mesh_config,
            verifier,
            shared,
            authority,
            oracle,
            delays: std::collections::BTreeMap::new(),
            known_after_start: Vec::new(),
            known_started: std::collections::BTreeSet::new(),
            trace: TraceHash::default(),
            metrics: Metrics::default(),
            effects: scenario.faults.iter().map(|f| FaultEffect { fault: f.label(), effects: 0 }).collect(),
            violations: Vec::new(),
            capsule_names: Vec::new(),
            capsule_overrides: HashMap::default(),
            next_req: 0,
            live_honest: 0,
            created: Instant::now(),
            converged_at: None,
            last_liveness_gap: String::new(),
            tasks,
            artifacts,
            revocations,
            models,
            scenario,
        };
        sim.populate();
        sim
    }

    fn populate(&mut self) {
        let n = self.scenario.nodes;
        self.capsule_names = self.scenario.capsule_names();
        let spread_ms = self.scenario.topology.join_spread_s * 1000;
        let mut start_rng = SimRng::stream(self.options.seed, "starts");
        for _ in 0..n {
            let node = self.add_node(Role::Honest);
            if !self.scenario.topology.warm_start {
                let at = start_rng.between(0, spread_ms);
                self.schedule(at, Event::Start { node });
            }
        }
        if self.scenario.topology.warm_start {
            self.warm_start();
        }
        self.tasks_populate();
        self.artifacts_populate();
        self.models_populate();
        for (i, fault) in self.scenario.faults.clone().iter().enumerate() {
            let (at_s, ends) = match fault {
                Fault::Crash { at_s, .. }
                | Fault::MassRestart { at_s, .. }
                | Fault::Join { at_s, .. }
                | Fault::Revoke { at_s, .. } => (*at_s, None),
                Fault::Partition { at_s, until_s, .. }
                | Fault::Churn { at_s, until_s, .. }
                | Fault::Slow { at_s, until_s, .. }
                | Fault::Loss { at_s, until_s, .. }
                | Fault::Byzantine { at_s, until_s, .. } => (*at_s, Some(*until_s)),
            };
            self.schedule(at_s * 1000, Event::FaultStart { fault: i });
            if let Some(until_s) = ends {
                self.schedule(until_s * 1000, Event::FaultEnd { fault: i });
            }
        }
        let (change_ms, query_ms) =
            (self.scenario.workload.change_interval_ms, self.scenario.workload.query_interval_ms);
        if change_ms > 0 {
            self.schedule(change_ms, Event::WorkloadChange);
        }
        if query_ms > 0 {
            self.schedule(query_ms, Event::WorkloadQuery);
        }
        self.schedule(self.liveness_from_ms(), Event::LivenessCheck);
    }

    /// Liveness is judged from when faults have ended and every initial node has started.
    pub(crate) fn liveness_from_ms(&self) -> u64 {
        self.scenario.faults_end_s().max(self.scenario.topology.join_spread_s) * 1000
    }

    fn add_node(&mut self, role: Role) -> Ix {
        let ix = self.nodes.len() as Ix;
        let mut rng = SimRng::stream(self.options.seed, &format!("node/{ix}"));
        let key = SecretKey::from_seed(rng.bytes32());
        let region = self.pick_region(&mut rng);
        let skew_ms = (self.scenario.protocol.clock_skew_max_s * 1000 / 4) as i64;
        let clock_offset_ms =
            if skew_ms > 0 { rng.between(0, 2 * skew_ms as u64) as i64 - skew_ms } else { 0 };
        let capsules = self
            .scenario
            .hosted_names(&self.capsule_names, ix as usize)
            .into_iter()
            .map(|name| HostedCapsule { name, digest: None, version: "1.0.0".into() })
            .collect::<Vec<_>>();
        let mut capsules = self.capsule_overrides.get(&(ix as usize)).cloned().unwrap_or(capsules);
        capsules.sort();
        capsules.dedup_by(|a, b| a.name == b.name);
        let id = key.node_id();
        let cert = match (&self.authority, role) {
            (None, _) | (Some(_), Role::Byzantine { role: ByzantineRole::Uncertified, .. }) => None,
            (Some(authority), _) => {
                // Valid for any clock a run can show.
                let cert = NodeCert::new(id, u64::from(ix), Millis(0), Millis(u64::MAX / 2));
                Some(Signed::sign(cert, authority).expect("a node certificate encodes").into_envelope())
            }
        };
        if let Some(model) = self.tasks.as_deref_mut() {
            model.add_node(ix, self.options.seed);
        }
        if let Some(model) = self.artifacts.as_deref_mut() {
            model.add_node(ix);
        }
        if let Some(traffic) = self.models.as_deref_mut() {
            traffic.add_node(ix);
        }
        self.index.insert(id, ix);
        self.nodes.push(Node {
            key,
            id,
            region,
            clock_offset_ms,
            role,
            mesh: None,
            epoch: 0,
            gone: false,
            down_since: Some(0),
            up_since: 0,
            timer_at: None,
            peers: BTreeSet::new(),
            gossip_mesh: Vec::new(),
            mcache: VecDeque::new(),
            gossip_rng: SimRng::stream(self.options.seed, &format!("gossip/{ix}")),
            uplink_free_at: 0,
            slow_extra_ms: 0,
            capsules,
            rng,
            syncing: HashMap::default(),
            answering: HashMap::default(),
            captured: VecDeque::new(),
            published: VecDeque::new(),
            cert,
            revoked: None,
            lists: Vec::new(),
        });
        ix
    }

    fn pick_region(&self, rng: &mut SimRng) -> usize {
        self.scenario.pick_region(rng)
    }

    fn schedule(&mut self, at: u64, event: Event) {
        self.queue.push(at, event);
    }

    /// The clock node `ix` reads now.
    fn clock(&self, ix: Ix) -> Millis {
        let offset = self.nodes[ix as usize].clock_offset_ms;
        Millis((EPOCH.0 + self.now).saturating_add_signed(offset))
    }

    /// Sets the capsules node `ix` hosts (in creation order, including nodes that join
    /// later), instead of the workload's generated ones. For scenarios mirrored by real
    /// processes.
    pub fn set_capsules(&mut self, ix: usize, capsules: Vec<HostedCapsule>) {
        if let Some(node) = self.nodes.get_mut(ix) {
            node.capsules.clone_from(&capsules);
        }
        self.capsule_overrides.insert(ix, capsules);
    }

    /// Runs to the end and also returns, for every node alive at the end, what its
    /// directory says: capsule name → indices of the nodes hosting it.
    pub fn run_with_views(mut self) -> (Outcome, Vec<Option<DirectoryView>>) {
        self.step_to_end();
        let started = self.created;
        let views = (0..self.nodes.len() as Ix).map(|ix| self.directory_view(ix)).collect();
        (self.finish(started.elapsed()), views)
    }

    /// Runs to the end, changing what nodes host at given times (`changes`: milliseconds,
    /// node index, its new capsules, in time order), and also returns every node's
    /// directory as sampled every `every_ms`: for each node, the times at which its view
    /// changed and the view from then on (`None` while the node is down). This is what a
    /// test watching real processes sees, so the two can be compared change by change.
    pub fn run_timeline(
        mut self,
        every_ms: u64,
        changes: &[(u64, usize, Vec<HostedCapsule>)],
    ) -> (Outcome, Vec<ViewTimeline>) {
        let every_ms = every_ms.max(1);
        let end = self.scenario.duration_s * 1000;
        let mut timelines: Vec<ViewTimeline> = Vec::new();
        let mut pending = changes.iter().peekable();
        let mut at = 0;
        while at <= end {
            self.step_until(at);
            // Every event due by `at` has run and every queued one is later: the clock can
            // stand at `at` while the changes due now are made.
            self.now = at;
            while let Some((_, node, capsules)) = pending.next_if(|(when, ..)| *when <= at) {
                let mut capsules = capsules.clone();
                capsules.sort();
                self.set_capsules(*node, capsules);
                let ix = *node as Ix;
                if self.nodes.get(*node).is_some_and(|n| n.mesh.is_some()) {
                    let capsules = self.nodes[*node].capsules.clone();
                    self.handle(ix, murmur_protocol::mesh::Input::SetHosted { capsules }, None);
                }
            }
            timelines.resize_with(self.nodes.len(), Vec::new);
            for (ix, timeline) in timelines.iter_mut().enumerate() {
                let view = self.directory_view(ix as Ix);
                if timeline.last().is_none_or(|(_, last)| *last != view) {
                    timeline.push((at, view));
                }
            }
            at += every_ms;
        }
        let started = self.created;
        (self.finish(started.elapsed()), timelines)
    }

    fn directory_view(&self, ix: Ix) -> Option<DirectoryView> {
        let mesh = self.nodes[ix as usize].mesh.as_ref()?;
        let now = self.clock(ix);
        let mut view = DirectoryView::new();
        for name in mesh.directory().capsule_names() {
            let mut hosts: Vec<u32> = mesh
                .directory()
                .hosts(now, name)
                .filter_map(|(r, _)| self.index.get(&r.node()).copied())
                .collect();
            hosts.sort_unstable();
            if !hosts.is_empty() {
                view.insert(name.to_owned(), hosts);
            }
        }
        Some(view)
    }

    /// Runs to the end of the scenario and judges it.
    pub fn run(mut self) -> Outcome {
        self.step_to_end();
        let wall = self.created.elapsed();
        self.finish(wall)
    }

    fn step_to_end(&mut self) {
        self.step_until(self.scenario.duration_s * 1000);
    }

    /// Dispatches every event due by `end` (ms), leaving later ones queued, unless the
    /// queue outgrows its bound or ten violations are found first.
    fn step_until(&mut self, end: u64) {
        while let Some((at, event)) = self.queue.pop_until(end) {
            self.now = at;
            let (tag, a, b) = event.trace();
            self.trace.record(tag, self.now, a, b);
            if let Some(bytes) = event.wire_bytes() {
                self.trace.bytes(bytes);
            }
            self.metrics.events += 1;
            self.dispatch(event);
            self.metrics.queue_max = self.metrics.queue_max.max(self.queue.len() as u64);
            if self.queue.len() > QUEUE_MAX {
                self.violation(format!("event queue exceeded its bound of {QUEUE_MAX}"));
                break;
            }
            if self.violations.len() >= 10 {
                break;
            }
        }
    }

    fn dispatch(&mut self, event: Event) {
        match event {
            Event::Start { node } => self.start_node(node),
            Event::Restart { node } => {
                if !self.nodes[node as usize].gone {
                    self.start_node(node);
                }
            }
            Event::Timer { node, epoch } => self.mesh_timer(node, epoch),
            Event::Heartbeat { node, epoch } => {
                if self.is_current(node, epoch) {
                    self.heartbeat(node);
                    self.schedule(self.now + GOSSIP_HEARTBEAT_MS, Event::Heartbeat { node, epoch });
                }
            }
            Event::Gossip { to, from, msg, epoch } => self.deliver_gossip(to, from, msg, epoch),
            Event::IHave { to, from, ids, epoch } => self.receive_ihave(to, from, &ids, epoch),
            Event::IWant { to, from, ids, epoch } => self.receive_iwant(to, from, &ids, epoch),
            Event::SyncRequest { to, from, req, bytes, epoch } => {
                self.sync_requested(to, from, req, &bytes, epoch);
            }
            Event::SyncResponse { to, from, req, bytes, epoch } => {
                self.sync_answered(to, from, req, &bytes, epoch);
            }
            Event::SyncTimeout { node, req, epoch } => self.sync_timed_out(node, req, epoch),
            Event::Connected { a, b, epoch_a, epoch_b } => {
                if self.is_current(a, epoch_a) && self.is_current(b, epoch_b) {
                    self.connect(a, b);
                }
            }
            Event::PingLapse { a, b, epoch_a, epoch_b } => {
                if self.is_current(a, epoch_a) && self.is_current(b, epoch_b) {
                    self.ping_lapse(a, b);
                }
            }
            Event::Subscribed { to, from, epoch_to, epoch_from } => {
                if self.is_current(to, epoch_to) && self.is_current(from, epoch_from) {
                    self.subscribed(to, from);
                }
            }
            Event::FaultStart { fault } => self.fault_start(fault),
            Event::FaultEnd { fault } => self.fault_end(fault),
            Event::ChurnStep { fault } => self.churn_step(fault),
            Event::Misbehave { node } => self.misbehave(node),
            Event::WorkloadChange => self.workload_change(),
            Event::WorkloadQuery => self.workload_query(),
            Event::LivenessCheck => self.liveness_check(),
            Event::RevocationCheck => self.revocation_check(),
            Event::Task(event) => self.task_event(event),
            Event::Artifact(event) => self.artifact_event(event),
            Event::Model(event) => self.model_event(event),
        }
    }

    fn is_current(&self, node: Ix, epoch: u32) -> bool {
        let n = &self.nodes[node as usize];
        n.epoch == epoch && n.alive()
    }

    fn next_token(&mut self) -> u64 {
        self.next_req += 1;
        self.next_req
    }

    /// The fault that made node `ix` an `uncertified` byzantine node, if it is one.
    fn uncertified(&self, ix: Ix) -> Option<usize> {
        self.nodes[ix as usize].uncertified()
    }

    /// Live nodes expected to hold every advert (for convergence): all but the uncertified
    /// and the revoked ones, which the mesh shuts out.
    fn live_honest_count(&self) -> u32 {
        debug_assert_eq!(
            self.live_honest,
            self.nodes.iter().filter(|n| n.alive() && n.counted()).count() as u32
        );
        self.live_honest
    }

    /// Node `ix` came up (`up`) or went down, or a live node is revoked (`up` false): keeps
    /// the live count.
    fn count_live(&mut self, ix: Ix, up: bool) {
        if self.nodes[ix as usize].counted() {
            if up {
                self.live_honest += 1;
            } else {
                self.live_honest -= 1;
            }
        }
    }

    fn violation(&mut self, what: String) {
        self.violations.push(Violation { at_ms: self.now, what });
    }

    /// The propagation figures: convergence of joins and of changes, and (with more than
    /// one region) every acceptance's delay by region pair against the latency floor.
    fn set_propagation(&mut self) {
        let (mut joins, mut changes) = self.oracle.convergence_by_kind();
        joins.sort_unstable();
        changes.sort_unstable();
        self.metrics.convergence_joins = crate::report::Convergence::of(&joins);
        self.metrics.convergence_changes = crate::report::Convergence::of(&changes);
        self.metrics.converged_by_later_nodes = self.oracle.completed_late_count();
        let mut propagated = self.oracle.convergence_propagated_ms();
        propagated.sort_unstable();
        self.metrics.convergence_propagated = crate::report::Convergence::of(&propagated);
        let mut known = std::mem::take(&mut self.known_after_start);
        known.sort_unstable();
        self.metrics.joins_known_after_start = crate::report::Convergence::of(&known);
        let regions = &self.scenario.network.regions;
        if regions.len() < 2 {
            return;
        }
        let delays = std::mem::take(&mut self.delays);
        self.metrics.propagation = delays
            .into_iter()
            .map(|((first, from, to), delays)| {
                let mut sorted: Vec<u64> = delays.into_iter().map(u64::from).collect();
                sorted.sort_unstable();
                crate::report::Propagation {
                    kind: if first { "join" } else { "change" },
                    from: regions[from].name.clone(),
                    to: regions[to].name.clone(),
                    floor_ms: self.scenario.network.latency_ms[from][to],
                    deliveries: sorted.len() as u64,
                    p50_ms: crate::report::quantile(&sorted, 0.5),
                    p99_ms: crate::report::quantile(&sorted, 0.99),
                    max_ms: sorted.last().copied().unwrap_or(0),
                }
            })
            .collect();
    }

    fn finish(mut self, wall: std::time::Duration) -> Outcome {
        self.metrics.wall_ms = wall.as_secs_f64() * 1000.0;
        self.metrics.trace_records = self.trace.records();
        self.metrics.adverts_published = self.oracle.published_count() as u64;
        if std::env::var_os("MURMUR_SIM_DEBUG").is_some() {
            for (node, seq, at, by) in self.oracle.acceptance() {
                eprintln!("advert node {node} seq {seq} at {at} accepted by {by}");
            }
        }
        let mut convergence = self.oracle.convergence_ms();
        convergence.sort_unstable();
        self.metrics.set_convergence(&convergence);
        self.set_propagation();
        if let Some(shared) = &self.shared {
            let stats = shared.stats();
            self.metrics.ed25519_checks = stats.ed25519_checks;
            self.metrics.verify_cache_hits = stats.cache_hits;
        }
        let task_gap = self.tasks_finish();
        let artifact_gap = self.artifacts_finish();
        let model_gap = self.models_finish();
        self.revocations_finish();
        let node_seconds = (self.nodes.len().max(1) as f64) * (self.scenario.duration_s.max(1) as f64);
        self.metrics.messages_per_node_per_sec = self.metrics.messages_sent as f64 / node_seconds;
        self.metrics.bytes_per_node_per_sec = self.metrics.bytes_sent as f64 / node_seconds;
        self.metrics.nodes_total = self.nodes.len() as u64;
        self.metrics.peers_max =
            self.nodes.iter().filter(|n| n.alive()).map(|n| n.peers.len() as u64).max().unwrap_or(0);
        Outcome::judge(
            &self.scenario,
            self.options,
            self.trace.hex(),
            self.metrics,
            self.violations,
            self.effects,
            self.converged_at,
            self.last_liveness_gap,
            task_gap,
            artifact_gap,
            model_gap,
        )
    }
}

/// For `--plant open-admission`: the scenario becomes a closed mesh with an uncertified
/// node, if it is not one already, so the planted bug has something to admit.
fn prepare_open_admission(scenario: &mut Scenario) {
    scenario.protocol.closed = true;
    let until_s = scenario.faults_end_s().max(10);
    scenario.ensure_byzantine(ByzantineRole::Uncertified, (1, until_s), 1000);
}

#[cfg(test)]
mod tests;
