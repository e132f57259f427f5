//! The task exchange: one node's traffic on `/murmur/task/1` as a sans-IO machine. It runs
//! the node's [`Router`], sends the router's deliveries (to a peer, or to this node's own
//! owner), makes the receiving end's checks on peers' deliveries before the owner sees
//! them, and decides what every answer and every failure of a request means.
//!
//! `murnode`'s network driver feeds it from libp2p's request-response events; the simulator
//! feeds it from a modelled network. Both carry out the same outputs, so what the simulator
//! proves about placement (a task runs at most once, a refused sender never reaches an
//! owner) holds for the driver that ships.
//!
//! # What a failure means
//!
//! A request that provably never reached its peer ([`RequestFailure::DialFailure`],
//! [`RequestFailure::UnsupportedProtocols`]) was not delivered: the router tries the next
//! candidate. Any other failure (a timeout, a closed connection, an I/O error mid-stream)
//! leaves the outcome unknown: the peer may hold the task, so the router fails it rather
//! than run it twice (see [`crate::route`]).
//!
//! # Call order
//!
//! ```text
//! exchange.handle(now, input, directory, &rtt);   // a submission, a request, an answer, Tick
//! while let Some(out) = exchange.poll_output() { carry it out }
//! at exchange.poll_timeout(): exchange.handle(now, Input::Tick, …)
//! ```
//!
//! Every map is bounded: requests in flight by [`ExchangeConfig::outbound_max`] (more are
//! not delivered), peers' requests open by [`ExchangeConfig::inbound_max`] (more are
//! refused as `overloaded`), the router by its own limits.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::directory::Directory;
use crate::identity::{NodeId, PublicKey};
use crate::limits::{TASK_INBOUND_MAX, TASK_OUTBOUND_MAX};
use crate::plant::{Plant, Plants};
use crate::route::{self, Router, RouterConfig, RouterStats};
use crate::task::{
    Check, Submit, TASK_EVENTS_MAX, TaskId, TaskRequest, TaskResponse, TaskSnapshot, check_incoming,
};
use crate::time::Millis;

/// Names one request this node sent, until its answer or failure.
pub type RequestId = u64;
/// Names one peer's request (its stream) until it is answered.
pub type Token = u64;

/// How the exchange is set up.
#[derive(Clone, Debug)]
pub struct ExchangeConfig {
    pub router: RouterConfig,
    /// Requests in flight to peers at once.
    pub outbound_max: usize,
    /// Peers' requests waiting for this node's owner at once.
    pub inbound_max: usize,
    pub plants: Plants,
}

impl Default for ExchangeConfig {
    fn default() -> Self {
        Self {
            router: RouterConfig::default(),
            outbound_max: TASK_OUTBOUND_MAX,
            inbound_max: TASK_INBOUND_MAX,
            plants: Plants::NONE,
        }
    }
}

/// How a request to a peer failed, as the transport reports it (libp2p's
/// `OutboundFailure`, one for one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestFailure {
    /// No connection could be made: the request never left.
    DialFailure,
    /// The peer does not speak `/murmur/task/1`: the request was never read.
    UnsupportedProtocols,
    /// No answer within the request timeout.
    Timeout,
    /// The connection closed before the answer.
    ConnectionClosed,
    /// Reading or writing the stream failed.
    Io,
}

impl RequestFailure {
    /// Whether the request may have reached the peer (so the peer may have acted on it).
    #[must_use]
    pub const fn may_have_arrived(self) -> bool {
        !matches!(self, Self::DialFailure | Self::UnsupportedProtocols)
    }
}

