//! Tasks across the mesh: identifiers, states, the `/murmur/task/1` messages, and the
//! grant checks made at both ends.
//!
//! A task is one message sent to one capsule. Its id is derived from who sent it and the
//! message id (`TaskId::derive`), so the same message submitted twice names the same task:
//! idempotency needs no coordination. The node that runs a task (its **owner**) keeps its
//! state and an event log with a per-task sequence number; other nodes ask the owner.
//!
//! Grants are checked twice. The sending node checks its capsule's grant before anything
//! leaves ([`check_outgoing`]); the receiving node checks the grant carried with the task
//! before it accepts ([`check_incoming`]): signature, trusted issuer, validity window, that
//! it names the sending capsule, that the sending node hosts that capsule, and that the
//! target is allowed. Each refusal names the failed check.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use crate::codec::{self, DecodeError, byte_array};
use crate::directory::Directory;
use crate::grant::{GrantError, GrantExpectation, verify_grant};
use crate::identity::{NodeId, PublicKey};
use crate::peer_url::PeerUrl;
use crate::revocation::Revocations;
use crate::signed::Envelope;
use crate::time::Millis;

/// The task message version this build writes and reads.
pub const TASK_WIRE_VERSION: u16 = 1;

/// Largest message text carried in a task.
pub const TASK_TEXT_BYTES_MAX: usize = 256 * 1024;
/// Largest task request or response on the wire.
pub const TASK_FRAME_BYTES_MAX: usize = 1024 * 1024;
/// Events returned by one `Events` request.
pub const TASK_EVENTS_MAX: usize = 256;
/// Bytes of an identifier chosen by a client (message id, context id).
pub const CLIENT_ID_BYTES_MAX: usize = 128;

/// A task's identity: 16 bytes, written as a UUID (`8-4-4-4-12` hex).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TaskId(#[serde(with = "byte_array")] pub [u8; 16]);

impl TaskId {
    /// The task that message `message_id` from `origin` names (`origin` identifies the
    /// sender: a capsule's node and name, or a client).
    #[must_use]
    pub fn derive(origin: &str, message_id: &str) -> Self {
        let mut hasher = Sha256::new();
        hasher.update(b"murmur/task-id/1\0");
        hasher.update(origin.as_bytes());
        hasher.update([0]);
        hasher.update(message_id.as_bytes());
        let digest = hasher.finalize();
        let mut id = [0u8; 16];
        id.copy_from_slice(&digest[..16]);
        Self(id)
    }
}

impl TaskId {
    /// The task that message `message_id` names when node `entry` places it for `sender`:
    /// the id an owner expects of every submit from `entry` ([`check_incoming`]), so a node
    /// can only create tasks in its own name, never squat or pre-empt another's.
    #[must_use]
    pub fn placed(entry: &NodeId, sender: &Sender, message_id: &str) -> Self {
        Self::derive(&origin(entry, sender), message_id)
    }
}

/// Who sends a task, as its id names it: `client@NODE` for a client of node `NODE`,
/// `NODE/CAPSULE` for one of its capsules.
#[must_use]
pub fn origin(entry: &NodeId, sender: &Sender) -> String {
    match sender {
        Sender::Client => format!("client@{entry}"),
        Sender::Capsule { name, .. } => format!("{entry}/{name}"),
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let h = hex::encode(self.0);
        write!(f, "{}-{}-{}-{}-{}", &h[..8], &h[8..12], &h[12..16], &h[16..20], &h[20..])
    }
}

impl fmt::Debug for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TaskId({self})")
    }
}

/// Why a task id's text could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a task id (32 hex digits, dashes optional)")]
pub struct TaskIdError(pub String);

impl FromStr for TaskId {
    type Err = TaskIdError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let hex_part: String = text.chars().filter(|c| *c != '-').collect();
        let mut id = [0u8; 16];
        hex::decode_to_slice(&hex_part, &mut id).map_err(|_| TaskIdError(text.to_owned()))?;
        Ok(Self(id))
    }
}

/// A task's state (A2A's names).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TaskState {
    Submitted,
    Working,
    InputRequired,
    Completed,
    Failed,
    Canceled,
    Rejected,
}

impl TaskState {
    /// Every state, in lifecycle order.
    pub const ALL: [Self; 7] = [
        Self::Submitted,
        Self::Working,
        Self::InputRequired,
        Self::Completed,
        Self::Failed,
        Self::Canceled,
        Self::Rejected,
    ];

