//! The content transfer: the protocol's pull scheduler ([`Pull`]) carried over
//! `/murmur/artifact/1`: its requests sent to providers, every answer checked against the
//! chunk list on a blocking thread (hashing overlaps the network), approved bytes written
//! into the pull file, new providers joining as they appear.

use std::collections::{BTreeSet, HashMap};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use murmur_config::clock;
use murmur_config::limits::{PULL_IDLE_MAX, PULL_PROVIDER_REFRESH};
use murmur_protocol::artifact::{ArtifactRequest, ArtifactResponse, ChunkList};
use murmur_protocol::pull::{Input, Output, Pull, PullStats};
use murmur_protocol::{Digest, NodeId};
use tracing::warn;

use super::part::{Flush, finish_part, open_part};
use super::{Progress, PullError, Puller};

impl Puller {
    /// Fetches the content into `part` chunk by chunk, as the protocol's pull scheduler
    /// directs, then fsyncs it (checking the whole file against `content` first when the
    /// chunk list does not prove it). New providers
    /// of `manifest` (nodes that finished their own pull) join as they appear.
    pub(super) async fn fetch_content(
        &self,
        part: &Path,
        chunks: &ChunkList,
        (manifest, content): (Digest, Digest),
        providers: &[NodeId],
        progress: &mut (dyn FnMut(Progress) + Send),
    ) -> Result<PullOutcome, PullError> {
        let (file, have) = {
            let part = part.to_path_buf();
            let chunks = chunks.clone();
            tokio::task::spawn_blocking(move || open_part(&part, &chunks))
                .await
                .context("the resume check failed")??
        };
        let pull = Pull::new(
            self.inner.config.clone(),
            chunks.size,
            chunks.chunk_size,
            chunks.chunks.clone(),
            &have,
        )
        .context("cannot schedule the pull")?;
        let resumed_bytes = have.iter().map(|&i| pull.range(i).1).sum();
        let mut run = Run {
            pull,
            chunks: Arc::new(chunks.clone()),
            file: Arc::new(file),
            flush: Flush::new(part),
            received: HashMap::new(),
            known: providers.iter().copied().collect(),
            used: BTreeSet::new(),
            written: resumed_bytes,
            size: chunks.size,
            stalled: false,
            last_write: Instant::now(),
            done: false,
            outcome: PullOutcome { resumed: have.len(), ..PullOutcome::default() },
        };
        run.pull.add_providers(clock::now(), providers);
        let mesh = &self.inner.net;
        let mut inflight = FuturesUnordered::new();
        let mut refresh = tokio::time::interval(PULL_PROVIDER_REFRESH);
        refresh.tick().await;
        let mut reported = Instant::now();
        loop {
            for (provider, index, offset, len) in run.carry_out(progress)? {
                let chunks = Arc::clone(&run.chunks);
                inflight.push(async move {
                    let request = ArtifactRequest::Blob { len, digest: content, offset };
                    (
                        provider,
                        index,
                        Answer::check(mesh.ask_chunk(provider, request).await, chunks, index).await,
                    )
                });
            }
            if reported.elapsed() >= Duration::from_millis(200) || run.done {
                reported = Instant::now();
                progress(Progress::Chunks {
                    written: run.written,
                    size: run.size,
                    providers: run.used.len(),
                });
            }
            if run.done {
                break;
            }
            if run.last_write.elapsed() >= PULL_IDLE_MAX {
                return Err(PullError::Stalled {
                    idle: PULL_IDLE_MAX,
                    missing: run.pull.missing(),
                    total: chunks.chunks.len(),
                    dropped: run.outcome.penalized.len(),
                });
            }
            let wake = run.pull.poll_timeout().map_or(Duration::from_secs(1), |at| {
                Duration::from_millis(at.since(clock::now()))
                    .clamp(Duration::from_millis(1), Duration::from_secs(1))
            });
            tokio::select! {
                Some((provider, index, answer)) = inflight.next() => run.answered(provider, index, answer),
                () = tokio::time::sleep(wake) => run.pull.handle(clock::now(), Input::Tick),
                _ = refresh.tick() => {
                    if let Ok(found) = mesh.artifact_providers(Some(manifest)).await {
                        // New providers join; a stalled pull also takes back those dropped
                        // only for failures (never one that served bad bytes).
                        let now = clock::now();
                        for node in found {
                            if run.known.insert(node) || run.stalled {
                                run.pull.handle(now, Input::AddProvider(node));
                            }
                        }
                        if run.pull.in_flight() > 0 {
                            run.stalled = false;
                        }
                    }
                }
            }
        }
        let Run { pull, file, used, mut outcome, size, chunks, flush, .. } = run;
        flush.finish().await?;
        outcome.stats = pull.stats().clone();
        outcome.providers = used.len();
        let path = part.to_path_buf();
        let proven = chunks.proves(&content);
        tokio::task::spawn_blocking(move || finish_part(&path, &file, (content, proven), size))
            .await
            .context("the final check failed")??;
        Ok(outcome)
    }
}

