//! Models across the mesh: agents served as OpenAI-compatible models. An agent subscribes
//! a model name on its node; the node advertises it ([`crate::Advert::models`]); any
//! node's `/v1` endpoint serves every model of the mesh by opening a `/murmur/model/1`
//! stream to a node that serves it. This module holds what every node decides the same
//! way — which node a request goes to ([`candidates`]), whether a peer may open one
//! ([`check_caller`]) — and the stream's frames.
//!
//! A stream carries one chat completion: the server first writes [`ModelFrame::Ready`]
//! (it took the stream: a stream reset before it never carried the request, so the
//! caller may try again); the caller writes one [`ModelOpen`]; the server answers
//! [`ModelFrame::Accepted`] (the session exists and the agent has the request) or
//! [`ModelFrame::Refused`] (it provably did not take it: the caller may try the next
//! candidate), then [`ModelFrame::Deltas`] batches and exactly one [`ModelFrame::End`].
//! The caller closing the stream cancels the session. Frames are length-prefixed (a
//! 4-byte big-endian length, then canonical CBOR), bounded by [`MODEL_OPEN_BYTES_MAX`]
//! and [`MODEL_FRAME_BYTES_MAX`].
//!
//! ```
//! use murmur_protocol::model::check_model_name;
//! assert!(check_model_name("echo-model").is_ok());
//! assert!(check_model_name("meta/llama-3.1:8b").is_ok());
//! assert!(check_model_name("no spaces").is_err());
//! ```

use serde::{Deserialize, Serialize};

use crate::codec::{self, DecodeError};
use crate::directory::Directory;
use crate::identity::NodeId;
use crate::route::{CANDIDATES_MAX, cost};
use crate::task::Frame;
use crate::time::Millis;

/// The `/murmur/model/1` frame version this build writes and reads.
pub const MODEL_WIRE_VERSION: u16 = 1;
/// The longest model name.
pub const MODEL_NAME_LEN_MAX: usize = 128;
/// Models one node may serve (one advert lists at most this many).
pub const ADVERT_MODELS_MAX: usize = 64;
/// The largest request a caller may send: the whole chat history and tools.
pub const MODEL_OPEN_BYTES_MAX: usize = 4 * 1024 * 1024;
/// The largest frame a server may send (a batch of deltas stays under it).
pub const MODEL_FRAME_BYTES_MAX: usize = 256 * 1024;
/// The largest single delta's text (content, reasoning or tool-call arguments).
pub const DELTA_TEXT_BYTES_MAX: usize = 64 * 1024;
/// Messages and tools of one request.
pub const REQUEST_MESSAGES_MAX: usize = 4096;
pub const REQUEST_TOOLS_MAX: usize = 256;
/// The cost one open session to a node adds to it (as many ms of round trip): requests
/// spread over equally good nodes instead of piling onto the first.
pub const SESSION_COST: u64 = 5;

/// How much costlier than the best a node may be and still take turns with it: a quarter
/// of the best cost, at least 5 (round trips measured in whole ms differ by one on the
/// same LAN; such nodes are equally good).
#[must_use]
pub const fn spread_margin(best: u64) -> u64 {
    let quarter = best / 4;
    if quarter > 5 { quarter } else { 5 }
}

/// Checks a model name: 1 to [`MODEL_NAME_LEN_MAX`] bytes of ASCII letters, digits and
/// `-_.:/`, starting with a letter or digit (the names OpenAI clients send).
pub fn check_model_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MODEL_NAME_LEN_MAX {
        return Err(format!(
            "a model name is 1 to {MODEL_NAME_LEN_MAX} bytes, `{}` is {}",
            short(name),
            name.len()
        ));
    }
    let first_ok = name.as_bytes()[0].is_ascii_alphanumeric();
    let rest_ok = name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.:/".contains(&b));
    if !first_ok || !rest_ok {
        return Err(format!(
            "model name `{}` must start with a letter or digit and hold only letters, digits and `-_.:/`",
            short(name)
        ));
    }
    Ok(())
}

fn short(text: &str) -> String {
    text.chars().take(64).collect()
}

