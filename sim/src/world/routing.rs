//! Driving the protocol's task router, and `/murmur/task/1` over the modelled network.
//!
//! This mirrors `node/src/mesh/driver/tasks.rs`: the router's `Deliver` to this node runs
//! the receiving node's grant check, then the owner's acceptance; to a peer it sends a
//! `TaskRequest::Submit`, which the peer checks (`check_incoming`) before accepting. The
//! answer maps onto router inputs with `route::Input::answered`, as in the driver: `Accepted` → accepted; a refusal
//! with a retryable check (`not_hosted`, `not_accepting`, `busy`, `overloaded`) → not
//! delivered (try the next candidate); any other refusal → refused; a dial failure → not
//! delivered; a timeout or a closed connection → lost (the outcome is unknown).
//!
//! Request-response as libp2p provides it: a request to a peer without a connection dials
//! first (one round trip; a dead peer refuses after a round trip, a peer behind a partition
//! after [`DIAL_TIMEOUT_MS`]); a request fails after the scenario's request timeout; a peer
//! that crashes closes its connections, failing every request it had not answered.

use std::collections::BTreeMap;
use std::sync::Arc;

use murmur_protocol::route::{self, Output as RouteOutput};
use murmur_protocol::task::{
    Submit, TASK_FRAME_BYTES_MAX, TaskId, TaskRefusal, TaskRequest, TaskResponse, check_incoming,
};
use murmur_protocol::{NodeId, PublicKey};

use super::net::Channel;
use super::tasks::{TaskEvent, task_word};
use super::{Event, Ix, Plant, Sim, arm_timer};
use crate::check::Attack;

/// Requests one node has in flight at most (`murnode`'s `OUTBOUND_MAX`); more fail at once
/// as not delivered.
pub(super) const OUTBOUND_MAX: usize = 4096;

/// A dial to a peer behind a partition fails after this long (libp2p's dial timeout is of
/// this order; the exact value only shifts when the router moves on).
pub(super) const DIAL_TIMEOUT_MS: u64 = 5_000;

/// Why a request was sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Purpose {
    /// A router's delivery: its outcome goes back to the router.
    Route,
    /// An unauthorized sender's task: nobody routes it.
    Attack(Attack),
}

#[derive(Debug)]
pub(super) struct Request {
    from: Ix,
    from_epoch: u32,
    to: Ix,
    request: Arc<Submit>,
    purpose: Purpose,
    /// On the wire (not still dialling).
    sent: bool,
}

/// Requests in flight, by request id: each is bounded per node by [`OUTBOUND_MAX`].
#[derive(Debug, Default)]
pub(super) struct Outbound {
    requests: BTreeMap<u64, Request>,
    next_req: u64,
}

impl Sim {
    /// Feeds one input to the router of `ix` and carries out its outputs.
    pub(super) fn route(&mut self, ix: Ix, input: route::Input) {
        let now = self.clock(ix);
        let Some(world) = self.tasks.as_deref_mut() else { return };
        let Some(router) = world.nodes[ix as usize].router.as_mut() else { return };
        let Some(mesh) = self.nodes[ix as usize].mesh.as_ref() else { return };
        let (nodes, index, latency) = (&self.nodes, &self.index, &self.scenario.network.latency_ms);
        let me = &nodes[ix as usize];
        // Round-trip times are known for connected peers, as ping measures them.
        let rtt = |peer: &NodeId| {
            let p = *index.get(peer)?;
            let one_way = latency[me.region][nodes[p as usize].region];
            me.peers.contains(&p).then(|| u32::try_from(2 * one_way).unwrap_or(u32::MAX))
        };
        router.handle(now, input, mesh.directory(), &rtt);
        let outputs: Vec<RouteOutput> = std::iter::from_fn(|| router.poll_output()).collect();
        let deadline = router.poll_timeout();
        if let Some(at) = arm_timer(&mut world.nodes[ix as usize].timer_at, deadline, now, self.now) {
            let epoch = self.nodes[ix as usize].epoch;
            self.schedule(at, Event::Task(TaskEvent::RouterTimer { node: ix, epoch }));
        }
        for output in outputs {
            self.carry_out_route(ix, output);
        }
    }

