//! `/murmur/artifact-bulk/1`: a pull's chunk requests to one provider on one long-lived
//! stream instead of a stream per chunk.
//!
//! A `/murmur/artifact/1` request opens a yamux stream, negotiates the protocol, sends one
//! request and reads one answer; every chunk pays that, and every new stream starts at
//! yamux's 256 KiB window. A bulk stream pays it once: its window grows with the transfer,
//! and requests are pipelined — the puller writes each request as the pull scheduler
//! issues it, the provider answers them in order, one at a time, reading the next range
//! while the previous answer is on the wire.
//!
//! Frames: a request is a 4-byte big-endian length and the canonical bytes of an
//! [`ArtifactRequest`] (at most [`BULK_REQUEST_BYTES_MAX`]). An answer is a tag byte, a
//! 4-byte big-endian length and the payload: tag 0 is [`ArtifactResponse::Bytes`] with the
//! raw bytes as payload (read straight into their buffer, no decoding copy), tag 1 any
//! answer as its canonical bytes. Nothing else changes: the puller checks every chunk
//! against the chunk list before it is written, the scheduler (`murmur_protocol::pull`)
//! decides what to ask of whom, and a provider that does not speak this protocol (an older
//! node) or has no stream to spare is asked over `/murmur/artifact/1` as before.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, StreamExt};
use libp2p::StreamProtocol;
use libp2p_stream::{Control, OpenStreamError};
use murmur_config::limits::ARTIFACT_REQUEST_TIMEOUT;
use murmur_protocol::NodeId;
use murmur_protocol::artifact::{
    ARTIFACT_FRAME_BYTES_MAX, ARTIFACT_REASON_BYTES_MAX, ArtifactRequest, ArtifactResponse, CHUNK_BYTES_MAX,
};
use murmur_store::ArtifactStore;
use tokio::sync::{Semaphore, mpsc, oneshot};
use tracing::debug;

use crate::driver::{ServeFaults, serve_request};
use crate::frames::{read_frame, write_frame};

/// The bulk chunk protocol.
pub const BULK_PROTOCOL: StreamProtocol = StreamProtocol::new("/murmur/artifact-bulk/1");

/// A request frame's bound: a request names a blob range (about a hundred bytes).
pub const BULK_REQUEST_BYTES_MAX: usize = 4 * 1024;
/// Bulk streams this node serves at once, from all peers (each holds at most three chunks
/// in memory: one being read, one ready, one being written). One more is reset, and its
/// puller asks over `/murmur/artifact/1` for a while.
pub const BULK_STREAMS_MAX: usize = 32;
/// Requests one lane has written and not yet had answered; a pull keeps up to 16 in flight
/// per provider, and several pulls share a lane.
const LANE_IN_FLIGHT_MAX: usize = 128;
/// Requests waiting for a lane's writer; one more fails at once.
const LANE_QUEUE_MAX: usize = 256;
/// A lane given no request for this long closes its stream.
const LANE_IDLE: Duration = Duration::from_secs(20);
/// A served stream that brings no request for this long is closed.
const SERVE_IDLE: Duration = Duration::from_secs(60);
/// How long the provider may send nothing of the next answer while requests wait before
/// the lane gives its stream up (the provider hangs; the connection may still be alive).
/// The requests in flight fail and the next request opens a new lane: a hung stream must
/// not keep taking requests that no one will answer.
const ANSWER_TIMEOUT: Duration = ARTIFACT_REQUEST_TIMEOUT;
/// How long opening a bulk stream may take before the lane falls back.
const OPEN_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one answer may take to write before the provider gives the stream up (the
/// puller stopped reading).
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a provider that does not speak the protocol is asked the old way before the
/// next try (it may have been upgraded).
const UNSUPPORTED_RETRY: Duration = Duration::from_secs(600);
/// How long a provider whose stream failed before its first answer (busy, or gone) is
/// asked the old way.
const FAILED_RETRY: Duration = Duration::from_secs(30);

const TAG_BYTES: u8 = 0;
const TAG_OTHER: u8 = 1;

/// What became of a request given to a lane.
#[derive(Debug)]
pub(crate) enum LaneAnswer {
    Answer(Result<ArtifactResponse, String>),
    /// The lane could not carry it; ask over `/murmur/artifact/1`.
    Fallback(ArtifactRequest),
}

/// Where [`Lanes::send`] put a request.
#[derive(Debug)]
pub(crate) enum Queued {
    Lane(oneshot::Receiver<LaneAnswer>),
    Fallback(ArtifactRequest),
    Busy,
}

struct Ask {
    request: ArtifactRequest,
    reply: oneshot::Sender<LaneAnswer>,
}

enum Lane {
    Open(mpsc::Sender<Ask>),
    Fallback { until: Instant },
}

type LaneMap = Arc<Mutex<HashMap<NodeId, Lane>>>;

/// The puller's side: at most one lane (one bulk stream and its two halves) per provider.
#[derive(Clone)]
pub(crate) struct Lanes {
    control: Control,
    lanes: LaneMap,
}

impl std::fmt::Debug for Lanes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lanes").finish_non_exhaustive()
    }
}