/// What the driver tells the exchange.
#[derive(Clone, Debug)]
pub enum Input {
    /// A client or capsule of this node sends a task; `pin` restricts it to one node.
    Submit { request: Submit, pin: Option<NodeId> },
    /// Ask `owner` about a task (get, cancel, reply, events); the answer comes back as
    /// [`Output::AskAnswered`] with `ask`.
    Ask { ask: u64, owner: NodeId, request: TaskRequest },
    /// Peer `from` sent `request`; answer it as [`Output::Respond`] with `token`.
    Requested { from: NodeId, token: Token, request: TaskRequest },
    /// This node's owner decided on a delivery of its own router ([`Output::Admit`]).
    Admitted { task: TaskId, outcome: Result<TaskSnapshot, (Check, String)> },
    /// This node's owner answered a peer's request ([`Output::Forward`]).
    OwnerAnswered { token: Token, response: TaskResponse },
    /// Request `id` was answered.
    Answered { id: RequestId, response: TaskResponse },
    /// Request `id` failed.
    Failed { id: RequestId, failure: RequestFailure, reason: String },
    /// Time passed.
    Tick,
}

/// Where a submission ended up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Placement {
    /// `owner` accepted it; `snapshot` is its state at acceptance when this submission
    /// placed it (`None` when it had been placed before: ask the owner).
    Routed { owner: NodeId, snapshot: Option<TaskSnapshot> },
    /// Refused for good, naming the failed check; nothing ran.
    Rejected { check: Check, reason: String },
    /// Not placed, or its fate is unknown.
    Failed { reason: String },
}

/// What the exchange asks the driver to do, or reports.
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use]
pub enum Output {
    /// Send `request` to `peer`; report its answer or failure with `id`.
    Send { id: RequestId, peer: NodeId, request: TaskRequest },
    /// Hand this node's own delivery to its owner; report with [`Input::Admitted`].
    Admit { submit: Submit },
    /// Hand a peer's request (checked) to this node's owner; report its answer with
    /// [`Input::OwnerAnswered`].
    Forward { token: Token, from: NodeId, request: TaskRequest },
    /// Answer peer request `token`.
    Respond { token: Token, response: TaskResponse },
    /// A submission has its outcome.
    Placed { task: TaskId, placement: Placement },
    /// The answer to [`Input::Ask`] `ask`, or why there is none.
    AskAnswered { ask: u64, answer: Result<TaskResponse, String> },
    /// A delivery (from `from`, this node for its own) failed the receiving checks; for
    /// logs and metrics.
    RefusedHere { from: NodeId, task: TaskId, capsule: String, check: Check, reason: String },
}

#[derive(Clone, Copy, Debug)]
enum Outbound {
    Submit { task: TaskId, provider: NodeId },
    Ask { ask: u64, owner: NodeId },
}

/// One node's task exchange. See the [module docs](self) for the call order.
#[derive(Debug)]
pub struct TaskExchange {
    local: NodeId,
    authorities: Vec<PublicKey>,
    config: ExchangeConfig,
    router: Router,
    outbound: BTreeMap<RequestId, Outbound>,
    next_id: RequestId,
    /// Peers' requests handed to the owner and not yet answered.
    inbound: BTreeSet<Token>,
    /// Snapshots at acceptance of tasks still being placed.
    accepted: BTreeMap<TaskId, TaskSnapshot>,
    /// Deliveries refused here, by check.
    refusals: BTreeMap<String, u64>,
    outputs: VecDeque<Output>,
}

impl TaskExchange {
    /// The exchange of node `local`, whose grants must be signed by one of `authorities`.
    #[must_use]
    pub fn new(local: NodeId, authorities: Vec<PublicKey>, config: ExchangeConfig) -> Self {
        Self {
            router: Router::new(local, config.router.clone()),
            local,
            authorities,
            config,
            outbound: BTreeMap::new(),
            next_id: 0,
            inbound: BTreeSet::new(),
            accepted: BTreeMap::new(),
            refusals: BTreeMap::new(),
            outputs: VecDeque::new(),
        }
    }

