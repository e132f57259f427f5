use super::dialling::dial_rank;
use super::*;
use crate::cert::NodeCert;
use crate::departure::Departure;
use crate::directory::Admission;
use crate::limits::REFUSED_PEERS_MAX;
use crate::signed::{DocKind, Signed};

const T0: Millis = Millis(1_800_000_000_000);

fn key(n: u8) -> SecretKey {
    SecretKey::from_seed([n; 32])
}

fn capsule(name: &str) -> HostedCapsule {
    HostedCapsule { name: name.into(), digest: None, version: "1.0.0".into() }
}

fn config() -> MeshConfig {
    MeshConfig { peers_target: 0, ..MeshConfig::default() }
}

/// A closed mesh whose certificates `authority` signs.
fn closed_config(authority: &SecretKey) -> MeshConfig {
    MeshConfig {
        directory: DirectoryConfig {
            admission: Admission::Closed { authorities: vec![authority.public()] },
            ..DirectoryConfig::default()
        },
        ..config()
    }
}

/// A day-long certificate for node `n`, signed by `authority`.
fn cert_of(authority: &SecretKey, n: u8) -> Envelope {
    Signed::sign(NodeCert::new(key(n).node_id(), 1, T0, T0.plus(86_400_000)), authority)
        .unwrap()
        .into_envelope()
}

/// A tiny in-memory driver: delivers every output of every node to its peer at once.
struct Net {
    nodes: Vec<MeshNode>,
    links: Vec<(usize, usize)>,
    published: Vec<(usize, Vec<u8>)>,
    disconnects: Vec<(usize, NodeId)>,
    unblocks: Vec<(usize, NodeId)>,
    dials: Vec<(usize, NodeId)>,
    /// Every sync request sent: by whom, and what it carried.
    syncs: Vec<(usize, SyncKind)>,
    now: Millis,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SyncKind {
    Digest,
    Summary,
    Scoped,
}

impl Net {
    fn new(configs: Vec<(SecretKey, MeshConfig)>) -> Self {
        let nodes = configs.into_iter().map(|(k, c)| MeshNode::new(k, c, T0)).collect();
        Self {
            nodes,
            links: Vec::new(),
            published: Vec::new(),
            disconnects: Vec::new(),
            unblocks: Vec::new(),
            dials: Vec::new(),
            syncs: Vec::new(),
            now: T0,
        }
    }

    fn index(&self, id: NodeId) -> Option<usize> {
        self.nodes.iter().position(|n| n.id() == id)
    }

    fn connect(&mut self, a: usize, b: usize) {
        self.links.push((a, b));
        let (ia, ib) = (self.nodes[a].id(), self.nodes[b].id());
        self.nodes[a].handle(self.now, Input::PeerConnected { peer: ib });
        self.nodes[b].handle(self.now, Input::PeerConnected { peer: ia });
        self.pump();
    }

    fn linked(&self, a: usize, b: usize) -> bool {
        self.links.iter().any(|&(x, y)| (x, y) == (a, b) || (x, y) == (b, a))
    }

    fn handle(&mut self, i: usize, input: Input) {
        self.nodes[i].handle(self.now, input);
        self.pump();
    }

    fn pump(&mut self) {
        let mut pending_gossip: Vec<(usize, usize, Vec<u8>)> = Vec::new();
        loop {
            let mut progressed = false;
            for i in 0..self.nodes.len() {
                while let Some(out) = self.nodes[i].poll_output() {
                    progressed = true;
                    match out {
                        Output::Publish { bytes } | Output::PublishRevocation { bytes } => {
                            self.published.push((i, bytes.clone()));
                            for j in 0..self.nodes.len() {
                                if self.linked(i, j) {
                                    pending_gossip.push((i, j, bytes.clone()));
                                }
                            }
                        }
                        Output::SendSyncRequest { peer, request } => {
                            let Some(j) = self.index(peer) else {
                                self.nodes[i].handle(self.now, Input::SyncFailed { peer });
                                continue;
                            };
                            let from = self.nodes[i].id();
                            let request = SyncRequest::decode(&request.encode()).unwrap();
                            let kind = match (&request.summary, &request.scope) {
                                (Some(_), _) => SyncKind::Summary,
                                (None, Some(_)) => SyncKind::Scoped,
                                (None, None) => SyncKind::Digest,
                            };
                            self.syncs.push((i, kind));
                            self.nodes[j]
                                .handle(self.now, Input::SyncRequested { from, token: i as u64, request });
                        }
                        Output::SendSyncResponse { token, response } => {
                            let j = token as usize;
                            let from = self.nodes[i].id();
                            let response = SyncResponse::decode(&response.encode()).unwrap();
                            self.nodes[j].handle(self.now, Input::SyncAnswered { from, response });
                        }
                        Output::Disconnect { peer, .. } | Output::Block { peer, .. } => {
                            self.disconnects.push((i, peer));
                        }
                        Output::Unblock { peer } => self.unblocks.push((i, peer)),
                        Output::Dial { peer, .. } => self.dials.push((i, peer)),
                        Output::Report { .. } | Output::Event(_) => {}
                    }
                }
            }
            for (from, to, bytes) in pending_gossip.drain(..) {
                progressed = true;
                let from = self.nodes[from].id();
                self.nodes[to].handle(self.now, Input::GossipReceived { from, token: 0, bytes });
            }
            if !progressed {
                break;
            }
        }
    }

    fn advance(&mut self, ms: u64) {
        self.now = self.now.plus(ms);
        for i in 0..self.nodes.len() {
            self.nodes[i].handle(self.now, Input::Tick);
        }
        self.pump();
    }

