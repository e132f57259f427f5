//! Pulling artifacts from the mesh: resolve `name@version` to a manifest this node can
//! trust, fetch the small blobs whole and the content in verified chunks from every
//! provider at once, then commit it to the store in one step.
//!
//! Trust comes first and never from a provider: the manifest digest is one the caller
//! pinned (a `--digest`, a `murmur.lock` entry) or one a publisher in `trust.publishers`
//! signed for `name@version`. Every byte after that is checked against a digest the
//! manifest names before it is kept. Which chunk to ask of whom, when to hedge a slow
//! request and when to drop a provider is decided by the protocol's
//! [`Pull`](murmur_protocol::pull::Pull); this module carries its requests over
//! `/murmur/artifact/1` and writes what it approves.
//!
//! A pull in progress lives in `store/.pull/<content hex>.part`, pre-sized to the content.
//! A pull started again after a crash (or a failed attempt) hashes that file's chunks and
//! asks only for those that do not match, so nothing trusted is kept in a side file.

use std::collections::{BTreeSet, HashMap};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use murmur_protocol::artifact::{ArtifactRequest, ArtifactResponse, CHUNK_BYTES_MAX, ChunkList};
use murmur_protocol::pull::{Input, Output, Pull, PullConfig, PullStats};
use murmur_protocol::resolve::{Candidate, Offers, Resolution, ResolveConfig};
use murmur_protocol::{Digest, Millis, NodeId, PublicKey};
use serde::Serialize;
use tracing::{info, warn};

use murmur_config::clock;
use murmur_config::limits::{
    ADVERTISED_ARTIFACTS_MAX, ARTIFACT_METADATA_BYTES_MAX, PULL_CANDIDATES_MAX, PULL_FLUSH_EVERY_BYTES,
    PULL_IDLE_MAX, PULL_PROVIDER_REFRESH,
};
use murmur_net::MeshHandle;
pub use murmur_runtime::ports::Want;
use murmur_runtime::ports::{ArtifactPort, PortFuture};
use murmur_store::oci::{manifest_parts, parse_artifact};
use murmur_store::{ArtifactStore, Stored};

/// How a resolve asks providers: waves of 16, 5 s per ask, and once a trusted manifest is
/// offered, a grace of as long as that took (50 ms to 1 s) for the rest of the wave (see
/// [`murmur_protocol::resolve`]). Advertised providers that were not asked, or did not
/// answer in time, still join the pull at its first [`PULL_PROVIDER_REFRESH`], where one that
/// has not served yet gets only a probe's worth of requests.
pub const RESOLVE: ResolveConfig = ResolveConfig::DEFAULT;
/// How long a fetch of a small blob (manifest, config, chunk list) waits for one provider.
pub const RESOLVE_TIMEOUT: Duration = Duration::from_millis(RESOLVE.timeout_ms);

/// What a pull reports as it goes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "event", rename_all = "kebab-case")]
pub enum Progress {
    /// Asking providers which manifest they hold.
    Resolving { providers: usize },
    /// The manifest to pull, why it is trusted, and the content to fetch. `unanswered`:
    /// providers asked that gave no answer (their ask failed or timed out, or was still
    /// open when the resolution settled: a node down but still advertised, or a slow one).
    Resolved {
        manifest: String,
        trusted_by: String,
        content: String,
        size: u64,
        providers: usize,
        unanswered: usize,
    },
    /// Another pull of the same content runs on this node; this one waits for it (and then
    /// finds the content in the store).
    Waiting { content: String },
    /// Content bytes written so far (verified chunks, resumed ones included).
    Chunks { written: u64, size: u64, providers: usize },
    /// A provider was dropped from the pull.
    Penalized { provider: String, reason: String },
}

/// A finished pull.
#[derive(Clone, Debug)]
pub struct Pulled {
    pub stored: Stored,
    /// The store had it already; nothing was fetched.
    pub already: bool,
    /// Bytes fetched now (a resumed pull fetches fewer than the content's size).
    pub fetched: u64,
    /// Chunks found on disk from an earlier attempt.
    pub resumed_chunks: usize,
    pub providers: usize,
    pub penalized: Vec<(NodeId, String)>,
    pub stats: PullStats,
    pub elapsed: Duration,
}

