//! The request-response codec for our CBOR messages: one message per stream, read up to
//! its named size limit and decoded strictly by the protocol crate.
//!
//! Requests a peer sends are charged, as their bytes arrive, to two budgets: one for the
//! connection they arrive on and one for the whole node ([`InFlight`]). A request that
//! would overrun its connection's budget fails with [`Overrun`], reported to the driver,
//! which cuts the peer off; one that would overrun the node's fails the same way without
//! blaming the peer. Answers to our own requests are not charged: they are bounded by the streams we
//! open.

use std::io;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use std::task::{Context, Poll};

use futures::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use libp2p::core::Endpoint;
use libp2p::core::transport::PortUse;
use libp2p::request_response::{self, Codec};
use libp2p::swarm::{
    ConnectionDenied, ConnectionId, FromSwarm, NetworkBehaviour, THandler, THandlerInEvent, THandlerOutEvent,
    ToSwarm,
};
use libp2p::{Multiaddr, PeerId, StreamProtocol};
use murmur_protocol::DecodeError;
use murmur_protocol::agent::{AgentRequest, AgentResponse};
use murmur_protocol::artifact::{ARTIFACT_FRAME_BYTES_MAX, ArtifactRequest, ArtifactResponse};
use murmur_protocol::limits::AGENT_FRAME_BYTES_MAX;
use murmur_protocol::limits::{SYNC_REQUEST_BYTES_MAX, SYNC_RESPONSE_BYTES_MAX};
use murmur_protocol::sync::{SyncRequest, SyncResponse};
use murmur_protocol::task::{TASK_FRAME_BYTES_MAX, TaskRequest, TaskResponse};
use tokio::sync::mpsc;

/// A message that travels as one request or response.
pub trait Frame: Sized + Send {
    /// Largest encoding accepted; a longer stream is refused before decoding.
    const BYTES_MAX: usize;
    /// Bytes reserved before reading one (the typical size: growing a buffer by doubling
    /// copies it each time).
    const CAPACITY: usize = 4096;
    /// Canonical bytes.
    fn encode(&self) -> Vec<u8>;
    /// Strict, bounded decoding.
    fn decode(bytes: &[u8]) -> Result<Self, DecodeError>;
}

impl Frame for SyncRequest {
    const BYTES_MAX: usize = SYNC_REQUEST_BYTES_MAX;

    fn encode(&self) -> Vec<u8> {
        SyncRequest::encode(self)
    }

    fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        SyncRequest::decode(bytes)
    }
}

impl Frame for SyncResponse {
    const BYTES_MAX: usize = SYNC_RESPONSE_BYTES_MAX;

    fn encode(&self) -> Vec<u8> {
        SyncResponse::encode(self)
    }

    fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        SyncResponse::decode(bytes)
    }
}

impl Frame for TaskRequest {
    const BYTES_MAX: usize = TASK_FRAME_BYTES_MAX;

    fn encode(&self) -> Vec<u8> {
        TaskRequest::encode(self)
    }

    fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        TaskRequest::decode(bytes)
    }
}

impl Frame for TaskResponse {
    const BYTES_MAX: usize = TASK_FRAME_BYTES_MAX;

    fn encode(&self) -> Vec<u8> {
        TaskResponse::encode(self)
    }

    fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        TaskResponse::decode(bytes)
    }
}

impl Frame for AgentRequest {
    const BYTES_MAX: usize = AGENT_FRAME_BYTES_MAX;

    fn encode(&self) -> Vec<u8> {
        AgentRequest::encode(self)
    }

    fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        AgentRequest::decode(bytes)
    }
}

impl Frame for AgentResponse {
    const BYTES_MAX: usize = AGENT_FRAME_BYTES_MAX;

    fn encode(&self) -> Vec<u8> {
        AgentResponse::encode(self)
    }

    fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        AgentResponse::decode(bytes)
    }
}

impl Frame for ArtifactRequest {
    const BYTES_MAX: usize = ARTIFACT_FRAME_BYTES_MAX;

    fn encode(&self) -> Vec<u8> {
        ArtifactRequest::encode(self)
    }

    fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        ArtifactRequest::decode(bytes)
    }
}

impl Frame for ArtifactResponse {
    const BYTES_MAX: usize = ARTIFACT_FRAME_BYTES_MAX;
    /// A 1 MiB chunk and its framing.
    const CAPACITY: usize = murmur_protocol::artifact::CHUNK_BYTES as usize + 64;

