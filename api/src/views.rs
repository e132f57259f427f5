//! The JSON documents of the admin API (`/v1/peers`, `/v1/capsules`), shared by the node
//! that serves them and by `mur`, which reads them. Field by field in docs/src/api.md.

use serde::{Deserialize, Serialize};

/// `GET /v1/peers`: connected peers, and nodes known from the directory.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PeersView {
    /// This node's peer id.
    pub local_peer_id: String,
    /// Every connected or known node except this one, sorted by peer id.
    pub peers: Vec<PeerView>,
}

/// One connected or known node.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PeerView {
    pub peer_id: String,
    /// A libp2p connection is open.
    pub connected: bool,
    /// Closed mesh: the peer showed a valid certificate (always true in an open mesh).
    pub admitted: bool,
    /// Remote addresses of open connections, else the addresses its advert lists.
    pub addrs: Vec<String>,
    /// Round-trip time: the least of the last four pings.
    pub rtt_ms: Option<f64>,
    /// Milliseconds since we last heard from the peer (a ping, a message, an advert).
    pub last_seen_ms: Option<u64>,
    /// Sequence number of the advert we hold for it.
    pub advert_seq: Option<u64>,
    /// Capsules its advert lists.
    pub capsules: usize,
    /// Artifacts (manifests) its advert says it serves.
    #[serde(default)]
    pub artifacts: usize,
    /// Closed mesh: refused admission; its connections are denied for this many more ms.
    #[serde(default)]
    pub held_ms: Option<u64>,
}

/// `GET /v1/capsules`: every capsule in the directory and the nodes that host it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CapsulesView {
    /// Sorted by name.
    pub capsules: Vec<CapsuleView>,
}

/// One capsule name and its providers.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CapsuleView {
    pub name: String,
    /// Sorted by peer id.
    pub providers: Vec<ProviderView>,
}

/// One node hosting a capsule.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProviderView {
    pub peer_id: String,
    /// This node itself.
    pub local: bool,
    pub version: String,
    /// `sha256:…` of the artifact, when the capsule comes from the artifact store.
    pub digest: Option<String>,
    /// Milliseconds since the provider signed the advert we hold.
    pub advert_age_ms: u64,
    /// The provider's load, thousandths of capacity.
    pub load: u16,
}

/// `GET /v1/tasks/{id}/trace`: the session trace of an agent task this node owns.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskTraceView {
    pub task_id: String,
    pub capsule: String,
    pub session_id: String,
    /// The session's `trace.jsonl`, as written (one record per line).
    pub trace: String,
}

/// `GET /v1/status`: one screen of a node — itself, its peers, the mesh's directory, what
/// it runs, its tasks and pulls (`mur status`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StatusView {
    pub peer_id: String,
    /// `0.1.0 (git 1a2b3c4d5e)`.
    pub version: String,
    pub uptime_secs: u64,
    /// The API's address and the libp2p listen addresses.
    pub api: String,
    pub listen_addrs: Vec<String>,
    pub peers_connected: usize,
    /// Known from adverts but not connected.
    pub peers_known: usize,
    /// Refused admission (closed mesh), held off for a while.
    pub peers_held_off: usize,
    /// Nodes whose advert is held (this one included) and distinct capsule names.
    pub directory_nodes: usize,
    pub directory_capsules: usize,
    /// Capsules installed on this node: `NAME@VERSION (kind)`.
    pub installed: Vec<String>,
    pub agents_running: usize,
    pub agents: usize,
    pub mcp_up: usize,
    pub mcp: usize,
    /// Tasks this node owns and holds in memory, by state (`working`, `completed`, …):
    /// every unfinished one and the newest 10,000 finished (older ones are on disk only).
    pub tasks: std::collections::BTreeMap<String, u64>,
    /// Content digests being pulled now.
    pub pulls: Vec<String>,
}

