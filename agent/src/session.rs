//! The turn machine: one agent session (one capsule launch) and the tasks it runs, as a
//! sans-IO state machine.
//!
//! The runner feeds it [`Input`]s with the current time and carries out the [`Output`]s it
//! drains with [`Session::poll_output`]: dispatch hooks, run one inference turn, run one
//! tool call, write a trace record, end a task. Every output that asks for work is answered
//! by exactly one input ([`Output::Dispatch`] by [`Input::HooksAnswered`], [`Output::Infer`]
//! by [`Input::Inferred`], [`Output::Call`] by [`Input::CallDone`]); nothing else is asked
//! while one is outstanding, so the runner is a plain loop.
//!
//! The machine decides everything the specification fixes: which hook fires when, which
//! hook output commits, when `max_turns` ends a task, when a task reopens, when compaction
//! fires, what a turn sends (the whole history, or the delta and a continuation id), and
//! the trace. It reads no clock and does no I/O; token counts of the logical history come
//! from the [`Tokenizer`] it is given, so the same input always gives the same outputs.

use std::collections::VecDeque;

use murmur_runtime::bindings::murmur::hook::lifecycle::{self, HookOutput};
use murmur_runtime::ports::HookEvent;

use crate::hooks::{self, Handler, Verdict};
use crate::wire::{self, Message, Role, ToolCall, ToolSpec, TurnReply, TurnRequest};
use murmur_api::session_trace::{self as trace, Event, Record};

/// Messages one conversation may hold. Turns and calls are bounded per task, but a queue of
/// tasks sharing one context keeps its history; past this, a task fails and says to add a
/// compaction hook.
pub const HISTORY_MESSAGES_MAX: usize = 4096;

/// Counts tokens the way the model family does (the runner's tiktoken encoder).
pub trait Tokenizer {
    fn count(&self, text: &str) -> u64;
}

/// What an agent's manifest decides about its sessions.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    pub capsule_name: String,
    pub capsule_version: String,
    /// `inference.model`, sent on every turn.
    pub model: String,
    pub system_prompt: Option<String>,
    /// Inference turns per run of a task's loop (a reopened task gets a fresh run).
    pub max_turns: u32,
    pub max_task_reopens: u32,
    /// `inference.context_window`, in tokens.
    pub context_window: u64,
    /// `inference.compaction.threshold`, a fraction of the window in (0, 1].
    pub compaction_threshold: f64,
    /// `inference.compaction.model`, passed to compaction hooks verbatim.
    pub compaction_model: Option<String>,
    /// The tools offered to the model (the shell among them, when allowed).
    pub tools: Vec<ToolSpec>,
    /// The name under which the shell is offered, if it is.
    pub shell_tool: Option<String>,
    /// The capability strings hooks see in `session-context`.
    pub capabilities: Vec<String>,
    /// `inference.params`, passed to the driver unread.
    pub params: serde_json::Value,
}

/// A task handed to the session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskStart {
    pub task_id: String,
    pub context_id: String,
    /// Who sent it (`a2a`, `mesh`, …), for hooks and the trace.
    pub source: String,
    pub text: String,
}

/// One synchronous hook's answer.
#[derive(Clone, Debug)]
pub struct HookAnswer {
    pub hook: String,
    pub answer: Result<HookOutput, String>,
}

/// A driver's answer to one turn, with the host's token counts.
#[derive(Clone, Debug)]
pub struct Inferred {
    pub reply: TurnReply,
    /// The `continuation_id` metadata the driver returned (absent or empty: not continuing).
    pub continuation_id: Option<String>,
    pub input_tokens: u64,
    pub output_tokens: u64,
}

/// What one tool call produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CallDone {
    Tool(ToolOutcome),
    Shell(ShellOutcome),
}

/// A tool's result, as the model and the trace see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolOutcome {
    /// `passed`, `failed` or `error`.
    pub status: String,
    /// What the model reads back.
    pub content: String,
    pub input_bytes: u64,
    pub output_bytes: u64,
    pub state_effect: Option<String>,
    pub resource_id: Option<String>,
}