/// The nodes to try for a request for `model`, best first: this node when it serves it
/// (`local_serves`, its own table), then every other node whose valid advert lists it, by
/// [`cost`] plus [`SESSION_COST`] per session this node has open to it (`open`). Nodes
/// about as cheap as the best ([`spread_margin`]) take turns: `turn` (a counter the caller
/// increments per request) rotates them, so requests spread. Nodes in `tried` are left out (they provably refused).
#[expect(clippy::too_many_arguments, reason = "every input of the decision, named")]
pub fn candidates(
    directory: &Directory,
    now: Millis,
    local: NodeId,
    local_serves: bool,
    model: &str,
    tried: &[NodeId],
    rtt: &dyn Fn(&NodeId) -> Option<u32>,
    open: &dyn Fn(&NodeId) -> u32,
    turn: u64,
) -> Vec<NodeId> {
    let mut ranked: Vec<(u64, NodeId)> = directory
        .model_hosts(now, model)
        .filter(|node| *node != local && !tried.contains(node))
        .map(|node| {
            let load = directory.get(&node).map_or(0, |r| r.advert().load);
            (cost(local, node, rtt(&node), load) + SESSION_COST * u64::from(open(&node)), node)
        })
        .collect();
    ranked.sort();
    // Rotate the nodes about as cheap as the best (within [`spread_margin`]) by `turn`.
    let best = ranked.first().map_or(0, |f| f.0);
    let ties = ranked.iter().take_while(|(c, _)| *c <= best + spread_margin(best)).count();
    if ties > 1 {
        ranked[..ties].rotate_left(usize::try_from(turn % ties as u64).unwrap_or(0));
    }
    let mut nodes: Vec<NodeId> = Vec::with_capacity(ranked.len() + 1);
    if local_serves && !tried.contains(&local) {
        nodes.push(local);
    }
    nodes.extend(ranked.into_iter().map(|(_, node)| node));
    nodes.truncate(CANDIDATES_MAX);
    nodes
}

/// Why a node refuses a peer's request (the `check` of [`ModelFrame::Refused`]). Every
/// refusal means the request was not taken: the caller may try another node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModelCheck {
    /// The frame did not decode or broke a bound.
    Malformed,
    /// The peer is not a member of the mesh (no valid advert here).
    NotMember,
    /// No agent of this node serves the model (any more).
    NotServed,
    /// This node has as many sessions open as it takes, or the agent's inbox is full.
    Busy,
}

impl ModelCheck {
    pub const ALL: [Self; 4] = [Self::Malformed, Self::NotMember, Self::NotServed, Self::Busy];

    /// The stable name (metrics, errors).
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Malformed => "malformed",
            Self::NotMember => "not_member",
            Self::NotServed => "not_served",
            Self::Busy => "busy",
        }
    }
}

impl std::fmt::Display for ModelCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The receiving end's check of a caller: a member of the mesh, with a valid advert in
/// `directory` (in a closed mesh only admitted nodes have one).
pub fn check_caller(directory: &Directory, now: Millis, peer: &NodeId) -> Result<(), ModelCheck> {
    if directory.get(peer).is_some_and(|r| r.expires_at() > now) {
        Ok(())
    } else {
        Err(ModelCheck::NotMember)
    }
}

/// One tool call of a chat message, complete.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolCall {
    // Fields are in canonical key order (see `codec`).
    pub id: String,
    pub name: String,
    pub arguments: String,
}

/// A piece of a streamed tool call: the call at `index`, with what this chunk adds.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolCallDelta {
    // Fields are in canonical key order (see `codec`).
    pub id: Option<String>,
    pub name: Option<String>,
    pub index: u32,
    pub arguments: Option<String>,
}

/// Token counts of a completion.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Usage {
    // Fields are in canonical key order (see `codec`).
    pub total_tokens: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

/// One chunk of a reply; every part optional. A delta with a finish reason ends it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChatDelta {
    // Fields are in canonical key order (see `codec`).
    pub usage: Option<Usage>,
    pub content: Option<String>,
    pub reasoning: Option<String>,
    pub tool_call: Option<ToolCallDelta>,
    pub finish_reason: Option<String>,
}

impl ChatDelta {
    /// Bytes of text this delta carries.
    #[must_use]
    pub fn text_len(&self) -> usize {
        let call = self.tool_call.as_ref().map_or(0, |c| {
            c.arguments.as_ref().map_or(0, String::len)
                + c.name.as_ref().map_or(0, String::len)
                + c.id.as_ref().map_or(0, String::len)
        });
        self.content.as_ref().map_or(0, String::len) + self.reasoning.as_ref().map_or(0, String::len) + call
    }

    /// Checks a delta an agent streams or a peer sends.
    pub fn check(&self) -> Result<(), String> {
        if self.text_len() > DELTA_TEXT_BYTES_MAX {
            return Err(format!(
                "a delta carries at most {DELTA_TEXT_BYTES_MAX} bytes of text, this one {}",
                self.text_len()
            ));
        }
        if let Some(reason) = &self.finish_reason
            && (reason.is_empty() || reason.len() > 64)
        {
            return Err("a finish reason is 1 to 64 bytes".into());
        }
        Ok(())
    }
}

