//! The pull scheduler: fetching one blob in fixed-size chunks from several providers.
//!
//! Sans-IO, like the directory and the router: the driver says which providers hold the
//! blob and what came back for each request (the bytes' link in the chunk list,
//! [`crate::artifact::ChunkList::link`], never the bytes), and carries out the outputs: ask a provider for a chunk, write a verified
//! chunk, penalise a provider. Every decision is here, so the simulator drives the same
//! code as the node.
//!
//! # Rules
//!
//! - A chunk is written only when the bytes received link to the chunk list's entry for it
//!   (the chunk list is covered by the artifact's signed manifest), and only once.
//! - Requests go to the provider with the fewest requests in flight, then the lowest
//!   smoothed latency, then the lowest node id: load spreads over every provider, and a
//!   slow one gets less. At most [`PullConfig::per_provider`] requests per provider and
//!   [`PullConfig::in_flight_max`] in all; a provider that has not served a good chunk yet
//!   gets at most [`PullConfig::probe`], so a node that is down but still advertised holds
//!   a few chunks until they are hedged, not a whole window of them.
//! - A provider that serves bad bytes is dropped from this pull at once and penalised, for
//!   good: it is never asked again by this pull.
//! - A request without an answer after [`PullConfig::timeout_ms`] is a strike against its
//!   provider (one per provider per tick, however many of its requests expired together;
//!   dropped at [`PullConfig::strikes_max`]); the chunk is asked of another. Its answer, if
//!   it still comes and verifies, fills the chunk when it is still missing.
//! - A request still open after [`PullConfig::hedge_after_ms`] while another provider that
//!   has served a good chunk has room is asked of that provider too; the first good answer wins, the other is ignored.
//!   In the endgame (every missing chunk asked) the wait is shorter when the fastest
//!   provider answers faster: twice its smoothed answer time, so the last chunks do not
//!   wait out `hedge_after_ms` behind a provider that is down.
//! - A resumed pull starts from the chunks already on disk (verified by the driver).
//! - With no usable provider and chunks missing, the pull reports `Stalled` once and waits
//!   for [`Input::AddProvider`]. A provider dropped only for failures (a partition, a
//!   restart) is taken back when added again, with its strikes cleared: a burst of timeouts
//!   must not shut an honest provider out of a pull for ever.

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
    /// Requests in flight to a provider that has not served a good chunk yet (at most
    /// `per_provider`).
    pub probe: usize,
    /// Requests in flight in all.
    pub in_flight_max: usize,
    /// A request without an answer this long has failed.
    pub timeout_ms: u64,
    /// A request open this long is also asked of another provider with room.
    pub hedge_after_ms: u64,
    /// Failures (timeouts, errors) after which a provider is dropped from the pull.
    pub strikes_max: u32,
    /// Planted bugs (the simulator's; none in a node).
    pub plants: crate::plant::Plants,
}

impl Default for PullConfig {
    fn default() -> Self {
        Self {
            per_provider: 4,
            probe: 2,
            in_flight_max: 16,
            timeout_ms: 10_000,
            hedge_after_ms: 2_000,
            strikes_max: 3,
            plants: crate::plant::Plants::NONE,
        }
    }
}

/// What the driver tells the pull.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Input {
    /// A node that holds the blob.
    AddProvider(NodeId),
    /// A node that no longer does, or whose connection closed.
    RemoveProvider(NodeId),
    /// The answer to a request: `len` bytes whose link in the chunk list is `digest`.
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
    /// The bytes `provider` sent for chunk `index` are good: write those at its offset.
    Write { index: u32, provider: NodeId },
    /// `provider` served bad bytes or failed too often: it is out of this pull.
    Penalize { provider: NodeId, reason: String },
    /// Every chunk is written.
    Done,
    /// Chunks are missing and no provider is left; add one to go on.
    Stalled { missing: usize },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Chunk {
    Missing,
    /// Requests for it are out (this many).
    Asked(u16),
    Written,
}

/// One request sent and not yet answered, failed or timed out.
#[derive(Clone, Copy, Debug)]
struct Request {
    since: Millis,
    /// Timed out: its chunk is asked elsewhere, but it still counts against its provider
    /// until the driver reports its end (an answer or a failure), so a slow provider is not
    /// sent more while the old requests still use its link.
    expired: bool,
}

#[derive(Clone, Debug, Default)]
struct Provider {
    /// Smoothed answer time (ms); unknown providers count as 0 so they get tried.
    latency_ms: u64,
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
    /// Providers dropped for failures and taken back when added again.
    pub readmitted: u64,
}

