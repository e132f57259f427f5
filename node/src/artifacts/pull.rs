//! Pull orchestration: what to pull, who offers a trusted manifest, its metadata checked
//! blob by blob, the content transferred ([`super::transfer`]), and the commit to the
//! store; and the errors that say what failed and what to do.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use murmur_config::limits::{ARTIFACT_METADATA_BYTES_MAX, PULL_CANDIDATES_MAX};
use murmur_net::NetHandle;
use murmur_protocol::artifact::{ArtifactRequest, ArtifactResponse, CHUNK_BYTES_MAX, ChunkList};
use murmur_protocol::pull::{PullConfig, PullStats};
use murmur_protocol::resolve::{Candidate, Offers, Resolution, ResolveConfig};
use murmur_protocol::{Digest, Millis, NodeId, PublicKey};
pub use murmur_runtime::ports::Want;
use murmur_runtime::ports::{ArtifactPort, PortFuture};
use murmur_store::oci::{manifest_parts, parse_artifact};
use murmur_store::{ArtifactStore, Stored};
use serde::Serialize;
use tracing::{info, warn};

use super::Advertiser;
use super::transfer::PullOutcome;

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

/// One pull under way, as `GET /v1/artifacts` lists it.
pub use murmur_api::views::PullView;

/// The pulls under way, each by a number of its own, with when it started and how far it
/// got.
#[derive(Debug, Default)]
struct UnderWay {
    pulls: Mutex<BTreeMap<u64, (Instant, PullView)>>,
    next: std::sync::atomic::AtomicU64,
}

impl UnderWay {
    /// Lists a new pull of `want` until the returned entry is dropped.
    fn enter(&self, want: &Want) -> UnderWayEntry<'_> {
        let id = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let view = PullView {
            name: want.name.clone(),
            version: want.version.clone(),
            state: "resolving".into(),
            ..PullView::default()
        };
        self.lock().insert(id, (Instant::now(), view));
        UnderWayEntry { under_way: self, id }
    }

    fn list(&self) -> Vec<PullView> {
        self.lock()
            .values()
            .map(|(started, view)| PullView {
                elapsed_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                ..view.clone()
            })
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, (Instant, PullView)>> {
        self.pulls.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A pull's entry in [`UnderWay`], removed when the pull ends however it ends.
struct UnderWayEntry<'a> {
    under_way: &'a UnderWay,
    id: u64,
}

impl UnderWayEntry<'_> {
    fn note(&self, event: &Progress) {
        let mut pulls = self.under_way.lock();
        let Some((_, view)) = pulls.get_mut(&self.id) else { return };
        match event {
            Progress::Resolving { .. } => view.state = "resolving".into(),
            Progress::Resolved { content, size, providers, .. } => {
                view.state = "fetching".into();
                view.content = Some(content.clone());
                view.size = *size;
                view.providers = *providers;
            }
            Progress::Waiting { content } => {
                view.state = "waiting".into();
                view.content = Some(content.clone());
            }
            Progress::Chunks { written, size, providers } => {
                view.state = "fetching".into();
                view.written = *written;
                view.size = *size;
                view.providers = *providers;
            }
            Progress::Penalized { .. } => view.penalized += 1,
        }
    }
}

impl Drop for UnderWayEntry<'_> {
    fn drop(&mut self) {
        self.under_way.lock().remove(&self.id);
    }
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

/// Why a pull failed: what failed and what the user can do. Nothing was named in the store.
#[derive(Debug, thiserror::Error)]
pub enum PullError {
    /// The store already holds this name@version as another artifact than the pin.
    #[error(
        "this node's store holds {name}@{version} as manifest {manifest} (content {content}), not {pin}; nothing was changed"
    )]
    PinMismatch { name: String, version: String, manifest: Digest, content: Digest, pin: Digest },
    /// No node advertises any artifact: this node is likely alone.
    #[error("no node in this mesh advertises any artifact (is the node connected? see `mur peers`)")]
    NoProviders,
    /// No provider offered a manifest this node trusts.
    #[error("{reason} (asked {asked} node(s))")]
    Unresolved { reason: String, asked: usize },
    /// Every offered manifest failed its checks.
    #[error("no offered manifest of {name}@{version} checks out; nothing was written: {refusals}")]
    NoValidManifest { name: String, version: String, refusals: String },
    /// Providers stopped serving good bytes.
    #[error(
        "the pull made no progress for {idle:?} with {missing} of {total} chunks missing: no provider serves good bytes ({dropped} dropped); run it again to resume"
    )]
    Stalled { idle: Duration, missing: usize, total: usize, dropped: usize },
    /// The network driver did not answer (the node is stopping or overloaded).
    #[error("{0}; try again")]
    Network(String),
    /// Reading or writing the pull file or the store failed; the error says which.
    #[error(transparent)]
    Disk(#[from] anyhow::Error),
}

/// Pulls artifacts for this node. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Puller {
    pub(super) inner: Arc<Inner>,
}

#[derive(Debug)]
pub(super) struct Inner {
    pub(super) net: NetHandle,
    pub(super) store: Arc<ArtifactStore>,
    publishers: Vec<PublicKey>,
    pub(super) config: PullConfig,
    /// Content digests being pulled: a second pull of the same content waits its turn.
    active: Mutex<BTreeSet<Digest>>,
    /// Every pull under way, as far as it got (`GET /v1/artifacts`).
    under_way: UnderWay,
    /// Advertises what a pull committed, at once.
    advertiser: Advertiser,
}