    fn hosts(&self, i: usize, name: &str) -> usize {
        self.nodes[i].directory().hosts(self.now, name).count()
    }
}

#[test]
fn a_node_publishes_its_advert_and_republishes_on_change_and_refresh() {
    let mut net = Net::new(vec![(key(1), config())]);
    net.handle(0, Input::SetHosted { capsules: vec![capsule("echo")] });
    assert_eq!(net.published.len(), 1, "first handle publishes");
    assert_eq!(net.hosts(0, "echo"), 1, "own advert is in own directory");
    net.handle(0, Input::SetHosted { capsules: vec![capsule("echo"), capsule("wc")] });
    assert_eq!(net.published.len(), 2, "a change republishes at once");
    let seq_after_change = net.nodes[0].local_seq();
    assert_eq!(net.nodes[0].poll_timeout(), Some(T0.plus(30_000)));
    net.advance(30_000);
    assert_eq!(net.published.len(), 3, "refresh republishes");
    assert!(net.nodes[0].local_seq() > seq_after_change);
}

#[test]
fn anti_entropy_on_connect_brings_a_late_joiner_up_to_date() {
    let mut net = Net::new((1..=4).map(|n| (key(n), config())).collect());
    for i in 0..3 {
        net.handle(i, Input::SetHosted { capsules: vec![capsule(&format!("cap{i}"))] });
    }
    net.connect(0, 1);
    net.connect(1, 2);
    assert_eq!(net.nodes[1].directory().len(), 3);
    // Node 3 joins late, connected only to node 2; no refresh has happened yet.
    net.connect(2, 3);
    assert_eq!(net.nodes[3].directory().len(), 4, "learned every node through node 2");
    assert_eq!(net.hosts(3, "cap0"), 1);
}

#[test]
fn gossip_spreads_changes_and_forgeries_are_rejected() {
    let mut net = Net::new((1..=3).map(|n| (key(n), config())).collect());
    net.connect(0, 1);
    net.connect(1, 2);
    net.handle(0, Input::SetHosted { capsules: vec![capsule("echo")] });
    assert_eq!(net.hosts(1, "echo"), 1);

    // A forged advert claiming node 0, signed by node 2's key, gossiped to node 1.
    let forged = Signed::sign(Advert::new(u64::MAX, T0, 90_000), &key(3)).unwrap().into_envelope();
    let mut value: ciborium::Value = ciborium::de::from_reader(forged.encode().as_slice()).unwrap();
    for (k, v) in value.as_map_mut().unwrap() {
        if k.as_text() == Some("signer") {
            *v = ciborium::Value::Bytes(key(1).public().as_bytes().to_vec());
        }
    }
    let bytes = crate::codec::encode(&value);
    let from = net.nodes[2].id();
    net.nodes[1].handle(net.now, Input::GossipReceived { from, token: 77, bytes });
    let report = std::iter::from_fn(|| net.nodes[1].poll_output())
        .find_map(|o| match o {
            Output::Report { token, verdict } => Some((token, verdict)),
            _ => None,
        })
        .unwrap();
    assert_eq!(report, (77, Verdict::Reject));
    assert_eq!(net.hosts(1, "echo"), 1, "the forgery changed nothing");
    assert_eq!(net.nodes[1].directory().stats().refused["bad_signature"], 1);
}

#[test]
fn closed_mesh_disconnects_peers_without_a_certificate() {
    let authority = key(100);
    let closed = closed_config(&authority);
    let mut net = Net::new(vec![(key(1), closed.clone()), (key(2), closed.clone()), (key(3), closed)]);
    for (i, n) in [(0, 1u8), (1, 2)] {
        let cert = Signed::sign(NodeCert::new(key(n).node_id(), 1, T0, T0.plus(86_400_000)), &authority)
            .unwrap()
            .into_envelope();
        net.handle(i, Input::SetCert { cert: Some(cert) });
        net.handle(i, Input::SetHosted { capsules: vec![capsule(&format!("cap{i}"))] });
    }
    net.handle(2, Input::SetHosted { capsules: vec![capsule("intruder")] });
    net.connect(0, 1);
    assert_eq!(net.hosts(0, "cap1"), 1, "certified peers exchange adverts");
    assert!(net.disconnects.is_empty());
    net.connect(2, 0);
    assert!(net.disconnects.contains(&(0, key(3).node_id())), "uncertified peer is disconnected");
    assert_eq!(net.hosts(0, "intruder"), 0);
    assert_eq!(net.nodes[0].stats().peers_refused, 1);
}

#[test]
fn closed_mesh_times_out_peers_that_never_present_a_certificate() {
    let closed = closed_config(&key(100));
    let mut node = MeshNode::new(key(1), closed, T0);
    node.handle(T0, Input::PeerConnected { peer: key(2).node_id() });
    assert_eq!(node.poll_timeout(), Some(T0.plus(15_000)));
    while node.poll_output().is_some() {}
    node.handle(T0.plus(15_000), Input::Tick);
    let outputs: Vec<Output> = std::iter::from_fn(|| node.poll_output()).collect();
    assert!(outputs.iter().any(|o| matches!(o, Output::Disconnect { .. })), "{outputs:?}");
    // Not held off: its certificate may have been stuck behind our own sync requests.
    assert!(!outputs.iter().any(|o| matches!(o, Output::Block { .. })), "{outputs:?}");
    assert_eq!(node.held().count(), 0);
    assert_eq!(node.stats().peers_refused, 1);
}

#[test]
fn a_refused_peer_is_held_off_then_let_in_once_certified() {
    let authority = key(100);
    let closed = closed_config(&authority);
    let mut net = Net::new(vec![(key(1), closed.clone()), (key(2), closed)]);
    net.handle(0, Input::SetCert { cert: Some(cert_of(&authority, 1)) });
    let intruder = key(2).node_id();
    // Node 0 also lists the intruder as a bootstrap peer: it must not dial it while held.
    net.handle(0, Input::SetBootstrap { peers: vec![(intruder, vec!["/ip4/10.0.0.2/tcp/7421".to_owned()])] });
    net.connect(1, 0);
    assert_eq!(net.disconnects, vec![(0, intruder)], "refused and blocked");
    assert_eq!(net.nodes[0].stats().peers_refused, 1);
    net.handle(1, Input::PeerDisconnected { peer: key(1).node_id() });

    // It comes back (its own retries, Kademlia): closed at once, not a peer, not counted again.
    net.advance(1_000);
    net.disconnects.clear();
    net.handle(0, Input::PeerConnected { peer: intruder });
    assert_eq!(net.disconnects, vec![(0, intruder)]);
    assert_eq!(net.nodes[0].peers().count(), 0);
    assert_eq!(net.nodes[0].stats().peers_refused, 1);
    let dials_before = net.dials.len();
    net.advance(REFUSED_HOLD_MS - 2_000);
    assert_eq!(net.dials.len(), dials_before, "a held bootstrap peer is not dialled");
    assert!(net.unblocks.is_empty());
    assert!(net.nodes[0].poll_timeout().unwrap() > net.now, "waiting out a hold is not a busy loop");

    // The hold ends; the intruder has since been certified and is admitted.
    net.advance(1_000);
    assert_eq!(net.unblocks, vec![(0, intruder)]);
    assert!(net.dials.len() > dials_before, "dialled again once the hold is over");
    net.handle(1, Input::SetCert { cert: Some(cert_of(&authority, 2)) });
    net.disconnects.clear();
    net.connect(1, 0);
    assert!(net.disconnects.is_empty(), "{:?}", net.disconnects);
    assert_eq!(net.nodes[0].peers().map(|(id, ok, _)| (id, ok)).collect::<Vec<_>>(), vec![(intruder, true)]);
}

#[test]
fn a_peer_that_overran_its_request_budget_is_held_off_in_an_open_mesh_too() {
    let mut net = Net::new(vec![(key(1), config()), (key(2), config())]);
    let flooder = key(2).node_id();
    net.connect(1, 0);
    assert!(net.disconnects.is_empty());
    for _ in 0..3 {
        // Several of its streams overran before the cut took effect.
        net.handle(0, Input::PeerOverran { peer: flooder, reason: "task requests over 4 MiB".into() });
    }
    assert_eq!(net.disconnects, vec![(0, flooder)], "cut off, once");
    assert_eq!(net.nodes[0].stats().peers_cut_off, 1);
    assert_eq!(net.nodes[0].peers().count(), 0);
    net.handle(1, Input::PeerDisconnected { peer: key(1).node_id() });

    // Back at once: closed again; once the hold is over, welcome.
    net.advance(1_000);
    net.disconnects.clear();
    net.handle(0, Input::PeerConnected { peer: flooder });
    assert_eq!(net.disconnects, vec![(0, flooder)]);
    net.advance(REFUSED_HOLD_MS);
    assert_eq!(net.unblocks, vec![(0, flooder)]);
    net.disconnects.clear();
    net.connect(1, 0);
    assert!(net.disconnects.is_empty(), "{:?}", net.disconnects);
}

#[test]
fn refused_peers_held_at_once_are_bounded() {
    let closed = closed_config(&key(100));
    let mut node = MeshNode::new(key(1), closed, T0);
    let request = SyncRequest::new(None, node.directory().digest());
    let peer = |i: usize| {
        SecretKey::from_seed({
            let mut seed = [7u8; 32];
            seed[..8].copy_from_slice(&(i as u64).to_le_bytes());
            seed
        })
        .node_id()
    };
    // The first one refused is a bootstrap peer too.
    node.handle(T0, Input::SetBootstrap { peers: vec![(peer(0), vec!["/ip4/10.0.0.9/tcp/7421".into()])] });
    while node.poll_output().is_some() {}
    let mut unblocked = Vec::new();
    let mut redialled = false;
    for i in 0..=REFUSED_PEERS_MAX {
        let now = T0.plus(i as u64);
        node.handle(now, Input::PeerConnected { peer: peer(i) });
        node.handle(now, Input::SyncRequested { from: peer(i), token: 0, request: request.clone() });
        while let Some(out) = node.poll_output() {
            match out {
                Output::Unblock { peer } => unblocked.push(peer),
                Output::Dial { peer: p, .. } if p == peer(0) => redialled = true,
                _ => {}
            }
        }
    }
    assert_eq!(node.held.len(), REFUSED_PEERS_MAX);
    assert_eq!(unblocked, vec![peer(0)], "the hold that ends first ends early");
    assert!(redialled, "a bootstrap peer whose hold ended early is dialled again at once");
}

#[test]
fn nodes_dial_peers_learned_from_adverts_with_backoff() {
    let dialing = MeshConfig { peers_target: 4, ..MeshConfig::default() };
    let mut net = Net::new(vec![(key(1), dialing), (key(2), config()), (key(3), config())]);
    net.handle(2, Input::SetAddrs { addrs: vec!["/ip4/10.0.0.3/tcp/7421".into()] });
    net.connect(1, 2);
    net.connect(0, 1);
    net.advance(DIAL_CHECK_INTERVAL_MS);
    assert!(net.dials.iter().any(|&(i, peer)| i == 0 && peer == key(3).node_id()), "{:?}", net.dials);
    let before = net.dials.len();
    net.advance(DIAL_CHECK_INTERVAL_MS);
    assert_eq!(net.dials.len(), before, "no redial within the backoff");
    net.advance(30_000);
    assert!(net.dials.len() > before, "redial after the backoff");
}

#[test]
fn expired_nodes_leave_every_directory() {
    // Without departure notices (suspect_ms 0) the TTL is what drops a dead node.
    let ttl_only = MeshConfig { suspect_ms: 0, ..config() };
    let mut net = Net::new((1..=2).map(|n| (key(n), ttl_only.clone())).collect());
    net.handle(1, Input::SetHosted { capsules: vec![capsule("echo")] });
    net.connect(0, 1);
    assert_eq!(net.hosts(0, "echo"), 1);
    // Node 1 dies: it stops publishing; node 0 drops it after the TTL.
    net.nodes.truncate(1);
    net.links.clear();
    net.handle(0, Input::PeerDisconnected { peer: key(2).node_id() });
    net.advance(89_999);
    assert_eq!(net.hosts(0, "echo"), 1);
    net.advance(1);
    assert_eq!(net.hosts(0, "echo"), 0);
}

#[test]
fn a_node_republishes_shortly_after_its_first_peer_connects() {
    let mut net = Net::new((1..=2).map(|n| (key(n), config())).collect());
    net.handle(0, Input::SetHosted { capsules: vec![capsule("echo")] });
    let before = net.published.iter().filter(|(i, _)| *i == 0).count();
    net.connect(0, 1);
    assert!(net.nodes[0].poll_timeout().unwrap() <= T0.plus(ANNOUNCE_DELAY_MS));
    net.advance(ANNOUNCE_DELAY_MS);
    let after = net.published.iter().filter(|(i, _)| *i == 0).count();
    assert_eq!(after, before + 1, "republished once gossip can carry it");
}

#[test]
fn announcing_early_republishes_when_the_first_peer_subscribes_and_again_later() {
    let early = MeshConfig { announce_early: true, ..config() };
    let mut net = Net::new((1..=3).map(|n| (key(n), early.clone())).collect());
    net.handle(0, Input::SetHosted { capsules: vec![capsule("echo")] });
    let published = |net: &Net| net.published.iter().filter(|(i, _)| *i == 0).count();
    let before = published(&net);
    // A subscription from a peer it is not connected to carries nothing.
    let stranger = net.nodes[2].id();
    net.handle(0, Input::PeerSubscribed { peer: stranger });
    assert_eq!(published(&net), before);
    net.connect(0, 1);
    net.advance(30);
    assert_eq!(published(&net), before, "not yet: no peer has subscribed");
    let peer = net.nodes[1].id();
    net.handle(0, Input::PeerSubscribed { peer });
    assert_eq!(published(&net), before + 1, "republished the moment gossip can carry it");
    // Later subscriptions change nothing; the second announcement comes on time, once.
    net.handle(0, Input::PeerSubscribed { peer });
    assert_eq!(published(&net), before + 1);
    net.advance(ANNOUNCE_DELAY_MS - 30);
    assert_eq!(published(&net), before + 2, "and again for the nodes that connected since");
    net.advance(ANNOUNCE_DELAY_MS);
    assert_eq!(published(&net), before + 2);
}

#[test]
fn without_early_announcement_a_subscription_publishes_nothing() {
    let mut net = Net::new((1..=2).map(|n| (key(n), config())).collect());
    net.handle(0, Input::SetHosted { capsules: vec![capsule("echo")] });
    let before = net.published.iter().filter(|(i, _)| *i == 0).count();
    net.connect(0, 1);
    let peer = net.nodes[1].id();
    net.handle(0, Input::PeerSubscribed { peer });
    assert_eq!(net.published.iter().filter(|(i, _)| *i == 0).count(), before);
}

#[test]
fn a_newcomer_syncs_with_one_peer_at_a_time() {
    let mut node = MeshNode::new(key(1), config(), T0);
    for n in 2..=4 {
        node.handle(T0, Input::PeerConnected { peer: key(n).node_id() });
    }
    let requests: Vec<NodeId> = std::iter::from_fn(|| node.poll_output())
        .filter_map(|o| match o {
            Output::SendSyncRequest { peer, .. } => Some(peer),
            _ => None,
        })
        .collect();
    assert_eq!(requests.len(), 1, "one request in flight");
    node.handle(T0, Input::SyncAnswered { from: requests[0], response: SyncResponse::new(vec![], false) });
    let next = std::iter::from_fn(|| node.poll_output())
        .filter(|o| matches!(o, Output::SendSyncRequest { .. }))
        .count();
    assert_eq!(next, 1, "the next waiting peer is synced when the first answers");
}

#[test]
fn each_node_ranks_dial_candidates_in_its_own_order_so_dials_spread() {
    // 200 nodes that all know each other, each dialling its first 8: no node may be everyone's
    // choice (in directory order the 8 lowest ids took all 200 × 8 dials).
    let keys: Vec<SecretKey> = (0..200u32)
        .map(|i| {
            let mut seed = [0u8; 32];
            seed[..4].copy_from_slice(&i.to_le_bytes());
            SecretKey::from_seed(seed)
        })
        .collect();
    let ids: Vec<NodeId> = keys.iter().map(SecretKey::node_id).collect();
    let mut chosen = vec![0usize; ids.len()];
    for key in &keys {
        let (me, salt) = (key.node_id(), dial_salt(key));
        let mut others: Vec<(u64, usize)> = ids
            .iter()
            .enumerate()
            .filter(|(_, other)| **other != me)
            .map(|(j, other)| (dial_rank(salt, other), j))
            .collect();
        others.sort_unstable();
        for &(_, j) in others.iter().take(8) {
            chosen[j] += 1;
        }
    }
    let busiest = chosen.iter().max().copied().unwrap_or(0);
    assert!(busiest <= 24, "one node was chosen by {busiest} of 200 (expected about 8)");
    assert!(chosen.iter().filter(|c| **c == 0).count() < 20, "{chosen:?}");
}

#[test]
fn bootstrap_peers_are_dialled_again_with_a_growing_wait_while_not_connected() {
    let mut net = Net::new(vec![(key(1), config()), (key(2), config()), (key(3), config())]);
    let b = key(2).node_id();
    let bootstrap = vec![
        (b, vec!["/ip4/10.0.0.2/tcp/7421".to_owned()]),
        (b, vec!["/ip4/10.0.0.2/udp/7421/quic-v1".to_owned()]),
        (key(1).node_id(), vec!["/ip4/10.0.0.1/tcp/7421".to_owned()]),
    ];
    net.handle(0, Input::SetBootstrap { peers: bootstrap });
    let to_b = |net: &Net| net.dials.iter().filter(|&&(i, p)| i == 0 && p == b).count();
    assert_eq!(to_b(&net), 1, "dialled at once, and never itself");
    assert_eq!(net.dials.len(), 1);
    // Another peer connecting does not stop the bootstrap peer from being dialled again
    // (a chain started in the wrong order would stay split otherwise).
    net.connect(0, 2);
    let mut dialled_at = vec![];
    for _ in 0..(20 * 60) {
        let before = to_b(&net);
        net.advance(1_000);
        if to_b(&net) > before {
            dialled_at.push(net.now.since(T0));
        }
        if dialled_at.len() == 6 {
            break;
        }
    }
    let waits: Vec<u64> = dialled_at.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(
        dialled_at[0] >= BOOTSTRAP_RETRY_MS && dialled_at[0] <= BOOTSTRAP_RETRY_MS * 5 / 4 + 1_000,
        "{dialled_at:?}"
    );
    assert!(waits.windows(2).all(|w| w[1] >= w[0]), "the wait grows: {waits:?}");
    assert!(waits[waits.len() - 1] >= 8 * BOOTSTRAP_RETRY_MS, "it doubles: {waits:?}");
    assert!(waits.iter().all(|w| *w <= BOOTSTRAP_RETRY_MAX_MS * 5 / 4 + 1_000), "{waits:?}");
    // Connected: no more dials; a short connection that drops does not reset the wait.
    net.connect(0, 1);
    let dials = to_b(&net);
    net.advance(BOOTSTRAP_RETRY_MAX_MS * 2);
    assert_eq!(to_b(&net), dials, "connected: not dialled");
    net.handle(1, Input::PeerDisconnected { peer: key(1).node_id() });
    net.handle(0, Input::PeerDisconnected { peer: b });
    net.advance(BOOTSTRAP_RETRY_MS * 2);
    assert_eq!(to_b(&net), dials + 1, "a connection that lasted resets the wait to the first one");
}

#[test]
fn artifact_providers_are_the_holders_connected_peers_first() {
    let mut net = Net::new(vec![(key(1), config()), (key(2), config()), (key(3), config())]);
    let served = Digest::of(b"an artifact");
    for i in [1, 2] {
        net.handle(i, Input::SetArtifacts { artifacts: vec![served] });
    }
    net.handle(0, Input::SetArtifacts { artifacts: vec![served] });
    net.connect(0, 1);
    net.connect(0, 2);
    let (one, two) = (key(2).node_id(), key(3).node_id());
    let mut in_order = vec![one, two];
    in_order.sort();
    assert_eq!(net.nodes[0].artifact_providers(net.now, Some(&served)), in_order, "never itself");
    assert_eq!(net.nodes[0].artifact_providers(net.now, Some(&Digest::of(b"other"))), vec![]);
    // The lower id disconnects: its advert is still held, but the connected peer comes first.
    let (low, high) = (in_order[0], in_order[1]);
    net.handle(0, Input::PeerDisconnected { peer: low });
    assert_eq!(net.nodes[0].artifact_providers(net.now, None), vec![high, low]);
}

#[test]
fn a_closed_mesh_judges_gossip_on_its_merits_even_from_a_peer_not_yet_admitted() {
    let authority = key(100);
    // Node 2 publishes a certified advert, node 3 an uncertified one; capture both.
    let published = |n: u8, cert: Option<Envelope>| {
        let mut node = MeshNode::new(key(n), closed_config(&authority), T0);
        node.handle(T0, Input::SetCert { cert });
        node.handle(T0, Input::SetHosted { capsules: vec![capsule(&format!("cap{n}"))] });
        std::iter::from_fn(|| node.poll_output())
            .filter_map(|o| match o {
                Output::Publish { bytes } => Some(bytes),
                _ => None,
            })
            .last()
            .unwrap()
    };
    let certified = published(2, Some(cert_of(&authority, 2)));
    let uncertified = published(3, None);

    let mut node = MeshNode::new(key(1), closed_config(&authority), T0);
    let relay = key(3).node_id();
    node.handle(T0, Input::PeerConnected { peer: relay });
    assert_eq!(node.peers().map(|(_, admitted, _)| admitted).collect::<Vec<_>>(), vec![false]);
    let verdict_of = |node: &mut MeshNode, token: u64, bytes: Vec<u8>| {
        node.handle(T0, Input::GossipReceived { from: relay, token, bytes });
        std::iter::from_fn(|| node.poll_output())
            .find_map(|o| match o {
                Output::Report { token: t, verdict } if t == token => Some(verdict),
                _ => None,
            })
            .unwrap()
    };
    // Ignoring it would make gossipsub drop the copies certified peers send next.
    assert_eq!(verdict_of(&mut node, 1, certified), Verdict::Accept, "a certified advert, whoever relays it");
    // Its own advert has no certificate: refused, but that alone is no reason to hold it
    // off (certificate windows depend on clocks); its sync request decides.
    assert_eq!(verdict_of(&mut node, 2, uncertified), Verdict::Reject);
    assert_eq!(node.directory().hosts(T0, "cap2").count(), 1);
    assert_eq!(node.directory().hosts(T0, "cap3").count(), 0);
    assert_eq!(node.held().count(), 0);
    // Junk from a peer not admitted: held off at once.
    assert_eq!(verdict_of(&mut node, 3, vec![0xff; 40]), Verdict::Reject);
    assert_eq!(node.held().map(|(id, _)| id).collect::<Vec<_>>(), vec![relay]);
    assert_eq!(node.peers().count(), 0);
}

impl Net {
    /// Adverts node `i` published that node `signer` signed (its own, or others' passed on).
    fn published_adverts_of(&self, i: usize, signer: NodeId) -> usize {
        self.published
            .iter()
            .filter(|(by, bytes)| {
                let envelope = Envelope::decode(bytes).unwrap();
                *by == i
                    && envelope.kind() == DocKind::NodeAdvert
                    && NodeId::from_key(envelope.signer()) == signer
            })
            .count()
    }