/// One message of a chat history (OpenAI's roles); content is text.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChatMessage {
    // Fields are in canonical key order (see `codec`).
    pub name: Option<String>,
    pub role: String,
    pub content: Option<String>,
    pub tool_calls: Vec<ToolCall>,
    pub tool_call_id: Option<String>,
}

/// A tool a client offers the model: its JSON Schema as text.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolSpec {
    // Fields are in canonical key order (see `codec`).
    pub name: String,
    pub parameters: Option<String>,
    pub description: Option<String>,
}

/// A chat completion request as the agent sees it: the history, the tools, and every
/// other generation setting as one opaque JSON object text.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChatRequest {
    // Fields are in canonical key order (see `codec`).
    pub tools: Vec<ToolSpec>,
    pub params: Option<String>,
    pub messages: Vec<ChatMessage>,
}

impl ChatRequest {
    /// Checks the bounds of a request.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        if self.messages.is_empty() {
            return Err(("messages", "must hold at least one message".into()));
        }
        if self.messages.len() > REQUEST_MESSAGES_MAX {
            return Err((
                "messages",
                format!("holds {} messages, more than {REQUEST_MESSAGES_MAX}", self.messages.len()),
            ));
        }
        if self.tools.len() > REQUEST_TOOLS_MAX {
            return Err((
                "tools",
                format!("holds {} tools, more than {REQUEST_TOOLS_MAX}", self.tools.len()),
            ));
        }
        for message in &self.messages {
            if !["system", "developer", "user", "assistant", "tool"].contains(&message.role.as_str()) {
                return Err((
                    "messages",
                    format!(
                        "role `{}` is not system, developer, user, assistant or tool",
                        short(&message.role)
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// What a caller writes first on a `/murmur/model/1` stream.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelOpen {
    // Fields are in canonical key order (see `codec`).
    pub model: String,
    pub request: ChatRequest,
}

/// What a server writes on a `/murmur/model/1` stream.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub enum ModelFrame {
    /// The server took the stream and reads the request now.
    Ready,
    /// The session exists and the agent has the request: from here on the request is
    /// taken (no failover).
    Accepted { session: String },
    /// Not taken; `check` names why ([`ModelCheck::as_str`]).
    Refused { check: String, reason: String },
    /// Deltas in the order the agent streamed them.
    Deltas(Vec<ChatDelta>),
    /// The session ended: normally, or with why.
    End { error: Option<String> },
}

impl ModelOpen {
    /// Canonical bytes.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        codec::encode(&Frame { v: MODEL_WIRE_VERSION, body: self })
    }

    /// Decodes and validates a caller's request.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let frame: Frame<Self> = crate::signed::decode_versioned(
            "model request",
            bytes,
            MODEL_OPEN_BYTES_MAX,
            MODEL_WIRE_VERSION,
            |f: &Frame<Self>| f.v,
        )?;
        let invalid = |field, reason: String| DecodeError::Invalid { what: "model request", field, reason };
        check_model_name(&frame.body.model).map_err(|r| invalid("model", r))?;
        frame.body.request.check().map_err(|(field, r)| invalid(field, r))?;
        Ok(frame.body)
    }
}

impl ModelFrame {
    /// Canonical bytes.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        codec::encode(&Frame { v: MODEL_WIRE_VERSION, body: self })
    }

    /// Decodes and validates a server's frame.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let frame: Frame<Self> = crate::signed::decode_versioned(
            "model frame",
            bytes,
            MODEL_FRAME_BYTES_MAX,
            MODEL_WIRE_VERSION,
            |f: &Frame<Self>| f.v,
        )?;
        let invalid = |field, reason: String| DecodeError::Invalid { what: "model frame", field, reason };
        match &frame.body {
            Self::Accepted { session } if session.is_empty() || session.len() > 64 => {
                Err(invalid("session", "is 1 to 64 bytes".into()))
            }
            Self::Refused { check, reason } if check.len() > 64 || reason.len() > 4096 => {
                Err(invalid("reason", "a refusal's check is at most 64 bytes and its reason 4 KiB".into()))
            }
            Self::End { error: Some(error) } if error.len() > 4096 => {
                Err(invalid("error", "is at most 4 KiB".into()))
            }
            Self::Deltas(deltas) => {
                for delta in deltas {
                    delta.check().map_err(|r| invalid("deltas", r))?;
                }
                Ok(frame.body)
            }
            _ => Ok(frame.body),
        }
    }
}

#[cfg(test)]
mod tests;
