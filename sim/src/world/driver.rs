//! The driver model of a node: how the world feeds a node's [`MeshNode`] and carries out
//! what it asks for, as `murnode`'s network driver does over libp2p.
//!
//! Every input goes through [`Sim::handle`], which drains the machine's outputs at once and
//! arms its one timer; this module turns those outputs into modelled traffic (publishes,
//! anti-entropy requests and answers over request-response, dials, disconnects) and its
//! events into what the checkers see. It decides nothing the mesh machine decides. The
//! timer arithmetic is shared with the other protocol machines the world drives (task
//! exchange, pulls, resolutions), so every machine's deadline is read on its node's clock
//! the same way.

use murmur_protocol::directory::{Refusal, Source};
use murmur_protocol::limits::{SYNC_REQUEST_BYTES_MAX, SYNC_RESPONSE_BYTES_MAX};
use murmur_protocol::mesh::{Event as MeshEvent, Input, Output, Verdict};
use murmur_protocol::sync::{SyncRequest, SyncResponse};
use murmur_protocol::{Millis, NodeId};

use super::{Event, Ix, Node, Plant, Sim};
use crate::check::Via;
use crate::report::{SLOW_DELIVERY_MS, YOUNG_MS};

/// What a delivery was, so the node's verdict can be acted on (gossip forwarding).
#[derive(Clone, Copy, Debug)]
pub(super) struct Delivery {
    pub(super) msg: u32,
    pub(super) from: Ix,
}

impl Sim {
    /// Feeds one input to node `ix` and carries out its outputs.
    pub(super) fn handle(&mut self, ix: Ix, input: Input, delivery: Option<Delivery>) {
        // The planted crash stands in for a protocol machine that panics: the run must end
        // with the crash verdict, not take the process down.
        assert!(self.options.plant != Some(Plant::Panic), "planted panic: node {ix}'s mesh machine panicked");
        let now = self.clock(ix);
        // How a revocation list this input brings came (`None`: handed to it locally).
        let via = match &input {
            Input::GossipDecoded { .. } | Input::GossipReceived { .. } => Some(Via::Gossip),
            Input::SyncAnswered { .. } => Some(Via::Sync),
            _ => None,
        };
        let Some(mesh) = self.nodes[ix as usize].mesh.as_mut() else { return };
        mesh.handle(now, input);
        let mut outputs = Vec::new();
        while let Some(output) = mesh.poll_output() {
            outputs.push(output);
        }
        let timeout = mesh.poll_timeout();
        let (dir_len, outputs_dropped) =
            (mesh.directory().len(), mesh.stats().outputs_dropped + mesh.directory().stats().outputs_dropped);
        for output in outputs {
            self.carry_out(ix, output, delivery, via);
        }
        // The bound this node was configured with (`protocol.directory_nodes_max`), not the
        // protocol's ceiling: the `sybil` scenario's directories are full at 256.
        let nodes_max = self.mesh_config.directory.nodes_max;
        if dir_len > nodes_max {
            self.violation(format!("node {ix} holds {dir_len} adverts, above its bound {nodes_max}"));
        }
        if outputs_dropped > 0 {
            self.violation(format!(
                "node {ix} dropped {outputs_dropped} outputs: its output queue bound was hit"
            ));
        }
        if let Some(at) = arm_timer(&mut self.nodes[ix as usize].timer_at, timeout, now, self.now) {
            let epoch = self.nodes[ix as usize].epoch;
            self.schedule(at, Event::Timer { node: ix, epoch });
        }
    }

    /// The mesh's timer fired: a tick, unless the node restarted or re-armed it since.
    pub(super) fn mesh_timer(&mut self, ix: Ix, epoch: u32) {
        let n = &mut self.nodes[ix as usize];
        if n.epoch == epoch && n.alive() && n.timer_at == Some(self.now) {
            n.timer_at = None;
            self.handle(ix, Input::Tick, None);
        }
    }

    /// A peer's anti-entropy request reached node `to`; its answer comes back by token.
    pub(super) fn sync_requested(&mut self, to: Ix, from: Ix, req: u64, bytes: &[u8], epoch: u32) {
        if !self.is_current(to, epoch) {
            return;
        }
        // Decoded as `murnode` decodes it: strictly, within its size limit.
        let request = match SyncRequest::decode(bytes) {
            Ok(request) => request,
            Err(err) => {
                // The stream fails; the requester hears of it as a failed request.
                self.violation(format!("node {to} could not decode node {from}'s sync request: {err}"));
                let epoch = self.nodes[from as usize].epoch;
                self.schedule(self.now, Event::SyncTimeout { node: from, req, epoch });
                return;
            }
        };
        let token = self.next_token();
        self.nodes[to as usize].answering.insert(token, (from, req));
        let from_id = self.nodes[from as usize].id;
        self.handle(to, Input::SyncRequested { from: from_id, token, request }, None);
    }

