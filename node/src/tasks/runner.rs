//! Running the tasks this node owns: the [`TaskRunner`] joins the [`TaskManager`] (what
//! the owner machine decided) and the runtime (what runs). It looks up each delivery's
//! capsule policy in the runtime, runs every task the machine starts (a tool call, or for
//! an agent a session of the native agent loop), and reports each run's end back, which
//! may start the next.

use std::sync::Arc;
use std::time::Duration;

use murmur_agent::runner::{AgentRunner, TaskLink};
use murmur_agent::session::{TaskEnd, TaskStart};
use murmur_protocol::owner::{Acceptance, Arrival, Audience, Policy};
use murmur_protocol::task::{Submit, TaskId, TaskSnapshot, TaskState};
use murmur_runtime::ports::{PortFuture, TaskPort};
use murmur_runtime::{Runtime, ToolInput};
use tokio::sync::oneshot;
use tracing::Instrument;

use super::manager::{Live, TaskError, TaskManager};
use super::record::Origin;
use crate::telemetry;

/// Largest result or failure text a task keeps; longer text is cut (a terminal task's text
/// travels twice in an `events` answer, within `/murmur/task/1`'s 1 MiB frames).
pub use murmur_config::limits::RESULT_BYTES_MAX;

/// Runs owned tasks on the runtime. Cheap to clone.
#[derive(Clone, Debug)]
pub struct TaskRunner {
    manager: TaskManager,
    runtime: Runtime,
    agents: AgentRunner,
    /// Whose tasks a capsule takes when its manifest does not say (`runtime.audience`).
    audience: Audience,
}

impl TaskRunner {
    /// A runner for `manager`'s tasks on `runtime`, its capsules taking tasks from
    /// `audience` unless their manifests say; runs what recovery queued again.
    #[must_use]
    pub fn start(manager: TaskManager, runtime: Runtime, audience: Audience) -> Self {
        let runner = Self { manager, agents: AgentRunner::new(runtime.clone()), runtime, audience };
        let resumed = runner.manager.resume(&|capsule| runner.policy(capsule));
        runner.run(resumed);
        runner
    }

    /// The tasks this node owns.
    #[must_use]
    pub const fn manager(&self) -> &TaskManager {
        &self.manager
    }

    /// Accepts a task for a capsule this node runs (idempotent; durable before it returns).
    pub async fn accept(
        &self,
        submit: &Submit,
        origin: Origin,
        arrival: Arrival,
    ) -> Result<TaskSnapshot, TaskError> {
        let policy = self.policy(&submit.capsule);
        let (snapshot, starts) = self.manager.accept(submit, origin, policy, arrival).await?;
        self.run(starts);
        Ok(snapshot)
    }

    /// The advertised load: tasks running and queued, in thousandths of every worker of
    /// every capsule that takes tasks.
    #[must_use]
    pub fn load_permille(&self) -> u16 {
        let tools: usize = self
            .runtime
            .installed()
            .iter()
            .filter(|i| i.manifest.kind.runs_as_tool())
            .map(|i| i.manifest.lifecycle.workers)
            .sum();
        let agents: usize = self.runtime.agents().iter().map(|a| a.manifest.lifecycle.workers).sum();
        let workers = tools + agents;
        self.manager.load_permille(workers)
    }

    /// How `capsule` takes tasks, from its manifest (`None`: this node does not run it).
    fn policy(&self, capsule: &str) -> Option<Policy> {
        if let Some(agent) = self.runtime.agent(capsule) {
            let lifecycle = &agent.manifest.lifecycle;
            // An agent's loop stops between turns and calls: its working tasks can be canceled.
            return Some(Policy {
                audience: lifecycle.audience.unwrap_or(self.audience),
                acceptance: lifecycle.task_acceptance,
                workers: lifecycle.workers,
                interruptible: true,
            });
        }
        let installed = self.runtime.installed().into_iter().find(|i| i.manifest.name == capsule)?;
        if !installed.manifest.kind.runs_as_tool() {
            return Some(Policy::CLOSED);
        }
        let lifecycle = &installed.manifest.lifecycle;
        Some(Policy {
            audience: lifecycle.audience.unwrap_or(self.audience),
            acceptance: lifecycle.task_acceptance,
            workers: lifecycle.workers,
            interruptible: false,
        })
    }

    fn run(&self, starts: Vec<Arc<Live>>) {
        for live in starts {
            tokio::spawn(self.clone().execute(live));
        }
    }

    /// Runs one started task to its end, then runs what its freed worker takes next.
    async fn execute(self, live: Arc<Live>) {
        let capsule = live.record().capsule.clone();
        if let Some(agent) = self.runtime.agent(&capsule) {
            self.agent_worker(agent, live).await;
            return;
        }
        let (task, input, span, link) = self.start_of(&live);
        let input = ToolInput { data: Some(input.text), log_path: None };
        let outcome = self.runtime.run_tool_for_task(&capsule, input, link).instrument(span).await;
        let (state, message) = match outcome {
            Ok(run) if run.result.status == "passed" => {
                (TaskState::Completed, run.result.data.or(run.result.summary).map(cut_result))
            }
            Ok(run) => (
                TaskState::Failed,
                run.result
                    .summary
                    .or(run.result.data)
                    .map(cut_result)
                    .or(Some(format!("the tool reported {}", run.result.status))),
            ),
            Err(err) => (TaskState::Failed, Some(err.to_string())),
        };
        let next = self.manager.finished(task, state, message).await;
        self.run(next);
    }