    fn carry_out_route(&mut self, ix: Ix, output: RouteOutput) {
        let index = &self.index;
        let Some(world) = self.tasks.as_deref_mut() else { return };
        let stats = &mut world.stats;
        match output {
            RouteOutput::Deliver { provider, request } => {
                if provider == self.nodes[ix as usize].id {
                    self.deliver_local(ix, request);
                } else {
                    self.deliver_remote(ix, provider, Arc::new(request), Purpose::Route);
                }
            }
            RouteOutput::Routed { task, owner } => {
                stats.routed += 1;
                let owner = index.get(&owner).copied().unwrap_or(Ix::MAX);
                self.trace.record(42, self.now, u64::from(ix), u64::from(owner));
                self.resolved(ix, &task, false);
            }
            RouteOutput::Rejected { task, check, .. } => {
                stats.rejected += 1;
                *stats.rejected_by_check.entry(check).or_default() += 1;
                self.trace.record(43, self.now, u64::from(ix), task_word(&task));
                self.resolved(ix, &task, false);
            }
            RouteOutput::Failed { task, .. } => {
                stats.failed += 1;
                self.trace.record(44, self.now, u64::from(ix), task_word(&task));
                self.resolved(ix, &task, true);
            }
        }
    }

    /// The receiving node's grant check (skipped only by the planted bug).
    fn incoming_check(&mut self, owner: Ix, from: Ix, request: &Submit) -> Result<(), TaskRefusal> {
        if self.options.plant == Some(Plant::SkipIncomingCheck) {
            return Ok(());
        }
        let now = self.clock(owner);
        let (Some(world), Some(mesh)) = (self.tasks.as_deref(), self.nodes[owner as usize].mesh.as_ref())
        else {
            return Ok(());
        };
        let authorities: &[PublicKey] = &world.authorities;
        let (from_id, owner_id) = (self.nodes[from as usize].id, self.nodes[owner as usize].id);
        check_incoming(request, &from_id, &owner_id, authorities, mesh.directory(), now)
    }

    /// Records an owner's refusal; an unauthorized task must be refused with its check.
    fn refused_here(&mut self, owner: Ix, task: &TaskId, check: &str) {
        let Some(world) = self.tasks.as_deref_mut() else { return };
        *world.stats.refusals.entry(check.to_owned()).or_default() += 1;
        let tag = if world.oracle.is_attack(task) { 1 } else { 0 };
        self.trace.record(45, self.now, u64::from(owner), tag);
        let result = world.oracle.refused(owner, task, check);
        if let Err(what) = result {
            self.violation(what);
        }
    }

    /// A delivery to this node: checks, then acceptance, as the driver's local path.
    fn deliver_local(&mut self, ix: Ix, request: Submit) {
        let (task, provider) = (request.task, self.nodes[ix as usize].id);
        if let Err(refusal) = self.incoming_check(ix, ix, &request) {
            let check = refusal.check().to_owned();
            self.refused_here(ix, &task, &check);
            self.route(ix, route::Input::Refused { task, provider, check, reason: refusal.to_string() });
            return;
        }
        let outcome = self.accept(ix, ix, &request);
        self.route(ix, route::Input::answered(task, provider, outcome));
    }

    /// Sends a task request from `from` to `provider`, dialling first if not connected.
    pub(super) fn deliver_remote(
        &mut self,
        from: Ix,
        provider: NodeId,
        request: Arc<Submit>,
        purpose: Purpose,
    ) {
        let task = request.task;
        let to = self.index.get(&provider).copied();
        let Some(world) = self.tasks.as_deref_mut() else { return };
        let busy = world.nodes[from as usize].outbound >= OUTBOUND_MAX;
        let (Some(to), false) = (to, busy) else {
            if purpose == Purpose::Route {
                let reason = if busy { "too many task requests in flight" } else { "unknown peer" };
                self.route(from, route::Input::NotDelivered { task, provider, reason: reason.into() });
            }
            return;
        };
        let outbound = &mut world.routing;
        outbound.next_req += 1;
        let req = outbound.next_req;
        let from_epoch = self.nodes[from as usize].epoch;
        outbound.requests.insert(req, Request { from, from_epoch, to, request, purpose, sent: false });
        world.nodes[from as usize].outbound += 1;
        let timeout = self.scenario.topology.request_timeout_ms;
        self.schedule(self.now + timeout, Event::Task(TaskEvent::Timeout { req }));
        let rtt = 2 * self.base_latency(from, to);
        if self.nodes[from as usize].peers.contains(&to) {
            self.send_request(req);
        } else if self.reachable(from, to) {
            self.schedule(self.now + rtt, Event::Task(TaskEvent::Dial { req }));
        } else {
            let after = if self.nodes[to as usize].alive() { DIAL_TIMEOUT_MS } else { rtt };
            self.schedule(self.now + after, Event::Task(TaskEvent::Failure { req, delivered: false }));
        }
    }

    fn reachable(&self, a: Ix, b: Ix) -> bool {
        self.nodes[b as usize].alive() && !self.partitioned(a, b) && !self.partitioned(b, a)
    }

    /// A dial finished: send, or fail as not delivered.
    pub(super) fn dialled(&mut self, req: u64) {
        let Some(world) = self.tasks.as_deref() else { return };
        let Some(r) = world.routing.requests.get(&req) else { return };
        if self.reachable(r.from, r.to) {
            self.send_request(req);
        } else {
            self.task_failed(req, false, "dial failed");
        }
    }