    fn published_notices(&self, i: usize) -> Vec<Vec<u8>> {
        self.published
            .iter()
            .filter(|(by, bytes)| {
                *by == i && Envelope::decode(bytes).unwrap().kind() == DocKind::NodeDeparture
            })
            .map(|(_, bytes)| bytes.clone())
            .collect()
    }
}

/// Adverts of nodes outside any test net, issued at T0, one per number in `numbers`.
fn others(numbers: std::ops::Range<u16>) -> Vec<Envelope> {
    numbers
        .map(|n| {
            let mut seed = [0xaa; 32];
            seed[..2].copy_from_slice(&n.to_le_bytes());
            Signed::sign(Advert::new(1, T0, 90_000), &SecretKey::from_seed(seed)).unwrap().into_envelope()
        })
        .collect()
}

impl Net {
    /// Hands node `i` these adverts as gossip.
    fn learn(&mut self, i: usize, adverts: &[Envelope]) {
        for advert in adverts {
            let from = key(99).node_id();
            let bytes = advert.encode();
            self.nodes[i].handle(self.now, Input::GossipReceived { from, token: 0, bytes });
        }
        self.pump();
    }

    fn syncs_by(&self, i: usize) -> Vec<SyncKind> {
        self.syncs.iter().filter(|(by, _)| *by == i).map(|(_, kind)| *kind).collect()
    }
}

/// Two connected nodes that hold the same `adverts` and each other's, past their first
/// exchange; refreshes are rare, so only what a test changes differs.
fn agreeing_pair(adverts: &[Envelope]) -> Net {
    let quiet = MeshConfig { refresh_ms: 3_600_000, ttl_ms: 7_200_000, ..config() };
    let mut net = Net::new((1..=2).map(|n| (key(n), quiet.clone())).collect());
    net.learn(0, adverts);
    net.learn(1, adverts);
    net.connect(0, 1);
    net.advance(ANNOUNCE_DELAY_MS);
    assert_eq!(net.nodes[0].directory().len(), adverts.len() + 2);
    assert_eq!(net.nodes[1].directory().len(), adverts.len() + 2);
    net.syncs.clear();
    net
}

/// Runs the periodic sync (each node syncs with its one peer).
fn periodic_sync(net: &mut Net) {
    let interval = config().sync_interval_ms;
    net.advance(interval - ANNOUNCE_DELAY_MS);
}

#[test]
fn large_directories_that_agree_sync_by_one_summary_each_way() {
    let mut net = agreeing_pair(&others(0..100));
    let before: Vec<u64> = net.nodes.iter().map(|n| n.stats().sync_summaries_settled).collect();
    periodic_sync(&mut net);
    assert_eq!(net.syncs_by(0), [SyncKind::Summary]);
    assert_eq!(net.syncs_by(1), [SyncKind::Summary]);
    for (node, before) in net.nodes.iter().zip(before) {
        assert_eq!(node.stats().sync_summaries_settled, before + 1);
    }
}

#[test]
fn a_missed_advert_comes_with_the_answer_to_the_summary() {
    let mut net = agreeing_pair(&others(0..100));
    // Node 0 hears of one more node; the gossip never reaches node 1.
    let missed = others(100..101);
    net.learn(0, &missed);
    periodic_sync(&mut net);
    let node = NodeId::from_key(missed[0].signer());
    assert!(net.nodes[1].directory().get(&node).is_some(), "node 1 got the advert it lacked");
    assert_eq!(net.syncs_by(1), [SyncKind::Summary], "in the summary's answer: no digest needed");
    // Node 0 holds more than node 1 in that bucket: its own summary's answer cannot settle
    // it, and the digest of that one bucket shows node 1 has nothing for it.
    assert_eq!(net.syncs_by(0), [SyncKind::Summary, SyncKind::Scoped]);
    assert_eq!(net.nodes[0].directory().len(), net.nodes[1].directory().len());
}

#[test]
fn a_notice_the_requester_missed_is_found_through_the_digest_of_its_bucket() {
    let adverts = others(0..100);
    let mut net = agreeing_pair(&adverts);
    // Node 0 hears that the first of them departed (witness: the second, which it holds);
    // node 1 does not.
    let departed = NodeId::from_key(adverts[0].signer());
    let notice = Departure::new(departed, 1, *adverts[0].signature(), net.now);
    let mut witness = [0xaa; 32];
    witness[..2].copy_from_slice(&1u16.to_le_bytes());
    let notice = Signed::sign(notice, &SecretKey::from_seed(witness)).unwrap().into_envelope();
    let from = key(99).node_id();
    net.nodes[0].handle(net.now, Input::GossipReceived { from, token: 0, bytes: notice.encode() });
    assert!(net.nodes[0].directory().get(&departed).is_none());
    net.published.clear();
    periodic_sync(&mut net);
    assert!(net.nodes[1].directory().get(&departed).is_none(), "node 1 applied the notice");
    assert_eq!(net.syncs_by(1), [SyncKind::Summary, SyncKind::Scoped]);
    assert_eq!(net.nodes[0].directory().len(), net.nodes[1].directory().len());
}

#[test]
fn a_summary_to_a_newcomer_is_answered_with_all_it_holds() {
    let mut net = Net::new((1..=2).map(|n| (key(n), config())).collect());
    let adverts = others(0..100);
    net.learn(0, &adverts);
    net.learn(1, &adverts[..3]);
    net.connect(0, 1);
    // Node 1 holds too little to summarize, and node 0 gets node 1's three adverts (which
    // it has) in one answer.
    assert_eq!(net.syncs_by(0), [SyncKind::Summary]);
    assert_eq!(net.syncs_by(1), [SyncKind::Digest]);
    assert_eq!(net.nodes[0].directory().len(), net.nodes[1].directory().len());
}

#[test]
fn a_sync_that_must_catch_up_sends_the_digest_after_the_first_answer() {
    // Node 1 lacks 320 of node 0's adverts: more than one answer holds (256). The request
    // after an answer that said `more` is a digest: a summary would find every bucket
    // differing again.
    let mut net = Net::new((1..=2).map(|n| (key(n), config())).collect());
    let adverts = others(0..400);
    net.learn(0, &adverts);
    net.learn(1, &adverts[..80]);
    net.connect(0, 1);
    assert_eq!(net.nodes[0].directory().len(), net.nodes[1].directory().len());
    assert_eq!(net.syncs_by(1), [SyncKind::Summary, SyncKind::Scoped, SyncKind::Digest]);
}

/// Nodes 0 and 1 connected to node 2, which hosts echo; node 0 and 1 connected too.
fn triangle() -> Net {
    let mut net = Net::new((1..=3).map(|n| (key(n), config())).collect());
    net.handle(2, Input::SetHosted { capsules: vec![capsule("echo")] });
    net.handle(2, Input::SetAddrs { addrs: vec!["/ip4/10.0.0.3/tcp/7421".into()] });
    net.connect(0, 1);
    net.connect(0, 2);
    net.connect(1, 2);
    // Past the announcement after the first connection: every node holds every advert.
    net.advance(ANNOUNCE_DELAY_MS);
    assert_eq!((net.hosts(0, "echo"), net.hosts(1, "echo")), (1, 1));
    net
}

#[test]
fn a_peer_that_stays_away_is_declared_departed_and_every_directory_drops_it() {
    let mut net = triangle();
    let suspect_ms = config().suspect_ms;
    let dead = key(3).node_id();
    // Only node 0 notices (node 1's connection lingers): one witness is enough.
    net.links.retain(|&(a, b)| a != 2 && b != 2);
    net.handle(0, Input::PeerDisconnected { peer: dead });
    assert!(net.dials.contains(&(0, dead)), "the lost peer is dialled again at once");
    net.advance(suspect_ms - 1);
    assert_eq!(net.hosts(0, "echo"), 1, "not before suspect_ms");
    net.advance(suspect_ms / 2 + 1);
    assert_eq!((net.hosts(0, "echo"), net.hosts(1, "echo")), (0, 0), "the notice reached node 1");
    assert_eq!(net.nodes[0].stats().departures_declared, 1);
    assert_eq!(net.published_notices(0).len(), 1);
    assert_eq!(net.nodes[1].directory().stats().departed, 1);
    // Node 1, a witness too, has nothing left to declare.
    net.handle(1, Input::PeerDisconnected { peer: dead });
    net.advance(suspect_ms * 3 / 2);
    assert_eq!(net.nodes[1].stats().departures_declared, 0);
}

#[test]
fn a_departed_node_is_dialled_again_now_and_then_until_it_is_back() {
    // A partition: node 2 is cut off from both others, who declare it departed.
    let mut net = triangle();
    let suspect_ms = config().suspect_ms;
    let cut = key(3).node_id();
    net.links.retain(|&(a, b)| a != 2 && b != 2);
    net.handle(0, Input::PeerDisconnected { peer: cut });
    net.handle(1, Input::PeerDisconnected { peer: cut });
    for other in [key(1).node_id(), key(2).node_id()] {
        net.handle(2, Input::PeerDisconnected { peer: other });
    }
    net.advance(suspect_ms * 2);
    assert_eq!((net.hosts(0, "echo"), net.hosts(1, "echo")), (0, 0));
    let seq_before = net.nodes[2].local_seq();
    // Nothing in either directory leads back to it, yet each node dials it once per
    // reconnect interval at the address its last advert listed.
    let dials = |net: &Net, i: usize| net.dials.iter().filter(|&&(by, p)| by == i && p == cut).count();
    let before = (dials(&net, 0), dials(&net, 1));
    net.advance(2 * RECONNECT_INTERVAL_MS);
    let after = (dials(&net, 0), dials(&net, 1));
    assert!(after.0 > before.0 && after.1 > before.1, "{before:?} then {after:?}");
    assert!(after.0 - before.0 <= 2, "once per interval: {before:?} then {after:?}");
    // The partition heals: node 0's dial gets through. Node 2 republishes (it had lost
    // every peer; the sync also hands it the notice naming its advert), and its new advert
    // is taken everywhere; the notices each side signed about the other are refuted too.
    net.connect(0, 2);
    net.connect(1, 2);
    net.advance(2 * REFUTE_INTERVAL_MS);
    assert!(net.nodes[2].local_seq() > seq_before);
    assert_eq!((net.hosts(0, "echo"), net.hosts(1, "echo")), (1, 1));
    for i in 0..3 {
        assert_eq!(net.nodes[i].directory().len(), 3, "node {i} holds every node again");
    }
    // Back: no more dials to it.
    let back = (dials(&net, 0), dials(&net, 1));
    net.advance(3 * RECONNECT_INTERVAL_MS);
    assert_eq!((dials(&net, 0), dials(&net, 1)), back);
}

#[test]
fn an_update_learned_by_anti_entropy_is_gossiped_on_but_a_first_sync_is_not() {
    // A chain 0 - 1 - 2; this test network does not relay, so what node 2 publishes reaches
    // node 0 only through anti-entropy with node 1.
    let mut net = Net::new((1..=3).map(|n| (key(n), config())).collect());
    let far = key(3).node_id();
    net.handle(2, Input::SetHosted { capsules: vec![capsule("echo")] });
    net.connect(1, 2);
    net.advance(ANNOUNCE_DELAY_MS);
    // Node 0's first sync fills an empty directory: nothing of it is re-flooded.
    net.connect(0, 1);
    assert_eq!(net.hosts(0, "echo"), 1);
    assert_eq!(net.published_adverts_of(0, far), 0, "a first sync is not re-flooded");
    // Node 2 changes; gossip carries it to node 1 only (as if node 0 had missed it: loss,
    // or a partition). The next anti-entropy round brings it to node 0, which gossips it on
    // to its own neighbours, who likely missed it too.
    net.handle(2, Input::SetHosted { capsules: vec![capsule("echo"), capsule("wc")] });
    assert_eq!(net.hosts(0, "wc"), 0);
    net.advance(config().sync_interval_ms);
    assert_eq!(net.hosts(0, "wc"), 1);
    assert_eq!(net.published_adverts_of(0, far), 1, "the update is gossiped on, once");
}

#[test]
fn a_peer_back_in_time_or_republished_is_not_declared_departed() {
    let mut net = triangle();
    let suspect_ms = config().suspect_ms;
    let id2 = key(3).node_id();
    net.handle(0, Input::PeerDisconnected { peer: id2 });
    net.advance(suspect_ms / 2);
    net.handle(0, Input::PeerConnected { peer: id2 });
    // Node 1 lost node 2 too, but node 2 republishes (through node 0) before the deadline.
    net.handle(1, Input::PeerDisconnected { peer: id2 });
    net.links.retain(|&(a, b)| (a, b) != (1, 2));
    net.handle(2, Input::SetHosted { capsules: vec![capsule("echo"), capsule("wc")] });
    // (This test network does not relay: node 0 passes node 2's new advert on by hand.)
    let (_, advert) = net.published.iter().rev().find(|(by, _)| *by == 2).unwrap().clone();
    net.handle(1, Input::GossipReceived { from: key(1).node_id(), token: 0, bytes: advert });
    net.advance(suspect_ms * 3 / 2);
    assert_eq!((net.hosts(0, "wc"), net.hosts(1, "wc")), (1, 1));
    assert!(net.published_notices(0).is_empty() && net.published_notices(1).is_empty());
    // The newer advert is no proof of life (it may have left just before a crash): node 1
    // suspects it afresh and dials again; the dial succeeds, and nobody is declared.
    let redials = net.dials.iter().filter(|&&(i, p)| i == 1 && p == id2).count();
    assert!(redials >= 1, "{:?}", net.dials);
    net.connect(1, 2);
    net.advance(suspect_ms * 3);
    assert!(net.published_notices(0).is_empty() && net.published_notices(1).is_empty());
    assert_eq!((net.hosts(0, "wc"), net.hosts(1, "wc")), (1, 1));
}

#[test]
fn a_node_refutes_a_notice_about_itself_by_republishing() {
    let mut net = triangle();
    let suspect_ms = config().suspect_ms;
    let alive = key(3).node_id();
    let seq_before = net.nodes[2].local_seq();
    // Node 1 loses its link to node 2 (a partial partition) and declares it departed.
    net.links.retain(|&(a, b)| (a, b) != (1, 2));
    net.handle(1, Input::PeerDisconnected { peer: alive });
    net.advance(suspect_ms * 3 / 2);
    assert_eq!((net.hosts(0, "echo"), net.hosts(1, "echo")), (0, 0));
    // Node 2 hears of it (any relay will do) and republishes; everyone lists it again.
    let notice = net.published_notices(1).pop().unwrap();
    net.handle(2, Input::GossipReceived { from: key(1).node_id(), token: 0, bytes: notice.clone() });
    net.advance(REFUTE_INTERVAL_MS);
    assert!(net.nodes[2].local_seq() > seq_before);
    assert_eq!(net.nodes[2].stats().refutations, 1);
    assert_eq!(net.hosts(0, "echo"), 1, "the refutation reached node 0");
    // The same notice again changes nothing: it names an advert node 2 has replaced.
    let seq = net.nodes[2].local_seq();
    net.handle(2, Input::GossipReceived { from: key(1).node_id(), token: 0, bytes: notice });
    net.advance(REFUTE_INTERVAL_MS);
    assert_eq!(net.nodes[2].local_seq(), seq);
}

#[test]
fn anti_entropy_hands_notices_to_peers_that_missed_them() {
    let mut net = Net::new((1..=3).map(|n| (key(n), config())).collect());
    let suspect_ms = config().suspect_ms;
    let (id0, id1, id2) = (key(1).node_id(), key(2).node_id(), key(3).node_id());
    net.handle(2, Input::SetHosted { capsules: vec![capsule("echo")] });
    net.connect(0, 2);
    net.connect(0, 1);
    assert_eq!(net.hosts(1, "echo"), 1, "node 1 learned node 2 from node 0");
    // Node 1 and node 0 part; node 2 dies; node 0 declares it, with nobody to tell.
    net.links.clear();
    net.handle(0, Input::PeerDisconnected { peer: id1 });
    net.handle(1, Input::PeerDisconnected { peer: id0 });
    net.handle(0, Input::PeerDisconnected { peer: id2 });
    net.advance(suspect_ms * 3 / 2);
    assert_eq!((net.hosts(0, "echo"), net.hosts(1, "echo")), (0, 1));
    // They meet again: node 1's digest still lists node 2, so node 0's answer carries the
    // notice, and node 1 drops node 2 and passes the notice on.
    net.connect(0, 1);
    assert_eq!(net.hosts(1, "echo"), 0);
    // (Node 1 also declared node 0 departed while they were apart: each side of a partition
    // declares the other, and refutes once they meet.)
    let relayed = net.published_notices(1).iter().any(|bytes| {
        let notice: Departure = Envelope::decode(bytes).unwrap().peek().unwrap();
        notice.node == id2
    });
    assert!(relayed, "node 1 relays the notice it synced");
    net.advance(REFUTE_INTERVAL_MS);
    assert_eq!((net.nodes[0].stats().refutations, net.nodes[1].stats().refutations), (1, 1));
    assert_eq!((net.nodes[0].directory().len(), net.nodes[1].directory().len()), (2, 2));
}

/// A closed mesh whose certificates and revocation lists `authority` signs.
fn revoking_config(authority: &SecretKey) -> MeshConfig {
    let mut config = closed_config(authority);
    config.directory.authorities = vec![authority.public()];
    config
}

fn revocation(authority: &SecretKey, seq: u64, nodes: &[u8], grants: &[u64]) -> Envelope {
    let nodes = nodes.iter().map(|n| key(*n).node_id()).collect();
    Signed::sign(crate::revocation::Revocation::new(seq, T0, nodes, grants.to_vec()), authority)
        .unwrap()
        .into_envelope()
}

#[test]
fn a_revocation_spreads_by_gossip_and_anti_entropy_and_expels_the_revoked_node() {
    let authority = key(50);
    let mut net = Net::new((1..=4).map(|n| (key(n), revoking_config(&authority))).collect());
    for i in 0..4 {
        net.handle(i, Input::SetCert { cert: Some(cert_of(&authority, i as u8 + 1)) });
    }
    net.connect(0, 1);
    net.connect(1, 2);
    let node3 = key(3).node_id();
    assert!(net.nodes[1].directory().get(&node3).is_some(), "node 3 is listed before");

    // Node 1's operator revokes node 3's certificate; node 4 is not connected yet.
    net.handle(0, Input::Revoke { envelope: revocation(&authority, 1, &[3], &[]) });
    for i in 0..2 {
        assert!(net.nodes[i].directory().revocations().node_revoked(&node3).is_some(), "node {i} took it");
        assert!(net.nodes[i].directory().get(&node3).is_none(), "node {i} dropped node 3's advert");
    }
    assert!(net.disconnects.contains(&(1, node3)), "node 2, its peer, expelled it");
    assert!(!net.nodes[1].peers().any(|(p, _, _)| p == node3));
    // Its adverts are refused from now on, whoever relays them.
    net.advance(30_000);
    assert!(net.nodes[0].directory().get(&node3).is_none());
    assert!(net.nodes[1].directory().stats().refused.get("revoked").is_some_and(|n| *n > 0));

    // Node 4 joins later and learns the list in its first sync.
    net.connect(3, 0);
    assert!(net.nodes[3].directory().revocations().node_revoked(&node3).is_some(), "learned by anti-entropy");
    // A revoked node that reconnects is turned away at once.
    let before = net.disconnects.len();
    net.nodes[0].handle(net.now, Input::PeerConnected { peer: node3 });
    net.pump();
    assert!(net.disconnects[before..].contains(&(0, node3)));
}

#[test]
fn an_old_or_untrusted_revocation_changes_nothing_and_is_not_relayed() {
    let authority = key(50);
    let mut net = Net::new((1..=2).map(|n| (key(n), revoking_config(&authority))).collect());
    for i in 0..2 {
        net.handle(i, Input::SetCert { cert: Some(cert_of(&authority, i as u8 + 1)) });
    }
    net.connect(0, 1);
    net.handle(0, Input::Revoke { envelope: revocation(&authority, 2, &[], &[7]) });
    let published = net.published.len();
    // An older list, and one from an authority nobody here trusts.
    net.handle(0, Input::Revoke { envelope: revocation(&authority, 1, &[2], &[]) });
    net.handle(0, Input::Revoke { envelope: revocation(&key(51), 5, &[2], &[]) });
    assert_eq!(net.published.len(), published, "nothing more gossiped");
    assert!(net.nodes[1].directory().revocations().node_revoked(&key(2).node_id()).is_none());
    assert_eq!(net.nodes[1].directory().revocations().grant_revoked(&authority.public(), 7), Some(2));
    assert!(net.nodes[0].peers().any(|(p, _, _)| p == key(2).node_id()), "still connected");
}

#[test]
fn a_resync_asked_for_while_an_exchange_is_in_flight_follows_its_answer() {
    let mut node = MeshNode::new(key(1), config(), T0);
    let peer = key(2).node_id();
    node.handle(T0, Input::PeerConnected { peer });
    let sent = |node: &mut MeshNode| {
        std::iter::from_fn(|| node.poll_output())
            .filter(|o| matches!(o, Output::SendSyncRequest { .. }))
            .count()
    };
    assert_eq!(sent(&mut node), 1, "a connection starts an exchange");
    node.handle(T0, Input::Resync { peer });
    assert_eq!(sent(&mut node), 0, "one exchange at a time");
    node.handle(T0, Input::SyncAnswered { from: peer, response: SyncResponse::new(vec![], false) });
    assert_eq!(sent(&mut node), 1, "the resync follows the answer");
}

/// A closed mesh trusting `authorities` for certificates and revocation lists.
fn trusting(authorities: &[&SecretKey]) -> MeshConfig {
    let keys: Vec<_> = authorities.iter().map(|a| a.public()).collect();
    let mut config = config();
    config.directory.admission = Admission::Closed { authorities: keys.clone() };
    config.directory.authorities = keys;
    config
}

#[test]
fn an_authority_key_rotates_with_overlapping_trust() {
    let (old, new) = (key(60), key(61));
    // Overlap: node 1 trusts both keys; node 2 still has a certificate from the old one,
    // node 3 already has one from the new one. Both are admitted.
    let mut net = Net::new(vec![
        (key(1), trusting(&[&old, &new])),
        (key(2), trusting(&[&old, &new])),
        (key(3), trusting(&[&old, &new])),
    ]);
    net.handle(0, Input::SetCert { cert: Some(cert_of(&new, 1)) });
    net.handle(1, Input::SetCert { cert: Some(cert_of(&old, 2)) });
    net.handle(2, Input::SetCert { cert: Some(cert_of(&new, 3)) });
    net.connect(0, 1);
    net.connect(0, 2);
    assert_eq!(net.nodes[0].peers().filter(|(_, admitted, _)| *admitted).count(), 2);
    assert!(net.nodes[0].directory().get(&key(2).node_id()).is_some());
    // End of the overlap: node 1 restarts trusting the new key alone. Node 3 gets in; node
    // 2, not yet re-certified, is refused, by name.
    let mut net = Net::new(vec![
        (key(1), trusting(&[&new])),
        (key(2), trusting(&[&old, &new])),
        (key(3), trusting(&[&new])),
    ]);
    net.handle(0, Input::SetCert { cert: Some(cert_of(&new, 1)) });
    net.handle(1, Input::SetCert { cert: Some(cert_of(&old, 2)) });
    net.handle(2, Input::SetCert { cert: Some(cert_of(&new, 3)) });
    net.connect(0, 2);
    net.connect(0, 1);
    assert!(net.nodes[0].peers().any(|(p, admitted, _)| p == key(3).node_id() && admitted));
    assert!(net.disconnects.contains(&(0, key(2).node_id())), "the old key's certificate no longer admits");
    assert!(net.nodes[0].directory().get(&key(2).node_id()).is_none());
}

#[test]
fn a_node_key_rotates_without_the_mesh_losing_the_node() {
    let authority = key(62);
    // The node's new identity (key 4) is certified before the swap; the old one (key 2)
    // serves until then. Both are members for the overlap.
    let mut net = Net::new(vec![
        (key(1), trusting(&[&authority])),
        (key(2), trusting(&[&authority])),
        (key(4), trusting(&[&authority])),
    ]);
    for (i, n) in [(0, 1), (1, 2), (2, 4)] {
        net.handle(i, Input::SetCert { cert: Some(cert_of(&authority, n)) });
    }
    net.handle(1, Input::SetHosted { capsules: vec![capsule("wordcount")] });
    net.handle(2, Input::SetHosted { capsules: vec![capsule("wordcount")] });
    net.connect(0, 1);
    net.connect(0, 2);
    assert_eq!(net.hosts(0, "wordcount"), 2);
    // After the swap the authority revokes the old identity: whoever holds its key (a
    // stolen copy included) is out, and the capsule is still served by the new one.
    net.handle(0, Input::Revoke { envelope: revocation(&authority, 1, &[2], &[]) });
    assert!(net.disconnects.contains(&(0, key(2).node_id())));
    assert_eq!(net.hosts(0, "wordcount"), 1);
    assert!(net.nodes[0].directory().get(&key(4).node_id()).is_some());
}

#[test]
fn a_node_that_lacks_a_list_its_peer_names_asks_that_peer_for_it() {
    let authority = key(50);
    let mut net = Net::new((1..=2).map(|n| (key(n), revoking_config(&authority))).collect());
    for i in 0..2 {
        net.handle(i, Input::SetCert { cert: Some(cert_of(&authority, i as u8 + 1)) });
    }
    // Node 1 holds a list; node 2 hears nothing of it (no link yet, no gossip).
    net.handle(0, Input::Revoke { envelope: revocation(&authority, 1, &[], &[9]) });
    // Only node 1's request reaches node 2, naming the list.
    let request = SyncRequest::new(Some(cert_of(&authority, 1)), crate::DirectoryDigest::default())
        .with_revocations(net.nodes[0].directory().revocations().seen());
    // Its one exchange in flight went to a peer that never answers (a lost request); the
    // exchange with node 1 waits behind it.
    net.nodes[1].handle(net.now, Input::PeerConnected { peer: key(9).node_id() });
    net.nodes[1].handle(net.now, Input::PeerConnected { peer: key(1).node_id() });
    while net.nodes[1].poll_output().is_some() {}
    net.nodes[1].handle(net.now, Input::SyncRequested { from: key(1).node_id(), token: 0, request });
    let asked = std::iter::from_fn(|| net.nodes[1].poll_output())
        .any(|o| matches!(o, Output::SendSyncRequest { peer, .. } if peer == key(1).node_id()));
    assert!(asked, "node 2 asks node 1 at once, not after the lost request times out");
}

#[test]
fn a_revoked_bootstrap_peer_is_not_dialled() {
    let authority = key(50);
    let mut node = MeshNode::new(key(1), revoking_config(&authority), T0);
    node.handle(T0, Input::Revoke { envelope: revocation(&authority, 1, &[3], &[]) });
    node.handle(
        T0,
        Input::SetBootstrap { peers: vec![(key(3).node_id(), vec!["/ip4/10.0.0.3/tcp/1".into()])] },
    );
    let dialled = std::iter::from_fn(|| node.poll_output()).any(|o| matches!(o, Output::Dial { .. }));
    assert!(!dialled);
}
