//! Every bound the protocol enforces, in one place.
//!
//! A bound exists for each thing a peer, a file or a user can make us hold: bytes on the
//! wire, entries in a list, entries in a map. When input goes past a bound it is refused
//! with an error naming the bound; nothing grows without limit. Each value says why.

/// Deepest CBOR nesting any document needs is 4 (envelope → advert → capsule → field);
/// 16 leaves room for future documents while stopping stack-exhaustion inputs early.
pub const CBOR_DEPTH_MAX: usize = 16;

/// An envelope is a few fixed fields around one body; 256 bytes covers them.
pub const ENVELOPE_OVERHEAD_MAX: usize = 256;

/// A node advert with the full [`ADVERT_CAPSULES_MAX`] capsules, addresses and artifacts
/// fits in 16 KiB; typical adverts are well under 4 KiB. Gossipsub's own cap is 64 KiB.
pub const ADVERT_BYTES_MAX: usize = 16 * 1024;

/// A capability grant is a handful of allowlists; 8 KiB holds the maxima below.
pub const GRANT_BYTES_MAX: usize = 8 * 1024;

/// A node certificate is four small fields.
pub const CERT_BYTES_MAX: usize = 1024;

/// Largest publisher signature (a catalog envelope naming one artifact) kept with a pulled
/// or imported manifest: one artifact and its few blobs make under 1 KiB. A larger one
/// counts as no signature, so a peer cannot make every puller store what it sends.
pub const ARTIFACT_SIGNATURE_BYTES_MAX: usize = 16 * 1024;

/// Largest envelope of any kind we will decode.
pub const ENVELOPE_BYTES_MAX: usize = ADVERT_BYTES_MAX + ENVELOPE_OVERHEAD_MAX;

/// Capsules one node may advertise. A node runs tens of capsules; 128 leaves headroom
/// while keeping the advert (and every directory's copy of it) small.
pub const ADVERT_CAPSULES_MAX: usize = 128;

/// Agents (brains) one node may advertise: tens in practice; 64 names of at most 64
/// bytes keep the advert within [`ADVERT_BYTES_MAX`] beside its capsules.
pub const ADVERT_AGENTS_MAX: usize = 64;

/// Bytes of one agent message's text (`send-agent`): a message is a note between agents,
/// not a document (use artifacts for those).
pub const AGENT_MESSAGE_BYTES_MAX: usize = 64 * 1024;

/// Largest `/murmur/agent/1` frame: one message with its names and framing.
pub const AGENT_FRAME_BYTES_MAX: usize = AGENT_MESSAGE_BYTES_MAX + 1024;

/// Listen addresses in an advert: a node has a few interfaces times two transports.
pub const ADVERT_ADDRS_MAX: usize = 16;

/// Artifacts a node advertises as provided. Beyond this, providers are found by asking.
pub const ADVERT_ARTIFACTS_MAX: usize = 64;

/// A multiaddr in text form: `/ip6/…/udp/…/quic-v1/p2p/…` is under 150 bytes.
pub const ADDR_LEN_MAX: usize = 256;

/// Capsule names are DNS-label-like identifiers.
pub const CAPSULE_NAME_LEN_MAX: usize = 64;

/// Versions are semver-ish strings such as `1.2.3-rc.1+build.5`.
pub const VERSION_LEN_MAX: usize = 64;

/// Entries in each allowlist of a grant (network, shell, tools).
pub const GRANT_ALLOW_ENTRIES_MAX: usize = 64;

/// One allowlist entry: a peer URL, a binary path or a tool name.
pub const ALLOW_ENTRY_LEN_MAX: usize = 512;

/// A peer URL in text form (host names are at most 253 bytes; paths stay short).
pub const PEER_URL_LEN_MAX: usize = 512;

/// Advert TTL a node may ask for. Departure notices drop a crashed node long before its
/// TTL, so a TTL is a backstop (for a node whose every peer went down with it) and large
/// meshes may refresh rarely; a day bounds how long such a node can stay listed.
pub const ADVERT_TTL_MS_MAX: u64 = 24 * 60 * 60 * 1000;

/// Shortest advert TTL we honour: below this, refresh traffic dominates.
pub const ADVERT_TTL_MS_MIN: u64 = 1000;

/// Nodes a directory holds. The simulator's largest scenarios run 10,000 nodes.
pub const DIRECTORY_NODES_MAX: usize = 16_384;

/// Nodes not connected here whose adverts may claim one address range (an IPv4 /24, an
/// IPv6 /48, a DNS domain): four times what a /24 can address, so no honest subnet is ever
/// cut, while one machine minting identities fills at most a sixteenth of a directory.
pub const DIRECTORY_RANGE_MAX: usize = DIRECTORY_NODES_MAX / 16;

