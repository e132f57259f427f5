//! The pull scheduler: fetching one blob in fixed-size chunks from several providers.
//!
//! Sans-IO, like the directory and the router: the driver says which providers hold the
//! blob and what came back for each request (the digest of the bytes it received, never
//! the bytes), and carries out the outputs: ask a provider for a chunk, write a verified
//! chunk, penalise a provider. Every decision is here, so the simulator drives the same
//! code as the node.
//!
//! # Rules
//!
//! - A chunk is written only when the bytes received hash to the chunk list's digest for
//!   it (the chunk list is covered by the artifact's signed manifest), and only once.
//! - Requests go to the provider with the fewest requests in flight, then the lowest
//!   smoothed latency, then the lowest node id: load spreads over every provider, and a
//!   slow one gets less. At most [`PullConfig::per_provider`] requests per provider and
//!   [`PullConfig::in_flight_max`] in all.
//! - A provider that serves bad bytes is dropped from this pull at once and penalised.
//! - A request without an answer after [`PullConfig::timeout_ms`] is a strike against its
//!   provider (dropped at [`PullConfig::strikes_max`]); the chunk is asked of another.
//! - A request still open after [`PullConfig::hedge_after_ms`] while another provider has
//!   room is asked of that provider too; the first good answer wins, the other is ignored.
//! - A resumed pull starts from the chunks already on disk (verified by the driver).
//! - With no usable provider and chunks missing, the pull reports `Stalled` once and waits
//!   for [`Input::AddProvider`].

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::digest::Digest;
use crate::identity::NodeId;
use crate::time::Millis;

/// Chunks one pull may have at most (a 256 MiB blob has 256 of 1 MiB).
pub const PULL_CHUNKS_MAX: usize = 1 << 20;
/// Outputs queued for the driver at most: past this, no new requests are made until the
/// driver drains them (writes, penalties and reports are always queued; each input adds
/// at most a few).
pub const PULL_OUTPUTS_MAX: usize = 4096;

/// How a pull schedules.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PullConfig {
    /// Requests in flight per provider.
    pub per_provider: usize,
    /// Requests in flight in all.
    pub in_flight_max: usize,
    /// A request without an answer this long has failed.
    pub timeout_ms: u64,
    /// A request open this long is also asked of another provider with room.
    pub hedge_after_ms: u64,
    /// Failures (timeouts, errors) after which a provider is dropped from the pull.
    pub strikes_max: u32,
}

impl Default for PullConfig {
    fn default() -> Self {
        Self { per_provider: 4, in_flight_max: 16, timeout_ms: 10_000, hedge_after_ms: 2_000, strikes_max: 3 }
    }
}

/// What the driver tells the pull.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Input {
    /// A node that holds the blob.
    AddProvider(NodeId),
    /// A node that no longer does, or whose connection closed.
    RemoveProvider(NodeId),
    /// The answer to a request: `len` bytes hashing to `digest`.
    Chunk { provider: NodeId, index: u32, digest: Digest, len: u64 },
    /// The request failed (error answer, connection lost).
    Failed { provider: NodeId, index: u32, reason: String },
    /// Time passed.
    Tick,
}

/// What the pull asks of the driver, or reports.
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use]
pub enum Output {
    /// Ask `provider` for chunk `index`: `len` bytes at `offset` of the blob.
    Request { provider: NodeId, index: u32, offset: u64, len: u64 },
    /// The bytes last received for chunk `index` are good: write them at its offset.
    Write { index: u32 },
    /// `provider` served bad bytes or failed too often: it is out of this pull.
    Penalize { provider: NodeId, reason: String },
    /// Every chunk is written.
    Done,
    /// Chunks are missing and no provider is left; add one to go on.
    Stalled { missing: usize },
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Chunk {
    Missing,
    /// Asked of these providers, each since then.
    Asked(Vec<(NodeId, Millis)>),
    Written,
}

#[derive(Clone, Debug, Default)]
struct Provider {
    in_flight: usize,
    /// Smoothed answer time (ms); unknown providers count as 0 so they get tried.
    latency_ms: u64,
    strikes: u32,
    served: u64,
}

/// Counters for metrics and tests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PullStats {
    pub requests: u64,
    pub hedges: u64,
    pub bad_chunks: u64,
    pub timeouts: u64,
    pub failures: u64,
    pub late_answers: u64,
    pub bytes_written: u64,
}

/// One blob being pulled.
#[derive(Debug)]
pub struct Pull {
    config: PullConfig,
    size: u64,
    chunk_size: u64,
    expected: Vec<Digest>,
    chunks: Vec<Chunk>,
    providers: BTreeMap<NodeId, Provider>,
    dropped: BTreeSet<NodeId>,
    written: usize,
    outputs: VecDeque<Output>,
    stalled_reported: bool,
    done_reported: bool,
    stats: PullStats,
}

/// Why a pull cannot start.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PullError {
    #[error("a chunk list of {found} entries does not fit {size} bytes in chunks of {chunk_size}")]
    ChunkCount { found: usize, size: u64, chunk_size: u64 },
    #[error("chunks must be 1 byte to 64 MiB, not {0}")]
    ChunkSize(u64),
    #[error("chunk {0} is beyond the blob")]
    Index(u32),
}

