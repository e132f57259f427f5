//! Driving the protocol's [`Resolution`]: the `resolve` step before every pull, over the
//! modelled network, as `murnode` drives it.
//!
//! - A pull of `art-N` starts by resolving `art-N@1.0.0`: the providers asked are the nodes
//!   whose advert lists any artifact (the directory does not say which name a digest has);
//!   the resolution asks them in waves and trusts only the run's publisher, whose signed
//!   catalog every honest holder relays with its answer.
//! - An honest node that holds the blob whole offers its manifest (in the simulator, the
//!   blob's digest) with that signature; one that does not declines. A corrupt provider
//!   answers every ask: about half its answers (those to odd request numbers) offer a
//!   forged manifest under its own signature, the rest the genuine offer relayed
//!   (signatures are public), so it is also asked for the chunks it then corrupts. A node that is down refuses the dial
//!   after a round trip; a lost or partitioned message leaves the ask to the resolution's
//!   timeout, and a grace cuts slow asks short once the offers are settled.
//! - When the resolution is done, the pull starts with the providers that offered the
//!   chosen manifest; the others the directory lists join at the pull's first refresh. A
//!   resolution that found nothing is tried again at the node's next refresh (a pinned
//!   artifact's pull is retried the same way by `murnode`; a user runs the pull again).
//!
//! Safety, checked by the oracle when each resolution ends: every candidate is the blob's
//! true manifest (no forged offer is ever taken).

use std::sync::Arc;

use murmur_protocol::artifact::{ArtifactRequest, ArtifactResponse};
use murmur_protocol::resolve::{Offers, Resolution, ResolveConfig};
use murmur_protocol::{Envelope, NodeId};

use super::artifacts::{ActiveResolve, ArtifactEvent, ResolveAsk};
use super::driver::arm_timer;
use super::net::Channel;
use super::{Event, Ix, Plant, Role, Sim};
use crate::scenario::{ByzantineRole, Fault};

/// The name and version under which blob `blob` is published.
pub(super) fn name_of(blob: usize) -> (String, String) {
    (format!("art-{blob}"), "1.0.0".to_owned())
}

/// The blob published as `name@version`, if any.
fn blob_named(name: &str, version: &str) -> Option<usize> {
    let blob = name.strip_prefix("art-")?.parse().ok()?;
    (name_of(blob) == (name.to_owned(), version.to_owned())).then_some(blob)
}

/// An answer to a resolve ask.
#[derive(Clone, Debug)]
pub(super) enum Offer {
    /// "I hold this manifest for that name", with the publisher signature held for it.
    Holds { manifest: murmur_protocol::Digest, signature: Envelope },
    /// "I hold nothing by that name."
    Declined,
}

impl Sim {
    /// Starts node `ix`'s resolution of `blob`, unless one or a pull of it is under way.
    pub(super) fn start_resolve(&mut self, ix: Ix, blob: usize) {
        let providers = self.listed_artifact_nodes(ix);
        let now = self.clock(ix);
        let plant = self.options.plant;
        let Some(model) = self.artifacts.as_deref_mut() else { return };
        let node = &mut model.nodes[ix as usize];
        if node.pulls.contains_key(&blob) || node.resolving.contains_key(&blob) {
            return;
        }
        let (name, version) = name_of(blob);
        let mut publishers = vec![model.publisher.public()];
        if plant == Some(Plant::TrustAnyOffer) {
            // The planted bug: the forger's key is trusted like the publisher's.
            publishers.push(model.forger.public());
        }
        let offers = Offers::new(&name, &version, None, publishers);
        let config = ResolveConfig { timeout_ms: model.config.resolve_timeout_ms, ..ResolveConfig::DEFAULT };
        let resolution = Resolution::new(offers, providers, config, now);
        node.resolving.insert(blob, ActiveResolve { resolution, timer_at: None });
        model.stats.resolves_started += 1;
        self.resolve_step(ix, blob);
    }

    /// Nodes whose advert in `ix`'s directory lists any artifact, except `ix`, connected
    /// peers first (as murnode asks them).
    fn listed_artifact_nodes(&self, ix: Ix) -> Vec<NodeId> {
        let now = self.clock(ix);
        let Some(mesh) = self.nodes[ix as usize].mesh.as_ref() else { return Vec::new() };
        mesh.artifact_providers(now, None)
    }

