//! The task manager and runner with a real `echo` component (run `bash capsules/build.sh`
//! first; `tests/run.sh` does): what happens when more tasks finish than it holds in
//! memory, acceptance under `single`, and the owner's answer to a peer that waits for the
//! outcome (the settle budget), through the port the network driver calls.

use murmur_protocol::owner::{Arrival, Audience, OwnerConfig};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use murmur_net::TaskOwner;
use murmur_node::tasks::{Origin, OwnerPort, TaskManager, TaskRunner};
use murmur_protocol::SecretKey;
use murmur_protocol::task::{Check, TaskRequest, TaskResponse};
use murmur_protocol::task::{Sender, Submit, TaskId, TaskState};
use murmur_runtime::ports::Ports;
use murmur_runtime::{CapsuleManifest, Runtime, RuntimeOptions};
use murmur_store::ArtifactStore;

fn wasm(name: &str) -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../capsules/target/wasm32-wasip2/release")
        .join(format!("{name}.wasm"));
    assert!(path.is_file(), "{} is missing: run `bash capsules/build.sh`", path.display());
    path
}

fn submit(message: &str, text: &str) -> Submit {
    Submit {
        task: TaskId::derive("client@test", message),
        text: text.into(),
        sender: Sender::Client,
        capsule: "echo".into(),
        context: None,
        message: message.into(),
        traceparent: None,
        settle_wait_ms: 0,
    }
}

/// A task runner in a fresh data dir whose runtime runs the `echo` component as tool
/// `echo` (manifest lines `extra` added), holding tasks in memory as `config` bounds.
async fn runner(extra: &str, config: OwnerConfig) -> (tempfile::TempDir, TaskRunner) {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(ArtifactStore::open(&dir.path().join("store")).unwrap());
    let runtime = Runtime::new(
        RuntimeOptions::new(dir.path().to_path_buf(), false),
        store,
        Ports::standalone().unwrap(),
    )
    .unwrap();
    let manifest = format!(
        "name = \"echo\"\nversion = \"1.0.0\"\nkind = \"tool\"\nartifact = \"{}\"\n{extra}",
        wasm("echo").display()
    );
    runtime.install(CapsuleManifest::parse(&manifest, Path::new("/"), dir.path()).unwrap()).unwrap();
    let manager = TaskManager::open_with(&dir.path().join("tasks.redb"), config).await.unwrap();
    (dir, TaskRunner::start(manager, runtime, Audience::Mesh))
}

async fn finish(manager: &TaskManager, task: &TaskId) -> TaskState {
    let (_, snapshot, _) = manager.events(task, 0, Duration::from_secs(10), true).await.unwrap();
    snapshot.state
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finished_tasks_beyond_the_memory_bound_are_dropped_first_finished_first_and_never_run_again() {
    let (_dir, runner) = runner("", OwnerConfig { finished_max: 20, ..OwnerConfig::default() }).await;
    let manager = runner.manager();

    // Twenty finished tasks fill memory.
    let first: Vec<Submit> = (0..20).map(|i| submit(&format!("m{i}"), &format!("first {i}"))).collect();
    for s in &first {
        runner.accept(s, Origin::Client, Arrival::Local).await.unwrap();
        assert_eq!(finish(manager, &s.task).await, TaskState::Completed);
    }
    assert!(first.iter().all(|s| manager.owns(&s.task)));

    // Two more finish: the two that finished first are dropped from memory.
    for extra in [submit("m-extra1", "extra"), submit("m-extra2", "extra")] {
        runner.accept(&extra, Origin::Client, Arrival::Local).await.unwrap();
        assert_eq!(finish(manager, &extra.task).await, TaskState::Completed);
    }
    let dropped: Vec<&Submit> = first.iter().filter(|s| !manager.owns(&s.task)).collect();
    assert_eq!(dropped.len(), 2, "two were dropped");
    assert_eq!((dropped[0].task, dropped[1].task), (first[0].task, first[1].task), "the oldest went first");

    // A dropped task is still on disk: asked for, it is there; sent again, it is answered
    // as it was (completed, with its first text) instead of being accepted and run again.
    for s in dropped {
        assert_eq!(manager.get(&s.task).unwrap().state, TaskState::Completed);
        let again =
            runner.accept(&submit(&s.message, "second text"), Origin::Client, Arrival::Local).await.unwrap();
        assert_eq!(again.state, TaskState::Completed, "not queued a second time");
        assert!(again.message.as_deref().unwrap_or_default().contains(&s.text), "{again:?}");
        assert!(!manager.owns(&s.task), "answered from disk, not brought back to run");
        assert!(manager.holds(&s.task), "still held, on disk");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_task_capsule_never_accepts_two_even_when_they_arrive_together() {
    let (_dir, runner) = runner("[lifecycle]\ntask_acceptance = \"single\"\n", OwnerConfig::default()).await;
    let manager = runner.manager();
    // Both pass the early check before either is stored: only one may be accepted.
    let (first_submit, second_submit) = (submit("a", "one"), submit("b", "two"));
    let (a, b) = tokio::join!(
        runner.accept(&first_submit, Origin::Client, Arrival::Local),
        runner.accept(&second_submit, Origin::Client, Arrival::Local),
    );
    let accepted = [a.is_ok(), b.is_ok()].iter().filter(|ok| **ok).count();
    assert_eq!(accepted, 1, "{a:?} {b:?}");
    let refused = a.err().or(b.err()).expect("one was refused");
    assert_eq!(refused.check(), Check::Busy);
    // A repeat of the accepted one is answered as it is, after its acceptance is stored.
    let first = if manager.owns(&submit("a", "").task) { "a" } else { "b" };
    let again = runner.accept(&submit(first, "ignored"), Origin::Client, Arrival::Local).await.unwrap();
    assert_eq!(again.task, submit(first, "").task);
}

/// A peer that asks to wait for the outcome gets the settled task in its one round trip,
/// as long as the settle budget lasts: a request that arrived so long ago that its sender
/// is about to time out is answered at once (accepted, not yet settled) rather than late.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_answers_a_waiting_sender_within_the_settle_budget() {
    let (_dir, runner) = runner("", OwnerConfig::default()).await;
    let owner = OwnerPort::new(runner, SecretKey::from_seed([1; 32]).node_id());
    let peer = SecretKey::from_seed([2; 32]).node_id();
    let waiting = |message: &str| {
        let mut s = submit(message, "settle");
        s.settle_wait_ms = 5_000;
        TaskRequest::Submit(s)
    };
    let now = std::time::Instant::now();
    let TaskResponse::Accepted(settled) = owner.answer(peer, waiting("fresh"), now).await else { panic!() };
    assert_eq!(settled.state, TaskState::Completed, "waited for the outcome");

    // Arrived 9.5 s ago: the sender's 10 s request timeout leaves no budget to wait in.
    let late = now.checked_sub(Duration::from_millis(9_500)).unwrap();
    let started = std::time::Instant::now();
    let TaskResponse::Accepted(unsettled) = owner.answer(peer, waiting("late"), late).await else { panic!() };
    assert_eq!(unsettled.state, TaskState::Submitted, "answered at acceptance");
    assert!(started.elapsed() < Duration::from_secs(2), "no wait: {:?}", started.elapsed());
}
