use std::collections::VecDeque;

use super::*;
use crate::hooks::handler_of;
use crate::wire::FinishReason;

struct Words;

impl Tokenizer for Words {
    fn count(&self, text: &str) -> u64 {
        text.split_whitespace().count() as u64
    }
}

fn spec(name: &str) -> ToolSpec {
    ToolSpec {
        name: name.into(),
        description: format!("the {name} tool"),
        input_schema: serde_json::json!({"type": "object"}),
    }
}

fn settings() -> Settings {
    Settings {
        capsule_name: "helper".into(),
        capsule_version: "0.1.0".into(),
        model: "m1".into(),
        system_prompt: Some("be brief".into()),
        max_turns: 4,
        max_task_reopens: 1,
        context_window: 1000,
        compaction_threshold: 0.8,
        compaction_model: Some("small".into()),
        tools: vec![spec("wordcount"), spec("shell")],
        shell_tool: Some("shell".into()),
        capabilities: vec!["tools:wordcount".into()],
        params: serde_json::Value::Null,
    }
}

fn call(id: &str, name: &str) -> ToolCall {
    ToolCall { id: id.into(), name: name.into(), arguments: r#"{"path":"notes.txt"}"#.into() }
}

fn calls(tool_calls: Vec<ToolCall>) -> Result<Inferred, String> {
    Ok(Inferred {
        reply: TurnReply { text: String::new(), tool_calls, finish_reason: FinishReason::ToolCalls },
        continuation_id: None,
        input_tokens: 10,
        output_tokens: 2,
    })
}

fn answer(text: &str) -> Result<Inferred, String> {
    Ok(Inferred {
        reply: TurnReply { text: text.into(), tool_calls: vec![], finish_reason: FinishReason::Stop },
        continuation_id: None,
        input_tokens: 12,
        output_tokens: 3,
    })
}

fn continuing(mut reply: Result<Inferred, String>, id: &str) -> Result<Inferred, String> {
    if let Ok(inferred) = &mut reply {
        inferred.continuation_id = Some(id.into());
    }
    reply
}

fn task(id: &str, context: &str) -> TaskStart {
    TaskStart {
        task_id: id.into(),
        context_id: context.into(),
        source: "a2a".into(),
        text: "count the words".into(),
    }
}

type HookScript = Box<dyn FnMut(&HookEvent) -> Vec<HookAnswer>>;

/// Drives a session as the runner would, answering from scripts, and keeps every output.
struct Harness {
    session: Session<Words>,
    now: u64,
    replies: VecDeque<Result<Inferred, String>>,
    hooks: HookScript,
    /// Every output, in order.
    seen: Vec<Output>,
    /// Stop before answering the next `Infer` (to cancel mid-turn).
    pause_at_turn: Option<u32>,
}

impl Harness {
    fn new(settings: Settings, replies: Vec<Result<Inferred, String>>) -> Self {
        Self {
            session: Session::new(settings, "s-1".into(), Words),
            now: 1_000,
            replies: replies.into(),
            hooks: Box::new(|_| Vec::new()),
            seen: Vec::new(),
            pause_at_turn: None,
        }
    }

    fn with_hooks(mut self, hooks: impl FnMut(&HookEvent) -> Vec<HookAnswer> + 'static) -> Self {
        self.hooks = Box::new(hooks);
        self
    }

    fn input(&mut self, input: Input) {
        self.now += 5;
        self.session.handle(self.now, input).unwrap();
        self.drive();
    }

    /// Answers outputs until the machine waits on something the script does not answer.
    fn drive(&mut self) {
        while let Some(output) = self.session.poll_output() {
            self.seen.push(output.clone());
            self.now += 1;
            let next = match output {
                Output::Dispatch(event) => Some(Input::HooksAnswered((self.hooks)(&event))),
                Output::Infer { turn, .. } if self.pause_at_turn == Some(turn) => None,
                Output::Infer { .. } => {
                    Some(Input::Inferred(self.replies.pop_front().expect("a scripted reply")))
                }
                Output::Call { call, shell: true, .. } => {
                    Some(Input::CallDone(CallDone::Shell(ShellOutcome {
                        binary: "/usr/bin/wc".into(),
                        command: call.arguments.clone(),
                        exit_code: 0,
                        stdout: "3".into(),
                        stderr: String::new(),
                        stdout_bytes: 1,
                        stderr_bytes: 0,
                        content: "exit 0: 3".into(),
                    })))
                }
                Output::Call { call, .. } => Some(Input::CallDone(CallDone::Tool(ToolOutcome {
                    status: "passed".into(),
                    content: format!("{} words", call.id.len()),
                    input_bytes: call.arguments.len() as u64,
                    output_bytes: 7,
                    state_effect: Some("read".into()),
                    resource_id: Some("file:notes.txt".into()),
                }))),
                _ => None,
            };
            if let Some(input) = next {
                self.session.handle(self.now, input).unwrap();
            }
        }
    }

    fn events(&self) -> Vec<&'static str> {
        self.seen
            .iter()
            .filter_map(|o| match o {
                Output::Trace(record) => Some(event_name(&record.event)),
                _ => None,
            })
            .collect()
    }

    fn requests(&self) -> Vec<&TurnRequest> {
        self.seen
            .iter()
            .filter_map(|o| match o {
                Output::Infer { request, .. } => Some(request),
                _ => None,
            })
            .collect()
    }

    fn ended(&self) -> Vec<&TaskEnd> {
        self.seen
            .iter()
            .filter_map(|o| match o {
                Output::TaskEnded { end, .. } => Some(end),
                _ => None,
            })
            .collect()
    }

    fn hook_lines(&self) -> Vec<&str> {
        self.seen
            .iter()
            .filter_map(|o| match o {
                Output::HookLog { line, .. } => Some(line.as_str()),
                _ => None,
            })
            .collect()
    }
}