    fn encode(&self) -> Vec<u8> {
        ArtifactResponse::encode(self)
    }

    fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        ArtifactResponse::decode(bytes)
    }
}

/// Codec for a request type and a response type. libp2p clones it for every stream; the
/// clones share two pools of read buffers, one for requests and one for responses (their
/// sizes differ: a chunk answer's buffer is not worth keeping for a small request).
#[derive(Debug)]
pub struct FrameCodec<Req, Resp> {
    requests: Arc<BufferPool>,
    responses: Arc<BufferPool>,
    in_flight: InFlight,
    _types: PhantomData<fn() -> (Req, Resp)>,
}

impl<Req, Resp> FrameCodec<Req, Resp> {
    /// A codec whose requests are charged to `in_flight`'s budgets.
    #[must_use]
    pub fn new(in_flight: InFlight) -> Self {
        Self { requests: Arc::default(), responses: Arc::default(), in_flight, _types: PhantomData }
    }
}

impl<Req, Resp> Clone for FrameCodec<Req, Resp> {
    fn clone(&self) -> Self {
        Self {
            requests: Arc::clone(&self.requests),
            responses: Arc::clone(&self.responses),
            in_flight: self.in_flight.clone(),
            _types: PhantomData,
        }
    }
}

/// The budgets a codec charges requests to: the node's, shared by every codec built from
/// one [`InFlight::node`], and a connection's, which knows its peer.
///
/// The connection budget rests on how libp2p's request-response behaviour (0.30) clones its
/// codec: once from the behaviour's codec for each connection's handler, inside
/// `handle_established_*_connection`, then from the handler's for each stream. The
/// behaviour's codec holds no connection budget, so a clone of it opens a fresh one for the
/// peer [`Budgeted`] names while the connection is being set up; a clone of a handler's
/// shares that connection's. `tests/tests/limits.rs` fails if that ever stops holding (a
/// flooding peer would not be cut off).
#[derive(Debug)]
pub struct InFlight {
    node: Arc<Budget>,
    connection: Option<Arc<Budget>>,
    connection_max: usize,
    /// The peer whose connection is being set up (set by [`Budgeted`]).
    opening: Arc<Mutex<Option<PeerId>>>,
    /// Where a connection overrun is reported, for the driver to cut the peer off.
    cuts: mpsc::Sender<(Option<PeerId>, Overrun)>,
}

impl InFlight {
    /// A node-wide budget of `node_max` bytes, with `connection_max` bytes for each
    /// connection (per protocol: each protocol's codec is its own); connection overruns are
    /// reported on `cuts`.
    #[must_use]
    pub fn node(
        node_max: usize,
        connection_max: usize,
        cuts: mpsc::Sender<(Option<PeerId>, Overrun)>,
    ) -> Self {
        Self {
            node: Arc::new(Budget::new(Scope::Node, node_max, None)),
            connection: None,
            connection_max,
            opening: Arc::default(),
            cuts,
        }
    }

    /// Another protocol's codec on the same node budget, with its own connection budgets.
    #[must_use]
    pub fn sibling(&self, connection_max: usize) -> Self {
        Self {
            node: Arc::clone(&self.node),
            connection: None,
            connection_max,
            opening: Arc::clone(&self.opening),
            cuts: self.cuts.clone(),
        }
    }

    fn charge(&self) -> Charge<'_> {
        let connection = self.connection.as_deref().expect("a stream's codec has its connection's budget");
        Charge { budgets: [&self.node, connection], charged: 0, cuts: &self.cuts }
    }
}

impl Clone for InFlight {
    fn clone(&self) -> Self {
        let connection = match &self.connection {
            Some(budget) => Arc::clone(budget),
            None => {
                let peer = *self.opening.lock().unwrap_or_else(PoisonError::into_inner);
                Arc::new(Budget::new(Scope::Connection, self.connection_max, peer))
            }
        };
        Self {
            node: Arc::clone(&self.node),
            connection: Some(connection),
            connection_max: self.connection_max,
            opening: Arc::clone(&self.opening),
            cuts: self.cuts.clone(),
        }
    }
}