    /// Sends the asks the resolution names, sets its timer, and starts the pull when done.
    fn resolve_step(&mut self, ix: Ix, blob: usize) {
        let now = self.clock(ix);
        let epoch = self.nodes[ix as usize].epoch;
        let Some(model) = self.artifacts.as_deref_mut() else { return };
        let Some(active) = model.nodes[ix as usize].resolving.get_mut(&blob) else { return };
        let asks: Vec<NodeId> = std::iter::from_fn(|| active.resolution.poll_ask()).collect();
        let timer = arm_timer(&mut active.timer_at, active.resolution.poll_timeout(), now, self.now);
        let done = active.resolution.is_done();
        for provider in asks {
            self.ask(ix, blob, provider);
        }
        if let Some(at) = timer {
            self.schedule(at, Event::Artifact(ArtifactEvent::ResolveTimer { node: ix, epoch, blob }));
        }
        if done {
            self.resolve_done(ix, blob);
        }
    }

    /// Sends a resolve ask from `ix` to `provider`.
    fn ask(&mut self, ix: Ix, blob: usize, provider: NodeId) {
        if let Some(model) = self.artifacts.as_deref_mut() {
            model.stats.resolve_asks += 1;
        }
        // Not a node of this run: the resolution hears nothing and times the ask out.
        let Some(&to) = self.index.get(&provider) else { return };
        let from_epoch = self.nodes[ix as usize].epoch;
        let Some(model) = self.artifacts.as_deref_mut() else { return };
        model.next_req += 1;
        let req = model.next_req;
        model.asks.insert(req, ResolveAsk { from: ix, from_epoch, to, blob });
        if !self.nodes[to as usize].alive() {
            let at = self.now + 2 * self.base_latency(ix, to);
            self.schedule(at, Event::Artifact(ArtifactEvent::AskFailure { req }));
            return;
        }
        let epoch = self.nodes[to as usize].epoch;
        let (name, version) = name_of(blob);
        let bytes: Arc<[u8]> = ArtifactRequest::Resolve { name, version }.encode().into();
        let size = bytes.len();
        let event = ArtifactEvent::Ask { to, from: ix, req, bytes, epoch };
        self.send_via(ix, to, size, Event::Artifact(event), Channel::Artifact);
    }

    /// Node `to` answers a resolve ask (`bytes`, as it arrived).
    pub(super) fn answer_ask(&mut self, to: Ix, from: Ix, req: u64, bytes: &[u8]) {
        let blob = match ArtifactRequest::decode(bytes) {
            Ok(ArtifactRequest::Resolve { name, version }) => blob_named(&name, &version),
            other => {
                self.violation(format!("node {to} could not read node {from}'s resolve ask: {other:?}"));
                return;
            }
        };
        let corrupt = matches!(
            self.nodes[to as usize].role,
            Role::Byzantine { role: ByzantineRole::CorruptProvider, .. }
        );
        let Some(model) = self.artifacts.as_deref_mut() else { return };
        let Some(blob) = blob else {
            // A name no blob has: nothing to offer.
            self.send_offer(to, from, req, &Offer::Declined, 0);
            return;
        };
        let genuine = |model: &super::artifacts::ArtifactModel| match (
            model.oracle.blob(blob),
            model.catalogs.get(blob),
        ) {
            (Some(truth), Some(signature)) => {
                Offer::Holds { manifest: truth.digest, signature: signature.clone() }
            }
            _ => Offer::Declined,
        };
        let offer = if corrupt && req % 2 == 1 {
            model.stats.forged_offers_sent += 1;
            match model.forged(blob) {
                Some((manifest, signature)) => Offer::Holds { manifest, signature },
                None => Offer::Declined,
            }
        } else if corrupt || model.nodes[to as usize].complete.contains(&blob) {
            // A corrupt provider relays the genuine offer (signatures are public) half the
            // time, so it is asked for chunks at once; it serves them corrupted.
            genuine(model)
        } else {
            Offer::Declined
        };
        let size = model.oracle.blob(blob).map_or(0, |t| t.size);
        self.send_offer(to, from, req, &offer, size);
    }

    /// Provider `to` sends its answer to ask `req` as `/murmur/artifact/1` encodes it
    /// (`size`: the manifest's, as the provider states it).
    fn send_offer(&mut self, to: Ix, from: Ix, req: u64, offer: &Offer, size: u64) {
        let response = match offer {
            Offer::Holds { manifest, signature } => {
                ArtifactResponse::Resolved { size, manifest: *manifest, signature: Some(signature.clone()) }
            }
            Offer::Declined => ArtifactResponse::NotFound,
        };
        let bytes: Arc<[u8]> = response.encode().into();
        let (size, epoch) = (bytes.len(), self.nodes[from as usize].epoch);
        let event = ArtifactEvent::Offer { to: from, req, bytes, epoch };
        self.send_via(to, from, size, Event::Artifact(event), Channel::Artifact);
    }

