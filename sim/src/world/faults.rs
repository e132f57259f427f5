//! Faults, churn, the workload, and the liveness check, scheduled from the scenario.

use murmur_protocol::advert::HostedCapsule;

use super::net::Partition;
use super::{Event, Ix, Role, Sim};
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

    /// Up to `count` distinct live honest nodes, chosen with the fault stream.
    fn pick_live(&mut self, count: usize) -> Vec<Ix> {
        let mut live = self.live_nodes(true);
        self.faults_rng.shuffle(&mut live);
        live.truncate(count);
        live.sort_unstable();
        live
    }

    pub(super) fn fault_start(&mut self, i: usize) {
        let fault = self.scenario.faults[i].clone();
        match fault {
            Fault::Partition { fraction, by_region, one_way, .. } => {
                let side_a: Vec<bool> =
                    (0..self.nodes.len())
                        .map(|n| {
                            if by_region {
                                self.nodes[n].region == 0
                            } else {
                                self.faults_rng.chance(fraction)
                            }
                        })
                        .collect();
                self.partitions.push(Partition { fault: i, side_a, one_way });
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
            Fault::Partition { .. } => self.partitions.retain(|p| p.fault != i),
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
            Fault::Crash { .. } | Fault::MassRestart { .. } | Fault::Churn { .. } | Fault::Join { .. } => {}
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
            let now = self.clock(node);
            let answers: Vec<(murmur_protocol::NodeId, murmur_protocol::Envelope, u64)> = self.nodes
                [node as usize]
                .mesh
                .as_ref()
                .map(|m| {
                    m.directory()
                        .hosts(now, &name)
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
        let interval = self.scenario.workload.query_interval_ms;
        self.schedule(self.now + interval, Event::WorkloadQuery);
    }

    /// After faults end: does every live node hold every live node's latest advert, and
    /// nothing of nodes dead longer than an advert lives? Rechecked every second until it
    /// holds, or until the liveness bound passes.
    pub(super) fn liveness_check(&mut self) {
        let p = &self.mesh_config;
        // A dead node's last advert may be held this long after it died.
        let linger_ms = p.ttl_ms.min(p.directory.ttl_max_ms) + 2 * p.directory.clock_skew_max_ms;
        let grace_ms = self.scenario.check.propagation_grace_ms;
        // For each live node, the seq every other node must hold by now (None: too new).
        let required: Vec<Option<u64>> = self
            .nodes
            .iter()
            .map(|n| {
                if !n.alive() {
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
        let mut gap = None;
        'nodes: for x in 0..self.nodes.len() {
            let Some(mesh) = self.nodes[x].mesh.as_ref() else { continue };
            let now = self.clock(x as Ix);
            let mut held = 0;
            for record in mesh.directory().records(now) {
                let Some(&r) = self.index.get(&record.node()) else { continue };
                if let Some(seq) = required[r as usize] {
                    if record.advert().seq < seq {
                        gap = Some(format!(
                            "node {x} holds node {r}'s seq {} but {seq} was published more than {grace_ms} ms ago",
                            record.advert().seq
                        ));
                        break 'nodes;
                    }
                    held += 1;
                } else if !allowed[r as usize] {
                    gap =
                        Some(format!("node {x} still lists node {r}, dead for longer than an advert lives"));
                    break 'nodes;
                }
            }
            if held < must_hold {
                gap = Some(format!(
                    "node {x} holds the latest adverts of {held} of the {must_hold} live nodes"
                ));
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

fn churn_step_ms(per_s: f64) -> u64 {
    if per_s <= 0.0 { u64::MAX / 4 } else { (1000.0 / per_s).max(1.0) as u64 }
}
