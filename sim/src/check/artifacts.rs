//! The artifact oracle: the true digest of every chunk and blob, and the checks built on
//! it.
//!
//! Safety, checked on every write to a node's store: the digest of the bytes the provider
//! sent for the chunk the node writes is the chunk's true digest (so a corrupted chunk is
//! never stored, whatever the pull scheduler decided), and a blob completed on disk hashes
//! to its true digest; and when a resolution ends, every candidate manifest it returns is
//! the blob's true one (a forged offer is never taken). Bounds, checked after every input
//! to a pull: requests in flight stay within the pull's configured limits, in all and per
//! provider, and a provider that has not served a good chunk yet is sent no more than the
//! probe.
//!
//! Liveness (judged by the world, which knows who is alive): once faults have ended and
//! pull requests stopped, every pull at a live node of an artifact that a live honest node
//! holds completes, and every pinned artifact is held by `min(R, live honest nodes)` nodes.

use murmur_protocol::digest::Digest;

/// What one artifact really is.
#[derive(Clone, Debug)]
pub struct BlobTruth {
    /// The blob's digest, as adverts name it: the digest of its chunk list.
    pub digest: Digest,
    pub size: u64,
    /// Every chunk's true digest, in order.
    pub chunks: Vec<Digest>,
}

impl BlobTruth {
    /// A blob of `size` bytes in chunks of `chunk_size`, with chunk digests derived from
    /// `label` (the simulator moves no bytes: a chunk is its digest).
    #[must_use]
    pub fn derive(label: &str, size: u64, chunk_size: u64) -> Self {
        let count = size.div_ceil(chunk_size);
        let chunks: Vec<Digest> =
            (0..count).map(|i| Digest::of(format!("{label}/chunk/{i}").as_bytes())).collect();
        Self { digest: list_digest(&chunks), size, chunks }
    }
}

/// The digest of a chunk list: what a blob's manifest commits to.
#[must_use]
pub fn list_digest(chunks: &[Digest]) -> Digest {
    let bytes: Vec<u8> = chunks.iter().flat_map(|d| d.0).collect();
    Digest::of(&bytes)
}

/// Ground truth about every artifact of a run.
#[derive(Debug, Default)]
pub struct ArtifactOracle {
    blobs: Vec<BlobTruth>,
}

impl ArtifactOracle {
    /// An oracle over these blobs (indexed as the run numbers them).
    #[must_use]
    pub const fn new(blobs: Vec<BlobTruth>) -> Self {
        Self { blobs }
    }

    /// The truth about blob `blob`.
    #[must_use]
    pub fn blob(&self, blob: usize) -> Option<&BlobTruth> {
        self.blobs.get(blob)
    }

    /// Blobs of the run.
    #[must_use]
    pub fn blobs(&self) -> &[BlobTruth] {
        &self.blobs
    }

    /// Checks a write by `node` of chunk `index` of `blob`, whose bytes hashed to `served`.
    pub fn write(&self, node: u32, blob: usize, index: u32, served: &Digest) -> Result<(), String> {
        let truth = self.blobs.get(blob).and_then(|b| b.chunks.get(index as usize));
        match truth {
            Some(truth) if truth == served => Ok(()),
            Some(truth) => Err(format!(
                "node {node} stored chunk {index} of art-{blob} with digest {served}, not its true digest {truth} (a corrupted chunk was written)"
            )),
            None => Err(format!("node {node} stored chunk {index} of art-{blob}, which does not exist")),
        }
    }

    /// Checks a blob `node` holds whole: its stored chunks' digests, in order, must form
    /// the blob's true chunk list.
    pub fn complete(&self, node: u32, blob: usize, stored: &[Digest]) -> Result<(), String> {
        let Some(truth) = self.blobs.get(blob) else {
            return Err(format!("node {node} completed art-{blob}, which does not exist"));
        };
        let digest = list_digest(stored);
        if digest == truth.digest {
            Ok(())
        } else {
            Err(format!(
                "node {node} holds art-{blob} whole with digest {digest}, not its true digest {}",
                truth.digest
            ))
        }
    }

    /// Checks the requests in flight to a provider that has not served a good chunk yet,
    /// right after the pull sent it more: at most the probe.
    pub fn probe_bound(node: u32, blob: usize, probing: usize, probe: usize) -> Result<(), String> {
        if probing <= probe {
            return Ok(());
        }
        Err(format!(
            "node {node}'s pull of art-{blob} has {probing} requests out to a provider that has not served yet, above its probe {probe}"
        ))
    }

    /// Checks the candidate manifests `node`'s resolution of `blob` returned.
    pub fn resolved(&self, node: u32, blob: usize, candidates: &[Digest]) -> Result<(), String> {
        let Some(truth) = self.blobs.get(blob).map(|b| b.digest) else {
            return Err(format!("node {node} resolved art-{blob}, which does not exist"));
        };
        let forged: Vec<String> =
            candidates.iter().filter(|c| **c != truth).map(ToString::to_string).collect();
        if forged.is_empty() {
            return Ok(());
        }
        Err(format!(
            "node {node} resolved art-{blob} to candidate manifest(s) {} that no trusted publisher signed (the true manifest is {truth})",
            forged.join(", ")
        ))
    }

    /// Checks a pull's requests in flight against its limits.
    pub fn bounds(
        node: u32,
        blob: usize,
        (in_flight, in_flight_max): (usize, usize),
        (busiest, per_provider): (usize, usize),
    ) -> Result<(), String> {
        if in_flight > in_flight_max {
            return Err(format!(
                "node {node}'s pull of art-{blob} has {in_flight} requests out, above its bound {in_flight_max}"
            ));
        }
        if busiest > per_provider {
            return Err(format!(
                "node {node}'s pull of art-{blob} has {busiest} requests out to one provider, above its bound {per_provider}"
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wrong_chunk_or_blob_is_refused() {
        let oracle = ArtifactOracle::new(vec![BlobTruth::derive("a", 2500, 1000)]);
        let truth = oracle.blob(0).unwrap().clone();
        assert_eq!(truth.chunks.len(), 3);
        assert!(oracle.write(1, 0, 2, &truth.chunks[2]).is_ok());
        assert!(oracle.write(1, 0, 2, &truth.chunks[1]).unwrap_err().contains("corrupted"));
        assert!(oracle.write(1, 0, 3, &truth.chunks[1]).is_err());
        assert!(oracle.complete(1, 0, &truth.chunks).is_ok());
        let swapped = [truth.chunks[1], truth.chunks[0], truth.chunks[2]];
        assert!(oracle.complete(1, 0, &swapped).is_err());
        assert!(ArtifactOracle::bounds(1, 0, (17, 16), (1, 4)).is_err());
        assert!(ArtifactOracle::bounds(1, 0, (16, 16), (5, 4)).is_err());
        assert!(ArtifactOracle::bounds(1, 0, (16, 16), (4, 4)).is_ok());
        assert!(ArtifactOracle::probe_bound(1, 0, 2, 2).is_ok());
        assert!(ArtifactOracle::probe_bound(1, 0, 3, 2).unwrap_err().contains("probe 2"));
        assert!(oracle.resolved(1, 0, &[truth.digest]).is_ok());
        let forged = Digest::of(b"forged");
        assert!(oracle.resolved(1, 0, &[truth.digest, forged]).unwrap_err().contains("no trusted publisher"));
    }
}
