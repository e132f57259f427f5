//! The revocation lists a node holds, kept in its data directory (`revocations.cbor`) so a
//! restart does not forget a revocation: loaded before the network starts, and written
//! again (atomically) whenever the mesh takes a newer list.
//!
//! The file is a CBOR array of the lists as signed; each is judged again when it is
//! loaded (trusted authority, signature), so the file needs no more protection than the
//! data directory has. A damaged file stops the start: going on without it would quietly
//! lift revocations.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use murmur_protocol::Envelope;
use murmur_protocol::limits::{ENVELOPE_BYTES_MAX, REVOCATIONS_HELD_MAX};
use murmur_protocol::revocation::Revocations;
use murmur_store::file::{read_bounded, write_atomic};
use tokio::sync::watch;
use tracing::{info, warn};

/// The file in the data directory.
pub const REVOCATIONS_FILE: &str = "revocations.cbor";

const FILE_BYTES_MAX: usize = REVOCATIONS_HELD_MAX * (ENVELOPE_BYTES_MAX + 16) + 16;

/// The lists stored in `data_dir` (none when there is no file yet).
pub fn load(data_dir: &Path) -> anyhow::Result<Vec<Envelope>> {
    let path = data_dir.join(REVOCATIONS_FILE);
    if !path.exists() {
        return Ok(Vec::new());
    }
    let bytes = read_bounded(&path, FILE_BYTES_MAX)?;
    let lists: Vec<Envelope> = murmur_protocol::codec::decode("revocation store", &bytes, FILE_BYTES_MAX)
        .with_context(|| {
            format!(
                "{} is damaged: restore it from a backup, or move it away and republish the lists (`mur revocation publish`); peers also resend them",
                path.display()
            )
        })?;
    if lists.len() > REVOCATIONS_HELD_MAX {
        anyhow::bail!("{} holds {} lists, more than {REVOCATIONS_HELD_MAX}", path.display(), lists.len());
    }
    Ok(lists)
}

/// Writes the lists held to `data_dir` whenever they change, until the mesh stops.
pub async fn keep_stored(data_dir: PathBuf, mut held: watch::Receiver<Arc<Revocations>>) {
    let path = data_dir.join(REVOCATIONS_FILE);
    while held.changed().await.is_ok() {
        let lists: Vec<Envelope> = held.borrow_and_update().envelopes().cloned().collect();
        if lists.is_empty() {
            continue;
        }
        let bytes = murmur_protocol::codec::encode(&lists);
        let path = path.clone();
        match tokio::task::spawn_blocking(move || write_atomic(&path, &bytes)).await {
            Ok(Ok(())) => info!(lists = lists.len(), "revocation lists stored"),
            Ok(Err(err)) => warn!(error = %format!("{err:#}"), "cannot store the revocation lists"),
            Err(err) => warn!(error = %err, "cannot store the revocation lists"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use murmur_protocol::revocation::Revocation;
    use murmur_protocol::{Millis, SecretKey, Signed};

    #[test]
    fn stored_lists_load_back_and_a_damaged_file_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        assert!(load(dir.path()).unwrap().is_empty());
        let authority = SecretKey::from_seed([3; 32]);
        let list =
            Signed::sign(Revocation::new(1, Millis(1), vec![], vec![4]), &authority).unwrap().into_envelope();
        let path = dir.path().join(REVOCATIONS_FILE);
        write_atomic(&path, &murmur_protocol::codec::encode(&vec![list.clone()])).unwrap();
        assert_eq!(load(dir.path()).unwrap(), vec![list]);
        std::fs::write(&path, b"\x82junk").unwrap();
        let err = format!("{:#}", load(dir.path()).unwrap_err());
        assert!(err.contains("revocations.cbor is damaged"), "{err}");
    }
}
