//! The checkers must be able to fail: a planted bug, a bound too tight to meet, and a
//! fault that cannot act are each caught with their own verdict.

use murmur_sim::report::exit;
use murmur_sim::scenario::{Fault, Scenario};
use murmur_sim::{Options, Sim, Verdict};

fn small() -> Scenario {
    Scenario { nodes: 20, duration_s: 70, ..Scenario::default() }
}

#[test]
fn a_healthy_small_mesh_passes() {
    let outcome = Sim::new(small(), Options { seed: 1, canary: false, uncached: false, plant: None }).run();
    assert_eq!(outcome.verdict, Verdict::Pass, "{:?}", outcome.findings);
    assert!(outcome.metrics.convergence.adverts > 0);
    assert!(outcome.metrics.queries > 0, "the query checker ran");
}

#[test]
fn the_canary_is_caught_as_a_safety_violation() {
    let outcome = Sim::new(small(), Options { seed: 1, canary: true, uncached: false, plant: None }).run();
    assert_eq!(outcome.verdict, Verdict::Safety);
    assert_eq!(outcome.exit_code, exit::SAFETY);
    assert!(outcome.findings.iter().any(|f| f.contains("forged")), "{:?}", outcome.findings);
}

#[test]
fn an_unmeetable_liveness_bound_is_a_liveness_failure() {
    let mut scenario = small();
    // Half the mesh is cut off while everyone refreshes (at about 30 s); one second after
    // the heal, nothing has carried the new adverts across yet (the next refresh and the
    // next anti-entropy round are tens of seconds away).
    scenario.faults.push(Fault::Partition {
        at_s: 10,
        until_s: 40,
        fraction: 0.5,
        by_region: false,
        one_way: false,
        nodes: vec![],
    });
    scenario.check.liveness_bound_s = 1;
    // Connections outlive the cut (no ping policy), so nothing reconnects and syncs at
    // the heal either.
    scenario.topology.ping_timeout_ms = 0;
    let outcome = Sim::new(scenario, Options { seed: 1, canary: false, uncached: false, plant: None }).run();
    assert_eq!(outcome.verdict, Verdict::Liveness, "{:?}", outcome.findings);
    assert_eq!(outcome.exit_code, exit::LIVENESS);
}

#[test]
fn a_fault_that_never_acts_makes_the_run_vacuous() {
    let mut scenario = small();
    scenario.faults.push(Fault::Partition {
        at_s: 5,
        until_s: 6,
        fraction: 0.0,
        by_region: false,
        one_way: false,
        nodes: vec![],
    });
    let outcome = Sim::new(scenario, Options { seed: 1, canary: false, uncached: false, plant: None }).run();
    assert_eq!(outcome.verdict, Verdict::Vacuous, "{:?}", outcome.findings);
    assert_eq!(outcome.exit_code, exit::VACUOUS);
}

#[test]
fn byzantine_actors_are_refused_and_counted() {
    let mut scenario = small();
    scenario.duration_s = 200;
    scenario.check.liveness_bound_s = 130;
    for role in [murmur_sim::scenario::ByzantineRole::Forger, murmur_sim::scenario::ByzantineRole::Flooder] {
        scenario.faults.push(Fault::Byzantine { at_s: 2, until_s: 60, role, count: 1, interval_ms: 500 });
    }
    let outcome = Sim::new(scenario, Options { seed: 3, canary: false, uncached: false, plant: None }).run();
    assert_eq!(outcome.verdict, Verdict::Pass, "{:?}", outcome.findings);
    let m = &outcome.metrics;
    assert!(m.refusals.get("bad_signature").copied().unwrap_or(0) > 0, "forgeries reached and were refused");
    assert!(m.gossip_rejected > 0 && m.oversized_dropped > 0, "junk was rejected and oversized dropped");
}

/// The 10,000-node scenario's shape at 300 nodes: a warm start, churn, departures bounded.
fn steady_warm() -> Scenario {
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scenarios/steady-10k.toml");
    let mut scenario = Scenario::parse(&std::fs::read_to_string(path).unwrap()).unwrap();
    scenario.nodes = 300;
    scenario
}

#[test]
fn a_warm_start_with_churn_passes_and_its_departures_are_notices_not_ttls() {
    let outcome = Sim::new(steady_warm(), Options { seed: 2, ..Options::default() }).run();
    assert_eq!(outcome.verdict, Verdict::Pass, "{:?}", outcome.findings);
    let m = &outcome.metrics;
    assert!(m.departures_declared > 0 && m.departures_applied > m.departures_declared, "{m:?}");
    assert_eq!(m.departures_false, 0, "no live node was declared departed");
    // Warm adverts are not counted as published: only what the run itself changed.
    assert!(m.adverts_published < 300, "{}", m.adverts_published);
}

#[test]
fn departed_nodes_left_to_their_ttl_fail_the_departure_bound() {
    // Without departure notices a node that left stays listed for its TTL (a day here):
    // the departure bound must catch it.
    let mut scenario = steady_warm();
    scenario.protocol.suspect_s = 0;
    let outcome = Sim::new(scenario, Options { seed: 2, ..Options::default() }).run();
    assert_eq!(outcome.verdict, Verdict::Liveness, "{:?}", outcome.findings);
    assert!(outcome.findings.iter().any(|f| f.contains("departed_bound_s")), "{:?}", outcome.findings);
}

/// Half the mesh cut off for 50 s: longer than murnode's ping timeout, so the connections
/// across the cut close.
fn long_partition() -> Scenario {
    let mut scenario = small();
    scenario.duration_s = 200;
    scenario.check.liveness_bound_s = 100;
    scenario.faults.push(Fault::Partition {
        at_s: 10,
        until_s: 60,
        fraction: 0.5,
        by_region: false,
        one_way: false,
        nodes: vec![],
    });
    scenario
}

#[test]
fn a_partition_longer_than_the_ping_timeout_closes_connections_and_the_mesh_heals() {
    let outcome = Sim::new(long_partition(), Options { seed: 4, ..Options::default() }).run();
    assert_eq!(outcome.verdict, Verdict::Pass, "{:?}", outcome.findings);
    let m = &outcome.metrics;
    assert!(m.connections_cut > 0, "pings across the cut went unanswered: {m:?}");
    // Each side declared live nodes of the other departed; after the heal they refuted and every
    // directory holds every node again (the liveness check passed).
    assert!(m.departures_false > 0, "{m:?}");

    // Without the ping policy (connections outlive the cut) nothing closes, nobody is
    // declared departed.
    let mut scenario = long_partition();
    scenario.topology.ping_timeout_ms = 0;
    let outcome = Sim::new(scenario, Options { seed: 4, ..Options::default() }).run();
    assert_eq!(outcome.verdict, Verdict::Pass, "{:?}", outcome.findings);
    assert_eq!((outcome.metrics.connections_cut, outcome.metrics.departures_false), (0, 0));
}