#[derive(Debug, Default)]
pub(super) struct PullOutcome {
    pub(super) fetched: u64,
    pub(super) resumed: usize,
    pub(super) providers: usize,
    pub(super) penalized: Vec<(NodeId, String)>,
    pub(super) stats: PullStats,
}

/// A chunk request's answer; bytes come with their link in the chunk list, computed on a
/// blocking thread so that hashing overlaps the pull's network work.
enum Answer {
    /// `link` is `None` for bytes of the wrong length (the scheduler refuses those).
    Bytes {
        data: Vec<u8>,
        link: Option<Digest>,
    },
    Other(Result<ArtifactResponse, String>),
}

impl Answer {
    async fn check(answer: Result<ArtifactResponse, String>, chunks: Arc<ChunkList>, index: u32) -> Self {
        match answer {
            Ok(ArtifactResponse::Bytes { data }) => {
                match tokio::task::spawn_blocking(move || {
                    let link = chunks.link(index, &data);
                    (data, link)
                })
                .await
                {
                    Ok((data, link)) => Self::Bytes { data, link },
                    Err(err) => Self::Other(Err(format!("the chunk check failed: {err}"))),
                }
            }
            other => Self::Other(other),
        }
    }
}

/// One content pull in progress: the scheduler and what carries out its decisions.
struct Run {
    pull: Pull,
    /// What each chunk must link to.
    chunks: Arc<ChunkList>,
    file: Arc<File>,
    flush: Flush,
    /// Bytes received and not yet approved or refused, by (provider, chunk).
    received: HashMap<(NodeId, u32), Vec<u8>>,
    known: BTreeSet<NodeId>,
    used: BTreeSet<NodeId>,
    written: u64,
    size: u64,
    /// The scheduler said it has no provider left.
    stalled: bool,
    last_write: Instant,
    done: bool,
    outcome: PullOutcome,
}

impl Run {
    /// Feeds an answer to the scheduler, as the bytes' link in the chunk list (the bytes wait in
    /// `received` until [`Run::carry_out`] writes or drops them).
    fn answered(&mut self, provider: NodeId, index: u32, answer: Answer) {
        let input = match answer {
            Answer::Bytes { data, link } => {
                let len = data.len() as u64;
                // Wrong-length bytes: `Pull` refuses them for their length whatever the
                // digest, so their plain digest stands in for a link.
                let link = link.unwrap_or_else(|| Digest::of(&data));
                self.received.insert((provider, index), data);
                Input::Chunk { provider, index, digest: link, len }
            }
            Answer::Other(Ok(ArtifactResponse::NotFound)) => {
                Input::Failed { provider, index, reason: "not found".into() }
            }
            Answer::Other(Ok(ArtifactResponse::Error { reason })) => {
                Input::Failed { provider, index, reason }
            }
            Answer::Other(Ok(other)) => {
                Input::Failed { provider, index, reason: format!("unexpected answer {other:?}") }
            }
            Answer::Other(Err(reason)) => Input::Failed { provider, index, reason },
        };
        self.pull.handle(clock::now(), input);
    }

    /// Carries out the scheduler's outputs; returns the requests to send.
    fn carry_out(
        &mut self,
        progress: &mut (dyn FnMut(Progress) + Send),
    ) -> anyhow::Result<Vec<(NodeId, u32, u64, u64)>> {
        let mut requests = Vec::new();
        while let Some(output) = self.pull.poll_output() {
            match output {
                Output::Request { provider, index, offset, len } => {
                    requests.push((provider, index, offset, len))
                }
                Output::Write { index, provider } => {
                    let data =
                        self.received.remove(&(provider, index)).context("approved bytes went missing")?;
                    let (offset, _) = self.pull.range(index);
                    self.file.write_all_at(&data, offset).context("cannot write to the pull file")?;
                    self.flush.wrote(&self.file, data.len() as u64)?;
                    self.written = self.written.saturating_add(data.len() as u64).min(self.size);
                    self.last_write = Instant::now();
                    self.outcome.fetched += data.len() as u64;
                    self.used.insert(provider);
                }
                Output::Penalize { provider, reason } => {
                    warn!(provider = %provider, reason = %reason, "provider dropped from the pull");
                    progress(Progress::Penalized { provider: provider.to_string(), reason: reason.clone() });
                    self.outcome.penalized.push((provider, reason));
                }
                Output::Done => self.done = true,
                Output::Stalled { .. } => {
                    self.stalled = true;
                }
            }
        }
        // Bytes not approved by now never will be (bad, or a hedge that lost): the scheduler
        // decides on each answer as it arrives.
        self.received.clear();
        self.done |= self.pull.is_done();
        Ok(requests)
    }
}
