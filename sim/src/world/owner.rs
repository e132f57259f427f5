//! Each node's task owner: the protocol's [`Owner`] machine — the very code `murnode`'s
//! task manager runs — driven against a model of the task database.
//!
//! The machine decides (admission, idempotency, queues and workers, what is written how,
//! recovery); this module only carries out its outputs: a `Store` updates the modelled
//! database, a `Start` runs the task for a seeded time, a `Forget` drops nothing on disk.
//! The machine lives in memory and is lost on a crash; at a restart a new one recovers from
//! the database, as the node's does.
//!
//! The database model: a write the machine makes synchronously is durable at once (the
//! node awaits the fsync); a background write reaches a row already on disk (the node's
//! group commit flushes within a second, a window this model does not open), but a row
//! only ever written in the background is lost with the process. So a planted
//! `VolatileAccept` — the acceptance written in the background — loses accepted tasks at
//! a crash, as it would in `murnode`.

use murmur_protocol::mesh::Input;
use murmur_protocol::owner::{Admitted, Arrival, Output, Owner, OwnerConfig, Policy, Write};
use murmur_protocol::task::{Check, Submit, TaskId, TaskSnapshot, TaskState};

use super::tasks::{Stored, TaskEvent, task_word};
use super::{Event, Ix, Sim};

/// What the owner answers for a task it holds.
fn snapshot(task: TaskId, capsule: &str, state: TaskState) -> TaskSnapshot {
    TaskSnapshot {
        seq: 1,
        task,
        state,
        capsule: capsule.to_owned(),
        context: task.to_string(),
        message: None,
    }
}

impl Sim {
    /// The owner machine of a node (re)starting, with the scenario's queue bound.
    pub(super) fn new_owner(&self) -> Owner {
        let queue_max =
            self.tasks.as_deref().map_or(OwnerConfig::default().queue_max, |w| w.config.queue_max);
        Owner::new(OwnerConfig { queue_max, plants: self.options.plants(), ..OwnerConfig::default() })
    }

    /// How node `ix` takes tasks for `capsule`: the workload's services queue with its
    /// workers, for the whole mesh (clients enter at any node); any other capsule it hosts
    /// takes none; `None` when it hosts no such capsule.
    fn policy(&self, ix: Ix, capsule: &str) -> Option<Policy> {
        let hosted = self.nodes[ix as usize].capsules.iter().any(|c| c.name == capsule);
        let workers = self.tasks.as_deref()?.config.workers;
        hosted.then(|| {
            if capsule.starts_with("task-") {
                Policy {
                    audience: murmur_protocol::owner::Audience::Mesh,
                    acceptance: murmur_protocol::owner::Acceptance::Queue,
                    workers,
                    interruptible: false,
                }
            } else {
                Policy::CLOSED
            }
        })
    }

    /// Accepts `submit`, delivered from node `from`, at `owner` (idempotent: a task it
    /// already holds is answered as it is). A refusal is `(check, reason)`.
    pub(super) fn accept(
        &mut self,
        owner: Ix,
        from: Ix,
        submit: &Submit,
    ) -> Result<TaskSnapshot, (Check, String)> {
        let owner_now = self.clock(owner);
        let policy = self.policy(owner, &submit.capsule);
        let Some(model) = self.tasks.as_deref_mut() else {
            return Err((Check::Internal, "no tasks".to_owned()));
        };
        let node = &mut model.nodes[owner as usize];
        let task = submit.task;
        let Some(machine) = node.owner.as_mut() else {
            return Err((Check::Internal, "not running".to_owned()));
        };
        if machine.forgot_any()
            && machine.state(&task).is_none()
            && let Some(stored) = node.store.get(&task)
        {
            // Finished long ago and forgotten from memory: answered from the database.
            model.stats.idempotent_accepts += 1;
            return Ok(snapshot(task, &stored.capsule, stored.state));
        }
        let arrival = if from == owner { Arrival::Local } else { Arrival::Remote };
        let decided = machine.admit(owner_now, submit, policy, arrival);
        match decided {
            Ok(Admitted::Existing(state)) => {
                model.stats.idempotent_accepts += 1;
                Ok(snapshot(task, &submit.capsule, state))
            }
            Ok(Admitted::New { ticket }) => {
                node.store.insert(
                    task,
                    Stored {
                        capsule: submit.capsule.clone(),
                        state: TaskState::Submitted,
                        ticket,
                        durable: false,
                    },
                );
                self.owner_outputs(owner);
                // The acceptance is written (synchronously, unless planted otherwise):
                // the task joins its queue.
                if let Some(machine) =
                    self.tasks.as_deref_mut().and_then(|w| w.nodes[owner as usize].owner.as_mut())
                {
                    let _ = machine.stored(owner_now, task);
                }
                let checked =
                    self.tasks.as_deref_mut().map(|w| w.oracle.accepted(owner, from, submit, owner_now));
                self.trace.record(46, self.now, u64::from(owner), task_word(&task));
                if let Some(Err(what)) = checked {
                    self.violation(what);
                }
                if let murmur_protocol::task::Sender::Capsule { grant, .. } = &submit.sender {
                    self.revocation_task_accepted(owner, grant);
                }
                self.owner_outputs(owner);
                self.update_load(owner);
                Ok(snapshot(task, &submit.capsule, TaskState::Submitted))
            }
            Err(refusal) => {
                *model.stats.refusals.entry(refusal.check().to_owned()).or_default() += 1;
                Err((Check::named(refusal.check()), refusal.to_string()))
            }
        }
    }

