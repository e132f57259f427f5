//! Models across the mesh: the node's side of `/murmur/model/1`. A request for a model
//! goes where the protocol's [`candidates`](murmur_protocol::model::candidates) rule sends
//! it — this node when one of its agents serves the model, else the cheapest node that
//! advertises it — and moves on to the next candidate only when the chosen one provably
//! did not take it (no stream could be opened, or it answered `Refused`). Once a node
//! answered `Accepted`, its failure is the client's error, never a second delivery.
//!
//! Serving: every stream a peer opens carries one [`ModelOpen`]; the caller is checked
//! ([`check_caller`](murmur_protocol::model::check_caller)), the session opened on this
//! node's brains, and its deltas written back in batches. Back-pressure is the stream's
//! own flow control: a client that reads slowly fills the yamux window, then the session's
//! buffer, then the agent's `stream-endpoint` errs. The caller closing the stream ends the
//! session ("the client went away").

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::{AsyncReadExt, StreamExt};
use murmur_brain::{Brains, ChatStream, OpenError, Session};
use murmur_net::frames::{read_frame, write_frame};
use murmur_net::{MODEL_PROTOCOL, ModelAsk, NetHandle};
use murmur_protocol::NodeId;
use murmur_protocol::model::{
    ChatDelta, ChatRequest, MODEL_FRAME_BYTES_MAX, MODEL_OPEN_BYTES_MAX, ModelCheck, ModelFrame, ModelOpen,
};
use murmur_runtime::ports::PortFuture;
use tokio::sync::Semaphore;

/// How long opening a stream to the chosen node may take before the next is tried.
const OPEN_TIMEOUT: Duration = Duration::from_secs(5);
/// Streams opened to one node before a reset before `Ready` counts as its refusal.
const READY_ATTEMPTS: u32 = 4;
/// How long a node may take to say `Accepted` or `Refused`.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a peer may take to send its request after opening a stream.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Streams from peers served at once (beyond it a stream is reset unread).
const INBOUND_STREAMS_MAX: usize = 4096;
/// Deltas one frame carries at most.
const BATCH_DELTAS_MAX: usize = 512;
/// Bytes of delta text one frame carries at most (well under the frame bound).
const BATCH_BYTES_MAX: usize = MODEL_FRAME_BYTES_MAX / 2;

/// Why a request found no session.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OpenFailure {
    /// No node of the mesh serves the model (404 `model_not_found`).
    #[error("{0}")]
    NotFound(String),
    /// Every node serving it is at its limit (429).
    #[error("{0}")]
    Busy(String),
    /// The chosen node could not be reached or failed before answering (502).
    #[error("{0}")]
    Failed(String),
}

/// Counters of model traffic, for `/metrics`.
#[derive(Debug, Default)]
pub struct ModelStats {
    /// Sessions this node opened on another node.
    pub remote_opened: AtomicU64,
    /// Candidates skipped because they provably did not take a request.
    pub failovers: AtomicU64,
    /// Streams peers opened here that were refused, by check.
    refused: Mutex<BTreeMap<&'static str, u64>>,
    /// Streams peers opened here that became sessions.
    pub served: AtomicU64,
}

impl ModelStats {
    fn refused(&self, check: ModelCheck) {
        *self.refused.lock().unwrap_or_else(PoisonError::into_inner).entry(check.as_str()).or_default() += 1;
    }

    /// Streams refused here, by check (every check listed).
    #[must_use]
    pub fn refusals(&self) -> Vec<(&'static str, u64)> {
        let refused = self.refused.lock().unwrap_or_else(PoisonError::into_inner);
        ModelCheck::ALL.iter().map(|c| (c.as_str(), refused.get(c.as_str()).copied().unwrap_or(0))).collect()
    }
}

/// Routes model requests over the mesh and serves peers' requests.
#[derive(Debug)]
pub struct ModelRouter {
    net: NetHandle,
    /// Sessions open to each other node now (they make it costlier: requests spread).
    open: Arc<Mutex<BTreeMap<NodeId, u32>>>,
    turn: AtomicU64,
    pub stats: ModelStats,
}

/// A session, here or on another node.
#[derive(Debug)]
pub enum Reply {
    Local(Session),
    Remote(RemoteSession),
}

impl Reply {
    /// The node that serves it.
    #[must_use]
    pub fn node(&self, local: NodeId) -> NodeId {
        match self {
            Self::Local(_) => local,
            Self::Remote(remote) => remote.node,
        }
    }

    /// The next delta; `Err` with the end (none: completed).
    pub async fn next(&mut self) -> Result<ChatDelta, Option<String>> {
        match self {
            Self::Local(session) => session.next().await,
            Self::Remote(remote) => remote.next().await,
        }
    }
}

