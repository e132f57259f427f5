//! Running the tasks this node owns: the [`TaskRunner`] joins the [`TaskManager`] (what
//! the owner machine decided) and the runtime (what runs). It looks up each delivery's
//! capsule policy in the runtime, runs every task the machine starts (a tool call, or for
//! an agent a session of the native agent loop), and reports each run's end back, which
//! may start the next.

use std::sync::Arc;
use std::time::Duration;

use murmur_agent::runner::{AgentRunner, TaskLink};
use murmur_agent::session::{TaskEnd, TaskStart};
use murmur_protocol::owner::Policy;
use murmur_protocol::task::{Submit, TaskSnapshot, TaskState};
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
}

impl TaskRunner {
    /// A runner for `manager`'s tasks on `runtime`; runs what recovery queued again.
    #[must_use]
    pub fn start(manager: TaskManager, runtime: Runtime) -> Self {
        let runner = Self { manager, agents: AgentRunner::new(runtime.clone()), runtime };
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
    pub async fn accept(&self, submit: &Submit, origin: Origin) -> Result<TaskSnapshot, TaskError> {
        let policy = self.policy(&submit.capsule);
        let (snapshot, starts) = self.manager.accept(submit, origin, policy).await?;
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
        let (task, capsule, input, context, source, span) = {
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
            (record.task, record.capsule.clone(), record.input.clone(), record.context.clone(), source, span)
        };
        let link: Arc<dyn TaskPort> =
            Arc::new(InputLink { manager: self.manager.clone(), live: live.clone() });
        if let Some(agent) = self.runtime.agent(&capsule) {
            let start = TaskStart { task_id: task.to_string(), context_id: context, source, text: input };
            let end = self.agents.run_task(agent, TaskLink { start, port: link }).instrument(span).await;
            let (state, message) = match end {
                TaskEnd::Completed(text) => (TaskState::Completed, Some(cut_result(text))),
                TaskEnd::Failed(reason) => (TaskState::Failed, Some(cut_result(reason))),
                TaskEnd::Canceled => (TaskState::Canceled, Some("canceled".to_owned())),
            };
            let next = self.manager.finished(task, state, message).await;
            self.run(next);
            return;
        }
        let outcome = self
            .runtime
            .run_tool_for_task(&capsule, ToolInput { data: Some(input), log_path: None }, link)
            .instrument(span)
            .await;
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
