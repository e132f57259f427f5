//! The runner: carries out a [`Session`]'s outputs over the runtime. Turns go to the
//! agent's driver component, tool calls through the runtime's allowlisted registry, shell
//! commands through its shell host, hooks to the agent's hook components (sync in order,
//! async detached), trace records to `trace.jsonl`, hook faults to `logs/hook-<name>.log`.
//!
//! A session is one capsule launch ([`AgentSession`]): one task for `task_acceptance`
//! none or single, the tasks one queue worker takes in a row for `queue`. Its directory is
//! `<workdir>/sessions/<session-id>/` (its `trace.jsonl`);
//! `<workdir>/session-index/<task-id>` names the session that ran a task. What
//! `on-inference` hooks return as `artifact` goes to the node's artifact store.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use murmur_runtime::bindings::murmur::runtime::inference::{InferenceRequest, InferenceResponse};
use murmur_runtime::manifest::ExecutionMode;
use murmur_runtime::ports::{HookEvent, InferencePort, PortFuture, TaskPort};
use murmur_runtime::{Agent, AgentHook, Installed, Runtime, ToolInput};

use tracing::Instrument;

use murmur_runtime::bindings::murmur::hook::lifecycle::{self, HookOutput};

use crate::hooks::{self, Handler, Verdict};
use crate::session::{
    CallDone, HookAnswer, Inferred, Input, Output, Session, Settings, ShellOutcome, TaskEnd, TaskStart,
    Tokenizer, ToolOutcome,
};
use crate::trace::{Event, Record};
use crate::wire::{self, Message, Role, ToolCall, ToolSpec, TurnReply, TurnRequest};

/// The name under which the shell is offered to the model.
pub const SHELL_TOOL: &str = "shell";

/// Async hook calls running at once across the node's agents. Each is a component
/// instance; past this, an async hook call is skipped and its log says so (async hooks
/// only observe, so the loop loses nothing).
pub const ASYNC_HOOK_CALLS_MAX: usize = 64;

/// Counts tokens with tiktoken: the encoding of the model's family where tiktoken knows
/// it, `cl100k_base` otherwise.
#[derive(Clone, Copy)]
pub struct Tiktoken(&'static tiktoken_rs::CoreBPE);

impl std::fmt::Debug for Tiktoken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tiktoken")
    }
}

impl Tiktoken {
    #[must_use]
    pub fn for_model(model: &str) -> Self {
        use tiktoken_rs::tokenizer::{Tokenizer as Family, get_tokenizer};
        Self(match get_tokenizer(model) {
            Some(Family::O200kBase) => tiktoken_rs::o200k_base_singleton(),
            Some(Family::O200kHarmony) => tiktoken_rs::o200k_harmony_singleton(),
            Some(Family::P50kBase) => tiktoken_rs::p50k_base_singleton(),
            Some(Family::R50kBase | Family::Gpt2) => tiktoken_rs::r50k_base_singleton(),
            Some(Family::P50kEdit) => tiktoken_rs::p50k_edit_singleton(),
            Some(Family::Cl100kBase) | None => tiktoken_rs::cl100k_base_singleton(),
        })
    }
}

impl Tokenizer for Tiktoken {
    fn count(&self, text: &str) -> u64 {
        self.0.encode_ordinary(text).len() as u64
    }
}

/// Runs agent tasks on a runtime. Cheap to clone.
#[derive(Clone, Debug)]
pub struct AgentRunner {
    runtime: Runtime,
    async_hooks: Arc<tokio::sync::Semaphore>,
    /// Agents staged (`on-stage` dispatched), by the identity of their installed `Agent`:
    /// once per install, before its first session.
    staged: Arc<Mutex<std::collections::HashMap<usize, Arc<tokio::sync::OnceCell<()>>>>>,
}

/// `on-inference` artifacts one session may store: a hook that returns one every turn
/// fills the store no faster than the session's turns, and no session stores more.
pub const SESSION_ARTIFACTS_MAX: usize = 256;
/// Bytes of one `on-inference` artifact (a report or a summary, not a dataset).
pub const HOOK_ARTIFACT_BYTES_MAX: usize = 1024 * 1024;