    /// One worker of an agent: a session (one capsule launch) that runs the started task,
    /// then — for `task_acceptance = "queue"` — each task the freed worker takes next, in
    /// the same session; it ends (`idle`) when the worker finds nothing queued.
    async fn agent_worker(self, agent: Arc<murmur_runtime::Agent>, mut live: Arc<Live>) {
        let mut session = match self.agents.open(agent.clone()).await {
            Ok(session) => Some(session),
            Err(why) => {
                tracing::error!(capsule = %agent.manifest.name, reason = %why, "agent session did not start");
                None
            }
        };
        loop {
            let (task, start, span, link) = self.start_of(&live);
            let end = match &mut session {
                Some(session) => session.run_task(TaskLink { start, port: link }).instrument(span).await,
                None => TaskEnd::Failed("the agent's session could not start (see the node's log)".into()),
            };
            let (state, message) = match end {
                TaskEnd::Completed(text) => (TaskState::Completed, Some(cut_result(text))),
                TaskEnd::Failed(reason) => (TaskState::Failed, Some(cut_result(reason))),
                TaskEnd::Canceled => (TaskState::Canceled, Some("canceled".to_owned())),
            };
            let mut next = self.manager.finished(task, state, message).await;
            // The freed worker's next task of this agent continues the session.
            let same = next.iter().position(|l| l.record().capsule == agent.manifest.name);
            let queued = agent.manifest.lifecycle.task_acceptance == Acceptance::Queue;
            match same.filter(|_| queued && session.is_some()) {
                Some(index) => {
                    live = next.swap_remove(index);
                    self.run(next);
                }
                None => {
                    self.run(next);
                    break;
                }
            }
        }
        if let Some(session) = session {
            session.close("idle").await;
        }
    }

    /// What a started task's run needs: its id, its start as the agent loop sees it, its
    /// span (joined to the sender's trace) and its port.
    fn start_of(&self, live: &Arc<Live>) -> (TaskId, TaskStart, tracing::Span, Arc<dyn TaskPort>) {
        let record = live.record();
        let span = telemetry::task_span(
            "task.run",
            &record.task.to_string(),
            &record.capsule,
            record.traceparent.as_deref(),
        );
        // Who sent it, as hooks and the trace see it: this node's client, or the mesh.
        let source = match &record.origin {
            Origin::Client => "a2a".to_owned(),
            Origin::Peer { node, .. } => format!("mesh:{node}"),
        };
        let start = TaskStart {
            task_id: record.task.to_string(),
            context_id: record.context.clone(),
            source,
            text: record.input.clone(),
        };
        let link: Arc<dyn TaskPort> =
            Arc::new(InputLink { manager: self.manager.clone(), live: live.clone() });
        (record.task, start, span, link)
    }
}

fn cut_result(mut text: String) -> String {
    if text.len() > RESULT_BYTES_MAX {
        let total = text.len();
        let cut = (0..=RESULT_BYTES_MAX).rev().find(|i| text.is_char_boundary(*i)).unwrap_or(0);
        text.truncate(cut);
        text.push_str(&format!("… [cut: {total} bytes in all]"));
    }
    text
}

/// Connects a running tool's `request-input` to its task.
struct InputLink {
    manager: TaskManager,
    live: Arc<Live>,
}

impl TaskPort for InputLink {
    fn traceparent(&self) -> Option<String> {
        self.live.record().traceparent.clone()
    }

    fn canceled(&self) -> PortFuture<'_, ()> {
        Box::pin(self.live.canceled())
    }

    fn request_input(&self, prompt: String, timeout: Duration) -> PortFuture<'_, Result<String, String>> {
        Box::pin(async move {
            let (tx, mut rx) = oneshot::channel();
            if !self.manager.ask(&self.live, prompt, tx).await {
                return Err(
                    "the task is no longer running (canceled) or its question could not be stored".to_owned()
                );
            }
            tokio::select! {
                // `reply` already moved the task back to working.
                answer = &mut rx => answer.map_err(|_| "the task was canceled while waiting for input".to_owned()),
                () = tokio::time::sleep(timeout) => {
                    let waiting = self.live.input.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
                    if waiting.is_none() {
                        // A reply took the waiter just as the time ran out: it is on its way.
                        return rx.await.map_err(|_| "the task was canceled while waiting for input".to_owned());
                    }
                    Err(format!(
                        "no input arrived within lifecycle.input_timeout_secs ({} s)",
                        timeout.as_secs()
                    ))
                }
            }
        })
    }
}
