//! Faults, churn, the workload, and the liveness check, scheduled from the scenario.

use std::sync::Arc;

use murmur_protocol::advert::HostedCapsule;
use murmur_protocol::directory::{DirectoryBase, Record};
use murmur_protocol::{Millis, NodeId};

use super::net::Partition;
use super::{EPOCH, Event, Ix, Role, Sim};
use crate::scenario::Fault;

impl Sim {
    /// Live nodes in index order, optionally honest only.
    fn live_nodes(&self, honest_only: bool) -> Vec<Ix> {
        (0..self.nodes.len() as Ix)
            .filter(|&i| {
                let n = &self.nodes[i as usize];
                n.alive() && (!honest_only || n.role == Role::Honest)
            })
            .collect()
    }

    /// Up to `count` distinct live honest nodes, chosen with the fault stream (never a
    /// revoked node: those run on to the end).
    fn pick_live(&mut self, count: usize) -> Vec<Ix> {
        let mut live = self.live_nodes(true);
        live.retain(|&n| self.nodes[n as usize].revoked.is_none());
        self.faults_rng.shuffle(&mut live);
        live.truncate(count);
        live.sort_unstable();
        live
    }

    pub(super) fn fault_start(&mut self, i: usize) {
        let fault = self.scenario.faults[i].clone();
        match fault {
            Fault::Partition { fraction, by_region, one_way, nodes, .. } => {
                let side_a: Vec<bool> = (0..self.nodes.len())
                    .map(|n| {
                        if !nodes.is_empty() {
                            nodes.contains(&n)
                        } else if by_region {
                            self.nodes[n].region == 0
                        } else {
                            self.faults_rng.chance(fraction)
                        }
                    })
                    .collect();
                self.partitions.push(Partition { fault: i, side_a, one_way });
                self.models_partition(i, true);
                self.schedule_ping_lapses();
            }
            Fault::Crash { count, nodes, restart_after_s, .. } => {
                let chosen: Vec<Ix> = if nodes.is_empty() {
                    self.pick_live(count)
                } else {
                    nodes.iter().filter(|&&n| n < self.nodes.len()).map(|&n| n as Ix).collect()
                };
                for node in chosen {
                    self.crash(node, false);
                    self.effects[i].effects += 1;
                    if let Some(after) = restart_after_s {
                        self.schedule(self.now + after * 1000, Event::Restart { node });
                    }
                }
            }
            Fault::MassRestart { fraction, down_s, .. } => {
                let count = ((self.live_nodes(true).len() as f64) * fraction).ceil() as usize;
                for node in self.pick_live(count) {
                    self.crash(node, false);
                    self.effects[i].effects += 1;
                    self.schedule(self.now + down_s * 1000, Event::Restart { node });
                }
            }
            Fault::Churn { per_s, .. } => {
                let step = churn_step_ms(per_s);
                self.schedule(self.now + step, Event::ChurnStep { fault: i });
            }
            Fault::Slow { fraction, extra_ms, .. } => {
                let count = ((self.live_nodes(true).len() as f64) * fraction).ceil() as usize;
                for node in self.pick_live(count) {
                    self.nodes[node as usize].slow_extra_ms = extra_ms;
                    self.slowed.push((i, node));
                    self.effects[i].effects += 1;
                }
            }
            Fault::Loss { loss, .. } => self.extra_loss = (loss, Some(i)),
            Fault::Join { count, .. } => {
                for _ in 0..count {
                    let node = self.add_node(Role::Honest);
                    self.start_node(node);
                    self.effects[i].effects += 1;
                }
            }
            Fault::Revoke { .. } => self.revoke(i),
            Fault::Byzantine { role, count, interval_ms, .. } => {
                for _ in 0..count {
                    let node = self.add_node(Role::Byzantine { role, fault: i });
                    if role == crate::scenario::ByzantineRole::UnauthorizedSender {
                        self.equip_unauthorized(node);
                    }
                    self.start_node(node);
                    self.schedule(self.now + interval_ms, Event::Misbehave { node });
                }
            }
        }
    }

    pub(super) fn fault_end(&mut self, i: usize) {
        match self.scenario.faults[i] {
            Fault::Partition { .. } => {
                self.partitions.retain(|p| p.fault != i);
                self.models_partition(i, false);
            }
            Fault::Slow { .. } => {
                let slowed: Vec<Ix> = self.slowed.iter().filter(|(f, _)| *f == i).map(|(_, n)| *n).collect();
                for node in slowed {
                    self.nodes[node as usize].slow_extra_ms = 0;
                }
                self.slowed.retain(|(f, _)| *f != i);
            }
            Fault::Loss { .. } => self.extra_loss = (0.0, None),
            Fault::Byzantine { .. } => {
                // Misbehaviour stops by leaving the mesh; their adverts then expire.
                let byzantine: Vec<Ix> = (0..self.nodes.len() as Ix)
                    .filter(|&n| matches!(self.nodes[n as usize].role, Role::Byzantine { fault, .. } if fault == i))
                    .collect();
                for node in byzantine {
                    self.crash(node, true);
                }
            }
            Fault::Crash { .. }
            | Fault::MassRestart { .. }
            | Fault::Churn { .. }
            | Fault::Join { .. }
            | Fault::Revoke { .. } => {}
        }
    }