    /// The answer to node `to`'s request `req` arrived (ignored once it timed out).
    pub(super) fn sync_answered(&mut self, to: Ix, from: Ix, req: u64, bytes: &[u8], epoch: u32) {
        if self.is_current(to, epoch) && self.nodes[to as usize].syncing.remove(&req).is_some() {
            let from_id = self.nodes[from as usize].id;
            match SyncResponse::decode(bytes) {
                Ok(response) => self.handle(to, Input::SyncAnswered { from: from_id, response }, None),
                Err(err) => {
                    self.violation(format!("node {to} could not decode node {from}'s sync response: {err}"));
                    self.handle(to, Input::SyncFailed { peer: from_id }, None);
                }
            }
        }
    }

    /// Node `ix`'s request `req` failed (refused, oversized or unanswered), unless it was
    /// answered first.
    pub(super) fn sync_timed_out(&mut self, ix: Ix, req: u64, epoch: u32) {
        if self.is_current(ix, epoch)
            && let Some(peer) = self.nodes[ix as usize].syncing.remove(&req)
        {
            let peer_id = self.nodes[peer as usize].id;
            self.handle(ix, Input::SyncFailed { peer: peer_id }, None);
        }
    }

    /// Carries out one output of node `ix`'s mesh; `delivery` is the gossip message whose
    /// handling produced it, if one did (an accepted message is relayed), and `via` how a
    /// revocation list the input brought came.
    pub(super) fn carry_out(&mut self, ix: Ix, output: Output, delivery: Option<Delivery>, via: Option<Via>) {
        match output {
            Output::Publish { bytes } => self.publish(ix, &bytes),
            Output::PublishRevocation { bytes } => self.publish_revocation(ix, &bytes),
            Output::Report { verdict, .. } => {
                self.trace.record(20, u64::from(ix), verdict as u64, 0);
                if let (Verdict::Accept, Some(d)) = (verdict, delivery) {
                    self.forward(ix, d);
                }
                if verdict == Verdict::Reject {
                    self.metrics.gossip_rejected += 1;
                }
            }
            Output::SendSyncRequest { peer, request } => self.send_sync_request(ix, peer, request),
            Output::SendSyncResponse { token, response } => {
                if let Some((to, req)) = self.nodes[ix as usize].answering.remove(&token) {
                    let bytes = response.encode();
                    if bytes.len() > SYNC_RESPONSE_BYTES_MAX {
                        // Dropped by the requester's size limit; it times out.
                        self.violation(format!(
                            "node {ix} built a sync response of {} bytes, above the {SYNC_RESPONSE_BYTES_MAX}-byte limit",
                            bytes.len()
                        ));
                        return;
                    }
                    let epoch = self.nodes[to as usize].epoch;
                    let size = bytes.len();
                    let event = Event::SyncResponse { to, from: ix, req, bytes: bytes.into(), epoch };
                    self.send(ix, to, size, event);
                }
            }
            Output::Dial { peer, .. } => {
                if let Some(&peer) = self.index.get(&peer) {
                    self.dial(ix, peer);
                }
            }
            // The modelled network has no block list: a held peer that reconnects is closed
            // again by the mesh itself.
            Output::Disconnect { peer, .. } => self.turn_away(ix, peer, false),
            Output::Block { peer, .. } => self.turn_away(ix, peer, true),
            Output::Unblock { .. } => {}
            Output::Event(event) => self.observe(ix, event, via),
        }
    }

    /// Node `ix` closes its connection to `peer` (and holds it off, when `held`).
    fn turn_away(&mut self, ix: Ix, peer: NodeId, held: bool) {
        let Some(&peer) = self.index.get(&peer) else { return };
        self.trace.record(24, u64::from(ix), u64::from(peer), u64::from(held));
        if let (false, Some(fault)) = (self.uncertified(ix).is_some(), self.uncertified(peer)) {
            // An honest node turned an uncertified one away: the fault acted.
            self.effects[fault].effects += 1;
        }
        if held && self.nodes[peer as usize].revoked.is_some() {
            // A revoked peer is held off whatever certificate it shows.
            self.revocation_enforced(ix, peer, true);
        } else if held && self.nodes[peer as usize].cert.is_some() {
            // Only a missing or invalid certificate, or junk, earns a hold.
            self.violation(format!(
                "node {ix} held off node {peer}, which has a valid certificate for this closed mesh"
            ));
        }
        self.disconnect(ix, peer);
    }

