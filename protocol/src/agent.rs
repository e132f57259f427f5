//! Agents (long-running brains) across the mesh: their addresses, the `/murmur/agent/1`
//! wire types, and the two decisions every node makes the same way — where a message to
//! an agent goes ([`destination`]), and whether a peer may send as the agent it names
//! ([`check_sender`]).
//!
//! Agents are advertised by name in their node's adverts ([`crate::Advert::agents`]). A
//! message names its sender and its recipient; the sending node resolves the recipient
//! against its directory, and the receiving node checks that the authenticated peer that
//! delivered it advertises the sender (so no node can speak for an agent it does not run)
//! before the recipient's subscriptions decide whether it lands.
//!
//! ```
//! use murmur_protocol::agent::AgentAddress;
//! let address: AgentAddress = "planner".parse().unwrap();
//! assert_eq!((address.name.as_str(), address.node), ("planner", None));
//! assert!("Planner".parse::<AgentAddress>().is_err());
//! ```

use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::codec::{self, DecodeError};
use crate::directory::Directory;
use crate::identity::NodeId;
use crate::limits::{ADVERT_AGENTS_MAX, AGENT_FRAME_BYTES_MAX, AGENT_MESSAGE_BYTES_MAX};
use crate::names::check_capsule_name;
use crate::task::Frame;
use crate::time::Millis;

/// The `/murmur/agent/1` frame version this build writes and reads.
pub const AGENT_WIRE_VERSION: u16 = 1;

/// The sender name of operators' clients (`mur agent send`, the HTTP API): a node sends
/// as `mur` for its own clients; an agent hears its own node's clients by subscribing to
/// `mur`, another node's by subscribing to `mur@PEER`.
pub const CLIENT_SENDER: &str = "mur";

/// Checks an agent name: the grammar of capsule names, and not the reserved
/// [`CLIENT_SENDER`].
pub fn check_agent_name(name: &str) -> Result<(), String> {
    check_capsule_name(name).map_err(|e| e.replace("capsule name", "agent name"))?;
    if name == CLIENT_SENDER {
        return Err(format!("`{CLIENT_SENDER}` is reserved for operators' clients"));
    }
    Ok(())
}

/// Where a message goes or comes from: `NAME` (wherever it runs) or `NAME@PEER` (that
/// node's).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct AgentAddress {
    pub name: String,
    pub node: Option<NodeId>,
}

impl FromStr for AgentAddress {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let (name, node) = match text.split_once('@') {
            Some((name, peer)) => {
                let node = peer.parse::<NodeId>().map_err(|e| format!("`{peer}` is not a peer id: {e}"))?;
                (name, Some(node))
            }
            None => (text, None),
        };
        check_agent_name(name)?;
        Ok(Self { name: name.to_owned(), node })
    }
}

impl std::fmt::Display for AgentAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.node {
            Some(node) => write!(f, "{}@{node}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

/// Where a message to an agent goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Destination {
    /// An agent of this node.
    Local,
    /// The agent of node `0`.
    Remote(NodeId),
}

/// Why a message cannot be addressed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AddressError {
    #[error("no agent named `{0}` runs in the mesh")]
    Unknown(String),
    #[error("node {node} runs no agent named `{name}`")]
    NotAt { name: String, node: NodeId },
    #[error("agent `{name}` runs on {} nodes ({}); address one as {name}@PEER", nodes.len(), list(nodes))]
    Ambiguous { name: String, nodes: Vec<NodeId> },
}

fn list(nodes: &[NodeId]) -> String {
    nodes.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
}

/// Where `address` goes, as this node sees the mesh at `now`: `local_runs` says whether
/// this node runs the agent (its own table, authoritative); other nodes are those whose
/// valid advert in `directory` lists it. A bare name that more than one node runs (this
/// one included) is an error naming them, never a guess.
pub fn destination(
    directory: &Directory,
    now: Millis,
    local: NodeId,
    local_runs: bool,
    address: &AgentAddress,
) -> Result<Destination, AddressError> {
    let name = &address.name;
    if let Some(node) = address.node {
        if node == local {
            return if local_runs {
                Ok(Destination::Local)
            } else {
                Err(AddressError::NotAt { name: name.clone(), node })
            };
        }
        let runs = directory.get(&node).is_some_and(|r| r.expires_at() > now && r.advert().runs_agent(name));
        return if runs {
            Ok(Destination::Remote(node))
        } else {
            Err(AddressError::NotAt { name: name.clone(), node })
        };
    }
    let mut nodes: Vec<NodeId> = directory.agent_hosts(now, name).filter(|n| *n != local).collect();
    if local_runs {
        nodes.insert(0, local);
    }
    match nodes.as_slice() {
        [] => Err(AddressError::Unknown(name.clone())),
        [only] if *only == local => Ok(Destination::Local),
        [only] => Ok(Destination::Remote(*only)),
        _ => Err(AddressError::Ambiguous { name: name.clone(), nodes }),
    }
}

/// Why a node refuses a peer's message (the `check` of [`AgentResponse::Refused`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AgentCheck {
    /// The frame did not decode or broke a bound.
    Malformed,
    /// The sending peer does not advertise the agent it sends as.
    SenderNotAdvertised,
    /// No agent of that name runs on this node.
    UnknownAgent,
    /// The recipient's inbox is full.
    InboxFull,
    /// This node takes no more agent messages now (too many in flight).
    Overloaded,
}

