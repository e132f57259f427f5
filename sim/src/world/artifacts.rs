//! Artifact traffic: blobs, every node's artifact store and pulls, the pull workload,
//! pinned-artifact placement, and the artifact liveness check.
//!
//! Modelled as `murnode` will run it: each node keeps a durable store of verified chunks
//! (it survives crashes; a blob held whole is announced in the node's advert's
//! `artifacts` list, so other nodes learn of providers through gossip and their
//! directories) and, in memory, one protocol [`Pull`] per blob it is fetching. The driver
//! side (requests over `/murmur/artifact/1`, answers, timeouts, providers read from the
//! directory) is in `pulls`. A pull request is durable: a node that crashes mid-pull
//! resumes after restart from the chunks already stored.
//!
//! Pinned artifacts: every `pin_check_interval_ms` each node asks
//! [`replicate::should_hold`] over the nodes its directory lists, and pulls each pinned
//! artifact it should hold.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use murmur_protocol::catalog::{Catalog, CatalogArtifact, CatalogBlob};
use murmur_protocol::digest::Digest;
use murmur_protocol::pull::{Pull, PullStats};
use murmur_protocol::replicate;
use murmur_protocol::resolve::Resolution;
use murmur_protocol::{Envelope, Millis, SecretKey, Signed};

use super::{Event, Ix, Options, Plant, Role, Sim};
use crate::check::{ArtifactOracle, BlobTruth};
use crate::fxhash::FxHashMap as HashMap;
use crate::report::{ArtifactMetrics, FaultEffect};
use crate::rng::SimRng;
use crate::scenario::{ArtifactExercise, ArtifactWorkload, ByzantineRole, Scenario};

/// Chunk requests in flight over the whole run at most; a request beyond it fails at once
/// (each node's pulls bound theirs, so only a model bug reaches it).
pub(super) const REQUESTS_MAX: usize = 1_000_000;

/// One blob a node is pulling (in memory: a crash loses it).
#[derive(Debug)]
pub(super) struct ActivePull {
    pub pull: Pull,
    /// Providers the driver has told the pull about (and not taken back).
    pub known: BTreeSet<murmur_protocol::NodeId>,
    pub timer_at: Option<u64>,
    /// When the pull last reported that no provider was left.
    pub stalled_since: Option<u64>,
}

/// One blob a node is resolving (in memory: a crash loses it).
#[derive(Debug)]
pub(super) struct ActiveResolve {
    pub resolution: Resolution,
    pub timer_at: Option<u64>,
}

/// A resolve ask on the wire.
#[derive(Clone, Copy, Debug)]
pub(super) struct ResolveAsk {
    pub from: Ix,
    pub from_epoch: u32,
    pub to: Ix,
    pub blob: usize,
}

/// One node's artifact state.
#[derive(Debug, Default)]
pub(super) struct NodeArtifacts {
    /// Durable: per blob, chunk index → digest of the bytes written.
    pub store: BTreeMap<usize, BTreeMap<u32, Digest>>,
    /// Durable: blobs held whole (and announced).
    pub complete: BTreeSet<usize>,
    /// Durable: pulls asked for and not finished, blob → when asked (ms).
    pub wanted: BTreeMap<usize, u64>,
    /// In memory: pulls under way.
    pub pulls: BTreeMap<usize, ActivePull>,
    /// In memory: resolutions under way (a pull starts when its resolution is done).
    pub resolving: BTreeMap<usize, ActiveResolve>,
}

/// A chunk request on the wire.
#[derive(Clone, Copy, Debug)]
pub(super) struct ChunkRequest {
    pub from: Ix,
    pub from_epoch: u32,
    pub to: Ix,
    pub blob: usize,
    pub index: u32,
}

/// The artifact part of the modelled world: the blobs and their catalogs, every node's
/// artifact store and pulls, and the artifact oracle, for the whole run.
#[derive(Debug)]
pub(super) struct ArtifactModel {
    pub config: ArtifactWorkload,
    pub oracle: ArtifactOracle,
    pub nodes: Vec<NodeArtifacts>,
    pub requests: BTreeMap<u64, ChunkRequest>,
    pub asks: BTreeMap<u64, ResolveAsk>,
    pub next_req: u64,
    /// The run's publisher, whose signed catalog names each blob's manifest; the only key
    /// nodes trust.
    pub publisher: SecretKey,
    /// Per blob, the publisher's catalog naming it (what honest holders relay).
    pub catalogs: Vec<Envelope>,
    /// The corrupt providers' own key, and per blob the forged manifest and its catalog.
    pub forger: SecretKey,
    pub forgeries: Vec<(Digest, Envelope)>,
    pub links: HashMap<(Ix, Ix), SimRng>,
    pub rng: SimRng,
    pub stats: ArtifactMetrics,
    /// Counters of pulls that finished or were lost to crashes.
    pub totals: PullStats,
    /// Pull completion times (ms from request to the last chunk written).
    pub completion_ms: Vec<u64>,
    pub settled_at: Option<u64>,
    pub last_gap: String,
}

