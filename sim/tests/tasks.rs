//! Tasks in the simulator: the task scenarios pass, and every task checker can fail — a
//! planted bug, an unmeetable bound and a path never taken are each caught.

use std::path::PathBuf;

use murmur_sim::report::{TaskMetrics, exit};
use murmur_sim::scenario::{ByzantineRole, Exercise, Fault, Scenario, TaskWorkload};
use murmur_sim::world::Plant;
use murmur_sim::{Options, Outcome, Sim, Verdict};

fn scenario(name: &str) -> Scenario {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scenarios").join(format!("{name}.toml"));
    Scenario::parse(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn run(scenario: &Scenario, seed: u64, plant: Option<Plant>) -> Outcome {
    Sim::new(scenario.clone(), Options { seed, plant, ..Options::default() }).run()
}

fn tasks(outcome: &Outcome) -> &TaskMetrics {
    outcome.metrics.tasks.as_ref().expect("a task scenario reports task metrics")
}

/// A small healthy mesh with task traffic and nothing else.
fn small() -> Scenario {
    Scenario {
        nodes: 20,
        duration_s: 60,
        tasks: Some(TaskWorkload { until_s: 30, ..TaskWorkload::default() }),
        ..Scenario::default()
    }
}

#[test]
fn task_storm_passes_for_seeds_one_to_five() {
    let storm = scenario("task-storm");
    for seed in 1..=5 {
        let outcome = run(&storm, seed, None);
        assert_eq!(outcome.verdict, Verdict::Pass, "seed {seed}: {:?}", outcome.findings);
        let t = tasks(&outcome);
        assert!(t.accepted > 1000 && t.executions > 1000, "seed {seed}: a storm of tasks ran: {t:?}");
        assert!(t.failovers > 0 && t.lost > 0 && t.failed_on_restart > 0, "seed {seed}: {t:?}");
        assert!(t.router_duplicates > 0, "seed {seed}: duplicates reached a router: {t:?}");
        assert!(t.settled_after_ms.is_some(), "seed {seed}: every accepted task finished");
    }
}

/// Seed 48 once ran a task twice: the network model duplicated a task request, the copy
/// reached the owner after its queue had freed and was accepted there, while the router,
/// told "overloaded" by the original, placed the task elsewhere. Request-response runs on
/// reliable streams, so the model no longer duplicates it.
#[test]
fn a_refused_task_is_not_accepted_later_from_a_copy_of_its_request() {
    let outcome = run(&scenario("task-storm"), 48, None);
    assert_eq!(outcome.verdict, Verdict::Pass, "{:?}", outcome.findings);
    assert!(outcome.metrics.duplicated > 0, "the network still duplicates gossip");
}

#[test]
fn unauthorized_senders_are_refused_with_the_right_check_for_seeds_one_to_five() {
    let attacked = scenario("unauthorized-sender");
    for seed in 1..=5 {
        let outcome = run(&attacked, seed, None);
        assert_eq!(outcome.verdict, Verdict::Pass, "seed {seed}: {:?}", outcome.findings);
        let t = tasks(&outcome);
        assert_eq!(t.unauthorized.len(), 8, "every flaw was sent: {:?}", t.unauthorized);
        for flaw in &t.unauthorized {
            // A lossless network: every task sent reached an owner, and every one was refused.
            assert!(flaw.sent > 0, "{flaw:?}");
            assert_eq!(flaw.delivered, flaw.sent, "{flaw:?}");
            assert_eq!(flaw.refused, flaw.delivered, "{flaw:?}");
        }
        for check in
            ["wrong_kind", "untrusted_issuer", "bad_signature", "expired", "wrong_capsule", "foreign_task_id"]
        {
            assert!(
                t.refusals.get(check).copied().unwrap_or(0) > 0,
                "seed {seed}: no {check} refusal: {t:?}"
            );
        }
        assert!(t.accepted > 500 && t.rejected == 0, "honest traffic went on: {t:?}");
    }
}

#[test]
fn an_owner_skipping_its_grant_check_is_caught_by_the_grant_checker() {
    let outcome = run(&scenario("unauthorized-sender"), 1, Some(Plant::SkipIncomingCheck));
    assert_eq!(outcome.verdict, Verdict::Safety);
    assert_eq!(outcome.exit_code, exit::SAFETY);
    assert!(
        outcome.findings.iter().any(|f| f.contains("accepted task") && f.contains("from capsule rogue-")),
        "{:?}",
        outcome.findings
    );
    // A scenario without an unauthorized sender gets one with the plant.
    let outcome = run(&small(), 1, Some(Plant::SkipIncomingCheck));
    assert_eq!(outcome.verdict, Verdict::Safety, "{:?}", outcome.findings);
}

#[test]
fn failing_over_after_an_unknown_outcome_is_caught_as_a_task_executed_twice() {
    let outcome = run(&scenario("task-storm"), 2, Some(Plant::RetryLost));
    assert_eq!(outcome.verdict, Verdict::Safety);
    assert_eq!(outcome.exit_code, exit::SAFETY);
    assert!(outcome.findings[0].contains("executed twice"), "{:?}", outcome.findings);
}

#[test]
fn acceptances_kept_only_in_memory_are_caught_as_lost_tasks() {
    let outcome = run(&scenario("task-storm"), 3, Some(Plant::VolatileAccept));
    assert_eq!(outcome.verdict, Verdict::Safety);
    assert_eq!(outcome.exit_code, exit::SAFETY);
    assert!(outcome.findings[0].contains("an accepted task was lost"), "{:?}", outcome.findings);
}

#[test]
fn tasks_that_cannot_finish_within_the_bound_are_a_liveness_failure() {
    let mut scenario = small();
    let workload = scenario.tasks.as_mut().unwrap();
    // Tasks run for 20 to 30 s; the bound gives them 5 s after submissions stop.
    (workload.run_ms_min, workload.run_ms_max, workload.terminal_bound_s) = (20_000, 30_000, 5);
    let outcome = run(&scenario, 1, None);
    assert_eq!(outcome.verdict, Verdict::Liveness, "{:?}", outcome.findings);
    assert_eq!(outcome.exit_code, exit::LIVENESS);
    assert!(outcome.findings[0].contains("tasks did not settle"), "{:?}", outcome.findings);
}

#[test]
fn a_task_path_never_taken_makes_the_run_vacuous() {
    let mut scenario = small();
    // Nothing is lost on a healthy network.
    scenario.tasks.as_mut().unwrap().exercise = vec![Exercise::Duplicate, Exercise::Lost];
    let outcome = run(&scenario, 1, None);
    assert_eq!(outcome.verdict, Verdict::Vacuous, "{:?}", outcome.findings);
    assert!(outcome.findings[0].contains("tasks: lost"), "{:?}", outcome.findings);
}

#[test]
fn an_unauthorized_sender_that_never_gets_through_its_flaws_makes_the_run_vacuous() {
    let mut scenario = small();
    scenario.duration_s = 100;
    // Three sends in the whole window: four of the seven flaws are never tried.
    scenario.faults.push(Fault::Byzantine {
        at_s: 10,
        until_s: 17,
        role: ByzantineRole::UnauthorizedSender,
        count: 1,
        interval_ms: 2_000,
    });
    let outcome = run(&scenario, 1, None);
    assert_eq!(outcome.verdict, Verdict::Vacuous, "{:?}", outcome.findings);
    assert!(outcome.findings[0].contains("unauthorized_sender"), "{:?}", outcome.findings);
}

#[test]
fn a_small_task_mesh_passes_and_places_every_task() {
    let outcome = run(&small(), 4, None);
    assert_eq!(outcome.verdict, Verdict::Pass, "{:?}", outcome.findings);
    let t = tasks(&outcome);
    assert_eq!(t.failed, 0, "nothing fails on a healthy mesh: {t:?}");
    assert_eq!(t.accepted, t.terminal, "{t:?}");
    assert_eq!(t.executions, t.accepted, "each task ran once: {t:?}");
}

/// A client that sends a failed message again must not get it run twice: the task id is
/// derived from the message, so a retry is the same task, and after an unknown outcome
/// the router sends the retry only to the node that may hold it. (Before that rule, this
/// scenario ran tasks twice; see docs/src/simulator.md, "What the simulator found".)
#[test]
fn client_retries_after_an_unknown_outcome_run_the_task_once() {
    // Every failed submission is retried (the shipped scenario retries a third).
    let mut storm = scenario("task-storm");
    let workload = storm.tasks.as_mut().unwrap();
    (workload.retry_share, workload.retry_after_ms) = (1.0, 2_000);
    for seed in 1..=5 {
        let outcome = run(&storm, seed, None);
        assert_eq!(outcome.verdict, Verdict::Pass, "seed {seed}: {:?}", outcome.findings);
        let t = tasks(&outcome);
        assert!(
            t.retries_to_possible_owner > 0,
            "seed {seed}: clients retried after unknown outcomes: {t:?}"
        );
    }
}
