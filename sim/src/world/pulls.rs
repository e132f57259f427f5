//! Driving the protocol's pull scheduler, and `/murmur/artifact/1` chunk fetches over the
//! modelled network.
//!
//! What the driver does around each [`Pull`], as `murnode`'s will:
//! - providers come from the node's own directory: the nodes whose advert lists the
//!   blob's digest. Every `refresh_ms` new ones are added and ones no longer listed are
//!   removed; a provider whose connection closes (it crashed) is removed at once;
//! - `Request` goes out as a chunk request; the answer is the digest of the bytes the
//!   provider sent (no bytes move in the simulator: a corrupted chunk is a wrong digest),
//!   or "not held" (fed as `Failed`). A request to a dead node fails after a round trip
//!   (dial refused); a request with no answer fails after the scenario's request timeout;
//! - `Write` stores the chunk durably; the oracle checks the digest of what was written
//!   on every write. A blob stored whole is announced in the node's advert;
//! - a pull that lost every provider (`Stalled`) and whose directory lists only providers
//!   it dropped is rebuilt from the chunks on disk after `refresh_ms`: the protocol's pull
//!   never takes a dropped provider back, and after a partition every provider may have
//!   been dropped for timeouts.
//!
//! Requests to a peer without a connection dial implicitly; the dial's round trip is not
//! modelled separately (a chunk's transfer time dominates).

use std::collections::BTreeSet;
use std::sync::Arc;

use murmur_protocol::NodeId;
use murmur_protocol::artifact::{ArtifactRequest, ArtifactResponse};
use murmur_protocol::digest::Digest;
use murmur_protocol::pull::{Input, Output, Pull, PullConfig};

use super::artifacts::{ActivePull, ArtifactEvent, ChunkRequest, REQUESTS_MAX, add_pull_stats};
use super::driver::arm_timer;
use super::net::Channel;
use super::{Event, Ix, Role, Sim};
use crate::check::ArtifactOracle;
use crate::scenario::{ByzantineRole, Fault};

impl Sim {
    /// Starts (or resumes) node `ix`'s pull of `blob`: first its resolution (`resolves`),
    /// then the pull from the chunks on its disk.
    pub(super) fn start_pull(&mut self, ix: Ix, blob: usize) {
        let Some(model) = self.artifacts.as_deref_mut() else { return };
        let Some(truth) = model.oracle.blob(blob) else { return };
        let node = &mut model.nodes[ix as usize];
        let held = node.store.get(&blob).map_or(0, |s| s.len());
        if held == truth.chunks.len() {
            node.wanted.remove(&blob);
            return;
        }
        self.start_resolve(ix, blob);
    }

    /// Starts node `ix`'s pull of `blob` once resolved, with `holders` (the providers that
    /// offered the chosen manifest); the directory's other providers join at the next refresh.
    pub(super) fn begin_pull(&mut self, ix: Ix, blob: usize, holders: Vec<NodeId>) {
        let plants = self.options.plants();
        let Some(model) = self.artifacts.as_deref_mut() else { return };
        let Some(truth) = model.oracle.blob(blob) else { return };
        let node = &mut model.nodes[ix as usize];
        if node.pulls.contains_key(&blob) {
            return;
        }
        let have: Vec<u32> = node.store.get(&blob).map(|s| s.keys().copied().collect()).unwrap_or_default();
        let config = PullConfig { plants, ..model.config.pull_config() };
        let chunk = model.config.chunk_bytes();
        let pull = match Pull::new(config, truth.size, chunk, truth.chunks.clone(), &have) {
            Ok(pull) => pull,
            Err(err) => {
                self.violation(format!("node {ix} could not start a pull of art-{blob}: {err}"));
                return;
            }
        };
        node.pulls
            .insert(blob, ActivePull { pull, known: BTreeSet::new(), timer_at: None, stalled_since: None });
        model.stats.pulls_started += 1;
        for provider in holders {
            if let Some(active) = self.active(ix, blob) {
                active.known.insert(provider);
            }
            self.pull_input(ix, blob, Input::AddProvider(provider), None);
        }
    }