/// Pulls artifacts for this node. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Fetcher {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    mesh: MeshHandle,
    store: Arc<ArtifactStore>,
    publishers: Vec<PublicKey>,
    config: PullConfig,
    /// Content digests being pulled: a second pull of the same content waits its turn.
    active: Mutex<BTreeSet<Digest>>,
    /// The manifests last advertised.
    provided: Mutex<Vec<Digest>>,
    /// Size and modification time of the store's index when it was last read.
    index_seen: Mutex<Option<(u64, u64, Option<std::time::SystemTime>)>>,
}

impl Fetcher {
    #[must_use]
    pub fn new(mesh: MeshHandle, store: Arc<ArtifactStore>, publishers: Vec<PublicKey>) -> Self {
        // 16 chunks (16 MiB) in flight per provider: a libp2p connection (noise + yamux)
        // needs that much outstanding to approach its throughput, and eight pullers at once
        // still fit a provider's serving limit; 64 MiB per pull at most.
        let config = PullConfig { per_provider: 16, in_flight_max: 64, ..PullConfig::default() };
        Self {
            inner: Arc::new(Inner {
                mesh,
                store,
                publishers,
                config,
                active: Mutex::new(BTreeSet::new()),
                provided: Mutex::new(Vec::new()),
                index_seen: Mutex::new(None),
            }),
        }
    }

    /// The store pulls write to.
    #[must_use]
    pub fn store(&self) -> &Arc<ArtifactStore> {
        &self.inner.store
    }

    /// Advertises what the store holds (its manifests, up to the advert's bound), when that
    /// changed since the last call.
    pub async fn advertise(&self) -> anyhow::Result<()> {
        // The index is rewritten (a rename) on every change: unchanged size and mtime mean
        // nothing to read again.
        // The inode too: every rewrite is a rename of a new file.
        let stamp = std::fs::metadata(self.inner.store.root().join("index.json"))
            .ok()
            .map(|m| (std::os::unix::fs::MetadataExt::ino(&m), m.len(), m.modified().ok()));
        {
            let seen = self.inner.index_seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if stamp.is_some() && *seen == stamp {
                return Ok(());
            }
        }
        let mut manifests: Vec<Digest> = self.inner.store.list()?.iter().map(|s| s.manifest).collect();
        manifests.sort();
        manifests.dedup();
        manifests.truncate(ADVERTISED_ARTIFACTS_MAX);
        let unchanged =
            *self.inner.provided.lock().unwrap_or_else(std::sync::PoisonError::into_inner) == manifests;
        if !unchanged {
            self.inner.mesh.set_provided(manifests.clone()).await?;
        }
        // Both remembered only once advertised, so a failed attempt is made again.
        *self.inner.provided.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = manifests;
        *self.inner.index_seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = stamp;
        Ok(())
    }

    /// Keeps the advert in step with the store (artifacts added by `mur artifact add` or
    /// `mur bundle import` next to the running node), every `every`.
    pub async fn advertise_every(self, every: Duration) {
        loop {
            if let Err(err) = self.advertise().await {
                warn!(error = %format!("{err:#}"), "cannot advertise the store's artifacts");
            }
            tokio::time::sleep(every).await;
        }
    }

    /// Keeps every pin on its share of nodes: every `every`, for each pin this node's
    /// store lacks, it computes the pin's holders among the nodes its directory lists
    /// (rendezvous placement, [`murmur_protocol::replicate`]: every node computes the same
    /// holders without talking) and pulls the artifact when it is one of them. So a pinned
    /// artifact reaches `replicas` nodes, and when a holder leaves, the next node in line
    /// pulls it. Pins are keyed by `NAME@VERSION`; the pull trusts what any pull trusts.
    pub async fn keep_pins(self, pins: Vec<murmur_config::Pin>, every: Duration) {
        if pins.is_empty() {
            return;
        }
        let me = self.inner.mesh.local();
        loop {
            tokio::time::sleep(every).await;
            let Ok(members) = self.inner.mesh.members().await else { continue };
            for pin in &pins {
                let key = Digest::of(format!("{}@{}", pin.name, pin.version).as_bytes());
                if !murmur_protocol::replicate::should_hold(&me, &key, &members, pin.replicas) {
                    continue;
                }
                if matches!(self.inner.store.find(&pin.name, Some(&pin.version)), Ok(Some(_))) {
                    continue;
                }
                let want = Want { name: pin.name.clone(), version: pin.version.clone(), pin: None };
                match self.pull(&want, &mut |_| {}).await {
                    Ok(pulled) => info!(
                        artifact = %format!("{}@{}", pin.name, pin.version),
                        replicas = pin.replicas,
                        bytes = pulled.fetched,
                        "pinned artifact replicated here"
                    ),
                    Err(err) => warn!(
                        artifact = %format!("{}@{}", pin.name, pin.version),
                        error = %format!("{err:#}"),
                        "cannot replicate a pinned artifact yet"
                    ),
                }
            }
        }
    }