impl Puller {
    #[must_use]
    pub fn new(
        net: NetHandle,
        store: Arc<ArtifactStore>,
        publishers: Vec<PublicKey>,
        advertiser: Advertiser,
    ) -> Self {
        // 16 chunks (16 MiB) in flight per provider: a libp2p connection (noise + yamux)
        // needs that much outstanding to approach its throughput, and eight pullers at once
        // still fit a provider's serving limit; 64 MiB per pull at most.
        let config = PullConfig { per_provider: 16, in_flight_max: 64, ..PullConfig::default() };
        Self {
            inner: Arc::new(Inner {
                net,
                store,
                publishers,
                config,
                active: Mutex::new(BTreeSet::new()),
                under_way: UnderWay::default(),
                advertiser,
            }),
        }
    }

    /// The content digests being pulled now.
    #[must_use]
    pub fn active(&self) -> Vec<String> {
        let active = self.inner.active.lock().unwrap_or_else(PoisonError::into_inner);
        active.iter().map(ToString::to_string).collect()
    }

    /// The pulls under way, oldest first, as far as each got.
    #[must_use]
    pub fn under_way(&self) -> Vec<PullView> {
        self.inner.under_way.list()
    }

    /// The store pulls write to.
    #[must_use]
    pub fn store(&self) -> &Arc<ArtifactStore> {
        &self.inner.store
    }

    /// The network the pulls go through.
    #[must_use]
    pub fn net(&self) -> &NetHandle {
        &self.inner.net
    }

    /// Pulls `want` from the mesh into the store, reporting progress; returns what the
    /// store then holds. Nothing is named in the store unless every byte was verified.
    /// While it runs, [`Puller::under_way`] lists it.
    pub async fn pull(
        &self,
        want: &Want,
        progress: &mut (dyn FnMut(Progress) + Send),
    ) -> Result<Pulled, PullError> {
        let entry = self.inner.under_way.enter(want);
        let mut track = |event: Progress| {
            entry.note(&event);
            progress(event);
        };
        self.pull_untracked(want, &mut track).await
    }

    async fn pull_untracked(
        &self,
        want: &Want,
        progress: &mut (dyn FnMut(Progress) + Send),
    ) -> Result<Pulled, PullError> {
        let started = Instant::now();
        let store = &self.inner.store;
        if let Some(stored) = store.find(&want.name, Some(&want.version))? {
            if let Some(pin) = want.pin
                && pin != stored.manifest
                && pin != stored.content
            {
                return Err(PullError::PinMismatch {
                    name: want.name.clone(),
                    version: want.version.clone(),
                    manifest: stored.manifest,
                    content: stored.content,
                    pin,
                });
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
            return Err(PullError::NoValidManifest {
                name: want.name.clone(),
                version: want.version.clone(),
                refusals: refusals.join("; "),
            });
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

        let busy = self.inner.active.lock().unwrap_or_else(PoisonError::into_inner).contains(&content);
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
        if let Err(err) = self.inner.advertiser.advertise().await {
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
                let mut active = self.inner.active.lock().unwrap_or_else(PoisonError::into_inner);
                if active.insert(content) {
                    return Turn { puller: self.inner.clone(), content };
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
    ) -> Result<(Vec<Candidate>, usize), PullError> {
        let mesh = &self.inner.net;
        let nodes = mesh.artifact_providers(None).await.map_err(|e| PullError::Network(format!("{e:#}")))?;
        if nodes.is_empty() {
            return Err(PullError::NoProviders);
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
            resolution.finish().map_err(|err| PullError::Unresolved { reason: err.to_string(), asked })?;
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
            match tokio::time::timeout(RESOLVE_TIMEOUT, self.inner.net.ask_artifact(node, request)).await {
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
}

/// `artifact-manager.pull` of a capsule reaches the mesh through the same pulls.
impl ArtifactPort for Puller {
    fn fetch<'a>(&'a self, want: &'a Want) -> PortFuture<'a, anyhow::Result<Stored>> {
        Box::pin(async move { Ok(self.pull(want, &mut |_| {}).await.map_err(anyhow::Error::from)?.stored) })
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
    puller: Arc<Inner>,
    content: Digest,
}

impl Drop for Turn {
    fn drop(&mut self) {
        self.puller.active.lock().unwrap_or_else(PoisonError::into_inner).remove(&self.content);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pull is listed from its start with how far it got, and gone once it ends, however
    /// it ends (a failed pull's future is dropped like a finished one's).
    #[test]
    fn pulls_under_way_are_listed_as_they_go_and_leave_when_they_end() {
        let under_way = UnderWay::default();
        let want = |name: &str| Want { name: name.into(), version: "1.0.0".into(), pin: None };
        let first = under_way.enter(&want("big"));
        let second = under_way.enter(&want("small"));
        assert_eq!(under_way.list().iter().map(|p| p.state.as_str()).collect::<Vec<_>>(), ["resolving"; 2]);
        first.note(&Progress::Resolved {
            manifest: "sha256:m".into(),
            trusted_by: "pin".into(),
            content: "sha256:c".into(),
            size: 1000,
            providers: 2,
            unanswered: 0,
        });
        first.note(&Progress::Chunks { written: 400, size: 1000, providers: 2 });
        first.note(&Progress::Penalized { provider: "p".into(), reason: "bad chunk".into() });
        let listed = under_way.list();
        assert_eq!(listed[0].name, "big", "oldest first");
        assert_eq!((listed[0].state.as_str(), listed[0].written, listed[0].size), ("fetching", 400, 1000));
        assert_eq!((listed[0].providers, listed[0].penalized), (2, 1));
        assert_eq!(listed[0].content.as_deref(), Some("sha256:c"));
        drop(first);
        assert_eq!(under_way.list().iter().map(|p| p.name.as_str()).collect::<Vec<_>>(), ["small"]);
        drop(second);
        assert!(under_way.list().is_empty());
    }
}
