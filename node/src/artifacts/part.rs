//! The pull file: `store/.pull/<content hex>.part`, pre-sized to the content, written at
//! each chunk's offset, flushed in the background, checked and fsynced before the commit;
//! reopened after a crash to keep the chunks that still link.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, bail};
use futures::FutureExt;
use murmur_config::limits::PULL_FLUSH_EVERY_BYTES;
use murmur_protocol::Digest;
use murmur_protocol::artifact::ChunkList;

/// Background flushes of a pull file: one at a time, every [`PULL_FLUSH_EVERY_BYTES`] bytes written.
/// A failed flush fails the pull and deletes the pull file: after a failed fsync the
/// kernel may report the next one clean, and a resume would trust bytes the page cache
/// still holds but the disk never got.
pub(super) struct Flush {
    path: PathBuf,
    unflushed: u64,
    running: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
}

impl Flush {
    pub(super) fn new(path: &Path) -> Self {
        Self { path: path.to_path_buf(), unflushed: 0, running: None }
    }

    pub(super) fn wrote(&mut self, file: &Arc<File>, len: u64) -> anyhow::Result<()> {
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
    pub(super) async fn finish(mut self) -> anyhow::Result<()> {
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
pub(super) fn open_part(path: &Path, chunks: &ChunkList) -> anyhow::Result<(File, Vec<u32>)> {
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
pub(super) fn finish_part(
    path: &Path,
    file: &File,
    (content, proven): (Digest, bool),
    size: u64,
) -> anyhow::Result<()> {
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