/// Manifests one `write-manifests` commit may write, and bytes of each.
pub const STAGED_MANIFESTS_MAX: usize = 64;
pub const STAGED_MANIFEST_BYTES_MAX: usize = 64 * 1024;

/// What the runner needs of the task it runs.
#[derive(Clone)]
pub struct TaskLink {
    pub start: TaskStart,
    /// Where a tool's `request-input` goes.
    pub port: Arc<dyn TaskPort>,
}

impl std::fmt::Debug for TaskLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskLink").field("start", &self.start).finish_non_exhaustive()
    }
}

impl AgentRunner {
    #[must_use]
    pub fn new(runtime: Runtime) -> Self {
        Self {
            runtime,
            async_hooks: Arc::new(tokio::sync::Semaphore::new(ASYNC_HOOK_CALLS_MAX)),
            staged: Arc::default(),
        }
    }

    /// Stages `agent` once per install, before its first session: `on-stage` goes to its
    /// sync hooks with the shell allowlist; a `write-manifests` commit writes each manifest
    /// to `<workdir>/tools/<binary-name>/manifest.toml`. Any other arm is a line in the
    /// hook's log (no trace: there is no session yet). Async hooks are not staged: staging
    /// must finish before the first session, which an async hook would not.
    pub async fn stage(&self, agent: &Arc<Agent>) {
        let key = Arc::as_ptr(agent) as usize;
        let cell = {
            let mut staged = self.staged.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            // Agents replaced by a reinstall leave their entry; the map holds at most one
            // per install, and installs are bounded by the node's capsule limit.
            staged.entry(key).or_default().clone()
        };
        cell.get_or_init(|| async {
            let event = lifecycle::StageEvent { shell_allow: agent.manifest.capabilities.shell.clone() };
            let workdir = &agent.manifest.workdir;
            for hook in agent.hooks.iter().filter(|h| h.mode == ExecutionMode::Sync) {
                let port: Arc<dyn InferencePort> = Arc::new(murmur_runtime::ports::NoInference);
                let answer = match self.runtime.call_hook(hook, HookEvent::Stage(event.clone()), port).await {
                    Ok(None) => continue,
                    Ok(Some(answer)) => answer,
                    Err(error) => Err(error.to_string()),
                };
                match hooks::judge(Handler::Stage, answer) {
                    Verdict::Silent => {}
                    Verdict::Commit(HookOutput::WriteManifests(manifests)) => {
                        if let Err(why) = write_manifests(workdir, &manifests) {
                            hook_log(
                                workdir,
                                &hook.name,
                                &format!(
                                    "hook `{}`: on-stage write-manifests not committed: {why}",
                                    hook.name
                                ),
                            );
                        }
                    }
                    Verdict::Commit(_) => {}
                    Verdict::Discard(arm) => {
                        hook_log(workdir, &hook.name, &hooks::discard_line(&hook.name, Handler::Stage, arm))
                    }
                    Verdict::Failed(error) => {
                        hook_log(workdir, &hook.name, &hooks::error_line(&hook.name, Handler::Stage, &error))
                    }
                }
            }
        })
        .await;
    }

    /// Runs one task of `agent` in a session of its own, to its end (the session ends
    /// with it, `exit`).
    pub async fn run_task(&self, agent: Arc<Agent>, link: TaskLink) -> TaskEnd {
        let mut session = match self.open(agent).await {
            Ok(session) => session,
            Err(why) => return TaskEnd::Failed(why),
        };
        let end = session.run_task(link).await;
        session.close("exit").await;
        end
    }

