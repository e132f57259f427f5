//! Models in the simulator: the `models` scenario passes, and each model checker can fail
//! — a planted routing bug for each is caught by its checker, with the right exit code.

use std::path::PathBuf;

use murmur_protocol::route::CANDIDATES_MAX;
use murmur_sim::report::{ModelMetrics, exit};
use murmur_sim::scenario::{ModelWorkload, Scenario, ServedModel};
use murmur_sim::world::Plant;
use murmur_sim::{Options, Outcome, Sim, Verdict};

fn shipped(name: &str) -> Scenario {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scenarios").join(format!("{name}.toml"));
    Scenario::parse(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn run(scenario: &Scenario, seed: u64, plant: Option<Plant>) -> Outcome {
    Sim::new(scenario.clone(), Options { seed, plant, ..Options::default() }).run()
}

fn models(outcome: &Outcome) -> &ModelMetrics {
    outcome.metrics.models.as_ref().expect("a run with a [models] section reports models")
}

fn count(map: &std::collections::BTreeMap<String, u64>, key: &str) -> u64 {
    map.get(key).copied().unwrap_or(0)
}

/// Ten nodes serve m-a and three m-b; nodes start and stop serving, crash with sessions
/// open and are cut off by a partition. Every request a node could serve is served, by a
/// node serving its model, never tried again once taken, and m-a's load spreads.
#[test]
fn the_models_scenario_passes_for_seeds_one_to_three() {
    let scenario = shipped("models");
    for seed in 1..=3 {
        let outcome = run(&scenario, seed, None);
        assert_eq!(outcome.verdict, Verdict::Pass, "seed {seed}: {:?}", outcome.findings);
        let m = models(&outcome);
        assert!(m.requests > 30_000, "seed {seed}: a few hundred a second: {m:?}");
        assert_eq!(m.missed, 0, "seed {seed}");
        assert!(m.judged > m.requests * 3 / 4, "seed {seed}: most requests are judged: {m:?}");
        // Every way a candidate provably does not take a request happened, and was failed
        // over; sessions broke when their nodes died and went nowhere else.
        for reason in ["dead", "unreachable", "not_served"] {
            assert!(count(&m.failovers_by_reason, reason) > 0, "seed {seed}: {reason}: {m:?}");
        }
        assert_eq!(count(&m.failovers_by_reason, "after_accept"), 0, "seed {seed}");
        assert!(m.sessions_broken > 0, "seed {seed}: {m:?}");
        assert!(m.attempts_max >= 2 && m.attempts_max <= CANDIDATES_MAX as u64, "seed {seed}: {m:?}");
        // Nobody serves m-none: its requests, about 5 %, end not found and nobody accepts one.
        assert!(count(&m.failed, "not_found") > m.requests / 25, "seed {seed}: {m:?}");
        assert!(!m.accepted_by_node.contains_key("m-none"), "seed {seed}");
        assert!(m.served_local > 0, "seed {seed}: serving nodes take their own requests");
        // Node 13 served m-a from 35 s and m-b from 47 s; node 12 never served m-a.
        let by = |model: &str, node: u32| m.accepted_by_node.get(model).and_then(|n| n.get(&node)).copied();
        assert!(by("m-a", 13).is_some() && by("m-b", 13).is_some(), "seed {seed}: {m:?}");
        assert_eq!(by("m-a", 12), None, "seed {seed}");
        let spread = m.spread.as_ref().expect("the scenario sets a spread window");
        assert_eq!(spread.nodes, 10, "seed {seed}: every m-a node served all the window");
        assert!(spread.accepted > 4_000, "seed {seed}: {spread:?}");
        // The bound is 3x; the scenario stays well under 2x.
        assert!(spread.share_max < 2.0 && spread.share_min > 0.3, "seed {seed}: {spread:?}");
    }
}

/// Each planted routing bug fails the run with its checker named, as `murmur-sim` exits.
#[test]
fn each_planted_routing_bug_is_caught_by_its_checker() {
    let scenario = shipped("models");
    let cases = [
        (Plant::RouteIgnoresDirectory, Verdict::Safety, exit::SAFETY, "routed checker"),
        (Plant::NoFailover, Verdict::Liveness, exit::LIVENESS, "served checker"),
        (Plant::NoSpread, Verdict::Liveness, exit::LIVENESS, "spread checker"),
        (Plant::RetryAfterAccept, Verdict::Safety, exit::SAFETY, "attempts checker"),
    ];
    for (plant, verdict, code, checker) in cases {
        let outcome = run(&scenario, 1, Some(plant));
        assert_eq!(outcome.verdict, verdict, "{}: {:?}", plant.name(), outcome.findings);
        assert_eq!(outcome.exit_code, code, "{}", plant.name());
        assert!(
            outcome.findings.iter().all(|f| f.contains(checker)),
            "{}: {:?}",
            plant.name(),
            outcome.findings
        );
    }
}

/// Without its spreading inputs (one turn for all, open sessions not counted), the
/// decision sends most requests to one node: the cheapest by id among the many nodes a
/// requesting node has no round trip to.
#[test]
fn without_turns_and_open_sessions_one_node_takes_most_requests() {
    let outcome = run(&shipped("models"), 2, Some(Plant::NoSpread));
    let spread = models(&outcome).spread.clone().expect("a spread window");
    assert!(spread.share_max > 4.0, "{spread:?}");
    assert!(outcome.findings[0].contains("spread checker: node"), "{:?}", outcome.findings);
}

/// A small mesh with models, nothing else: every request is served or not found.
#[test]
fn a_small_mesh_serves_its_models_without_faults() {
    let scenario = Scenario {
        nodes: 20,
        duration_s: 40,
        models: Some(ModelWorkload {
            served: vec![
                ServedModel { name: "m".into(), nodes: vec![1, 2, 3], share: 1.0 },
                ServedModel { name: "nobody".into(), nodes: Vec::new(), share: 0.1 },
            ],
            until_s: 30,
            ..ModelWorkload::default()
        }),
        ..Scenario::default()
    };
    let outcome = run(&scenario, 3, None);
    assert_eq!(outcome.verdict, Verdict::Pass, "{:?}", outcome.findings);
    let m = models(&outcome);
    assert_eq!(m.served + count(&m.failed, "not_found"), m.requests, "{m:?}");
    assert!(m.served > 800 && m.judged > 500 && m.failovers == 0, "{m:?}");
}

#[test]
fn a_models_section_is_checked() {
    let with = |section: &str| Scenario::parse(&format!("nodes = 20\n[models]\n{section}"));
    let served = "[[models.served]]\nname = \"m\"\nnodes = [1]\nshare = 1.0\n";
    assert!(with(served).is_ok());
    for (section, field) in [
        ("", "models.served"),
        ("[[models.served]]\nname = \"bad name\"\nshare = 1.0\n", "models.served"),
        ("[[models.served]]\nname = \"m\"\nnodes = [20]\nshare = 1.0\n", "beyond the 20 initial nodes"),
        (&format!("spread_model = \"x\"\nspread_until_s = 30\n{served}"), "models.spread_model"),
        (&format!("{served}[[models.changes]]\nat_s = 5\nnode = 3\nmodels = [\"a b\"]\n"), "models.changes"),
    ] {
        let err = with(section).unwrap_err();
        assert!(format!("{err:#}").contains(field), "{field}: {err:#}");
    }
    let warm = Scenario::parse(&format!("nodes = 20\n[topology]\nwarm_start = true\n[models]\n{served}"));
    assert!(format!("{:#}", warm.unwrap_err()).contains("warm_start"));
}

/// A model plant without a `[models]` section has nothing to act on: a usage error.
#[test]
fn a_model_plant_needs_a_models_section() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_murmur-sim"))
        .args(["run", "steady", "--nodes", "10", "--plant", "no-failover"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(i32::from(exit::USAGE)));
    assert!(String::from_utf8_lossy(&out.stderr).contains("[models]"));
}
