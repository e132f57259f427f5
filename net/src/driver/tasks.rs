//! The driver's task side: the protocol's [`Router`] placing tasks, `/murmur/task/1`
//! requests out and in, and the hand-off to this node's [`TaskOwner`].
//!
//! The driver never waits on the owner: acceptance (a durable write) and owner queries run
//! in spawned tasks that report back through a bounded channel, and the driver answers the
//! peer's stream when the report arrives.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use libp2p::request_response::{self, OutboundFailure, OutboundRequestId, ResponseChannel};
use murmur_protocol::route::{self, Router, RouterConfig};
use murmur_protocol::task::{Submit, TaskId, TaskRequest, TaskResponse, TaskSnapshot, check_incoming};
use murmur_protocol::{NodeId, PublicKey};
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, warn};

use super::Driver;
use crate::{RouteOutcome, TaskOwner, TaskQuery};
use murmur_config::clock;

/// Requests from peers being answered at once; more are refused as busy.
pub const INBOUND_MAX: usize = 4096;
/// Requests to peers in flight at once; more fail at once.
pub const OUTBOUND_MAX: usize = 4096;

/// What a spawned hand-off reports to the driver.
#[derive(Debug)]
pub(crate) enum Report {
    /// A task delivered to this node was accepted or refused.
    Local { task: TaskId, outcome: Result<TaskSnapshot, (String, String)> },
    /// The answer to a peer's request is ready.
    Respond { token: u64, response: TaskResponse },
}

#[derive(Debug)]
enum Outbound {
    Submit { task: TaskId, provider: NodeId },
    Ask(oneshot::Sender<Result<TaskResponse, String>>),
}

/// Task state the driver owns.
pub(crate) struct TaskSide {
    local: NodeId,
    authorities: Vec<PublicKey>,
    owner: Arc<dyn TaskOwner>,
    router: Router,
    pub(super) queries: mpsc::Receiver<TaskQuery>,
    pub(super) reports: mpsc::Receiver<Report>,
    report_tx: mpsc::Sender<Report>,
    waiters: BTreeMap<TaskId, Vec<oneshot::Sender<RouteOutcome>>>,
    accepted: BTreeMap<TaskId, TaskSnapshot>,
    outbound: HashMap<OutboundRequestId, Outbound>,
    inbound: BTreeMap<u64, ResponseChannel<TaskResponse>>,
    next_token: u64,
    refusals: BTreeMap<String, u64>,
}

impl std::fmt::Debug for TaskSide {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskSide").field("local", &self.local).finish_non_exhaustive()
    }
}

impl TaskSide {
    pub(crate) fn new(
        local: NodeId,
        authorities: Vec<PublicKey>,
        owner: Arc<dyn TaskOwner>,
        queries: mpsc::Receiver<TaskQuery>,
    ) -> Self {
        let (report_tx, reports) = mpsc::channel(INBOUND_MAX);
        Self {
            local,
            authorities,
            owner,
            router: Router::new(local, RouterConfig::default()),
            queries,
            reports,
            report_tx,
            waiters: BTreeMap::new(),
            accepted: BTreeMap::new(),
            outbound: HashMap::new(),
            inbound: BTreeMap::new(),
            next_token: 0,
            refusals: BTreeMap::new(),
        }
    }

    pub(crate) const fn router(&self) -> &Router {
        &self.router
    }

    pub(crate) fn refusals(&self) -> BTreeMap<String, u64> {
        self.refusals.clone()
    }
}

impl Driver {
    /// When the router next needs a tick.
    pub(super) fn task_timeout(&self) -> Option<murmur_protocol::time::Millis> {
        self.tasks.router.poll_timeout()
    }

    pub(super) fn tick_tasks(&mut self) {
        self.route(route::Input::Tick);
        let load = self.tasks.owner.load_permille();
        self.mesh.handle(clock::now(), murmur_protocol::mesh::Input::SetLoad { load });
    }

    fn rtt_ms(&self) -> BTreeMap<NodeId, u32> {
        self.peers
            .values()
            .filter_map(|info| {
                let rtt = info.rtt?;
                Some((info.node?, u32::try_from(rtt.as_millis()).unwrap_or(u32::MAX)))
            })
            .collect()
    }