impl ChatStream for Reply {
    fn next(&mut self) -> PortFuture<'_, Result<ChatDelta, Option<String>>> {
        Box::pin(Self::next(self))
    }
}

/// A session on another node, read from its stream. Dropping it resets the stream, which
/// ends the session there.
pub struct RemoteSession {
    pub node: NodeId,
    stream: murmur_net::Stream,
    buffered: VecDeque<ChatDelta>,
    ended: bool,
    open: Arc<Mutex<BTreeMap<NodeId, u32>>>,
}

impl std::fmt::Debug for RemoteSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteSession").field("node", &self.node).finish_non_exhaustive()
    }
}

impl RemoteSession {
    async fn next(&mut self) -> Result<ChatDelta, Option<String>> {
        loop {
            if let Some(delta) = self.buffered.pop_front() {
                return Ok(delta);
            }
            if self.ended {
                return Err(Some("the session already ended".into()));
            }
            let node = self.node;
            let frame = match read_frame(&mut self.stream, MODEL_FRAME_BYTES_MAX).await {
                Ok(Some(bytes)) => {
                    ModelFrame::decode(&bytes).map_err(|e| format!("node {node} sent a bad frame: {e}"))?
                }
                Ok(None) => {
                    self.ended = true;
                    return Err(Some(format!("node {node} closed the stream before the reply ended")));
                }
                Err(e) => {
                    self.ended = true;
                    return Err(Some(format!("node {node} left mid-stream: {e}")));
                }
            };
            match frame {
                ModelFrame::Deltas(deltas) => self.buffered.extend(deltas),
                ModelFrame::End { error } => {
                    self.ended = true;
                    return Err(error);
                }
                other => {
                    self.ended = true;
                    return Err(Some(format!("node {node} sent {other:?} mid-stream")));
                }
            }
        }
    }
}

impl Drop for RemoteSession {
    fn drop(&mut self) {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = open.get_mut(&self.node) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                open.remove(&self.node);
            }
        }
    }
}

/// Why one candidate did not give a session.
enum Attempt {
    /// It provably did not take the request: try the next.
    NotTaken { busy: bool, reason: String },
    /// It may have taken it: stop here.
    Unknown(String),
}

impl ModelRouter {
    #[must_use]
    pub fn new(net: NetHandle) -> Arc<Self> {
        Arc::new(Self { net, open: Arc::default(), turn: AtomicU64::new(0), stats: ModelStats::default() })
    }

    /// Opens a session for `request` on `model`: here when `local` (this node's brains)
    /// serves it, else on the best node of the mesh, failing over only past nodes that
    /// provably did not take it.
    pub async fn open(
        &self,
        local: Option<&Brains>,
        model: &str,
        request: ChatRequest,
    ) -> Result<Reply, OpenFailure> {
        let mut tried: Vec<NodeId> = Vec::new();
        let mut last: Option<OpenFailure> = None;
        let turn = self.turn.fetch_add(1, Ordering::Relaxed);
        for _ in 0..murmur_protocol::route::CANDIDATES_MAX {
            let open = self.open.lock().unwrap_or_else(PoisonError::into_inner).clone();
            let ask = ModelAsk {
                model: model.to_owned(),
                local_serves: local.is_some_and(|b| b.serves(model)),
                tried: tried.clone(),
                open,
                turn,
            };
            let candidates =
                self.net.model_candidates(ask).await.map_err(|e| OpenFailure::Failed(format!("{e:#}")))?;
            let Some(&node) = candidates.first() else {
                return Err(last.unwrap_or_else(|| {
                    OpenFailure::NotFound(format!("The model `{model}` does not exist: no agent of the mesh serves it (GET /v1/models lists those that do)"))
                }));
            };
            tried.push(node);
            if node == self.net.local() {
                match local.map(|b| b.open_session(model, request.clone())) {
                    Some(Ok(session)) => return Ok(Reply::Local(session)),
                    Some(Err(OpenError::Busy(reason))) => last = Some(OpenFailure::Busy(reason)),
                    Some(Err(e @ OpenError::NotServed(_))) => {
                        last = Some(OpenFailure::NotFound(e.to_string()))
                    }
                    None => {}
                }
                continue;
            }
            match self.open_remote(node, model, &request).await {
                Ok(remote) => return Ok(Reply::Remote(remote)),
                Err(Attempt::NotTaken { busy, reason }) => {
                    self.stats.failovers.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(%node, model, reason = %reason, "model request not taken; trying the next node");
                    last = Some(if busy { OpenFailure::Busy(reason) } else { OpenFailure::Failed(reason) });
                }
                Err(Attempt::Unknown(reason)) => return Err(OpenFailure::Failed(reason)),
            }
        }
        Err(last.unwrap_or_else(|| OpenFailure::Failed(format!("no node took the request for `{model}`"))))
    }