impl Lanes {
    pub(crate) fn new(control: Control) -> Self {
        Self { control, lanes: LaneMap::default() }
    }

    /// Gives `request` to `peer`'s lane, opening one if there is none (must run inside the
    /// tokio runtime).
    pub(crate) fn send(&self, peer: NodeId, mut request: ArtifactRequest) -> Queued {
        let mut lanes = self.lanes.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            match lanes.get(&peer) {
                Some(Lane::Fallback { until }) if Instant::now() < *until => {
                    return Queued::Fallback(request);
                }
                Some(Lane::Open(asks)) => {
                    let (reply, answer) = oneshot::channel();
                    match asks.try_send(Ask { request, reply }) {
                        Ok(()) => return Queued::Lane(answer),
                        Err(mpsc::error::TrySendError::Full(_)) => return Queued::Busy,
                        // The lane closed (idle, or its stream failed): open another.
                        Err(mpsc::error::TrySendError::Closed(ask)) => request = ask.request,
                    }
                    lanes.remove(&peer);
                }
                _ => {
                    let now = Instant::now();
                    lanes.retain(|_, lane| match lane {
                        Lane::Open(asks) => !asks.is_closed(),
                        Lane::Fallback { until } => now < *until,
                    });
                    let (tx, rx) = mpsc::channel(LANE_QUEUE_MAX);
                    lanes.insert(peer, Lane::Open(tx));
                    tokio::spawn(run_lane(peer, self.control.clone(), rx, Arc::clone(&self.lanes)));
                }
            }
        }
    }
}

/// One lane: opens the stream, then writes requests and reads answers until it idles or fails.
async fn run_lane(peer: NodeId, mut control: Control, mut asks: mpsc::Receiver<Ask>, lanes: LaneMap) {
    let fall_back = |asks: &mut mpsc::Receiver<Ask>, retry: Duration| {
        lanes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(peer, Lane::Fallback { until: Instant::now() + retry });
        asks.close();
        while let Ok(ask) = asks.try_recv() {
            let _ = ask.reply.send(LaneAnswer::Fallback(ask.request));
        }
    };
    let stream =
        match tokio::time::timeout(OPEN_TIMEOUT, control.open_stream(peer.to_peer_id(), BULK_PROTOCOL)).await
        {
            Ok(Ok(stream)) => stream,
            Ok(Err(OpenStreamError::UnsupportedProtocol(_))) => {
                return fall_back(&mut asks, UNSUPPORTED_RETRY);
            }
            Ok(Err(err)) => {
                debug!(peer = %peer, error = %err, "cannot open a bulk stream");
                return fall_back(&mut asks, FAILED_RETRY);
            }
            Err(_) => return fall_back(&mut asks, FAILED_RETRY),
        };
    let (reader, writer) = stream.split();
    let (sent_tx, mut sent) = mpsc::channel(LANE_IN_FLIGHT_MAX);
    let answered = AtomicU64::new(0);
    let outcome = {
        let write = write_requests(writer, &mut asks, sent_tx);
        let read = read_answers(reader, &mut sent, &answered, ANSWER_TIMEOUT);
        tokio::pin!(write, read);
        tokio::select! {
            read = &mut read => read,
            write = &mut write => match write {
                Ok(()) => read.await,
                Err(err) => Err(err),
            },
        }
    };
    let Err(err) = outcome else { return };
    debug!(peer = %peer, error = %err, "bulk stream failed");
    // What is left in flight or queued: asked the old way if the stream never answered
    // (the provider refused it), failed otherwise (the pull asks again, elsewhere or later).
    let never_answered = answered.load(Ordering::Relaxed) == 0;
    if never_answered {
        lanes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(peer, Lane::Fallback { until: Instant::now() + FAILED_RETRY });
    }
    sent.close();
    asks.close();
    while let Ok(ask) = sent.try_recv().or_else(|_| asks.try_recv()) {
        let answer = if never_answered {
            LaneAnswer::Fallback(ask.request)
        } else {
            LaneAnswer::Answer(Err(format!("the bulk stream to {peer} failed: {err}")))
        };
        let _ = ask.reply.send(answer);
    }
}

