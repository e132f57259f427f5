//! Every shipped scenario parses, validates, and passes at a small size.

use std::path::PathBuf;

use murmur_sim::{Options, Scenario, Sim, Verdict};

#[test]
fn shipped_scenarios_pass_at_small_size() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scenarios");
    let mut names: Vec<PathBuf> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    names.sort();
    assert!(names.len() >= 6, "steady, churn, partition, lossy-wan, byzantine, mass-restart");
    for path in names {
        let mut scenario = Scenario::parse(&std::fs::read_to_string(&path).unwrap())
            .unwrap_or_else(|e| panic!("{}: {e:#}", path.display()));
        scenario.nodes = scenario.nodes.min(40);
        let outcome =
            Sim::new(scenario, Options { seed: 1, canary: false, uncached: false, plant: None }).run();
        assert_eq!(outcome.verdict, Verdict::Pass, "{}: {:?}", path.display(), outcome.findings);
    }
}

#[test]
fn unknown_keys_and_impossible_checks_are_refused() {
    let err = Scenario::parse("nodes = 5\nnodez = 6\n").unwrap_err();
    assert!(format!("{err:#}").contains("unknown field `nodez`"), "{err:#}");
    let err = Scenario::parse("duration_s = 30\n[check]\nliveness_bound_s = 60\n").unwrap_err();
    assert!(format!("{err:#}").contains("liveness"), "{err:#}");
    let err =
        Scenario::parse("[network]\nregions = [{ name = \"a\", share = 1.0 }]\nlatency_ms = [[1, 2]]\n")
            .unwrap_err();
    assert!(format!("{err:#}").contains("latency_ms"), "{err:#}");
}