/// A request-response behaviour whose codec's connection budgets know their peer: it names
/// the peer while the inner behaviour sets up a connection's handler (and so clones its
/// codec). Everything else goes straight to the inner behaviour, which it derefs to.
pub struct Budgeted<Req: Frame + 'static, Resp: Frame + 'static> {
    inner: request_response::Behaviour<FrameCodec<Req, Resp>>,
    opening: Arc<Mutex<Option<PeerId>>>,
}

impl<Req: Frame + 'static, Resp: Frame + 'static> Budgeted<Req, Resp> {
    pub fn new(
        codec: FrameCodec<Req, Resp>,
        protocol: StreamProtocol,
        config: request_response::Config,
    ) -> Self {
        let opening = Arc::clone(&codec.in_flight.opening);
        let inner = request_response::Behaviour::with_codec(
            codec,
            [(protocol, request_response::ProtocolSupport::Full)],
            config,
        );
        Self { inner, opening }
    }

    fn opening<T>(&mut self, peer: PeerId, set_up: impl FnOnce(&mut Self) -> T) -> T {
        *self.opening.lock().unwrap_or_else(PoisonError::into_inner) = Some(peer);
        let handler = set_up(self);
        *self.opening.lock().unwrap_or_else(PoisonError::into_inner) = None;
        handler
    }
}

impl<Req: Frame + 'static, Resp: Frame + 'static> std::ops::Deref for Budgeted<Req, Resp> {
    type Target = request_response::Behaviour<FrameCodec<Req, Resp>>;

    fn deref(&self) -> &Self::Target {
        &self.inner
    }
}

impl<Req: Frame + 'static, Resp: Frame + 'static> std::ops::DerefMut for Budgeted<Req, Resp> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.inner
    }
}

type Inner<Req, Resp> = request_response::Behaviour<FrameCodec<Req, Resp>>;

impl<Req: Frame + 'static, Resp: Frame + 'static> NetworkBehaviour for Budgeted<Req, Resp> {
    type ConnectionHandler = <Inner<Req, Resp> as NetworkBehaviour>::ConnectionHandler;
    type ToSwarm = <Inner<Req, Resp> as NetworkBehaviour>::ToSwarm;

    fn handle_pending_inbound_connection(
        &mut self,
        connection_id: ConnectionId,
        local_addr: &Multiaddr,
        remote_addr: &Multiaddr,
    ) -> Result<(), ConnectionDenied> {
        self.inner.handle_pending_inbound_connection(connection_id, local_addr, remote_addr)
    }

    fn handle_established_inbound_connection(
        &mut self,
        connection_id: ConnectionId,
        peer: PeerId,
        local_addr: &Multiaddr,
        remote_addr: &Multiaddr,
    ) -> Result<THandler<Self>, ConnectionDenied> {
        self.opening(peer, |this| {
            this.inner.handle_established_inbound_connection(connection_id, peer, local_addr, remote_addr)
        })
    }

    fn handle_pending_outbound_connection(
        &mut self,
        connection_id: ConnectionId,
        maybe_peer: Option<PeerId>,
        addresses: &[Multiaddr],
        effective_role: Endpoint,
    ) -> Result<Vec<Multiaddr>, ConnectionDenied> {
        self.inner.handle_pending_outbound_connection(connection_id, maybe_peer, addresses, effective_role)
    }

    fn handle_established_outbound_connection(
        &mut self,
        connection_id: ConnectionId,
        peer: PeerId,
        addr: &Multiaddr,
        role_override: Endpoint,
        port_use: PortUse,
    ) -> Result<THandler<Self>, ConnectionDenied> {
        self.opening(peer, |this| {
            this.inner.handle_established_outbound_connection(
                connection_id,
                peer,
                addr,
                role_override,
                port_use,
            )
        })
    }

    fn on_swarm_event(&mut self, event: FromSwarm) {
        self.inner.on_swarm_event(event);
    }

    fn on_connection_handler_event(
        &mut self,
        peer_id: PeerId,
        connection_id: ConnectionId,
        event: THandlerOutEvent<Self>,
    ) {
        self.inner.on_connection_handler_event(peer_id, connection_id, event);
    }

    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<ToSwarm<Self::ToSwarm, THandlerInEvent<Self>>> {
        self.inner.poll(cx)
    }
}

/// Which budget a request overran.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// The connection's: the peer sent more than its share at once.
    Connection,
    /// The node's: all peers together did.
    Node,
}