/// Nodes not connected here whose adverts one peer may have delivered: three quarters of a
/// directory, so a newcomer's first sync from its one bootstrap peer fills a mesh of the
/// simulator's largest size, while no single peer fills the whole directory.
pub const DIRECTORY_PEER_MAX: usize = DIRECTORY_NODES_MAX * 3 / 4;

/// Entries in an anti-entropy digest: one per node in the sender's directory.
pub const DIGEST_ENTRIES_MAX: usize = DIRECTORY_NODES_MAX;

/// Directory outputs waiting to be drained by the driver. A driver drains after every
/// `handle`, so this only fills when a driver forgets; then the oldest are dropped.
pub const DIRECTORY_OUTPUTS_MAX: usize = 4096;

/// Output slots a machine's queue keeps allocated once drained. A burst (a sync answer of
/// thousands of adverts is thousands of outputs) grows the queue; keeping that capacity
/// forever cost the simulator about 40 bytes per node pair (3 GB in a 10,000-node cold
/// start), so a drained queue gives back all but this many.
pub const OUTPUTS_KEPT: usize = 64;

/// Takes the oldest output of a machine's queue, giving back the capacity a burst left
/// once the queue is empty (see [`OUTPUTS_KEPT`]).
pub(crate) fn pop_output<T>(queue: &mut std::collections::VecDeque<T>) -> Option<T> {
    let output = queue.pop_front();
    if queue.is_empty() && queue.capacity() > OUTPUTS_KEPT {
        queue.shrink_to(OUTPUTS_KEPT);
    }
    output
}

/// Adverts returned for one anti-entropy request, so one response stays bounded
/// (`SYNC_ADVERTS_MAX` × [`ENVELOPE_BYTES_MAX`] is the worst case, 4 KiB typical).
pub const SYNC_ADVERTS_MAX: usize = 256;

/// Departure notices a directory parks until it knows their node or witness.
pub const PENDING_NOTICES_MAX: usize = 256;

/// Departure notices in one sync response.
pub const SYNC_NOTICES_MAX: usize = 256;

/// Largest encoded revocation list body.
pub const REVOCATION_BYTES_MAX: usize = ADVERT_BYTES_MAX;

/// Nodes one revocation list may name (about 36 bytes each).
pub const REVOCATION_NODES_MAX: usize = 256;

/// Grant serials one revocation list may name (at most 9 bytes each).
pub const REVOCATION_GRANTS_MAX: usize = 512;

/// Authorities whose lists a node holds (and names in a sync request).
pub const REVOCATIONS_HELD_MAX: usize = 16;

const _: () = assert!(REVOCATION_NODES_MAX * 36 + REVOCATION_GRANTS_MAX * 9 + 64 <= REVOCATION_BYTES_MAX);
const _: () = assert!(REVOCATION_BYTES_MAX + ENVELOPE_OVERHEAD_MAX <= ENVELOPE_BYTES_MAX);
const _: () = assert!(CERT_BYTES_MAX <= ADVERT_BYTES_MAX / 4);
const _: () = assert!(GRANT_BYTES_MAX + ENVELOPE_OVERHEAD_MAX <= ENVELOPE_BYTES_MAX);
const _: () = assert!(ADVERT_TTL_MS_MIN < ADVERT_TTL_MS_MAX);
const _: () = assert!(DIGEST_ENTRIES_MAX >= DIRECTORY_NODES_MAX);
const _: () = assert!(DIRECTORY_RANGE_MAX >= 4 * 256 && DIRECTORY_PEER_MAX >= 10_000);

/// Buckets in an anti-entropy summary (see [`crate::sync::Summary`]): a power of two. At
/// 9 bytes a sum, the largest summary is 36 KiB, against 720 KiB for a full digest of
/// [`DIRECTORY_NODES_MAX`] nodes.
pub const SYNC_BUCKETS_MAX: usize = 4096;

/// A node whose directory holds at least this many nodes syncs by summary first; below
/// it the full digest (≈ 45 bytes a node) is about as small as a summary.
pub const SYNC_SUMMARY_NODES_MIN: usize = 64;

/// Nodes per bucket a summary aims for (the count rounds up to a power of two): a summary
/// is 9/16 to 9/8 bytes a node held, and each bucket that differs costs a scoped digest of
/// at most about 16 entries.
pub const SYNC_NODES_PER_BUCKET: usize = 16;

/// Adverts a responder sends with its answer to a summary, when its nodes in the buckets
/// that differ are no more than this (one bucket or two): a requester that missed an
/// advert gets it in one round trip.
pub const SYNC_INLINE_ADVERTS_MAX: usize = 2 * SYNC_NODES_PER_BUCKET;