/// A shell command's result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShellOutcome {
    /// The program that ran (absolute when resolved on PATH).
    pub binary: String,
    /// The arguments, as one line.
    pub command: String,
    pub exit_code: i32,
    pub stdout: String,
    pub stderr: String,
    pub stdout_bytes: u64,
    pub stderr_bytes: u64,
    /// What the model reads back.
    pub content: String,
}

/// What the runner tells the machine.
#[derive(Clone, Debug)]
pub enum Input {
    /// Run a task (only while no other runs).
    StartTask(TaskStart),
    /// The synchronous hooks' answers to the last [`Output::Dispatch`], in order.
    HooksAnswered(Vec<HookAnswer>),
    /// The answer to the last [`Output::Infer`].
    Inferred(Result<Inferred, String>),
    /// The answer to the last [`Output::Call`].
    CallDone(CallDone),
    /// The client canceled the running task; the runner has dropped the work in flight.
    Cancel,
    /// The capsule launch ends (idle, shutdown, or exit), with why.
    End { exit_status: String },
}

/// How a task ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TaskEnd {
    /// The model answered without tool calls; its text.
    Completed(String),
    /// Why it failed, for the task's status message.
    Failed(String),
    Canceled,
}

impl TaskEnd {
    #[must_use]
    pub const fn status(&self) -> &'static str {
        match self {
            Self::Completed(_) => "completed",
            Self::Failed(_) => "failed",
            Self::Canceled => "canceled",
        }
    }
}

/// What the machine asks of the runner.
#[derive(Clone, Debug)]
pub enum Output {
    /// Run the agent's hooks for this event: sync ones in order (answer with their outputs),
    /// async ones detached (never answered, never traced).
    Dispatch(HookEvent),
    /// Run one turn through the driver.
    Infer { turn: u32, request: TurnRequest },
    /// Run one tool call (the shell when `shell`).
    Call { turn: u32, call: ToolCall, shell: bool },
    /// Append to `trace.jsonl`.
    Trace(Record),
    /// Append a line to `workdir/logs/hook-<hook>.log`.
    HookLog { hook: String, line: String },
    /// An `on-inference` hook's `artifact` (from the reply of `turn` of `task_id`): store
    /// it in the node's store.
    StoreArtifact { task_id: String, turn: u32, hook: String, content: String },
    /// The task is over.
    TaskEnded { task_id: String, end: TaskEnd },
    /// The session is over; nothing more will come.
    SessionEnded,
}

/// An input the machine cannot take now (a runner bug, never a peer's or model's fault).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("agent session: {input} while {phase}")]
pub struct Misuse {
    pub input: &'static str,
    pub phase: &'static str,
}

/// The held continuation: the driver keeps the conversation up to `acked` messages.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Continuation {
    id: String,
    context_id: String,
    acked: usize,
}

/// Where the session is.
#[derive(Debug)]
enum Phase {
    /// Not started: the first task starts the session.
    Fresh,
    Idle,
    Hooks {
        handler: Handler,
        then: Then,
    },
    Inference {
        turn: u32,
        sent: u32,
        continued: bool,
        since_ms: u64,
    },
    Call {
        turn: u32,
        call: ToolCall,
        shell: bool,
        since_ms: u64,
    },
    Ended,
}

/// What follows a hook dispatch.
#[derive(Debug)]
enum Then {
    BeginTask(TaskStart),
    FirstTurn,
    SendTurn,
    AfterInference(TurnReply),
    NextCall,
    Judged(TaskEnd),
    Close,
}

/// The task the session runs.
#[derive(Debug)]
struct Running {
    task_id: String,
    started_ms: u64,
    /// Turns in this run of the loop (a reopen starts a new run).
    turn: u32,
    /// Turns over every run, for the trace.
    turns_total: u32,
    reopens: u32,
    calls: VecDeque<ToolCall>,
    canceled: bool,
}

/// Session totals for `on-session-end`.
#[derive(Debug, Default)]
struct Totals {
    turns: u32,
    input_tokens: u64,
    output_tokens: u64,
    tool_calls: u32,
    shell_calls: u32,
}

