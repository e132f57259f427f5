//! Every bound of the daemon, in one place: what `murnode` (its network driver, task
//! service, runtime and store) and `mur` hold at most, and how long they wait. The
//! protocol's own bounds, and the daemon bounds the simulator models (task requests in
//! flight, owner queues, owner waits), are in [`murmur_protocol::limits`]: the simulator
//! imports those instead of copying them.
//!
//! Each bound says why it has its value. When input goes past one, it is refused or
//! dropped, counted and logged; nothing grows without limit.

use std::time::Duration;

use murmur_protocol::limits::{ADVERT_ARTIFACTS_MAX, TASK_INBOUND_MAX};
use murmur_protocol::task::{TASK_FRAME_BYTES_MAX, TASK_TEXT_BYTES_MAX};

// --- Configuration (murnode.toml) ---

/// Listen addresses: a node has a few interfaces times two transports; its advert carries
/// at most [`murmur_protocol::limits::ADVERT_ADDRS_MAX`] of them anyway.
pub const LISTEN_ADDRS_MAX: usize = 16;
/// Pinned artifacts one config holds: each is checked every [`PINS_EVERY`]; a site pins
/// tens, 256 leaves headroom without letting a typo'd loop flood the checks.
pub const PINS_MAX: usize = 256;
/// Bearer tokens one config holds: every request compares against each in full (constant
/// time), so the list stays short.
pub const API_TOKENS_MAX: usize = 64;
/// Entries of `[credentials]`: one per provider account an agent's driver may be given.
pub const CREDENTIALS_MAX: usize = 64;
/// `[[mcp]]` servers one node runs or reaches: each stdio server is a process of its own.
pub const MCP_SERVERS_MAX: usize = 32;
/// Bytes of one MCP answer handed to a brain (a tool's text, a resource's content as
/// delivered, a resource list as JSON): brains get documents, not disks; a larger answer
/// is an error naming the size.
pub const MCP_ANSWER_BYTES_MAX: usize = 1 << 20;
/// Resources of one listed server a brain gets (`resource-list-updated`).
pub const MCP_RESOURCES_MAX: usize = 1024;
/// Requests in flight to one MCP server at once; more wait their turn.
pub const MCP_REQUESTS_MAX: usize = 32;
/// Tool calls one brain run has queued at once (`tooling.call-tool`).
pub const TOOL_CALLS_PER_RUN_MAX: usize = 64;
/// Resource subscriptions one brain run holds (`tooling.subscribe-*`).
pub const RESOURCE_WATCHES_PER_RUN_MAX: usize = 64;
/// Bytes of one credential (a value, or the file it is read from): keys and tokens, not
/// documents.
pub const CREDENTIAL_BYTES_MAX: u64 = 64 * 1024;

// --- The store (murmur-store) ---

/// Largest content blob accepted (a component is typically tens to hundreds of KiB; models
/// and native tools can be far larger, and 1 GiB still fits a pull's memory-mapped file).
pub const ARTIFACT_CONTENT_BYTES_MAX: u64 = 1 << 30;
/// Largest publisher signature kept beside a manifest (the protocol decides it: an offer
/// with a larger one counts as unsigned).
pub use murmur_protocol::limits::ARTIFACT_SIGNATURE_BYTES_MAX;
/// Largest manifest or config blob: an OCI manifest of three layers, or metadata with a
/// 16 KiB description and two 16 KiB schemas, fits.
pub const ARTIFACT_METADATA_BYTES_MAX: u64 = 64 * 1024;
/// Artifacts (name@version) one store indexes: the index is read whole on each lookup,
/// and 10,000 entries are about 3 MiB of JSON.
pub const STORE_ARTIFACTS_MAX: usize = 10_000;
/// Tags per artifact: search reads them all.
pub const ARTIFACT_TAGS_MAX: usize = 32;
/// Bytes of an artifact's description or each schema.
pub const ARTIFACT_TEXT_BYTES_MAX: usize = 16 * 1024;
/// Entries one `murmur.lock` holds: a capsule pins the tools it uses, tens at most.
pub const LOCK_ENTRIES_MAX: usize = 1024;
/// Largest `oci-layout` or `index.json` entry of a bundle: an index of
/// [`STORE_ARTIFACTS_MAX`] would need more, but a bundle carries what one site moves at
/// once.
pub const BUNDLE_LAYOUT_FILE_BYTES_MAX: u64 = 1024 * 1024;

