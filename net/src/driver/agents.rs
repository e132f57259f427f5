//! The driver's agent side: `/murmur/agent/1`. Outgoing, a message is resolved against the
//! directory by the protocol's [`destination`] and sent once (at most once: an answer that
//! never comes is an error, not a retry); incoming, the protocol's [`check_sender`] refuses
//! a peer that speaks for an agent it does not advertise before the [`AgentInbox`] sees it.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use libp2p::request_response::{self, OutboundRequestId};
use murmur_config::clock;
use murmur_config::limits::AGENT_OUTBOUND_MAX;
use murmur_protocol::NodeId;
use murmur_protocol::agent::{
    AgentCheck, AgentRequest, AgentResponse, AgentStatus, Destination, check_sender, destination,
};
use tokio::sync::{mpsc, oneshot};
use tracing::debug;

use super::Driver;
use crate::handle::{AgentQuery, SendError, Sent};
use crate::inbox::AgentInbox;

/// Who waits for the answer of one of our requests.
enum Waiter {
    Send(NodeId, oneshot::Sender<Result<Sent, SendError>>),
    Status(oneshot::Sender<Result<Vec<AgentStatus>, String>>),
}

/// What the driver holds to carry `/murmur/agent/1`.
pub(crate) struct AgentTransport {
    inbox: Arc<dyn AgentInbox>,
    pub(super) queries: mpsc::Receiver<AgentQuery>,
    outbound: HashMap<OutboundRequestId, Waiter>,
    /// Peers' messages refused here, by check.
    pub(super) refusals: BTreeMap<&'static str, u64>,
    pub(super) delivered: u64,
}

impl std::fmt::Debug for AgentTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentTransport").field("in_flight", &self.outbound.len()).finish_non_exhaustive()
    }
}

impl AgentTransport {
    pub(crate) fn new(inbox: Arc<dyn AgentInbox>, queries: mpsc::Receiver<AgentQuery>) -> Self {
        Self { inbox, queries, outbound: HashMap::new(), refusals: BTreeMap::new(), delivered: 0 }
    }

    fn refuse(&mut self, check: AgentCheck, reason: String) -> AgentResponse {
        *self.refusals.entry(check.as_str()).or_default() += 1;
        AgentResponse::Refused { check: check.as_str().into(), reason }
    }
}

impl Driver {
    pub(super) fn on_agent_query(&mut self, query: AgentQuery) {
        match query {
            AgentQuery::Send { to, local_runs, message, reply } => {
                let now = clock::now();
                let target = destination(self.mesh.directory(), now, self.mesh.id(), local_runs, &to);
                match target {
                    Err(error) => {
                        let _ = reply.send(Err(error.into()));
                    }
                    Ok(Destination::Local) => {
                        let _ = reply.send(Ok(Sent::Local));
                    }
                    Ok(Destination::Remote(node)) => {
                        if self.agents.outbound.len() >= AGENT_OUTBOUND_MAX {
                            let _ = reply.send(Err(SendError::Overloaded(AGENT_OUTBOUND_MAX)));
                            return;
                        }
                        let request = AgentRequest::Message(message);
                        let id = self.swarm.behaviour_mut().agent.send_request(&node.to_peer_id(), request);
                        self.agents.outbound.insert(id, Waiter::Send(node, reply));
                    }
                }
            }
            AgentQuery::Status { node, reply } => {
                if node == self.mesh.id() {
                    let _ = reply.send(Ok(self.agents.inbox.status()));
                    return;
                }
                if self.agents.outbound.len() >= AGENT_OUTBOUND_MAX {
                    let _ =
                        reply.send(Err(format!("{AGENT_OUTBOUND_MAX} agent requests in flight; try again")));
                    return;
                }
                let id =
                    self.swarm.behaviour_mut().agent.send_request(&node.to_peer_id(), AgentRequest::Status);
                self.agents.outbound.insert(id, Waiter::Status(reply));
            }
            AgentQuery::Directory(reply) => {
                let now = clock::now();
                let agents = self
                    .mesh
                    .directory()
                    .agents(now)
                    .into_iter()
                    .map(|(name, nodes)| (name.to_owned(), nodes))
                    .collect();
                let _ = reply.send(agents);
            }
            AgentQuery::SetAgents(agents, reply) => {
                tracing::info!(agents = agents.len(), "agents changed");
                self.mesh.handle(clock::now(), murmur_protocol::mesh::Input::SetAgents { agents });
                let _ = reply.send(());
            }
            AgentQuery::SetModels(models, reply) => {
                tracing::info!(models = ?models, "models changed");
                self.models = models;
                self.apply_models();
                let _ = reply.send(());
            }
            AgentQuery::Models(reply) => {
                let models = self
                    .mesh
                    .directory()
                    .models(clock::now())
                    .into_iter()
                    .map(|(name, nodes)| (name.to_owned(), nodes))
                    .collect();
                let _ = reply.send(models);
            }
            AgentQuery::ModelCandidates { ask, reply } => {
                let rtt = self.rtt_ms();
                let nodes = murmur_protocol::model::candidates(
                    self.mesh.directory(),
                    clock::now(),
                    self.mesh.id(),
                    ask.local_serves,
                    &ask.model,
                    &ask.tried,
                    &|node| rtt.get(node).copied(),
                    &|node| ask.open.get(node).copied().unwrap_or(0),
                    ask.turn,
                );
                let _ = reply.send(nodes);
            }
            AgentQuery::ModelCaller { peer, reply } => {
                let _ = reply.send(murmur_protocol::model::check_caller(
                    self.mesh.directory(),
                    clock::now(),
                    &peer,
                ));
            }
        }
    }