    /// Opens a session of `agent` (one capsule launch): stages the agent if this is its
    /// first, draws the session's UUID and creates its trace. The session then runs the
    /// tasks it is given one after another ([`AgentSession::run_task`]) until it is closed.
    pub async fn open(&self, agent: Arc<Agent>) -> Result<AgentSession, String> {
        self.stage(&agent).await;
        let session_id = uuid::Uuid::new_v4().to_string();
        let dir = agent.manifest.workdir.join("sessions").join(&session_id);
        let trace = TraceFile::create(&dir).map_err(|e| format!("cannot start the agent's session: {e}"))?;
        let tokens = Tiktoken::for_model(&agent.spec.model);
        let settings = self.settings(&agent);
        Ok(AgentSession {
            run: Run {
                runtime: self.runtime.clone(),
                async_hooks: self.async_hooks.clone(),
                agent,
                trace: Arc::new(trace),
                tokens,
                session: Session::new(settings, session_id, tokens),
                link: None,
                end: None,
                artifacts: 0,
            },
        })
    }

    fn settings(&self, agent: &Agent) -> Settings {
        let mut tools: Vec<ToolSpec> = self
            .runtime
            .offered_tools(agent)
            .into_iter()
            .map(|tool| ToolSpec {
                input_schema: tool
                    .input_schema
                    .and_then(|schema| serde_json::from_str(&schema).ok())
                    .unwrap_or_else(|| serde_json::json!({ "type": "object" })),
                name: tool.name,
                description: tool.description,
            })
            .collect();
        let shell = !agent.manifest.capabilities.shell.is_empty();
        if shell {
            tools.push(shell_spec(&agent.manifest.capabilities.shell));
        }
        let mut capabilities: Vec<String> =
            agent.manifest.capabilities.tools.iter().map(|t| format!("tools:{t}")).collect();
        capabilities.extend(agent.manifest.capabilities.shell.iter().map(|b| format!("shell:{b}")));
        capabilities.extend(agent.manifest.capabilities.network.iter().map(|n| format!("network:{n}")));
        let spec = &agent.spec;
        Settings {
            capsule_name: agent.manifest.name.clone(),
            capsule_version: agent.manifest.version.clone(),
            model: spec.model.clone(),
            system_prompt: spec.system_prompt.clone(),
            max_turns: spec.max_turns,
            max_task_reopens: spec.max_task_reopens,
            context_window: spec.context_window,
            compaction_threshold: spec.compaction_threshold,
            compaction_model: spec.compaction_model.clone(),
            tools,
            shell_tool: shell.then(|| SHELL_TOOL.to_owned()),
            capabilities,
            params: spec.params.clone(),
        }
    }
}

/// The shell, as the model sees it.
fn shell_spec(allowed: &[String]) -> ToolSpec {
    ToolSpec {
        name: SHELL_TOOL.into(),
        description: format!(
            "Runs one program with arguments (no shell syntax) in the agent's work directory and returns its exit code, stdout and stderr (each cut at 16 KiB). Allowed programs: {}.",
            allowed.join(", ")
        ),
        input_schema: serde_json::json!({
            "type": "object",
            "properties": {
                "program": { "type": "string", "description": "the program to run" },
                "args": { "type": "array", "items": { "type": "string" } }
            },
            "required": ["program"]
        }),
    }
}

/// One session in progress.
struct Run {
    runtime: Runtime,
    async_hooks: Arc<tokio::sync::Semaphore>,
    agent: Arc<Agent>,
    trace: Arc<TraceFile>,
    tokens: Tiktoken,
    session: Session<Tiktoken>,
    /// The task running, if one is.
    link: Option<TaskLink>,
    end: Option<TaskEnd>,
    /// `on-inference` artifacts stored this session.
    artifacts: usize,
}

/// An open agent session: the tasks one capsule launch runs, one after another, under one
/// `session-id` and one `trace.jsonl`. Closing it fires `on-session-end`.
pub struct AgentSession {
    run: Run,
}

impl std::fmt::Debug for AgentSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentSession").field("session_id", &self.id()).finish_non_exhaustive()
    }
}

impl AgentSession {
    /// The session's UUID, the same in every hook event and trace record of it.
    #[must_use]
    pub fn id(&self) -> &str {
        self.run.session.session_id()
    }

