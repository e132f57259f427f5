//! The driver's task side: the protocol's [`TaskExchange`] (the router placing tasks, the
//! receiving checks, what each answer and failure means) carried over `/murmur/task/1`,
//! and the hand-off to this node's [`TaskOwner`].
//!
//! Everything decided here is decided by the exchange; the driver only maps libp2p's
//! request ids, response channels and failures onto it, one for one. The driver never
//! waits on the owner: acceptance (a durable write) and owner answers run in spawned tasks
//! that report back through a bounded channel, and the driver answers the peer's stream
//! when the report arrives.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Instant;

use libp2p::request_response::{self, OutboundFailure, OutboundRequestId, ResponseChannel};
use murmur_config::clock;
use murmur_config::limits::{ROUTE_WAITERS_MAX, TASK_REPORTS_MAX};
use murmur_protocol::NodeId;
use murmur_protocol::exchange::{
    ExchangeConfig, Input, Output, Placement, RequestFailure, RequestId, TaskExchange, Token,
};
use murmur_protocol::task::{Check, TaskId, TaskRequest, TaskResponse, TaskSnapshot};
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, warn};

use super::Driver;
use crate::{TaskOwner, TaskQuery};

/// What a spawned hand-off reports to the driver.
#[derive(Debug)]
pub(crate) enum Report {
    /// This node's owner decided on one of its own router's deliveries.
    Admitted { task: TaskId, outcome: Result<TaskSnapshot, (Check, String)> },
    /// This node's owner answered a peer's request.
    Answered { token: Token, response: TaskResponse },
}

/// The task transport: what the driver holds to carry the exchange over
/// `/murmur/task/1` (libp2p request ids, peers' streams, who waits for what).
pub(crate) struct TaskTransport {
    exchange: TaskExchange,
    owner: Arc<dyn TaskOwner>,
    pub(super) queries: mpsc::Receiver<TaskQuery>,
    pub(super) reports: mpsc::Receiver<Report>,
    report_tx: mpsc::Sender<Report>,
    /// Who waits for each submission's placement.
    waiters: BTreeMap<TaskId, Vec<oneshot::Sender<Placement>>>,
    /// Who waits for each question to an owner.
    asks: BTreeMap<u64, oneshot::Sender<Result<TaskResponse, String>>>,
    next_ask: u64,
    /// libp2p's ids of our requests, and the exchange's.
    outbound: HashMap<OutboundRequestId, RequestId>,
    /// Streams of peers' requests, until answered.
    inbound: BTreeMap<Token, (ResponseChannel<TaskResponse>, Instant)>,
    next_token: Token,
}

impl std::fmt::Debug for TaskTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskTransport").field("in_flight", &self.exchange.in_flight()).finish_non_exhaustive()
    }
}

impl TaskTransport {
    pub(crate) fn new(
        local: NodeId,
        authorities: Vec<murmur_protocol::PublicKey>,
        owner: Arc<dyn TaskOwner>,
        queries: mpsc::Receiver<TaskQuery>,
    ) -> Self {
        let (report_tx, reports) = mpsc::channel(TASK_REPORTS_MAX);
        Self {
            exchange: TaskExchange::new(local, authorities, ExchangeConfig::default()),
            owner,
            queries,
            reports,
            report_tx,
            waiters: BTreeMap::new(),
            asks: BTreeMap::new(),
            next_ask: 0,
            outbound: HashMap::new(),
            inbound: BTreeMap::new(),
            next_token: 0,
        }
    }

    pub(crate) const fn exchange(&self) -> &TaskExchange {
        &self.exchange
    }
}

/// The exchange's name for how a request failed: libp2p's, one for one.
pub(crate) const fn failure_of(error: &OutboundFailure) -> RequestFailure {
    match error {
        OutboundFailure::DialFailure => RequestFailure::DialFailure,
        OutboundFailure::UnsupportedProtocols => RequestFailure::UnsupportedProtocols,
        OutboundFailure::Timeout => RequestFailure::Timeout,
        OutboundFailure::ConnectionClosed => RequestFailure::ConnectionClosed,
        OutboundFailure::Io(_) => RequestFailure::Io,
    }
}