/// One agent session.
#[derive(Debug)]
pub struct Session<T> {
    settings: Settings,
    session_id: String,
    tokens: T,
    phase: Phase,
    /// The logical conversation of the current context, with each message's token count.
    history: Vec<(Message, u64)>,
    context_id: Option<String>,
    continuation: Option<Continuation>,
    running: Option<Running>,
    totals: Totals,
    started_ms: u64,
    exit_status: Option<String>,
    outputs: VecDeque<Output>,
}

impl<T: Tokenizer> Session<T> {
    /// A session with the id the runner drew (a v4 UUID).
    pub fn new(settings: Settings, session_id: String, tokens: T) -> Self {
        Self {
            settings,
            session_id,
            tokens,
            phase: Phase::Fresh,
            history: Vec::new(),
            context_id: None,
            continuation: None,
            running: None,
            totals: Totals::default(),
            started_ms: 0,
            exit_status: None,
            outputs: VecDeque::new(),
        }
    }

    #[must_use]
    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    /// Tokens of the full logical history and the system prompt: what the compaction
    /// threshold is checked against, whatever a continuing turn actually sends.
    #[must_use]
    pub fn session_tokens(&self) -> u64 {
        let system = self.settings.system_prompt.as_deref().map_or(0, |p| self.tokens.count(p));
        system + self.history.iter().map(|(_, n)| n).sum::<u64>()
    }

    /// The logical history.
    pub fn history(&self) -> impl Iterator<Item = &Message> {
        self.history.iter().map(|(m, _)| m)
    }

    /// Whether the session is between tasks.
    #[must_use]
    pub const fn is_idle(&self) -> bool {
        matches!(self.phase, Phase::Fresh | Phase::Idle)
    }

    /// The next thing to do.
    #[must_use]
    pub fn poll_output(&mut self) -> Option<Output> {
        self.outputs.pop_front()
    }

    /// Takes one input at time `now_ms`.
    pub fn handle(&mut self, now_ms: u64, input: Input) -> Result<(), Misuse> {
        let phase = std::mem::replace(&mut self.phase, Phase::Ended);
        match (phase, input) {
            (Phase::Fresh, Input::StartTask(task)) => {
                self.started_ms = now_ms;
                self.trace(
                    now_ms,
                    Event::SessionStart {
                        session_id: self.session_id.clone(),
                        capsule: self.settings.capsule_name.clone(),
                        version: self.settings.capsule_version.clone(),
                        model: self.settings.model.clone(),
                    },
                );
                let context = lifecycle::SessionContext {
                    capsule_name: self.settings.capsule_name.clone(),
                    capsule_version: self.settings.capsule_version.clone(),
                    session_id: self.session_id.clone(),
                    model: self.settings.model.clone(),
                    capabilities: self.settings.capabilities.clone(),
                };
                self.dispatch(HookEvent::SessionStart(context), Handler::SessionStart, Then::BeginTask(task));
            }
            (Phase::Idle, Input::StartTask(task)) => self.begin_task(now_ms, task),
            (Phase::Hooks { handler, then }, Input::HooksAnswered(answers)) => {
                let committed = self.judge(now_ms, handler, answers);
                self.after_hooks(now_ms, then, committed);
            }
            (Phase::Inference { turn, sent, continued, since_ms }, Input::Inferred(answer)) => {
                self.inferred(now_ms, turn, sent, continued, since_ms, answer);
            }
            (Phase::Call { turn, call, shell, since_ms }, Input::CallDone(done)) => {
                self.call_done(now_ms, turn, &call, shell, since_ms, done);
            }
            (phase @ (Phase::Inference { .. } | Phase::Call { .. }), Input::Cancel) => {
                if let Some(running) = &mut self.running {
                    running.canceled = true;
                    // The call in flight is answered too (below), so no call goes unanswered.
                    if let Phase::Call { call, .. } = phase {
                        running.calls.push_front(call);
                    }
                }
                // What the provider kept of a turn cut short is unknown: resend everything.
                self.continuation = None;
                self.end_loop(TaskEnd::Canceled);
            }
            (phase @ Phase::Hooks { .. }, Input::Cancel) if self.running.is_some() => {
                // The hooks finish; the loop ends when they answer.
                if let Some(running) = &mut self.running {
                    running.canceled = true;
                }
                self.phase = phase;
            }
            (Phase::Idle, Input::End { exit_status }) => self.close(now_ms, exit_status),
            (Phase::Fresh, Input::End { .. }) => {
                // Never started: nothing to report, no trace file.
                self.phase = Phase::Ended;
                self.outputs.push_back(Output::SessionEnded);
            }
            (phase, input) => {
                let misuse = Misuse { input: input_name(&input), phase: phase_name(&phase) };
                self.phase = phase;
                return Err(misuse);
            }
        }
        Ok(())
    }