/// Artifact events.
#[derive(Debug)]
pub(super) enum ArtifactEvent {
    /// The workload's next pull request.
    Pull,
    /// A node re-reads its directory for the providers of its pulls.
    Refresh { node: Ix, epoch: u32 },
    /// A node checks which pinned artifacts it should hold.
    PinCheck { node: Ix, epoch: u32 },
    /// A pull's timer.
    PullTimer { node: Ix, epoch: u32, blob: usize },
    /// A chunk request reaches its provider (its bytes from the shipping codec).
    Request { to: Ix, from: Ix, req: u64, blob: usize, bytes: Arc<[u8]>, epoch: u32 },
    /// The answer reaches the puller: the digest of the bytes sent, or `None` (not held).
    Response { to: Ix, req: u64, answer: Option<Digest>, epoch: u32 },
    /// The request failed (dial refused).
    Failure { req: u64 },
    /// request-response gave up waiting.
    Timeout { req: u64 },
    /// A resolution's timer.
    ResolveTimer { node: Ix, epoch: u32, blob: usize },
    /// A resolve ask reaches its provider (its bytes from the shipping codec).
    Ask { to: Ix, from: Ix, req: u64, bytes: Arc<[u8]>, epoch: u32 },
    /// The answer to a resolve ask reaches the asking node (its bytes).
    Offer { to: Ix, req: u64, bytes: Arc<[u8]>, epoch: u32 },
    /// The ask failed (dial refused, or the connection closed).
    AskFailure { req: u64 },
    /// The connection from `node` to `provider` closed (the provider crashed).
    Closed { node: Ix, epoch: u32, provider: Ix },
    /// The artifact liveness check.
    Settle,
}

impl ArtifactEvent {
    /// Tag and numbers for the trace hash.
    pub(super) fn trace(&self) -> (u8, u64, u64) {
        match self {
            Self::Pull => (50, 0, 0),
            Self::Refresh { node, .. } => (51, u64::from(*node), 0),
            Self::PinCheck { node, .. } => (52, u64::from(*node), 0),
            Self::PullTimer { node, blob, .. } => (53, u64::from(*node), *blob as u64),
            Self::Request { to, req, .. } => (54, u64::from(*to), *req),
            Self::Response { to, req, .. } => (55, u64::from(*to), *req),
            Self::Failure { req } => (56, *req, 0),
            Self::Timeout { req } => (57, *req, 0),
            Self::Closed { node, provider, .. } => (58, u64::from(*node), u64::from(*provider)),
            Self::Settle => (59, 0, 0),
            Self::ResolveTimer { node, blob, .. } => (61, u64::from(*node), *blob as u64),
            Self::Ask { to, req, .. } => (62, u64::from(*to), *req),
            Self::Offer { to, req, .. } => (63, u64::from(*to), *req),
            Self::AskFailure { req } => (64, *req, 0),
        }
    }

    /// The encoded message this event delivers, if any. (A chunk answer carries the digest
    /// of the bytes sent, not the bytes: its size is the exact size of their frame.)
    pub(super) fn wire_bytes(&self) -> Option<&[u8]> {
        match self {
            Self::Request { bytes, .. } | Self::Ask { bytes, .. } | Self::Offer { bytes, .. } => Some(bytes),
            _ => None,
        }
    }
}

/// Adjusts the scenario for the planted artifact bug: artifact traffic if there is none,
/// and a corrupt provider whose chunks the bug lets through.
pub(super) fn prepare(scenario: &mut Scenario, options: Options) {
    if !matches!(options.plant, Some(Plant::WriteUnverified | Plant::TrustAnyOffer)) {
        return;
    }
    // Without a section of its own: blobs big enough, and honest providers few enough,
    // that every pull also asks the corrupt provider.
    let config = scenario
        .artifacts
        .get_or_insert_with(|| ArtifactWorkload {
            size_mib_min: 16,
            size_mib_max: 32,
            providers_initial: 1,
            ..ArtifactWorkload::default()
        })
        .clone();
    scenario.ensure_byzantine(
        ByzantineRole::CorruptProvider,
        (config.start_s.saturating_sub(5), config.until_s),
        1_000,
    );
}