    /// Records what node `ix`'s mesh reports having done, and checks each acceptance and
    /// departure against the ground truth the world holds (`via`: how a revocation list
    /// taken came).
    pub(super) fn observe(&mut self, ix: Ix, event: MeshEvent, via: Option<Via>) {
        match event {
            MeshEvent::AdvertAccepted { node, seq, source } => {
                let Some(&subject) = self.index.get(&node) else {
                    if let Some(&minter) = self.sybils.get(&node) {
                        // A real key of a node that does not exist: accepted on its merits.
                        self.trace.record(27, u64::from(ix), u64::from(minter), seq);
                        self.metrics.sybil_accepted += 1;
                        return;
                    }
                    self.violation(format!(
                        "node {ix} accepted an advert from {node}, a node that does not exist (forged)"
                    ));
                    return;
                };
                self.trace.record(21, u64::from(ix), u64::from(subject), seq);
                if matches!(source, Source::Local) {
                    return;
                }
                if self.uncertified(ix).is_none() && self.uncertified(subject).is_some() {
                    self.violation(format!(
                        "node {ix} admitted the advert of node {subject}, which has no certificate for this closed mesh"
                    ));
                    return;
                }
                self.revocation_advert_accepted(ix, subject);
                let Some(envelope) = self.nodes[ix as usize]
                    .mesh
                    .as_ref()
                    .and_then(|m| m.directory().get(&node))
                    .map(|r| r.envelope().clone())
                else {
                    return;
                };
                let observer_now = self.clock(ix);
                let live = self.live_honest_count();
                let converged =
                    match self.oracle.accepted(ix, (subject, seq), &envelope, observer_now, self.now, live) {
                        Ok(converged) => converged,
                        Err(what) => return self.violation(what),
                    };
                if let Some((published_at, first)) = self.oracle.published_during_run(subject, seq) {
                    let up_since = self.nodes[ix as usize].up_since;
                    let started = self.nodes[subject as usize].up_since;
                    if converged && first && started > 0 && self.known_started.insert(subject) {
                        // The mesh now knows a node that started during the run.
                        self.known_after_start.push(self.now.saturating_sub(started));
                    }
                    if converged && up_since >= published_at {
                        // The last node to learn of it came up after it was published (or
                        // in the same millisecond, before any connection could carry it).
                        self.oracle.completed_late(subject, seq);
                    }
                    if up_since < published_at {
                        // Propagation only: an observer that came up later caught up by sync.
                        let regions = (self.nodes[subject as usize].region, self.nodes[ix as usize].region);
                        let delay = u32::try_from(self.now.saturating_sub(published_at)).unwrap_or(u32::MAX);
                        self.delays.entry((first, regions.0, regions.1)).or_default().push(delay);
                        if u64::from(delay) > SLOW_DELIVERY_MS {
                            let by_sync = matches!(source, Source::Sync { .. });
                            *if by_sync {
                                &mut self.metrics.slow_deliveries_by_sync
                            } else {
                                &mut self.metrics.slow_deliveries_by_gossip
                            } += 1;
                            if up_since > 0 && up_since + YOUNG_MS > published_at {
                                self.metrics.slow_deliveries_to_joiners += 1;
                            }
                        }
                    }
                }
            }
            MeshEvent::AdvertRefused { node, reason, .. } => {
                self.trace.record(22, u64::from(ix), refusal_tag(&reason), 0);
                *self.metrics.refusals.entry(reason.reason().to_owned()).or_default() += 1;
                if let (Refusal::Revoked { .. }, Some(&subject)) = (&reason, self.index.get(&node)) {
                    self.revocation_enforced(ix, subject, false);
                }
            }
            MeshEvent::AdvertEvicted { node, by } => {
                let (subject, by) = (self.index.get(&node), self.index.get(&by));
                let tag = |ix: Option<&Ix>| ix.map_or(u64::MAX, |&ix| u64::from(ix));
                self.trace.record(26, u64::from(ix), tag(subject), tag(by));
                self.metrics.evicted += 1;
                if subject.is_some() {
                    self.metrics.evicted_real += 1;
                }
            }
            MeshEvent::AdvertExpired { node } => {
                let subject = self.index.get(&node).copied().unwrap_or(Ix::MAX);
                self.trace.record(23, u64::from(ix), u64::from(subject), 0);
            }
            MeshEvent::Departed { node, seq, witness, source } => {
                let subject = self.index.get(&node).copied().unwrap_or(Ix::MAX);
                self.trace.record(25, u64::from(ix), u64::from(subject), seq);
                self.metrics.departures_applied += 1;
                if subject != Ix::MAX && !self.oracle.is_genuine(subject, seq) {
                    // A notice drops only the advert it names: one never published cannot
                    // be held, so applying it means the directory buried a future advert.
                    self.violation(format!(
                        "node {ix} applied a departure notice naming node {subject}'s seq {seq}, which node {subject} never published"
                    ));
                }
                if matches!(source, Source::Local) && witness == self.nodes[ix as usize].id {
                    self.metrics.departures_declared += 1;
                    // False: the subject is up in the life that published the advert the
                    // witness saw (not a restart whose new advert had not reached the witness
                    // yet). Its latest advert may be newer: one the witness, cut off by a
                    // partition, never received.
                    let same_life =
                        |n: &Node| n.published.iter().any(|(at, s)| *s == seq && *at >= n.up_since);
                    // A revoked node is shut out for good: a notice about it is no mistake.
                    let mistaken = |n: &Node| n.alive() && n.revoked.is_none() && same_life(n);
                    if self.nodes.get(subject as usize).is_some_and(mistaken) {
                        self.metrics.departures_false += 1;
                    }
                }
            }
            MeshEvent::Revoked { authority, seq, .. } => self.revocation_taken(ix, (authority, seq), via),
            MeshEvent::RevocationRefused { reason, .. } => {
                // Only old copies (gossip and anti-entropy overlap): the world hands out
                // nothing a node should refuse.
                if reason.reason() != "not_newer" {
                    self.violation(format!("node {ix} refused a genuine revocation list: {reason}"));
                }
            }
            MeshEvent::Published { .. } => {}
        }
    }