    /// Every pull of node `ix` reads the directory for providers again, and a wanted blob
    /// whose resolution found nothing trusted is resolved again.
    pub(super) fn refresh_pulls(&mut self, ix: Ix) {
        let Some(model) = self.artifacts.as_deref() else { return };
        let node = &model.nodes[ix as usize];
        let blobs: Vec<usize> = node.pulls.keys().copied().collect();
        let again: Vec<usize> = node
            .wanted
            .keys()
            .filter(|b| !node.pulls.contains_key(b) && !node.resolving.contains_key(b))
            .copied()
            .collect();
        for blob in blobs {
            self.sync_providers(ix, blob);
        }
        for blob in again {
            self.start_pull(ix, blob);
        }
    }

    /// The providers of `blob` node `ix`'s directory lists now, except itself.
    fn listed_providers(&self, ix: Ix, digest: &Digest) -> BTreeSet<NodeId> {
        let now = self.clock(ix);
        let Some(mesh) = self.nodes[ix as usize].mesh.as_ref() else { return BTreeSet::new() };
        mesh.artifact_providers(now, Some(digest)).into_iter().collect()
    }

    /// Brings node `ix`'s pull of `blob` up to date with the directory: new providers in,
    /// unlisted ones out, and a stalled pull whose listed providers were all dropped
    /// rebuilt from disk.
    fn sync_providers(&mut self, ix: Ix, blob: usize) {
        let Some(digest) = self.artifacts.as_deref().and_then(|w| w.oracle.blob(blob)).map(|t| t.digest)
        else {
            return;
        };
        let listed = self.listed_providers(ix, &digest);
        let Some(model) = self.artifacts.as_deref_mut() else { return };
        let refresh_ms = model.config.refresh_ms;
        let Some(active) = model.nodes[ix as usize].pulls.get(&blob) else { return };
        let all_dropped = !listed.is_empty() && listed.iter().all(|p| active.pull.dropped().contains(p));
        if all_dropped && active.stalled_since.is_some_and(|since| since + refresh_ms <= self.now) {
            let stats = active.pull.stats().clone();
            add_pull_stats(&mut model.totals, &stats);
            model.stats.pulls_rebuilt += 1;
            model.nodes[ix as usize].pulls.remove(&blob);
            self.start_pull(ix, blob);
            return;
        }
        let gone: Vec<NodeId> = active.known.difference(&listed).copied().collect();
        let new: Vec<NodeId> = listed.difference(&active.known).copied().collect();
        for provider in gone {
            if let Some(active) = self.active(ix, blob) {
                active.known.remove(&provider);
            }
            self.pull_input(ix, blob, Input::RemoveProvider(provider), None);
        }
        for provider in new {
            if let Some(active) = self.active(ix, blob) {
                active.known.insert(provider);
            }
            self.pull_input(ix, blob, Input::AddProvider(provider), None);
        }
    }

    fn active(&mut self, ix: Ix, blob: usize) -> Option<&mut ActivePull> {
        self.artifacts.as_deref_mut()?.nodes[ix as usize].pulls.get_mut(&blob)
    }

    pub(super) fn pull_timer(&mut self, ix: Ix, blob: usize) {
        let now = self.now;
        let Some(active) = self.active(ix, blob) else { return };
        if active.timer_at == Some(now) {
            active.timer_at = None;
            self.pull_input(ix, blob, Input::Tick, None);
        }
    }