impl ArtifactModel {
    pub(super) fn new(config: ArtifactWorkload, seed: u64) -> Self {
        let mut rng = SimRng::stream(seed, "artifacts/workload");
        let chunk = config.chunk_bytes();
        let blobs = (0..config.artifacts)
            .map(|b| {
                let size = rng.between(config.size_mib_min << 20, config.size_mib_max << 20);
                BlobTruth::derive(&format!("{seed}/art-{b}"), size, chunk)
            })
            .collect::<Vec<_>>();
        let publisher = SecretKey::from_seed(SimRng::stream(seed, "artifacts/publisher").bytes32());
        let forger = SecretKey::from_seed(SimRng::stream(seed, "artifacts/forger").bytes32());
        let catalogs =
            blobs.iter().enumerate().map(|(b, t)| catalog(&publisher, b, t.digest, t.size)).collect();
        let forgeries = blobs
            .iter()
            .enumerate()
            .map(|(b, t)| {
                let forged = Digest::of(format!("{seed}/forged/art-{b}").as_bytes());
                (forged, catalog(&forger, b, forged, t.size))
            })
            .collect();
        Self {
            config,
            oracle: ArtifactOracle::new(blobs),
            nodes: Vec::new(),
            requests: BTreeMap::new(),
            asks: BTreeMap::new(),
            next_req: 0,
            publisher,
            catalogs,
            forger,
            forgeries,
            links: HashMap::default(),
            rng,
            stats: ArtifactMetrics::default(),
            totals: PullStats::default(),
            completion_ms: Vec::new(),
            settled_at: None,
            last_gap: String::new(),
        }
    }

    pub(super) fn add_node(&mut self, ix: Ix) {
        debug_assert_eq!(self.nodes.len(), ix as usize);
        self.nodes.push(NodeArtifacts::default());
    }

    /// The forged manifest of `blob` and the forger's catalog naming it.
    pub(super) fn forged(&self, blob: usize) -> Option<(Digest, Envelope)> {
        self.forgeries.get(blob).cloned()
    }

    /// Every blob's digest, in blob order.
    pub(super) fn digests(&self) -> Vec<Digest> {
        self.oracle.blobs().iter().map(|b| b.digest).collect()
    }
}

impl Sim {
    /// Places each artifact whole on a few initial nodes and schedules the workload.
    pub(super) fn artifacts_populate(&mut self) {
        let n = self.nodes.len();
        let Some(model) = self.artifacts.as_deref_mut() else { return };
        let c = model.config.clone();
        let mut all: Vec<Ix> = (0..n as Ix).collect();
        for b in 0..c.artifacts {
            model.rng.shuffle(&mut all);
            let truth = model.oracle.blobs()[b].chunks.clone();
            for &h in all.iter().take(c.providers_initial) {
                let node = &mut model.nodes[h as usize];
                node.store.insert(b, truth.iter().enumerate().map(|(i, d)| (i as u32, *d)).collect());
                node.complete.insert(b);
            }
        }
        self.schedule(c.start_s * 1000, Event::Artifact(ArtifactEvent::Pull));
        self.schedule(self.scenario.artifacts_settle_from_s() * 1000, Event::Artifact(ArtifactEvent::Settle));
    }

