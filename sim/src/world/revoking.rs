//! Revocations: the `revoke` fault, what the world does with revocation lists, and the
//! hooks of the bounded-revocation checker ([`RevocationOracle`]).
//!
//! The fault plays the authorities: the certificate authority of a closed mesh revokes
//! nodes, the grant authority of the task workload revokes grants, each in a list of its
//! own (every node trusts both, as `murnode` trusts `trust.authorities`), and the lists are
//! handed to one live honest node's mesh (`Input::Revoke`, as `mur revoke` hands one to a
//! node). Lists are cumulative: a second `revoke` fault signs each authority's next list
//! with everything revoked so far.
//!
//! Around the mesh machine the world models what `murnode` does with lists: it publishes
//! them on `REVOCATION_TOPIC` with gossipsub's content-hash message ids (the same list
//! published by two nodes is one message), stores the lists its mesh holds (a node's store
//! survives crashes) and hands them back to the mesh when the node starts again. The
//! revoked nodes keep running and publishing, and send their agents' tasks without the
//! sending node's check (the authority stopped trusting them: a compromised node would);
//! the world only stops choosing them for its own purposes (client entry points, service
//! moves, crashes), and leaves them out of the liveness check as observers and as subjects.
//! The fault revokes a host of each agent whose grant it revokes, when it revokes nodes
//! too, so the owners' check has tasks to refuse.

use std::collections::BTreeSet;

use murmur_protocol::mesh::Input;
use murmur_protocol::revocation::Revocation;
use murmur_protocol::{Envelope, Millis, NodeId, PublicKey, SecretKey, Signed};

use super::{EPOCH, Event, Ix, Options, Plant, Role, Sim};
use crate::check::{Observer, RevocationOracle, Via};
use crate::fxhash::FxHashMap as HashMap;
use crate::report::RevocationMetrics;
use crate::scenario::{Fault, Scenario};

/// The revocation part of the modelled world, in runs with a `revoke` fault.
#[derive(Debug)]
pub(super) struct RevocationModel {
    pub(super) oracle: RevocationOracle,
    /// Each authority's last list: its number and everything it revoked so far (lists are
    /// cumulative).
    signed: Vec<Signer>,
    /// The gossip message of each list, by its bytes.
    pub(super) messages: HashMap<Vec<u8>, u32>,
    /// How a list handed to a mesh by `Input::Revoke` now reaches it.
    local_via: Via,
    /// Whether the held check runs (every second from the first list's bound on).
    checking: bool,
    pub(super) metrics: RevocationMetrics,
}

impl RevocationModel {
    fn new(bound_ms: u64) -> Self {
        Self {
            oracle: RevocationOracle::new(bound_ms),
            signed: Vec::new(),
            messages: HashMap::default(),
            local_via: Via::Operator,
            checking: false,
            metrics: RevocationMetrics { bound_ms, ..RevocationMetrics::default() },
        }
    }

    /// `key`'s next list, handed out `now`: everything it revoked before, and now the nodes
    /// `ids` (indices `indices`) or the grants `serials` (envelopes `bytes`), recorded as
    /// fault `fault`'s.
    fn sign(
        &mut self,
        key: &SecretKey,
        (at, now): (Millis, u64),
        (ids, indices): (Vec<NodeId>, Vec<u32>),
        (serials, bytes): (Vec<u64>, Vec<Vec<u8>>),
        fault: usize,
    ) -> Envelope {
        let authority = key.public();
        let index = match self.signed.iter().position(|s| s.authority == authority) {
            Some(index) => index,
            None => {
                self.signed.push(Signer { authority, seq: 0, nodes: Vec::new(), grants: Vec::new() });
                self.signed.len() - 1
            }
        };
        let signer = &mut self.signed[index];
        signer.seq += 1;
        signer.nodes.extend(ids);
        signer.grants.extend(serials);
        let (seq, nodes, grants) = (signer.seq, signer.nodes.clone(), signer.grants.clone());
        let list = Revocation::new(seq, at, nodes, grants);
        self.oracle.issued((authority, seq), now, &indices, &bytes, fault);
        // Within the bounds: a run revokes a few nodes and agents.
        Signed::sign(list, key).expect("a revocation list of a few entries signs").into_envelope()
    }
}

/// What one authority revoked so far, and the number of its last list.
#[derive(Debug)]
struct Signer {
    authority: PublicKey,
    seq: u64,
    nodes: Vec<NodeId>,
    grants: Vec<u64>,
}

