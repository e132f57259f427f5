//! Nodes coming and going, connections, and the gossipsub mesh over them.

use murmur_protocol::limits::GOSSIP_HEARTBEAT_MS;
use murmur_protocol::mesh::{Input, MeshNode};

use super::{Event, Ix, Sim};

/// gossipsub's D_lo for a mesh degree D (5 for the default D = 6).
pub(super) fn mesh_low(degree: usize) -> usize {
    (degree * 5 / 6).max(1)
}

/// Node `ix`'s listen address in region `region` (what its advert lists).
pub(super) fn address(region: usize, ix: Ix) -> String {
    format!("/ip4/10.{region}.{}.{}/tcp/7421", ix / 250, ix % 250)
}

impl Sim {
    pub(super) fn start_node(&mut self, ix: Ix) {
        let i = ix as usize;
        if self.nodes[i].alive() {
            return;
        }
        let now = self.clock(ix);
        let node = &mut self.nodes[i];
        node.mesh = Some(MeshNode::with_verifier(
            node.key.clone(),
            self.mesh_config.clone(),
            self.verifier.clone(),
            now,
        ));
        node.down_since = None;
        node.up_since = self.now;
        node.uplink_free_at = self.now;
        self.count_live(ix, true);
        self.revocations_restored(ix);
        let node = &mut self.nodes[i];
        let capsules = node.capsules.clone();
        let addrs = vec![address(node.region, ix)];
        self.handle(ix, Input::SetAddrs { addrs }, None);
        self.handle(ix, Input::SetHosted { capsules }, None);
        if let Some(cert) = self.nodes[i].cert.clone() {
            self.handle(ix, Input::SetCert { cert: Some(cert) }, None);
        }
        self.models_started(ix);
        // Bootstrap peers: a few random live nodes, given to the mesh as configured bootstrap
        // peers are (it dials them, and again while it has no peer at all).
        let live: Vec<Ix> =
            (0..self.nodes.len() as Ix).filter(|&j| j != ix && self.nodes[j as usize].alive()).collect();
        let want = self.scenario.topology.bootstrap_peers.min(live.len());
        let mut chosen = live;
        self.nodes[i].rng.shuffle(&mut chosen);
        let peers = chosen
            .into_iter()
            .take(want)
            .map(|j| {
                let n = &self.nodes[j as usize];
                (n.id, vec![address(n.region, j)])
            })
            .collect();
        self.handle(ix, Input::SetBootstrap { peers }, None);
        let epoch = self.nodes[i].epoch;
        let first_beat = self.now + self.nodes[i].rng.between(1, GOSSIP_HEARTBEAT_MS);
        self.schedule(first_beat, Event::Heartbeat { node: ix, epoch });
        self.tasks_started(ix);
        self.artifacts_started(ix);
    }
    /// gossipsub's heartbeat: below D_lo, GRAFT random connected peers up to D (the peer
    /// accepts); above D_hi, PRUNE random mesh peers down to D; then lazy gossip (IHAVE to a
    /// few peers outside the mesh) and the message cache's shift.
    pub(super) fn heartbeat(&mut self, ix: Ix) {
        self.mesh_maintenance(ix);
        self.emit_gossip(ix);
    }

