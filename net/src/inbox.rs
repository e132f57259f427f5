//! The port through which agent messages from the network reach this node's agents. The
//! driver makes the receiving end's check first (the sending peer must advertise the agent
//! it sends as; it holds the directory that check reads), then hands what passed to the
//! [`AgentInbox`], which only puts it in an inbox: it never blocks the driver.

use murmur_protocol::NodeId;
use murmur_protocol::agent::{AgentMessage, AgentResponse, AgentStatus};

/// Whoever runs this node's agents (the node's brain host).
pub trait AgentInbox: Send + Sync + 'static {
    /// Puts `message`, delivered by peer `from` (its sender checked), in the inbox of the
    /// local agent it names, by the recipient's subscription rule; answers at once.
    fn deliver(&self, from: NodeId, message: AgentMessage) -> AgentResponse;

    /// How this node's agents are doing.
    fn status(&self) -> Vec<AgentStatus>;
}

/// A node that runs no agents: every message is for an unknown agent.
#[derive(Debug, Default)]
pub struct NoAgents;

impl AgentInbox for NoAgents {
    fn deliver(&self, _from: NodeId, message: AgentMessage) -> AgentResponse {
        AgentResponse::Refused {
            check: murmur_protocol::agent::AgentCheck::UnknownAgent.as_str().into(),
            reason: format!("no agent named `{}` runs on this node", message.to),
        }
    }

    fn status(&self) -> Vec<AgentStatus> {
        Vec::new()
    }
}