    fn begin_task(&mut self, now_ms: u64, task: TaskStart) {
        if self.context_id.as_deref() != Some(task.context_id.as_str()) {
            // A new conversation: its own history, and never another context's continuation.
            self.history.clear();
            self.continuation = None;
            self.context_id = Some(task.context_id.clone());
        }
        let input_bytes = task.text.len() as u64;
        self.trace(
            now_ms,
            Event::TaskStart {
                task_id: task.task_id.clone(),
                context_id: task.context_id.clone(),
                source: task.source.clone(),
                input_bytes,
            },
        );
        self.running = Some(Running {
            task_id: task.task_id.clone(),
            started_ms: now_ms,
            turn: 0,
            turns_total: 0,
            reopens: 0,
            calls: VecDeque::new(),
            canceled: false,
        });
        self.push(Message::user(task.text));
        let event = lifecycle::TaskStartEvent {
            task_id: task.task_id,
            context_id: task.context_id,
            source: task.source,
            input_bytes,
        };
        self.dispatch(HookEvent::TaskStart(event), Handler::TaskStart, Then::FirstTurn);
    }

    /// Applies each answer's verdict; returns what was committed.
    fn judge(
        &mut self,
        now_ms: u64,
        handler: Handler,
        answers: Vec<HookAnswer>,
    ) -> Vec<(String, HookOutput)> {
        let mut committed = Vec::new();
        for HookAnswer { hook, answer } in answers {
            match hooks::judge(handler, answer) {
                Verdict::Silent => {}
                Verdict::Commit(output) => committed.push((hook, output)),
                Verdict::Discard(arm) => {
                    let line = hooks::discard_line(&hook, handler, arm);
                    self.outputs.push_back(Output::HookLog { hook: hook.clone(), line });
                    if handler.traces_faults() {
                        self.trace(
                            now_ms,
                            Event::HookDispatchError {
                                hook,
                                handler: handler.export_name().into(),
                                arm: arm.as_str().into(),
                            },
                        );
                    }
                }
                Verdict::Failed(error) => {
                    let line = hooks::error_line(&hook, handler, &error);
                    self.outputs.push_back(Output::HookLog { hook, line });
                }
            }
        }
        committed
    }

    fn after_hooks(&mut self, now_ms: u64, then: Then, committed: Vec<(String, HookOutput)>) {
        match then {
            Then::BeginTask(task) => self.begin_task(now_ms, task),
            Then::FirstTurn | Then::NextCall if self.canceled() => self.end_loop(TaskEnd::Canceled),
            Then::FirstTurn => self.next_turn(now_ms),
            Then::SendTurn => {
                for (hook, output) in committed {
                    if let HookOutput::ReplaceContext(messages) = output {
                        self.replace_context(now_ms, &hook, messages);
                    }
                }
                if self.canceled() {
                    self.end_loop(TaskEnd::Canceled);
                } else {
                    self.send_turn(now_ms);
                }
            }
            Then::AfterInference(reply) => {
                let (task_id, turn) =
                    self.running.as_ref().map_or((String::new(), 0), |r| (r.task_id.clone(), r.turn));
                for (hook, output) in committed {
                    if let HookOutput::Artifact(content) = output {
                        let task_id = task_id.clone();
                        self.outputs.push_back(Output::StoreArtifact { task_id, turn, hook, content });
                    }
                }
                self.after_inference(now_ms, reply);
            }
            Then::NextCall => self.next_call(now_ms),
            Then::Judged(end) => self.judged(now_ms, end, committed),
            Then::Close => {
                let session_id = self.session_id.clone();
                let event = self.session_end_event(now_ms, String::new());
                let exit_status = self.exit_status.take().unwrap_or_default();
                self.trace(
                    now_ms,
                    Event::SessionEnd {
                        session_id,
                        turns: event.total_turns,
                        input_tokens: event.total_input_tokens,
                        output_tokens: event.total_output_tokens,
                        tool_calls: event.total_tool_calls,
                        shell_calls: event.total_shell_calls,
                        duration_ms: event.duration_ms,
                        exit_status,
                    },
                );
                self.phase = Phase::Ended;
                self.outputs.push_back(Output::SessionEnded);
            }
        }
    }