impl AgentCheck {
    /// Every check, for metrics.
    pub const ALL: [Self; 5] =
        [Self::Malformed, Self::SenderNotAdvertised, Self::UnknownAgent, Self::InboxFull, Self::Overloaded];

    /// The stable name (metrics, errors).
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Malformed => "malformed",
            Self::SenderNotAdvertised => "sender_not_advertised",
            Self::UnknownAgent => "unknown_agent",
            Self::InboxFull => "inbox_full",
            Self::Overloaded => "overloaded",
        }
    }
}

impl std::fmt::Display for AgentCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The receiving end's check of a peer's message: the peer must be a member of the mesh
/// (a valid advert in `directory`), and `from` an agent that advert lists — or
/// [`CLIENT_SENDER`], the peer's own clients, which recipients hear only through a
/// `mur@PEER` subscription (a bare `mur` is the receiving node's own clients).
pub fn check_sender(directory: &Directory, now: Millis, peer: &NodeId, from: &str) -> Result<(), AgentCheck> {
    let Some(advert) = directory.get(peer).filter(|r| r.expires_at() > now).map(|r| r.advert()) else {
        return Err(AgentCheck::SenderNotAdvertised);
    };
    if from == CLIENT_SENDER || advert.runs_agent(from) {
        Ok(())
    } else {
        Err(AgentCheck::SenderNotAdvertised)
    }
}

/// A request on `/murmur/agent/1`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub enum AgentRequest {
    /// Agent `from` of the sending node says `text` to agent `to` of the receiving node.
    Message(AgentMessage),
    /// How the receiving node's agents are doing (for `mur agent ls` across the mesh).
    Status,
}

/// One agent as its node reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentStatus {
    // Fields are in canonical key order (see `codec`).
    pub name: String,
    /// Where its brain comes from: a file name or `NAME@VERSION`.
    pub brain: String,
    /// `starting`, `running`, `restarting`, `stopped`, `failed`.
    pub state: String,
    /// `rhai`, `js` or `wasm`.
    pub language: String,
    /// Runs restarted after a trap or an unexpected exit since the node started.
    pub restarts: u32,
}

/// One message between agents.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentMessage {
    // Fields are in canonical key order (see `codec`).
    pub to: String,
    pub from: String,
    pub text: String,
}

/// An answer on `/murmur/agent/1`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub enum AgentResponse {
    /// Taken: in the recipient's inbox, or (when it did not subscribe to the sender)
    /// dropped by its rule. The sender is not told which.
    Delivered,
    /// Refused; `check` names why ([`AgentCheck::as_str`]).
    Refused { check: String, reason: String },
    /// The answer to [`AgentRequest::Status`].
    Status { agents: Vec<AgentStatus> },
}

impl AgentRequest {
    /// Canonical bytes.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        codec::encode(&Frame { v: AGENT_WIRE_VERSION, body: self })
    }

    /// Decodes and validates a request from a peer.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let frame: Frame<Self> = crate::signed::decode_versioned(
            "agent request",
            bytes,
            AGENT_FRAME_BYTES_MAX,
            AGENT_WIRE_VERSION,
            |f: &Frame<Self>| f.v,
        )?;
        let Self::Message(message) = &frame.body else { return Ok(frame.body) };
        let invalid = |field, reason: String| DecodeError::Invalid { what: "agent request", field, reason };
        check_agent_name(&message.to).map_err(|r| invalid("to", r))?;
        if message.from != CLIENT_SENDER {
            check_agent_name(&message.from).map_err(|r| invalid("from", r))?;
        }
        if message.text.len() > AGENT_MESSAGE_BYTES_MAX {
            return Err(invalid("text", format!("is longer than {AGENT_MESSAGE_BYTES_MAX} bytes")));
        }
        Ok(frame.body)
    }
}

impl AgentResponse {
    /// Canonical bytes.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        codec::encode(&Frame { v: AGENT_WIRE_VERSION, body: self })
    }

    /// Decodes a response from a peer.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let frame: Frame<Self> = crate::signed::decode_versioned(
            "agent response",
            bytes,
            AGENT_FRAME_BYTES_MAX,
            AGENT_WIRE_VERSION,
            |f: &Frame<Self>| f.v,
        )?;
        let invalid = |field, reason: &str| DecodeError::Invalid {
            what: "agent response",
            field,
            reason: reason.into(),
        };
        match &frame.body {
            Self::Refused { check, reason } if check.len() > 64 || reason.len() > 4096 => {
                Err(invalid("reason", "a refusal's check is at most 64 bytes and its reason 4 KiB"))
            }
            Self::Status { agents } if agents.len() > ADVERT_AGENTS_MAX => {
                Err(invalid("agents", "lists more agents than a node may run"))
            }
            Self::Status { agents }
                if agents.iter().any(|a| {
                    check_agent_name(&a.name).is_err()
                        || [&a.brain, &a.state, &a.language].iter().any(|t| t.len() > 256)
                }) =>
            {
                Err(invalid("agents", "an entry has a bad name or a field longer than 256 bytes"))
            }
            _ => Ok(frame.body),
        }
    }
}

#[cfg(test)]
mod tests;