    fn send_request(&mut self, req: u64) {
        let Some(world) = self.tasks.as_deref_mut() else { return };
        let Some(r) = world.routing.requests.get_mut(&req) else { return };
        r.sent = true;
        let (from, to) = (r.from, r.to);
        let bytes = TaskRequest::Submit((*r.request).clone()).encode();
        if bytes.len() > TASK_FRAME_BYTES_MAX {
            // The codec refuses to write it: nothing left this node.
            self.task_failed(req, false, "request too large");
            return;
        }
        let epoch = self.nodes[to as usize].epoch;
        let size = bytes.len();
        let event = TaskEvent::Request { to, from, req, bytes: Arc::from(bytes), epoch };
        self.send_via(from, to, size, Event::Task(event), Channel::Task);
    }

    /// A request arrived at `owner`: decode, check, accept, answer.
    pub(super) fn task_requested(&mut self, owner: Ix, from: Ix, req: u64, bytes: &[u8]) {
        let Ok(TaskRequest::Submit(submit)) = TaskRequest::decode(bytes) else {
            // An undecodable request fails the stream; the sender times out.
            if let Some(world) = self.tasks.as_deref_mut() {
                world.stats.undecodable += 1;
            }
            return;
        };
        let task = submit.task;
        if let Some(world) = self.tasks.as_deref_mut() {
            world.oracle.delivered(&task);
        }
        let response = match self.incoming_check(owner, from, &submit) {
            Err(refusal) => {
                let check = refusal.check().to_owned();
                self.refused_here(owner, &task, &check);
                TaskResponse::Refused { check, reason: refusal.to_string() }
            }
            Ok(()) => match self.accept(owner, from, &submit) {
                Ok(snapshot) => TaskResponse::Accepted(snapshot),
                Err((check, reason)) => TaskResponse::Refused { check, reason },
            },
        };
        let size = response.encode().len();
        let epoch = self.nodes[from as usize].epoch;
        let event = TaskEvent::Response { to: from, req, response: Arc::new(response), epoch };
        self.send_via(owner, from, size, Event::Task(event), Channel::Task);
    }

    /// The answer to request `req` reached its sender `at`.
    pub(super) fn task_answered(&mut self, at: Ix, req: u64, response: &TaskResponse) {
        let Some(r) = self.take_request(req) else { return };
        if r.from != at {
            return;
        }
        let (task, provider) = (r.request.task, self.nodes[r.to as usize].id);
        if r.purpose == Purpose::Route {
            let input = route::Input::answered(task, provider, route::submit_outcome(response.clone()));
            self.route(at, input);
        }
    }

    /// Request `req` failed: never sent (`delivered: false`), or its outcome is unknown.
    pub(super) fn task_failed(&mut self, req: u64, delivered: bool, reason: &str) {
        let Some(r) = self.take_request(req) else { return };
        let (task, provider) = (r.request.task, self.nodes[r.to as usize].id);
        let retry_lost = self.options.plant == Some(Plant::RetryLost);
        let Some(world) = self.tasks.as_deref_mut() else { return };
        if delivered {
            world.stats.lost += 1;
        } else {
            world.stats.not_delivered += 1;
        }
        if r.purpose != Purpose::Route {
            return;
        }
        let reason = reason.to_owned();
        let input = if delivered && !retry_lost {
            route::Input::Lost { task, provider, reason }
        } else {
            route::Input::NotDelivered { task, provider, reason }
        };
        self.route(r.from, input);
    }

    /// Removes request `req` if its sender is still the process that sent it.
    fn take_request(&mut self, req: u64) -> Option<Request> {
        let world = self.tasks.as_deref_mut()?;
        let r = world.routing.requests.remove(&req)?;
        let sender = &self.nodes[r.from as usize];
        if sender.epoch != r.from_epoch || !sender.alive() {
            return None;
        }
        let node = &mut world.nodes[r.from as usize];
        node.outbound = node.outbound.saturating_sub(1);
        Some(r)
    }

    /// Node `ix` crashed: its own requests die with it; requests it was answering fail on
    /// their senders when the connection closes (one one-way latency later).
    pub(super) fn connections_closed(&mut self, ix: Ix) {
        let Some(world) = self.tasks.as_deref_mut() else { return };
        let requests = &mut world.routing.requests;
        requests.retain(|_, r| r.from != ix);
        let closed: Vec<(u64, Ix)> =
            requests.iter().filter(|(_, r)| r.to == ix && r.sent).map(|(req, r)| (*req, r.from)).collect();
        for (req, from) in closed {
            let at = self.now + self.base_latency(ix, from);
            self.schedule(at, Event::Task(TaskEvent::Failure { req, delivered: true }));
        }
    }
}