// --- The runtime (murmur-runtime) ---

/// Largest capsule manifest file read: a manifest is a page of TOML.
pub const MANIFEST_BYTES_MAX: u64 = 64 * 1024;
/// Memory a capsule may be granted at most (the pooling allocator's slot size).
pub const MEMORY_MB_MAX: u64 = 1024;
/// Longest deadline a capsule may be granted (10 minutes): longer work is a task that
/// asks for input or reports progress, not one call.
pub const DEADLINE_MS_MAX: u64 = 600_000;
/// Entries per manifest allowlist and environment, as a grant's own lists.
pub const MANIFEST_ALLOW_ENTRIES_MAX: usize = 64;
/// Capsules and tools one node runs: each holds a compiled component and an
/// `InstancePre` in memory.
pub const INSTALLED_MAX: usize = 256;
/// Component instances alive at once across the node (each call instantiates one; nested
/// tool invocations add one per level); the pooling allocator reserves a slot for each.
pub const INSTANCES_MAX: u32 = 128;
/// Deepest nesting of tool invocations (capsule → tool → tool …). Stops invocation loops.
pub const INVOKE_DEPTH_MAX: u32 = 4;
/// Bytes of a capsule's stdout or stderr kept per run.
pub const CAPTURE_BYTES_MAX: usize = 64 * 1024;
/// Inference turns per run of an agent task's loop at most: a model still calling tools
/// after this many turns is looping, and every turn is a paid provider call.
pub const AGENT_TURNS_MAX: u32 = 256;
/// `reopen-task` commits per task at most: each reruns the whole loop.
pub const AGENT_REOPENS_MAX: u32 = 16;
/// The largest context window an agent may declare (tokens): above every model offered
/// today, and below what the host could count per turn without becoming the bottleneck.
pub const AGENT_CONTEXT_WINDOW_MAX: u64 = 10_000_000;
/// `[[hooks]]` per agent: each sync hook runs at every stage of every turn.
pub const AGENT_HOOKS_MAX: usize = 16;
/// Bytes of a session trace `mur trace` reads into memory: a long session's records (a few
/// hundred bytes each) fit many times over; a file larger than this is not a trace.
pub const TRACE_FILE_BYTES_MAX: u64 = 256 * 1024 * 1024;
/// Bytes of each shell stream returned to the guest (the runtime specification's cut).
pub const SHELL_OUTPUT_BYTES_MAX: usize = 16 * 1024;
/// Bytes of each shell stream kept for the full-output file; beyond this the child's
/// output is read and discarded (and the file says so).
pub const SHELL_FULL_OUTPUT_BYTES_MAX: usize = 16 * 1024 * 1024;
/// Arguments and environment entries per shell call.
pub const SHELL_ARGS_MAX: usize = 1024;
/// How long a direct peer may take to accept a message (A2A `message/send` over HTTP).
pub const MESSAGE_SEND_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest answer read from a direct peer: a task state is a few hundred bytes.
pub const MESSAGE_RESPONSE_BYTES_MAX: usize = 1024 * 1024;
/// Largest message text a capsule sends: what a task carries on `/murmur/task/1`.
pub const MESSAGE_BYTES_MAX: usize = 1024 * 1024;
/// Most chunks one `murmur:text/chunks.split` returns.
pub const TEXT_CHUNKS_MAX: usize = 65_536;
/// Longest `request-input` prompt kept (the rest is cut at a character boundary).
pub const INPUT_PROMPT_BYTES_MAX: usize = 16 * 1024;

// --- The network driver (murmur-net) ---