    fn canceled(&self) -> bool {
        self.running.as_ref().is_some_and(|r| r.canceled)
    }

    /// Before a turn: stop at `max_turns`, or fire compaction past the threshold.
    fn next_turn(&mut self, now_ms: u64) {
        let Some(running) = &self.running else { return };
        if running.turn >= self.settings.max_turns {
            let reason = format!(
                "the model was still calling tools after max_turns ({}) turns; raise inference.max_turns or give it a task it can finish",
                self.settings.max_turns
            );
            self.end_loop(TaskEnd::Failed(reason));
            return;
        }
        let session_tokens = self.session_tokens();
        let threshold = self.settings.compaction_threshold;
        if session_tokens as f64 >= threshold * self.settings.context_window as f64 {
            let event = lifecycle::CompactionEvent {
                messages: self.history().map(hook_message).collect(),
                session_tokens,
                threshold,
                model: self.settings.compaction_model.clone(),
                system_prompt: None,
            };
            self.dispatch(HookEvent::Compaction(event), Handler::Compaction, Then::SendTurn);
        } else {
            self.send_turn(now_ms);
        }
    }

    fn send_turn(&mut self, now_ms: u64) {
        if self.history.len() > HISTORY_MESSAGES_MAX {
            let reason = format!(
                "the conversation holds {} messages, more than {HISTORY_MESSAGES_MAX}; give the agent a compaction hook",
                self.history.len()
            );
            self.end_loop(TaskEnd::Failed(reason));
            return;
        }
        let Some(running) = &mut self.running else { return };
        running.turn += 1;
        running.turns_total += 1;
        let turn = running.turn;
        self.totals.turns += 1;
        let continuation = self.continuation.as_ref().filter(|c| {
            self.context_id.as_deref() == Some(c.context_id.as_str()) && c.acked <= self.history.len()
        });
        let (messages, continuation_id) = match continuation {
            Some(c) => (
                self.history[c.acked..].iter().map(|(m, _)| m.clone()).collect::<Vec<_>>(),
                Some(c.id.clone()),
            ),
            None => (self.history().cloned().collect(), None),
        };
        let continued = continuation_id.is_some();
        let sent = u32::try_from(messages.len()).unwrap_or(u32::MAX);
        let request = TurnRequest {
            format: wire::FORMAT.into(),
            model: self.settings.model.clone(),
            system_prompt: self.settings.system_prompt.clone(),
            messages,
            tools: self.settings.tools.clone(),
            continuation_id,
            params: self.settings.params.clone(),
        };
        self.phase = Phase::Inference { turn, sent, continued, since_ms: now_ms };
        self.outputs.push_back(Output::Infer { turn, request });
    }