    /// Sends node `ix`'s anti-entropy request to `peer` over request-response, which fails it
    /// at once when there is no connection or the request is over its size limit.
    fn send_sync_request(&mut self, ix: Ix, peer: NodeId, request: SyncRequest) {
        let req = self.next_token();
        let Some(&to) = self.index.get(&peer) else { return };
        if !self.nodes[ix as usize].peers.contains(&to) {
            // Not connected: libp2p fails the request at once.
            let epoch = self.nodes[ix as usize].epoch;
            self.nodes[ix as usize].syncing.insert(req, to);
            self.schedule(self.now, Event::SyncTimeout { node: ix, req, epoch });
            return;
        }
        // What goes on the wire: the shipping codec's bytes, whose length is what the
        // bandwidth model charges and the size limit checks.
        let bytes = request.encode();
        let size = bytes.len();
        self.nodes[ix as usize].syncing.insert(req, to);
        if size > SYNC_REQUEST_BYTES_MAX {
            // request-response refuses an oversized request: the exchange fails.
            self.metrics.oversized_dropped += 1;
            let epoch = self.nodes[ix as usize].epoch;
            self.schedule(self.now, Event::SyncTimeout { node: ix, req, epoch });
            return;
        }
        let (epoch_to, epoch_me) = (self.nodes[to as usize].epoch, self.nodes[ix as usize].epoch);
        self.send(
            ix,
            to,
            size,
            Event::SyncRequest { to, from: ix, req, bytes: bytes.into(), epoch: epoch_to },
        );
        let timeout = self.scenario.topology.request_timeout_ms;
        self.schedule(self.now + timeout, Event::SyncTimeout { node: ix, req, epoch: epoch_me });
    }
}

/// Arms a protocol state machine's timer: its `deadline`, read on a node clock that shows
/// `node_now`, as virtual time. Returns when to schedule the timer event if that comes
/// before the one `armed` holds (which it then holds), `None` if no new event is needed.
pub(super) fn arm_timer(
    armed: &mut Option<u64>,
    deadline: Option<Millis>,
    node_now: Millis,
    sim_now: u64,
) -> Option<u64> {
    let at = deadline?.0.saturating_sub(node_now.0) + sim_now;
    armed.is_none_or(|t| at < t).then(|| {
        *armed = Some(at);
        at
    })
}

fn refusal_tag(reason: &Refusal) -> u64 {
    Refusal::REASONS.iter().position(|r| *r == reason.reason()).unwrap_or(99) as u64
}