/// Writes each request as it comes, handing it to the reader first; at idle (no request
/// for [`LANE_IDLE`]) stops taking requests, sends what was queued and closes its half.
async fn write_requests<W: AsyncWrite + Unpin>(
    mut writer: W,
    asks: &mut mpsc::Receiver<Ask>,
    sent: mpsc::Sender<Ask>,
) -> std::io::Result<()> {
    loop {
        let ask = match tokio::time::timeout(LANE_IDLE, asks.recv()).await {
            Ok(Some(ask)) => ask,
            Ok(None) => break,
            Err(_) => {
                // Idle: new requests open a new lane; those queued before the close are
                // still sent, and answers still in flight are still read (only the writing
                // half closes).
                asks.close();
                continue;
            }
        };
        let frame = ask.request.encode();
        if sent.send(ask).await.is_err() {
            break;
        }
        write_frame(&mut writer, &frame).await?;
    }
    writer.close().await
}

/// Reads answers in the order their requests were written and hands each to its asker;
/// fails when an answer has not come `answer_timeout` after the reader began waiting for it.
async fn read_answers<R: AsyncRead + Unpin>(
    mut reader: R,
    sent: &mut mpsc::Receiver<Ask>,
    answered: &AtomicU64,
    answer_timeout: Duration,
) -> std::io::Result<()> {
    while let Some(ask) = sent.recv().await {
        let answer =
            tokio::time::timeout(answer_timeout, read_answer(&mut reader)).await.unwrap_or_else(|_| {
                Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("the provider sent no answer for {} s", answer_timeout.as_secs_f32()),
                ))
            });
        match answer {
            Ok(answer) => {
                answered.fetch_add(1, Ordering::Relaxed);
                let _ = ask.reply.send(LaneAnswer::Answer(Ok(answer)));
            }
            Err(err) => {
                let _ = ask.reply.send(if answered.load(Ordering::Relaxed) == 0 {
                    LaneAnswer::Fallback(ask.request)
                } else {
                    LaneAnswer::Answer(Err(format!("the bulk stream failed: {err}")))
                });
                return Err(err);
            }
        }
    }
    Ok(())
}

fn invalid(reason: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, reason)
}

/// Reads one answer frame: tag, length, payload.
async fn read_answer<R: AsyncRead + Unpin>(reader: &mut R) -> std::io::Result<ArtifactResponse> {
    let mut head = [0u8; 5];
    reader.read_exact(&mut head).await?;
    let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
    let bound = if head[0] == TAG_BYTES { CHUNK_BYTES_MAX as usize } else { ARTIFACT_FRAME_BYTES_MAX };
    if len > bound {
        return Err(invalid(format!("an answer of {len} bytes, more than the limit of {bound}")));
    }
    let mut data = vec![0u8; len];
    reader.read_exact(&mut data).await?;
    match head[0] {
        TAG_BYTES => Ok(ArtifactResponse::Bytes { data }),
        TAG_OTHER => ArtifactResponse::decode(&data).map_err(|err| invalid(err.to_string())),
        tag => Err(invalid(format!("an answer with the unknown tag {tag}"))),
    }
}

/// Writes one answer frame (and flushes it).
async fn write_answer<W: AsyncWrite + Unpin>(
    writer: &mut W,
    answer: &ArtifactResponse,
) -> std::io::Result<()> {
    let encoded;
    let (tag, payload) = match answer {
        ArtifactResponse::Bytes { data } => (TAG_BYTES, data.as_slice()),
        other => {
            encoded = other.encode();
            (TAG_OTHER, encoded.as_slice())
        }
    };
    let len = u32::try_from(payload.len()).map_err(|_| invalid("an answer over 4 GiB".into()))?;
    let mut head = [0u8; 5];
    head[0] = tag;
    head[1..].copy_from_slice(&len.to_be_bytes());
    writer.write_all(&head).await?;
    writer.write_all(payload).await?;
    writer.flush().await
}

/// Bulk streams served and refused, for the node's metrics.
#[derive(Debug, Default)]
pub(crate) struct BulkStats {
    pub(crate) served: AtomicU64,
    pub(crate) refused: AtomicU64,
}