    /// Runs one task to its end (`on-task-end` and any reopen included); the session stays
    /// open for the next.
    pub async fn run_task(&mut self, link: TaskLink) -> TaskEnd {
        let run = &mut self.run;
        // Which session ran a task (`mur trace TASK_ID`); a re-run after a restart points
        // it to the newer session.
        let workdir = &run.agent.manifest.workdir;
        if let Err(error) = index_session(workdir, &link.start.task_id, run.session.session_id()) {
            tracing::warn!(%error, task = %link.start.task_id, "cannot index the agent session");
        }
        let span = tracing::info_span!(
            "agent.session",
            session_id = %run.session.session_id(),
            capsule = %run.agent.manifest.name,
            task = %link.start.task_id,
        );
        let start = link.start.clone();
        run.link = Some(link);
        run.end = None;
        run.input(Input::StartTask(start));
        // A child of the task's span: the session's work for this task, its turns and
        // calls join the task's trace across the mesh.
        run.drive().instrument(span).await;
        run.link = None;
        run.end.take().unwrap_or_else(|| TaskEnd::Failed("the agent session stopped early".into()))
    }

    /// Ends the session (`on-session-end` with `exit_status`, then its trace record).
    pub async fn close(mut self, exit_status: &str) {
        let run = &mut self.run;
        run.input(Input::End { exit_status: exit_status.to_owned() });
        run.drive().await;
    }
}

impl Run {
    /// Carries out the machine's outputs until it waits for a task or has ended.
    async fn drive(&mut self) {
        loop {
            let Some(output) = self.session.poll_output() else {
                // Nothing asked: the task ended (the session idles) or the session did.
                return;
            };
            match output {
                Output::Trace(record) => self.trace.append(&record),
                Output::HookLog { hook, line } => hook_log(&self.agent.manifest.workdir, &hook, &line),
                Output::StoreArtifact { task_id, turn, hook, content } => {
                    self.keep_artifact(task_id, turn, hook, content).await;
                }
                Output::Dispatch(event) => {
                    let answers = self.dispatch(event).await;
                    self.input(Input::HooksAnswered(answers));
                }
                Output::Infer { turn, request } => {
                    let span = tracing::info_span!("capsule.inference", turn, model = %request.model);
                    let port = self.port();
                    // A cancel stops the turn: the driver call in flight is dropped.
                    tokio::select! {
                        answer = self.infer(request).instrument(span) => self.input(Input::Inferred(answer)),
                        () = port.canceled() => self.input(Input::Cancel),
                    }
                }
                Output::Call { turn, call, shell } => {
                    let span = if shell {
                        tracing::info_span!("capsule.shell", turn, call_id = %call.id)
                    } else {
                        tracing::info_span!("capsule.tool_call", turn, tool = %call.name, call_id = %call.id)
                    };
                    let port = self.port();
                    tokio::select! {
                        done = self.call(&call, shell).instrument(span) => self.input(Input::CallDone(done)),
                        () = port.canceled() => self.input(Input::Cancel),
                    }
                }
                Output::TaskEnded { end, .. } => self.end = Some(end),
                Output::SessionEnded => return,
            }
        }
    }

    /// The running task's port (a task that never asks for input between tasks).
    fn port(&self) -> Arc<dyn TaskPort> {
        match &self.link {
            Some(link) => link.port.clone(),
            None => Arc::new(NoTask),
        }
    }

    fn input(&mut self, input: Input) {
        if let Err(misuse) = self.session.handle(now_ms(), input) {
            // The runner answers exactly what was asked; this is a bug, not bad input.
            tracing::error!(capsule = %self.agent.manifest.name, %misuse, "agent runner out of step");
        }
    }