    /// Feeds one input; `directory` and `rtt` (round-trip times of connected peers) are the
    /// node's views now.
    pub fn handle(
        &mut self,
        now: Millis,
        input: Input,
        directory: &Directory,
        rtt: &dyn Fn(&NodeId) -> Option<u32>,
    ) {
        match input {
            Input::Submit { request, pin } => {
                self.route(now, route::Input::Submit { request, pin }, directory, rtt);
            }
            Input::Ask { ask, owner, request } => self.ask(ask, owner, request),
            Input::Requested { from, token, request } => self.requested(now, from, token, request, directory),
            Input::Admitted { task, outcome } => {
                let provider = self.local;
                self.answered(now, task, provider, outcome, directory, rtt);
            }
            Input::OwnerAnswered { token, mut response } => {
                if self.inbound.remove(&token) {
                    if let TaskResponse::Events { events, .. } = &mut response {
                        events.truncate(TASK_EVENTS_MAX);
                    }
                    self.outputs.push_back(Output::Respond { token, response });
                }
            }
            Input::Answered { id, response } => match self.outbound.remove(&id) {
                Some(Outbound::Submit { task, provider }) => {
                    self.answered(now, task, provider, route::submit_outcome(response), directory, rtt);
                }
                Some(Outbound::Ask { ask, .. }) => {
                    self.outputs.push_back(Output::AskAnswered { ask, answer: Ok(response) });
                }
                None => {}
            },
            Input::Failed { id, failure, reason } => self.failed(now, id, failure, reason, directory, rtt),
            Input::Tick => self.route(now, route::Input::Tick, directory, rtt),
        }
    }

    /// The next thing to do.
    pub fn poll_output(&mut self) -> Option<Output> {
        crate::limits::pop_output(&mut self.outputs)
    }

