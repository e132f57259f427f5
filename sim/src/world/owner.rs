//! The owner side of tasks, as `node/src/tasks/manager.rs` runs it: idempotent acceptance
//! recorded durably before the answer, a bounded queue and a few workers per service,
//! execution for a seeded time, and recovery on restart — tasks that were running fail
//! ("the node restarted while the task was running"), queued ones are queued again in
//! acceptance order.
//!
//! The store stands for the task database: writes that `murnode` makes durable before it
//! goes on (acceptance, the terminal state) are durable here at once; the node's memory
//! (queues, running counts, the router) is lost on a crash.

use murmur_protocol::mesh::Input;
use murmur_protocol::task::{Submit, TaskId, TaskRefusal, TaskSnapshot, TaskState};

use super::tasks::{STORE_MAX, Stored, TaskEvent, task_word};
use super::{Event, Ix, Plant, Sim};

/// What the owner answers for a task it holds.
fn snapshot(task: TaskId, stored: &Stored) -> TaskSnapshot {
    TaskSnapshot {
        seq: 1,
        task,
        state: stored.state,
        capsule: stored.capsule.clone(),
        context: task.to_string(),
        message: None,
    }
}

impl Sim {
    /// Accepts `submit`, delivered from node `from`, at `owner` (idempotent: a task it
    /// already holds is answered as it is). A refusal is `(check, reason)`.
    pub(super) fn accept(
        &mut self,
        owner: Ix,
        from: Ix,
        submit: &Submit,
    ) -> Result<TaskSnapshot, (String, String)> {
        let owner_now = self.clock(owner);
        let durable = self.options.plant != Some(Plant::VolatileAccept);
        let hosted = self.nodes[owner as usize].capsules.iter().any(|c| c.name == submit.capsule);
        let world =
            self.tasks.as_deref_mut().ok_or_else(|| ("internal".to_owned(), "no tasks".to_owned()))?;
        let queue_max = world.config.queue_max;
        let node = &mut world.nodes[owner as usize];
        let task = submit.task;
        if let Some(stored) = node.store.get(&task) {
            world.stats.idempotent_accepts += 1;
            return Ok(snapshot(task, stored));
        }
        let refuse = |refusal: TaskRefusal| (refusal.check().to_owned(), refusal.to_string());
        if !hosted {
            *world.stats.refusals.entry("not_hosted".into()).or_default() += 1;
            return Err(refuse(TaskRefusal::NotHosted { capsule: submit.capsule.clone() }));
        }
        if !submit.capsule.starts_with("task-") {
            *world.stats.refusals.entry("not_accepting".into()).or_default() += 1;
            return Err(refuse(TaskRefusal::NotAccepting { capsule: submit.capsule.clone() }));
        }
        let queued = node.queues.get(&submit.capsule).map_or(0, std::collections::VecDeque::len);
        if queued >= queue_max || node.store.len() >= STORE_MAX {
            *world.stats.refusals.entry("overloaded".into()).or_default() += 1;
            return Err((
                "overloaded".to_owned(),
                format!("capsule `{}` has {queued} tasks queued, its limit", submit.capsule),
            ));
        }
        node.next_ticket += 1;
        let stored = Stored {
            capsule: submit.capsule.clone(),
            state: TaskState::Submitted,
            ticket: node.next_ticket,
            durable,
        };
        let answer = snapshot(task, &stored);
        node.store.insert(task, stored);
        node.queues.entry(submit.capsule.clone()).or_default().push_back(task);
        let checked = world.oracle.accepted(owner, from, submit, owner_now);
        self.trace.record(46, self.now, u64::from(owner), task_word(&task));
        if let Err(what) = checked {
            self.violation(what);
        }
        self.start_ready(owner, &submit.capsule);
        self.update_load(owner);
        Ok(answer)
    }