impl Pull {
    /// A pull of a `size`-byte blob in `chunk_size`-byte chunks whose digests are
    /// `expected` (in order); `have` lists the chunks already written (a resumed pull).
    pub fn new(
        config: PullConfig,
        size: u64,
        chunk_size: u64,
        expected: Vec<Digest>,
        have: &[u32],
    ) -> Result<Self, PullError> {
        if chunk_size == 0 || chunk_size > 64 << 20 {
            return Err(PullError::ChunkSize(chunk_size));
        }
        let count = usize::try_from(size.div_ceil(chunk_size)).unwrap_or(usize::MAX);
        if expected.len() != count || count > PULL_CHUNKS_MAX {
            return Err(PullError::ChunkCount { found: expected.len(), size, chunk_size });
        }
        let mut pull = Self {
            config,
            size,
            chunk_size,
            chunks: vec![Chunk::Missing; count],
            expected,
            providers: BTreeMap::new(),
            dropped: BTreeSet::new(),
            written: 0,
            outputs: VecDeque::new(),
            stalled_reported: false,
            done_reported: false,
            stats: PullStats::default(),
        };
        for &index in have {
            let slot = pull.chunks.get_mut(index as usize).ok_or(PullError::Index(index))?;
            if *slot != Chunk::Written {
                *slot = Chunk::Written;
                pull.written += 1;
            }
        }
        Ok(pull)
    }

    /// The byte range of chunk `index`: (offset, length).
    #[must_use]
    pub fn range(&self, index: u32) -> (u64, u64) {
        let offset = u64::from(index) * self.chunk_size;
        (offset, self.chunk_size.min(self.size.saturating_sub(offset)))
    }

    /// Feeds one input at time `now`, then schedules what it can.
    pub fn handle(&mut self, now: Millis, input: Input) {
        match input {
            Input::AddProvider(node) => {
                if !self.dropped.contains(&node) {
                    self.providers.entry(node).or_default();
                    self.stalled_reported = false;
                }
            }
            Input::RemoveProvider(node) => self.remove(&node),
            Input::Chunk { provider, index, digest, len } => self.arrived(now, provider, index, digest, len),
            Input::Failed { provider, index, .. } => {
                if self.release(&provider, index) {
                    self.stats.failures += 1;
                    self.strike(&provider, "failed requests");
                }
            }
            Input::Tick => self.expire(now),
        }
        self.schedule(now);
    }

    /// The next output.
    pub fn poll_output(&mut self) -> Option<Output> {
        self.outputs.pop_front()
    }

    /// When the pull next needs a tick (the earliest hedge or timeout).
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Millis> {
        self.chunks
            .iter()
            .filter_map(|c| match c {
                Chunk::Asked(asked) => asked.iter().map(|(_, since)| *since).min(),
                _ => None,
            })
            .min()
            .map(|since| since.plus(self.config.hedge_after_ms.min(self.config.timeout_ms)))
    }

    /// Whether every chunk is written.
    #[must_use]
    pub fn is_done(&self) -> bool {
        self.written == self.chunks.len()
    }

    /// Chunks not written yet.
    #[must_use]
    pub fn missing(&self) -> usize {
        self.chunks.len() - self.written
    }

    /// Providers dropped from this pull (bad bytes, or too many failures).
    #[must_use]
    pub const fn dropped(&self) -> &BTreeSet<NodeId> {
        &self.dropped
    }

    /// Counters.
    #[must_use]
    pub const fn stats(&self) -> &PullStats {
        &self.stats
    }

    fn arrived(&mut self, now: Millis, provider: NodeId, index: u32, digest: Digest, len: u64) {
        let Some(since) = self.asked_since(&provider, index) else {
            // Not asked of it, or answered already by another (a hedge that lost).
            self.stats.late_answers += 1;
            return;
        };
        self.release(&provider, index);
        let (_, expected_len) = self.range(index);
        if digest != self.expected[index as usize] || len != expected_len {
            self.stats.bad_chunks += 1;
            self.drop_provider(provider, format!("chunk {index}: bytes that do not match the chunk list"));
            return;
        }
        if let Some(p) = self.providers.get_mut(&provider) {
            let took = now.0.saturating_sub(since.0);
            p.latency_ms = if p.served == 0 { took } else { (p.latency_ms * 3 + took) / 4 };
            p.served += 1;
        }
        // Other providers asked for the same chunk (hedges) no longer count against it.
        if let Chunk::Asked(asked) = &self.chunks[index as usize] {
            for (other, _) in asked.clone() {
                if let Some(p) = self.providers.get_mut(&other) {
                    p.in_flight = p.in_flight.saturating_sub(1);
                }
            }
        }
        self.chunks[index as usize] = Chunk::Written;
        self.written += 1;
        self.stats.bytes_written += len;
        self.push(Output::Write { index });
        if self.is_done() && !self.done_reported {
            self.done_reported = true;
            self.push(Output::Done);
        }
    }