    /// Pulls `want` from the mesh into the store, reporting progress; returns what the
    /// store then holds. Nothing is named in the store unless every byte was verified.
    pub async fn pull(
        &self,
        want: &Want,
        progress: &mut (dyn FnMut(Progress) + Send),
    ) -> anyhow::Result<Pulled> {
        let started = Instant::now();
        let store = &self.inner.store;
        if let Some(stored) = store.find(&want.name, Some(&want.version))? {
            if let Some(pin) = want.pin
                && pin != stored.manifest
                && pin != stored.content
            {
                bail!(
                    "this node's store holds {}@{} as manifest {} (content {}), not {pin}; nothing was changed",
                    want.name,
                    want.version,
                    stored.manifest,
                    stored.content
                );
            }
            return Ok(Pulled {
                stored,
                already: true,
                fetched: 0,
                resumed_chunks: 0,
                providers: 0,
                penalized: Vec::new(),
                stats: PullStats::default(),
                elapsed: started.elapsed(),
            });
        }

        // The candidates in order of preference; the first whose metadata checks out wins
        // (with a content pin, a manifest is only known to be right once fetched).
        let (candidates, unanswered) = self.resolve(want, progress).await?;
        let mut refusals = Vec::new();
        let mut chosen = None;
        for candidate in candidates.into_iter().take(PULL_CANDIDATES_MAX) {
            match self.metadata(want, &candidate).await {
                Ok(metadata) => {
                    chosen = Some((candidate, metadata));
                    break;
                }
                Err(err) => refusals.push(format!("manifest {}: {err:#}", candidate.manifest)),
            }
        }
        let Some((candidate, Metadata { blobs, chunks, content, size })) = chosen else {
            bail!(
                "no offered manifest of {}@{} checks out; nothing was written: {}",
                want.name,
                want.version,
                refusals.join("; ")
            );
        };
        let (manifest, signature, trusted_by) =
            (candidate.manifest, candidate.signature, candidate.basis.to_string());
        // The pull starts with the providers that answered; every other node advertising the
        // manifest (one down but not yet expired, one beyond the waves asked, one that
        // answered after the grace) joins at the pull's first directory re-read. Started
        // together, silent ones could take the probes a live one needs to prove itself.
        let providers = candidate.holders;
        progress(Progress::Resolved {
            manifest: manifest.to_string(),
            trusted_by,
            content: content.to_string(),
            size,
            providers: providers.len(),
            unanswered,
        });

        let busy =
            self.inner.active.lock().unwrap_or_else(std::sync::PoisonError::into_inner).contains(&content);
        if busy {
            progress(Progress::Waiting { content: content.to_string() });
        }
        let _turn = self.turn(content).await;
        let mut outcome = PullOutcome::default();
        let present = {
            let store = store.clone();
            tokio::task::spawn_blocking(move || {
                store.blob_size(&content) == Some(size) && store.verify_blob(&content, size).is_ok()
            })
            .await
            .unwrap_or(false)
        };
        let part = if present {
            None
        } else {
            let part = store.pulls_dir()?.join(format!("{}.part", content.hex()));
            outcome = self.fetch_content(&part, &chunks, (manifest, content), &providers, progress).await?;
            Some(part)
        };
        let stored = {
            let store = store.clone();
            let want = want.clone();
            let signature = signature.clone();
            tokio::task::spawn_blocking(move || {
                store.commit_pulled(
                    (&want.name, &want.version, manifest),
                    &blobs,
                    (content, part.as_deref()),
                    signature.as_ref(),
                )
            })
            .await
            .context("the commit task failed")??
        };
        if let Err(err) = self.advertise().await {
            warn!(error = %format!("{err:#}"), "cannot advertise the pulled artifact");
        }
        info!(artifact = %format!("{}@{}", want.name, want.version), bytes = outcome.fetched, "artifact pulled");
        Ok(Pulled {
            stored,
            already: false,
            fetched: outcome.fetched,
            resumed_chunks: outcome.resumed,
            providers: outcome.providers,
            penalized: outcome.penalized,
            stats: outcome.stats,
            elapsed: started.elapsed(),
        })
    }

