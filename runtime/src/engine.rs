//! The wasmtime engine: configuration, the compiled-component cache, the epoch ticker.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context;
use murmur_protocol::Digest;
use wasmtime::component::Component;
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use murmur_config::limits::INSTANCES_MAX;
use murmur_config::limits::MEMORY_MB_MAX;
use murmur_store::file::write_atomic;

/// How often the epoch advances: the granularity of deadlines.
pub const EPOCH_TICK: Duration = Duration::from_millis(5);

/// Ticks a guest runs before it yields to the async executor (and its deadline is
/// checked): 10 ms. A call shorter than that (most are microseconds) never yields.
pub const YIELD_TICKS: u64 = 2;

/// Bytes of each pooled linear memory kept resident between uses (reset by memset).
pub const RESIDENT_BYTES: usize = 2 << 20;

/// Builds the node's one engine: the pooling allocator (unless `pooling` is false, for the
/// benchmark's baseline) and epoch interruption for deadlines.
pub fn engine(pooling: bool) -> anyhow::Result<Engine> {
    let mut config = Config::new();
    config.epoch_interruption(true);
    if pooling {
        let memory_max = usize::try_from(MEMORY_MB_MAX << 20).context("memory limit")?;
        let mut pool = PoolingAllocationConfig::default();
        pool.total_component_instances(INSTANCES_MAX)
            .total_core_instances(INSTANCES_MAX * 8)
            .max_core_instances_per_component(32)
            .total_memories(INSTANCES_MAX * 2)
            .max_memories_per_component(4)
            .total_tables(INSTANCES_MAX * 4)
            .max_tables_per_component(16)
            .total_stacks(INSTANCES_MAX)
            .max_memory_size(memory_max)
            // Reset the first pages of a reused slot with memset instead of madvise: a
            // small guest touches a megabyte or two, and page faults would dominate.
            .linear_memory_keep_resident(RESIDENT_BYTES)
            .table_keep_resident(64 << 10)
            .async_stack_keep_resident(128 << 10)
            .pagemap_scan(wasmtime::Enabled::Auto);
        config.memory_reservation(MEMORY_MB_MAX << 20);
        config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    }
    Engine::new(&config).map_err(|e| anyhow::anyhow!("cannot configure wasmtime: {e}"))
}

/// Compiles components, keeping compiled code on disk keyed by artifact digest and engine
/// build. Only code this node compiled itself is ever loaded from the cache; compiled code
/// never travels between nodes.
#[derive(Debug)]
pub struct CompileCache {
    dir: PathBuf,
    engine_key: String,
}

impl CompileCache {
    /// A cache in `dir` for `engine`.
    #[must_use]
    pub fn new(dir: &Path, engine: &Engine) -> Self {
        // `DefaultHasher::new()` has fixed keys: the same engine build gives the same key.
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        Self { dir: dir.to_path_buf(), engine_key: format!("{:016x}", hasher.finish()) }
    }

    /// The compiled component for `bytes` (whose digest is `digest`).
    pub fn load(&self, engine: &Engine, digest: &Digest, bytes: &[u8]) -> anyhow::Result<Component> {
        let path = self.path(digest);
        if path.exists() {
            match self.read_own(engine, &path) {
                Ok(component) => return Ok(component),
                Err(err) => {
                    tracing::warn!(path = %path.display(), error = %err, "compiled cache entry unusable; recompiling");
                    let _ = std::fs::remove_file(&path);
                }
            }
        }
        let component = Component::new(engine, bytes).map_err(|e| anyhow::anyhow!("{e:#}"))?;
        match component.serialize() {
            Ok(compiled) => {
                if let Err(err) = write_atomic(&path, &self.seal(&compiled)) {
                    tracing::warn!(error = %err, "cannot cache compiled component");
                }
            }
            Err(err) => tracing::warn!(error = %err, "cannot serialize compiled component"),
        }
        Ok(component)
    }

    /// Where the compiled code of artifact `digest` is cached.
    fn path(&self, digest: &Digest) -> PathBuf {
        self.dir.join(format!("{}-{}.cwasm", digest.hex(), self.engine_key))
    }

    /// A cache file: [`SEAL_MAGIC`], this engine's key, the SHA-256 of the compiled code,
    /// then the code.
    fn seal(&self, compiled: &[u8]) -> Vec<u8> {
        let mut file = Vec::with_capacity(compiled.len() + SEAL_BYTES);
        file.extend_from_slice(SEAL_MAGIC);
        file.extend_from_slice(self.engine_key.as_bytes());
        file.extend_from_slice(&Digest::of(compiled).0);
        file.extend_from_slice(compiled);
        file
    }

