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
        let path = self.dir.join(format!("{}-{}.cwasm", digest.hex(), self.engine_key));
        if path.exists() {
            match deserialize_own(engine, &path) {
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
                if let Err(err) = write_atomic(&path, &compiled) {
                    tracing::warn!(error = %err, "cannot cache compiled component");
                }
            }
            Err(err) => tracing::warn!(error = %err, "cannot serialize compiled component"),
        }
        Ok(component)
    }
}

/// Loads compiled code from our own cache.
#[allow(unsafe_code)]
fn deserialize_own(engine: &Engine, path: &Path) -> anyhow::Result<Component> {
    // SAFETY: wasmtime requires that deserialized bytes come from `Component::serialize`
    // of a compatible engine and are trusted. This file was written by this node's own
    // `CompileCache::load` (atomically, in its private data directory) from code it
    // compiled itself; its name carries the engine's compatibility hash, and wasmtime
    // re-checks compatibility and returns an error (not undefined behaviour) on mismatch.
    // Precompiled code from any other source is never passed here.
    unsafe { Component::deserialize_file(engine, path) }.map_err(|e| anyhow::anyhow!("{e:#}"))
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
