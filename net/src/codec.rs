//! The request-response codec for our CBOR messages: one message per stream, read up to
//! its named size limit and decoded strictly by the protocol crate.

use std::io;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex, PoisonError};

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

/// Codec for a request type and a response type. libp2p clones it for every stream; the
/// clones share two pools of read buffers, one for requests and one for responses (their
/// sizes differ: a chunk answer's buffer is not worth keeping for a small request).
#[derive(Debug)]
pub struct FrameCodec<Req, Resp> {
    requests: Arc<BufferPool>,
    responses: Arc<BufferPool>,
    _types: PhantomData<fn() -> (Req, Resp)>,
}

impl<Req, Resp> Default for FrameCodec<Req, Resp> {
    fn default() -> Self {
        Self { requests: Arc::default(), responses: Arc::default(), _types: PhantomData }
    }
}

impl<Req, Resp> Clone for FrameCodec<Req, Resp> {
    fn clone(&self) -> Self {
        Self {
            requests: Arc::clone(&self.requests),
            responses: Arc::clone(&self.responses),
            _types: PhantomData,
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
) -> io::Result<F> {
    let mut buffer = buffers.take(F::CAPACITY);
    let read = read_into(io, &mut buffer, F::BYTES_MAX).await;
    let frame = read.and_then(|len| {
        F::decode(&buffer[..len]).map_err(|err| io::Error::new(io::ErrorKind::InvalidData, err))
    });
    buffers.give(buffer, F::CAPACITY);
    frame
}

/// Reads to the end of the stream into `buffer` (grown as needed, never zeroed again),
/// refusing more than `len_max` bytes; returns the length read.
async fn read_into<T: AsyncRead + Unpin + Send>(
    io: &mut T,
    buffer: &mut Vec<u8>,
    len_max: usize,
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
        match io.read(&mut buffer[len..]).await {
            Ok(0) => return Ok(len),
            Ok(n) => len += n,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
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
        read_frame(io, &self.requests).await
    }

    async fn read_response<T: AsyncRead + Unpin + Send>(
        &mut self,
        _: &StreamProtocol,
        io: &mut T,
    ) -> io::Result<Resp> {
        read_frame(io, &self.responses).await
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
        futures::executor::block_on(read_frame::<F, _>(&mut Cursor::new(bytes), buffers))
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
}