    /// Whether the task can change no more.
    #[must_use]
    pub const fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Canceled | Self::Rejected)
    }

    /// The A2A 0.3 name (`input-required`).
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Submitted => "submitted",
            Self::Working => "working",
            Self::InputRequired => "input-required",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Canceled => "canceled",
            Self::Rejected => "rejected",
        }
    }

    /// The A2A 1.0 ProtoJSON name (`TASK_STATE_INPUT_REQUIRED`).
    #[must_use]
    pub fn as_v1(self) -> String {
        format!("TASK_STATE_{}", self.as_str().replace('-', "_").to_uppercase())
    }
}

impl fmt::Display for TaskState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for TaskState {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let wanted = text.trim().to_lowercase().replace('_', "-");
        let wanted = wanted.strip_prefix("task-state-").unwrap_or(&wanted);
        Self::ALL
            .into_iter()
            .find(|s| s.as_str() == wanted)
            .ok_or_else(|| format!("`{text}` is not a task state (submitted, working, input-required, completed, failed, canceled, rejected)"))
    }
}

/// Who sent a task.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub enum Sender {
    /// An external client, admitted by the entry node's policy (loopback or a token).
    Client,
    /// A capsule on the sending node, with the grant that allows it to send.
    Capsule { name: String, grant: Envelope },
}

/// A task handed to its owner: `/murmur/task/1` `Submit`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Submit {
    // Fields are in canonical key order (see `codec`).
    pub task: TaskId,
    pub text: String,
    pub sender: Sender,
    pub capsule: String,
    pub context: Option<String>,
    pub message: String,
    /// W3C trace context of the sender's span.
    pub traceparent: Option<String>,
    /// When not 0, the owner answers once the task is terminal or asks for input, or this
    /// many ms after accepting it (at most its events wait), whichever comes first: a
    /// sender that waits for the outcome needs one round trip, not two. Absent when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub settle_wait_ms: u32,
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if passes a reference
const fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// A request on `/murmur/task/1`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub enum TaskRequest {
    /// Accept and run this task.
    Submit(Submit),
    /// The task's current state.
    Get { task: TaskId },
    /// Cancel the task.
    Cancel { task: TaskId },
    /// A follow-up message for a task that asked for input.
    Reply { task: TaskId, text: String },
    /// Events after sequence number `after`, waiting up to `wait_ms` for one — or, with
    /// `settled`, until the task is terminal or asks for input (one round trip for a
    /// client that only wants the outcome).
    Events { task: TaskId, after: u64, wait_ms: u32, settled: bool },
}

/// A task as its owner reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskSnapshot {
    // Fields are in canonical key order (see `codec`).
    /// Sequence number of the latest event.
    pub seq: u64,
    pub task: TaskId,
    pub state: TaskState,
    pub capsule: String,
    pub context: String,
    /// The result text (completed) or the reason (failed, rejected, input-required prompt).
    pub message: Option<String>,
}

/// One change of a task, numbered per task from 1.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskEvent {
    // Fields are in canonical key order (see `codec`).
    pub seq: u64,
    pub text: Option<String>,
    pub state: TaskState,
}

/// An answer on `/murmur/task/1`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub enum TaskResponse {
    /// The owner accepted the task (or had already: idempotent).
    Accepted(TaskSnapshot),
    /// The owner refused; `check` names the failed check (`untrusted_issuer`,
    /// `not_hosted`, …) and nothing ran.
    Refused { check: String, reason: String },
    /// The task now.
    Snapshot(TaskSnapshot),
    /// Events after the requested sequence number; `snapshot` is set when older events
    /// were already dropped from the bounded log (`gap`).
    Events { events: Vec<TaskEvent>, snapshot: TaskSnapshot, gap: bool },
    /// The owner does not know this task.
    NotFound,
}

/// A frame with a version, for the request-response codec.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Frame<T> {
    pub v: u16,
    pub body: T,
}

impl TaskRequest {
    /// Canonical bytes.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        codec::encode(&Frame { v: TASK_WIRE_VERSION, body: self })
    }

    /// Decodes and validates a request from a peer.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let frame: Frame<Self> = crate::signed::decode_versioned(
            "task request",
            bytes,
            TASK_FRAME_BYTES_MAX,
            TASK_WIRE_VERSION,
            |f: &Frame<Self>| f.v,
        )?;
        frame.body.validate()?;
        Ok(frame.body)
    }

    fn validate(&self) -> Result<(), DecodeError> {
        let invalid = |field, reason: String| DecodeError::Invalid { what: "task request", field, reason };
        match self {
            Self::Submit(s) => {
                crate::names::check_capsule_name(&s.capsule).map_err(|r| invalid("capsule", r))?;
                if s.text.len() > TASK_TEXT_BYTES_MAX {
                    return Err(invalid("text", format!("is longer than {TASK_TEXT_BYTES_MAX} bytes")));
                }
                for (field, value) in [("message", Some(&s.message)), ("context", s.context.as_ref())] {
                    if value.is_some_and(|v| v.is_empty() || v.len() > CLIENT_ID_BYTES_MAX) {
                        return Err(invalid(field, format!("must be 1 to {CLIENT_ID_BYTES_MAX} bytes")));
                    }
                }
                if s.traceparent.as_ref().is_some_and(|t| t.len() > 128) {
                    return Err(invalid("traceparent", "is longer than 128 bytes".into()));
                }
                Ok(())
            }
            Self::Reply { text, .. } if text.len() > TASK_TEXT_BYTES_MAX => {
                Err(invalid("text", format!("is longer than {TASK_TEXT_BYTES_MAX} bytes")))
            }
            _ => Ok(()),
        }
    }
}

