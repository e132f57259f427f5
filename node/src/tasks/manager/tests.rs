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

#[tokio::test]
async fn finished_tasks_only_the_disk_holds_are_listed_in_pages_newest_first_and_never_twice() {
    let dir = tempfile::tempdir().unwrap();
    let manager = TaskManager::open_with(&dir.path().join("tasks.redb"), small()).await.unwrap();
    assert!(!manager.has_disk_only());
    assert_eq!(
        manager.list_on_disk(None, 10, 100, |_| true).unwrap(),
        (Vec::new(), None),
        "nothing left there"
    );
    let mut tasks = Vec::new();
    for n in 0..8 {
        tasks.push(run_to_completion(&manager, &format!("m{n}")).await);
    }
    // Memory holds the three that finished last; the database alone the five before them.
    assert!(manager.has_disk_only());
    let (in_memory, on_disk) = tasks.split_at(5);
    let (in_memory, on_disk) = (on_disk.to_vec(), in_memory.to_vec());
    assert!(in_memory.iter().all(|t| manager.owns(t)) && on_disk.iter().all(|t| !manager.owns(t)));

    // Two pages of two, then the last one; the last page says nothing is left.
    let mut listed = Vec::new();
    let mut cursor = None;
    let mut pages = 0;
    loop {
        let (page, next) = manager.list_on_disk(cursor.as_ref(), 2, 100, |_| true).unwrap();
        assert!(page.len() <= 2 && !page.is_empty(), "page {pages}: {page:?}");
        assert!(page.iter().all(|s| s.state == TaskState::Completed));
        listed.extend(page.iter().map(|s| s.task));
        pages += 1;
        match next {
            Some(next) => {
                // A cursor survives its trip through a page token.
                assert_eq!(next.to_string().parse::<DiskCursor>().unwrap(), next);
                cursor = Some(next);
            }
            None => break,
        }
    }
    assert_eq!(pages, 3);
    let mut sorted = listed.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), 5, "each once: {listed:?}");
    assert!(listed.iter().all(|t| on_disk.contains(t)), "none of those in memory: {listed:?}");

    // A filter that matches one: the pages read past the others to find it.
    let wanted = on_disk[1];
    let (page, next) = manager.list_on_disk(None, 10, 100, |s| s.task == wanted).unwrap();
    assert_eq!((page.iter().map(|s| s.task).collect::<Vec<_>>(), next), (vec![wanted], None));

    // Reading is bounded: two records read, none kept, and a cursor to go on from.
    let (page, next) = manager.list_on_disk(None, 10, 2, |_| false).unwrap();
    assert!(page.is_empty());
    let (rest, last) = manager.list_on_disk(next.as_ref(), 10, 100, |_| true).unwrap();
    assert_eq!((rest.len(), last), (3, None), "the three not read yet");
}

#[test]
fn a_disk_page_token_is_refused_unless_this_node_could_have_issued_it() {
    let cursor: DiskCursor = format!("d{}", "0a".repeat(24)).parse().unwrap();
    assert_eq!(cursor.to_string(), format!("d{}", "0a".repeat(24)));
    for bad in [
        "",
        "d",
        "0a",
        &format!("d{}", "0a".repeat(23)),
        &format!("d{}zz", "0a".repeat(23)),
        &format!("x{}", "0a".repeat(24)),
        &format!("d{}é", "0".repeat(46)),
    ] {
        let refused = bad.parse::<DiskCursor>().unwrap_err();
        assert!(refused.contains("not a page token"), "{bad}: {refused}");
    }
}
