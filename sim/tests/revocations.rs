//! Revocations in the simulator: the `revocation` scenario passes, and the revocation
//! checker can fail — a planted bug, an unmeetable bound and a fault that stops nothing
//! are each caught.

use std::path::PathBuf;

use murmur_sim::report::{RevocationMetrics, exit};
use murmur_sim::scenario::{Fault, Scenario, TaskWorkload};
use murmur_sim::world::Plant;
use murmur_sim::{Options, Outcome, Sim, Verdict};

fn shipped(name: &str) -> Scenario {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scenarios").join(format!("{name}.toml"));
    Scenario::parse(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn run(scenario: &Scenario, seed: u64, plant: Option<Plant>) -> Outcome {
    Sim::new(scenario.clone(), Options { seed, plant, ..Options::default() }).run()
}

fn revocations(outcome: &Outcome) -> &RevocationMetrics {
    outcome.metrics.revocations.as_ref().expect("a run with a revoke fault reports revocations")
}

/// Three running nodes (one of them a host of the agent) and one agent's grant revoked at
/// 40 s: every directory drops the nodes and every node refuses the grant, the lists reach
/// the nodes up at the time by gossip and the nodes that were down or joined later by
/// anti-entropy, and the nodes that crash after taking them get them back from their
/// stores.
#[test]
fn the_revocation_scenario_passes_for_seeds_one_to_three() {
    let scenario = shipped("revocation");
    let bound_ms = scenario.revocation_bound_s() * 1000;
    for seed in 1..=3 {
        let outcome = run(&scenario, seed, None);
        assert_eq!(outcome.verdict, Verdict::Pass, "seed {seed}: {:?}", outcome.findings);
        let r = revocations(&outcome);
        assert_eq!((r.lists, r.nodes_revoked, r.grants_revoked), (2, 3, 1), "seed {seed}: {r:?}");
        assert!(r.taken_gossip > 0 && r.taken_sync > 0 && r.taken_store > 0, "seed {seed}: {r:?}");
        assert_eq!(r.taken_operator, 2, "seed {seed}: one node was handed both lists");
        // Gossip: well under a second to every node that was up.
        assert!(r.propagation_max_ms.is_some_and(|ms| ms < 1_000), "seed {seed}: {r:?}");
        assert!(r.catch_up_max_ms.is_some_and(|ms| ms < bound_ms), "seed {seed}: {r:?}");
        assert!(r.adverts_refused > 0 && r.peers_expelled > 0, "seed {seed}: {r:?}");
        // The agent kept sending: its honest host refuses, its revoked host (which sends
        // unchecked) is refused by the owners.
        assert!(r.tasks_refused_sending > 0 && r.tasks_refused_owner > 0, "seed {seed}: {r:?}");
        assert_eq!(r.revoked_alive_at_end, 3, "seed {seed}: the revoked nodes ran to the end");
        let refused = outcome.metrics.refusals.get("revoked").copied().unwrap_or(0);
        assert!(refused >= r.adverts_refused, "seed {seed}: directories count them too");
    }
}

/// The lists are taken and spread but nothing consults them: the checker catches a
/// directory accepting a revoked node's advert (and a node letting a revoked grant out)
/// after taking the list — in the shipped scenario, and in scenarios without a `revoke`
/// fault, which the plant gives one.
#[test]
fn ignoring_revocations_is_caught_by_the_revocation_checker() {
    let planted = run(&shipped("revocation"), 1, Some(Plant::IgnoreRevocations));
    assert_eq!(planted.verdict, Verdict::Safety, "{:?}", planted.findings);
    assert_eq!(planted.exit_code, exit::SAFETY);
    assert!(
        planted
            .findings
            .iter()
            .any(|f| f.contains("accepted an advert of node") && f.contains("it holds revokes")),
        "{:?}",
        planted.findings
    );
    for side in ["let a task out under a grant", "accepted a task under a grant"] {
        assert!(planted.findings.iter().any(|f| f.contains(side)), "{side}: {:?}", planted.findings);
    }
    assert_eq!(revocations(&planted).adverts_refused, 0, "nothing enforced");
    // An open mesh without tasks is made closed, a closed one revokes nodes, a task
    // scenario revokes a grant.
    let open = Scenario { nodes: 20, duration_s: 70, ..Scenario::default() };
    let tasks = Scenario {
        nodes: 20,
        duration_s: 70,
        tasks: Some(TaskWorkload { until_s: 30, ..TaskWorkload::default() }),
        ..Scenario::default()
    };
    for scenario in [open, tasks] {
        let planted = run(&scenario, 1, Some(Plant::IgnoreRevocations));
        assert_eq!(planted.verdict, Verdict::Safety, "{:?}", planted.findings);
        assert!(planted.findings.iter().any(|f| f.contains("revocation list")), "{:?}", planted.findings);
    }
}

/// A bound no protocol can meet (0 s: 1 ms after the hand-off, directories still hold the
/// revoked nodes and accept their adverts) is reported as a safety violation.
#[test]
fn an_unmeetable_revocation_bound_fails_the_run() {
    let mut scenario = shipped("revocation");
    scenario.nodes = 40;
    scenario.check.revocation_bound_s = Some(0);
    let outcome = run(&scenario, 1, None);
    assert_eq!(outcome.verdict, Verdict::Safety, "{:?}", outcome.findings);
    assert!(outcome.findings.iter().all(|f| f.contains("beyond the 0 ms bound")), "{:?}", outcome.findings);
}

/// A grant revoked that no agent sends under stops nothing: the fault is vacuous.
#[test]
fn a_revoke_fault_that_stops_nothing_is_vacuous() {
    let scenario = Scenario {
        nodes: 20,
        duration_s: 70,
        tasks: Some(TaskWorkload { until_s: 30, agent_share: 0.0, ..TaskWorkload::default() }),
        faults: vec![Fault::Revoke { at_s: 15, nodes: 0, grants: 1 }],
        ..Scenario::default()
    };
    let outcome = run(&scenario, 1, None);
    assert_eq!(outcome.verdict, Verdict::Vacuous, "{:?}", outcome.findings);
    assert!(outcome.findings[0].contains("revoke"), "{:?}", outcome.findings);
    assert_eq!(revocations(&outcome).tasks_refused_sending, 0);
}

#[test]
fn a_revoke_fault_needs_what_it_revokes() {
    let err = Scenario::parse("[[faults]]\nkind = \"revoke\"\nat_s = 10\nnodes = 2\n").unwrap_err();
    assert!(format!("{err:#}").contains("protocol.closed"), "{err:#}");
    let err = Scenario::parse("[[faults]]\nkind = \"revoke\"\nat_s = 10\ngrants = 1\n").unwrap_err();
    assert!(format!("{err:#}").contains("[tasks]"), "{err:#}");
    let err =
        Scenario::parse("[protocol]\nclosed = true\n[[faults]]\nkind = \"revoke\"\nat_s = 10\n").unwrap_err();
    assert!(format!("{err:#}").contains("at least one"), "{err:#}");
}
