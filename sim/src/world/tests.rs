//! The world's own checkers can fail. Each test runs a healthy mesh for a while, hands one
//! checker a violation through the path a run takes (the mesh event it observes, the
//! output it carries out, the directory it queries), and judges the run: a safety
//! violation, exit 4, with that checker's finding. A checker removed or broken fails its
//! test; the first test shows the mesh they start from is clean.

use std::time::Duration;

use murmur_protocol::directory::Source;
use murmur_protocol::limits::{MESH_OUTPUTS_MAX, SYNC_RESPONSE_BYTES_MAX};
use murmur_protocol::mesh::{Event as MeshEvent, Input, Output};
use murmur_protocol::sync::{SyncRequest, SyncResponse};
use murmur_protocol::{Advert, Signed};

use super::{Ix, Options, Sim};
use crate::report::{Outcome, Verdict, exit};
use crate::scenario::Scenario;

/// The observer every test hands a violation to, and the node whose advert it is about.
const OBSERVER: Ix = 0;
const SUBJECT: Ix = 3;

/// Twenty nodes run to 20 s: every node up for 15 s, every directory holding every node.
fn running() -> Sim {
    let scenario = Scenario { nodes: 20, duration_s: 70, ..Scenario::default() };
    let mut sim = Sim::new(scenario, Options { seed: 1, ..Options::default() });
    sim.step_until(20_000);
    assert!(sim.violations.is_empty(), "{:?}", sim.violations);
    assert_eq!(sim.directory_len(OBSERVER), 20, "the observer holds every node");
    sim
}

/// The run judged as it stands.
fn judge(sim: Sim) -> Outcome {
    sim.finish(Duration::ZERO)
}

fn assert_caught(outcome: &Outcome, finding: &str) {
    assert_eq!(outcome.verdict, Verdict::Safety, "{:?}", outcome.findings);
    assert_eq!(outcome.exit_code, exit::SAFETY);
    assert!(outcome.findings.iter().any(|f| f.contains(finding)), "{finding}: {:?}", outcome.findings);
}

impl Sim {
    fn directory_len(&self, ix: Ix) -> usize {
        self.nodes[ix as usize].mesh.as_ref().map_or(0, |m| m.directory().len())
    }

    /// The seq of `subject`'s advert in `observer`'s directory.
    fn held_seq(&self, observer: Ix, subject: Ix) -> u64 {
        let mesh = self.nodes[observer as usize].mesh.as_ref().expect("the observer is up");
        mesh.directory().get(&self.nodes[subject as usize].id).expect("it holds the subject").advert().seq
    }

    /// Feeds `input` to node `ix`'s mesh and throws its outputs away, as a driver that
    /// loses them would: nothing the checkers watch sees it.
    fn feed_unobserved(&mut self, ix: Ix, input: Input) {
        let now = self.clock(ix);
        let mesh = self.nodes[ix as usize].mesh.as_mut().expect("the node is up");
        mesh.handle(now, input);
        while mesh.poll_output().is_some() {}
    }
}

#[test]
fn the_mesh_the_tests_start_from_passes() {
    let mut sim = running();
    sim.step_until(70_000);
    let outcome = judge(sim);
    assert_eq!(outcome.verdict, Verdict::Pass, "{:?}", outcome.findings);
    assert_eq!(outcome.exit_code, exit::PASS);
}

#[test]
fn an_advert_accepted_after_it_expired_is_caught() {
    let mut sim = running();
    let (node, seq) = (sim.nodes[SUBJECT as usize].id, sim.held_seq(OBSERVER, SUBJECT));
    // The observer's clock jumps a day ahead, past every TTL and skew allowance, and its
    // directory reports accepting the advert it holds: the oracle judges freshness by that
    // clock. (Expiry is checked before replay, so this acceptance is judged expired.)
    sim.nodes[OBSERVER as usize].clock_offset_ms += 86_400_000;
    let from = sim.nodes[1].id;
    sim.observe(OBSERVER, MeshEvent::AdvertAccepted { node, seq, source: Source::Sync { from } }, None);
    assert_caught(&judge(sim), &format!("accepted node {SUBJECT} seq {seq} after it expired"));
}

#[test]
fn an_advert_accepted_twice_is_caught_as_a_replay() {
    let mut sim = running();
    let (node, seq) = (sim.nodes[SUBJECT as usize].id, sim.held_seq(OBSERVER, SUBJECT));
    let from = sim.nodes[1].id;
    sim.observe(OBSERVER, MeshEvent::AdvertAccepted { node, seq, source: Source::Sync { from } }, None);
    assert_caught(
        &judge(sim),
        &format!("accepted node {SUBJECT} seq {seq} after already accepting seq {seq} (replay)"),
    );
}