/// A task request covers acceptance (a durable write at the owner) or one bounded events
/// wait, never a whole task: 10 s is far beyond either.
pub const TASK_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Concurrent task streams per connection (64 clients with headroom).
pub const TASK_STREAMS_MAX: usize = 512;
/// An agent message is answered as soon as it is in an inbox (or refused): 10 s means the
/// peer is gone or frozen.
pub const AGENT_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Concurrent agent streams per connection: one per sending agent in flight, with headroom.
pub const AGENT_STREAMS_MAX: usize = 256;
/// Agent messages this node has in flight to peers at once; past this a send fails at once
/// as overloaded (each waits for its answer, and a brain sends one at a time).
pub const AGENT_OUTBOUND_MAX: usize = 1024;
/// One chunk (1 MiB) takes milliseconds on a LAN; 30 s covers a slow WAN link. The pull
/// scheduler's own, shorter timeout usually acts first.
pub const ARTIFACT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Concurrent artifact streams per connection: a pull keeps a few chunks in flight per
/// provider; several pulls may share a peer.
pub const ARTIFACT_STREAMS_MAX: usize = 64;
/// A sync exchange is one round trip of at most 1 MiB each way.
pub const SYNC_TIMEOUT: Duration = Duration::from_secs(10);
/// Concurrent sync streams per connection: one each way is the normal case.
pub const SYNC_STREAMS_MAX: usize = 8;
/// Connections to one peer: two covers a simultaneous dial from both ends.
pub const CONNECTIONS_PER_PEER_MAX: u32 = 2;
/// Bytes of task requests one connection may have arriving at once (four of the largest
/// frames; thousands of typical ones). A peer that overruns it is cut off and held off.
pub const TASK_REQUEST_BYTES_PER_CONNECTION: usize = 4 << 20;
/// Bytes of agent messages one connection may have arriving at once (32 of the largest).
pub const AGENT_REQUEST_BYTES_PER_CONNECTION: usize = 2 << 20;
/// Bytes of sync requests one connection may have arriving at once (two of the largest).
pub const SYNC_REQUEST_BYTES_PER_CONNECTION: usize = 2 << 20;
/// Bytes of artifact requests one connection may have arriving at once: a request names a
/// blob range or a name@version (under a kilobyte); only answers carry chunks.
pub const ARTIFACT_REQUEST_BYTES_PER_CONNECTION: usize = 1 << 20;
/// Bytes of requests from all peers arriving at once. Over it, new requests fail (and are
/// retried by their senders) without any peer being blamed.
pub const REQUEST_BYTES_IN_FLIGHT_MAX: usize = 128 << 20;
/// Request overruns reported to the network driver and not yet handled (more are dropped:
/// the peer's next stream reports again).
pub const REQUEST_OVERRUNS_PENDING_MAX: usize = 256;
/// So the bytes one peer can hold in this node's read buffers at once are at most
/// `CONNECTIONS_PER_PEER_MAX` × the sum of the per-connection budgets (18 MiB).
pub const REQUEST_BYTES_PER_PEER_MAX: usize = CONNECTIONS_PER_PEER_MAX as usize
    * (TASK_REQUEST_BYTES_PER_CONNECTION
        + AGENT_REQUEST_BYTES_PER_CONNECTION
        + SYNC_REQUEST_BYTES_PER_CONNECTION
        + ARTIFACT_REQUEST_BYTES_PER_CONNECTION);