/// The revocation model a scenario needs: one with a `revoke` fault.
pub(super) fn model(scenario: &Scenario) -> Option<Box<RevocationModel>> {
    let revokes = scenario.faults.iter().any(|f| matches!(f, Fault::Revoke { .. }));
    revokes.then(|| Box::new(RevocationModel::new(scenario.revocation_bound_s() * 1000)))
}

/// For `--plant ignore-revocations`: a `revoke` fault if the scenario has none (two nodes
/// of a closed mesh and one agent's grant, whichever the scenario has; a scenario with
/// neither is made closed), soon after every initial node started and task traffic began.
pub(super) fn prepare(scenario: &mut Scenario, options: Options) {
    if options.plant != Some(Plant::IgnoreRevocations)
        || scenario.faults.iter().any(|f| matches!(f, Fault::Revoke { .. }))
    {
        return;
    }
    let agents = scenario.tasks.as_ref().map_or(0, |t| t.agents);
    if !scenario.protocol.closed && agents == 0 {
        scenario.protocol.closed = true;
    }
    let start_s = scenario.tasks.as_ref().map_or(0, |t| t.start_s);
    let at_s = scenario.topology.join_spread_s.max(start_s) + 5;
    let nodes = if scenario.protocol.closed { 2 } else { 0 };
    scenario.faults.push(Fault::Revoke { at_s, nodes, grants: agents.min(1) });
}

impl Sim {
    /// The `revoke` fault `i`: the authorities sign their lists and one live honest node is
    /// handed them.
    pub(super) fn revoke(&mut self, i: usize) {
        let Fault::Revoke { nodes: node_count, grants: grant_count, .. } = self.scenario.faults[i] else {
            return;
        };
        let mut agents: Vec<usize> = self.revocable_agents();
        self.faults_rng.shuffle(&mut agents);
        agents.truncate(grant_count);
        agents.sort_unstable();
        let mut live: Vec<Ix> = self.live_honest();
        self.faults_rng.shuffle(&mut live);
        // A host of each revoked agent first, while nodes are to be revoked: a revoked node
        // sends its agents' tasks unchecked (see `agent_send`), so the owners' check must
        // refuse them. One node stays to be handed the lists; without a certificate
        // authority (an open mesh) no node can be revoked.
        let hosts: Vec<Ix> = self.tasks.as_deref().map_or_else(Vec::new, |tasks| {
            agents
                .iter()
                .filter_map(|&k| live.iter().copied().find(|n| tasks.agents[k].hosts.contains(n)))
                .collect()
        });
        live.sort_by_key(|n| !hosts.contains(n));
        let revoked_count =
            if self.authority.is_some() { node_count.min(live.len().saturating_sub(1)) } else { 0 };
        let (revoked, rest) = live.split_at(revoked_count);
        let Some(&handler) = rest.first() else { return };
        let mut revoked = revoked.to_vec();
        revoked.sort_unstable();
        let when = (Millis(EPOCH.0 + self.now), self.now);
        let ids: Vec<NodeId> = revoked.iter().map(|&r| self.nodes[r as usize].id).collect();
        let (serials, bytes): (Vec<u64>, Vec<Vec<u8>>) = self.tasks.as_deref().map_or_else(
            || (Vec::new(), Vec::new()),
            |tasks| agents.iter().map(|&k| (k as u64 + 1, tasks.agents[k].grant.encode())).unzip(),
        );
        let task_key = self.tasks.as_deref().map(|t| t.authority_key().clone());
        let Some(model) = self.revocations.as_deref_mut() else { return };
        let mut lists = Vec::new();
        // Each authority revokes what it issued: the certificate authority nodes, the grant
        // authority grants.
        if let (false, Some(key)) = (ids.is_empty(), &self.authority) {
            lists.push(model.sign(key, when, (ids, revoked.clone()), (Vec::new(), Vec::new()), i));
        }
        if let (false, Some(key)) = (serials.is_empty(), &task_key) {
            lists.push(model.sign(key, when, (Vec::new(), Vec::new()), (serials, bytes), i));
        }
        for &r in &revoked {
            // No longer counted among the live nodes every advert must reach.
            self.count_live(r, false);
            self.nodes[r as usize].revoked = Some(i);
        }
        if let Some(model) = self.revocations.as_deref_mut() {
            model.local_via = Via::Operator;
        }
        self.trace.record(72, u64::from(handler), revoked.len() as u64, agents.len() as u64);
        for envelope in lists {
            self.handle(handler, Input::Revoke { envelope }, None);
        }
        let bound_ms = self.scenario.revocation_bound_s() * 1000;
        if let Some(model) = self.revocations.as_deref_mut()
            && !model.checking
        {
            model.checking = true;
            self.schedule(self.now + bound_ms + 1, Event::RevocationCheck);
        }
    }