#[test]
fn a_provider_named_from_an_advert_never_published_is_caught_by_the_query_checker() {
    let mut sim = running();
    // Node 3's key signs an advert node 3 never published (a stolen key), and the
    // observer's directory takes it unobserved: only the query checker can see it.
    let id = sim.nodes[SUBJECT as usize].id;
    let held = sim.nodes[OBSERVER as usize].mesh.as_ref().and_then(|m| m.directory().get(&id)).unwrap();
    let mut advert: Advert = held.advert().clone();
    let name = advert.capsules[0].name.clone();
    advert.seq += 1000;
    let seq = advert.seq;
    let envelope = Signed::sign(advert, &sim.nodes[SUBJECT as usize].key).unwrap().into_envelope();
    let (from, len) = (sim.nodes[1].id, envelope.encode().len());
    sim.feed_unobserved(OBSERVER, Input::GossipDecoded { from, token: 1, envelope, len });
    assert_eq!(sim.held_seq(OBSERVER, SUBJECT), seq, "the directory took it");
    assert!(sim.violations.is_empty(), "unobserved: {:?}", sim.violations);
    sim.check_query(OBSERVER, &name);
    assert_caught(
        &judge(sim),
        &format!(
            "node {OBSERVER} names node {SUBJECT} (seq {seq}) as a provider from an advert node {SUBJECT} never published"
        ),
    );
}

#[test]
fn a_departure_notice_naming_an_advert_never_published_is_caught() {
    let mut sim = running();
    let (node, witness) = (sim.nodes[SUBJECT as usize].id, sim.nodes[5].id);
    let from = sim.nodes[1].id;
    let departed = MeshEvent::Departed { node, seq: 1_000_000, witness, source: Source::Sync { from } };
    sim.observe(OBSERVER, departed, None);
    assert_caught(
        &judge(sim),
        &format!(
            "node {OBSERVER} applied a departure notice naming node {SUBJECT}'s seq 1000000, which node {SUBJECT} never published"
        ),
    );
}

#[test]
fn a_directory_above_its_configured_bound_is_caught() {
    let mut sim = running();
    // The bound the checker judges by is the node's configured one: lowered under a running
    // mesh (whose directories keep the bound they started with), every directory is over it.
    sim.mesh_config.directory.nodes_max = 16;
    sim.handle(OBSERVER, Input::Tick, None);
    assert_caught(&judge(sim), &format!("node {OBSERVER} holds 20 adverts, above its bound 16"));
}

#[test]
fn a_mesh_dropping_outputs_is_caught() {
    let mut sim = running();
    // A driver that stops draining: every sync request is answered into the output queue,
    // which drops its oldest output once it holds `MESH_OUTPUTS_MAX`.
    let (from, now) = (sim.nodes[1].id, sim.clock(OBSERVER));
    let mesh = sim.nodes[OBSERVER as usize].mesh.as_mut().unwrap();
    for token in 0..MESH_OUTPUTS_MAX as u64 + 5 {
        let request = SyncRequest::new(None, mesh.directory().digest());
        mesh.handle(now, Input::SyncRequested { from, token, request });
    }
    assert!(mesh.stats().outputs_dropped > 0, "the queue overflowed");
    // The next input the world hands it drains the queue, and the checker looks.
    sim.handle(OBSERVER, Input::Tick, None);
    assert_caught(&judge(sim), &format!("node {OBSERVER} dropped"));
}

#[test]
fn a_sync_response_above_the_size_limit_is_caught() {
    let mut sim = running();
    let id = sim.nodes[SUBJECT as usize].id;
    let envelope = sim.nodes[OBSERVER as usize]
        .mesh
        .as_ref()
        .and_then(|m| m.directory().get(&id))
        .map(|r| r.envelope().clone())
        .unwrap();
    // A response to node 1's request (token 77) holding one advert, over and over, until it
    // is past the limit the requester reads.
    let copies = SYNC_RESPONSE_BYTES_MAX / envelope.body().len() + 1;
    let response = SyncResponse::new(vec![envelope; copies], false);
    sim.nodes[OBSERVER as usize].answering.insert(77, (1, 7));
    sim.carry_out(OBSERVER, Output::SendSyncResponse { token: 77, response }, None, None);
    assert_caught(&judge(sim), &format!("node {OBSERVER} built a sync response of"));
}

#[test]
fn a_sync_request_that_does_not_decode_is_caught() {
    let mut sim = running();
    // A request as a codec bug would write it: the shipping encoding with a byte after its
    // end, which the strict decoder refuses.
    let digest = sim.nodes[1].mesh.as_ref().unwrap().directory().digest();
    let mut bytes = SyncRequest::new(None, digest).encode();
    bytes.push(0);
    let epoch = sim.nodes[OBSERVER as usize].epoch;
    sim.sync_requested(OBSERVER, 1, 99, &bytes, epoch);
    assert_caught(&judge(sim), &format!("node {OBSERVER} could not decode node 1's sync request"));
}

#[test]
fn a_sync_response_that_does_not_decode_is_caught() {
    let mut sim = running();
    // The shipping encoding of a response, one byte short: what arrives when the writer
    // and reader disagree about the frame.
    let mut bytes = SyncResponse::new(Vec::new(), false).encode();
    bytes.pop();
    sim.nodes[OBSERVER as usize].syncing.insert(99, 1);
    let epoch = sim.nodes[OBSERVER as usize].epoch;
    sim.sync_answered(OBSERVER, 1, 99, &bytes, epoch);
    assert_caught(&judge(sim), &format!("node {OBSERVER} could not decode node 1's sync response"));
}