impl Driver {
    /// When the exchange next needs a tick.
    pub(super) fn task_timeout(&self) -> Option<murmur_protocol::time::Millis> {
        self.tasks.exchange.poll_timeout()
    }

    pub(super) fn tick_tasks(&mut self) {
        self.exchange(Input::Tick);
        let load = self.tasks.owner.load_permille();
        self.mesh.handle(clock::now(), murmur_protocol::mesh::Input::SetLoad { load });
    }

    pub(super) fn rtt_ms(&self) -> BTreeMap<NodeId, u32> {
        self.peers
            .values()
            .filter_map(|info| {
                let rtt = info.rtt.estimate()?;
                Some((info.node?, u32::try_from(rtt.as_millis()).unwrap_or(u32::MAX)))
            })
            .collect()
    }

    /// Feeds the exchange and carries out what it asks.
    fn exchange(&mut self, input: Input) {
        let rtt = self.rtt_ms();
        self.tasks
            .exchange
            .handle(clock::now(), input, self.mesh.directory(), &|node| rtt.get(node).copied());
        while let Some(output) = self.tasks.exchange.poll_output() {
            self.carry_out_task(output);
        }
    }

    fn carry_out_task(&mut self, output: Output) {
        match output {
            Output::Send { id, peer, mut request } => {
                let peer_id = peer.to_peer_id();
                // What the peer's wire version reads: an older minor gets the older shape.
                self.wire.shape_for(self.peers.get(&peer_id).and_then(|p| p.wire), &mut request);
                let lid = self.swarm.behaviour_mut().task.send_request(&peer_id, request);
                self.tasks.outbound.insert(lid, id);
            }
            Output::Admit { submit } => {
                let task = submit.task;
                let accepting = self.tasks.owner.accept(submit);
                let reports = self.tasks.report_tx.clone();
                tokio::spawn(async move {
                    let outcome = accepting.await.map_err(|(check, reason)| (Check::named(&check), reason));
                    let _ = reports.send(Report::Admitted { task, outcome }).await;
                });
            }
            Output::Forward { token, from, request } => {
                let arrived = self.tasks.inbound.get(&token).map_or_else(Instant::now, |(_, at)| *at);
                let answering = self.tasks.owner.answer(from, request, arrived);
                let reports = self.tasks.report_tx.clone();
                tokio::spawn(async move {
                    // Whatever happens in the owner, the peer gets an answer and the inbound
                    // slot is released.
                    let response = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(answering))
                        .await
                        .unwrap_or_else(|_| TaskResponse::Refused {
                            check: Check::Internal.to_string(),
                            reason: "the owner failed while answering this request".into(),
                        });
                    let _ = reports.send(Report::Answered { token, response }).await;
                });
            }
            Output::Respond { token, response } => {
                if let Some((channel, _)) = self.tasks.inbound.remove(&token) {
                    let _ = self.swarm.behaviour_mut().task.send_response(channel, response);
                }
            }
            Output::Placed { task, placement } => {
                for waiter in self.tasks.waiters.remove(&task).unwrap_or_default() {
                    let _ = waiter.send(placement.clone());
                }
            }
            Output::AskAnswered { ask, answer } => {
                if let Some(reply) = self.tasks.asks.remove(&ask) {
                    let _ = reply.send(answer);
                }
            }
            Output::RefusedHere { from, task, capsule, check, reason } => {
                warn!(peer = %from, task_id = %task, capsule = %capsule, check = %check, reason = %reason, "task refused");
            }
        }
    }

    /// A hand-off finished.
    pub(super) fn on_task_report(&mut self, report: Report) {
        match report {
            Report::Admitted { task, outcome } => self.exchange(Input::Admitted { task, outcome }),
            Report::Answered { token, response } => self.exchange(Input::OwnerAnswered { token, response }),
        }
    }

    /// Work from the API or the runtime.
    pub(super) fn on_task_query(&mut self, query: TaskQuery) {
        match query {
            TaskQuery::Route { request, pin, reply } => {
                let waiters = self.tasks.waiters.entry(request.task).or_default();
                if waiters.len() >= ROUTE_WAITERS_MAX {
                    let reason = format!("more than {ROUTE_WAITERS_MAX} waiters for one task");
                    let _ = reply.send(Placement::Failed { reason });
                    return;
                }
                waiters.push(reply);
                self.exchange(Input::Submit { request, pin });
            }
            TaskQuery::Ask { owner, request, reply } => {
                self.tasks.next_ask = self.tasks.next_ask.wrapping_add(1);
                let ask = self.tasks.next_ask;
                self.tasks.asks.insert(ask, reply);
                self.exchange(Input::Ask { ask, owner, request });
            }
            TaskQuery::Owner { task, reply } => {
                let _ = reply.send(self.tasks.exchange.router().owner(&task));
            }
        }
    }

    /// `/murmur/task/1` traffic.
    pub(super) fn on_task_event(&mut self, event: request_response::Event<TaskRequest, TaskResponse>) {
        match event {
            request_response::Event::Message { peer, message, .. } => {
                self.touch(&peer);
                let Some(from) =
                    self.peers.get(&peer).and_then(|p| p.node).or_else(|| NodeId::from_peer_id(&peer).ok())
                else {
                    return;
                };
                match message {
                    request_response::Message::Request { request, channel, .. } => {
                        if !self.wire.reads(&request) {
                            // Rehearsing an older minor: its strict decoder could not read
                            // this request, and its stream would fail unanswered.
                            debug!(peer = %peer, "a submit with settle_wait_ms, which this wire version does not read");
                            drop(channel);
                            return;
                        }
                        self.tasks.next_token = self.tasks.next_token.wrapping_add(1);
                        let token = self.tasks.next_token;
                        self.tasks.inbound.insert(token, (channel, Instant::now()));
                        self.exchange(Input::Requested { from, token, request });
                    }
                    request_response::Message::Response { request_id, response } => {
                        if let Some(id) = self.tasks.outbound.remove(&request_id) {
                            self.exchange(Input::Answered { id, response });
                        }
                    }
                }
            }
            request_response::Event::OutboundFailure { peer, request_id, error, .. } => {
                debug!(peer = %peer, error = %error, "task request failed");
                if let Some(id) = self.tasks.outbound.remove(&request_id) {
                    let failure = failure_of(&error);
                    self.exchange(Input::Failed { id, failure, reason: error.to_string() });
                }
            }
            request_response::Event::InboundFailure { peer, error, .. } => {
                debug!(peer = %peer, error = %error, "task answer failed");
            }
            request_response::Event::ResponseSent { .. } => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use murmur_protocol::exchange::RequestFailure;

    use super::*;

    /// The daemon's mapping of libp2p's failures: only a request that provably never reached
    /// the peer may be placed elsewhere; everything else leaves the outcome unknown, and
    /// the task fails rather than run twice.
    #[test]
    fn outbound_failures_map_to_what_the_exchange_decides_on() {
        let io = || OutboundFailure::Io(std::io::Error::other("reset"));
        let cases = [
            (OutboundFailure::DialFailure, RequestFailure::DialFailure, false),
            (OutboundFailure::UnsupportedProtocols, RequestFailure::UnsupportedProtocols, false),
            (OutboundFailure::Timeout, RequestFailure::Timeout, true),
            (OutboundFailure::ConnectionClosed, RequestFailure::ConnectionClosed, true),
            (io(), RequestFailure::Io, true),
        ];
        for (error, expected, may_have_arrived) in cases {
            let failure = failure_of(&error);
            assert_eq!(failure, expected, "{error}");
            assert_eq!(failure.may_have_arrived(), may_have_arrived, "{error}");
        }
    }
}