    fn inferred(
        &mut self,
        now_ms: u64,
        turn: u32,
        sent: u32,
        continued: bool,
        since_ms: u64,
        answer: Result<Inferred, String>,
    ) {
        let task_id = self.running.as_ref().map(|r| r.task_id.clone());
        let mut record = Event::Inference {
            task_id,
            turn: Some(turn),
            model: self.settings.model.clone(),
            input_tokens: 0,
            output_tokens: 0,
            decision: "error".into(),
            messages_sent: sent,
            continued,
            duration_ms: now_ms.saturating_sub(since_ms),
            origin: None,
            error: None,
        };
        let inferred = match answer {
            Ok(inferred) => inferred,
            Err(error) => {
                if let Event::Inference { error: slot, .. } = &mut record {
                    *slot = Some(error.clone());
                }
                self.trace(now_ms, record);
                // A failed turn leaves the provider's state unknown: resend everything next time.
                self.continuation = None;
                self.end_loop(TaskEnd::Failed(format!("inference failed at turn {turn}: {error}")));
                return;
            }
        };
        let Inferred { reply, continuation_id, input_tokens, output_tokens } = inferred;
        let decision = if reply.tool_calls.is_empty() { "final" } else { "tool_calls" };
        if let Event::Inference { input_tokens: i, output_tokens: o, decision: d, .. } = &mut record {
            (*i, *o) = (input_tokens, output_tokens);
            *d = decision.into();
        }
        self.trace(now_ms, record);
        self.totals.input_tokens += input_tokens;
        self.totals.output_tokens += output_tokens;
        self.push(Message::assistant(reply.text.clone(), reply.tool_calls.clone()));
        self.continuation = continuation_id.filter(|id| !id.is_empty()).map(|id| Continuation {
            id,
            context_id: self.context_id.clone().unwrap_or_default(),
            acked: self.history.len(),
        });
        let prompt =
            self.history.iter().rev().find(|(m, _)| m.role == Role::User).map(|(m, _)| m.content.clone());
        let event = lifecycle::InferenceEvent {
            turn,
            input_tokens,
            output_tokens,
            decision: decision.into(),
            tool_name: reply.tool_calls.first().map(|c| c.name.clone()),
            prompt,
            output: Some(reply.text.clone()),
            tools: (!reply.tool_calls.is_empty())
                .then(|| serde_json::to_string(&reply.tool_calls).unwrap_or_default()),
        };
        self.dispatch(HookEvent::Inference(event), Handler::Inference, Then::AfterInference(reply));
    }

    fn after_inference(&mut self, now_ms: u64, reply: TurnReply) {
        if reply.tool_calls.is_empty() {
            let end = if self.canceled() { TaskEnd::Canceled } else { TaskEnd::Completed(reply.text) };
            self.end_loop(end);
            return;
        }
        let Some(running) = &mut self.running else { return };
        running.calls = reply.tool_calls.into();
        if running.canceled {
            self.end_loop(TaskEnd::Canceled);
        } else if running.turn >= self.settings.max_turns {
            // Its calls' results could never reach a model: they are not run (and are
            // answered as such when the loop ends).
            self.next_turn(now_ms);
        } else {
            self.next_call(now_ms);
        }
    }

    fn next_call(&mut self, now_ms: u64) {
        let Some(running) = &mut self.running else { return };
        let turn = running.turn;
        let Some(call) = running.calls.pop_front() else {
            self.next_turn(now_ms);
            return;
        };
        let shell = self.settings.shell_tool.as_deref() == Some(call.name.as_str());
        if !shell && !self.settings.tools.iter().any(|t| t.name == call.name) {
            let content = format!("error: no tool named `{}` is offered to this agent", call.name);
            let refused = ToolOutcome {
                status: "refused".into(),
                content,
                input_bytes: call.arguments.len() as u64,
                output_bytes: 0,
                state_effect: None,
                resource_id: None,
            };
            self.call_done(now_ms, turn, &call, false, now_ms, CallDone::Tool(refused));
            return;
        }
        self.phase = Phase::Call { turn, call: call.clone(), shell, since_ms: now_ms };
        self.outputs.push_back(Output::Call { turn, call, shell });
    }

