//! Each node's task exchange — the protocol's [`TaskExchange`], the very code `murnode`'s
//! network driver runs — over a modelled `/murmur/task/1`.
//!
//! The exchange decides (where a task goes, the receiving checks, what an answer or a
//! failure means); this module is the transport: it carries `Send` outputs as requests
//! over the modelled network, hands `Admit` and `Forward` outputs to the node's owner, and
//! reports back each answer and each failure as libp2p would.
//!
//! Request-response as libp2p provides it: a request to a peer without a connection dials
//! first (one round trip; a dead peer refuses after a round trip, a peer behind a partition
//! after [`DIAL_TIMEOUT_MS`]) and fails as a dial failure if the dial does; a request fails
//! with a timeout after the scenario's request timeout; a peer that crashes closes its
//! connections, failing every request it had not answered as a closed connection.

use std::collections::BTreeMap;
use std::sync::Arc;

use murmur_protocol::exchange::{
    ExchangeConfig, Input, Output, Placement, RequestFailure, RequestId, TaskExchange,
};
use murmur_protocol::task::{Submit, TASK_FRAME_BYTES_MAX, TaskId, TaskRequest, TaskResponse};
use murmur_protocol::{NodeId, route};

use super::driver::arm_timer;
use super::net::Channel;
use super::tasks::{TaskEvent, task_word};
use super::{Event, Ix, Sim};
use crate::check::Attack;

/// A dial to a peer behind a partition fails after this long (libp2p's dial timeout is of
/// this order; the exact value only shifts when the router moves on).
pub(super) const DIAL_TIMEOUT_MS: u64 = 5_000;

/// Why a request was sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Purpose {
    /// Sent by the node's exchange, which hears its answer or failure as `id`.
    Exchange(RequestId),
    /// An unauthorized sender's task: nobody listens for the answer.
    Attack(Attack),
}

#[derive(Debug)]
pub(super) struct Request {
    from: Ix,
    from_epoch: u32,
    to: Ix,
    request: Arc<TaskRequest>,
    purpose: Purpose,
    /// On the wire (not still dialling).
    sent: bool,
}

/// Requests on the modelled network, by request id.
#[derive(Debug, Default)]
pub(super) struct Wire {
    requests: BTreeMap<u64, Request>,
    next_req: u64,
}

impl Sim {
    /// A node's exchange, as it starts (its memory of routes is empty).
    pub(super) fn new_exchange(&self, ix: Ix) -> TaskExchange {
        let id = self.nodes[ix as usize].id;
        let (authorities, accept_timeout_ms) = self
            .tasks
            .as_deref()
            .map_or((Vec::new(), 15_000), |w| (w.authorities.clone(), w.config.accept_timeout_ms));
        let config = ExchangeConfig {
            router: route::RouterConfig { accept_timeout_ms },
            plants: self.options.plants(),
            ..ExchangeConfig::default()
        };
        TaskExchange::new(id, authorities, config)
    }

    /// Feeds one input to the exchange of `ix` and carries out its outputs.
    pub(super) fn exchange(&mut self, ix: Ix, input: Input) {
        let now = self.clock(ix);
        let Some(model) = self.tasks.as_deref_mut() else { return };
        let Some(exchange) = model.nodes[ix as usize].exchange.as_mut() else { return };
        let Some(mesh) = self.nodes[ix as usize].mesh.as_ref() else { return };
        let (nodes, index, latency) = (&self.nodes, &self.index, &self.scenario.network.latency_ms);
        let me = &nodes[ix as usize];
        // Round-trip times are known for connected peers, as ping measures them.
        let rtt = |peer: &NodeId| {
            let p = *index.get(peer)?;
            let one_way = latency[me.region][nodes[p as usize].region];
            me.peers.contains(&p).then(|| u32::try_from(2 * one_way).unwrap_or(u32::MAX))
        };
        exchange.handle(now, input, mesh.directory(), &rtt);
        let outputs: Vec<Output> = std::iter::from_fn(|| exchange.poll_output()).collect();
        let deadline = exchange.poll_timeout();
        if let Some(at) = arm_timer(&mut model.nodes[ix as usize].timer_at, deadline, now, self.now) {
            let epoch = self.nodes[ix as usize].epoch;
            self.schedule(at, Event::Task(TaskEvent::RouterTimer { node: ix, epoch }));
        }
        for output in outputs {
            self.carry_out_exchange(ix, output);
        }
    }