    pub(super) fn artifact_event(&mut self, event: ArtifactEvent) {
        match event {
            ArtifactEvent::Pull => self.artifact_workload(),
            ArtifactEvent::Refresh { node, epoch } => {
                if self.is_current(node, epoch) {
                    self.refresh_pulls(node);
                    let interval = self.artifacts.as_deref().map_or(1000, |w| w.config.refresh_ms);
                    self.schedule(
                        self.now + interval,
                        Event::Artifact(ArtifactEvent::Refresh { node, epoch }),
                    );
                }
            }
            ArtifactEvent::PinCheck { node, epoch } => {
                if self.is_current(node, epoch) {
                    self.pin_check(node);
                    let interval = self.artifacts.as_deref().map_or(1000, |w| w.config.pin_check_interval_ms);
                    self.schedule(
                        self.now + interval,
                        Event::Artifact(ArtifactEvent::PinCheck { node, epoch }),
                    );
                }
            }
            ArtifactEvent::PullTimer { node, epoch, blob } => {
                if self.is_current(node, epoch) {
                    self.pull_timer(node, blob);
                }
            }
            ArtifactEvent::Request { to, from, req, blob, bytes, epoch } => {
                if self.is_current(to, epoch) {
                    self.serve_chunk(to, from, req, blob, &bytes);
                }
            }
            ArtifactEvent::Response { to, req, answer, epoch } => {
                if self.is_current(to, epoch) {
                    self.chunk_answered(req, answer);
                }
            }
            ArtifactEvent::Failure { req } => self.chunk_failed(req, "dial refused"),
            ArtifactEvent::Timeout { req } => self.chunk_failed(req, "timeout"),
            ArtifactEvent::ResolveTimer { node, epoch, blob } => {
                if self.is_current(node, epoch) {
                    self.resolve_timer(node, blob);
                }
            }
            ArtifactEvent::Ask { to, from, req, bytes, epoch } => {
                if self.is_current(to, epoch) {
                    self.answer_ask(to, from, req, &bytes);
                }
            }
            ArtifactEvent::Offer { to, req, bytes, epoch } => {
                if self.is_current(to, epoch) {
                    self.offer_arrived(to, req, &bytes);
                }
            }
            ArtifactEvent::AskFailure { req } => self.ask_answered(req, None),
            ArtifactEvent::Closed { node, epoch, provider } => {
                if self.is_current(node, epoch) {
                    self.provider_closed(node, provider);
                }
            }
            ArtifactEvent::Settle => self.artifacts_settle(),
        }
    }

    /// One pull request at a random live honest node for a random artifact.
    fn artifact_workload(&mut self) {
        let live = self.live_honest();
        let Some((until_s, interval)) =
            self.artifacts.as_deref().map(|w| (w.config.until_s, w.config.pull_interval_ms))
        else {
            return;
        };
        if self.now >= until_s * 1000 {
            return;
        }
        self.schedule(self.now + interval, Event::Artifact(ArtifactEvent::Pull));
        let Some(model) = self.artifacts.as_deref_mut() else { return };
        if live.is_empty() {
            return;
        }
        let node = live[model.rng.below(live.len() as u64) as usize];
        let blob = model.rng.below(model.config.artifacts as u64) as usize;
        model.stats.pulls_requested += 1;
        let state = &model.nodes[node as usize];
        if state.complete.contains(&blob) || state.wanted.contains_key(&blob) {
            model.stats.pulls_redundant += 1;
            return;
        }
        // Pulls under way, being resolved, or waiting to be resolved again.
        if state.wanted.len() >= model.config.pulls_per_node_max {
            model.stats.pulls_refused += 1;
            return;
        }
        model.nodes[node as usize].wanted.insert(blob, self.now);
        self.start_pull(node, blob);
    }

    /// Pinned artifacts: pull each one this node should hold by its directory's view.
    fn pin_check(&mut self, ix: Ix) {
        let me = self.nodes[ix as usize].id;
        let now = self.clock(ix);
        let Some(mesh) = self.nodes[ix as usize].mesh.as_ref() else { return };
        let candidates: Vec<murmur_protocol::NodeId> =
            mesh.directory().records(now).map(|r| r.node()).collect();
        let Some(model) = self.artifacts.as_deref_mut() else { return };
        let (factor, max) = (model.config.replication_factor, model.config.pulls_per_node_max);
        let digests = model.digests();
        let mut start = Vec::new();
        let node = &mut model.nodes[ix as usize];
        for (blob, digest) in digests.iter().enumerate().take(model.config.pinned) {
            if node.complete.contains(&blob) || node.wanted.contains_key(&blob) {
                continue;
            }
            if node.wanted.len() >= max {
                break;
            }
            if replicate::should_hold(&me, digest, &candidates, factor) {
                node.wanted.insert(blob, self.now);
                start.push(blob);
            }
        }
        model.stats.pins_pulled += start.len() as u64;
        for blob in start {
            self.start_pull(ix, blob);
        }
    }