    fn call_done(
        &mut self,
        now_ms: u64,
        turn: u32,
        call: &ToolCall,
        shell: bool,
        since_ms: u64,
        done: CallDone,
    ) {
        let task_id = self.running.as_ref().map(|r| r.task_id.clone()).unwrap_or_default();
        let duration_ms = now_ms.saturating_sub(since_ms);
        let (content, hook_event, handler) = match done {
            CallDone::Tool(outcome) => {
                self.totals.tool_calls += 1;
                self.trace(
                    now_ms,
                    Event::ToolCall {
                        task_id,
                        turn,
                        call_id: call.id.clone(),
                        tool: call.name.clone(),
                        status: outcome.status.clone(),
                        input_bytes: outcome.input_bytes,
                        output_bytes: outcome.output_bytes,
                        duration_ms,
                        state_effect: outcome.state_effect,
                        resource_id: outcome.resource_id.filter(|r| !r.is_empty()),
                        arguments: (call.arguments.len() <= trace::RECORDED_ARGUMENTS_BYTES_MAX)
                            .then(|| call.arguments.clone()),
                    },
                );
                let event = lifecycle::ToolEvent {
                    turn,
                    tool_name: call.name.clone(),
                    input_bytes: outcome.input_bytes,
                    output_bytes: outcome.output_bytes,
                    duration_ms,
                    status: outcome.status,
                };
                (outcome.content, HookEvent::ToolCall(event), Handler::ToolCall)
            }
            CallDone::Shell(outcome) => {
                debug_assert!(shell, "a shell result answers a shell call");
                self.totals.shell_calls += 1;
                self.trace(
                    now_ms,
                    Event::Shell {
                        task_id,
                        turn,
                        call_id: call.id.clone(),
                        binary: outcome.binary.clone(),
                        command: outcome.command.clone(),
                        exit_code: outcome.exit_code,
                        stdout_bytes: outcome.stdout_bytes,
                        stderr_bytes: outcome.stderr_bytes,
                        duration_ms,
                    },
                );
                let event = lifecycle::ShellEvent {
                    turn,
                    binary: outcome.binary,
                    command: outcome.command,
                    exit_code: outcome.exit_code,
                    stdout: outcome.stdout,
                    stderr: outcome.stderr,
                    stdout_bytes: outcome.stdout_bytes,
                    stderr_bytes: outcome.stderr_bytes,
                    duration_ms,
                };
                (outcome.content, HookEvent::Shell(event), Handler::Shell)
            }
        };
        self.push(Message::tool(call.id.clone(), content));
        self.dispatch(hook_event, handler, Then::NextCall);
    }

    /// The loop returned: fire `on-task-end`, whose `reopen-task` may run it again.
    fn end_loop(&mut self, end: TaskEnd) {
        let Some(running) = &mut self.running else { return };
        let unrun: Vec<ToolCall> = running.calls.drain(..).collect();
        let task_id = running.task_id.clone();
        // Every call the model made gets an answer, so the history stays valid for a
        // reopened loop or a later task of the context (providers refuse unanswered calls).
        let why = match &end {
            TaskEnd::Canceled => "the task was canceled",
            TaskEnd::Failed(_) | TaskEnd::Completed(_) => "the loop ended first",
        };
        for call in unrun {
            self.push(Message::tool(call.id, format!("not run: {why}")));
        }
        let event = lifecycle::TaskEndEvent { task_id, exit_status: end.status().into() };
        self.dispatch(HookEvent::TaskEnd(event), Handler::TaskEnd, Then::Judged(end));
    }

    fn judged(&mut self, now_ms: u64, end: TaskEnd, committed: Vec<(String, HookOutput)>) {
        let mut reopen = None;
        for (hook, output) in committed {
            let HookOutput::ReopenTask(feedback) = output else { continue };
            let Some(running) = &self.running else { return };
            let refusal = if running.canceled || end == TaskEnd::Canceled {
                Some("the task was canceled".to_owned())
            } else if reopen.is_some() {
                Some("another hook reopened the task first".to_owned())
            } else if running.reopens >= self.settings.max_task_reopens {
                Some(format!("max_task_reopens ({}) reached", self.settings.max_task_reopens))
            } else {
                None
            };
            match refusal {
                Some(why) => {
                    let line =
                        format!("hook `{hook}`: on-task-end returned reopen-task, not committed: {why}");
                    self.outputs.push_back(Output::HookLog { hook, line });
                }
                None => reopen = Some((hook, feedback)),
            }
        }
        let Some(running) = &mut self.running else { return };
        if let Some((hook, feedback)) = reopen {
            running.reopens += 1;
            running.turn = 0;
            let record = Event::TaskReopen {
                task_id: running.task_id.clone(),
                reopen: running.reopens,
                hook,
                feedback_bytes: feedback.len() as u64,
            };
            self.trace(now_ms, record);
            self.push(Message::user(feedback));
            self.next_turn(now_ms);
            return;
        }
        let running = self.running.take().expect("checked above: a task is running");
        let reason = match &end {
            TaskEnd::Failed(reason) => Some(reason.clone()),
            TaskEnd::Completed(_) | TaskEnd::Canceled => None,
        };
        self.trace(
            now_ms,
            Event::TaskEnd {
                task_id: running.task_id.clone(),
                status: end.status().into(),
                reason,
                turns: running.turns_total,
                duration_ms: now_ms.saturating_sub(running.started_ms),
            },
        );
        self.phase = Phase::Idle;
        self.outputs.push_back(Output::TaskEnded { task_id: running.task_id, end });
    }

