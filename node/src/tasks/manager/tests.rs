//! What the manager answers about finished tasks that only its database holds: forgotten
//! from memory past the bound, or left on disk by a start-up.

use murmur_protocol::owner::{Acceptance, Audience};
use murmur_protocol::task::Sender;

use super::*;

const QUEUE: Policy =
    Policy { audience: Audience::Mesh, acceptance: Acceptance::Queue, workers: 1, interruptible: false };

fn submit(message: &str) -> Submit {
    Submit {
        task: TaskId::derive("client@test", message),
        text: format!("text of {message}"),
        sender: Sender::Client,
        capsule: "echo".into(),
        context: None,
        message: message.into(),
        traceparent: None,
        settle_wait_ms: 0,
    }
}

/// Accepts `message` and finishes it at once as completed (what a run would report).
async fn run_to_completion(manager: &TaskManager, message: &str) -> TaskId {
    let s = submit(message);
    let (snapshot, starts) = manager.accept(&s, Origin::Client, Some(QUEUE), Arrival::Local).await.unwrap();
    assert_eq!(snapshot.state, TaskState::Submitted);
    assert_eq!(starts.len(), 1, "the one worker is free");
    let next = manager.finished(s.task, TaskState::Completed, Some(format!("ran {message}"))).await;
    assert!(next.is_empty());
    s.task
}

fn small() -> OwnerConfig {
    OwnerConfig { finished_max: 3, ..OwnerConfig::default() }
}

#[tokio::test]
async fn a_task_the_start_up_left_on_disk_is_answered_from_there_and_never_runs_again() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tasks.redb");
    let manager = TaskManager::open_with(&path, OwnerConfig::default()).await.unwrap();
    let tasks: Vec<TaskId> = {
        let mut tasks = Vec::new();
        for n in 0..6 {
            tasks.push(run_to_completion(&manager, &format!("m{n}")).await);
        }
        tasks
    };
    manager.flush().await.unwrap();
    drop(manager);

    // Reopened holding three finished tasks: the three oldest stay on disk.
    let manager = TaskManager::open_with(&path, small()).await.unwrap();
    assert!(!manager.owns(&tasks[0]) && manager.owns(&tasks[5]));

    // The same message sent again is the same task, already completed: not run twice.
    let (again, starts) =
        manager.accept(&submit("m0"), Origin::Client, Some(QUEUE), Arrival::Local).await.unwrap();
    assert_eq!(again.state, TaskState::Completed, "{again:?}");
    assert_eq!(again.message.as_deref(), Some("ran m0"));
    assert!(starts.is_empty() && !manager.owns(&tasks[0]), "answered from disk");
    assert!(manager.holds(&tasks[0]));
}

#[tokio::test]
async fn a_forgotten_task_can_still_be_streamed_and_refuses_cancel_and_reply_by_its_state() {
    let dir = tempfile::tempdir().unwrap();
    let manager = TaskManager::open_with(&dir.path().join("tasks.redb"), small()).await.unwrap();
    let mut tasks = Vec::new();
    for n in 0..4 {
        tasks.push(run_to_completion(&manager, &format!("m{n}")).await);
    }
    let forgotten = tasks[0];
    assert!(!manager.owns(&forgotten), "the first finished went past the bound");
    assert!(tasks[1..].iter().all(|t| manager.owns(t)));

    // A stream (or a resumed one) still gets its events and final state, without waiting.
    let (events, snapshot, gap) =
        manager.events(&forgotten, 0, Duration::from_secs(30), false).await.unwrap();
    assert_eq!(snapshot.state, TaskState::Completed);
    assert!(!gap && events.len() >= 3, "{events:?}");
    let (later, _, _) =
        manager.events(&forgotten, snapshot.seq, Duration::from_secs(30), true).await.unwrap();
    assert!(later.is_empty());

    // It finished: that is why it cannot be canceled or answered, not that it is unknown.
    let cancel = manager.cancel(&forgotten).await.unwrap_err();
    assert!(matches!(cancel, TaskError::NotCancelable { state: TaskState::Completed, .. }), "{cancel}");
    let reply = manager.reply(&forgotten, "late".into()).unwrap_err();
    assert!(matches!(reply, TaskError::NotWaiting { state: TaskState::Completed, .. }), "{reply}");
    let unknown = TaskId::derive("client@test", "never sent");
    assert!(matches!(manager.cancel(&unknown).await, Err(TaskError::NotFound(_))));
}