    /// Feeds one input to node `ix`'s pull of `blob` and carries out its outputs; `served`
    /// is the digest of the bytes behind a `Chunk` input (what a `Write` would store).
    fn pull_input(&mut self, ix: Ix, blob: usize, input: Input, served: Option<Digest>) {
        let now = self.clock(ix);
        let Some(model) = self.artifacts.as_deref_mut() else { return };
        let (in_flight_max, per_provider) = (model.config.in_flight_max, model.config.per_provider);
        let probe = model.config.pull_config().probe;
        let Some(active) = model.nodes[ix as usize].pulls.get_mut(&blob) else { return };
        active.pull.handle(now, input);
        let outputs: Vec<Output> = std::iter::from_fn(|| active.pull.poll_output()).collect();
        let busiest = active.known.iter().map(|p| active.pull.in_flight_to(p)).max().unwrap_or(0);
        // Providers just sent requests that have not served a good chunk yet: their most
        // requests in flight, held to the probe.
        let probing = outputs
            .iter()
            .filter_map(|o| match o {
                Output::Request { provider, .. } if active.pull.served(provider) == 0 => {
                    Some(active.pull.in_flight_to(provider))
                }
                _ => None,
            })
            .max()
            .unwrap_or(0);
        let bounds = ArtifactOracle::bounds(
            ix,
            blob,
            (active.pull.in_flight(), in_flight_max),
            (busiest, per_provider),
        )
        .and_then(|()| ArtifactOracle::probe_bound(ix, blob, probing, probe));
        if let Some(at) = arm_timer(&mut active.timer_at, active.pull.poll_timeout(), now, self.now) {
            let epoch = self.nodes[ix as usize].epoch;
            self.schedule(at, Event::Artifact(ArtifactEvent::PullTimer { node: ix, epoch, blob }));
        }
        if let Err(what) = bounds {
            self.violation(what);
        }
        for output in outputs {
            self.carry_out_pull(ix, blob, output, served);
        }
    }

    fn carry_out_pull(&mut self, ix: Ix, blob: usize, output: Output, served: Option<Digest>) {
        match output {
            Output::Request { provider, index, offset, len } => {
                self.request_chunk(ix, blob, provider, index, (offset, len));
            }
            Output::Write { index, .. } => match served {
                Some(digest) => self.store_chunk(ix, blob, index, digest),
                None => self.violation(format!("node {ix}'s pull of art-{blob} wrote chunk {index} unasked")),
            },
            Output::Penalize { .. } => {
                if let Some(model) = self.artifacts.as_deref_mut() {
                    model.stats.penalties += 1;
                }
            }
            Output::Done => self.pull_done(ix, blob),
            Output::Stalled { .. } => {
                let now = self.now;
                if let Some(active) = self.active(ix, blob) {
                    active.stalled_since = Some(now);
                }
            }
        }
    }

    /// Sends a chunk request from `ix` to `provider`: `len` bytes at `offset`, as the pull
    /// asked.
    fn request_chunk(
        &mut self,
        ix: Ix,
        blob: usize,
        provider: NodeId,
        index: u32,
        (offset, len): (u64, u64),
    ) {
        let Some(&to) = self.index.get(&provider) else {
            // Not a node of this run: the pull hears nothing and times out.
            return;
        };
        let from_epoch = self.nodes[ix as usize].epoch;
        let timeout = self.scenario.topology.request_timeout_ms;
        let Some(model) = self.artifacts.as_deref_mut() else { return };
        let Some(digest) = model.oracle.blob(blob).map(|t| t.digest) else { return };
        if model.requests.len() >= REQUESTS_MAX {
            self.violation(format!("chunk requests in flight exceeded their bound of {REQUESTS_MAX}"));
            return;
        }
        model.next_req += 1;
        let req = model.next_req;
        model.requests.insert(req, ChunkRequest { from: ix, from_epoch, to, blob, index });
        if !self.nodes[to as usize].alive() {
            let at = self.now + 2 * self.base_latency(ix, to);
            self.schedule(at, Event::Artifact(ArtifactEvent::Failure { req }));
            return;
        }
        let epoch = self.nodes[to as usize].epoch;
        let bytes: Arc<[u8]> = ArtifactRequest::Blob { len, digest, offset }.encode().into();
        let size = bytes.len();
        let event = ArtifactEvent::Request { to, from: ix, req, blob, bytes, epoch };
        self.send_via(ix, to, size, Event::Artifact(event), Channel::Artifact);
        self.schedule(self.now + timeout, Event::Artifact(ArtifactEvent::Timeout { req }));
    }