/// `GET /v1/mcp`: one MCP server configured on the node, as its supervisor sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpServerView {
    pub name: String,
    /// `stdio` or `http`.
    pub transport: String,
    /// `starting`, `up`, `down` or `stopped`.
    pub state: String,
    /// The MCP version agreed, while up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    /// Why it is down, and in how many seconds the node tries again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_in_secs: Option<u64>,
    pub restarts: u64,
    pub requests_ok: u64,
    pub requests_failed: u64,
}

/// `GET /v1/models`: every model an agent of the mesh serves (OpenAI's list shape).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelsView {
    /// Always `list`.
    pub object: String,
    pub data: Vec<ModelView>,
}

/// One model, with the nodes whose agents serve it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelView {
    pub id: String,
    /// Always `model`.
    pub object: String,
    /// Always 0: a model of the mesh has no creation time.
    pub created: u64,
    /// Always `murmur`.
    pub owned_by: String,
    /// Peer ids of the nodes that serve it (an extension of OpenAI's shape).
    pub served_by: Vec<String>,
    /// Whether an agent of the answering node serves it.
    pub local: bool,
}

/// `GET /v1/agents`: every agent (brain) of the mesh.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentsView {
    pub agents: Vec<AgentView>,
}

/// One agent, as its node reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentView {
    pub name: String,
    /// The peer id of the node that runs it.
    pub node: String,
    /// It runs on the node that answered.
    pub local: bool,
    /// A file name or `NAME@VERSION` (empty when its node did not answer).
    pub brain: String,
    /// `rhai`, `js`, `wasm`.
    pub language: String,
    /// `starting`, `running`, `restarting`, `failed`, `stopped`, or `unknown` (its node did
    /// not answer: `error` says why).
    pub state: String,
    pub restarts: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// `POST /v1/agents/{name}/messages`: a message from this node's clients (`mur`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentMessageRequest {
    pub text: String,
}

/// One line of an agent's log (`GET /v1/agents/{name}/logs`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentLogLine {
    pub ts_ms: u64,
    pub level: String,
    /// `brain` (its own `log`) or `host` (the node about its runs).
    pub source: String,
    pub message: String,
}

/// `GET /v1/agents/{name}/memory`: what an agent keeps.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentMemoryView {
    pub agent: String,
    pub entries: Vec<AgentMemoryEntry>,
}

/// One key of an agent's memory.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentMemoryEntry {
    pub key: String,
    pub value: String,
}

/// `GET /v1/artifacts`: the node's artifact store, and the pulls under way.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArtifactsView {
    /// Sorted by name, then version.
    pub artifacts: Vec<ArtifactView>,
    /// Oldest first.
    pub pulls: Vec<PullView>,
}

/// One artifact of the store.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArtifactView {
    pub name: String,
    pub version: String,
    /// `tool`, `agent`, `driver`, …
    pub kind: String,
    /// `sha256:…` of the OCI manifest (the artifact's identity) and of the content.
    pub manifest: String,
    pub content: String,
    /// Content bytes.
    pub size: u64,
}

/// One pull under way.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PullView {
    pub name: String,
    pub version: String,
    /// `resolving` (asking providers), `waiting` (another pull of the same content runs)
    /// or `fetching`.
    pub state: String,
    /// `sha256:…` of the content, once resolved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// Verified content bytes written so far (resumed ones included), of `size`.
    pub written: u64,
    pub size: u64,
    /// Providers fetched from, and providers dropped for misbehaving.
    pub providers: usize,
    pub penalized: usize,
    pub elapsed_ms: u64,
}

/// One event of `GET /v1/tasks/events`: a task this node owns changed state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskChangeView {
    pub task_id: String,
    pub capsule: String,
    /// `submitted`, `working`, `input-required`, `completed`, `failed`, …
    pub state: String,
    /// The task's event number (the same as its A2A stream's).
    pub seq: u64,
    pub updated_ms: u64,
}