/// Largest anti-entropy request: a full digest (≈ 45 bytes per node) plus a certificate.
/// libp2p's request-response default cap is 1 MiB as well.
pub const SYNC_REQUEST_BYTES_MAX: usize = 1024 * 1024;

/// Largest anti-entropy response. Adverts are added until the next would cross this; the
/// peer asks again for the rest (`more`).
pub const SYNC_RESPONSE_BYTES_MAX: usize = 1024 * 1024;

/// Connected peers the mesh state machine tracks; the swarm's connection limit is lower.
pub const MESH_PEERS_MAX: usize = 4096;

/// Remembered dial attempts (for backoff); oldest forgotten first.
pub const DIAL_BACKOFF_ENTRIES_MAX: usize = 4096;

/// Mesh outputs waiting to be drained by the driver (see [`DIRECTORY_OUTPUTS_MAX`]).
pub const MESH_OUTPUTS_MAX: usize = 8192;

const _: () = assert!(SYNC_RESPONSE_BYTES_MAX >= ENVELOPE_BYTES_MAX);
const _: () = assert!(SYNC_REQUEST_BYTES_MAX >= DIGEST_ENTRIES_MAX * 45 + CERT_BYTES_MAX);
const _: () =
    assert!(SYNC_BUCKETS_MAX.is_power_of_two() && SYNC_BUCKETS_MAX * 9 < SYNC_REQUEST_BYTES_MAX / 4);
const _: () = assert!(SYNC_SUMMARY_NODES_MIN >= SYNC_NODES_PER_BUCKET);

/// Peers refused admission to a closed mesh that are held off at once (see
/// [`crate::mesh::REFUSED_HOLD_MS`]); beyond it the hold that ends first ends early.
pub const REFUSED_PEERS_MAX: usize = 1024;

/// Departed nodes remembered for reconnecting (see [`crate::mesh::RECONNECT_INTERVAL_MS`]);
/// beyond it the one that departed first is forgotten.
pub const DEPARTED_NODES_MAX: usize = 1024;

/// Bootstrap peers a node keeps at most (its configuration refuses more).
pub const BOOTSTRAP_PEERS_MAX: usize = 64;
/// Addresses kept per bootstrap peer.
pub const BOOTSTRAP_ADDRS_MAX: usize = 8;

/// Tasks waiting in one capsule's queue at an owner. A queue this long already means
/// minutes of work; past it the owner refuses (`overloaded`) and the router tries another
/// node.
pub const OWNER_QUEUE_MAX: usize = 4096;

/// Tasks an owner holds in memory, finished or not (its database keeps every one); past
/// it, the one that finished first is forgotten.
pub const OWNER_LIVE_MAX: usize = 100_000;

/// Finished tasks an owner holds in memory, so a question about a task that just finished
/// needs no disk read; older ones are read from the database when asked for. A node's
/// memory then stops growing with the tasks it has run: `murnode` holds 3.5–5 KB per task
/// (text, result, event log), so 10,000 is about 50 MB, and at 1,000 tasks a second the
/// bound is reached in ten seconds.
pub const OWNER_FINISHED_MAX: usize = 10_000;

/// Longest an owner holds a peer's request open waiting for a task's next event or for it
/// to settle: well inside the request timeout, so a quiet task never looks like a dead
/// owner.
pub const OWNER_WAIT_MAX_MS: u64 = 5_000;

/// `/murmur/task/1` requests a node has in flight to peers at once (submits its router
/// delivers and questions to owners); more fail at once, as not delivered.
pub const TASK_OUTBOUND_MAX: usize = 4096;

/// Peers' `/murmur/task/1` requests a node answers at once; more are refused as
/// `overloaded`.
pub const TASK_INBOUND_MAX: usize = 4096;

const _: () = assert!(OWNER_QUEUE_MAX < OWNER_LIVE_MAX);
const _: () = assert!(OWNER_FINISHED_MAX < OWNER_LIVE_MAX);

/// Gossipsub's cap on one message, as `murnode` configures it (bigger messages are dropped
/// before the application sees them): an advert envelope is at most 16.6 KiB, plus
/// framing.
pub const GOSSIP_TRANSMIT_BYTES_MAX: usize = 64 * 1024;

/// Gossipsub's heartbeat (mesh maintenance, lazy gossip), as `murnode` configures it.
pub const GOSSIP_HEARTBEAT_MS: u64 = 1000;

const _: () = assert!(GOSSIP_TRANSMIT_BYTES_MAX >= ENVELOPE_BYTES_MAX);