    /// Provider `to` answers a chunk request (`bytes`, as it arrived): the digest of the
    /// bytes it sends.
    pub(super) fn serve_chunk(&mut self, to: Ix, from: Ix, req: u64, blob: usize, bytes: &[u8]) {
        let chunk = self.artifacts.as_deref().map_or(1, |m| m.config.chunk_bytes());
        let truth = self.artifacts.as_deref().and_then(|m| m.oracle.blob(blob)).map(|t| t.digest);
        let index = match ArtifactRequest::decode(bytes) {
            Ok(ArtifactRequest::Blob { digest, offset, .. })
                if Some(digest) == truth && offset % chunk == 0 && u32::try_from(offset / chunk).is_ok() =>
            {
                (offset / chunk) as u32
            }
            other => {
                self.violation(format!("node {to} could not read node {from}'s chunk request: {other:?}"));
                return;
            }
        };
        let corrupt = matches!(
            self.nodes[to as usize].role,
            Role::Byzantine { role: ByzantineRole::CorruptProvider, .. }
        );
        let Some(model) = self.artifacts.as_deref_mut() else { return };
        let Some(truth) = model.oracle.blob(blob) else { return };
        let len = chunk_len(truth.size, model.config.chunk_bytes(), index);
        let answer = if corrupt {
            model.stats.corrupt_served += 1;
            Some(Digest::of(format!("corrupt/{to}/{blob}/{index}").as_bytes()))
        } else {
            model.nodes[to as usize].store.get(&blob).and_then(|s| s.get(&index)).copied()
        };
        // The answer's exact size on the wire: a `Bytes` frame of `len` bytes, or `NotFound`.
        let size = if answer.is_some() {
            bytes_frame_len(len as usize)
        } else {
            ArtifactResponse::NotFound.encode().len()
        };
        let epoch = self.nodes[from as usize].epoch;
        let event = ArtifactEvent::Response { to: from, req, answer, epoch };
        self.send_via(to, from, size, Event::Artifact(event), Channel::Artifact);
    }

    /// The answer to request `req` reached its sender.
    pub(super) fn chunk_answered(&mut self, req: u64, answer: Option<Digest>) {
        let Some(model) = self.artifacts.as_deref_mut() else { return };
        let Some(r) = model.requests.remove(&req) else { return };
        if self.nodes[r.from as usize].epoch != r.from_epoch {
            return;
        }
        let provider = self.nodes[r.to as usize].id;
        let Some(answer) = answer else {
            let input = Input::Failed { provider, index: r.index, reason: "not held".into() };
            self.pull_input(r.from, r.blob, input, None);
            return;
        };
        let Some(truth) = model.oracle.blob(r.blob) else { return };
        let len = chunk_len(truth.size, model.config.chunk_bytes(), r.index);
        let bad = truth.chunks.get(r.index as usize) != Some(&answer);
        let before = self.bad_chunks(r.from, r.blob);
        let input = Input::Chunk { provider, index: r.index, digest: answer, len };
        self.pull_input(r.from, r.blob, input, Some(answer));
        if bad && self.bad_chunks(r.from, r.blob) > before {
            self.corrupt_detected(r.to);
        }
    }

    fn bad_chunks(&self, ix: Ix, blob: usize) -> u64 {
        self.artifacts
            .as_deref()
            .and_then(|w| w.nodes[ix as usize].pulls.get(&blob))
            .map_or(0, |a| a.pull.stats().bad_chunks)
    }

    /// A pull caught a corrupted chunk from `provider`: the corrupt provider's fault acted.
    fn corrupt_detected(&mut self, provider: Ix) {
        if let Role::Byzantine { role: ByzantineRole::CorruptProvider, fault } =
            self.nodes[provider as usize].role
            && matches!(self.scenario.faults.get(fault), Some(Fault::Byzantine { .. }))
        {
            self.effects[fault].effects += 1;
            self.metrics.byzantine_messages += 1;
        }
    }

    /// Request `req` failed (dial refused, or no answer in time).
    pub(super) fn chunk_failed(&mut self, req: u64, reason: &str) {
        let Some(model) = self.artifacts.as_deref_mut() else { return };
        let Some(r) = model.requests.remove(&req) else { return };
        if self.nodes[r.from as usize].epoch != r.from_epoch || !self.nodes[r.from as usize].alive() {
            return;
        }
        let provider = self.nodes[r.to as usize].id;
        self.pull_input(
            r.from,
            r.blob,
            Input::Failed { provider, index: r.index, reason: reason.into() },
            None,
        );
    }