    fn close(&mut self, now_ms: u64, exit_status: String) {
        self.exit_status = Some(exit_status.clone());
        let event = self.session_end_event(now_ms, exit_status);
        self.dispatch(HookEvent::SessionEnd(event), Handler::SessionEnd, Then::Close);
    }

    fn session_end_event(&self, now_ms: u64, exit_status: String) -> lifecycle::SessionEndEvent {
        lifecycle::SessionEndEvent {
            total_turns: self.totals.turns,
            total_input_tokens: self.totals.input_tokens,
            total_output_tokens: self.totals.output_tokens,
            total_tool_calls: self.totals.tool_calls,
            total_shell_calls: self.totals.shell_calls,
            duration_ms: now_ms.saturating_sub(self.started_ms),
            exit_status,
        }
    }

    /// A hook's `replace-context`: the new history, and a full resend next turn.
    fn replace_context(&mut self, now_ms: u64, hook: &str, messages: Vec<lifecycle::Message>) {
        let session_tokens = self.session_tokens();
        let messages_before = self.history.len();
        self.history.clear();
        for message in messages {
            // A replacement has no tool calls, so a `tool` message would answer nothing.
            let role = match Role::parse_lenient(&message.role) {
                Role::Tool => Role::User,
                role => role,
            };
            self.push(Message { role, content: message.content, tool_calls: Vec::new(), tool_call_id: None });
        }
        self.continuation = None;
        let task_id = self.running.as_ref().map(|r| r.task_id.clone()).unwrap_or_default();
        self.trace(
            now_ms,
            Event::Compaction {
                task_id,
                hook: hook.into(),
                session_tokens,
                threshold: self.settings.compaction_threshold,
                context_window: self.settings.context_window,
                messages_before: u32::try_from(messages_before).unwrap_or(u32::MAX),
                messages_after: u32::try_from(self.history.len()).unwrap_or(u32::MAX),
                tokens_after: self.session_tokens(),
            },
        );
    }

    fn push(&mut self, message: Message) {
        let tokens = message.countable().map(|text| self.tokens.count(text)).sum();
        self.history.push((message, tokens));
    }

    fn dispatch(&mut self, event: HookEvent, handler: Handler, then: Then) {
        self.phase = Phase::Hooks { handler, then };
        self.outputs.push_back(Output::Dispatch(event));
    }

    fn trace(&mut self, ts_ms: u64, event: Event) {
        self.outputs.push_back(Output::Trace(Record { ts_ms, event }));
    }
}

/// A history message as hooks see it (`role`, `content`); an assistant's calls are written
/// into its content so a summariser sees them.
fn hook_message(message: &Message) -> lifecycle::Message {
    let mut content = message.content.clone();
    for call in &message.tool_calls {
        if !content.is_empty() {
            content.push('\n');
        }
        content.push_str(&format!("[tool call {}: {}({})]", call.id, call.name, call.arguments));
    }
    lifecycle::Message { role: message.role.as_str().into(), content }
}

const fn input_name(input: &Input) -> &'static str {
    match input {
        Input::StartTask(_) => "a task start",
        Input::HooksAnswered(_) => "hook answers",
        Input::Inferred(_) => "an inference answer",
        Input::CallDone(_) => "a tool call's result",
        Input::Cancel => "a cancel",
        Input::End { .. } => "the session's end",
    }
}

const fn phase_name(phase: &Phase) -> &'static str {
    match phase {
        Phase::Fresh => "not started",
        Phase::Idle => "idle",
        Phase::Hooks { .. } => "waiting for hooks",
        Phase::Inference { .. } => "waiting for inference",
        Phase::Call { .. } => "waiting for a tool call",
        Phase::Ended => "ended",
    }
}

#[cfg(test)]
mod tests;