/// A request refused because its bytes would overrun a budget: the stream fails with it, and
/// it is reported to the driver (libp2p does not report a request that failed to read).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("request bytes in flight would exceed the {} budget of {max} bytes", match scope { Scope::Connection => "connection", Scope::Node => "node" })]
pub struct Overrun {
    pub scope: Scope,
    pub max: usize,
}

#[cfg(test)]
impl Overrun {
    /// The overrun a stream failed with, if that is why it failed.
    fn of(error: &io::Error) -> Option<Self> {
        error.get_ref().and_then(|inner| inner.downcast_ref::<Self>()).copied()
    }
}

/// Bytes in flight against one bound (a connection's knows its peer).
#[derive(Debug)]
struct Budget {
    scope: Scope,
    used: AtomicUsize,
    max: usize,
    peer: Option<PeerId>,
}

impl Budget {
    const fn new(scope: Scope, max: usize, peer: Option<PeerId>) -> Self {
        Self { scope, used: AtomicUsize::new(0), max, peer }
    }

    /// Takes `bytes` if they fit.
    fn take(&self, bytes: usize) -> Result<(), Overrun> {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|total| *total <= self.max)
            })
            .map(drop)
            .map_err(|_| Overrun { scope: self.scope, max: self.max })
    }

    fn give(&self, bytes: usize) {
        self.used.fetch_sub(bytes, Ordering::AcqRel);
    }
}

/// What one request holds of both budgets; given back when dropped.
struct Charge<'a> {
    budgets: [&'a Budget; 2],
    charged: usize,
    cuts: &'a mpsc::Sender<(Option<PeerId>, Overrun)>,
}

impl Charge<'_> {
    /// Charges up to `bytes` in all (the node's budget first: an overrun there is nobody's
    /// fault in particular, so it is the one reported when both are short).
    fn grow_to(&mut self, bytes: usize) -> io::Result<()> {
        let Some(more) = bytes.checked_sub(self.charged).filter(|more| *more > 0) else { return Ok(()) };
        let [node, connection] = self.budgets;
        if let Err(overrun) = node.take(more) {
            // Full: the driver has overruns to see to already (counts may run short).
            let _ = self.cuts.try_send((None, overrun));
            return Err(io::Error::other(overrun));
        }
        if let Err(overrun) = connection.take(more) {
            node.give(more);
            // Full: the driver has cuts to make already; this peer's next stream tells again.
            let _ = self.cuts.try_send((connection.peer, overrun));
            return Err(io::Error::other(overrun));
        }
        self.charged = bytes;
        Ok(())
    }
}

impl Drop for Charge<'_> {
    fn drop(&mut self) {
        for budget in self.budgets {
            budget.give(self.charged);
        }
    }
}

/// Read buffers kept between messages, already initialised: a fresh 1 MiB buffer per chunk
/// costs zeroing and page faults on every answer.
#[derive(Debug, Default)]
struct BufferPool(Mutex<Vec<Vec<u8>>>);

impl BufferPool {
    /// Buffers kept at most (16 chunk-sized ones are 16 MiB, for 64 requests in flight).
    const KEPT_MAX: usize = 16;

    /// A buffer of at least `len` initialised bytes.
    fn take(&self, len: usize) -> Vec<u8> {
        let mut buffer = self.0.lock().unwrap_or_else(PoisonError::into_inner).pop().unwrap_or_default();
        if buffer.len() < len {
            buffer.resize(len, 0);
        }
        buffer
    }

    /// Keeps `buffer` for another message, unless it grew past `len_max` (a rare large
    /// message's buffer is not worth holding on to) or enough are kept.
    fn give(&self, buffer: Vec<u8>, len_max: usize) {
        let mut kept = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if kept.len() < Self::KEPT_MAX && buffer.len() <= len_max {
            kept.push(buffer);
        }
    }
}

async fn read_frame<F: Frame, T: AsyncRead + Unpin + Send>(
    io: &mut T,
    buffers: &BufferPool,
    mut charge: Option<Charge<'_>>,
) -> io::Result<F> {
    let mut buffer = buffers.take(F::CAPACITY);
    let read = read_into(io, &mut buffer, F::BYTES_MAX, charge.as_mut()).await;
    let frame = read.and_then(|len| {
        F::decode(&buffer[..len]).map_err(|err| io::Error::new(io::ErrorKind::InvalidData, err))
    });
    buffers.give(buffer, F::CAPACITY);
    frame
}