// Every protocol's largest legitimate request fits its connection budget.
const _: () = assert!(TASK_REQUEST_BYTES_PER_CONNECTION > murmur_protocol::task::TASK_FRAME_BYTES_MAX);
const _: () = assert!(AGENT_REQUEST_BYTES_PER_CONNECTION > murmur_protocol::limits::AGENT_FRAME_BYTES_MAX);
const _: () = assert!(SYNC_REQUEST_BYTES_PER_CONNECTION > murmur_protocol::limits::SYNC_REQUEST_BYTES_MAX);
const _: () = assert!(REQUEST_BYTES_PER_PEER_MAX <= 18 << 20);
/// Longest the driver's loop sleeps without looking at the clock again.
pub const DRIVER_TICK_MAX: Duration = Duration::from_secs(5);
/// Gossip messages and sync requests awaiting the mesh's answer. The mesh answers within
/// the same `handle` call, so these hold at most one entry in practice.
pub const DRIVER_PENDING_MAX: usize = 1024;
/// Artifact requests from peers served at once (each holds up to one chunk in memory);
/// more are answered "busy". Eight pullers at their full 16 requests each fit.
pub const ARTIFACT_SERVING_MAX: usize = 128;
/// Artifact requests to peers in flight at once, for every pull together; more fail at
/// once. Sixteen pulls at their full 64 chunks each fit.
pub const ARTIFACT_OUTBOUND_MAX: usize = 1024;
/// Queries (peers, capsules, metrics) waiting for the driver. The API answers 503 rather
/// than queue more.
pub const QUERY_QUEUE_MAX: usize = 64;
/// Task work (placements, questions to owners) waiting for the driver; senders wait when
/// it is full, so the exchange's own bounds act first.
pub const TASK_QUERY_QUEUE_MAX: usize = 1024;
/// Agent sends and status questions waiting for the driver; senders wait when it is full.
pub const AGENT_QUERY_QUEUE_MAX: usize = 1024;
/// Artifact work (requests for pulls) waiting for the driver; senders wait when it is full.
pub const ARTIFACT_QUERY_QUEUE_MAX: usize = 1024;
/// How long the API waits for the driver to answer a query.
pub const QUERY_TIMEOUT: Duration = Duration::from_secs(5);
/// How long start-up waits for every listener to report its address.
pub const LISTEN_TIMEOUT: Duration = Duration::from_secs(10);
/// Callers waiting for the placement of one task (the same message sent again while its
/// first send is being placed, by a double click or a proxy); more are refused.
pub const ROUTE_WAITERS_MAX: usize = 64;
/// Owner hand-offs (acceptances and answers to peers) reporting back to the driver at
/// once: one per request the exchange may have open.
pub const TASK_REPORTS_MAX: usize = TASK_INBOUND_MAX;

// --- The node (murmur-node) ---