    /// Sync hooks in order (their answers), async hooks detached (logged only).
    async fn dispatch(&self, event: HookEvent) -> Vec<HookAnswer> {
        let handler = hooks::handler_of(&event);
        let mut answers = Vec::new();
        for (index, hook) in self.agent.hooks.iter().enumerate() {
            let port = self.inference_port(hook);
            match hook.mode {
                ExecutionMode::Sync => match self.runtime.call_hook(hook, event.clone(), port).await {
                    Ok(None) => {}
                    Ok(Some(answer)) => answers.push(HookAnswer { hook: hook.name.clone(), answer }),
                    Err(error) => {
                        answers.push(HookAnswer { hook: hook.name.clone(), answer: Err(error.to_string()) })
                    }
                },
                ExecutionMode::Async => {
                    let Ok(permit) = self.async_hooks.clone().try_acquire_owned() else {
                        let line = format!(
                            "hook `{}`: {handler} skipped: {ASYNC_HOOK_CALLS_MAX} async hook calls are already running on this node",
                            hook.name
                        );
                        hook_log(&self.agent.manifest.workdir, &hook.name, &line);
                        continue;
                    };
                    let (runtime, agent, event) = (self.runtime.clone(), self.agent.clone(), event.clone());
                    tokio::spawn(async move {
                        let _permit = permit;
                        let hook = &agent.hooks[index];
                        let answer = match runtime.call_hook(hook, event, port).await {
                            Ok(None) => return,
                            Ok(Some(answer)) => answer,
                            Err(error) => Err(error.to_string()),
                        };
                        let line = match hooks::judge(handler, answer) {
                            Verdict::Silent => return,
                            Verdict::Commit(output) => {
                                let arm = hooks::Arm::of(&output).map_or("none", hooks::Arm::as_str);
                                format!(
                                    "hook `{}`: {handler} returned {arm}, not committed: async hooks only observe",
                                    hook.name
                                )
                            }
                            Verdict::Discard(arm) => hooks::discard_line(&hook.name, handler, arm),
                            Verdict::Failed(error) => hooks::error_line(&hook.name, handler, &error),
                        };
                        hook_log(&agent.manifest.workdir, &hook.name, &line);
                    });
                }
            }
        }
        answers
    }

    fn inference_port(&self, hook: &AgentHook) -> Arc<dyn InferencePort> {
        Arc::new(HookInference {
            runtime: self.runtime.clone(),
            agent: self.agent.clone(),
            trace: self.trace.clone(),
            tokens: self.tokens,
            origin: format!("hook:{}", hook.name),
        })
    }

    async fn infer(&self, request: TurnRequest) -> Result<Inferred, String> {
        let data = serde_json::to_string(&request).map_err(|e| format!("cannot encode the turn: {e}"))?;
        let input_tokens = self.tokens.count(&data);
        let (reply, continuation_id, output_tokens) =
            drive_turn(&self.runtime, &self.agent, data, self.tokens).await?;
        Ok(Inferred { reply, continuation_id, input_tokens, output_tokens })
    }

    async fn call(&self, call: &ToolCall, shell: bool) -> CallDone {
        if shell {
            return self.shell(call).await;
        }
        let input = ToolInput { data: Some(call.arguments.clone()), log_path: None };
        let input_bytes = call.arguments.len() as u64;
        match self.runtime.call_for_agent(&self.agent, &call.name, input, Some(self.port())).await {
            Ok((result, records)) => {
                let json = murmur_runtime::ToolResultJson::from(&result);
                let content = json.data.clone().or(json.summary.clone()).unwrap_or_default();
                let record = records.first();
                CallDone::Tool(ToolOutcome {
                    status: json.status.clone(),
                    output_bytes: content.len() as u64,
                    content,
                    input_bytes,
                    // Verbatim from the tool's metadata (absent when undeclared).
                    state_effect: json
                        .metadata
                        .iter()
                        .find(|(k, _)| k == "state_effect")
                        .map(|(_, v)| v.clone()),
                    resource_id: record.and_then(|r| r.resource_id.clone()),
                })
            }
            Err(error) => CallDone::Tool(ToolOutcome {
                status: "error".into(),
                content: format!("error: {error}"),
                input_bytes,
                output_bytes: 0,
                state_effect: None,
                resource_id: None,
            }),
        }
    }

