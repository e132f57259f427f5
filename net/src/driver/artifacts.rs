//! The driver's artifact side: `/murmur/artifact/1` requests in (served from the store in
//! blocking tasks, never on the driver's loop) and out (for a pull, which runs in the node), and
//! the providers the directory knows for a digest.
//!
//! The driver decides nothing about a pull: which chunk to ask of whom is the protocol's
//! [`murmur_protocol::pull::Pull`], run by the pull itself. The driver only carries
//! requests and answers, like a network card.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use libp2p::request_response::{self, OutboundRequestId, ResponseChannel};
use murmur_protocol::NodeId;
use murmur_protocol::artifact::{ARTIFACT_REASON_BYTES_MAX, ArtifactRequest, ArtifactResponse};
use tokio::sync::{mpsc, oneshot};
use tracing::debug;

use murmur_config::clock;
use murmur_store::ArtifactStore;

use super::Driver;
use crate::ArtifactQuery;
use crate::bulk::BulkStats;
use murmur_config::limits::{ARTIFACT_OUTBOUND_MAX, ARTIFACT_SERVING_MAX};

/// The artifact transport: what the driver holds to carry `/murmur/artifact/1` (requests
/// being served, requests out for pulls).
pub(crate) struct ArtifactTransport {
    store: Arc<ArtifactStore>,
    pub(super) queries: mpsc::Receiver<ArtifactQuery>,
    pub(super) served: mpsc::Receiver<(u64, ArtifactResponse)>,
    served_tx: mpsc::Sender<(u64, ArtifactResponse)>,
    inbound: BTreeMap<u64, ResponseChannel<ArtifactResponse>>,
    outbound: HashMap<OutboundRequestId, oneshot::Sender<Result<ArtifactResponse, String>>>,
    next_token: u64,
    /// Requests served, and refused as busy (for metrics).
    pub(super) served_count: u64,
    pub(super) busy_count: u64,
    faults: ServeFaults,
    /// What `/murmur/artifact-bulk/1` served, counted with the rest.
    bulk: Arc<BulkStats>,
}

/// Fault injection for tests of the pull path with real processes, compiled in only with
/// the `fault-injection` feature (the end-to-end test crate turns it on): a node started
/// with `MURMUR_FAULT_CORRUPT_CHUNKS=1` flips a byte in every blob range it serves, and with
/// `MURMUR_FAULT_SERVE_DELAY_MS=N` answers each request N ms late. The node logs a warning
/// at start when either is set. `MURMUR_FAULT_NO_BULK=1` makes it serve no
/// `/murmur/artifact-bulk/1` streams, as a node from before that protocol.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ServeFaults {
    corrupt: bool,
    delay: std::time::Duration,
    pub(crate) no_bulk: bool,
}

const FAULT_VARS: [&str; 3] =
    ["MURMUR_FAULT_CORRUPT_CHUNKS", "MURMUR_FAULT_SERVE_DELAY_MS", "MURMUR_FAULT_NO_BULK"];

impl ServeFaults {
    #[cfg(feature = "fault-injection")]
    pub(crate) fn from_env() -> Self {
        let corrupt = std::env::var(FAULT_VARS[0]).is_ok_and(|v| v == "1");
        let delay_ms: u64 = std::env::var(FAULT_VARS[1]).ok().and_then(|v| v.parse().ok()).unwrap_or(0);
        let no_bulk = std::env::var(FAULT_VARS[2]).is_ok_and(|v| v == "1");
        let faults = Self { corrupt, delay: std::time::Duration::from_millis(delay_ms.min(60_000)), no_bulk };
        if faults.corrupt || delay_ms > 0 || no_bulk {
            tracing::warn!(
                corrupt,
                delay_ms,
                no_bulk,
                "artifact serving fault injection is on (test use only)"
            );
        }
        faults
    }

    #[cfg(not(feature = "fault-injection"))]
    pub(crate) fn from_env() -> Self {
        if FAULT_VARS.iter().any(|var| std::env::var_os(var).is_some()) {
            tracing::warn!(
                "MURMUR_FAULT_* is set but this build has no fault injection (feature \
                 `fault-injection`, on in `cargo build --workspace`); serving normally"
            );
        }
        Self::default()
    }
}

impl std::fmt::Debug for ArtifactTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArtifactTransport").field("serving", &self.inbound.len()).finish_non_exhaustive()
    }
}

impl ArtifactTransport {
    pub(crate) fn new(
        store: Arc<ArtifactStore>,
        queries: mpsc::Receiver<ArtifactQuery>,
        faults: ServeFaults,
        bulk: Arc<BulkStats>,
    ) -> Self {
        let (served_tx, served) = mpsc::channel(ARTIFACT_SERVING_MAX);
        Self {
            store,
            queries,
            served,
            served_tx,
            inbound: BTreeMap::new(),
            outbound: HashMap::new(),
            next_token: 0,
            served_count: 0,
            busy_count: 0,
            faults,
            bulk,
        }
    }
}

