//! A stock libp2p peer for the test binaries: one identity, one connection to a node, and
//! request-response on any of murmur's protocols with raw bytes (each request one stream:
//! the bytes written, the stream closed, the answer read to its end). What it sends is up
//! to the caller, so a test can send what no honest node would, or what only the
//! documentation says.

use std::time::Duration;

use anyhow::Context;
use futures::StreamExt;
use libp2p::request_response::{self, ProtocolSupport};
use libp2p::swarm::{NetworkBehaviour, SwarmEvent};
use libp2p::{Multiaddr, PeerId, StreamProtocol, SwarmBuilder, identify, noise, ping, tcp, yamux};

/// Largest answer read (the largest frame of any protocol: 4 MiB + 64 KiB).
const ANSWER_BYTES_MAX: u64 = 5 << 20;

/// Request-response on raw bytes. A holding codec writes each request and then keeps its
/// stream open (never closing it, so the node waits for the rest): a flood.
#[derive(Clone, Copy, Debug, Default)]
pub struct RawCodec {
    pub hold: bool,
}

impl request_response::Codec for RawCodec {
    type Protocol = StreamProtocol;
    type Request = Vec<u8>;
    type Response = Vec<u8>;

    async fn read_request<T: futures::AsyncRead + Unpin + Send>(
        &mut self,
        _: &Self::Protocol,
        io: &mut T,
    ) -> std::io::Result<Vec<u8>> {
        read_all(io).await
    }

    async fn read_response<T: futures::AsyncRead + Unpin + Send>(
        &mut self,
        _: &Self::Protocol,
        io: &mut T,
    ) -> std::io::Result<Vec<u8>> {
        read_all(io).await
    }

    async fn write_request<T: futures::AsyncWrite + Unpin + Send>(
        &mut self,
        _: &Self::Protocol,
        io: &mut T,
        bytes: Vec<u8>,
    ) -> std::io::Result<()> {
        if self.hold {
            use futures::AsyncWriteExt;
            io.write_all(&bytes).await?;
            io.flush().await?;
            return std::future::pending().await;
        }
        write_all(io, &bytes).await
    }

    async fn write_response<T: futures::AsyncWrite + Unpin + Send>(
        &mut self,
        _: &Self::Protocol,
        io: &mut T,
        bytes: Vec<u8>,
    ) -> std::io::Result<()> {
        write_all(io, &bytes).await
    }
}

async fn read_all<T: futures::AsyncRead + Unpin + Send>(io: &mut T) -> std::io::Result<Vec<u8>> {
    use futures::AsyncReadExt;
    let mut bytes = Vec::new();
    io.take(ANSWER_BYTES_MAX).read_to_end(&mut bytes).await?;
    Ok(bytes)
}

async fn write_all<T: futures::AsyncWrite + Unpin + Send>(io: &mut T, bytes: &[u8]) -> std::io::Result<()> {
    use futures::AsyncWriteExt;
    io.write_all(bytes).await?;
    io.close().await
}

/// The request-response protocols a session asks on (one behaviour each: a behaviour with
/// several would offer them all on every stream, and the node would pick the first).
pub const SYNC: &str = "/murmur/sync/1";
pub const TASK: &str = "/murmur/task/1";
pub const ARTIFACT: &str = "/murmur/artifact/1";
pub const AGENT: &str = "/murmur/agent/1";

#[derive(NetworkBehaviour)]
struct Behaviour {
    identify: identify::Behaviour,
    ping: ping::Behaviour,
    sync: request_response::Behaviour<RawCodec>,
    task: request_response::Behaviour<RawCodec>,
    artifact: request_response::Behaviour<RawCodec>,
    agent: request_response::Behaviour<RawCodec>,
    /// Task requests whose streams are held open ([`Session::flood`]).
    flood: request_response::Behaviour<RawCodec>,
}

fn asker(protocol: &'static str, timeout: Duration) -> request_response::Behaviour<RawCodec> {
    opener(protocol, timeout, RawCodec::default(), 128)
}

fn opener(
    protocol: &'static str,
    timeout: Duration,
    codec: RawCodec,
    streams: usize,
) -> request_response::Behaviour<RawCodec> {
    request_response::Behaviour::with_codec(
        codec,
        [(StreamProtocol::new(protocol), ProtocolSupport::Outbound)],
        request_response::Config::default()
            .with_request_timeout(timeout)
            .with_max_concurrent_streams(streams),
    )
}

/// What [`Session::flood`] saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Flood {
    /// Whether the node closed the connection.
    pub cut_off: bool,
    /// How long after the first request it did (or the wait, if it did not).
    pub after: Duration,
}

/// One peer connected to one node.
pub struct Session {
    swarm: libp2p::Swarm<Behaviour>,
    node: PeerId,
    timeout: Duration,
    /// Whether this peer has answered the node's identify request.
    identified: bool,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("local", &self.local())
            .field("node", &self.node)
            .finish_non_exhaustive()
    }
}

