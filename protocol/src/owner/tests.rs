use super::*;
use crate::task::Sender;

const T0: Millis = Millis(1_800_000_000_000);
const QUEUE: Policy =
    Policy { audience: Audience::Mesh, acceptance: Acceptance::Queue, workers: 2, interruptible: false };
const SINGLE: Policy =
    Policy { audience: Audience::Mesh, acceptance: Acceptance::Single, workers: 4, interruptible: false };

fn submit(message: &str, capsule: &str) -> Submit {
    Submit {
        task: TaskId::derive("client", message),
        text: "hi".into(),
        sender: Sender::Client,
        capsule: capsule.into(),
        context: None,
        message: message.into(),
        traceparent: None,
        settle_wait_ms: 0,
    }
}

fn drain(owner: &mut Owner) -> Vec<Output> {
    std::iter::from_fn(|| owner.poll_output()).collect()
}

/// Admits and stores `message` for capsule `echo`, returning its id.
fn accept(owner: &mut Owner, message: &str, policy: Policy) -> TaskId {
    let s = submit(message, "echo");
    assert!(matches!(owner.admit(T0, &s, Some(policy), Arrival::Local), Ok(Admitted::New { .. })));
    owner.stored(T0, s.task).unwrap();
    s.task
}

#[test]
fn an_acceptance_is_stored_synchronously_before_the_task_starts() {
    let mut owner = Owner::new(OwnerConfig::default());
    let s = submit("m1", "echo");
    assert_eq!(owner.admit(T0, &s, Some(QUEUE), Arrival::Local), Ok(Admitted::New { ticket: 1 }));
    let task = s.task;
    assert_eq!(
        drain(&mut owner),
        vec![Output::Store { task, state: TaskState::Submitted, write: Write::Sync }]
    );
    assert_eq!(owner.is_stored(&task), Some(false));
    owner.stored(T0, task).unwrap();
    assert_eq!(
        drain(&mut owner),
        vec![
            Output::Store { task, state: TaskState::Working, write: Write::Background },
            Output::Start { task },
        ]
    );
    owner.finished(T0, task, TaskState::Completed);
    assert_eq!(
        drain(&mut owner),
        vec![Output::Store { task, state: TaskState::Completed, write: Write::Sync }]
    );
}

#[test]
fn a_repeated_delivery_is_the_same_task() {
    let mut owner = Owner::new(OwnerConfig::default());
    let task = accept(&mut owner, "m1", QUEUE);
    drain(&mut owner);
    assert_eq!(
        owner.admit(T0, &submit("m1", "echo"), Some(QUEUE), Arrival::Local),
        Ok(Admitted::Existing(TaskState::Working))
    );
    assert!(drain(&mut owner).is_empty(), "nothing is stored or started again");
    owner.finished(T0, task, TaskState::Completed);
    assert_eq!(
        owner.admit(T0, &submit("m1", "echo"), None, Arrival::Local),
        Ok(Admitted::Existing(TaskState::Completed)),
        "held tasks are answered even once the capsule is gone"
    );
    assert_eq!(owner.stats().repeated, 2);
}

#[test]
fn the_audience_decides_whose_tasks_a_capsule_takes() {
    let mut owner = Owner::new(OwnerConfig::default());
    let grant = crate::signed::Signed::sign(
        crate::grant::Grant::new("relay", 1, T0, T0.plus(1000)),
        &crate::identity::SecretKey::from_seed([9; 32]),
    )
    .unwrap()
    .into_envelope();
    let capsule = Sender::Capsule { name: "relay".into(), grant };
    let mut n = 0;
    let mut decide = |audience, arrival, sender: &Sender| {
        n += 1;
        let mut s = submit(&format!("m{n}"), "echo");
        s.sender = sender.clone();
        let policy = Policy { audience, ..QUEUE };
        owner.admit(T0, &s, Some(policy), arrival).map(drop).map_err(|r| (r.check(), r.to_string()))
    };
    for audience in [Audience::Local, Audience::Granted, Audience::Mesh] {
        assert!(decide(audience, Arrival::Local, &Sender::Client).is_ok(), "{audience:?}: own clients");
        assert!(decide(audience, Arrival::Local, &capsule).is_ok(), "{audience:?}: own capsules");
    }
    let (check, reason) = decide(Audience::Local, Arrival::Remote, &capsule).unwrap_err();
    assert_eq!(check, "not_in_audience");
    assert!(reason.contains("audience = local"), "{reason}");
    assert!(decide(Audience::Granted, Arrival::Remote, &capsule).is_ok(), "a granted capsule elsewhere");
    let (check, reason) = decide(Audience::Granted, Arrival::Remote, &Sender::Client).unwrap_err();
    assert_eq!(check, "not_in_audience");
    assert!(reason.contains("clients of other nodes are refused"), "{reason}");
    assert!(decide(Audience::Mesh, Arrival::Remote, &Sender::Client).is_ok(), "a lab mesh");
    assert_eq!(Audience::default(), Audience::Granted, "a fresh node is not open to the LAN");
}