    fn asked_since(&self, provider: &NodeId, index: u32) -> Option<Millis> {
        match self.chunks.get(index as usize)? {
            Chunk::Asked(asked) => asked.iter().find(|(p, _)| p == provider).map(|(_, since)| *since),
            _ => None,
        }
    }

    /// Forgets that `provider` was asked for `index`; returns whether it had been.
    fn release(&mut self, provider: &NodeId, index: u32) -> bool {
        let Some(Chunk::Asked(asked)) = self.chunks.get_mut(index as usize) else { return false };
        let before = asked.len();
        asked.retain(|(p, _)| p != provider);
        if asked.len() == before {
            return false;
        }
        if asked.is_empty() {
            self.chunks[index as usize] = Chunk::Missing;
        }
        if let Some(p) = self.providers.get_mut(provider) {
            p.in_flight = p.in_flight.saturating_sub(1);
        }
        true
    }

    fn strike(&mut self, provider: &NodeId, what: &str) {
        let Some(p) = self.providers.get_mut(provider) else { return };
        p.strikes += 1;
        if p.strikes >= self.config.strikes_max {
            let strikes = p.strikes;
            self.drop_provider(*provider, format!("{strikes} {what}"));
        }
    }

    fn drop_provider(&mut self, provider: NodeId, reason: String) {
        if self.dropped.insert(provider) {
            self.push(Output::Penalize { provider, reason });
        }
        self.remove(&provider);
    }

    fn remove(&mut self, provider: &NodeId) {
        self.providers.remove(provider);
        for index in 0..self.chunks.len() {
            if let Chunk::Asked(asked) = &mut self.chunks[index] {
                asked.retain(|(p, _)| p != provider);
                if asked.is_empty() {
                    self.chunks[index] = Chunk::Missing;
                }
            }
        }
    }

    fn expire(&mut self, now: Millis) {
        let timeout = self.config.timeout_ms;
        let mut late = Vec::new();
        for (index, chunk) in self.chunks.iter().enumerate() {
            if let Chunk::Asked(asked) = chunk {
                for (provider, since) in asked {
                    if now.0.saturating_sub(since.0) >= timeout {
                        late.push((*provider, u32::try_from(index).unwrap_or(u32::MAX)));
                    }
                }
            }
        }
        for (provider, index) in late {
            if self.release(&provider, index) {
                self.stats.timeouts += 1;
                self.strike(&provider, "timeouts");
            }
        }
    }

    /// The provider with room that should take the next request, not among `except`.
    fn pick(&self, except: &[NodeId]) -> Option<NodeId> {
        self.providers
            .iter()
            .filter(|(node, p)| p.in_flight < self.config.per_provider && !except.contains(node))
            .min_by_key(|(node, p)| (p.in_flight, p.latency_ms, **node))
            .map(|(node, _)| *node)
    }

    fn in_flight(&self) -> usize {
        self.providers.values().map(|p| p.in_flight).sum()
    }

    fn ask(&mut self, now: Millis, provider: NodeId, index: u32) {
        if self.outputs.len() >= PULL_OUTPUTS_MAX {
            return;
        }
        let (offset, len) = self.range(index);
        match &mut self.chunks[index as usize] {
            Chunk::Asked(asked) => asked.push((provider, now)),
            slot => *slot = Chunk::Asked(vec![(provider, now)]),
        }
        if let Some(p) = self.providers.get_mut(&provider) {
            p.in_flight += 1;
        }
        self.stats.requests += 1;
        self.push(Output::Request { provider, index, offset, len });
    }

    fn schedule(&mut self, now: Millis) {
        // Missing chunks first, lowest index first (the file fills from the front).
        for index in 0..self.chunks.len() {
            if self.in_flight() >= self.config.in_flight_max {
                break;
            }
            if self.chunks[index] != Chunk::Missing {
                continue;
            }
            let Some(provider) = self.pick(&[]) else { break };
            self.ask(now, provider, u32::try_from(index).unwrap_or(u32::MAX));
        }
        // Then hedges: requests open too long, asked again of another provider with room.
        for index in 0..self.chunks.len() {
            if self.in_flight() >= self.config.in_flight_max {
                break;
            }
            let Chunk::Asked(asked) = &self.chunks[index] else { continue };
            let slow = asked.len() == 1 && now.0.saturating_sub(asked[0].1.0) >= self.config.hedge_after_ms;
            if !slow {
                continue;
            }
            let except: Vec<NodeId> = asked.iter().map(|(p, _)| *p).collect();
            let Some(provider) = self.pick(&except) else { continue };
            self.stats.hedges += 1;
            self.ask(now, provider, u32::try_from(index).unwrap_or(u32::MAX));
        }
        if self.is_done() {
            if !self.done_reported {
                self.done_reported = true;
                self.push(Output::Done);
            }
        } else if self.providers.is_empty() && self.in_flight() == 0 && !self.stalled_reported {
            self.stalled_reported = true;
            self.push(Output::Stalled { missing: self.missing() });
        }
    }

    fn push(&mut self, output: Output) {
        self.outputs.push_back(output);
    }
}

#[cfg(test)]
mod tests;