impl TaskResponse {
    /// Canonical bytes.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        codec::encode(&Frame { v: TASK_WIRE_VERSION, body: self })
    }

    /// Decodes a response from a peer.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let frame: Frame<Self> = crate::signed::decode_versioned(
            "task response",
            bytes,
            TASK_FRAME_BYTES_MAX,
            TASK_WIRE_VERSION,
            |f: &Frame<Self>| f.v,
        )?;
        if let Self::Events { events, .. } = &frame.body
            && events.len() > TASK_EVENTS_MAX
        {
            return Err(DecodeError::Invalid {
                what: "task response",
                field: "events",
                reason: format!("more than {TASK_EVENTS_MAX}"),
            });
        }
        Ok(frame.body)
    }
}

/// Why a task was refused, naming the failed check.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TaskRefusal {
    #[error("capsule `{capsule}` has no grant; it may send to nothing")]
    NoGrant { capsule: String },
    #[error("{0}")]
    Grant(GrantError),
    #[error(
        "grant {serial} of capsule `{capsule}` is revoked by its authority {authority} (revocation list {seq}): ask the authority for a new grant"
    )]
    GrantRevoked { capsule: String, serial: u64, authority: PublicKey, seq: u64 },
    #[error("the grant does not allow `{capsule}` to send to {target}")]
    TargetNotAllowed { capsule: String, target: String },
    #[error("the sending node {node} does not host capsule `{capsule}`")]
    SenderNotHosted { node: NodeId, capsule: String },
    #[error("this node does not run capsule `{capsule}`")]
    NotHosted { capsule: String },
    #[error("capsule `{capsule}` does not accept tasks (task_acceptance = none)")]
    NotAccepting { capsule: String },
    #[error("tasks from clients of other nodes are not accepted here")]
    ClientsRefused,
    #[error(
        "task id {task} is not the one node {node} names message {message:?} with: a node places tasks only in its own name (the id is TaskId::placed of the sending node, the sender and the message id)"
    )]
    ForeignTaskId { task: TaskId, node: NodeId, message: String },
}

impl TaskRefusal {
    /// The failed check, as a stable name (for JSON-RPC `data.check` and metrics).
    #[must_use]
    pub const fn check(&self) -> &'static str {
        match self {
            Self::NoGrant { .. } => "no_grant",
            Self::Grant(err) => err.reason(),
            Self::GrantRevoked { .. } => "revoked",
            Self::TargetNotAllowed { .. } => "target_not_allowed",
            Self::SenderNotHosted { .. } => "sender_not_hosted",
            Self::NotHosted { .. } => "not_hosted",
            Self::NotAccepting { .. } => "not_accepting",
            Self::ClientsRefused => "clients_refused",
            Self::ForeignTaskId { .. } => "foreign_task_id",
        }
    }
}

/// The check that refused a task request, as `/murmur/task/1` names it (a refusal's
/// `check` field). The wire keeps the name; decisions read the variant.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Check {
    /// This node does not run the capsule.
    NotHosted,
    /// The capsule takes no tasks.
    NotAccepting,
    /// A one-at-a-time capsule is busy.
    Busy,
    /// The owner (or the node answering) has too much queued.
    Overloaded,
    /// The capsule's audience does not include this sender (another host may).
    NotInAudience,
    /// No such task here.
    NotFound,
    /// The task is past being canceled.
    NotCancelable,
    /// The task is not waiting for input.
    NotWaiting,
    /// The answer was not one the request may get.
    Protocol,
    /// The owner failed while answering.
    Internal,
    /// Any other check (grants, the sender's identity: `no_grant`, `expired`, …), by name.
    Named(String),
}

impl Check {
    /// The check called `name` on the wire.
    #[must_use]
    pub fn named(name: &str) -> Self {
        match name {
            "not_hosted" => Self::NotHosted,
            "not_accepting" => Self::NotAccepting,
            "busy" => Self::Busy,
            "overloaded" => Self::Overloaded,
            "not_in_audience" => Self::NotInAudience,
            "not_found" => Self::NotFound,
            "not_cancelable" => Self::NotCancelable,
            "not_waiting" => Self::NotWaiting,
            "protocol" => Self::Protocol,
            "internal" => Self::Internal,
            other => Self::Named(other.to_owned()),
        }
    }