/// Reads to the end of the stream into `buffer` (grown as needed, never zeroed again),
/// refusing more than `len_max` bytes; returns the length read. With a `charge`, every byte
/// read is charged to it before it is read (in steps of what the next read may bring).
async fn read_into<T: AsyncRead + Unpin + Send>(
    io: &mut T,
    buffer: &mut Vec<u8>,
    len_max: usize,
    mut charge: Option<&mut Charge<'_>>,
) -> io::Result<usize> {
    let mut len = 0;
    loop {
        if len == buffer.len() {
            // One byte past the limit, so an oversized message is detected, not truncated.
            let grown = buffer.len().saturating_mul(2).clamp(4096, len_max + 1);
            if grown <= len {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("message longer than {len_max} bytes"),
                ));
            }
            buffer.resize(grown, 0);
        }
        // What this read may bring: no more than the next step (so a small request is
        // charged little, whatever buffer the pool lent).
        let end = buffer.len().min(len + CHARGE_STEP);
        if let Some(charge) = charge.as_deref_mut() {
            charge.grow_to(end)?;
        }
        match io.read(&mut buffer[len..end]).await {
            Ok(0) => return Ok(len),
            Ok(n) => len += n,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
}

/// The most bytes one read may add to a request: each step is charged before the read.
const CHARGE_STEP: usize = 64 * 1024;

async fn write_frame<T: AsyncWrite + Unpin + Send>(io: &mut T, bytes: Vec<u8>) -> io::Result<()> {
    io.write_all(&bytes).await?;
    io.close().await
}

impl<Req: Frame, Resp: Frame> Codec for FrameCodec<Req, Resp> {
    type Protocol = StreamProtocol;
    type Request = Req;
    type Response = Resp;

    async fn read_request<T: AsyncRead + Unpin + Send>(
        &mut self,
        _: &StreamProtocol,
        io: &mut T,
    ) -> io::Result<Req> {
        read_frame(io, &self.requests, Some(self.in_flight.charge())).await
    }

    async fn read_response<T: AsyncRead + Unpin + Send>(
        &mut self,
        _: &StreamProtocol,
        io: &mut T,
    ) -> io::Result<Resp> {
        read_frame(io, &self.responses, None).await
    }

    async fn write_request<T: AsyncWrite + Unpin + Send>(
        &mut self,
        _: &StreamProtocol,
        io: &mut T,
        request: Req,
    ) -> io::Result<()> {
        write_frame(io, request.encode()).await
    }

    async fn write_response<T: AsyncWrite + Unpin + Send>(
        &mut self,
        _: &StreamProtocol,
        io: &mut T,
        response: Resp,
    ) -> io::Result<()> {
        write_frame(io, response.encode()).await
    }
}

#[cfg(test)]
mod tests {
    use futures::io::Cursor;
    use murmur_protocol::Digest;

    use super::*;

    fn read<F: Frame>(bytes: Vec<u8>, buffers: &BufferPool) -> io::Result<F> {
        futures::executor::block_on(read_frame::<F, _>(&mut Cursor::new(bytes), buffers, None))
    }

    #[test]
    fn frames_are_read_whole_with_reused_buffers_and_refused_past_the_limit() {
        let buffers = BufferPool::default();
        let chunk = ArtifactResponse::Bytes { data: (0..1_048_576u32).map(|i| i as u8).collect() };
        assert_eq!(read::<ArtifactResponse>(chunk.encode(), &buffers).unwrap(), chunk);
        let small = ArtifactResponse::Error { reason: "busy".into() };
        // The second read reuses the first one's buffer: nothing left in it leaks in.
        assert_eq!(read::<ArtifactResponse>(small.encode(), &buffers).unwrap(), small);
        assert_eq!(buffers.0.lock().unwrap().len(), 1);

        let request = ArtifactRequest::Blob { digest: Digest::of(b"c"), offset: 0, len: 1 };
        let mut long = request.encode();
        long.resize(ArtifactRequest::BYTES_MAX + 1, 0);
        let err = read::<ArtifactRequest>(long, &buffers).unwrap_err();
        assert!(err.to_string().contains("longer than"), "{err}");
        let mut trailing = request.encode();
        trailing.push(0);
        assert_eq!(
            read::<ArtifactRequest>(trailing, &buffers).unwrap_err().kind(),
            io::ErrorKind::InvalidData
        );
    }