    async fn open_remote(
        &self,
        node: NodeId,
        model: &str,
        request: &ChatRequest,
    ) -> Result<RemoteSession, Attempt> {
        let mut stream = self.ready_stream(node).await?;
        let open = ModelOpen { model: model.to_owned(), request: request.clone() };
        let unknown = |reason: String| {
            Attempt::Unknown(format!("{reason}; it may have taken the request, so it is not sent elsewhere"))
        };
        if let Err(e) = write_frame(&mut stream, &open.encode()).await {
            return Err(unknown(format!("sending the request to {node} failed: {e}")));
        }
        let answer = match tokio::time::timeout(
            ANSWER_TIMEOUT,
            read_frame(&mut stream, MODEL_FRAME_BYTES_MAX),
        )
        .await
        {
            Ok(Ok(Some(bytes))) => ModelFrame::decode(&bytes)
                .map_err(|e| unknown(format!("node {node} answered a bad frame: {e}")))?,
            Ok(Ok(None)) => return Err(unknown(format!("node {node} closed the stream without an answer"))),
            Ok(Err(e)) => return Err(unknown(format!("node {node} failed before answering: {e}"))),
            Err(_) => {
                return Err(unknown(format!(
                    "node {node} did not answer within {} s",
                    ANSWER_TIMEOUT.as_secs()
                )));
            }
        };
        match answer {
            ModelFrame::Accepted { .. } => {
                self.stats.remote_opened.fetch_add(1, Ordering::Relaxed);
                *self.open.lock().unwrap_or_else(PoisonError::into_inner).entry(node).or_default() += 1;
                Ok(RemoteSession {
                    node,
                    stream,
                    buffered: VecDeque::new(),
                    ended: false,
                    open: self.open.clone(),
                })
            }
            ModelFrame::Refused { check, reason } => Err(Attempt::NotTaken {
                busy: check == ModelCheck::Busy.as_str(),
                reason: format!("node {node} refused it ({check}): {reason}"),
            }),
            other => Err(unknown(format!("node {node} answered {other:?} before accepting"))),
        }
    }

    /// A stream to `node` that its server took (it wrote `Ready`). A stream reset before
    /// that carried nothing (libp2p drops inbound streams its acceptor has no room for
    /// at that instant), so it is opened again, a few times, before the node counts as
    /// not taking the request.
    async fn ready_stream(&self, node: NodeId) -> Result<murmur_net::Stream, Attempt> {
        let not_taken = |reason: String| Attempt::NotTaken { busy: false, reason };
        let mut last = String::new();
        for attempt in 0..READY_ATTEMPTS {
            if attempt > 0 {
                tokio::time::sleep(Duration::from_millis(5 << attempt)).await;
            }
            let mut control = self.net.stream_control();
            let opened =
                tokio::time::timeout(OPEN_TIMEOUT, control.open_stream(node.to_peer_id(), MODEL_PROTOCOL))
                    .await;
            let mut stream = match opened {
                Ok(Ok(stream)) => stream,
                Ok(Err(e)) => return Err(not_taken(format!("cannot open a model stream to {node}: {e}"))),
                Err(_) => {
                    return Err(not_taken(format!(
                        "no model stream to {node} within {} s",
                        OPEN_TIMEOUT.as_secs()
                    )));
                }
            };
            match tokio::time::timeout(OPEN_TIMEOUT, read_frame(&mut stream, MODEL_FRAME_BYTES_MAX)).await {
                Ok(Ok(Some(bytes))) if matches!(ModelFrame::decode(&bytes), Ok(ModelFrame::Ready)) => {
                    return Ok(stream);
                }
                Ok(Ok(Some(_))) => return Err(not_taken(format!("node {node} did not open with Ready"))),
                Ok(Ok(None)) => last = format!("node {node} closed the stream before it was ready"),
                Ok(Err(e)) => last = format!("node {node} reset the stream before it was ready: {e}"),
                Err(_) => {
                    return Err(not_taken(format!(
                        "node {node} was not ready within {} s",
                        OPEN_TIMEOUT.as_secs()
                    )));
                }
            }
        }
        Err(not_taken(last))
    }