    /// Agents whose grants no list revoked yet, by index.
    fn revocable_agents(&self) -> Vec<usize> {
        let (Some(tasks), Some(model)) = (self.tasks.as_deref(), self.revocations.as_deref()) else {
            return Vec::new();
        };
        let revoked = |k: usize| model.signed.iter().any(|s| s.grants.contains(&(k as u64 + 1)));
        (0..tasks.agents.len()).filter(|&k| !revoked(k)).collect()
    }

    /// Node `ix`'s mesh took list `seq` of `authority` (`via`: how it came; `None` for a
    /// list handed to it by `Input::Revoke`). Its store keeps what its mesh holds now.
    pub(super) fn revocation_taken(&mut self, ix: Ix, (authority, seq): (PublicKey, u64), via: Option<Via>) {
        let node = &self.nodes[ix as usize];
        let lists: Vec<Envelope> = node
            .mesh
            .as_ref()
            .map(|m| m.directory().revocations().envelopes().cloned().collect())
            .unwrap_or_default();
        let observer = (node.role == Role::Honest && node.revoked.is_none())
            .then_some(Observer { node: ix, up_since: node.up_since });
        self.nodes[ix as usize].lists = lists;
        let Some(model) = self.revocations.as_deref_mut() else { return };
        let via = via.unwrap_or(model.local_via);
        self.trace.record(71, u64::from(ix), seq, via as u64);
        if let Some(observer) = observer {
            model.oracle.took(observer, (authority, seq), self.now, via);
        }
    }

    /// Node `ix` starts again: its store hands the lists it kept to its new mesh, as
    /// `murnode` does before anything else.
    pub(super) fn revocations_restored(&mut self, ix: Ix) {
        if self.nodes[ix as usize].lists.is_empty() {
            return;
        }
        let lists = self.nodes[ix as usize].lists.clone();
        if let Some(model) = self.revocations.as_deref_mut() {
            model.local_via = Via::Store;
        }
        for envelope in lists {
            self.handle(ix, Input::Revoke { envelope }, None);
        }
        if let Some(model) = self.revocations.as_deref_mut() {
            model.local_via = Via::Operator;
        }
    }

    /// Node `ix` crashed: its directory, and the lists its mesh held, are gone.
    pub(super) fn revocations_crashed(&mut self, ix: Ix) {
        if let Some(model) = self.revocations.as_deref_mut() {
            model.oracle.crashed(ix);
        }
    }

    /// The node `ix` judged by the revocation checker, if it is one: live, honest, and not
    /// revoked itself.
    pub(super) fn revocation_observer(&self, ix: Ix) -> Option<Observer> {
        let node = &self.nodes[ix as usize];
        (self.revocations.is_some() && node.alive() && node.role == Role::Honest && node.revoked.is_none())
            .then_some(Observer { node: ix, up_since: node.up_since })
    }

    /// Node `ix`'s directory accepted `subject`'s advert.
    pub(super) fn revocation_advert_accepted(&mut self, ix: Ix, subject: Ix) {
        let Some(observer) = self.revocation_observer(ix) else { return };
        let Some(model) = self.revocations.as_deref_mut() else { return };
        if let Err(what) = model.oracle.advert_accepted(observer, subject, self.now) {
            self.violation(what);
        }
    }

    /// Node `ix` refused an advert of `subject` as revoked, or held it off as a revoked peer
    /// (`expelled`): the fault that revoked it acted. A node no authority revoked must never
    /// be refused as revoked.
    pub(super) fn revocation_enforced(&mut self, ix: Ix, subject: Ix, expelled: bool) {
        let observer = self.revocation_observer(ix);
        let fault = self.revocations.as_deref().and_then(|m| m.oracle.node_revoked(subject));
        let (Some(fault), Some(model)) = (fault, self.revocations.as_deref_mut()) else {
            self.violation(format!(
                "node {ix} refused the advert of node {subject} as revoked, but no authority revoked node {subject}"
            ));
            return;
        };
        if observer.is_none() {
            return;
        }
        if expelled {
            model.metrics.peers_expelled += 1;
        } else {
            model.metrics.adverts_refused += 1;
        }
        self.effects[fault].effects += 1;
    }