    /// Node `ix` (re)started: its periodic checks, what it announces, and its unfinished
    /// pulls resumed from the chunks on disk.
    pub(super) fn artifacts_started(&mut self, ix: Ix) {
        let epoch = self.nodes[ix as usize].epoch;
        let corrupt = matches!(
            self.nodes[ix as usize].role,
            Role::Byzantine { role: ByzantineRole::CorruptProvider, .. }
        );
        let Some(model) = self.artifacts.as_deref_mut() else { return };
        let c = &model.config;
        // Spread the nodes' periodic checks over their interval, without a random draw.
        let (refresh, pin) = (c.refresh_ms, c.pin_check_interval_ms);
        let offset = u64::from(ix) * 97;
        let announce: Vec<Digest> = if corrupt {
            model.digests()
        } else {
            let digests = model.digests();
            model.nodes[ix as usize].complete.iter().map(|b| digests[*b]).collect()
        };
        let resume: Vec<usize> = model.nodes[ix as usize].wanted.keys().copied().collect();
        self.schedule(
            self.now + 1 + offset % refresh,
            Event::Artifact(ArtifactEvent::Refresh { node: ix, epoch }),
        );
        if !corrupt {
            self.schedule(
                self.now + 1 + offset % pin,
                Event::Artifact(ArtifactEvent::PinCheck { node: ix, epoch }),
            );
        }
        if !announce.is_empty() {
            self.handle(ix, murmur_protocol::mesh::Input::SetArtifacts { artifacts: announce }, None);
        }
        for blob in resume {
            let Some(model) = self.artifacts.as_deref_mut() else { return };
            if model.nodes[ix as usize].store.get(&blob).is_some_and(|s| !s.is_empty()) {
                model.stats.pulls_resumed += 1;
            }
            self.start_pull(ix, blob);
        }
    }

    /// Tells node `ix`'s mesh node every blob it holds whole, so its advert lists them.
    pub(super) fn announce(&mut self, ix: Ix) {
        let Some(model) = self.artifacts.as_deref() else { return };
        let digests = model.digests();
        let artifacts = model.nodes[ix as usize].complete.iter().map(|b| digests[*b]).collect();
        self.handle(ix, murmur_protocol::mesh::Input::SetArtifacts { artifacts }, None);
    }

    /// A node crashed (`for_good`: with its disk). Its pulls, in memory, are lost; chunk
    /// requests it was answering fail on their senders as connections close.
    pub(super) fn artifacts_crashed(&mut self, ix: Ix, for_good: bool) {
        let Some(model) = self.artifacts.as_deref_mut() else { return };
        let node = &mut model.nodes[ix as usize];
        for (_, active) in std::mem::take(&mut node.pulls) {
            add_pull_stats(&mut model.totals, active.pull.stats());
        }
        node.resolving.clear();
        if for_good {
            node.wanted.clear();
        }
        model.requests.retain(|_, r| r.from != ix);
        model.asks.retain(|_, a| a.from != ix);
        // Asks it was answering fail on their senders as the connections close.
        let failed: Vec<(u64, Ix)> =
            model.asks.iter().filter(|(_, a)| a.to == ix).map(|(req, a)| (*req, a.from)).collect();
        for (req, from) in failed {
            let at = self.now + self.base_latency(ix, from);
            self.schedule(at, Event::Artifact(ArtifactEvent::AskFailure { req }));
        }
        let Some(model) = self.artifacts.as_deref_mut() else { return };
        let mut closed = BTreeSet::new();
        model.requests.retain(|_, r| {
            if r.to == ix {
                closed.insert((r.from, r.from_epoch));
            }
            r.to != ix
        });
        if !closed.is_empty() {
            model.stats.provider_crashes += 1;
        }
        for (from, epoch) in closed {
            let at = self.now + self.base_latency(ix, from);
            self.schedule(at, Event::Artifact(ArtifactEvent::Closed { node: from, epoch, provider: ix }));
        }
    }