fn event_name(event: &Event) -> &'static str {
    match event {
        Event::SessionStart { .. } => "session_start",
        Event::SessionEnd { .. } => "session_end",
        Event::TaskStart { .. } => "task_start",
        Event::TaskReopen { .. } => "task_reopen",
        Event::TaskEnd { .. } => "task_end",
        Event::Inference { .. } => "inference",
        Event::ToolCall { .. } => "tool_call",
        Event::Shell { .. } => "shell",
        Event::Compaction { .. } => "compaction",
        Event::HookDispatchError { .. } => "hook_dispatch_error",
        Event::Artifact { .. } => "artifact",
    }
}

#[test]
fn three_turns_with_a_tool_and_a_shell_call_complete() {
    let replies =
        vec![calls(vec![call("c1", "wordcount")]), calls(vec![call("c2", "shell")]), answer("3 words")];
    let mut h = Harness::new(settings(), replies);
    h.input(Input::StartTask(task("t1", "ctx")));
    assert_eq!(h.ended(), [&TaskEnd::Completed("3 words".into())]);
    assert_eq!(
        h.events(),
        [
            "session_start",
            "task_start",
            "inference",
            "tool_call",
            "inference",
            "shell",
            "inference",
            "task_end"
        ]
    );
    // Without continuation every turn sends the whole history.
    let sent: Vec<usize> = h.requests().iter().map(|r| r.messages.len()).collect();
    assert_eq!(sent, [1, 3, 5]);
    let first = h.requests()[0];
    assert_eq!((first.model.as_str(), first.system_prompt.as_deref()), ("m1", Some("be brief")));
    assert_eq!(first.tools.len(), 2);
    assert!(h.requests().iter().all(|r| r.continuation_id.is_none()));
    // The tool's declared effect and resource are recorded verbatim, with its arguments.
    let tool = h.seen.iter().find_map(|o| match o {
        Output::Trace(Record { event: e @ Event::ToolCall { .. }, .. }) => Some(e.clone()),
        _ => None,
    });
    let Some(Event::ToolCall { state_effect, resource_id, arguments, turn, .. }) = tool else { panic!() };
    assert_eq!(
        (state_effect.as_deref(), resource_id.as_deref(), turn),
        (Some("read"), Some("file:notes.txt"), 1)
    );
    assert_eq!(arguments.as_deref(), Some(r#"{"path":"notes.txt"}"#));
    // Hooks heard every stage in the specified order.
    let handlers: Vec<Handler> = h
        .seen
        .iter()
        .filter_map(|o| match o {
            Output::Dispatch(e) => Some(handler_of(e)),
            _ => None,
        })
        .collect();
    use Handler as H;
    assert_eq!(
        handlers,
        [
            H::SessionStart,
            H::TaskStart,
            H::Inference,
            H::ToolCall,
            H::Inference,
            H::Shell,
            H::Inference,
            H::TaskEnd
        ]
    );

    h.input(Input::End { exit_status: "idle".into() });
    let Some(Output::Trace(Record {
        event: Event::SessionEnd { turns, tool_calls, shell_calls, input_tokens, exit_status, .. },
        ..
    })) = h.seen.iter().rev().nth(1).cloned()
    else {
        panic!("{:?}", h.seen.last())
    };
    assert_eq!((turns, tool_calls, shell_calls, input_tokens), (3, 1, 1, 32));
    assert_eq!(exit_status, "idle");
    assert!(matches!(h.seen.last(), Some(Output::SessionEnded)));
}

#[test]
fn max_turns_stops_a_model_that_never_stops() {
    let replies = (0..10).map(|i| calls(vec![call(&format!("c{i}"), "wordcount")])).collect();
    let mut h = Harness::new(settings(), replies);
    h.input(Input::StartTask(task("t1", "ctx")));
    let [TaskEnd::Failed(reason)] = h.ended()[..] else { panic!("{:?}", h.ended()) };
    assert!(reason.contains("max_turns (4)"), "{reason}");
    assert_eq!(h.requests().len(), 4);
    // The last turn's calls could reach no model: they were not run.
    assert_eq!(h.events().iter().filter(|e| **e == "tool_call").count(), 3);
}

#[test]
fn a_reopen_after_max_turns_sends_a_history_with_every_call_answered() {
    let replies = (0..20).map(|i| calls(vec![call(&format!("c{i}"), "wordcount")])).collect();
    let reopen = |event: &HookEvent| match event {
        HookEvent::TaskEnd(_) => {
            vec![HookAnswer { hook: "again".into(), answer: Ok(HookOutput::ReopenTask("retry".into())) }]
        }
        _ => Vec::new(),
    };
    let mut h = Harness::new(settings(), replies).with_hooks(reopen);
    h.input(Input::StartTask(task("t1", "ctx")));
    assert_eq!(h.events().iter().filter(|e| **e == "task_reopen").count(), 1);
    for request in h.requests() {
        let asked: Vec<&str> =
            request.messages.iter().flat_map(|m| m.tool_calls.iter().map(|c| c.id.as_str())).collect();
        let answered: Vec<&str> = request.messages.iter().filter_map(|m| m.tool_call_id.as_deref()).collect();
        assert_eq!(asked, answered, "every call is answered, in order");
    }
    let reopened = &h.requests()[4].messages;
    assert!(reopened.iter().any(|m| m.content.starts_with("not run:")), "{reopened:?}");
}

#[test]
fn a_cancel_during_a_tool_call_answers_it_and_drops_the_continuation() {
    let mut h = Harness::new(
        settings(),
        vec![continuing(calls(vec![call("c1", "wordcount"), call("c2", "wordcount")]), "r1")],
    );
    // Stop the harness from answering the first call: cancel while it runs.
    h.session.handle(0, Input::StartTask(task("t1", "ctx"))).unwrap();
    let mut cancelled = false;
    while let Some(output) = h.session.poll_output() {
        let next = match output {
            Output::Dispatch(_) => Some(Input::HooksAnswered(Vec::new())),
            Output::Infer { .. } => Some(Input::Inferred(h.replies.pop_front().unwrap())),
            Output::Call { .. } if !cancelled => {
                cancelled = true;
                Some(Input::Cancel)
            }
            Output::TaskEnded { end, .. } => {
                assert_eq!(end, TaskEnd::Canceled);
                None
            }
            _ => None,
        };
        if let Some(input) = next {
            h.session.handle(1, input).unwrap();
        }
    }
    let answers: Vec<(Option<String>, String)> = h
        .session
        .history()
        .filter(|m| m.role == Role::Tool)
        .map(|m| (m.tool_call_id.clone(), m.content.clone()))
        .collect();
    assert_eq!(answers.len(), 2, "{answers:?}");
    assert!(answers.iter().all(|(_, text)| text == "not run: the task was canceled"));
    // The next task of the context resends everything.
    h.replies.push_back(answer("ok"));
    h.input(Input::StartTask(task("t2", "ctx")));
    assert_eq!(h.requests().last().unwrap().continuation_id, None);
}

#[test]
fn a_cancel_mid_turn_ends_the_task_and_refuses_the_late_answer() {
    let mut h = Harness::new(settings(), vec![calls(vec![call("c1", "wordcount")])]);
    h.pause_at_turn = Some(2);
    h.input(Input::StartTask(task("t1", "ctx")));
    assert!(h.ended().is_empty());
    h.input(Input::Cancel);
    assert_eq!(h.ended(), [&TaskEnd::Canceled]);
    let late = h.session.handle(99_999, Input::Inferred(answer("late")));
    assert_eq!(late, Err(Misuse { input: "an inference answer", phase: "idle" }));
    // The session takes the next task.
    h.replies.push_back(answer("ok"));
    h.pause_at_turn = None;
    h.input(Input::StartTask(task("t2", "ctx")));
    assert_eq!(h.ended().last(), Some(&&TaskEnd::Completed("ok".into())));
}

#[test]
fn every_arm_from_every_handler_commits_only_the_honoured_one() {
    let every = |event: &HookEvent| {
        let arms = vec![
            HookOutput::None,
            HookOutput::ReplaceContext(vec![lifecycle::Message {
                role: "user".into(),
                content: "summary".into(),
            }]),
            HookOutput::WriteManifests(vec![]),
            HookOutput::Artifact(format!("{:?}", handler_of(event))),
            HookOutput::ReopenTask("try again".into()),
        ];
        arms.into_iter().map(|arm| HookAnswer { hook: "all-arms".into(), answer: Ok(arm) }).collect()
    };
    let mut settings = settings();
    settings.context_window = 1_000_000;
    let replies = vec![calls(vec![call("c1", "wordcount")]), answer("first"), answer("second")];
    let mut h = Harness::new(settings, replies).with_hooks(every);
    h.input(Input::StartTask(task("t1", "ctx")));

    // on-task-end's reopen-task ran the loop once more (max_task_reopens = 1), with feedback.
    assert_eq!(h.ended(), [&TaskEnd::Completed("second".into())]);
    assert_eq!(h.events().iter().filter(|e| **e == "task_reopen").count(), 1);
    let reopened = &h.requests()[2].messages;
    let tail: Vec<_> = reopened[reopened.len() - 2..].iter().map(|m| (m.role, m.content.as_str())).collect();
    assert_eq!(tail, [(Role::Assistant, "first"), (Role::User, "try again")]);
    assert!(
        h.hook_lines().iter().any(|l| l.contains("max_task_reopens (1) reached")),
        "{:?}",
        h.hook_lines()
    );
    // on-inference's artifact was committed once per turn.
    let stored = h.seen.iter().filter(|o| matches!(o, Output::StoreArtifact { .. })).count();
    assert_eq!(stored, 3);
    // Every other non-none arm: a log line and a trace record each, per dispatch. Handlers
    // with no honoured arm discard all four (session-start, task-start, tool-call); the
    // others three (3 × inference, 2 × task-end).
    let faults = h.events().iter().filter(|e| **e == "hook_dispatch_error").count();
    assert_eq!(faults, 3 * 4 + 5 * 3);
    assert!(h.hook_lines().iter().any(|l| l.contains("on-tool-call returned reopen-task")));
    // No compaction was due, so replace-context was never honoured here.
    assert!(!h.events().contains(&"compaction"));
}

#[test]
fn hook_errors_are_logged_never_traced_and_never_stop_the_loop() {
    let failing = |_: &HookEvent| vec![HookAnswer { hook: "flaky".into(), answer: Err("disk full".into()) }];
    let mut h = Harness::new(settings(), vec![answer("done")]).with_hooks(failing);
    h.input(Input::StartTask(task("t1", "ctx")));
    assert_eq!(h.ended(), [&TaskEnd::Completed("done".into())]);
    assert!(!h.events().contains(&"hook_dispatch_error"));
    assert!(h.hook_lines().iter().all(|l| l.contains("flaky") && l.contains("disk full")));
    assert_eq!(h.hook_lines().len(), 4);
}

#[test]
fn compaction_fires_at_the_threshold_and_its_summary_replaces_the_history() {
    let mut settings = settings();
    settings.context_window = 20; // threshold: 16 tokens
    let summarise = |event: &HookEvent| match event {
        HookEvent::Compaction(c) => {
            assert_eq!(
                (c.threshold, c.model.as_deref(), c.system_prompt.as_deref()),
                (0.8, Some("small"), None)
            );
            assert!(c.session_tokens >= 16);
            assert!(c.messages.iter().any(|m| m.content.contains("[tool call c1: wordcount(")));
            vec![HookAnswer {
                hook: "compactor".into(),
                answer: Ok(HookOutput::ReplaceContext(vec![lifecycle::Message {
                    role: "user".into(),
                    content: "summary so far".into(),
                }])),
            }]
        }
        _ => Vec::new(),
    };
    let long = ToolCall {
        id: "c1".into(),
        name: "wordcount".into(),
        arguments: "one two three four five six seven eight nine ten eleven twelve".into(),
    };
    let replies = vec![continuing(calls(vec![long]), "resp-1"), answer("done")];
    let mut h = Harness::new(settings, replies).with_hooks(summarise);
    h.input(Input::StartTask(task("t1", "ctx")));
    assert_eq!(h.ended(), [&TaskEnd::Completed("done".into())]);
    assert_eq!(h.events().iter().filter(|e| **e == "compaction").count(), 1);
    let second = h.requests()[1];
    // The replacement is the whole history, sent in full: compaction dropped the continuation.
    assert_eq!(second.messages, [Message::user("summary so far")]);
    assert_eq!(second.continuation_id, None);
}

#[test]
fn continuation_sends_only_the_delta_within_one_context() {
    let replies = vec![
        continuing(calls(vec![call("c1", "wordcount")]), "resp-1"),
        continuing(answer("one"), "resp-2"),
        continuing(answer("two"), "resp-3"),
        answer("three"),
        answer("four"),
        answer("five"),
    ];
    let mut h = Harness::new(settings(), replies);
    h.input(Input::StartTask(task("t1", "ctx-a")));
    // Turn 2 continues: only the tool result, plus the id.
    let r = h.requests();
    assert_eq!((r[0].messages.len(), r[0].continuation_id.as_deref()), (1, None));
    assert_eq!(r[1].continuation_id.as_deref(), Some("resp-1"));
    assert_eq!(r[1].messages, [Message::tool("c1", "2 words")]);

    // A second task in the same context continues the conversation with its new message.
    h.input(Input::StartTask(task("t2", "ctx-a")));
    let r = h.requests();
    assert_eq!(r[2].continuation_id.as_deref(), Some("resp-2"));
    assert_eq!(r[2].messages, [Message::user("count the words")]);
    h.input(Input::StartTask(task("t3", "ctx-a")));
    assert_eq!(h.requests()[3].continuation_id.as_deref(), Some("resp-3"));
    // "three" came back without the key: the next turn is a full resend of all 9 messages.
    h.input(Input::StartTask(task("t4", "ctx-a")));
    let r = h.requests();
    assert_eq!((r[4].continuation_id.as_deref(), r[4].messages.len()), (None, 9));

    // Another context never reuses a continuation, and starts its own history.
    let mut h = Harness::new(settings(), vec![continuing(answer("one"), "resp-1"), answer("two")]);
    h.input(Input::StartTask(task("t1", "ctx-a")));
    h.input(Input::StartTask(task("t2", "ctx-b")));
    let r = h.requests();
    assert_eq!((r[1].continuation_id.as_deref(), r[1].messages.len()), (None, 1));
    // session_tokens counts the logical history, not what a continuing turn sent.
    assert_eq!(h.session.session_tokens(), 2 + 3 + 1);
}

#[test]
fn a_tool_that_is_not_offered_is_refused_without_running() {
    let replies = vec![calls(vec![call("c1", "rm-rf")]), answer("sorry")];
    let mut h = Harness::new(settings(), replies);
    h.input(Input::StartTask(task("t1", "ctx")));
    assert!(!h.seen.iter().any(|o| matches!(o, Output::Call { .. })));
    let second = h.requests()[1];
    let result = second.messages.last().unwrap();
    assert_eq!(result.role, Role::Tool);
    assert!(result.content.contains("no tool named `rm-rf`"), "{}", result.content);
    assert_eq!(h.ended(), [&TaskEnd::Completed("sorry".into())]);
}

#[test]
fn a_failed_turn_fails_the_task_and_says_which_turn() {
    let mut h =
        Harness::new(settings(), vec![calls(vec![call("c1", "wordcount")]), Err("provider said 401".into())]);
    h.input(Input::StartTask(task("t1", "ctx")));
    let [TaskEnd::Failed(reason)] = h.ended()[..] else { panic!() };
    assert!(reason.contains("turn 2") && reason.contains("401"), "{reason}");
    let errors: Vec<_> = h
        .seen
        .iter()
        .filter_map(|o| match o {
            Output::Trace(Record { event: Event::Inference { error: Some(e), decision, .. }, .. }) => {
                Some((e.clone(), decision.clone()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(errors, [("provider said 401".to_owned(), "error".to_owned())]);
}

#[test]
fn inputs_out_of_turn_are_refused_and_change_nothing() {
    let mut session = Session::new(settings(), "s".into(), Words);
    assert!(session.handle(0, Input::Cancel).is_err());
    assert!(session.handle(0, Input::Inferred(answer("x"))).is_err());
    assert!(session.poll_output().is_none());
    session.handle(0, Input::StartTask(task("t1", "c"))).unwrap();
    let busy = session.handle(1, Input::StartTask(task("t2", "c")));
    assert_eq!(busy, Err(Misuse { input: "a task start", phase: "waiting for hooks" }));
    let ending = session.handle(1, Input::End { exit_status: "shutdown".into() });
    assert!(ending.is_err(), "a session with a task running must have it canceled first");
}