    async fn shell(&self, call: &ToolCall) -> CallDone {
        let input_bytes = call.arguments.len() as u64;
        let refused = |status: &str, content: String| {
            CallDone::Tool(ToolOutcome {
                status: status.into(),
                content,
                input_bytes,
                output_bytes: 0,
                state_effect: None,
                resource_id: None,
            })
        };
        let Ok(ShellArgs { program, args }) = serde_json::from_str::<ShellArgs>(&call.arguments) else {
            return refused("error", "error: the shell takes {\"program\": \"…\", \"args\": [\"…\"]}".into());
        };
        match self.runtime.shell_for_agent(&self.agent, &program, &args).await {
            Ok((result, binary)) => {
                let content = format!(
                    "exit code {}\nstdout:\n{}\nstderr:\n{}{}",
                    result.exit_code,
                    result.stdout,
                    result.stderr,
                    if result.truncated { "\n(output cut at 16 KiB)" } else { "" }
                );
                CallDone::Shell(ShellOutcome {
                    binary: binary.display().to_string(),
                    command: args.join(" "),
                    exit_code: result.exit_code,
                    stdout_bytes: result.stdout.len() as u64,
                    stderr_bytes: result.stderr.len() as u64,
                    stdout: result.stdout,
                    stderr: result.stderr,
                    content,
                })
            }
            Err(error) => refused("refused", format!("error: {error}")),
        }
    }

    /// An `on-inference` hook's `artifact`: stored in the node's artifact store as a
    /// `data` artifact `<agent>.<hook>@<session-id>.<n>` (the session's n-th), traced with
    /// its digest. Past [`SESSION_ARTIFACTS_MAX`] or [`HOOK_ARTIFACT_BYTES_MAX`], or when
    /// the store refuses it, the hook's log says why and nothing is stored.
    async fn keep_artifact(&mut self, task_id: String, turn: u32, hook: String, content: String) {
        let workdir = self.agent.manifest.workdir.clone();
        let refuse = |why: String| {
            hook_log(&workdir, &hook, &format!("hook `{hook}`: on-inference artifact not stored: {why}"))
        };
        if self.artifacts >= SESSION_ARTIFACTS_MAX {
            return refuse(format!("this session already stored {SESSION_ARTIFACTS_MAX} artifacts"));
        }
        if content.len() > HOOK_ARTIFACT_BYTES_MAX {
            return refuse(format!("{} bytes, more than {HOOK_ARTIFACT_BYTES_MAX}", content.len()));
        }
        self.artifacts += 1;
        let session_id = self.session.session_id().to_owned();
        let mut name = format!("{}.{hook}", self.agent.manifest.name);
        // Both parts are capsule names, so any prefix keeps the grammar.
        name.truncate(murmur_protocol::limits::CAPSULE_NAME_LEN_MAX);
        let meta = murmur_store::ArtifactMeta {
            name,
            version: format!("{session_id}.{}", self.artifacts),
            kind: murmur_store::CapsuleKind::Data,
            runtime: murmur_store::Platform::Native,
            description: format!(
                "what hook `{hook}` of agent `{}` returned at on-inference, turn {turn} of task {task_id}",
                self.agent.manifest.name
            ),
            tags: vec!["hook-artifact".into(), format!("session:{session_id}")],
            input_schema: None,
            output_schema: None,
        };
        let bytes = content.len() as u64;
        let store = self.runtime.store().clone();
        // The store fsyncs what it writes: off the executor.
        let added = tokio::task::spawn_blocking(move || store.add(&meta, content.as_bytes(), None)).await;
        match added {
            Ok(Ok(stored)) => self.trace.append(&Record {
                ts_ms: now_ms(),
                event: Event::Artifact {
                    task_id,
                    turn,
                    hook,
                    name: stored.meta.name,
                    version: stored.meta.version,
                    digest: stored.content.to_string(),
                    bytes,
                },
            }),
            Ok(Err(error)) => refuse(format!("{error:#}")),
            Err(error) => refuse(error.to_string()),
        }
    }
}