    /// Feeds the router and carries out what it asks.
    fn route(&mut self, input: route::Input) {
        let rtt = self.rtt_ms();
        let now = clock::now();
        self.tasks.router.handle(now, input, self.mesh.directory(), &|node| rtt.get(node).copied());
        while let Some(output) = self.tasks.router.poll_output() {
            match output {
                route::Output::Deliver { provider, request } => self.deliver(provider, request),
                route::Output::Routed { task, owner } => {
                    let snapshot = self.tasks.accepted.remove(&task);
                    self.resolve(task, &RouteOutcome::Routed { owner, snapshot });
                }
                route::Output::Rejected { task, check, reason } => {
                    self.tasks.accepted.remove(&task);
                    self.resolve(task, &RouteOutcome::Rejected { check, reason });
                }
                route::Output::Failed { task, reason } => {
                    self.tasks.accepted.remove(&task);
                    self.resolve(task, &RouteOutcome::Failed { reason });
                }
            }
        }
    }

    fn resolve(&mut self, task: TaskId, outcome: &RouteOutcome) {
        for waiter in self.tasks.waiters.remove(&task).unwrap_or_default() {
            let _ = waiter.send(outcome.clone());
        }
    }

    /// Delivers a task to `provider`: this node's manager, or a peer.
    fn deliver(&mut self, provider: NodeId, request: Submit) {
        let task = request.task;
        if provider == self.tasks.local {
            // The receiving end's checks apply to local deliveries too.
            if let Err(refusal) = check_incoming(
                &request,
                &self.tasks.local,
                &self.tasks.local,
                &self.tasks.authorities,
                self.mesh.directory(),
                clock::now(),
            ) {
                *self.tasks.refusals.entry(refusal.check().to_owned()).or_default() += 1;
                let check = refusal.check().to_owned();
                self.route(route::Input::Refused { task, provider, check, reason: refusal.to_string() });
                return;
            }
            let accepting = self.tasks.owner.accept(request);
            let reports = self.tasks.report_tx.clone();
            tokio::spawn(async move {
                let outcome = accepting.await;
                let _ = reports.send(Report::Local { task, outcome }).await;
            });
            return;
        }
        if self.tasks.outbound.len() >= OUTBOUND_MAX {
            let reason = format!("more than {OUTBOUND_MAX} task requests in flight");
            self.route(route::Input::NotDelivered { task, provider, reason });
            return;
        }
        let id = self
            .swarm
            .behaviour_mut()
            .task
            .send_request(&provider.to_peer_id(), TaskRequest::Submit(request));
        self.tasks.outbound.insert(id, Outbound::Submit { task, provider });
    }

    /// A hand-off finished.
    pub(super) fn on_task_report(&mut self, report: Report) {
        match report {
            Report::Local { task, outcome } => self.on_submit_outcome(task, self.tasks.local, outcome),
            Report::Respond { token, response } => {
                if let Some(channel) = self.tasks.inbound.remove(&token) {
                    let _ = self.swarm.behaviour_mut().task.send_response(channel, response);
                }
            }
        }
    }

    fn on_submit_outcome(
        &mut self,
        task: TaskId,
        provider: NodeId,
        outcome: Result<TaskSnapshot, (String, String)>,
    ) {
        let outcome = outcome.map(|snapshot| {
            if self.tasks.router.is_pending(&task) {
                self.tasks.accepted.insert(task, snapshot);
            }
        });
        self.route(route::Input::answered(task, provider, outcome));
    }