    /// An answer to ask `req` arrived at node `at`: decoded, then taken as an offer.
    pub(super) fn offer_arrived(&mut self, at: Ix, req: u64, bytes: &[u8]) {
        let offer = match ArtifactResponse::decode(bytes) {
            Ok(ArtifactResponse::Resolved { manifest, signature: Some(signature), .. }) => {
                Offer::Holds { manifest, signature }
            }
            Ok(ArtifactResponse::NotFound) => Offer::Declined,
            other => {
                self.violation(format!(
                    "node {at} could not read the answer to resolve ask {req}: {other:?}"
                ));
                self.ask_answered(req, None);
                return;
            }
        };
        self.ask_answered(req, Some(offer));
    }

    /// The answer to ask `req` reached its sender (`None`: the ask failed).
    pub(super) fn ask_answered(&mut self, req: u64, offer: Option<Offer>) {
        let Some(model) = self.artifacts.as_deref_mut() else { return };
        let Some(ask) = model.asks.remove(&req) else { return };
        if self.nodes[ask.from as usize].epoch != ask.from_epoch || !self.nodes[ask.from as usize].alive() {
            return;
        }
        let provider = self.nodes[ask.to as usize].id;
        let truth = model.oracle.blob(ask.blob).map(|t| t.digest);
        let forged = matches!(&offer, Some(Offer::Holds { manifest, .. }) if Some(*manifest) != truth);
        let now = self.clock(ask.from);
        let role = self.nodes[ask.to as usize].role;
        let Some(model) = self.artifacts.as_deref_mut() else { return };
        let Some(active) = model.nodes[ask.from as usize].resolving.get_mut(&ask.blob) else { return };
        let taken = match offer {
            Some(Offer::Holds { manifest, signature }) => {
                active.resolution.offered(now, provider, manifest, Some(signature))
            }
            Some(Offer::Declined) => {
                active.resolution.declined(now, provider);
                false
            }
            None => {
                active.resolution.failed(now, provider);
                false
            }
        };
        if let (true, true, Role::Byzantine { role: ByzantineRole::CorruptProvider, fault }) =
            (forged, taken, role)
        {
            // A resolution took a forged offer into account (and must refuse it: checked when
            // it ends): the corrupt provider's fault acted.
            model.stats.forged_offers_heard += 1;
            if matches!(self.scenario.faults.get(fault), Some(Fault::Byzantine { .. })) {
                self.effects[fault].effects += 1;
            }
        }
        self.resolve_step(ask.from, ask.blob);
    }

    pub(super) fn resolve_timer(&mut self, ix: Ix, blob: usize) {
        let now = self.clock(ix);
        let sim_now = self.now;
        let Some(model) = self.artifacts.as_deref_mut() else { return };
        let Some(active) = model.nodes[ix as usize].resolving.get_mut(&blob) else { return };
        if active.timer_at != Some(sim_now) {
            return;
        }
        active.timer_at = None;
        active.resolution.handle_timeout(now);
        self.resolve_step(ix, blob);
    }

    /// Node `ix`'s resolution of `blob` is done: check its candidates, then start the pull
    /// with the providers that offered the chosen one.
    fn resolve_done(&mut self, ix: Ix, blob: usize) {
        let Some(model) = self.artifacts.as_deref_mut() else { return };
        let Some(active) = model.nodes[ix as usize].resolving.remove(&blob) else { return };
        // Its asks still on the wire (lost, or cut off by the grace) are answered to nobody.
        model.asks.retain(|_, a| a.from != ix || a.blob != blob);
        model.stats.resolve_unanswered += active.resolution.unanswered() as u64;
        let asked = active.resolution.asked();
        let Ok(candidates) = active.resolution.finish() else {
            // Nothing trusted offered: the node's next refresh tries again. (A resolution
            // with nobody to ask, as right after a restart with an empty directory, is not
            // counted: it tells nothing about the providers.)
            if asked > 0 {
                model.stats.resolves_empty += 1;
            }
            return;
        };
        let manifests: Vec<_> = candidates.iter().map(|c| c.manifest).collect();
        if let Err(what) = model.oracle.resolved(ix, blob, &manifests) {
            self.violation(what);
            return;
        }
        let holders = candidates.into_iter().next().map(|c| c.holders).unwrap_or_default();
        self.begin_pull(ix, blob, holders);
    }
}
