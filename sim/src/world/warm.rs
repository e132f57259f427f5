//! Warm start (`topology.warm_start`): the initial nodes begin in the mesh's steady state.
//!
//! Forming a 10,000-node mesh from nothing means every advert reaching every node: 10⁸
//! deliveries before the steady state the run is meant to study even begins. A warm start
//! sets up what formation would have left instead: every initial node has signed its advert
//! (at its own clock at time 0), every initial directory holds all of them, each node is
//! connected to about `protocol.peers_target` random others (within
//! `topology.connections_max`) with its gossip mesh formed, and refreshes fall at random
//! points of the refresh interval. The directories share one
//! [`murmur_protocol::directory::DirectoryBase`] and each keeps only its own changes, so
//! memory grows with the changes, not with nodes². From time 0 on, the same protocol code
//! runs as in any run; nodes that join or restart later start cold.

use murmur_protocol::Signed;
use murmur_protocol::directory::{Directory, Source};
use murmur_protocol::limits::GOSSIP_HEARTBEAT_MS;
use murmur_protocol::mesh::{Advertised, Input, MeshNode, Resume};

use super::topology::address;
use super::{Event, Ix, Sim};

impl Sim {
    pub(super) fn warm_start(&mut self) {
        let count = self.nodes.len() as Ix;
        let mut seed = Directory::with_verifier(self.mesh_config.directory.clone(), self.verifier.clone());
        let mut states = Vec::with_capacity(count as usize);
        for ix in 0..count {
            let now = self.clock(ix);
            let node = &self.nodes[ix as usize];
            let advertised = Advertised {
                capsules: node.capsules.clone(),
                addrs: vec![address(node.region, ix)],
                cert: node.cert.clone(),
                ..Advertised::default()
            };
            // The first advert the node would publish (`MeshNode::publish` signs the same).
            let advert = advertised.next(now, self.mesh_config.ttl_ms);
            let seq = advert.seq;
            let state = Resume { advertised: Advertised { seq, ..advertised }, ..Resume::default() };
            let envelope =
                Signed::sign(advert, &node.key).expect("a generated advert is valid").into_envelope();
            if let Err(refused) = seed.insert(now, envelope.clone(), Source::Local) {
                self.violation(format!("warm start: node {ix}'s own advert was refused: {refused}"));
            }
            self.oracle.published_warm(ix, seq, envelope, now, self.mesh_config.ttl_ms);
            self.nodes[ix as usize].published.push_back((0, seq));
            states.push(state);
        }
        while seed.poll_output().is_some() {}
        let base = seed.freeze();
        drop(seed);
        self.warm_topology(count);
        let refresh_ms = self.mesh_config.refresh_ms;
        for ix in 0..count {
            let i = ix as usize;
            let now = self.clock(ix);
            let mut state = std::mem::take(&mut states[i]);
            state.peers = self.nodes[i].peers.iter().map(|&j| self.nodes[j as usize].id).collect();
            state.refresh_at = now.plus(self.nodes[i].rng.between(1, refresh_ms));
            let node = &mut self.nodes[i];
            node.mesh = Some(MeshNode::resume(
                node.key.clone(),
                self.mesh_config.clone(),
                self.verifier.clone(),
                base.clone(),
                state,
                now,
            ));
            node.down_since = None;
            self.count_live(ix, true);
            let first_beat = self.nodes[i].rng.between(1, GOSSIP_HEARTBEAT_MS);
            let epoch = self.nodes[i].epoch;
            self.schedule(first_beat, Event::Heartbeat { node: ix, epoch });
            // Arms the node's timer (its first refresh, its periodic sync).
            self.handle(ix, Input::Tick, None);
        }
    }

    /// Connects each initial node to random others until it has its peer target (a steady
    /// mesh has no node still dialling), then forms gossip meshes of degree D from those
    /// connections, as gossipsub's GRAFTs would have.
    fn warm_topology(&mut self, count: Ix) {
        let target = self.mesh_config.peers_target;
        let max = self.scenario.topology.connections_max;
        let degree = self.scenario.topology.gossip_degree;
        if count < 2 {
            return;
        }
        for ix in 0..count {
            let want = target;
            for _ in 0..want * 4 {
                if self.nodes[ix as usize].peers.len() >= want.min(max) {
                    break;
                }
                let other = self.nodes[ix as usize].rng.below(u64::from(count)) as Ix;
                let full = self.nodes[other as usize].peers.len() >= max;
                if other != ix && !full && self.nodes[ix as usize].peers.insert(other) {
                    self.nodes[other as usize].peers.insert(ix);
                }
            }
        }
        for ix in 0..count {
            let mut candidates: Vec<Ix> = self.nodes[ix as usize].peers.iter().copied().collect();
            self.nodes[ix as usize].rng.shuffle(&mut candidates);
            for peer in candidates {
                if self.nodes[ix as usize].gossip_mesh.len() >= degree {
                    break;
                }
                if self.nodes[peer as usize].gossip_mesh.len() < degree {
                    self.graft(ix, peer);
                }
            }
        }
    }
}
