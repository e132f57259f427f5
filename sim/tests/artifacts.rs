//! Artifacts in the simulator: the artifact scenarios pass, and every artifact checker can
//! fail — a planted bug, an unmeetable bound and a path never taken are each caught.

use std::path::PathBuf;

use murmur_sim::report::{ArtifactMetrics, exit};
use murmur_sim::scenario::{ArtifactExercise, ArtifactWorkload, ByzantineRole, Fault, Scenario};
use murmur_sim::world::Plant;
use murmur_sim::{Options, Outcome, Sim, Verdict};

fn scenario(name: &str) -> Scenario {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scenarios").join(format!("{name}.toml"));
    Scenario::parse(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn run(scenario: &Scenario, seed: u64, plant: Option<Plant>) -> Outcome {
    Sim::new(scenario.clone(), Options { seed, plant, ..Options::default() }).run()
}

fn artifacts(outcome: &Outcome) -> &ArtifactMetrics {
    outcome.metrics.artifacts.as_ref().expect("an artifact scenario reports artifact metrics")
}

/// A small healthy mesh with artifact traffic and nothing else.
fn small() -> Scenario {
    Scenario {
        nodes: 20,
        duration_s: 80,
        artifacts: Some(ArtifactWorkload { until_s: 30, ..ArtifactWorkload::default() }),
        ..Scenario::default()
    }
}

#[test]
fn a_small_artifact_mesh_completes_every_pull_and_places_every_pin() {
    let outcome = run(&small(), 4, None);
    assert_eq!(outcome.verdict, Verdict::Pass, "{:?}", outcome.findings);
    let a = artifacts(&outcome);
    assert!(a.pulls_started > 20, "{a:?}");
    assert_eq!(a.pulls_completed, a.pulls_started, "nothing fails on a healthy mesh: {a:?}");
    assert!(a.pins_pulled > 0, "should_hold placed the pinned artifact: {a:?}");
    assert!(a.pinned_holders_min.is_some_and(|h| h >= 3), "{a:?}");
    assert_eq!(a.bad_chunks_detected + a.penalties + a.timeouts, 0, "{a:?}");
    assert!(a.chunks_written >= a.chunks_requested.saturating_sub(a.hedges), "{a:?}");
    assert!(a.completion_p50_ms > 0 && a.completion_p50_ms <= a.completion_p99_ms, "{a:?}");
}

#[test]
fn artifact_storm_passes_and_takes_its_fault_paths() {
    let storm = scenario("artifact-storm");
    for seed in 1..=2 {
        let outcome = run(&storm, seed, None);
        assert_eq!(outcome.verdict, Verdict::Pass, "seed {seed}: {:?}", outcome.findings);
        let a = artifacts(&outcome);
        assert!(a.pulls_completed > 200, "seed {seed}: a storm of pulls finished: {a:?}");
        assert!(a.pulls_resumed > 0 && a.provider_crashes > 0 && a.timeouts > 0, "seed {seed}: {a:?}");
        // Every pull was resolved first; some asks went unanswered (crashed, partitioned or
        // cut short by the grace) without holding the pulls up past the bound.
        assert!(a.resolves_started >= a.pulls_started && a.resolve_unanswered > 0, "seed {seed}: {a:?}");
        assert!(a.settled_after_ms.is_some(), "seed {seed}: {a:?}");
    }
}

#[test]
fn corrupt_providers_are_detected_and_penalised_for_seeds_one_to_five() {
    let attacked = scenario("byzantine-provider");
    for seed in 1..=5 {
        let outcome = run(&attacked, seed, None);
        assert_eq!(outcome.verdict, Verdict::Pass, "seed {seed}: {:?}", outcome.findings);
        let a = artifacts(&outcome);
        assert!(a.corrupt_served > 0 && a.bad_chunks_detected > 0, "seed {seed}: {a:?}");
        // A provider is dropped at its first bad chunk; its later answers (requests already
        // out) are detected too, but it is penalised once per pull.
        assert!(a.penalties > 0 && a.penalties <= a.bad_chunks_detected, "seed {seed}: {a:?}");
        assert_eq!(a.pulls_completed, a.pulls_started, "seed {seed}: every pull finished: {a:?}");
        let fault = outcome.faults.iter().find(|f| f.fault == "byzantine(corrupt_provider)").unwrap();
        // Its fault acted through corrupted chunks detected and forged offers refused.
        assert!(a.forged_offers_heard > 0, "seed {seed}: {a:?}");
        assert_eq!(fault.effects, a.bad_chunks_detected + a.forged_offers_heard, "seed {seed}");
    }
}

#[test]
fn writing_chunks_before_checking_them_is_caught_as_a_corrupted_write() {
    let outcome = run(&scenario("byzantine-provider"), 1, Some(Plant::WriteUnverified));
    assert_eq!(outcome.verdict, Verdict::Safety);
    assert_eq!(outcome.exit_code, exit::SAFETY);
    assert!(outcome.findings[0].contains("a corrupted chunk was written"), "{:?}", outcome.findings);
    // A scenario without artifacts gets artifact traffic and a corrupt provider.
    let plain = Scenario { nodes: 20, duration_s: 70, ..Scenario::default() };
    let outcome = run(&plain, 1, Some(Plant::WriteUnverified));
    assert_eq!(outcome.verdict, Verdict::Safety, "{:?}", outcome.findings);
}

#[test]
fn taking_a_forged_offer_is_caught_by_the_resolution_checker() {
    let outcome = run(&scenario("byzantine-provider"), 1, Some(Plant::TrustAnyOffer));
    assert_eq!(outcome.verdict, Verdict::Safety);
    assert_eq!(outcome.exit_code, exit::SAFETY);
    assert!(outcome.findings[0].contains("that no trusted publisher signed"), "{:?}", outcome.findings);
    // A scenario without artifacts gets artifact traffic and a corrupt provider.
    let plain = Scenario { nodes: 20, duration_s: 70, ..Scenario::default() };
    let outcome = run(&plain, 1, Some(Plant::TrustAnyOffer));
    assert_eq!(outcome.verdict, Verdict::Safety, "{:?}", outcome.findings);
}

#[test]
fn pulls_that_cannot_finish_within_the_bound_are_a_liveness_failure() {
    let mut scenario = small();
    // 500 kbit/s uplinks: a 1 MiB chunk takes 17 s to leave its provider.
    scenario.network.bandwidth_kbps = 500;
    scenario.artifacts.as_mut().unwrap().liveness_bound_s = 5;
    let outcome = run(&scenario, 1, None);
    assert_eq!(outcome.verdict, Verdict::Liveness, "{:?}", outcome.findings);
    assert_eq!(outcome.exit_code, exit::LIVENESS);
    assert!(outcome.findings[0].contains("artifact pulls did not settle"), "{:?}", outcome.findings);
}

#[test]
fn an_artifact_path_never_taken_makes_the_run_vacuous() {
    let mut scenario = small();
    // Nothing crashes on a healthy mesh.
    scenario.artifacts.as_mut().unwrap().exercise =
        vec![ArtifactExercise::PinPulled, ArtifactExercise::Resumed];
    let outcome = run(&scenario, 1, None);
    assert_eq!(outcome.verdict, Verdict::Vacuous, "{:?}", outcome.findings);
    assert!(outcome.findings[0].contains("artifacts: resumed"), "{:?}", outcome.findings);
}

#[test]
fn a_corrupt_provider_nobody_asks_makes_the_run_vacuous() {
    let mut scenario = small();
    // It leaves before the first pull request (and nothing is pinned, so no node pulls
    // before then).
    scenario.faults.push(Fault::Byzantine {
        at_s: 2,
        until_s: 5,
        role: ByzantineRole::CorruptProvider,
        count: 1,
        interval_ms: 1_000,
    });
    scenario.artifacts.as_mut().unwrap().pinned = 0;
    let outcome = run(&scenario, 1, None);
    assert_eq!(outcome.verdict, Verdict::Vacuous, "{:?}", outcome.findings);
    assert!(outcome.findings[0].contains("corrupt_provider"), "{:?}", outcome.findings);
}

#[test]
fn pulls_that_lost_every_provider_to_a_partition_finish_after_it_heals() {
    let mut scenario = small();
    scenario.duration_s = 120;
    let workload = scenario.artifacts.as_mut().unwrap();
    (workload.providers_initial, workload.pinned, workload.size_mib_min, workload.size_mib_max) =
        (1, 0, 64, 64);
    // Pulls under way when the partition starts lose their provider: timed-out requests
    // keep counting against it until they end, so the one provider is rarely dropped (the
    // driver's rebuild of a pull may or may not be needed). Pulls asked for during the
    // partition cannot resolve across it and are resolved again after it heals.
    workload.exercise = vec![ArtifactExercise::Timeout, ArtifactExercise::ResolveRetried];
    // The pull gives up on a silent provider before request-response does (10 s).
    workload.timeout_ms = 5_000;
    scenario.network.bandwidth_kbps = 100_000;
    scenario.faults.push(Fault::Partition {
        at_s: 12,
        until_s: 30,
        fraction: 0.5,
        by_region: false,
        one_way: false,
        nodes: vec![],
    });
    let outcome = run(&scenario, 2, None);
    assert_eq!(outcome.verdict, Verdict::Pass, "{:?}", outcome.findings);
    let a = artifacts(&outcome);
    assert!(a.timeouts > 0 && a.resolves_empty > 0, "{a:?}");
    // Every pull started finished, or was rebuilt (started again) and then finished.
    assert_eq!(a.pulls_completed + a.pulls_rebuilt, a.pulls_started, "{a:?}");
}

#[test]
fn an_artifact_run_is_reproducible_from_its_seed() {
    let s = small();
    let hash = |seed| run(&s, seed, None).trace_hash;
    assert_eq!(hash(3), hash(3));
    assert_ne!(hash(3), hash(4));
}

#[test]
fn artifact_sections_are_validated() {
    let err = Scenario::parse("[artifacts]\nartifacts = 65\n").unwrap_err();
    assert!(format!("{err:#}").contains("artifacts.artifacts"), "{err:#}");
    let err = Scenario::parse("[artifacts]\nreplication_factor = 17\n").unwrap_err();
    assert!(format!("{err:#}").contains("replication_factor"), "{err:#}");
    let err = Scenario::parse("[[faults]]\nkind = \"byzantine\"\nat_s = 1\nuntil_s = 2\nrole = \"corrupt_provider\"\ncount = 1\ninterval_ms = 100\n")
        .unwrap_err();
    assert!(format!("{err:#}").contains("needs an [artifacts] section"), "{err:#}");
}