    /// A task finished running at `owner`.
    pub(super) fn task_done(&mut self, owner: Ix, task: TaskId) {
        let now = self.clock(owner);
        let Some(machine) = self.tasks.as_deref_mut().and_then(|w| w.nodes[owner as usize].owner.as_mut())
        else {
            return;
        };
        machine.finished(now, task, TaskState::Completed);
        self.owner_outputs(owner);
        self.update_load(owner);
    }

    /// A node (re)started: a fresh exchange and owner, and recovery of the tasks its
    /// database holds.
    pub(super) fn tasks_started(&mut self, ix: Ix) {
        let now = self.clock(ix);
        let exchange = self.new_exchange(ix);
        let mut owner = self.new_owner();
        let Some(model) = self.tasks.as_deref_mut() else { return };
        let node = &mut model.nodes[ix as usize];
        node.exchange = Some(exchange);
        let rows = node.store.iter().map(|(t, s)| (*t, s.capsule.clone(), s.state, s.ticket));
        owner.recover(now, rows);
        let stats = owner.stats().clone();
        node.owner = Some(owner);
        model.stats.failed_on_restart += stats.failed_on_restart;
        model.stats.requeued += stats.requeued;
        let store = &node.store;
        let checked = model.oracle.check_store(ix, &|t| store.contains_key(t));
        if let Err(what) = checked {
            self.violation(what);
        }
        self.owner_outputs(ix);
        let policies: Vec<(String, Option<Policy>)> = {
            let Some(model) = self.tasks.as_deref() else { return };
            let names: std::collections::BTreeSet<String> =
                model.nodes[ix as usize].store.values().map(|s| s.capsule.clone()).collect();
            names.into_iter().map(|name| (name.clone(), self.policy(ix, &name))).collect()
        };
        if let Some(machine) = self.tasks.as_deref_mut().and_then(|w| w.nodes[ix as usize].owner.as_mut()) {
            machine.resume(now, &|capsule| policies.iter().find(|(n, _)| n == capsule).and_then(|(_, p)| *p));
        }
        self.owner_outputs(ix);
        self.update_load(ix);
    }

    /// Carries out what the owner machine of `ix` decided.
    fn owner_outputs(&mut self, ix: Ix) {
        let epoch = self.nodes[ix as usize].epoch;
        loop {
            let mut done_at = None;
            let mut violation = None;
            {
                let Some(model) = self.tasks.as_deref_mut() else { return };
                let (lo, hi) = (model.config.run_ms_min, model.config.run_ms_max);
                let node = &mut model.nodes[ix as usize];
                let Some(output) = node.owner.as_mut().and_then(Owner::poll_output) else { return };
                match output {
                    Output::Store { task, state, write } => {
                        let Some(stored) = node.store.get_mut(&task) else { continue };
                        let was = stored.state;
                        stored.state = state;
                        stored.durable |= write == Write::Sync;
                        if state.is_terminal() && !was.is_terminal() {
                            if state == TaskState::Completed {
                                model.stats.completed += 1;
                                self.trace.record(48, self.now, u64::from(ix), task_word(&task));
                            }
                            violation = model.oracle.finished(ix, &task, state).err();
                        }
                    }
                    Output::Start { task } => {
                        let run_ms = node.rng.between(lo, hi);
                        violation = model.oracle.started(ix, &task, self.now).err();
                        self.trace.record(47, self.now, u64::from(ix), task_word(&task));
                        done_at = Some((self.now + run_ms, task));
                    }
                    // The database keeps it.
                    Output::Forget { .. } => {}
                }
            }
            if let Some(what) = violation {
                self.violation(what);
            }
            if let Some((at, task)) = done_at {
                self.schedule(at, Event::Task(TaskEvent::Done { node: ix, epoch, task }));
            }
        }
    }

    /// Tells the mesh node its load when it changed: tasks running and queued per worker
    /// slot of the services it hosts, in thousandths (as `murnode`'s task runner).
    fn update_load(&mut self, ix: Ix) {
        let hosted = self.nodes[ix as usize].capsules.iter().filter(|c| c.name.starts_with("task-")).count();
        let Some(model) = self.tasks.as_deref_mut() else { return };
        let workers = model.config.workers * hosted;
        let node = &mut model.nodes[ix as usize];
        let load = node.owner.as_ref().map_or(0, |o| o.load_permille(workers));
        if load != node.load {
            node.load = load;
            self.handle(ix, Input::SetLoad { load }, None);
        }
    }
}