#[test]
fn admission_follows_the_declared_policy() {
    let mut owner = Owner::new(OwnerConfig { queue_max: 2, ..OwnerConfig::default() });
    let refused = |owner: &mut Owner, message: &str, policy| {
        owner.admit(T0, &submit(message, "echo"), policy, Arrival::Local).unwrap_err().check()
    };
    assert_eq!(refused(&mut owner, "a", None), "not_hosted");
    assert_eq!(refused(&mut owner, "b", Some(Policy::CLOSED)), "not_accepting");
    // single: one unfinished task at a time, stored or not.
    owner.admit(T0, &submit("c", "echo"), Some(SINGLE), Arrival::Local).unwrap();
    assert_eq!(refused(&mut owner, "d", Some(SINGLE)), "busy");
    owner.stored(T0, submit("c", "echo").task).unwrap();
    owner.finished(T0, submit("c", "echo").task, TaskState::Completed);
    assert!(matches!(
        owner.admit(T0, &submit("d", "echo"), Some(SINGLE), Arrival::Local),
        Ok(Admitted::New { .. })
    ));
    // queue: past queue_max waiting tasks, overloaded.
    let mut owner = Owner::new(OwnerConfig { queue_max: 2, ..OwnerConfig::default() });
    let busy =
        Policy { audience: Audience::Mesh, acceptance: Acceptance::Queue, workers: 1, interruptible: false };
    for m in ["e", "f", "g"] {
        accept(&mut owner, m, busy);
    }
    assert_eq!(refused(&mut owner, "h", Some(busy)), "overloaded");
    assert_eq!(owner.stats().refused.get("overloaded"), Some(&1));
    assert_eq!(owner.load_permille(1), 1000);
    assert_eq!(owner.load_permille(30), 100);
}

#[test]
fn workers_take_queued_tasks_in_acceptance_order() {
    let mut owner = Owner::new(OwnerConfig::default());
    let tasks: Vec<TaskId> = ["a", "b", "c"].iter().map(|m| accept(&mut owner, m, QUEUE)).collect();
    let started: Vec<TaskId> = drain(&mut owner)
        .into_iter()
        .filter_map(|o| if let Output::Start { task } = o { Some(task) } else { None })
        .collect();
    assert_eq!(started, tasks[..2], "two workers");
    owner.finished(T0, tasks[1], TaskState::Failed);
    assert!(drain(&mut owner).contains(&Output::Start { task: tasks[2] }), "a freed worker takes the next");
}

#[test]
fn cancel_input_and_reply_change_only_the_states_they_may() {
    let mut owner = Owner::new(OwnerConfig::default());
    let one =
        Policy { audience: Audience::Mesh, acceptance: Acceptance::Queue, workers: 1, interruptible: false };
    let running = accept(&mut owner, "a", one);
    let queued = accept(&mut owner, "b", one);
    drain(&mut owner);
    assert_eq!(
        owner.cancel(T0, running),
        Err(Refused::WrongState { task: running, state: TaskState::Working }),
        "a running task cannot be canceled"
    );
    owner.cancel(T0, queued).unwrap();
    assert_eq!(owner.state(&queued), Some(TaskState::Canceled));
    owner.ask(T0, running).unwrap();
    assert_eq!(
        drain(&mut owner),
        vec![
            Output::Store { task: queued, state: TaskState::Canceled, write: Write::Sync },
            Output::Store { task: running, state: TaskState::InputRequired, write: Write::Sync },
        ]
    );
    owner.reply(T0, running).unwrap();
    assert!(owner.reply(T0, running).is_err(), "no second reply: it is working again");
    assert!(owner.cancel(T0, running).is_err(), "a tool's working task cannot be canceled");
    owner.ask(T0, running).unwrap();
    owner.cancel(T0, running).unwrap();
    drain(&mut owner);
    // The run ends (its input wait failed); canceled stays canceled, and the canceled
    // queued task never starts.
    owner.finished(T0, running, TaskState::Failed);
    assert_eq!(owner.state(&running), Some(TaskState::Canceled));
    assert!(drain(&mut owner).is_empty());
    assert_eq!(owner.busy(), 0);
}