    fn mesh_maintenance(&mut self, ix: Ix) {
        let degree = self.scenario.topology.gossip_degree;
        let (low, high) = (mesh_low(degree), 2 * degree);
        let node = &mut self.nodes[ix as usize];
        let len = node.gossip_mesh.len();
        if len < low {
            let mut candidates: Vec<Ix> =
                node.peers.iter().copied().filter(|p| !node.gossip_mesh.contains(p)).collect();
            node.rng.shuffle(&mut candidates);
            for peer in candidates.into_iter().take(degree - len) {
                self.link_mesh(ix, peer);
            }
        } else if len > high {
            let mut mesh = node.gossip_mesh.clone();
            node.rng.shuffle(&mut mesh);
            for peer in mesh.into_iter().skip(degree) {
                self.nodes[ix as usize].gossip_mesh.retain(|p| *p != peer);
                self.nodes[peer as usize].gossip_mesh.retain(|p| *p != ix);
            }
        }
    }
    /// A symmetric mesh link (GRAFT accepted by the peer).
    pub(super) fn link_mesh(&mut self, a: Ix, b: Ix) {
        if !self.nodes[a as usize].gossip_mesh.contains(&b) {
            self.nodes[a as usize].gossip_mesh.push(b);
            self.nodes[b as usize].gossip_mesh.push(a);
        }
    }
    /// Crashes a node: its in-memory state is lost, its connections close at once.
    pub(super) fn crash(&mut self, ix: Ix, for_good: bool) {
        let i = ix as usize;
        if !self.nodes[i].alive() {
            if for_good {
                self.nodes[i].gone = true;
                self.tasks_gone(ix);
            }
            return;
        }
        let peers: Vec<Ix> = self.nodes[i].peers.iter().copied().collect();
        for peer in peers {
            self.disconnect(ix, peer);
        }
        self.count_live(ix, false);
        let node = &mut self.nodes[i];
        node.mesh = None;
        node.mcache.clear();
        node.epoch += 1;
        node.gone |= for_good;
        node.down_since = Some(self.now);
        node.timer_at = None;
        node.syncing.clear();
        node.answering.clear();
        self.oracle.forget_observer(ix);
        self.revocations_crashed(ix);
        self.tasks_crashed(ix, for_good);
        self.artifacts_crashed(ix, for_good);
        self.models_crashed(ix);
    }
    /// Opens a connection after a round trip, if the target is reachable and has room.
    pub(super) fn dial(&mut self, a: Ix, b: Ix) {
        if a == b || self.nodes[a as usize].peers.contains(&b) || !self.nodes[b as usize].alive() {
            return;
        }
        if self.partitioned(a, b) || self.partitioned(b, a) {
            return;
        }
        let rtt = 2 * self.base_latency(a, b);
        let (epoch_a, epoch_b) = (self.nodes[a as usize].epoch, self.nodes[b as usize].epoch);
        self.schedule(self.now + rtt, Event::Connected { a, b, epoch_a, epoch_b });
    }
    pub(super) fn connect(&mut self, a: Ix, b: Ix) {
        let max = self.scenario.topology.connections_max;
        if self.nodes[a as usize].peers.contains(&b)
            || self.nodes[a as usize].peers.len() >= max
            || self.nodes[b as usize].peers.len() >= max
        {
            return;
        }
        self.nodes[a as usize].peers.insert(b);
        self.nodes[b as usize].peers.insert(a);
        self.forget_stalls(a, b);
        // GRAFT: a side below the mesh degree takes the new peer in, if the peer has room.
        let degree = self.scenario.topology.gossip_degree;
        if self.nodes[a as usize].gossip_mesh.len() < degree
            || self.nodes[b as usize].gossip_mesh.len() < degree
        {
            self.graft(a, b);
        }
        for (x, y) in [(a, b), (b, a)] {
            let peer = self.nodes[y as usize].id;
            self.handle(x, Input::PeerConnected { peer }, None);
        }
        // Each side's gossipsub opens a stream on the new connection and sends its
        // subscriptions: a round trip to agree on the protocol, then half of one more. (Only
        // an early announcement reads them: the event is left out otherwise, and with it
        // the runs' traces stay as they were.)
        if !self.scenario.protocol.announce_early {
            return;
        }
        let arrive = self.now + 3 * self.base_latency(a, b);
        for (to, from) in [(a, b), (b, a)] {
            let (epoch_to, epoch_from) = (self.nodes[to as usize].epoch, self.nodes[from as usize].epoch);
            self.schedule(arrive, Event::Subscribed { to, from, epoch_to, epoch_from });
        }
    }
    /// `from`'s subscription to the advert topic reached `to`, if they are still connected.
    pub(super) fn subscribed(&mut self, to: Ix, from: Ix) {
        if self.nodes[to as usize].peers.contains(&from) {
            let peer = self.nodes[from as usize].id;
            self.handle(to, Input::PeerSubscribed { peer }, None);
        }
    }
    /// Adds a symmetric gossip mesh link unless either side is at its upper bound (D_hi),
    /// as gossipsub's GRAFT/PRUNE keeps every mesh between D_lo and D_hi.
    pub(super) fn graft(&mut self, a: Ix, b: Ix) {
        let high = 2 * self.scenario.topology.gossip_degree;
        let (ma, mb) = (&self.nodes[a as usize].gossip_mesh, &self.nodes[b as usize].gossip_mesh);
        if ma.contains(&b) || ma.len() >= high || mb.len() >= high {
            return;
        }
        self.nodes[a as usize].gossip_mesh.push(b);
        self.nodes[b as usize].gossip_mesh.push(a);
    }
    /// A partition began: every connection it cuts (either way) closes when its ping goes
    /// unanswered, as murnode closes it, unless the partition heals first.
    pub(super) fn schedule_ping_lapses(&mut self) {
        let (interval, timeout) =
            (self.scenario.topology.ping_interval_ms, self.scenario.topology.ping_timeout_ms);
        if timeout == 0 {
            return;
        }
        for a in 0..self.nodes.len() as Ix {
            let cut: Vec<Ix> = self.nodes[a as usize]
                .peers
                .iter()
                .copied()
                .filter(|&b| a < b && (self.partitioned(a, b) || self.partitioned(b, a)))
                .collect();
            for b in cut {
                // The ping that finds the cut is the next one due on this connection, within
                // an interval (drawn from a stream of its own).
                let due = self.pings_rng.below(interval.max(1));
                let (epoch_a, epoch_b) = (self.nodes[a as usize].epoch, self.nodes[b as usize].epoch);
                self.schedule(self.now + due + timeout, Event::PingLapse { a, b, epoch_a, epoch_b });
            }
        }
    }
    /// A ping scheduled by [`Sim::schedule_ping_lapses`] is due: close the connection if a
    /// partition still cuts it.
    pub(super) fn ping_lapse(&mut self, a: Ix, b: Ix) {
        if self.nodes[a as usize].peers.contains(&b) && (self.partitioned(a, b) || self.partitioned(b, a)) {
            self.metrics.connections_cut += 1;
            self.disconnect(a, b);
        }
    }
    pub(super) fn disconnect(&mut self, a: Ix, b: Ix) {
        if !self.nodes[a as usize].peers.remove(&b) {
            return;
        }
        self.nodes[b as usize].peers.remove(&a);
        self.forget_stalls(a, b);
        let low = mesh_low(self.scenario.topology.gossip_degree);
        for (x, y) in [(a, b), (b, a)] {
            self.nodes[x as usize].gossip_mesh.retain(|p| *p != y);
            // Below D_lo: GRAFT a random connected peer not yet in the mesh.
            if self.nodes[x as usize].gossip_mesh.len() < low {
                let node = &mut self.nodes[x as usize];
                let candidates: Vec<Ix> =
                    node.peers.iter().copied().filter(|p| !node.gossip_mesh.contains(p)).collect();
                if !candidates.is_empty() {
                    let pick = candidates[node.rng.below(candidates.len() as u64) as usize];
                    self.graft(x, pick);
                }
            }
            let peer = self.nodes[y as usize].id;
            self.handle(x, Input::PeerDisconnected { peer }, None);
        }
    }
}