    pub(super) fn on_agent_event(&mut self, event: request_response::Event<AgentRequest, AgentResponse>) {
        match event {
            request_response::Event::Message { peer, message, .. } => match message {
                request_response::Message::Request { request, channel, .. } => {
                    let response = match NodeId::from_peer_id(&peer) {
                        Ok(from) => self.answer_agent_request(from, request),
                        Err(_) => self.agents.refuse(AgentCheck::Malformed, "not a murmur peer".into()),
                    };
                    let _ = self.swarm.behaviour_mut().agent.send_response(channel, response);
                }
                request_response::Message::Response { request_id, response } => {
                    match self.agents.outbound.remove(&request_id) {
                        Some(Waiter::Send(node, reply)) => {
                            let outcome = match response {
                                AgentResponse::Delivered => Ok(Sent::Delivered(node)),
                                AgentResponse::Refused { check, reason } => {
                                    Err(SendError::Refused { node, check, reason })
                                }
                                AgentResponse::Status { .. } => Err(SendError::Unreachable {
                                    node,
                                    reason: "it answered a message with a status".into(),
                                }),
                            };
                            let _ = reply.send(outcome);
                        }
                        Some(Waiter::Status(reply)) => {
                            let outcome = match response {
                                AgentResponse::Status { agents } => Ok(agents),
                                AgentResponse::Refused { check, reason } => {
                                    Err(format!("refused ({check}): {reason}"))
                                }
                                AgentResponse::Delivered => {
                                    Err("it answered a status question with a delivery".into())
                                }
                            };
                            let _ = reply.send(outcome);
                        }
                        None => {}
                    }
                }
            },
            request_response::Event::OutboundFailure { peer, request_id, error, .. } => {
                debug!(peer = %peer, error = %error, "agent request failed");
                match self.agents.outbound.remove(&request_id) {
                    Some(Waiter::Send(node, reply)) => {
                        let _ = reply.send(Err(SendError::Unreachable { node, reason: error.to_string() }));
                    }
                    Some(Waiter::Status(reply)) => {
                        let _ = reply.send(Err(error.to_string()));
                    }
                    None => {}
                }
            }
            request_response::Event::InboundFailure { peer, error, .. } => {
                // A frame that does not decode never reaches us as a request.
                debug!(peer = %peer, error = %error, "agent request from a peer failed");
                if matches!(error, request_response::InboundFailure::Io(_)) {
                    *self.agents.refusals.entry(AgentCheck::Malformed.as_str()).or_default() += 1;
                }
            }
            request_response::Event::ResponseSent { .. } => {}
        }
    }

    fn answer_agent_request(&mut self, from: NodeId, request: AgentRequest) -> AgentResponse {
        match request {
            // Only the mesh's members learn how this node's agents are.
            AgentRequest::Status => match self.mesh.directory().get(&from) {
                Some(record) if record.expires_at() > clock::now() => {
                    AgentResponse::Status { agents: self.agents.inbox.status() }
                }
                _ => self
                    .agents
                    .refuse(AgentCheck::SenderNotAdvertised, format!("{from} is not a member of the mesh")),
            },
            AgentRequest::Message(message) => {
                if let Err(check) = check_sender(self.mesh.directory(), clock::now(), &from, &message.from) {
                    tracing::warn!(peer = %from, sender = %message.from, to = %message.to, reason = %check, "agent message refused");
                    let reason = format!("{from} does not advertise an agent named `{}`", message.from);
                    return self.agents.refuse(check, reason);
                }
                match self.agents.inbox.deliver(from, message) {
                    AgentResponse::Refused { check, reason } => {
                        let known = AgentCheck::ALL
                            .iter()
                            .find(|c| c.as_str() == check)
                            .map_or("other", |c| c.as_str());
                        *self.agents.refusals.entry(known).or_default() += 1;
                        AgentResponse::Refused { check, reason }
                    }
                    answer => {
                        self.agents.delivered += 1;
                        answer
                    }
                }
            }
        }
    }
}