    pub(super) fn churn_step(&mut self, i: usize) {
        let Fault::Churn { until_s, per_s, .. } = self.scenario.faults[i] else { return };
        if self.now >= until_s * 1000 {
            return;
        }
        if let Some(&leaving) = self.pick_live(1).first() {
            self.crash(leaving, true);
            self.effects[i].effects += 1;
        }
        let joining = self.add_node(Role::Honest);
        self.start_node(joining);
        self.effects[i].effects += 1;
        self.schedule(self.now + churn_step_ms(per_s), Event::ChurnStep { fault: i });
    }

    pub(super) fn workload_change(&mut self) {
        let live = self.live_nodes(true);
        let protect = self.tasks.is_some();
        if !live.is_empty() && !self.capsule_names.is_empty() {
            let node = live[self.workload_rng.below(live.len() as u64) as usize];
            let name =
                self.capsule_names[self.workload_rng.below(self.capsule_names.len() as u64) as usize].clone();
            let capsules = &mut self.nodes[node as usize].capsules;
            if !capsules.iter().any(|c| c.name == name) {
                // Capsules the task workload placed stay where it put them.
                if let Some(first) =
                    capsules.iter().position(|c| !(protect && super::tasks::is_task_capsule(&c.name)))
                {
                    capsules.remove(first);
                }
                capsules.push(HostedCapsule { name, digest: None, version: "1.0.0".into() });
                capsules.sort();
                let capsules = capsules.clone();
                self.handle(node, murmur_protocol::mesh::Input::SetHosted { capsules }, None);
            }
        }
        let interval = self.scenario.workload.change_interval_ms;
        self.schedule(self.now + interval, Event::WorkloadChange);
    }

    /// Asks a random live node "who hosts NAME" and checks every answer against the truth.
    pub(super) fn workload_query(&mut self) {
        let live = self.live_nodes(false);
        if !live.is_empty() && !self.capsule_names.is_empty() {
            let node = live[self.workload_rng.below(live.len() as u64) as usize];
            let name =
                self.capsule_names[self.workload_rng.below(self.capsule_names.len() as u64) as usize].clone();
            self.check_query(node, &name);
        }
        let interval = self.scenario.workload.query_interval_ms;
        self.schedule(self.now + interval, Event::WorkloadQuery);
    }

    /// The query checker: every node `node`'s directory names as hosting `name` must be
    /// named from a genuine advert of that node, unexpired by `node`'s clock.
    pub(super) fn check_query(&mut self, node: Ix, name: &str) {
        let now = self.clock(node);
        let answers: Vec<(NodeId, murmur_protocol::Envelope, u64)> = self.nodes[node as usize]
            .mesh
            .as_ref()
            .map(|m| {
                m.directory()
                    .hosts(now, name)
                    .map(|(r, _)| (r.node(), r.envelope().clone(), r.advert().seq))
                    .collect()
            })
            .unwrap_or_default();
        self.metrics.queries += 1;
        for (provider, envelope, seq) in answers {
            let Some(&p) = self.index.get(&provider) else {
                self.violation(format!("node {node} names a provider of {name} that does not exist"));
                continue;
            };
            if let Err(what) = self.oracle.check_provider(node, (p, seq), &envelope, now) {
                self.violation(what);
            }
        }
    }