    /// After faults end and pull requests stop: is every pull at a live honest node of an
    /// artifact some live honest node holds complete, and is every pinned artifact held by
    /// enough nodes? Rechecked every second until it holds or the bound passes.
    fn artifacts_settle(&mut self) {
        let live = self.live_honest();
        let Some(model) = self.artifacts.as_deref_mut() else { return };
        let holders =
            |b: usize| live.iter().filter(|n| model.nodes[**n as usize].complete.contains(&b)).count();
        let mut gap = None;
        'nodes: for &x in &live {
            for &b in model.nodes[x as usize].wanted.keys() {
                if holders(b) > 0 {
                    let have = model.nodes[x as usize].store.get(&b).map_or(0, BTreeMap::len);
                    let of = model.oracle.blobs()[b].chunks.len();
                    gap = Some(format!(
                        "node {x} still pulls art-{b} ({have} of {of} chunks) while {} live honest nodes hold it",
                        holders(b)
                    ));
                    break 'nodes;
                }
            }
        }
        let need = model.config.replication_factor.min(live.len());
        let mut fewest = None::<usize>;
        for b in 0..model.config.pinned {
            let held = holders(b);
            fewest = Some(fewest.map_or(held, |f| f.min(held)));
            if gap.is_none() && held < need {
                gap = Some(format!("pinned art-{b} is held by {held} live honest nodes, fewer than {need}"));
            }
        }
        model.stats.pinned_holders_min = fewest.map(|f| f as u64);
        match gap {
            None => model.settled_at = Some(self.now),
            Some(gap) => {
                model.last_gap = gap;
                let deadline =
                    (self.scenario.artifacts_settle_from_s() + model.config.liveness_bound_s) * 1000;
                if self.now < deadline {
                    self.schedule(self.now + 1000, Event::Artifact(ArtifactEvent::Settle));
                }
            }
        }
    }

    /// Judges the artifact side at the end: metrics, paths exercised, and the liveness gap
    /// if pulls never settled.
    pub(super) fn artifacts_finish(&mut self) -> Option<String> {
        let model = self.artifacts.as_deref_mut()?;
        let mut totals = model.totals.clone();
        for node in &model.nodes {
            for active in node.pulls.values() {
                add_pull_stats(&mut totals, active.pull.stats());
            }
        }
        let s = &mut model.stats;
        s.chunks_requested = totals.requests;
        s.hedges = totals.hedges;
        s.timeouts = totals.timeouts;
        s.failures = totals.failures;
        s.bad_chunks_detected = totals.bad_chunks;
        model.completion_ms.sort_unstable();
        let sorted = &model.completion_ms;
        let pick =
            |p: f64| sorted.get(((sorted.len() as f64 - 1.0) * p).round() as usize).copied().unwrap_or(0);
        (s.completion_p50_ms, s.completion_p99_ms) = (pick(0.5), pick(0.99));
        s.completion_max_ms = sorted.last().copied().unwrap_or(0);
        s.settled_after_ms =
            model.settled_at.map(|at| at.saturating_sub(self.scenario.artifacts_settle_from_s() * 1000));
        let effects: Vec<FaultEffect> = model
            .config
            .exercise
            .iter()
            .map(|e| FaultEffect { fault: format!("artifacts: {}", e.name()), effects: exercised(s, *e) })
            .collect();
        let gap = model.settled_at.is_none().then(|| model.last_gap.clone());
        self.metrics.artifacts = Some(model.stats.clone());
        self.effects.extend(effects);
        gap
    }
}

/// `key`'s catalog naming `manifest` as blob `blob`'s name and version.
fn catalog(key: &SecretKey, blob: usize, manifest: Digest, size: u64) -> Envelope {
    let (name, version) = super::resolves::name_of(blob);
    let catalog = Catalog::new(
        Millis(1),
        vec![CatalogArtifact { name, version, manifest }],
        vec![CatalogBlob { size, digest: manifest }],
    );
    Signed::sign(catalog, key).expect("a catalog of one artifact signs").into_envelope()
}

fn exercised(s: &ArtifactMetrics, e: ArtifactExercise) -> u64 {
    match e {
        ArtifactExercise::Resumed => s.pulls_resumed,
        ArtifactExercise::Timeout => s.timeouts,
        ArtifactExercise::Hedge => s.hedges,
        ArtifactExercise::ProviderCrash => s.provider_crashes,
        ArtifactExercise::PinPulled => s.pins_pulled,
        ArtifactExercise::Rebuilt => s.pulls_rebuilt,
        ArtifactExercise::ResolveRetried => s.resolves_empty,
    }
}

pub(super) fn add_pull_stats(total: &mut PullStats, more: &PullStats) {
    total.requests += more.requests;
    total.hedges += more.hedges;
    total.bad_chunks += more.bad_chunks;
    total.timeouts += more.timeouts;
    total.failures += more.failures;
    total.late_answers += more.late_answers;
    total.bytes_written += more.bytes_written;
}