    /// Waits until no other pull of `content` runs in this process, then holds the turn.
    async fn turn(&self, content: Digest) -> Turn {
        loop {
            {
                let mut active = self.inner.active.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                if active.insert(content) {
                    return Turn { fetcher: self.inner.clone(), content };
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Asks providers which manifest they hold as name@version, as the protocol's
    /// [`Resolution`] directs, and returns its candidates in order of preference (trust and
    /// order are decided there) and how many asked providers were left unanswered.
    async fn resolve(
        &self,
        want: &Want,
        progress: &mut (dyn FnMut(Progress) + Send),
    ) -> anyhow::Result<(Vec<Candidate>, usize)> {
        let mesh = &self.inner.mesh;
        let nodes = mesh.artifact_providers(None).await?;
        if nodes.is_empty() {
            bail!("no node in this mesh advertises any artifact (is the node connected? see `mur peers`)");
        }
        progress(Progress::Resolving { providers: nodes.len() });
        let offers = Offers::new(&want.name, &want.version, want.pin, self.inner.publishers.clone());
        // A monotonic clock: only durations matter here, and a wall clock that steps would
        // time every ask out at once (or stall them).
        let started = Instant::now();
        let now = || Millis(u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX));
        let mut resolution = Resolution::new(offers, nodes, RESOLVE, now());
        // Asks the resolution gave up on are dropped with this set when it is done.
        let mut asks = FuturesUnordered::new();
        loop {
            while let Some(node) = resolution.poll_ask() {
                let request =
                    ArtifactRequest::Resolve { name: want.name.clone(), version: want.version.clone() };
                asks.push(async move { (node, mesh.ask_artifact(node, request).await) });
            }
            if resolution.is_done() {
                break;
            }
            let wake = resolution.poll_timeout().map_or(Duration::from_secs(1), |at| {
                Duration::from_millis(at.since(now())).clamp(Duration::from_millis(1), Duration::from_secs(1))
            });
            tokio::select! {
                Some((node, answer)) = asks.next() => match answer {
                    Ok(ArtifactResponse::Resolved { manifest, signature, .. }) => {
                        resolution.offered(now(), node, manifest, signature);
                    }
                    Ok(ArtifactResponse::NotFound) => resolution.declined(now(), node),
                    // An error answer ("busy") or any other is no answer to the question.
                    Ok(_) | Err(_) => resolution.failed(now(), node),
                },
                () = tokio::time::sleep(wake) => resolution.handle_timeout(now()),
            }
        }
        let (asked, unanswered) = (resolution.asked(), resolution.unanswered());
        let candidates =
            resolution.finish().map_err(|err| anyhow::anyhow!("{err} (asked {asked} node(s))"))?;
        Ok((candidates, unanswered))
    }

    /// Fetches and checks a candidate's manifest, config and chunk list: each against its
    /// digest, the config naming name@version, the content digest against a pin.
    async fn metadata(&self, want: &Want, candidate: &Candidate) -> anyhow::Result<Metadata> {
        let providers = &candidate.holders;
        let manifest = candidate.manifest;
        let manifest_bytes = self.fetch_whole(providers, manifest, None).await?;
        let parts = manifest_parts(&manifest_bytes)?;
        let (content, size) = parts.content;
        if let Some(pin) = want.pin
            && pin != manifest
            && pin != content
        {
            bail!("its content is {content}, not the pinned {pin}");
        }
        let config_bytes = self.fetch_whole(providers, parts.config.0, Some(parts.config.1)).await?;
        let (meta, _) =
            parse_artifact(&manifest_bytes, &|d| (*d == parts.config.0).then(|| config_bytes.clone()))?;
        if meta.name != want.name || meta.version != want.version {
            bail!("it describes {}@{}", meta.name, meta.version);
        }
        let mut blobs = vec![(manifest, manifest_bytes), (parts.config.0, config_bytes)];
        let chunks = match parts.chunk_list {
            Some((digest, len)) => {
                let bytes = self.fetch_whole(providers, digest, Some(len)).await?;
                let list = ChunkList::decode(&bytes).with_context(|| format!("chunk list {digest}"))?;
                list.describes(&content, size)
                    .map_err(|reason| anyhow::anyhow!("its chunk list {reason}"))?;
                blobs.push((digest, bytes));
                list
            }
            None if size == 0 => ChunkList::of(&[], 1),
            None if size <= CHUNK_BYTES_MAX => ChunkList::single(content, size),
            None => bail!(
                "it has no chunk list for its {size}-byte content (it was added by an older murnode); re-add it on the provider"
            ),
        };
        Ok(Metadata { blobs, chunks, content, size })
    }

    /// Fetches a small blob (a manifest, config or chunk list) whole, from the first
    /// provider that serves bytes hashing to `digest`. `size` is the size the (already
    /// verified) referring document declares; for a manifest, whose size only a provider
    /// could state, up to [`ARTIFACT_METADATA_BYTES_MAX`] is asked for and the digest decides.
    async fn fetch_whole(
        &self,
        providers: &[NodeId],
        digest: Digest,
        size: Option<u64>,
    ) -> anyhow::Result<Vec<u8>> {
        let ask = size.unwrap_or(ARTIFACT_METADATA_BYTES_MAX);
        if ask > CHUNK_BYTES_MAX {
            bail!("blob {digest} is {ask} bytes; metadata blobs are at most {CHUNK_BYTES_MAX}");
        }
        if let Ok(bytes) = self.inner.store.read_blob(&digest, ask)
            && size.is_none_or(|s| bytes.len() as u64 == s)
        {
            return Ok(bytes);
        }
        let mut last = String::from("no provider");
        for &node in providers {
            let request = ArtifactRequest::Blob { len: ask.max(1), digest, offset: 0 };
            match tokio::time::timeout(RESOLVE_TIMEOUT, self.inner.mesh.ask_artifact(node, request)).await {
                Ok(Ok(ArtifactResponse::Bytes { data }))
                    if size.is_none_or(|s| data.len() as u64 == s) && Digest::of(&data) == digest =>
                {
                    return Ok(data);
                }
                Ok(Ok(ArtifactResponse::Bytes { .. })) => {
                    warn!(provider = %node, blob = %digest, "provider served bytes that do not match the digest");
                    last = format!("{node} served bytes that do not match");
                }
                Ok(Ok(other)) => last = format!("{node}: {other:?}"),
                Ok(Err(err)) => last = err,
                Err(_) => last = format!("{node} did not answer within {RESOLVE_TIMEOUT:?}"),
            }
        }
        bail!("no provider served blob {digest} ({last})")
    }

    /// Fetches the content into `part` chunk by chunk, as the protocol's pull scheduler
    /// directs, then fsyncs it (checking the whole file against `content` first when the
    /// chunk list does not prove it). New providers
    /// of `manifest` (nodes that finished their own pull) join as they appear.
    async fn fetch_content(
        &self,
        part: &Path,
        chunks: &ChunkList,
        (manifest, content): (Digest, Digest),
        providers: &[NodeId],
        progress: &mut (dyn FnMut(Progress) + Send),
    ) -> anyhow::Result<PullOutcome> {
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
        let mesh = &self.inner.mesh;
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
                        Answer::check(mesh.ask_artifact(provider, request).await, chunks, index).await,
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
                bail!(
                    "the pull made no progress for {PULL_IDLE_MAX:?} with {} of {} chunks missing: no provider serves good bytes ({} dropped); run it again to resume",
                    run.pull.missing(),
                    chunks.chunks.len(),
                    run.outcome.penalized.len()
                );
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

/// `artifact-manager.pull` of a capsule reaches the mesh through the same pulls.
impl ArtifactPort for Fetcher {
    fn fetch<'a>(&'a self, want: &'a Want) -> PortFuture<'a, anyhow::Result<Stored>> {
        Box::pin(async move { Ok(self.pull(want, &mut |_| {}).await?.stored) })
    }
}

/// A candidate's checked metadata.
struct Metadata {
    /// Manifest, config and chunk list, each verified against its digest.
    blobs: Vec<(Digest, Vec<u8>)>,
    chunks: ChunkList,
    content: Digest,
    size: u64,
}

/// Holds a content digest's pull turn until dropped.
struct Turn {
    fetcher: Arc<Inner>,
    content: Digest,
}

impl Drop for Turn {
    fn drop(&mut self) {
        self.fetcher.active.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&self.content);
    }
}

#[derive(Debug, Default)]
struct PullOutcome {
    fetched: u64,
    resumed: usize,
    providers: usize,
    penalized: Vec<(NodeId, String)>,
    stats: PullStats,
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

/// Background flushes of a pull file: one at a time, every [`PULL_FLUSH_EVERY_BYTES`] bytes written.
/// A failed flush fails the pull and deletes the pull file: after a failed fsync the
/// kernel may report the next one clean, and a resume would trust bytes the page cache
/// still holds but the disk never got.
struct Flush {
    path: PathBuf,
    unflushed: u64,
    running: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
}

impl Flush {
    fn new(path: &Path) -> Self {
        Self { path: path.to_path_buf(), unflushed: 0, running: None }
    }

    fn wrote(&mut self, file: &Arc<File>, len: u64) -> anyhow::Result<()> {
        self.unflushed += len;
        if self.unflushed < PULL_FLUSH_EVERY_BYTES {
            return Ok(());
        }
        if let Some(running) = self.running.take_if(|running| running.is_finished()) {
            // Unconstrained: a finished task is ready even when this task's budget is spent.
            let result = tokio::task::coop::unconstrained(running)
                .now_or_never()
                .context("a finished flush is ready")?;
            self.check(result)?;
        }
        if self.running.is_none() {
            self.unflushed = 0;
            let file = Arc::clone(file);
            self.running = Some(tokio::task::spawn_blocking(move || file.sync_data()));
        }
        Ok(())
    }

    /// Waits for the flush in progress; its error is the pull's.
    async fn finish(mut self) -> anyhow::Result<()> {
        if let Some(running) = self.running.take() {
            let result = running.await;
            self.check(result)?;
        }
        Ok(())
    }

    fn check(&self, result: Result<std::io::Result<()>, tokio::task::JoinError>) -> anyhow::Result<()> {
        let failed = match result {
            Ok(Ok(())) => return Ok(()),
            Ok(Err(err)) => anyhow::Error::new(err).context("cannot flush the pull file"),
            Err(err) => anyhow::Error::new(err).context("the flush panicked"),
        };
        let _ = std::fs::remove_file(&self.path);
        Err(failed.context("the pull file was deleted; the next pull starts over"))
    }
}

/// Opens (creating, pre-sized) the pull file and finds the chunks it already holds: those
/// whose bytes link to the chunk list's entry.
fn open_part(path: &Path, chunks: &ChunkList) -> anyhow::Result<(File, Vec<u32>)> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    let mut have = Vec::new();
    if file.metadata()?.len() == chunks.size {
        let mut buf = vec![0u8; usize::try_from(chunks.chunk_size)?];
        for (index, expected) in chunks.chunks.iter().enumerate() {
            let offset = index as u64 * chunks.chunk_size;
            let len = usize::try_from(chunks.chunk_size.min(chunks.size - offset))?;
            file.read_exact_at(&mut buf[..len], offset)?;
            if chunks.link(u32::try_from(index)?, &buf[..len]) == Some(*expected) {
                have.push(u32::try_from(index)?);
            }
        }
    } else {
        file.set_len(chunks.size)?;
    }
    Ok((file, have))
}

/// Fsyncs the pulled file, first checking it whole against the content digest unless the
/// chunk list already `proven` it (a version-2 list: chunks that all link are the content).
/// A file that does not match is deleted (the chunk list and the content digest disagree:
/// the publisher's manifest is inconsistent).
fn finish_part(path: &Path, file: &File, (content, proven): (Digest, bool), size: u64) -> anyhow::Result<()> {
    let synced = finish_part_inner(path, file, (content, proven), size);
    if synced.is_err() {
        let _ = std::fs::remove_file(path);
    }
    synced
}

fn finish_part_inner(
    path: &Path,
    file: &File,
    (content, proven): (Digest, bool),
    size: u64,
) -> anyhow::Result<()> {
    if !proven {
        let mut reader = std::io::BufReader::with_capacity(1 << 20, file);
        std::io::Seek::rewind(&mut reader)?;
        let (found, len) = murmur_store::file::hash_reader(&mut reader, None)?;
        if found != content || len != size {
            // Every chunk matched the chunk list, so retrying would only fail again.
            let _ = std::fs::remove_file(path);
            bail!(
                "the pulled content hashes to {found} ({len} bytes), not to {content}: the manifest's chunk list does not describe its content"
            );
        }
    }
    file.sync_all()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pull file holding `bytes`, as a pull would have left it.
    fn part(dir: &Path, bytes: &[u8]) -> (PathBuf, File) {
        let path = dir.join("content.part");
        std::fs::write(&path, bytes).unwrap();
        let file = OpenOptions::new().read(true).write(true).open(&path).unwrap();
        (path, file)
    }

    #[test]
    fn resume_keeps_the_chunks_that_link_whatever_the_list_version() {
        let dir = tempfile::tempdir().unwrap();
        let bytes: Vec<u8> = (0..10_000u32).map(|i| (i % 241) as u8).collect();
        let mut on_disk = bytes.clone();
        on_disk[5_000] ^= 1; // chunk 1 of 4,096-byte chunks is damaged
        let v2 = ChunkList::of(&bytes, 4096);
        let v1 = ChunkList { v: 1, chunks: bytes.chunks(4096).map(Digest::of).collect(), ..v2.clone() };
        for list in [v2, v1] {
            let (path, _) = part(dir.path(), &on_disk);
            let (_, have) = open_part(&path, &list).unwrap();
            assert_eq!(have, vec![0, 2], "version {}", list.v);
        }
    }

    #[tokio::test]
    async fn a_pull_file_is_flushed_in_the_background_and_a_failed_flush_deletes_it() {
        let dir = tempfile::tempdir().unwrap();
        let (path, file) = part(dir.path(), b"some bytes");
        let file = Arc::new(file);
        let mut flush = Flush::new(&path);
        flush.wrote(&file, PULL_FLUSH_EVERY_BYTES - 1).unwrap();
        assert!(flush.running.is_none());
        flush.wrote(&file, 1).unwrap();
        assert!(flush.running.is_some(), "a flush starts once PULL_FLUSH_EVERY_BYTES bytes were written");
        assert_eq!(flush.unflushed, 0);
        flush.finish().await.unwrap();
        assert!(path.exists());

        // A flush that fails (here: an fsync of a descriptor opened for reading only
        // succeeds on Linux, so a failed result is handed in as the blocking task's)
        // fails the pull and deletes the file.
        let flush = Flush::new(&path);
        let failed = Ok(Err(std::io::Error::other("disk on fire")));
        let err = flush.check(failed).unwrap_err();
        assert!(format!("{err:#}").contains("disk on fire"), "{err:#}");
        assert!(!path.exists(), "a pull file whose flush failed is deleted");
    }

    #[test]
    fn the_whole_file_is_hashed_again_only_when_the_list_does_not_prove_it() {
        let dir = tempfile::tempdir().unwrap();
        let bytes = b"the content".to_vec();
        let content = Digest::of(&bytes);
        let (path, file) = part(dir.path(), b"other bytes");
        // Proven by a version-2 list: no second pass (a version-2 list whose chunks all
        // linked cannot be wrong, so this only checks that the pass is skipped).
        finish_part(&path, &file, (content, true), bytes.len() as u64).unwrap();
        let err = finish_part(&path, &file, (content, false), bytes.len() as u64).unwrap_err().to_string();
        assert!(err.contains("does not describe its content"), "{err}");
        assert!(!path.exists(), "a file that does not match is deleted");
        let (path, file) = part(dir.path(), &bytes);
        finish_part(&path, &file, (content, false), bytes.len() as u64).unwrap();
    }
}