/// The port between tasks: nothing asks for input and nothing cancels.
struct NoTask;

impl TaskPort for NoTask {
    fn request_input(
        &self,
        _prompt: String,
        _timeout: std::time::Duration,
    ) -> PortFuture<'_, Result<String, String>> {
        Box::pin(async { Err("no task is running in this agent session".to_owned()) })
    }

    fn traceparent(&self) -> Option<String> {
        None
    }
}

#[derive(serde::Deserialize)]
struct ShellArgs {
    program: String,
    #[serde(default)]
    args: Vec<String>,
}

/// One driver call: the decoded reply, its continuation id, and its token count.
async fn drive_turn(
    runtime: &Runtime,
    agent: &Agent,
    data: String,
    tokens: Tiktoken,
) -> Result<(TurnReply, Option<String>, u64), String> {
    let result = runtime.run_driver(agent, data).await?;
    let json = murmur_runtime::ToolResultJson::from(&result);
    let raw = json.data.clone().unwrap_or_default();
    if json.status != "passed" {
        let why =
            json.summary.or(json.data).unwrap_or_else(|| format!("the driver reported {}", json.status));
        return Err(why);
    }
    let reply = TurnReply::decode(&raw).map_err(|e| e.to_string())?;
    let continuation_id = json.metadata.iter().find(|(k, _)| k == "continuation_id").map(|(_, v)| v.clone());
    Ok((reply, continuation_id, tokens.count(&raw)))
}

/// A hook's `run-inference`: one completion through the agent's own driver, the same
/// invocation as a turn; counted host-side and traced with the hook as its origin.
struct HookInference {
    runtime: Runtime,
    agent: Arc<Agent>,
    trace: Arc<TraceFile>,
    tokens: Tiktoken,
    origin: String,
}

impl std::fmt::Debug for HookInference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HookInference").field("origin", &self.origin).finish_non_exhaustive()
    }
}

impl InferencePort for HookInference {
    fn complete<'a>(
        &'a self,
        _capsule: &'a Installed,
        request: InferenceRequest,
    ) -> PortFuture<'a, Result<InferenceResponse, String>> {
        Box::pin(async move {
            let started = now_ms();
            // `none` is the primary model; `some(m)` is sent as is, never replaced.
            let model = request.model.unwrap_or_else(|| self.agent.spec.model.clone());
            let messages: Vec<Message> = request
                .messages
                .into_iter()
                .map(|m| Message {
                    role: Role::parse_lenient(&m.role),
                    content: m.content,
                    tool_calls: Vec::new(),
                    tool_call_id: None,
                })
                .collect();
            let sent = u32::try_from(messages.len()).unwrap_or(u32::MAX);
            let turn = TurnRequest {
                format: wire::FORMAT.into(),
                model: model.clone(),
                system_prompt: request.system_prompt,
                messages,
                tools: Vec::new(),
                continuation_id: None,
                params: self.agent.spec.params.clone(),
            };
            let data = serde_json::to_string(&turn).map_err(|e| format!("cannot encode the request: {e}"))?;
            let input_tokens = self.tokens.count(&data);
            let span = tracing::info_span!("capsule.inference", origin = %self.origin, model = %model);
            let outcome = drive_turn(&self.runtime, &self.agent, data, self.tokens).instrument(span).await;
            let (output_tokens, decision, error) = match &outcome {
                Ok((_, _, output)) => (*output, "final", None),
                Err(error) => (0, "error", Some(error.clone())),
            };
            self.trace.append(&Record {
                ts_ms: now_ms(),
                event: Event::Inference {
                    task_id: None,
                    turn: None,
                    model: model.clone(),
                    input_tokens,
                    output_tokens,
                    decision: decision.into(),
                    messages_sent: sent,
                    continued: false,
                    duration_ms: now_ms().saturating_sub(started),
                    origin: Some(self.origin.clone()),
                    error,
                },
            });
            let (reply, _, output_tokens) = outcome?;
            Ok(InferenceResponse { text: reply.text, model_used: model, input_tokens, output_tokens })
        })
    }
}