    fn carry_out_exchange(&mut self, ix: Ix, output: Output) {
        match output {
            Output::Send { id, peer, request } => {
                self.send_request(ix, peer, Arc::new(request), Purpose::Exchange(id))
            }
            Output::Admit { submit } => {
                let task = submit.task;
                let outcome = self.accept(ix, ix, &submit);
                self.exchange(ix, Input::Admitted { task, outcome });
            }
            Output::Forward { token, from, request } => {
                let from_ix = self.index.get(&from).copied().unwrap_or(Ix::MAX);
                let response = match &request {
                    TaskRequest::Submit(submit) => match self.accept(ix, from_ix, submit) {
                        Ok(snapshot) => TaskResponse::Accepted(snapshot),
                        Err((check, reason)) => TaskResponse::Refused { check: check.to_string(), reason },
                    },
                    // The workload asks owners nothing else.
                    _ => TaskResponse::NotFound,
                };
                self.exchange(ix, Input::OwnerAnswered { token, response });
            }
            Output::Respond { token, response } => self.respond(ix, token, response),
            Output::Placed { task, placement } => self.placed(ix, task, &placement),
            Output::AskAnswered { .. } => {}
            Output::RefusedHere { task, check, .. } => self.refused_here(ix, &task, check.as_str()),
        }
    }

    fn placed(&mut self, ix: Ix, task: TaskId, placement: &Placement) {
        let index = &self.index;
        let Some(model) = self.tasks.as_deref_mut() else { return };
        let stats = &mut model.stats;
        match placement {
            Placement::Routed { owner, .. } => {
                stats.routed += 1;
                let owner = index.get(owner).copied().unwrap_or(Ix::MAX);
                self.trace.record(42, self.now, u64::from(ix), u64::from(owner));
                self.resolved(ix, &task, false);
            }
            Placement::Rejected { check, .. } => {
                stats.rejected += 1;
                *stats.rejected_by_check.entry(check.to_string()).or_default() += 1;
                self.trace.record(43, self.now, u64::from(ix), task_word(&task));
                self.resolved(ix, &task, false);
            }
            Placement::Failed { .. } => {
                stats.failed += 1;
                self.trace.record(44, self.now, u64::from(ix), task_word(&task));
                self.resolved(ix, &task, true);
            }
        }
    }

    /// Records a receiving check's refusal; an unauthorized task must be refused with its
    /// check, and a task refused as revoked must carry a revoked grant (the revocation
    /// check comes first, whatever else is wrong with the task).
    fn refused_here(&mut self, owner: Ix, task: &TaskId, check: &str) {
        let Some(model) = self.tasks.as_deref_mut() else { return };
        *model.stats.refusals.entry(check.to_owned()).or_default() += 1;
        let tag = u64::from(model.oracle.is_attack(task));
        self.trace.record(45, self.now, u64::from(owner), tag);
        if check == "revoked" {
            if self.revocation_task_refused(owner, task)
                && let Some(model) = self.tasks.as_deref_mut()
            {
                model.oracle.refused_as_revoked(task);
            }
            return;
        }
        let Some(model) = self.tasks.as_deref_mut() else { return };
        let result = model.oracle.refused(owner, task, check);
        if let Err(what) = result {
            self.violation(what);
        }
    }

    /// Sends a request from `from` to `provider`, dialling first if not connected.
    pub(super) fn send_request(
        &mut self,
        from: Ix,
        provider: NodeId,
        request: Arc<TaskRequest>,
        purpose: Purpose,
    ) {
        let Some(to) = self.index.get(&provider).copied() else {
            if let Purpose::Exchange(id) = purpose {
                let reason = "unknown peer".to_owned();
                self.exchange(from, Input::Failed { id, failure: RequestFailure::DialFailure, reason });
            }
            return;
        };
        let Some(model) = self.tasks.as_deref_mut() else { return };
        let wire = &mut model.wire;
        wire.next_req += 1;
        let req = wire.next_req;
        let from_epoch = self.nodes[from as usize].epoch;
        wire.requests.insert(req, Request { from, from_epoch, to, request, purpose, sent: false });
        let timeout = self.scenario.topology.request_timeout_ms;
        self.schedule(self.now + timeout, Event::Task(TaskEvent::Timeout { req }));
        let rtt = 2 * self.base_latency(from, to);
        if self.nodes[from as usize].peers.contains(&to) {
            self.transmit(req);
        } else if self.reachable(from, to) {
            self.schedule(self.now + rtt, Event::Task(TaskEvent::Dial { req }));
        } else {
            let after = if self.nodes[to as usize].alive() { DIAL_TIMEOUT_MS } else { rtt };
            let failure = TaskEvent::Failure { req, failure: RequestFailure::DialFailure };
            self.schedule(self.now + after, Event::Task(failure));
        }
    }

    /// An unauthorized sender puts a task on the wire itself.
    pub(super) fn send_attack(&mut self, from: Ix, provider: NodeId, request: Submit, attack: Attack) {
        self.send_request(from, provider, Arc::new(TaskRequest::Submit(request)), Purpose::Attack(attack));
    }

    fn reachable(&self, a: Ix, b: Ix) -> bool {
        self.nodes[b as usize].alive() && !self.partitioned(a, b) && !self.partitioned(b, a)
    }

    /// A dial finished: send, or fail as not delivered.
    pub(super) fn dialled(&mut self, req: u64) {
        let Some(model) = self.tasks.as_deref() else { return };
        let Some(r) = model.wire.requests.get(&req) else { return };
        if self.reachable(r.from, r.to) {
            self.transmit(req);
        } else {
            self.task_failed(req, RequestFailure::DialFailure, "dial failed");
        }
    }

