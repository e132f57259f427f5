//! The agent loop with real components: the runtime, a driver and a hook built from
//! `capsules/` (run `bash capsules/build.sh` first; `tests/run.sh` does), the `wordcount`
//! tool and a real shell command. The driver plays a script (`capsules/fixtures`), so no
//! provider is involved.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::{NoInput, Node};
use murmur_agent::runner::{AgentRunner, TaskLink};
use murmur_agent::session::{TaskEnd, TaskStart};
use murmur_api::session_trace::{self, Event};
use murmur_runtime::CapsuleManifest;
use murmur_store::CapsuleKind;

/// A node with the scripted driver and the arms hook in its store.
fn scripted_node() -> Node {
    let node = Node::new();
    node.stock("scripted-driver", "scripted_driver", CapsuleKind::Driver);
    node.stock("arms-hook", "arms_hook", CapsuleKind::Hook);
    node
}

/// Agent `helper` on a scripted node.
trait ScriptedAgent {
    fn agent(&self, script: &serde_json::Value, hook_env: &str, extra: &str) -> Arc<murmur_runtime::Agent>;
}

impl ScriptedAgent for Node {
    /// Installs agent `helper` with `script` (the driver's replies), hook env and extras.
    fn agent(&self, script: &serde_json::Value, hook_env: &str, extra: &str) -> Arc<murmur_runtime::Agent> {
        let manifest = format!(
            r#"name = "helper"
version = "0.1.0"
kind = "agent"
[capabilities]
tools = ["wordcount"]
shell = {{ allow = ["wc"] }}
[inference]
model = "gpt-4o-mini"
driver = {{ artifact = "scripted-driver@0.1.0" }}
max_turns = 4
{extra}
[[hooks]]
artifact = "arms-hook@0.1.0"
[wasi]
env = {{ SCRIPT = '{script}' {hook_env} }}
"#
        );
        self.install_agent(&manifest)
    }
}

fn link(task: &str) -> TaskLink {
    TaskLink {
        start: TaskStart {
            task_id: task.into(),
            context_id: "ctx".into(),
            source: "a2a".into(),
            text: "count the words".into(),
        },
        port: Arc::new(NoInput),
    }
}

fn trace_of(agent: &murmur_runtime::Agent) -> Vec<(usize, session_trace::Record)> {
    let sessions = agent.manifest.workdir.join("sessions");
    let dir = std::fs::read_dir(&sessions).unwrap().next().unwrap().unwrap().path();
    session_trace::parse(&std::fs::read_to_string(dir.join("trace.jsonl")).unwrap()).unwrap()
}

fn tool_call(id: &str, name: &str, arguments: &serde_json::Value) -> serde_json::Value {
    serde_json::json!({ "finish_reason": "tool_calls", "tool_calls": [{ "id": id, "name": name, "arguments": arguments.to_string() }] })
}

#[tokio::test]
async fn three_turns_with_a_wasm_tool_and_a_shell_command() {
    let node = scripted_node();
    std::fs::create_dir_all(node.dir.path().join("work/helper")).unwrap();
    std::fs::write(node.dir.path().join("work/helper/notes.txt"), "one two three\n").unwrap();
    let script = serde_json::json!([
        tool_call("c1", "wordcount", &serde_json::json!({ "text": "a b c d" })),
        tool_call("c2", "shell", &serde_json::json!({ "program": "wc", "args": ["-w", "notes.txt"] })),
        { "text": "notes.txt has 3 words", "finish_reason": "stop" },
    ]);
    let agent = node.agent(&script, "", "");
    let end = AgentRunner::new(node.runtime.clone()).run_task(agent.clone(), link("t1")).await;
    assert_eq!(end, TaskEnd::Completed("notes.txt has 3 words".into()));

    let records = trace_of(&agent);
    let events: Vec<&str> = records
        .iter()
        .map(|(_, r)| match &r.event {
            Event::SessionStart { .. } => "session_start",
            Event::TaskStart { .. } => "task_start",
            Event::Inference { .. } => "inference",
            Event::ToolCall { .. } => "tool_call",
            Event::Shell { .. } => "shell",
            Event::TaskEnd { .. } => "task_end",
            Event::SessionEnd { .. } => "session_end",
            _ => "other",
        })
        .collect();
    assert_eq!(
        events,
        [
            "session_start",
            "task_start",
            "inference",
            "tool_call",
            "inference",
            "shell",
            "inference",
            "task_end",
            "session_end"
        ]
    );
    let shell = records.iter().find_map(|(_, r)| match &r.event {
        Event::Shell { binary, command, exit_code, .. } => {
            Some((binary.clone(), command.clone(), *exit_code))
        }
        _ => None,
    });
    let (binary, command, exit_code) = shell.unwrap();
    assert!(binary.starts_with('/') && binary.ends_with("/wc"), "{binary}");
    assert_eq!((command.as_str(), exit_code), ("-w notes.txt", 0));
    let tool = records.iter().find_map(|(_, r)| match &r.event {
        Event::ToolCall { state_effect, resource_id, status, .. } => {
            Some((state_effect.clone(), resource_id.clone(), status.clone()))
        }
        _ => None,
    });
    let (effect, resource, status) = tool.unwrap();
    assert_eq!((effect.as_deref(), status.as_str()), (Some("read"), "passed"));
    assert!(resource.unwrap().starts_with("text:fnv64:"));
    let summary = &session_trace::summarize(&records)[0];
    assert_eq!((summary.turns, summary.tool_calls, summary.shell_calls, summary.ended), (3, 1, 1, true));
    assert!(summary.input_tokens > 0 && summary.output_tokens > 0, "{summary:?}");
}