    /// A stream that yields `len` bytes and then waits forever (a peer that never closes).
    struct Endless(usize);

    impl AsyncRead for Endless {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &mut [u8],
        ) -> std::task::Poll<io::Result<usize>> {
            if self.0 == 0 {
                return std::task::Poll::Pending;
            }
            let n = buf.len().min(self.0);
            self.0 -= n;
            std::task::Poll::Ready(Ok(n))
        }
    }

    fn used(budget: &Budget) -> usize {
        budget.used.load(Ordering::Relaxed)
    }

    #[test]
    fn requests_are_charged_as_they_arrive_to_their_connection_and_the_node() {
        use futures::FutureExt;
        let (cuts, mut cut) = mpsc::channel(8);
        let template = InFlight::node(3 << 20, 1 << 20, cuts);
        let flooder = PeerId::random();
        *template.opening.lock().unwrap() = Some(flooder);
        // As libp2p does: the behaviour's codec cloned per connection, that clone per stream.
        let first = template.clone();
        *template.opening.lock().unwrap() = None;
        let second = template.clone();
        let (a, b) = (first.clone(), first.clone());
        assert!(Arc::ptr_eq(a.connection.as_ref().unwrap(), b.connection.as_ref().unwrap()));
        assert!(!Arc::ptr_eq(first.connection.as_ref().unwrap(), second.connection.as_ref().unwrap()));
        let buffers = BufferPool::default();

        // Two streams on one connection hold 600 KiB each: the second overruns it.
        let mut one = Endless(600 << 10);
        let mut held = Box::pin(read_frame::<TaskRequest, _>(&mut one, &buffers, Some(a.charge())));
        assert!(held.as_mut().now_or_never().is_none(), "still reading");
        assert!(used(&template.node) >= 600 << 10);
        let mut two = Endless(600 << 10);
        let err = read_frame::<TaskRequest, _>(&mut two, &buffers, Some(b.charge())).now_or_never().unwrap();
        let overrun = Overrun::of(&err.unwrap_err()).expect("an overrun");
        assert_eq!(overrun, Overrun { scope: Scope::Connection, max: 1 << 20 });
        assert_eq!(
            cut.try_recv().unwrap(),
            (Some(flooder), overrun),
            "reported for the driver to cut it off"
        );

        // Another connection is not held up by it.
        let mut three = Endless(600 << 10);
        let c = second.clone();
        let mut other = Box::pin(read_frame::<TaskRequest, _>(&mut three, &buffers, Some(c.charge())));
        assert!(other.as_mut().now_or_never().is_none());

        // What a finished (or failed) read held is given back.
        drop(held);
        drop(other);
        assert_eq!(used(&template.node), 0);
        assert_eq!(used(first.connection.as_ref().unwrap()), 0);

        // The node's budget binds all connections together, and is nobody's fault.
        let tight = InFlight::node(200 << 10, 1 << 20, mpsc::channel(1).0);
        let (x, y) = (tight.clone(), tight.clone());
        let mut four = Endless(80 << 10);
        let mut held = Box::pin(read_frame::<TaskRequest, _>(&mut four, &buffers, Some(x.charge())));
        assert!(held.as_mut().now_or_never().is_none());
        let mut five = Endless(80 << 10);
        let err = read_frame::<TaskRequest, _>(&mut five, &buffers, Some(y.charge())).now_or_never().unwrap();
        assert_eq!(Overrun::of(&err.unwrap_err()).map(|o| o.scope), Some(Scope::Node));
    }

    #[test]
    fn a_small_request_is_charged_little_and_read_whole() {
        let template = InFlight::node(1 << 20, 8 << 10, mpsc::channel(1).0);
        let stream = template.clone();
        let request = TaskRequest::Cancel { task: "00000000000000000000000000000000".parse().unwrap() };
        let read = futures::executor::block_on(read_frame::<TaskRequest, _>(
            &mut Cursor::new(request.encode()),
            &BufferPool::default(),
            Some(stream.charge()),
        ));
        assert_eq!(read.unwrap(), request);
        assert_eq!(used(&template.node), 0);
    }
}