    fn transmit(&mut self, req: u64) {
        let Some(model) = self.tasks.as_deref_mut() else { return };
        let Some(r) = model.wire.requests.get_mut(&req) else { return };
        r.sent = true;
        let (from, to) = (r.from, r.to);
        let bytes = r.request.encode();
        if bytes.len() > TASK_FRAME_BYTES_MAX {
            // The codec refuses to write it, as libp2p reports an I/O error.
            self.task_failed(req, RequestFailure::Io, "request too large");
            return;
        }
        let epoch = self.nodes[to as usize].epoch;
        let size = bytes.len();
        let event = TaskEvent::Request { to, from, req, bytes: Arc::from(bytes), epoch };
        self.send_via(from, to, size, Event::Task(event), Channel::Task);
    }

    /// A request arrived at `owner`: decoded, then handed to its exchange.
    pub(super) fn task_requested(&mut self, owner: Ix, from: Ix, req: u64, bytes: &[u8]) {
        let Ok(request) = TaskRequest::decode(bytes) else {
            // An undecodable request fails the stream; the sender times out.
            if let Some(model) = self.tasks.as_deref_mut() {
                model.stats.undecodable += 1;
            }
            return;
        };
        if let (TaskRequest::Submit(submit), Some(model)) = (&request, self.tasks.as_deref_mut()) {
            model.oracle.delivered(&submit.task);
        }
        let from_id = self.nodes[from as usize].id;
        self.exchange(owner, Input::Requested { from: from_id, token: req, request });
    }

    /// The exchange of `owner` answers request `req` (its token).
    fn respond(&mut self, owner: Ix, req: u64, response: TaskResponse) {
        let Some(model) = self.tasks.as_deref() else { return };
        let Some(from) = model.wire.requests.get(&req).map(|r| r.from) else { return };
        let bytes = response.encode();
        if bytes.len() > TASK_FRAME_BYTES_MAX {
            // The requester's codec refuses it: its request fails as an I/O error.
            self.violation(format!(
                "node {owner} built a task response of {} bytes, above the limit",
                bytes.len()
            ));
            self.task_failed(req, RequestFailure::Io, "response too large");
            return;
        }
        let size = bytes.len();
        let epoch = self.nodes[from as usize].epoch;
        let event = TaskEvent::Response { to: from, req, bytes: Arc::from(bytes), epoch };
        self.send_via(owner, from, size, Event::Task(event), Channel::Task);
    }

    /// The answer to request `req` reached its sender `at`.
    pub(super) fn task_answered(&mut self, at: Ix, req: u64, bytes: &[u8]) {
        let response = match TaskResponse::decode(bytes) {
            Ok(response) => response,
            Err(err) => {
                // Every answer comes from an honest exchange: one that does not decode is
                // a codec bug. The requester sees its stream fail.
                self.violation(format!("node {at} could not decode the answer to task request {req}: {err}"));
                self.task_failed(req, RequestFailure::Io, "undecodable response");
                return;
            }
        };
        let Some(r) = self.take_request(req) else { return };
        if r.from != at {
            return;
        }
        if let Purpose::Exchange(id) = r.purpose {
            self.exchange(at, Input::Answered { id, response });
        }
    }

    /// Request `req` failed.
    pub(super) fn task_failed(&mut self, req: u64, failure: RequestFailure, reason: &str) {
        let Some(r) = self.take_request(req) else { return };
        let Some(model) = self.tasks.as_deref_mut() else { return };
        if failure.may_have_arrived() {
            model.stats.lost += 1;
        } else {
            model.stats.not_delivered += 1;
        }
        if let Purpose::Exchange(id) = r.purpose {
            self.exchange(r.from, Input::Failed { id, failure, reason: reason.to_owned() });
        }
    }

    /// Removes request `req` if its sender is still the process that sent it.
    fn take_request(&mut self, req: u64) -> Option<Request> {
        let model = self.tasks.as_deref_mut()?;
        let r = model.wire.requests.remove(&req)?;
        let sender = &self.nodes[r.from as usize];
        if sender.epoch != r.from_epoch || !sender.alive() {
            return None;
        }
        Some(r)
    }

    /// Node `ix` crashed: its own requests die with it; requests it was answering fail on
    /// their senders when the connection closes (one one-way latency later).
    pub(super) fn connections_closed(&mut self, ix: Ix) {
        let Some(model) = self.tasks.as_deref_mut() else { return };
        let requests = &mut model.wire.requests;
        requests.retain(|_, r| r.from != ix);
        let closed: Vec<(u64, Ix)> =
            requests.iter().filter(|(_, r)| r.to == ix && r.sent).map(|(req, r)| (*req, r.from)).collect();
        for (req, from) in closed {
            let at = self.now + self.base_latency(ix, from);
            let failure = TaskEvent::Failure { req, failure: RequestFailure::ConnectionClosed };
            self.schedule(at, Event::Task(failure));
        }
    }
}