#[tokio::test]
async fn max_turns_stops_a_model_that_never_stops() {
    let node = scripted_node();
    let script = serde_json::json!([tool_call("c", "wordcount", &serde_json::json!({ "text": "again" }))]);
    let agent = node.agent(&script, "", "");
    let end = AgentRunner::new(node.runtime.clone()).run_task(agent, link("t1")).await;
    let TaskEnd::Failed(reason) = end else { panic!("{end:?}") };
    assert!(reason.contains("max_turns (4)"), "{reason}");
}

#[tokio::test]
async fn hooks_commit_their_honoured_arm_and_log_the_rest() {
    let node = scripted_node();
    let script = serde_json::json!([{ "text": "done", "finish_reason": "stop" }]);
    // Every handler returns artifact; on-task-end reopens (once: max_task_reopens = 1).
    let env = r#", HOOK_DEFAULT = "artifact:note", HOOK_ON_TASK_END = "reopen-task:check again""#;
    let agent = node.agent(&script, env, "max_task_reopens = 1");
    let end = AgentRunner::new(node.runtime.clone()).run_task(agent.clone(), link("t1")).await;
    assert_eq!(end, TaskEnd::Completed("done".into()));
    let records = trace_of(&agent);
    let reopens = records.iter().filter(|(_, r)| matches!(r.event, Event::TaskReopen { .. })).count();
    assert_eq!(reopens, 1);
    // artifact is honoured only at on-inference: elsewhere it is a dispatch error.
    let faults: Vec<String> = records
        .iter()
        .filter_map(|(_, r)| match &r.event {
            Event::HookDispatchError { handler, arm, .. } => Some(format!("{handler}:{arm}")),
            _ => None,
        })
        .collect();
    assert!(faults.contains(&"on-session-start:artifact".to_owned()), "{faults:?}");
    assert!(!faults.iter().any(|f| f.starts_with("on-inference")), "{faults:?}");
    let log = std::fs::read_to_string(agent.manifest.workdir.join("logs/hook-arms-hook.log")).unwrap();
    assert!(log.contains("on-task-start returned artifact"), "{log}");
    assert!(log.contains("max_task_reopens (1) reached"), "{log}");
    // The honoured on-inference artifacts (one per turn: the first run and the reopen) are
    // `data` artifacts in the node's store, each traced with its digest.
    let traced: Vec<(String, String, String)> = records
        .iter()
        .filter_map(|(_, r)| match &r.event {
            Event::Artifact { name, version, digest, .. } => {
                Some((name.clone(), version.clone(), digest.clone()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(traced.len(), 2, "{records:?}");
    let stored: Vec<_> = node
        .runtime
        .store()
        .list()
        .unwrap()
        .into_iter()
        .filter(|s| s.meta.kind == CapsuleKind::Data)
        .collect();
    assert_eq!(stored.len(), 2);
    for (name, version, digest) in &traced {
        let found = node.runtime.store().find(name, Some(version)).unwrap().expect("stored");
        assert_eq!(
            (found.meta.name.as_str(), found.content.to_string()),
            ("helper.arms-hook", digest.clone())
        );
        assert_eq!(node.runtime.store().content(&found).unwrap(), b"note");
    }
}

#[tokio::test]
async fn one_session_runs_several_tasks_under_one_id() {
    let node = scripted_node();
    let script = serde_json::json!([{ "text": "done", "finish_reason": "stop" }]);
    let agent = node.agent(&script, r#", HOOK_ON_SESSION_START = "artifact:x""#, "");
    let runner = AgentRunner::new(node.runtime.clone());
    let mut session = runner.open(agent.clone()).await.unwrap();
    for task in ["t1", "t2"] {
        assert_eq!(session.run_task(link(task)).await, TaskEnd::Completed("done".into()));
    }
    let id = session.id().to_owned();
    session.close("idle").await;
    let records = trace_of(&agent);
    let count = |name: &str| {
        records.iter().filter(|(_, r)| serde_json::to_value(r).unwrap()["event"] == name).count()
    };
    assert_eq!(
        (count("session_start"), count("task_start"), count("task_end"), count("session_end")),
        (1, 2, 2, 1)
    );
    // on-session-start fired once for the two tasks (its discarded arm, traced once).
    assert_eq!(count("hook_dispatch_error"), 1, "{records:?}");
    assert!(matches!(&records[0].1.event, Event::SessionStart { session_id, .. } if *session_id == id));
    assert!(
        matches!(&records.last().unwrap().1.event, Event::SessionEnd { exit_status, .. } if exit_status == "idle")
    );
    for task in ["t1", "t2"] {
        let (session, _) = murmur_agent::runner::session_of(&agent.manifest.workdir, task).unwrap();
        assert_eq!(session, id);
    }
}

#[tokio::test]
async fn a_hooks_run_inference_goes_through_the_agents_driver_and_is_traced() {
    let node = scripted_node();
    // Turn 1 calls a tool; the growing history crosses a tiny window, so on-compaction
    // fires and the hook summarises through run-inference (the script's next reply).
    let script = serde_json::json!([
        tool_call("c1", "wordcount", &serde_json::json!({ "text": "a b c d e f g h" })),
        { "text": "summary of the work so far", "finish_reason": "stop" },
    ]);
    let env = r#", HOOK_ON_COMPACTION = "summarise""#;
    let agent = node.agent(&script, env, "context_window = 40\ncompaction = { threshold = 0.5 }");
    let end = AgentRunner::new(node.runtime.clone()).run_task(agent.clone(), link("t1")).await;
    let records = trace_of(&agent);
    let hook_calls: Vec<_> = records
        .iter()
        .filter_map(|(_, r)| match &r.event {
            Event::Inference { origin: Some(origin), model, .. } => Some((origin.clone(), model.clone())),
            _ => None,
        })
        .collect();
    assert!(!hook_calls.is_empty(), "{records:?}");
    assert_eq!(hook_calls[0], ("hook:arms-hook".to_owned(), "gpt-4o-mini".to_owned()));
    assert!(records.iter().any(|(_, r)| matches!(r.event, Event::Compaction { .. })), "{end:?}");
}

#[tokio::test]
async fn a_hook_built_against_an_older_lifecycle_version_does_not_load() {
    let node = scripted_node();
    node.stock("old-hook", "old_hook", CapsuleKind::Hook);
    let manifest = r#"name = "helper"
version = "0.1.0"
kind = "agent"
[inference]
model = "m"
driver = { artifact = "scripted-driver@0.1.0" }
[[hooks]]
artifact = "old-hook@0.1.0"
"#;
    let manifest = CapsuleManifest::parse(manifest, Path::new("/"), node.dir.path()).unwrap();
    let err = node.runtime.install_agent(manifest).unwrap_err();
    let text = format!("{err:#}");
    for expected in [
        "hook old-hook@0.1.0",
        "murmur:hook/lifecycle@0.5.0",
        "murmur:hook/lifecycle@0.4.0",
        "rebuild",
        "mur install",
    ] {
        assert!(text.contains(expected), "`{expected}` missing from: {text}");
    }
    assert!(node.runtime.agent("helper").is_none());
}

#[tokio::test]
async fn the_shipped_compactor_replaces_the_history_with_a_summary_from_the_driver() {
    let node = scripted_node();
    node.stock("compactor", "compactor", CapsuleKind::Hook);
    let manifest = r#"name = "helper"
version = "0.1.0"
kind = "agent"
[inference]
model = "gpt-4o-mini"
driver = { artifact = "scripted-driver@0.1.0" }
context_window = 4
compaction = { threshold = 0.5, model = "small-model" }
[[hooks]]
artifact = "compactor@0.1.0"
[wasi]
env = { SCRIPT = '[{"text": "done", "finish_reason": "stop"}]', SCRIPT_SUMMARY = "the user wants words counted", COMPACTOR_KEEP = "0" }
"#;
    let manifest = CapsuleManifest::parse(manifest, Path::new("/"), node.dir.path()).unwrap();
    let agent = node.runtime.install_agent(manifest).unwrap();
    // The task's text alone crosses 2 tokens: compaction fires before the first turn.
    let end = AgentRunner::new(node.runtime.clone()).run_task(agent.clone(), link("t1")).await;
    assert_eq!(end, TaskEnd::Completed("done".into()));
    let records = trace_of(&agent);
    let summary_call = records.iter().find_map(|(_, r)| match &r.event {
        Event::Inference { origin: Some(origin), model, error, .. } => {
            Some((origin.clone(), model.clone(), error.clone()))
        }
        _ => None,
    });
    assert_eq!(
        summary_call,
        Some(("hook:compactor".to_owned(), "small-model".to_owned(), None)),
        "{records:?}"
    );
    let compaction = records.iter().find_map(|(_, r)| match &r.event {
        Event::Compaction { hook, messages_before, messages_after, .. } => {
            Some((hook.clone(), *messages_before, *messages_after))
        }
        _ => None,
    });
    assert_eq!(compaction, Some(("compactor".to_owned(), 1, 1)));
}

#[tokio::test(flavor = "multi_thread")]
async fn async_hooks_neither_slow_the_loop_nor_write_dispatch_records() {
    let node = scripted_node();
    let script = serde_json::json!([{ "text": "done", "finish_reason": "stop" }]);
    let manifest = format!(
        r#"name = "helper"
version = "0.1.0"
kind = "agent"
[inference]
model = "gpt-4o-mini"
driver = {{ artifact = "scripted-driver@0.1.0" }}
[[hooks]]
artifact = "arms-hook@0.1.0"
execution_mode = "async"
[limits]
deadline_ms = 30000
[wasi]
env = {{ SCRIPT = '{script}', HOOK_DEFAULT = "slow:6000", HOOK_ON_INFERENCE = "artifact:x" }}
"#
    );
    let agent = node
        .runtime
        .install_agent(CapsuleManifest::parse(&manifest, Path::new("/"), node.dir.path()).unwrap())
        .unwrap();
    let began = std::time::Instant::now();
    let end = AgentRunner::new(node.runtime.clone()).run_task(agent.clone(), link("t1")).await;
    assert_eq!(end, TaskEnd::Completed("done".into()));
    // Four stages start a hook that sleeps 6 s; the task did not wait for any of them.
    assert!(began.elapsed() < Duration::from_secs(5), "the loop waited: {:?}", began.elapsed());
    let records = trace_of(&agent);
    assert!(!records.iter().any(|(_, r)| matches!(r.event, Event::HookDispatchError { .. })), "{records:?}");
    // The async hook's on-inference answer (an honoured arm) is only logged, never committed.
    let log = agent.manifest.workdir.join("logs/hook-arms-hook.log");
    let logged = (0..40).find_map(|_| {
        std::thread::sleep(Duration::from_millis(100));
        std::fs::read_to_string(&log).ok().filter(|l| l.contains("not committed: async hooks only observe"))
    });
    assert!(logged.is_some(), "no log line for the async hook's artifact");
    let stored = node.runtime.store().list().unwrap();
    assert!(!stored.iter().any(|s| s.meta.kind == CapsuleKind::Data), "an async hook's artifact was stored");
}

#[tokio::test]
async fn on_stage_runs_once_before_the_first_session_and_commits_write_manifests() {
    let node = scripted_node();
    let script = serde_json::json!([{ "text": "done", "finish_reason": "stop" }]);
    let agent = node.agent(&script, r#", HOOK_ON_STAGE = "write-manifests:binary = 'wc'""#, "");
    let runner = AgentRunner::new(node.runtime.clone());
    assert_eq!(runner.run_task(agent.clone(), link("t1")).await, TaskEnd::Completed("done".into()));
    let written = std::fs::read_to_string(agent.manifest.workdir.join("tools/x/manifest.toml")).unwrap();
    assert_eq!(written, "binary = 'wc'");

    // Another arm from on-stage: a log line, never a trace record (no session yet); and
    // staging happens once however many tasks run.
    let other = scripted_node();
    let agent = other.agent(&script, r#", HOOK_ON_STAGE = "reopen-task:again""#, "");
    let runner = AgentRunner::new(other.runtime.clone());
    for task in ["t1", "t2"] {
        assert_eq!(runner.run_task(agent.clone(), link(task)).await, TaskEnd::Completed("done".into()));
    }
    let log = std::fs::read_to_string(agent.manifest.workdir.join("logs/hook-arms-hook.log")).unwrap();
    assert_eq!(log.matches("on-stage returned reopen-task").count(), 1, "{log}");
    let sessions = agent.manifest.workdir.join("sessions");
    for session in std::fs::read_dir(sessions).unwrap() {
        let trace = std::fs::read_to_string(session.unwrap().path().join("trace.jsonl")).unwrap();
        assert!(!trace.contains("on-stage"), "{trace}");
    }
}