    /// Node `ix`'s connection to `provider` closed: the provider is out of its pulls
    /// until the directory lists it again.
    pub(super) fn provider_closed(&mut self, ix: Ix, provider: Ix) {
        let id = self.nodes[provider as usize].id;
        let Some(model) = self.artifacts.as_deref_mut() else { return };
        let blobs: Vec<usize> = model.nodes[ix as usize]
            .pulls
            .iter()
            .filter(|(_, a)| a.known.contains(&id))
            .map(|(b, _)| *b)
            .collect();
        for blob in blobs {
            if let Some(active) = self.active(ix, blob) {
                active.known.remove(&id);
            }
            self.pull_input(ix, blob, Input::RemoveProvider(id), None);
        }
    }

    /// Writes chunk `index` of `blob` to node `ix`'s durable store: the one place chunks
    /// are stored, so the oracle sees every write.
    fn store_chunk(&mut self, ix: Ix, blob: usize, index: u32, digest: Digest) {
        self.trace.record(60, self.now, u64::from(ix), ((blob as u64) << 32) | u64::from(index));
        let Some(model) = self.artifacts.as_deref_mut() else { return };
        let mut violations = Vec::new();
        if let Err(what) = model.oracle.write(ix, blob, index, &digest) {
            violations.push(what);
        }
        model.stats.chunks_written += 1;
        let node = &mut model.nodes[ix as usize];
        let stored = node.store.entry(blob).or_default();
        stored.insert(index, digest);
        let count = model.oracle.blob(blob).map_or(0, |t| t.chunks.len());
        let completed = stored.len() == count && !node.complete.contains(&blob);
        if completed {
            let list: Vec<Digest> = stored.values().copied().collect();
            if let Err(what) = model.oracle.complete(ix, blob, &list) {
                violations.push(what);
            }
            node.complete.insert(blob);
        }
        for what in violations {
            self.violation(what);
        }
        if completed {
            self.announce(ix);
        }
    }

    /// Node `ix` holds `blob` whole: the pull is over.
    fn pull_done(&mut self, ix: Ix, blob: usize) {
        let Some(model) = self.artifacts.as_deref_mut() else { return };
        let node = &mut model.nodes[ix as usize];
        if let Some(active) = node.pulls.remove(&blob) {
            add_pull_stats(&mut model.totals, active.pull.stats());
        }
        if let Some(asked) = node.wanted.remove(&blob) {
            model.completion_ms.push(self.now.saturating_sub(asked));
            model.stats.pulls_completed += 1;
        }
    }
}

/// Bytes in chunk `index` of a `size`-byte blob.
/// The encoded length of an `ArtifactResponse::Bytes` frame carrying `len` bytes, without
/// building one: the frame of an empty chunk, with the byte string's CBOR head grown to
/// hold `len` (RFC 8949 §3: 1, 2, 3, 5 or 9 bytes) and the bytes themselves.
fn bytes_frame_len(len: usize) -> usize {
    let empty = ArtifactResponse::Bytes { data: Vec::new() }.encode().len();
    let head = match len {
        0..24 => 1,
        24..256 => 2,
        256..65_536 => 3,
        _ if u32::try_from(len).is_ok() => 5,
        _ => 9,
    };
    empty - 1 + head + len
}

fn chunk_len(size: u64, chunk: u64, index: u32) -> u64 {
    let offset = u64::from(index) * chunk;
    chunk.min(size.saturating_sub(offset))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chunk_answers_size_is_the_size_of_its_real_frame() {
        for len in [0, 1, 23, 24, 255, 256, 65_535, 65_536, 1 << 20, 4 << 20] {
            let frame = ArtifactResponse::Bytes { data: vec![7; len] }.encode();
            assert_eq!(bytes_frame_len(len), frame.len(), "a chunk of {len} bytes");
        }
    }
}