/// How often the node checks its store for artifacts to advertise (added by `mur artifact
/// add` or `mur bundle import` while it runs; its own pulls advertise at once). A check is
/// one `stat` of the index unless it changed.
pub const ADVERTISE_EVERY: Duration = Duration::from_secs(1);
/// How often the node checks whether it should hold a pinned artifact it lacks.
pub const PINS_EVERY: Duration = Duration::from_secs(3);
/// Manifests advertised at most (the advert's own bound).
pub const ADVERTISED_ARTIFACTS_MAX: usize = ADVERT_ARTIFACTS_MAX;
/// Events a task keeps for streams that reconnect. A stream resuming after an event older
/// than the log gets the current snapshot instead, marked as a gap.
pub const TASK_EVENT_LOG_MAX: usize = 64;
/// Largest result or failure text a task keeps; longer text is cut (a terminal task's
/// text travels twice in an `events` answer, within `/murmur/task/1`'s 1 MiB frames).
pub const RESULT_BYTES_MAX: usize = 256 * 1024;
/// Largest stored task record read back (input and result text are bounded by the
/// protocol; the event log adds at most [`TASK_EVENT_LOG_MAX`] short events).
pub const TASK_RECORD_BYTES_MAX: usize = 4 * TASK_FRAME_BYTES_MAX;
/// How often finished tasks and routes past their retention are pruned.
pub const TASK_PRUNE_EVERY: std::time::Duration = std::time::Duration::from_secs(60);
/// How often the data directory is swept of what dead processes left (temporary files),
/// abandoned pulls and old shell logs (`node/src/housekeeping.rs`).
pub const HOUSEKEEPING_EVERY: std::time::Duration = std::time::Duration::from_secs(3600);
/// Task writes queued for the database's writer thread at most; callers wait when it is
/// full.
pub const TASK_DB_WRITE_QUEUE_MAX: usize = 8192;
/// Memory the task database may use to cache its pages and buffer a commit (redb's own
/// default is 1 GiB, which a busy node's file fills: its RSS then grows with the file).
pub const TASK_DB_CACHE_BYTES: usize = 64 * 1024 * 1024;
/// The same for the agents' memory database (`brains.redb`), whose values are small.
pub const BRAIN_DB_CACHE_BYTES: usize = 16 * 1024 * 1024;
/// Task records committed in one transaction at most: a burst shares one fsync, and a
/// transaction stays a few MiB.
pub const TASK_DB_BATCH_MAX: usize = 1024;
/// Longest a task write nobody waits for stays in memory only.
pub const TASK_DB_FLUSH_AFTER: Duration = Duration::from_secs(1);
/// Routes (tasks placed on other nodes) kept in memory for listing, newest first; older
/// ones stay on disk.
pub const RECENT_ROUTES_MAX: usize = 1024;
/// Routed tasks whose state `list` asks their owners for.
pub const TASK_LIST_REMOTE_MAX: usize = 100;
/// How long `list` waits for an owner's answer.
pub const TASK_LIST_REMOTE_WAIT: Duration = Duration::from_secs(2);
/// Longest a blocking `message/send` waits for the task to finish or ask for input;
/// after that it answers with the task as it is.
pub const A2A_BLOCKING_WAIT_MAX: Duration = Duration::from_secs(60);
/// SSE streams open at once per node: each holds a connection and a task's event wait.
pub const A2A_STREAMS_MAX: usize = 1024;
/// Largest JSON-RPC request body: the largest task text plus the JSON around it.
pub const A2A_REQUEST_BYTES_MAX: usize = TASK_TEXT_BYTES_MAX + 64 * 1024;
/// Finished tasks a node holds in memory by default (`tasks.finished_in_memory`): the
/// owner machine's bound, which the simulator uses too.
pub const TASKS_FINISHED_IN_MEMORY: usize = murmur_protocol::limits::OWNER_FINISHED_MAX;
/// The most `tasks.finished_in_memory` may say: half of what memory holds of tasks in all
/// (a start-up loads no more finished ones than that), leaving the rest to unfinished ones.
pub const TASKS_FINISHED_IN_MEMORY_MAX: usize = murmur_protocol::limits::OWNER_LIVE_MAX / 2;
/// Tasks per `ListTasks` page at most.
pub const A2A_PAGE_SIZE_MAX: usize = 100;
/// Finished tasks one `ListTasks` page reads from the task database at most, once the
/// tasks in memory are listed: a filter that matches few of them gives a short page (with
/// a token to go on) rather than a scan of the whole file.
pub const A2A_LIST_DISK_READ_MAX: usize = 1000;
/// Pull progress lines buffered for a slow client; past this, progress lines (never the
/// final line) are dropped.
pub const PULL_PROGRESS_QUEUE_MAX: usize = 64;
/// Offered manifests a pull tries at most (with a content pin, each is fetched to be
/// checked).
pub const PULL_CANDIDATES_MAX: usize = 4;
/// A pull that writes no chunk for this long fails (no provider serves good bytes).
pub const PULL_IDLE_MAX: Duration = Duration::from_secs(60);
/// How often a running pull looks for new providers (nodes that finished pulling the same
/// artifact advertise it, and take load off the first ones).
pub const PULL_PROVIDER_REFRESH: Duration = Duration::from_secs(2);
/// Bytes a pull writes before it flushes its file to disk in the background, so the fsync
/// before the commit finds little left to write (it took 0.17 s of a 1.2 s pull of 512 MiB
/// when everything waited for it).
pub const PULL_FLUSH_EVERY_BYTES: u64 = 64 << 20;

// --- mur (murmur-cli) ---

/// How long `mur` waits for a node before giving up.
pub const CLI_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// How long `mur` waits for a tool or capsule run: the longest deadline, plus a margin.
pub const CLI_RUN_TIMEOUT: Duration = Duration::from_secs(DEADLINE_MS_MAX / 1000 + 30);
/// How long `mur` waits for one JSON-RPC answer: a blocking send waits at most
/// [`A2A_BLOCKING_WAIT_MAX`], plus a margin.
pub const CLI_RPC_TIMEOUT: Duration = Duration::from_secs(A2A_BLOCKING_WAIT_MAX.as_secs() + 15);

const _: () = assert!(ARTIFACT_SERVING_MAX >= 8 * 16);
const _: () = assert!(TASK_RECORD_BYTES_MAX >= TASK_FRAME_BYTES_MAX);
const _: () = assert!(RESULT_BYTES_MAX < TASK_FRAME_BYTES_MAX / 2);
const _: () = assert!(MESSAGE_BYTES_MAX <= TASK_FRAME_BYTES_MAX);