#[test]
fn a_restart_fails_what_ran_and_queues_again_what_waited() {
    let mut owner = Owner::new(OwnerConfig::default());
    let id = |m: &str| submit(m, "echo").task;
    owner.recover(
        T0,
        [
            (id("c"), "echo".to_owned(), TaskState::Submitted, 3),
            (id("a"), "echo".to_owned(), TaskState::Working, 1),
            (id("b"), "echo".to_owned(), TaskState::Submitted, 2),
            (id("d"), "echo".to_owned(), TaskState::InputRequired, 4),
            (id("e"), "echo".to_owned(), TaskState::Completed, 5),
        ],
    );
    assert_eq!(
        drain(&mut owner),
        vec![
            Output::Store { task: id("a"), state: TaskState::Failed, write: Write::Sync },
            Output::Store { task: id("d"), state: TaskState::Failed, write: Write::Sync },
        ]
    );
    owner.resume(T0, &|_| {
        Some(Policy {
            audience: Audience::Mesh,
            acceptance: Acceptance::Queue,
            workers: 1,
            interruptible: false,
        })
    });
    assert_eq!(
        drain(&mut owner),
        vec![
            Output::Store { task: id("b"), state: TaskState::Working, write: Write::Background },
            Output::Start { task: id("b") },
        ],
        "the oldest queued task first, one worker"
    );
    assert_eq!((owner.stats().failed_on_restart, owner.stats().requeued), (2, 2));
    // New tickets continue after the recovered ones: the recovered task runs first.
    let one =
        Policy { audience: Audience::Mesh, acceptance: Acceptance::Queue, workers: 1, interruptible: false };
    let task = accept(&mut owner, "f", one);
    // A recovered queue whose capsule is gone still drains (here: `gone` is not hosted).
    let mut orphaned = Owner::new(OwnerConfig::default());
    orphaned.recover(T0, [(id("x"), "gone".to_owned(), TaskState::Submitted, 1)]);
    orphaned.resume(T0, &|_| None);
    assert!(drain(&mut orphaned).contains(&Output::Start { task: id("x") }));
    let starts = |owner: &mut Owner| -> Vec<Output> {
        drain(owner).into_iter().filter(|o| matches!(o, Output::Start { .. })).collect()
    };
    owner.finished(T0, id("b"), TaskState::Completed);
    assert_eq!(starts(&mut owner), vec![Output::Start { task: id("c") }]);
    owner.finished(T0, id("c"), TaskState::Completed);
    assert_eq!(starts(&mut owner), vec![Output::Start { task }]);
}

fn forgotten(owner: &mut Owner) -> Vec<TaskId> {
    drain(owner)
        .into_iter()
        .filter_map(|o| match o {
            Output::Forget { task } => Some(task),
            _ => None,
        })
        .collect()
}

#[test]
fn past_the_memory_bound_the_oldest_finished_tasks_are_forgotten() {
    let mut owner = Owner::new(OwnerConfig { live_max: 10, ..OwnerConfig::default() });
    for n in 0..10u64 {
        let task = accept(&mut owner, &format!("m{n}"), QUEUE);
        owner.finished(Millis(T0.0 + n), task, TaskState::Completed);
    }
    drain(&mut owner);
    accept(&mut owner, "new", QUEUE);
    assert_eq!(forgotten(&mut owner), vec![submit("m0", "echo").task], "the oldest, alone");
    assert!(owner.forgot_any());
    assert_eq!(owner.len(), 10);
}

#[test]
fn past_the_finished_bound_the_task_that_finished_first_is_forgotten_not_the_first_accepted() {
    let mut owner = Owner::new(OwnerConfig { finished_max: 2, ..OwnerConfig::default() });
    let [a, b, c, d] = ["a", "b", "c", "d"].map(|m| accept(&mut owner, m, QUEUE));
    drain(&mut owner);
    // Two workers: a and b run; b finishes first, then a; c and d start after them.
    owner.finished(T0, b, TaskState::Completed);
    owner.finished(T0, a, TaskState::Failed);
    assert!(forgotten(&mut owner).is_empty(), "two finished fit");
    owner.finished(T0, d, TaskState::Completed);
    assert_eq!(forgotten(&mut owner), vec![b], "b finished first");
    assert_eq!(owner.state(&c), Some(TaskState::Working), "an unfinished task is never forgotten");
    owner.finished(T0, c, TaskState::Completed);
    assert_eq!(forgotten(&mut owner), vec![a]);
    assert_eq!((owner.len(), owner.stats().forgotten), (2, 2));
}

#[test]
fn a_task_canceled_before_its_failed_acceptance_store_is_dropped_once() {
    let mut owner = Owner::new(OwnerConfig { finished_max: 1, ..OwnerConfig::default() });
    let s = submit("m1", "echo");
    owner.admit(T0, &s, Some(SINGLE), Arrival::Local).unwrap();
    owner.cancel(T0, s.task).unwrap();
    owner.abandon(s.task);
    assert_eq!(owner.state(&s.task), None);
    // Nothing of it is left behind: the next finished task is not pushed out by a ghost,
    // and the single capsule takes a task again.
    let next = accept(&mut owner, "m2", SINGLE);
    owner.finished(T0, next, TaskState::Completed);
    assert!(forgotten(&mut owner).is_empty(), "{owner:?}");
    assert_eq!(owner.state(&next), Some(TaskState::Completed));
}