    /// Serves peers' `/murmur/model/1` streams on `brains` until the node stops.
    pub fn serve(self: &Arc<Self>, brains: Brains) -> anyhow::Result<tokio::task::JoinHandle<()>> {
        let mut incoming = self
            .net
            .stream_control()
            .accept(MODEL_PROTOCOL)
            .map_err(|_| anyhow::anyhow!("{MODEL_PROTOCOL} is already being served"))?;
        let router = self.clone();
        let slots = Arc::new(Semaphore::new(INBOUND_STREAMS_MAX));
        Ok(tokio::spawn(async move {
            while let Some((peer, stream)) = incoming.next().await {
                let Ok(permit) = slots.clone().try_acquire_owned() else {
                    router.stats.refused(ModelCheck::Busy);
                    continue; // dropped: the stream is reset
                };
                let (router, brains) = (router.clone(), brains.clone());
                tokio::spawn(async move {
                    router.answer(peer, stream, &brains).await;
                    drop(permit);
                });
            }
        }))
    }

    async fn answer(&self, peer: murmur_net::PeerId, mut stream: murmur_net::Stream, brains: &Brains) {
        if write_frame(&mut stream, &ModelFrame::Ready.encode()).await.is_err() {
            return;
        }
        let refuse = |check: ModelCheck, reason: String| {
            self.stats.refused(check);
            ModelFrame::Refused { check: check.as_str().into(), reason }.encode()
        };
        let opened = match tokio::time::timeout(
            REQUEST_TIMEOUT,
            read_frame(&mut stream, MODEL_OPEN_BYTES_MAX),
        )
        .await
        {
            Ok(Ok(Some(bytes))) => match (NodeId::from_peer_id(&peer), ModelOpen::decode(&bytes)) {
                (Err(_), _) => Err(refuse(ModelCheck::Malformed, "not a murmur peer".into())),
                (_, Err(e)) => Err(refuse(ModelCheck::Malformed, e.to_string())),
                (Ok(from), Ok(open)) => match self.net.model_caller(from).await {
                    Err(check) => Err(refuse(check, format!("{from} is not a member of this node's mesh"))),
                    Ok(()) => match brains.open_session(&open.model, open.request) {
                        Ok(session) => Ok(session),
                        Err(e @ OpenError::NotServed(_)) => Err(refuse(ModelCheck::NotServed, e.to_string())),
                        Err(OpenError::Busy(reason)) => Err(refuse(ModelCheck::Busy, reason)),
                    },
                },
            },
            Ok(Ok(None)) => return,
            Ok(Err(e)) => Err(refuse(ModelCheck::Malformed, e.to_string())),
            Err(_) => Err(refuse(
                ModelCheck::Malformed,
                format!("no request within {} s", REQUEST_TIMEOUT.as_secs()),
            )),
        };
        let mut session = match opened {
            Ok(session) => session,
            Err(refusal) => {
                let _ = write_frame(&mut stream, &refusal).await;
                return;
            }
        };
        self.stats.served.fetch_add(1, Ordering::Relaxed);
        let (mut reader, mut writer) = stream.split();
        if write_frame(&mut writer, &ModelFrame::Accepted { session: session.id.clone() }.encode())
            .await
            .is_err()
        {
            return; // the session ends as the client's going away
        }
        let mut probe = [0u8; 1];
        loop {
            tokio::select! {
                next = session.next() => {
                    let frame = match next {
                        Ok(first) => ModelFrame::Deltas(batch(first, &mut session)),
                        Err(error) => ModelFrame::End { error },
                    };
                    let last = matches!(frame, ModelFrame::End { .. });
                    if write_frame(&mut writer, &frame.encode()).await.is_err() || last {
                        let _ = futures::AsyncWriteExt::close(&mut writer).await;
                        return;
                    }
                }
                // The caller sends nothing after its request: anything read, or the end,
                // means it went away.
                _ = reader.read(&mut probe) => return,
            }
        }
    }

    /// Keeps this node's advert listing the models its agents serve.
    pub fn advertise(&self, brains: &Brains) -> tokio::task::JoinHandle<()> {
        let mut models = brains.endpoints().watch();
        let net = self.net.clone();
        tokio::spawn(async move {
            loop {
                let current = models.borrow_and_update().clone();
                if let Err(e) = net.set_models(current).await {
                    tracing::warn!(error = %format!("{e:#}"), "cannot advertise the models served here");
                }
                if models.changed().await.is_err() {
                    return;
                }
            }
        })
    }
}

/// `first` and whatever else the session has buffered, up to a frame's worth.
fn batch(first: ChatDelta, session: &mut Session) -> Vec<ChatDelta> {
    let mut bytes = first.text_len();
    let mut deltas = vec![first];
    while deltas.len() < BATCH_DELTAS_MAX && bytes < BATCH_BYTES_MAX {
        let Some(next) = session.try_next() else { break };
        bytes += next.text_len();
        let finished = next.finish_reason.is_some();
        deltas.push(next);
        if finished {
            break;
        }
    }
    deltas
}
