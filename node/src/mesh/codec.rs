//! The request-response codec for our CBOR messages: one message per stream, read up to
//! its named size limit and decoded strictly by the protocol crate.

use std::io;
use std::marker::PhantomData;

use futures::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use libp2p::StreamProtocol;
use libp2p::request_response::Codec;
use murmur_protocol::DecodeError;
use murmur_protocol::artifact::{ARTIFACT_FRAME_BYTES_MAX, ArtifactRequest, ArtifactResponse};
use murmur_protocol::limits::{SYNC_REQUEST_BYTES_MAX, SYNC_RESPONSE_BYTES_MAX};
use murmur_protocol::sync::{SyncRequest, SyncResponse};
use murmur_protocol::task::{TASK_FRAME_BYTES_MAX, TaskRequest, TaskResponse};

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

/// Codec for a request type and a response type.
#[derive(Debug)]
pub struct FrameCodec<Req, Resp>(PhantomData<fn() -> (Req, Resp)>);

impl<Req, Resp> Default for FrameCodec<Req, Resp> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

impl<Req, Resp> Clone for FrameCodec<Req, Resp> {
    fn clone(&self) -> Self {
        Self::default()
    }
}

async fn read_frame<F: Frame, T: AsyncRead + Unpin + Send>(io: &mut T) -> io::Result<F> {
    let mut bytes = Vec::with_capacity(F::CAPACITY);
    // Read one byte past the limit, so an oversized message is detected, not truncated.
    io.take(F::BYTES_MAX as u64 + 1).read_to_end(&mut bytes).await?;
    if bytes.len() > F::BYTES_MAX {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("message longer than {} bytes", F::BYTES_MAX),
        ));
    }
    F::decode(&bytes).map_err(|err| io::Error::new(io::ErrorKind::InvalidData, err))
}

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
        read_frame(io).await
    }

    async fn read_response<T: AsyncRead + Unpin + Send>(
        &mut self,
        _: &StreamProtocol,
        io: &mut T,
    ) -> io::Result<Resp> {
        read_frame(io).await
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