/// Serves peers' bulk streams from `store` until the node stops.
pub(crate) fn serve(
    mut control: Control,
    store: Arc<ArtifactStore>,
    faults: ServeFaults,
    stats: Arc<BulkStats>,
) -> anyhow::Result<()> {
    if faults.no_bulk {
        return Ok(()); // peers' streams are refused as unsupported
    }
    let mut incoming = control
        .accept(BULK_PROTOCOL)
        .map_err(|_| anyhow::anyhow!("{BULK_PROTOCOL} is already being served"))?;
    let slots = Arc::new(Semaphore::new(BULK_STREAMS_MAX));
    tokio::spawn(async move {
        while let Some((peer, stream)) = incoming.next().await {
            let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
                stats.refused.fetch_add(1, Ordering::Relaxed);
                debug!(peer = %peer, "bulk stream refused: {BULK_STREAMS_MAX} are being served");
                continue; // dropped: the stream is reset and the puller asks the old way
            };
            let (store, stats) = (Arc::clone(&store), Arc::clone(&stats));
            tokio::spawn(async move {
                if let Err(err) = serve_stream(stream, store, faults, &stats).await {
                    debug!(peer = %peer, error = %err, "bulk stream ended");
                }
                drop(slot);
            });
        }
    });
    Ok(())
}

/// One served stream: a reader that takes requests and reads their ranges (one ready at a
/// time ahead of the writer) and a writer that sends the answers in order.
async fn serve_stream(
    stream: libp2p::Stream,
    store: Arc<ArtifactStore>,
    faults: ServeFaults,
    stats: &BulkStats,
) -> std::io::Result<()> {
    let (mut reader, mut writer) = stream.split();
    let (ready_tx, mut ready) = mpsc::channel::<ArtifactResponse>(1);
    let read = async move {
        loop {
            let bytes =
                match tokio::time::timeout(SERVE_IDLE, read_frame(&mut reader, BULK_REQUEST_BYTES_MAX)).await
                {
                    Ok(Ok(Some(bytes))) => bytes,
                    Ok(Ok(None)) | Err(_) => return Ok(()),
                    Ok(Err(err)) => return Err(err),
                };
            let answer = match ArtifactRequest::decode(&bytes) {
                Ok(request) => {
                    let store = Arc::clone(&store);
                    tokio::task::spawn_blocking(move || serve_request(&store, &request, faults))
                        .await
                        .unwrap_or_else(|err| ArtifactResponse::Error {
                            reason: format!("the read failed: {err}"),
                        })
                }
                Err(err) => {
                    let mut reason = format!("a malformed request: {err}");
                    reason.truncate(reason.floor_char_boundary(ARTIFACT_REASON_BYTES_MAX));
                    ArtifactResponse::Error { reason }
                }
            };
            if ready_tx.send(answer).await.is_err() {
                return Ok(());
            }
        }
    };
    let write = async move {
        while let Some(answer) = ready.recv().await {
            match tokio::time::timeout(WRITE_TIMEOUT, write_answer(&mut writer, &answer)).await {
                Ok(written) => written?,
                Err(_) => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "the puller stopped reading",
                    ));
                }
            }
            stats.served.fetch_add(1, Ordering::Relaxed);
        }
        writer.close().await
    };
    let (read, write) = tokio::join!(read, write);
    read.and(write)
}

#[cfg(test)]
mod tests {
    use super::*;
    use murmur_protocol::Digest;