    /// Owner `ix` accepted a task under `grant`.
    pub(super) fn revocation_task_accepted(&mut self, ix: Ix, grant: &Envelope) {
        let Some(observer) = self.revocation_observer(ix) else { return };
        let Some(model) = self.revocations.as_deref_mut() else { return };
        if let Err(what) = model.oracle.task_passed(observer, &grant.encode(), self.now, true) {
            self.violation(what);
        }
    }

    /// A task was sent under `grant` (by the sending node `host`, whose check let it out,
    /// or by an unauthorized sender straight onto the wire): remembered to judge a refusal
    /// of it as `revoked`.
    pub(super) fn revocation_task_sent(
        &mut self,
        task: murmur_protocol::task::TaskId,
        grant: &Envelope,
        host: Option<Ix>,
    ) {
        let observer = host.and_then(|h| self.revocation_observer(h));
        let Some(model) = self.revocations.as_deref_mut() else { return };
        let bytes = grant.encode();
        let passed = observer.map(|o| model.oracle.task_passed(o, &bytes, self.now, false));
        model.oracle.sent(task, &bytes);
        if let Some(Err(what)) = passed {
            self.violation(what);
        }
    }

    /// The sending node `ix` refused a send under `grant` as revoked: the grant must be
    /// revoked, and the fault that revoked it acted.
    pub(super) fn revocation_send_refused(&mut self, ix: Ix, grant: &Envelope) {
        let fault = self.revocations.as_deref().and_then(|m| m.oracle.grant_revoked(&grant.encode()));
        match (fault, self.revocations.as_deref_mut()) {
            (Some(fault), Some(model)) => {
                model.metrics.tasks_refused_sending += 1;
                self.effects[fault].effects += 1;
            }
            _ => self.violation(format!(
                "node {ix} refused a send under a grant as revoked, but no authority revoked that grant"
            )),
        }
    }

    /// Owner `ix` refused `task` as revoked: its grant must be revoked, and the fault that
    /// revoked it acted. Whether it was.
    pub(super) fn revocation_task_refused(&mut self, ix: Ix, task: &murmur_protocol::task::TaskId) -> bool {
        let checked = self.revocations.as_deref().map(|m| m.oracle.refused(ix, task));
        match (checked, self.revocations.as_deref_mut()) {
            (Some(Ok(fault)), Some(model)) => {
                model.metrics.tasks_refused_owner += 1;
                self.effects[fault].effects += 1;
                true
            }
            (Some(Err(what)), _) => {
                self.violation(what);
                false
            }
            _ => {
                self.violation(format!(
                    "node {ix} refused a task as revoked, but no authority revoked anything"
                ));
                false
            }
        }
    }

    /// Every second from the first list's bound on: what each observer holds.
    pub(super) fn revocation_check(&mut self) {
        let Some(model) = self.revocations.as_deref() else { return };
        let mut found = None;
        for x in 0..self.nodes.len() as Ix {
            let Some(observer) = self.revocation_observer(x) else { continue };
            let Some(directory) = self.nodes[x as usize].mesh.as_ref().map(|m| m.directory()) else {
                continue;
            };
            let nodes = &self.nodes;
            let holds = |subject: u32| directory.get(&nodes[subject as usize].id).is_some();
            if let Err(what) = model.oracle.check_held(observer, self.now, &holds) {
                found = Some(what);
                break;
            }
        }
        if let Some(what) = found {
            self.violation(what);
        }
        if self.now + 1000 <= self.scenario.duration_s * 1000 {
            self.schedule(self.now + 1000, Event::RevocationCheck);
        }
    }

    /// The revocation figures, for the report.
    pub(super) fn revocations_finish(&mut self) {
        let Some(model) = self.revocations.as_deref() else { return };
        let f = model.oracle.figures();
        let mut m = model.metrics.clone();
        (m.lists, m.nodes_revoked, m.grants_revoked) = (f.lists, f.nodes, f.grants);
        (m.taken_gossip, m.taken_sync, m.taken_operator, m.taken_store) =
            (f.by_gossip, f.by_sync, f.by_operator, f.by_store);
        (m.propagation_max_ms, m.catch_up_max_ms) = (f.propagation_max_ms, f.catch_up_max_ms);
        (m.adverts_accepted_in_bound, m.tasks_let_out_in_bound, m.tasks_accepted_in_bound) =
            (f.adverts_accepted_in_bound, f.tasks_let_out_in_bound, f.tasks_accepted_in_bound);
        let revoked: BTreeSet<u32> = model.oracle.revoked_nodes().collect();
        m.revoked_alive_at_end = revoked.iter().filter(|&&r| self.nodes[r as usize].alive()).count() as u64;
        self.metrics.revocations = Some(m);
    }
}