/// One blob being pulled.
#[derive(Debug)]
pub struct Pull {
    config: PullConfig,
    size: u64,
    chunk_size: u64,
    expected: Vec<Digest>,
    chunks: Vec<Chunk>,
    /// Every request out, by (provider, chunk): the in-flight counts are derived from it,
    /// so an answer that lost a hedge still counts until it arrives, fails or times out.
    outstanding: BTreeMap<(NodeId, u32), Request>,
    providers: BTreeMap<NodeId, Provider>,
    /// Strikes per provider, kept across removal and return.
    strikes: BTreeMap<NodeId, u32>,
    dropped: BTreeSet<NodeId>,
    /// Providers that served bad bytes: never taken back.
    banned: BTreeSet<NodeId>,
    /// Chunks never asked yet start at this index; chunks asked and returned to missing
    /// are in `retry`. Scheduling never scans the whole chunk list.
    cursor: usize,
    retry: BTreeSet<u32>,
    written: usize,
    now: Millis,
    outputs: VecDeque<Output>,
    stalled_reported: bool,
    done_reported: bool,
    stats: PullStats,
}

/// An expired request the driver never reported is forgotten after this many timeouts.
const ZOMBIE_TIMEOUTS: u64 = 3;

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
    /// A pull of a `size`-byte blob in `chunk_size`-byte chunks whose chunk-list entries
    /// are `expected` (in order); `have` lists the chunks already written (a resumed pull).
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
            outstanding: BTreeMap::new(),
            providers: BTreeMap::new(),
            strikes: BTreeMap::new(),
            dropped: BTreeSet::new(),
            banned: BTreeSet::new(),
            cursor: 0,
            retry: BTreeSet::new(),
            written: 0,
            now: Millis(0),
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
        self.now = self.now.max(now);
        match input {
            Input::AddProvider(node) => {
                self.add_providers(now, &[node]);
                return;
            }
            Input::RemoveProvider(node) => self.remove(&node),
            Input::Chunk { provider, index, digest, len } => self.arrived(now, provider, index, digest, len),
            Input::Failed { provider, index, .. } => {
                if self.release(&provider, index).is_some_and(|r| !r.expired) {
                    self.stats.failures += 1;
                    self.strike(&provider, "failed requests");
                }
            }
            Input::Tick => self.expire(now),
        }
        self.schedule(now);
    }

    /// Adds several providers at once, then schedules: the first requests spread over all
    /// of them (one `AddProvider` at a time would give the first one its full share).
    pub fn add_providers(&mut self, now: Millis, nodes: &[NodeId]) {
        self.now = self.now.max(now);
        for &node in nodes {
            if !self.banned.contains(&node) {
                if self.dropped.remove(&node) {
                    self.strikes.remove(&node);
                    self.stats.readmitted += 1;
                }
                self.providers.entry(node).or_default();
                self.stalled_reported = false;
            }
        }
        self.schedule(now);
    }

    /// The next output.
    pub fn poll_output(&mut self) -> Option<Output> {
        crate::limits::pop_output(&mut self.outputs)
    }

    /// When the pull next needs a tick: the earliest timeout, or a hedge still to come.
    /// Never a moment already passed, so a driver that sleeps until then never spins.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Millis> {
        let hedge_after = self.hedge_after();
        self.outstanding
            .iter()
            .flat_map(|((_, index), r)| {
                if r.expired {
                    return [
                        Some(r.since.plus(self.config.timeout_ms.saturating_mul(ZOMBIE_TIMEOUTS))),
                        None,
                    ];
                }
                let hedge = r.since.plus(hedge_after);
                let hedgeable = self.chunks[*index as usize] == Chunk::Asked(1) && hedge > self.now;
                [Some(r.since.plus(self.config.timeout_ms)), hedgeable.then_some(hedge)]
            })
            .flatten()
            .min()
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

    /// Requests out to `provider` now.
    #[must_use]
    pub fn in_flight_to(&self, provider: &NodeId) -> usize {
        self.outstanding.range((*provider, 0)..=(*provider, u32::MAX)).count()
    }

    /// Good chunks `provider` has served this pull (0 for one it does not know): until it
    /// has served one, it gets only [`PullConfig::probe`] requests.
    #[must_use]
    pub fn served(&self, provider: &NodeId) -> u64 {
        self.providers.get(provider).map_or(0, |p| p.served)
    }

    /// Requests out now, to every provider.
    #[must_use]
    pub fn in_flight(&self) -> usize {
        self.outstanding.len()
    }

    /// Counters.
    #[must_use]
    pub const fn stats(&self) -> &PullStats {
        &self.stats
    }

    fn arrived(&mut self, now: Millis, provider: NodeId, index: u32, digest: Digest, len: u64) {
        if index as usize >= self.chunks.len() {
            return;
        }
        let (_, expected_len) = self.range(index);
        let good = digest == self.expected[index as usize] && len == expected_len;
        if !good
            && self.config.plants.has(crate::plant::Plant::WriteUnverified)
            && self.chunks[index as usize] != Chunk::Written
        {
            // The planted bug: the bytes go to disk before they are checked.
            self.outputs.push_back(Output::Write { index, provider });
        }
        let released = self.release(&provider, index);
        let Some(request) = released.filter(|r| !r.expired) else {
            // Never asked of it, or it timed out, or its provider was removed. Bytes that
            // verify still fill a missing chunk (on a slow link every answer may come after
            // its timeout) and prove the provider serves; bytes that do not are bad bytes
            // all the same.
            self.stats.late_answers += 1;
            if good && let Some(request) = released {
                self.credit(provider, now.0.saturating_sub(request.since.0));
            }
            if !good {
                self.stats.bad_chunks += 1;
                self.ban(provider, index);
            } else if self.chunks[index as usize] != Chunk::Written {
                self.write(index, provider, len);
            }
            return;
        };
        if self.chunks[index as usize] == Chunk::Written && good {
            // A hedge that lost: the chunk is written already.
            self.stats.late_answers += 1;
            return;
        }
        if !good {
            self.stats.bad_chunks += 1;
            self.ban(provider, index);
            return;
        }
        self.credit(provider, now.0.saturating_sub(request.since.0));
        self.write(index, provider, len);
    }

    /// `provider` served a good chunk `took` ms after it was asked.
    fn credit(&mut self, provider: NodeId, took: u64) {
        if let Some(p) = self.providers.get_mut(&provider) {
            p.latency_ms = if p.served == 0 { took } else { (p.latency_ms * 3 + took) / 4 };
            p.served += 1;
        }
    }

    /// Marks chunk `index` written from `provider`'s bytes and tells the driver.
    fn write(&mut self, index: u32, provider: NodeId, len: u64) {
        self.chunks[index as usize] = Chunk::Written;
        self.retry.remove(&index);
        self.written += 1;
        self.stats.bytes_written += len;
        self.push(Output::Write { index, provider });
        if self.is_done() && !self.done_reported {
            self.done_reported = true;
            self.push(Output::Done);
        }
    }

    /// Forgets the request to `provider` for `index`; returns it if there was one. An
    /// unwritten chunk with no request left is missing again.
    fn release(&mut self, provider: &NodeId, index: u32) -> Option<Request> {
        let request = self.outstanding.remove(&(*provider, index))?;
        if !request.expired {
            self.unask(index);
        }
        Some(request)
    }

    /// One request for chunk `index` no longer counts for it; with none left, it is
    /// missing again.
    fn unask(&mut self, index: u32) {
        if let Some(Chunk::Asked(n)) = self.chunks.get(index as usize).copied() {
            if n <= 1 {
                self.chunks[index as usize] = Chunk::Missing;
                self.retry.insert(index);
            } else {
                self.chunks[index as usize] = Chunk::Asked(n - 1);
            }
        }
    }

    /// `provider` served bad bytes for chunk `index`: out of this pull for good, penalised
    /// once (also when it had already been dropped for failures).
    fn ban(&mut self, provider: NodeId, index: u32) {
        let newly_banned = self.banned.insert(provider);
        let newly_dropped = self.dropped.insert(provider);
        if newly_banned || newly_dropped {
            let reason = format!("chunk {index}: bytes that do not match the chunk list");
            self.push(Output::Penalize { provider, reason });
        }
        self.remove(&provider);
    }

    fn strike(&mut self, provider: &NodeId, what: &str) {
        let strikes = self.strikes.entry(*provider).or_default();
        *strikes += 1;
        if *strikes >= self.config.strikes_max {
            let strikes = *strikes;
            self.drop_provider(*provider, format!("{strikes} {what}"));
        }
    }

    fn drop_provider(&mut self, provider: NodeId, reason: String) {
        if self.dropped.insert(provider) {
            self.push(Output::Penalize { provider, reason });
        }
        self.remove(&provider);
    }

    /// A provider gone: its requests will not be answered (or are not wanted).
    fn remove(&mut self, provider: &NodeId) {
        self.providers.remove(provider);
        let mine: Vec<u32> =
            self.outstanding.range((*provider, 0)..=(*provider, u32::MAX)).map(|((_, i), _)| *i).collect();
        for index in mine {
            self.release(provider, index);
        }
    }

    fn expire(&mut self, now: Millis) {
        // Expired requests the driver never reported are forgotten after a while, so a
        // driver that loses a report cannot hold a provider's room for ever.
        let zombie_ms = self.config.timeout_ms.saturating_mul(ZOMBIE_TIMEOUTS);
        let forgotten: Vec<(NodeId, u32)> = self
            .outstanding
            .iter()
            .filter(|(_, r)| r.expired && now.0.saturating_sub(r.since.0) >= zombie_ms)
            .map(|(key, _)| *key)
            .collect();
        for key in forgotten {
            self.outstanding.remove(&key);
        }
        let late: Vec<(NodeId, u32)> = self
            .outstanding
            .iter()
            .filter(|(_, r)| !r.expired && now.0.saturating_sub(r.since.0) >= self.config.timeout_ms)
            .map(|(key, _)| *key)
            .collect();
        // One strike per provider per pass: requests sent together time out together, and
        // one slow moment must not count as many failures.
        let mut struck = BTreeSet::new();
        for (provider, index) in late {
            if let Some(request) = self.outstanding.get_mut(&(provider, index)) {
                request.expired = true;
                self.unask(index);
                self.stats.timeouts += 1;
                if struck.insert(provider) {
                    self.strike(&provider, "timeouts");
                }
            }
        }
    }

    /// Whether every chunk not written has a request out (nothing is left to ask for).
    fn endgame(&self) -> bool {
        self.retry.is_empty()
            && self.chunks.get(self.cursor..).is_none_or(|rest| rest.iter().all(|c| *c != Chunk::Missing))
    }

    /// How long a chunk's only request stays open before it is asked of another provider
    /// too (see the module's rules).
    fn hedge_after(&self) -> u64 {
        let fixed = self.config.hedge_after_ms;
        if !self.endgame() {
            return fixed;
        }
        self.providers
            .values()
            .filter(|p| p.served > 0)
            .map(|p| p.latency_ms.saturating_mul(2).max(1))
            .min()
            .map_or(fixed, |fastest| fastest.min(fixed))
    }

    /// Requests `provider` may have in flight: a window once it has served a good chunk.
    fn room(&self, provider: &Provider) -> usize {
        if provider.served == 0 {
            self.config.probe.min(self.config.per_provider).max(1)
        } else {
            self.config.per_provider
        }
    }

    /// The provider with room that should take the next request, not among `except`; for a
    /// hedge (`proven`), only one that has served a good chunk: a chunk is hedged once, and
    /// a second silent provider would hold it until its timeout.
    fn pick(&self, except: &[NodeId], proven: bool) -> Option<NodeId> {
        self.providers
            .iter()
            .filter(|(_, p)| !proven || p.served > 0)
            .map(|(node, p)| (node, p, self.in_flight_to(node)))
            .filter(|(node, p, n)| *n < self.room(p) && !except.contains(node))
            .min_by_key(|(node, p, n)| (*n, p.latency_ms, **node))
            .map(|(node, _, _)| *node)
    }

    fn ask(&mut self, now: Millis, provider: NodeId, index: u32) -> bool {
        if self.outputs.len() >= PULL_OUTPUTS_MAX || self.outstanding.contains_key(&(provider, index)) {
            return false;
        }
        let (offset, len) = self.range(index);
        self.chunks[index as usize] = match self.chunks[index as usize] {
            Chunk::Asked(n) => Chunk::Asked(n.saturating_add(1)),
            _ => Chunk::Asked(1),
        };
        self.retry.remove(&index);
        self.outstanding.insert((provider, index), Request { since: now, expired: false });
        self.stats.requests += 1;
        self.push(Output::Request { provider, index, offset, len });
        true
    }

    /// The next chunk that needs a request: one returned to missing first, then the next
    /// never asked.
    fn next_missing(&mut self) -> Option<u32> {
        if let Some(&index) = self.retry.iter().next() {
            return Some(index);
        }
        while self.cursor < self.chunks.len() {
            let index = self.cursor;
            if self.chunks[index] == Chunk::Missing {
                return u32::try_from(index).ok();
            }
            self.cursor += 1;
        }
        None
    }

    fn schedule(&mut self, now: Millis) {
        while self.in_flight() < self.config.in_flight_max {
            let Some(index) = self.next_missing() else { break };
            let Some(provider) = self.pick(&[], false) else { break };
            if !self.ask(now, provider, index) {
                break;
            }
        }
        // Hedges: a chunk with one request open too long is asked of another provider.
        let hedge_after = self.hedge_after();
        let slow: Vec<(NodeId, u32)> = self
            .outstanding
            .iter()
            .filter(|((_, index), r)| {
                !r.expired
                    && self.chunks[*index as usize] == Chunk::Asked(1)
                    && now.0.saturating_sub(r.since.0) >= hedge_after
            })
            .map(|(key, _)| *key)
            .collect();
        for (first, index) in slow {
            if self.in_flight() >= self.config.in_flight_max {
                break;
            }
            let Some(provider) = self.pick(&[first], true) else { continue };
            if self.ask(now, provider, index) {
                self.stats.hedges += 1;
            }
        }
        if self.is_done() {
            if !self.done_reported {
                self.done_reported = true;
                self.push(Output::Done);
            }
        } else if self.providers.is_empty() && !self.stalled_reported {
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