    /// Work from the API or the runtime.
    pub(super) fn on_task_query(&mut self, query: TaskQuery) {
        match query {
            TaskQuery::Route { request, pin, reply } => {
                let task = request.task;
                let waiters = self.tasks.waiters.entry(task).or_default();
                if waiters.len() >= 64 {
                    let _ =
                        reply.send(RouteOutcome::Failed { reason: "too many waiters for one task".into() });
                    return;
                }
                waiters.push(reply);
                self.route(route::Input::Submit { request, pin });
            }
            TaskQuery::Ask { owner, request, reply } => {
                if self.tasks.outbound.len() >= OUTBOUND_MAX {
                    let _ = reply.send(Err(format!("more than {OUTBOUND_MAX} task requests in flight")));
                    return;
                }
                let id = self.swarm.behaviour_mut().task.send_request(&owner.to_peer_id(), request);
                self.tasks.outbound.insert(id, Outbound::Ask(reply));
            }
            TaskQuery::Owner { task, reply } => {
                let _ = reply.send(self.tasks.router.owner(&task));
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
                        self.on_task_request(from, request, channel);
                    }
                    request_response::Message::Response { request_id, response } => {
                        self.on_task_response(request_id, response);
                    }
                }
            }
            request_response::Event::OutboundFailure { peer, request_id, error, .. } => {
                debug!(peer = %peer, error = %error, "task request failed");
                match self.tasks.outbound.remove(&request_id) {
                    Some(Outbound::Submit { task, provider }) => {
                        let reason = error.to_string();
                        // Only a request that provably never reached the peer may go elsewhere.
                        let input = match error {
                            OutboundFailure::DialFailure | OutboundFailure::UnsupportedProtocols => {
                                route::Input::NotDelivered { task, provider, reason }
                            }
                            _ => route::Input::Lost { task, provider, reason },
                        };
                        self.route(input);
                    }
                    Some(Outbound::Ask(reply)) => {
                        let _ = reply.send(Err(format!("the owner {peer} did not answer: {error}")));
                    }
                    None => {}
                }
            }
            request_response::Event::InboundFailure { peer, error, .. } => {
                debug!(peer = %peer, error = %error, "task answer failed");
            }
            request_response::Event::ResponseSent { .. } => {}
        }
    }

    fn on_task_response(&mut self, id: OutboundRequestId, response: TaskResponse) {
        match self.tasks.outbound.remove(&id) {
            Some(Outbound::Submit { task, provider }) => {
                self.on_submit_outcome(task, provider, route::submit_outcome(response));
            }
            Some(Outbound::Ask(reply)) => {
                let _ = reply.send(Ok(response));
            }
            None => {}
        }
    }

    /// A peer's request: checked here (the driver holds the directory), then handed to
    /// the task manager in a spawned task.
    fn on_task_request(
        &mut self,
        from: NodeId,
        request: TaskRequest,
        channel: ResponseChannel<TaskResponse>,
    ) {
        if self.tasks.inbound.len() >= INBOUND_MAX {
            let response = TaskResponse::Refused {
                check: "overloaded".into(),
                reason: "this node is answering too many task requests".into(),
            };
            let _ = self.swarm.behaviour_mut().task.send_response(channel, response);
            return;
        }
        if let TaskRequest::Submit(submit) = &request
            && let Err(refusal) = check_incoming(
                submit,
                &from,
                &self.tasks.local,
                &self.tasks.authorities,
                self.mesh.directory(),
                clock::now(),
            )
        {
            warn!(peer = %from, capsule = %submit.capsule, check = refusal.check(), reason = %refusal, "task refused");
            *self.tasks.refusals.entry(refusal.check().to_owned()).or_default() += 1;
            let response =
                TaskResponse::Refused { check: refusal.check().to_owned(), reason: refusal.to_string() };
            let _ = self.swarm.behaviour_mut().task.send_response(channel, response);
            return;
        }
        let arrived = std::time::Instant::now();
        self.tasks.next_token = self.tasks.next_token.wrapping_add(1);
        let token = self.tasks.next_token;
        self.tasks.inbound.insert(token, channel);
        let answering = self.tasks.owner.answer(from, request, arrived);
        let reports = self.tasks.report_tx.clone();
        tokio::spawn(async move {
            // Whatever happens in the owner, the peer gets an answer and the inbound slot is
            // released.
            let response = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(answering))
                .await
                .unwrap_or_else(|_| TaskResponse::Refused {
                    check: "internal".into(),
                    reason: "the owner failed while answering this request".into(),
                });
            let _ = reports.send(Report::Respond { token, response }).await;
        });
    }
}