    /// When to feed [`Input::Tick`] next.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Millis> {
        self.router.poll_timeout()
    }

    /// The router (its memory of owners, its counters).
    #[must_use]
    pub const fn router(&self) -> &Router {
        &self.router
    }

    /// Deliveries refused here, by check.
    #[must_use]
    pub const fn refusals(&self) -> &BTreeMap<String, u64> {
        &self.refusals
    }

    /// Requests this node has in flight.
    #[must_use]
    pub fn in_flight(&self) -> usize {
        self.outbound.len()
    }

    /// Router counters (placements, failovers, …).
    #[must_use]
    pub const fn stats(&self) -> &RouterStats {
        self.router.stats()
    }

    fn route(
        &mut self,
        now: Millis,
        input: route::Input,
        directory: &Directory,
        rtt: &dyn Fn(&NodeId) -> Option<u32>,
    ) {
        self.router.handle(now, input, directory, rtt);
        while let Some(output) = self.router.poll_output() {
            match output {
                route::Output::Deliver { provider, request } => {
                    self.deliver(now, provider, request, directory, rtt);
                }
                route::Output::Routed { task, owner } => {
                    let snapshot = self.accepted.remove(&task);
                    self.placed(task, Placement::Routed { owner, snapshot });
                }
                route::Output::Rejected { task, check, reason } => {
                    self.accepted.remove(&task);
                    self.placed(task, Placement::Rejected { check, reason });
                }
                route::Output::Failed { task, reason } => {
                    self.accepted.remove(&task);
                    self.placed(task, Placement::Failed { reason });
                }
            }
        }
    }

    fn placed(&mut self, task: TaskId, placement: Placement) {
        self.outputs.push_back(Output::Placed { task, placement });
    }

    /// Delivers a task to `provider`: this node's owner (after the receiving checks, which
    /// apply to its own deliveries too), or a peer.
    fn deliver(
        &mut self,
        now: Millis,
        provider: NodeId,
        request: Submit,
        directory: &Directory,
        rtt: &dyn Fn(&NodeId) -> Option<u32>,
    ) {
        let task = request.task;
        if provider == self.local {
            let local = self.local;
            if let Err((check, reason)) = self.check(now, &local, &request, directory) {
                self.route(now, route::Input::Refused { task, provider, check, reason }, directory, rtt);
                return;
            }
            self.outputs.push_back(Output::Admit { submit: request });
            return;
        }
        match self.send(provider, TaskRequest::Submit(request), |_| Outbound::Submit { task, provider }) {
            Ok(()) => {}
            Err(reason) => {
                self.route(now, route::Input::NotDelivered { task, provider, reason }, directory, rtt)
            }
        }
    }

    fn ask(&mut self, ask: u64, owner: NodeId, request: TaskRequest) {
        if let Err(reason) = self.send(owner, request, |_| Outbound::Ask { ask, owner }) {
            self.outputs.push_back(Output::AskAnswered { ask, answer: Err(reason) });
        }
    }

    /// Sends `request` unless too many are in flight.
    fn send(
        &mut self,
        peer: NodeId,
        request: TaskRequest,
        entry: impl FnOnce(RequestId) -> Outbound,
    ) -> Result<(), String> {
        if self.outbound.len() >= self.config.outbound_max {
            return Err(format!("more than {} task requests in flight", self.config.outbound_max));
        }
        self.next_id = self.next_id.wrapping_add(1);
        let id = self.next_id;
        self.outbound.insert(id, entry(id));
        self.outputs.push_back(Output::Send { id, peer, request });
        Ok(())
    }

    /// A peer's request: a submit must pass the receiving checks first; then the owner
    /// answers it.
    fn requested(
        &mut self,
        now: Millis,
        from: NodeId,
        token: Token,
        request: TaskRequest,
        directory: &Directory,
    ) {
        if self.inbound.len() >= self.config.inbound_max {
            let response = TaskResponse::Refused {
                check: Check::Overloaded.to_string(),
                reason: "this node is answering too many task requests".into(),
            };
            self.outputs.push_back(Output::Respond { token, response });
            return;
        }
        if let TaskRequest::Submit(submit) = &request
            && let Err((check, reason)) = self.check(now, &from, submit, directory)
        {
            let response = TaskResponse::Refused { check: check.to_string(), reason };
            self.outputs.push_back(Output::Respond { token, response });
            return;
        }
        self.inbound.insert(token);
        self.outputs.push_back(Output::Forward { token, from, request });
    }

    /// The receiving end's checks of a delivery from `from` (skipped only by the planted
    /// bug); a refusal is counted and reported.
    fn check(
        &mut self,
        now: Millis,
        from: &NodeId,
        submit: &Submit,
        directory: &Directory,
    ) -> Result<(), (Check, String)> {
        if self.config.plants.has(Plant::SkipIncomingCheck) {
            return Ok(());
        }
        let refusal = match check_incoming(submit, from, &self.local, &self.authorities, directory, now) {
            Ok(()) => return Ok(()),
            Err(refusal) => refusal,
        };
        let check = Check::named(refusal.check());
        let reason = refusal.to_string();
        *self.refusals.entry(check.to_string()).or_default() += 1;
        self.outputs.push_back(Output::RefusedHere {
            from: *from,
            task: submit.task,
            capsule: submit.capsule.clone(),
            check: check.clone(),
            reason: reason.clone(),
        });
        Err((check, reason))
    }

    /// `provider`'s decision on a delivery of `task`.
    fn answered(
        &mut self,
        now: Millis,
        task: TaskId,
        provider: NodeId,
        outcome: Result<TaskSnapshot, (Check, String)>,
        directory: &Directory,
        rtt: &dyn Fn(&NodeId) -> Option<u32>,
    ) {
        let outcome = outcome.map(|snapshot| {
            if self.router.is_pending(&task) {
                self.accepted.insert(task, snapshot);
            }
        });
        self.route(now, route::Input::answered(task, provider, outcome), directory, rtt);
    }

    fn failed(
        &mut self,
        now: Millis,
        id: RequestId,
        failure: RequestFailure,
        reason: String,
        directory: &Directory,
        rtt: &dyn Fn(&NodeId) -> Option<u32>,
    ) {
        match self.outbound.remove(&id) {
            Some(Outbound::Submit { task, provider }) => {
                // Only a request that provably never reached the peer may go elsewhere.
                let retry = !failure.may_have_arrived() || self.config.plants.has(Plant::RetryLost);
                let input = if retry {
                    route::Input::NotDelivered { task, provider, reason }
                } else {
                    route::Input::Lost { task, provider, reason }
                };
                self.route(now, input, directory, rtt);
            }
            Some(Outbound::Ask { ask, owner }) => {
                let answer = Err(format!("the owner {owner} did not answer: {reason}"));
                self.outputs.push_back(Output::AskAnswered { ask, answer });
            }
            None => {}
        }
    }
}

#[cfg(test)]
mod tests;