#[test]
fn a_failed_store_drops_the_acceptance() {
    let mut owner = Owner::new(OwnerConfig::default());
    let s = submit("m1", "echo");
    owner.admit(T0, &s, Some(SINGLE), Arrival::Local).unwrap();
    owner.abandon(s.task);
    assert_eq!(owner.state(&s.task), None);
    assert!(
        matches!(owner.admit(T0, &s, Some(SINGLE), Arrival::Local), Ok(Admitted::New { .. })),
        "not busy: the first never counted"
    );
}

#[test]
fn the_settle_budget_ends_a_second_before_the_senders_timeout() {
    assert_eq!(settle_wait_ms(0, 0, 30_000), 0);
    assert_eq!(settle_wait_ms(3_000, 0, 30_000), 3_000);
    assert_eq!(settle_wait_ms(60_000, 0, 30_000), OWNER_WAIT_MAX_MS, "capped");
    assert_eq!(settle_wait_ms(3_000, 28_500, 30_000), 500, "the acceptance took long");
    assert_eq!(settle_wait_ms(3_000, 29_500, 30_000), 0);
    assert_eq!(settle_wait_ms(3_000, 40_000, 30_000), 0);
}

#[cfg(feature = "plant")]
#[test]
fn the_volatile_accept_plant_answers_before_the_disk() {
    let mut owner =
        Owner::new(OwnerConfig { plants: Plants::one(Plant::VolatileAccept), ..OwnerConfig::default() });
    let s = submit("m1", "echo");
    owner.admit(T0, &s, Some(QUEUE), Arrival::Local).unwrap();
    assert_eq!(
        drain(&mut owner),
        vec![Output::Store { task: s.task, state: TaskState::Submitted, write: Write::Background }]
    );
}

#[test]
fn an_interruptible_capsules_working_task_can_be_canceled_and_frees_its_worker_when_it_ends() {
    let mut owner = Owner::new(OwnerConfig::default());
    let agent =
        Policy { audience: Audience::Mesh, acceptance: Acceptance::Queue, workers: 1, interruptible: true };
    let running = accept(&mut owner, "a", agent);
    let queued = accept(&mut owner, "b", agent);
    drain(&mut owner);
    assert_eq!(owner.state(&running), Some(TaskState::Working));
    owner.cancel(T0, running).unwrap();
    assert_eq!(owner.state(&running), Some(TaskState::Canceled));
    assert!(!drain(&mut owner).contains(&Output::Start { task: queued }), "the run still holds the worker");
    // The stopped run reports its end: the state stays canceled, the next task starts.
    owner.finished(T0, running, TaskState::Canceled);
    assert_eq!(owner.state(&running), Some(TaskState::Canceled));
    assert!(drain(&mut owner).contains(&Output::Start { task: queued }));
}

#[test]
fn a_draining_owner_refuses_new_tasks_and_finishes_what_it_holds() {
    let mut owner = Owner::new(OwnerConfig::default());
    let running = accept(&mut owner, "m1", QUEUE);
    let second = accept(&mut owner, "m2", QUEUE);
    let queued = accept(&mut owner, "m3", QUEUE);
    drain(&mut owner);
    assert_eq!(owner.busy(), 3, "two running (two workers), one queued");
    owner.drain();
    assert!(owner.is_draining());
    let refused = owner.admit(T0, &submit("m4", "echo"), Some(QUEUE), Arrival::Local).unwrap_err();
    assert_eq!(refused, Refusal::Draining { capsule: "echo".into() });
    assert_eq!(refused.check(), "not_accepting", "every sender tries the next node");
    assert!(refused.to_string().contains("shutting down"), "{refused}");
    assert!(drain(&mut owner).is_empty(), "nothing stored for the refused task");
    // A repeated delivery of a held task is still answered.
    assert_eq!(
        owner.admit(T0, &submit("m1", "echo"), Some(QUEUE), Arrival::Local),
        Ok(Admitted::Existing(TaskState::Working))
    );
    // What it holds runs to the end: the queued task starts when a worker is free.
    owner.finished(T0, running, TaskState::Completed);
    assert!(drain(&mut owner).contains(&Output::Start { task: queued }), "the queue still moves");
    owner.finished(T0, second, TaskState::Completed);
    owner.finished(T0, queued, TaskState::Completed);
    assert_eq!(owner.busy(), 0, "drained");
}
