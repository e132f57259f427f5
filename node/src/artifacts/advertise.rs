//! Advertising what the store holds: the manifests the node serves go into its advert
//! (up to the advert's bound) when they change, whoever added them (a pull, `mur artifact
//! add` or `mur bundle import` next to the running node).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use murmur_config::limits::ADVERTISED_ARTIFACTS_MAX;
use murmur_net::NetHandle;
use murmur_protocol::Digest;
use murmur_store::ArtifactStore;
use tracing::warn;

/// Keeps the node's advert in step with its store. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Advertiser {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    net: NetHandle,
    store: Arc<ArtifactStore>,
    /// The manifests last advertised.
    provided: Mutex<Vec<Digest>>,
    /// Inode, size and modification time of the store's index when it was last read.
    index_seen: Mutex<Option<(u64, u64, Option<std::time::SystemTime>)>>,
}

impl Advertiser {
    #[must_use]
    pub fn new(net: NetHandle, store: Arc<ArtifactStore>) -> Self {
        Self {
            inner: Arc::new(Inner {
                net,
                store,
                provided: Mutex::new(Vec::new()),
                index_seen: Mutex::new(None),
            }),
        }
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
            let seen = self.inner.index_seen.lock().unwrap_or_else(PoisonError::into_inner);
            if stamp.is_some() && *seen == stamp {
                return Ok(());
            }
        }
        let mut manifests: Vec<Digest> = self.inner.store.list()?.iter().map(|s| s.manifest).collect();
        manifests.sort();
        manifests.dedup();
        manifests.truncate(ADVERTISED_ARTIFACTS_MAX);
        let unchanged = *self.inner.provided.lock().unwrap_or_else(PoisonError::into_inner) == manifests;
        if !unchanged {
            self.inner.net.set_provided(manifests.clone()).await?;
        }
        // Both remembered only once advertised, so a failed attempt is made again.
        *self.inner.provided.lock().unwrap_or_else(PoisonError::into_inner) = manifests;
        *self.inner.index_seen.lock().unwrap_or_else(PoisonError::into_inner) = stamp;
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
}