/// `trace.jsonl`, appended one whole line per write.
struct TraceFile {
    file: Mutex<std::fs::File>,
}

impl TraceFile {
    fn create(dir: &Path) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let file = std::fs::OpenOptions::new().create(true).append(true).open(dir.join("trace.jsonl"))?;
        Ok(Self { file: Mutex::new(file) })
    }

    fn append(&self, record: &Record) {
        let line = record.to_line();
        let mut file = self.file.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // One write call per record: a crash leaves whole lines (an OS crash may leave a
        // torn last line, which `mur trace` reports by its number).
        if let Err(error) = file.write_all(line.as_bytes()) {
            tracing::warn!(%error, "cannot append to trace.jsonl");
        }
    }
}

/// Writes a `write-manifests` commit: all of it, or (on a bad entry) nothing.
fn write_manifests(workdir: &Path, manifests: &[lifecycle::ToolManifest]) -> Result<(), String> {
    if manifests.len() > STAGED_MANIFESTS_MAX {
        return Err(format!("{} manifests, more than {STAGED_MANIFESTS_MAX}", manifests.len()));
    }
    for manifest in manifests {
        if !plain_name(&manifest.binary_name) {
            return Err(format!("`{}` is not a plain binary name", manifest.binary_name));
        }
        if manifest.content.len() > STAGED_MANIFEST_BYTES_MAX {
            return Err(format!(
                "the manifest of `{}` is larger than {STAGED_MANIFEST_BYTES_MAX} bytes",
                manifest.binary_name
            ));
        }
    }
    for manifest in manifests {
        let dir = workdir.join("tools").join(&manifest.binary_name);
        std::fs::create_dir_all(&dir)
            .and_then(|()| std::fs::write(dir.join("manifest.toml"), &manifest.content))
            .map_err(|e| format!("cannot write {}: {e}", dir.display()))?;
    }
    Ok(())
}

/// The session that ran `task_id` of the agent working in `workdir`, if any.
#[must_use]
pub fn session_of(workdir: &Path, task_id: &str) -> Option<(String, PathBuf)> {
    if !plain_name(task_id) {
        return None;
    }
    let session = std::fs::read_to_string(workdir.join("session-index").join(task_id)).ok()?;
    let session = session.trim().to_owned();
    plain_name(&session).then(|| {
        let trace = workdir.join("sessions").join(&session).join("trace.jsonl");
        (session, trace)
    })
}

fn index_session(workdir: &Path, task_id: &str, session_id: &str) -> std::io::Result<()> {
    if !plain_name(task_id) {
        return Ok(());
    }
    let dir = workdir.join("session-index");
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join(task_id), session_id)
}

/// A task or session id that is safe as one file name.
fn plain_name(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 128
        && text.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Appends `line` to `<workdir>/logs/hook-<hook>.log`.
fn hook_log(workdir: &Path, hook: &str, line: &str) {
    let line = cut(line);
    let path = workdir.join("logs").join(format!("hook-{hook}.log"));
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut file| file.write_all(format!("{} {line}\n", now_ms()).as_bytes()));
    if let Err(error) = written {
        tracing::warn!(%error, path = %path.display(), "cannot write the hook log");
    }
}

/// Bytes of a driver's or hook's error text kept (in the trace, the task status and the
/// hook log): a provider's error body can be megabytes.
const ERROR_BYTES_MAX: usize = 4096;

fn cut(text: &str) -> String {
    if text.len() <= ERROR_BYTES_MAX {
        return text.to_owned();
    }
    let end = (0..=ERROR_BYTES_MAX).rev().find(|i| text.is_char_boundary(*i)).unwrap_or(0);
    format!("{}… [cut: {} bytes in all]", &text[..end], text.len())
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