    #[tokio::test]
    async fn answers_round_trip_and_oversized_or_unknown_ones_are_refused() {
        let mut wire = Vec::new();
        let bytes = ArtifactResponse::Bytes { data: vec![7; 1000] };
        let other = ArtifactResponse::Error { reason: "busy".into() };
        write_answer(&mut wire, &bytes).await.unwrap();
        write_answer(&mut wire, &other).await.unwrap();
        write_answer(&mut wire, &ArtifactResponse::NotFound).await.unwrap();
        assert_eq!(wire[0], TAG_BYTES);
        assert_eq!(&wire[1..5], &1000u32.to_be_bytes(), "raw bytes, no encoding around them");
        let mut reader = futures::io::Cursor::new(wire);
        assert_eq!(read_answer(&mut reader).await.unwrap(), bytes);
        assert_eq!(read_answer(&mut reader).await.unwrap(), other);
        assert_eq!(read_answer(&mut reader).await.unwrap(), ArtifactResponse::NotFound);
        assert!(read_answer(&mut reader).await.is_err(), "the end of the stream is an error mid-lane");

        let mut too_long = vec![TAG_BYTES];
        too_long.extend_from_slice(&(u32::try_from(CHUNK_BYTES_MAX).unwrap() + 1).to_be_bytes());
        let err = read_answer(&mut futures::io::Cursor::new(too_long)).await.unwrap_err();
        assert!(err.to_string().contains("more than the limit"), "{err}");
        let err = read_answer(&mut futures::io::Cursor::new(vec![9, 0, 0, 0, 0])).await.unwrap_err();
        assert!(err.to_string().contains("unknown tag 9"), "{err}");
        let err = read_answer(&mut futures::io::Cursor::new(vec![TAG_OTHER, 0, 0, 0, 2, 0xff, 0xff]))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidData, "{err}");
    }

    /// A lane's reader side holding `count` written requests (their senders dropped), and
    /// the askers' ends.
    async fn written(count: u64) -> (mpsc::Receiver<Ask>, Vec<oneshot::Receiver<LaneAnswer>>) {
        let (sent_tx, sent) = mpsc::channel(8);
        let mut replies = Vec::new();
        for offset in 0..count {
            let (reply, answer) = oneshot::channel();
            let request = ArtifactRequest::Blob { len: 1, digest: Digest::of(b"c"), offset };
            sent_tx.send(Ask { request, reply }).await.unwrap();
            replies.push(answer);
        }
        (sent, replies)
    }

    #[tokio::test]
    async fn a_lane_hands_answers_to_their_askers_in_order_and_fails_the_rest_when_the_stream_breaks() {
        // Three requests written; the provider's side holds two answers, then the stream ends.
        let mut wire = Vec::new();
        write_answer(&mut wire, &ArtifactResponse::Bytes { data: vec![1] }).await.unwrap();
        write_answer(&mut wire, &ArtifactResponse::NotFound).await.unwrap();
        let (mut sent, replies) = written(3).await;
        let answered = AtomicU64::new(0);
        let outcome =
            read_answers(futures::io::Cursor::new(wire), &mut sent, &answered, ANSWER_TIMEOUT).await;
        assert!(outcome.is_err());
        assert_eq!(answered.load(Ordering::Relaxed), 2);
        let got: Vec<LaneAnswer> =
            futures::future::join_all(replies).await.into_iter().map(Result::unwrap).collect();
        assert!(matches!(&got[0], LaneAnswer::Answer(Ok(ArtifactResponse::Bytes { data })) if data == &[1]));
        assert!(matches!(&got[1], LaneAnswer::Answer(Ok(ArtifactResponse::NotFound))));
        assert!(
            matches!(&got[2], LaneAnswer::Answer(Err(reason)) if reason.contains("bulk stream failed")),
            "after answers began, a broken stream fails the request (the pull asks again): {:?}",
            got[2]
        );
    }

    #[tokio::test]
    async fn a_stream_that_never_answers_sends_its_requests_the_old_way() {
        let (sent_tx, mut sent) = mpsc::channel(8);
        let (reply, answer) = oneshot::channel();
        let request = ArtifactRequest::Blob { len: 1, digest: Digest::of(b"c"), offset: 0 };
        sent_tx.send(Ask { request: request.clone(), reply }).await.unwrap();
        let answered = AtomicU64::new(0);
        assert!(
            read_answers(futures::io::Cursor::new(Vec::new()), &mut sent, &answered, ANSWER_TIMEOUT)
                .await
                .is_err()
        );
        assert!(matches!(answer.await.unwrap(), LaneAnswer::Fallback(r) if r == request));
    }

    /// A provider that keeps the stream open and sends nothing.
    struct Silent;

    impl AsyncRead for Silent {
        fn poll_read(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            _: &mut [u8],
        ) -> std::task::Poll<std::io::Result<usize>> {
            std::task::Poll::Pending
        }
    }

    #[tokio::test]
    async fn a_provider_that_hangs_mid_lane_fails_the_lane_instead_of_holding_it_open() {
        let (mut sent, mut replies) = written(2).await;
        // The provider answered before (so the lane does not fall back), then went silent.
        let answered = AtomicU64::new(1);
        let outcome = tokio::time::timeout(
            Duration::from_secs(10),
            read_answers(Silent, &mut sent, &answered, Duration::from_millis(50)),
        )
        .await
        .expect("the lane gave up on its own, long before the test's own limit");
        let err = outcome.unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::TimedOut, "{err}");
        assert!(err.to_string().contains("no answer for 0.05 s"), "{err}");
        let first = replies.remove(0).await.unwrap();
        assert!(
            matches!(&first, LaneAnswer::Answer(Err(reason)) if reason.contains("no answer")),
            "the request waiting on the silent provider fails, so the pull asks again: {first:?}"
        );
    }
}