    /// After faults end: does every live node hold every live node's latest advert, and
    /// nothing of nodes dead longer than an advert lives? Rechecked every second until it
    /// holds, or until the liveness bound passes. Revoked nodes are neither judged nor
    /// required (the revocation checker requires that they are gone).
    pub(super) fn liveness_check(&mut self) {
        let p = &self.mesh_config;
        // A dead node's last advert may be held this long after it died (less when the
        // scenario requires departure notices to have removed it).
        let mut linger_ms = p.ttl_ms.min(p.directory.ttl_max_ms) + 2 * p.directory.clock_skew_max_ms;
        if let Some(bound_s) = self.scenario.check.departed_bound_s {
            linger_ms = linger_ms.min(bound_s * 1000);
        }
        let grace_ms = self.scenario.check.propagation_grace_ms;
        // For each live node, the seq every other node must hold by now (None: too new).
        let required: Vec<Option<u64>> = self
            .nodes
            .iter()
            .map(|n| {
                if !n.alive() || n.revoked.is_some() {
                    return None;
                }
                n.published.iter().rev().find(|(at, _)| *at + grace_ms <= self.now).map(|(_, seq)| *seq)
            })
            .collect();
        let allowed: Vec<bool> = self
            .nodes
            .iter()
            .map(|n| n.alive() || n.down_since.is_some_and(|since| self.now < since + linger_ms))
            .collect();
        let must_hold = required.iter().filter(|r| r.is_some()).count();
        // How one held record counts: toward the live nodes held, as a gap, or not at all.
        let judge = |record: &Record| -> Held {
            let Some(&r) = self.index.get(&record.node()) else { return Held::Other };
            match required[r as usize] {
                Some(seq) if record.advert().seq < seq => {
                    Held::Stale { node: r, held: record.advert().seq, seq }
                }
                Some(_) => Held::Latest,
                None if !allowed[r as usize] => Held::Dead { node: r },
                None => Held::Other,
            }
        };
        // Directories on a shared base (a warm start) are judged by their differences from
        // it, so a check costs the changes since the start rather than nodes². Base records
        // still valid at every node clock are judged once.
        let skew_ms = p.directory.clock_skew_max_ms;
        let latest_clock = Millis(EPOCH.0 + self.now + skew_ms);
        let mut base_verdict: Option<(*const DirectoryBase, Option<BaseVerdict>)> = None;
        let mut gap = None;
        for x in 0..self.nodes.len() {
            let Some(mesh) = self.nodes[x].mesh.as_ref() else { continue };
            if self.nodes[x].revoked.is_some() {
                continue;
            }
            let now = self.clock(x as Ix);
            let directory = mesh.directory();
            let base = directory.base();
            if !base.is_empty()
                && !base_verdict.as_ref().is_some_and(|(ptr, _)| std::ptr::eq(*ptr, Arc::as_ptr(base)))
            {
                let shared = base.records().all(|r| r.expires_at() > latest_clock).then(|| {
                    let mut latest = 0;
                    let mut gaps = Vec::new();
                    for record in base.records() {
                        match judge(record) {
                            Held::Latest => latest += 1,
                            Held::Other => {}
                            held => gaps.push((record.node(), held)),
                        }
                    }
                    (latest, gaps)
                });
                base_verdict = Some((Arc::as_ptr(base), shared));
            }
            let verdict =
                if base.is_empty() { None } else { base_verdict.as_ref().and_then(|(_, v)| v.as_ref()) };
            let (mut held, mut found) = (0, None);
            let own: Box<dyn Iterator<Item = &Record>> = match verdict {
                Some(_) => Box::new(directory.own_records().filter(|r| r.expires_at() > now)),
                None => Box::new(directory.records(now)),
            };
            for record in own {
                match judge(record) {
                    Held::Latest => held += 1,
                    Held::Other => {}
                    other => {
                        found = Some(other);
                        break;
                    }
                }
            }
            if let (None, Some((latest, gaps))) = (&found, verdict) {
                held += latest;
                for node in directory.shadowed() {
                    if base.get(node).is_some_and(|r| matches!(judge(r), Held::Latest)) {
                        held -= 1;
                    }
                }
                found = gaps.iter().find(|(node, _)| !directory.shadows(node)).map(|(_, h)| *h);
            }
            gap = match found {
                Some(Held::Stale { node, held, seq }) => Some(format!(
                    "node {x} holds node {node}'s seq {held} but {seq} was published more than {grace_ms} ms ago"
                )),
                Some(Held::Dead { node }) => Some(format!(
                    "node {x} still lists node {node}, down for longer than {}",
                    if self.scenario.check.departed_bound_s.is_some() {
                        format!("{} ms (check.departed_bound_s)", linger_ms)
                    } else {
                        "an advert lives".to_owned()
                    }
                )),
                _ if held < must_hold => {
                    Some(format!("node {x} holds the latest adverts of {held} of the {must_hold} live nodes"))
                }
                _ => None,
            };
            if gap.is_some() {
                break;
            }
        }
        match gap {
            None => self.converged_at = Some(self.now),
            Some(gap) => {
                self.last_liveness_gap = gap;
                let deadline = self.liveness_from_ms() + self.scenario.check.liveness_bound_s * 1000;
                if self.now < deadline {
                    self.schedule(self.now + 1000, Event::LivenessCheck);
                }
            }
        }
    }
}

/// How the records of a shared base count, judged once for every directory on it: the
/// latest adverts it holds, and the records that are gaps unless a directory shadowed them.
type BaseVerdict = (usize, Vec<(NodeId, Held)>);

/// How a record a directory holds counts for liveness.
#[derive(Clone, Copy, Debug)]
enum Held {
    /// The latest advert of a live node (or newer).
    Latest,
    /// Older than the node's latest advert.
    Stale { node: Ix, held: u64, seq: u64 },
    /// Of a node down for longer than it may stay listed.
    Dead { node: Ix },
    /// Neither required nor forbidden (a node too new, or recently down).
    Other,
}

fn churn_step_ms(per_s: f64) -> u64 {
    if per_s <= 0.0 { u64::MAX / 4 } else { (1000.0 / per_s).max(1.0) as u64 }
}