impl Driver {
    pub(super) fn on_artifact_query(&mut self, query: ArtifactQuery) {
        match query {
            ArtifactQuery::Ask { peer, request, reply } => {
                if self.artifacts.outbound.len() >= ARTIFACT_OUTBOUND_MAX {
                    let _ = reply.send(Err("too many artifact requests in flight on this node".into()));
                    return;
                }
                let id = self.swarm.behaviour_mut().artifact.send_request(&peer.to_peer_id(), request);
                self.artifacts.outbound.insert(id, reply);
            }
            ArtifactQuery::Providers { digest, reply } => {
                let _ = reply.send(self.mesh.artifact_providers(clock::now(), digest.as_ref()));
            }
            ArtifactQuery::Members(reply) => {
                let now = clock::now();
                let mut nodes: Vec<NodeId> = self.mesh.directory().records(now).map(|r| r.node()).collect();
                nodes.push(self.mesh.id());
                nodes.sort();
                nodes.dedup();
                let _ = reply.send(nodes);
            }
            ArtifactQuery::SetProvided(artifacts) => {
                self.mesh.handle(clock::now(), murmur_protocol::mesh::Input::SetArtifacts { artifacts });
            }
        }
    }

    pub(super) fn on_artifact_event(
        &mut self,
        event: request_response::Event<ArtifactRequest, ArtifactResponse>,
    ) {
        match event {
            request_response::Event::Message { peer, message, .. } => {
                self.touch(&peer);
                match message {
                    request_response::Message::Request { request, channel, .. } => {
                        self.serve_artifact(request, channel);
                    }
                    request_response::Message::Response { request_id, response } => {
                        if let Some(reply) = self.artifacts.outbound.remove(&request_id) {
                            let _ = reply.send(Ok(response));
                        }
                    }
                }
            }
            request_response::Event::OutboundFailure { peer, request_id, error, .. } => {
                debug!(peer = %peer, error = %error, "artifact request failed");
                if let Some(reply) = self.artifacts.outbound.remove(&request_id) {
                    let _ = reply.send(Err(format!("{peer} did not answer: {error}")));
                }
            }
            request_response::Event::InboundFailure { peer, error, .. } => {
                debug!(peer = %peer, error = %error, "artifact answer failed");
            }
            request_response::Event::ResponseSent { .. } => {}
        }
    }

    /// Reads what a peer asked for in a blocking task; the answer comes back through
    /// [`ArtifactTransport::served`].
    fn serve_artifact(&mut self, request: ArtifactRequest, channel: ResponseChannel<ArtifactResponse>) {
        if self.artifacts.inbound.len() >= ARTIFACT_SERVING_MAX {
            self.artifacts.busy_count += 1;
            let busy =
                ArtifactResponse::Error { reason: "busy: too many artifact requests being served".into() };
            let _ = self.swarm.behaviour_mut().artifact.send_response(channel, busy);
            return;
        }
        self.artifacts.next_token = self.artifacts.next_token.wrapping_add(1);
        let token = self.artifacts.next_token;
        self.artifacts.inbound.insert(token, channel);
        let store = self.artifacts.store.clone();
        let done = self.artifacts.served_tx.clone();
        let faults = self.artifacts.faults;
        tokio::task::spawn_blocking(move || {
            let _ = done.blocking_send((token, serve_request(&store, &request, faults)));
        });
    }

    pub(super) fn on_artifact_served(&mut self, token: u64, response: ArtifactResponse) {
        if let Some(channel) = self.artifacts.inbound.remove(&token) {
            self.artifacts.served_count += 1;
            let _ = self.swarm.behaviour_mut().artifact.send_response(channel, response);
        }
    }
}

impl ArtifactTransport {
    /// Chunks answered on bulk streams, and bulk streams refused (all were busy), for metrics.
    pub(super) fn bulk_counts(&self) -> (u64, u64) {
        (self.bulk.served.load(Ordering::Relaxed), self.bulk.refused.load(Ordering::Relaxed))
    }
}

/// Answers one request from the store, through the fault injection if it is on (blocking:
/// call it on a blocking thread).
pub(crate) fn serve_request(
    store: &ArtifactStore,
    request: &ArtifactRequest,
    faults: ServeFaults,
) -> ArtifactResponse {
    let mut response = serve(store, request);
    if !faults.delay.is_zero() {
        std::thread::sleep(faults.delay);
    }
    if faults.corrupt
        && let ArtifactResponse::Bytes { data } = &mut response
        && let Some(byte) = data.first_mut()
    {
        *byte ^= 0x5a;
    }
    response
}

/// Answers one request from the store. Bytes are served as they are on disk: the puller
/// checks every chunk against its digest, and this node's own reads verify whole blobs.
fn serve(store: &ArtifactStore, request: &ArtifactRequest) -> ArtifactResponse {
    let result = match request {
        ArtifactRequest::Resolve { name, version } => store.find(name, Some(version)).map(|found| {
            found.map_or(ArtifactResponse::NotFound, |stored| ArtifactResponse::Resolved {
                size: store.blob_size(&stored.manifest).unwrap_or(0),
                manifest: stored.manifest,
                signature: store.signature(&stored.manifest),
            })
        }),
        ArtifactRequest::Blob { len, digest, offset } => store
            .read_range(digest, *offset, *len)
            .map(|data| data.map_or(ArtifactResponse::NotFound, |data| ArtifactResponse::Bytes { data })),
    };
    result.unwrap_or_else(|err| {
        let mut reason = format!("{err:#}");
        reason.truncate(reason.floor_char_boundary(ARTIFACT_REASON_BYTES_MAX));
        ArtifactResponse::Error { reason }
    })
}