    /// The wire name.
    #[must_use]
    pub fn as_str(&self) -> &str {
        match self {
            Self::NotHosted => "not_hosted",
            Self::NotAccepting => "not_accepting",
            Self::Busy => "busy",
            Self::Overloaded => "overloaded",
            Self::NotInAudience => "not_in_audience",
            Self::NotFound => "not_found",
            Self::NotCancelable => "not_cancelable",
            Self::NotWaiting => "not_waiting",
            Self::Protocol => "protocol",
            Self::Internal => "internal",
            Self::Named(name) => name,
        }
    }

    /// Whether the refusal says nothing ran and another node may do better (the router
    /// tries the next candidate); any other refusal is final.
    #[must_use]
    pub const fn is_retryable(&self) -> bool {
        matches!(
            self,
            Self::NotHosted | Self::NotAccepting | Self::Busy | Self::Overloaded | Self::NotInAudience
        )
    }
}

impl std::fmt::Display for Check {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The sending node's check, before anything leaves: the capsule's grant is trusted, valid,
/// names it (and its artifact), and allows `target`.
pub fn check_outgoing(
    grant: Option<&Envelope>,
    authorities: &[PublicKey],
    revocations: &Revocations,
    now: Millis,
    capsule: &str,
    artifact: Option<&crate::Digest>,
    target: &PeerUrl,
) -> Result<(), TaskRefusal> {
    let grant = grant.ok_or_else(|| TaskRefusal::NoGrant { capsule: capsule.into() })?;
    let verified =
        verify_grant(grant.clone(), authorities, now, GrantExpectation { capsule: Some(capsule), artifact })
            .map_err(TaskRefusal::Grant)?;
    check_not_revoked(&verified, revocations)?;
    if !verified.doc().allows_target(target) {
        return Err(TaskRefusal::TargetNotAllowed { capsule: capsule.into(), target: target.to_string() });
    }
    Ok(())
}

/// Refuses a verified grant that a list of its own authority revokes.
fn check_not_revoked(
    grant: &crate::Signed<crate::Grant>,
    revocations: &Revocations,
) -> Result<(), TaskRefusal> {
    let serial = grant.doc().serial;
    match revocations.grant_revoked(&grant.signer(), serial) {
        Some(seq) => Err(TaskRefusal::GrantRevoked {
            capsule: grant.doc().capsule.clone(),
            serial,
            authority: grant.signer(),
            seq,
        }),
        None => Ok(()),
    }
}

/// The receiving node's check of a capsule-sent task, before it accepts: the grant carried
/// is trusted, valid and names the sending capsule; the sending node hosts that capsule
/// (by its advert in our directory); and the grant allows this target — `mesh://CAPSULE`
/// or `mesh://CAPSULE@THIS_NODE`.
pub fn check_incoming(
    submit: &Submit,
    from: &NodeId,
    this_node: &NodeId,
    authorities: &[PublicKey],
    directory: &Directory,
    now: Millis,
) -> Result<(), TaskRefusal> {
    if submit.task != TaskId::placed(from, &submit.sender, &submit.message) {
        return Err(TaskRefusal::ForeignTaskId {
            task: submit.task,
            node: *from,
            message: submit.message.clone(),
        });
    }
    let Sender::Capsule { name, grant } = &submit.sender else { return Ok(()) };
    let sender_artifact = directory.get(from).and_then(|r| r.advert().hosts(name).and_then(|c| c.digest));
    let verified = verify_grant(
        grant.clone(),
        authorities,
        now,
        GrantExpectation { capsule: Some(name), artifact: sender_artifact.as_ref() },
    )
    .map_err(TaskRefusal::Grant)?;
    check_not_revoked(&verified, directory.revocations())?;
    let hosted =
        directory.get(from).is_some_and(|r| r.expires_at() > now && r.advert().hosts(name).is_some());
    if !hosted {
        return Err(TaskRefusal::SenderNotHosted { node: *from, capsule: name.clone() });
    }
    let unpinned = PeerUrl::Mesh { capsule: submit.capsule.clone(), node: None };
    let pinned = PeerUrl::Mesh { capsule: submit.capsule.clone(), node: Some(*this_node) };
    if !verified.doc().allows_target(&unpinned) && !verified.doc().allows_target(&pinned) {
        return Err(TaskRefusal::TargetNotAllowed { capsule: name.clone(), target: unpinned.to_string() });
    }
    Ok(())
}

#[cfg(test)]
mod tests;