impl Session {
    /// Dials `addr` (ending in `/p2p/<peer id>`) as a new identity announcing `identify`.
    pub fn dial(addr: &Multiaddr, identify: &str, timeout: Duration) -> anyhow::Result<Self> {
        let node = addr
            .iter()
            .find_map(|p| match p {
                libp2p::multiaddr::Protocol::P2p(peer) => Some(peer),
                _ => None,
            })
            .context("the address must end in /p2p/<peer id>")?;
        let mut swarm = SwarmBuilder::with_new_identity()
            .with_tokio()
            .with_tcp(tcp::Config::default(), noise::Config::new, yamux::Config::default)?
            .with_behaviour(|key| Behaviour {
                identify: identify::Behaviour::new(identify::Config::new(identify.to_owned(), key.public())),
                ping: ping::Behaviour::default(),
                sync: asker(SYNC, timeout),
                task: asker(TASK, timeout),
                artifact: asker(ARTIFACT, timeout),
                agent: asker(AGENT, timeout),
                flood: opener(TASK, timeout, RawCodec { hold: true }, 1024),
            })?
            .build();
        swarm.dial(addr.clone())?;
        Ok(Self { swarm, node, timeout, identified: false })
    }

    /// This peer's id.
    #[must_use]
    pub fn local(&self) -> PeerId {
        *self.swarm.local_peer_id()
    }

    /// The node's id.
    #[must_use]
    pub const fn node(&self) -> PeerId {
        self.node
    }

    /// Sends `bytes` on `protocol` (one of [`SYNC`], [`TASK`], [`ARTIFACT`], [`AGENT`])
    /// and returns the answer's bytes.
    pub async fn ask(&mut self, protocol: &'static str, bytes: Vec<u8>) -> anyhow::Result<Vec<u8>> {
        let node = self.node;
        let behaviour = self.swarm.behaviour_mut();
        let id = match protocol {
            SYNC => behaviour.sync.send_request(&node, bytes),
            TASK => behaviour.task.send_request(&node, bytes),
            ARTIFACT => behaviour.artifact.send_request(&node, bytes),
            AGENT => behaviour.agent.send_request(&node, bytes),
            other => anyhow::bail!("no such protocol: {other}"),
        };
        let deadline = tokio::time::Instant::now() + self.timeout + Duration::from_secs(1);
        loop {
            let event = tokio::time::timeout_at(deadline, self.swarm.select_next_some())
                .await
                .with_context(|| format!("no answer on {protocol}"))?;
            self.note(&event);
            let event = match event {
                SwarmEvent::Behaviour(
                    BehaviourEvent::Sync(e)
                    | BehaviourEvent::Task(e)
                    | BehaviourEvent::Artifact(e)
                    | BehaviourEvent::Agent(e)
                    | BehaviourEvent::Flood(e),
                ) => e,
                _ => continue,
            };
            match event {
                request_response::Event::Message {
                    message: request_response::Message::Response { request_id, response },
                    ..
                } if request_id == id => return Ok(response),
                request_response::Event::OutboundFailure { request_id, error, .. } if request_id == id => {
                    anyhow::bail!("the request on {protocol} failed: {error}")
                }
                _ => {}
            }
        }
    }

    /// Drives the connection until this peer has answered the node's identify request (so
    /// the node knows the version it announced), the node closes the connection, or `wait`
    /// passes. A peer that asked one thing and exits at once may otherwise be gone before the
    /// node hears who it was.
    pub async fn until_identified(&mut self, wait: Duration) {
        let deadline = tokio::time::Instant::now() + wait;
        while !self.identified {
            match tokio::time::timeout_at(deadline, self.swarm.select_next_some()).await {
                Ok(SwarmEvent::ConnectionClosed { peer_id, num_established: 0, .. })
                    if peer_id == self.node =>
                {
                    return;
                }
                Ok(event) => self.note(&event),
                Err(_) => return,
            }
        }
    }

    fn note(&mut self, event: &SwarmEvent<BehaviourEvent>) {
        if let SwarmEvent::Behaviour(BehaviourEvent::Identify(identify::Event::Sent { peer_id, .. })) = event
        {
            self.identified |= *peer_id == self.node;
        }
    }

    /// Opens `streams` task streams, writes `bytes` bytes of junk on each and keeps them all
    /// open, then waits up to `wait` for the node to close the connection (as a node that
    /// bounds the bytes a peer may have in flight does).
    pub async fn flood(&mut self, streams: usize, bytes: usize, wait: Duration) -> anyhow::Result<Flood> {
        let node = self.node;
        let started = tokio::time::Instant::now();
        for i in 0..streams {
            // Junk that is not CBOR: the node learns nothing until the stream ends.
            let junk = vec![0xff ^ (i as u8); bytes];
            self.swarm.behaviour_mut().flood.send_request(&node, junk);
        }
        let deadline = started + wait;
        loop {
            match tokio::time::timeout_at(deadline, self.swarm.select_next_some()).await {
                Err(_) => return Ok(Flood { cut_off: false, after: wait }),
                Ok(SwarmEvent::ConnectionClosed { peer_id, num_established: 0, .. }) if peer_id == node => {
                    return Ok(Flood { cut_off: true, after: started.elapsed() });
                }
                Ok(_) => {}
            }
        }
    }
}