    /// Starts queued tasks of `capsule` while workers are free.
    fn start_ready(&mut self, owner: Ix, capsule: &str) {
        let epoch = self.nodes[owner as usize].epoch;
        loop {
            let Some(world) = self.tasks.as_deref_mut() else { return };
            let (workers, lo, hi) = (world.config.workers, world.config.run_ms_min, world.config.run_ms_max);
            let node = &mut world.nodes[owner as usize];
            let running = node.running.get(capsule).copied().unwrap_or(0);
            if running >= workers {
                return;
            }
            let Some(task) = node.queues.get_mut(capsule).and_then(std::collections::VecDeque::pop_front)
            else {
                return;
            };
            let Some(stored) = node.store.get_mut(&task).filter(|s| s.state == TaskState::Submitted) else {
                continue;
            };
            // The start is recorded before the task runs, so a crash mid-run is known as one.
            stored.state = TaskState::Working;
            *node.running.entry(capsule.to_owned()).or_default() += 1;
            let run_ms = node.rng.between(lo, hi);
            let started = world.oracle.started(owner, &task, self.now);
            self.trace.record(47, self.now, u64::from(owner), task_word(&task));
            if let Err(what) = started {
                self.violation(what);
            }
            self.schedule(self.now + run_ms, Event::Task(TaskEvent::Done { node: owner, epoch, task }));
        }
    }

    /// A task finished running at `owner`.
    pub(super) fn task_done(&mut self, owner: Ix, task: TaskId) {
        let Some(world) = self.tasks.as_deref_mut() else { return };
        let node = &mut world.nodes[owner as usize];
        let Some(stored) = node.store.get_mut(&task) else { return };
        stored.state = TaskState::Completed;
        stored.durable = true;
        let capsule = stored.capsule.clone();
        if let Some(running) = node.running.get_mut(&capsule) {
            *running = running.saturating_sub(1);
        }
        world.stats.completed += 1;
        let result = world.oracle.finished(owner, &task, TaskState::Completed);
        self.trace.record(48, self.now, u64::from(owner), task_word(&task));
        if let Err(what) = result {
            self.violation(what);
        }
        self.start_ready(owner, &capsule);
        self.update_load(owner);
    }

    /// A node (re)started: a fresh router, and recovery of the tasks its store holds.
    pub(super) fn tasks_started(&mut self, ix: Ix) {
        let id = self.nodes[ix as usize].id;
        let Some(world) = self.tasks.as_deref_mut() else { return };
        let config =
            murmur_protocol::route::RouterConfig { accept_timeout_ms: world.config.accept_timeout_ms };
        let node = &mut world.nodes[ix as usize];
        node.router = Some(murmur_protocol::route::Router::new(id, config));
        let mut order: Vec<(u64, TaskId)> = node.store.iter().map(|(t, s)| (s.ticket, *t)).collect();
        order.sort_unstable();
        let mut violations = Vec::new();
        let mut capsules = std::collections::BTreeSet::new();
        for (_, task) in order {
            let Some(stored) = node.store.get_mut(&task) else { continue };
            match stored.state {
                TaskState::Working | TaskState::InputRequired => {
                    stored.state = TaskState::Failed;
                    world.stats.failed_on_restart += 1;
                    if let Err(what) = world.oracle.finished(ix, &task, TaskState::Failed) {
                        violations.push(what);
                    }
                }
                TaskState::Submitted => {
                    world.stats.requeued += 1;
                    node.queues.entry(stored.capsule.clone()).or_default().push_back(task);
                    capsules.insert(stored.capsule.clone());
                }
                _ => {}
            }
        }
        let store = &node.store;
        if let Err(what) = world.oracle.check_store(ix, &|t| store.contains_key(t)) {
            violations.push(what);
        }
        for what in violations {
            self.violation(what);
        }
        for capsule in capsules {
            self.start_ready(ix, &capsule);
        }
        self.update_load(ix);
    }

    /// Tells the mesh node its load when it changed: tasks running and queued per worker
    /// slot of the services it hosts, in thousandths (as `TaskManager::load_permille`).
    fn update_load(&mut self, ix: Ix) {
        let hosted = self.nodes[ix as usize].capsules.iter().filter(|c| c.name.starts_with("task-")).count();
        let Some(world) = self.tasks.as_deref_mut() else { return };
        let node = &mut world.nodes[ix as usize];
        let busy: usize = node.running.values().sum::<usize>()
            + node.queues.values().map(std::collections::VecDeque::len).sum::<usize>();
        let slots = (world.config.workers * hosted).max(1);
        let load = u16::try_from((busy * 1000 / slots).min(1000)).unwrap_or(1000);
        if load != node.load {
            node.load = load;
            self.handle(ix, Input::SetLoad { load }, None);
        }
    }
}