    /// Reads a cache file back, checking its seal (the engine it was compiled for, and the
    /// digest of every byte of code) before wasmtime sees any of it.
    fn read_own(&self, engine: &Engine, path: &Path) -> anyhow::Result<Component> {
        let file = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
        anyhow::ensure!(file.len() > SEAL_BYTES && file.starts_with(SEAL_MAGIC), "not a sealed cache file");
        let (key, rest) = file[SEAL_MAGIC.len()..].split_at(self.engine_key.len());
        anyhow::ensure!(key == self.engine_key.as_bytes(), "compiled by another engine");
        let (sum, code) = rest.split_at(32);
        anyhow::ensure!(
            Digest::of(code).0 == sum,
            "its code does not match its digest (corrupted or altered)"
        );
        deserialize_own(engine, code)
    }
}

/// The first bytes of a sealed cache file.
const SEAL_MAGIC: &[u8; 8] = b"murcwasm";
/// Bytes before the code: the magic, the engine key (16 hex digits), the SHA-256.
const SEAL_BYTES: usize = 8 + 16 + 32;

/// Loads compiled code from our own cache, once its seal was checked.
#[allow(unsafe_code)]
fn deserialize_own(engine: &Engine, code: &[u8]) -> anyhow::Result<Component> {
    // SAFETY: wasmtime requires that deserialized bytes come from `Component::serialize`
    // of a compatible engine and are trusted. These bytes were read from a file this
    // node's own `CompileCache::load` wrote (atomically, in its private data directory)
    // from code it compiled itself, and their SHA-256 was just checked against the one
    // sealed with them, with the engine's compatibility key; wasmtime re-checks
    // compatibility and returns an error (not undefined behaviour) on mismatch.
    // Precompiled code from any other source is never passed here.
    unsafe { Component::deserialize(engine, code) }.map_err(|e| anyhow::anyhow!("{e:#}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn echo() -> Vec<u8> {
        let path =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../capsules/target/wasm32-wasip2/release/echo.wasm");
        std::fs::read(&path)
            .unwrap_or_else(|_| panic!("{} is missing: run `bash capsules/build.sh`", path.display()))
    }

    #[test]
    fn a_corrupted_cache_file_is_recompiled_never_loaded() {
        let dir = tempfile::tempdir().unwrap();
        let engine = engine(false).unwrap();
        let cache = CompileCache::new(dir.path(), &engine);
        let bytes = echo();
        let digest = Digest::of(&bytes);
        cache.load(&engine, &digest, &bytes).unwrap();
        let path = cache.path(&digest);
        let sealed = std::fs::read(&path).unwrap();
        // One bit of the code flipped, in the middle of the file.
        let mut corrupted = sealed.clone();
        let at = SEAL_BYTES + (corrupted.len() - SEAL_BYTES) / 2;
        corrupted[at] ^= 0x01;
        std::fs::write(&path, &corrupted).unwrap();
        assert!(cache.read_own(&engine, &path).is_err(), "a corrupted file must not reach deserialize");
        cache.load(&engine, &digest, &bytes).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), sealed, "the entry was compiled again and resealed");
        // A file without a seal (an older cache, or someone else's bytes) is not loaded either.
        std::fs::write(&path, &sealed[SEAL_BYTES..]).unwrap();
        assert!(cache.read_own(&engine, &path).is_err());
    }
}

/// Advances the engine's epoch every [`EPOCH_TICK`] until dropped.
#[derive(Debug)]
pub struct EpochTicker {
    stop: Arc<AtomicBool>,
}

impl EpochTicker {
    /// Starts ticking `engine`.
    #[must_use]
    pub fn start(engine: &Engine) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let (engine, flag) = (engine.clone(), stop.clone());
        std::thread::Builder::new()
            .name("murmur-epoch".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(EPOCH_TICK);
                    engine.increment_epoch();
                }
            })
            .expect("spawning a thread at start-up succeeds");
        Self { stop }
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Epoch ticks covering `deadline` (at least one).
#[must_use]
pub fn ticks(deadline: Duration) -> u64 {
    (deadline.as_micros() / EPOCH_TICK.as_micros()).max(1) as u64 + 1
}
