//! Agents across the mesh with real processes: node C runs agent `helper` (the scripted
//! driver and the arms hook from `capsules/fixtures`, the `wordcount` tool, the shell's
//! `wc`); a client of node A reaches it as `mesh://helper`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use murmur_tests::{LOOPBACK, TestNode, guest, install_manifest, mur, mur_json, wait_for};
use serde_json::{Value, json};

const CONVERGE: Duration = Duration::from_secs(30);
const CONFIG: &str = "[adverts]\nrefresh_secs = 1\nttl_secs = 4\n";

fn add_artifact(data_dir: &Path, component: &str, name: &str, kind: &str) {
    murmur_tests::add_artifact(data_dir, &guest(component), (name, "0.1.0"), kind, &[]);
}

/// Node C's data dir with the agent `helper` whose driver plays `script`.
fn agent_dir(script: &Value) -> tempfile::TempDir {
    agent_dir_with(script, "")
}

/// [`agent_dir`], with `extra` manifest tables.
fn agent_dir_with(script: &Value, extra: &str) -> tempfile::TempDir {
    let dir = murmur_tests::init_data_dir_with(CONFIG);
    add_artifact(dir.path(), "scripted_driver", "scripted-driver", "driver");
    add_artifact(dir.path(), "arms_hook", "arms-hook", "hook");
    install_manifest(dir.path(), "wordcount", "wordcount", "");
    install_manifest(dir.path(), "ask", "ask", "");
    install_manifest(dir.path(), "spin", "misbehaving_spin", "[limits]\ndeadline_ms = 60000\n");
    let work = dir.path().join("work/helper");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::write(work.join("notes.txt"), "one two three\n").unwrap();
    let manifest = format!(
        r#"name = "helper"
version = "0.1.0"
kind = "agent"
description = "counts words in notes"
[capabilities]
tools = ["wordcount", "ask", "spin"]
shell = {{ allow = ["wc"] }}
[inference]
model = "gpt-4o-mini"
driver = {{ artifact = "scripted-driver@0.1.0" }}
max_turns = 6
[[hooks]]
artifact = "arms-hook@0.1.0"
[wasi]
env = {{ SCRIPT = '{script}' }}
{extra}
"#
    );
    std::fs::write(dir.path().join("capsules/helper.toml"), manifest).unwrap();
    dir
}

fn start(dir: tempfile::TempDir, bootstrap: Option<&TestNode>) -> TestNode {
    let mut args: Vec<String> = LOOPBACK.iter().map(|s| (*s).to_owned()).collect();
    if let Some(peer) = bootstrap {
        args.push("--bootstrap".into());
        args.push(peer.dial_addrs()[0].clone());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    TestNode::start_owned(dir, &args).expect("node starts")
}

fn call(id: &str, name: &str, arguments: &Value) -> Value {
    json!({ "finish_reason": "tool_calls", "tool_calls": [{ "id": id, "name": name, "arguments": arguments.to_string() }] })
}

/// The first session's trace, once there is one (for polling).
fn trace_text(node_dir: &Path) -> Option<String> {
    let session = std::fs::read_dir(node_dir.join("work/helper/sessions")).ok()?.next()?.ok()?.path();
    std::fs::read_to_string(session.join("trace.jsonl")).ok()
}

fn trace_file(node_dir: &Path) -> PathBuf {
    let sessions = node_dir.join("work/helper/sessions");
    let session = std::fs::read_dir(&sessions).expect("a session directory").next().unwrap().unwrap().path();
    session.join("trace.jsonl")
}

#[test]
fn an_agent_on_another_node_runs_its_turns_tools_and_shell() {
    let script = json!([
        call("c1", "wordcount", &json!({ "text": "a b c d" })),
        call("c2", "wordcount", &json!({ "text": "a b c d" })),
        call("c3", "shell", &json!({ "program": "wc", "args": ["-w", "notes.txt"] })),
        { "text": "notes.txt has 3 words", "finish_reason": "stop" },
    ]);
    let a = TestNode::start_with(CONFIG, None).unwrap();
    let c = start(agent_dir(&script), Some(&a));
    let c_dir = c.data_dir.clone();
    wait_for(CONVERGE, "node A to see the agent", || {
        a.capsule_names().iter().any(|n| n == "helper").then_some(())
    })
    .unwrap();

    let answer = a.send("mesh://helper", "how many words are in notes.txt?", "m-1", false).unwrap();
    let task = &answer["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{answer}");
    assert_eq!(task["status"]["message"]["parts"][0]["text"], "notes.txt has 3 words");
    assert_eq!(task["metadata"]["murmur"]["owner"], c.peer_id(), "the agent ran on node C");

    // mur trace reads the session back: four turns, two tool calls, one shell command,
    // and the second identical wordcount call is a redundant read.
    let trace = trace_file(&c_dir);
    let summary = mur_json(&["trace", trace.to_str().unwrap(), "--json"]);
    assert_eq!(
        (summary["turns"].as_u64(), summary["tool_calls"].as_u64(), summary["shell_calls"].as_u64()),
        (Some(4), Some(2), Some(1)),
        "{summary}"
    );
    assert_eq!(summary["ended"], true);
    let redundant = summary["redundant"].as_array().unwrap();
    assert_eq!(redundant.len(), 1, "{summary}");
    assert_eq!(
        (redundant[0]["turn"].as_u64(), redundant[0]["resource_from"].as_str()),
        (Some(2), Some("declared"))
    );
    let table = mur(&["trace", trace.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(
        table.status.success() && text.contains("redundant reads (1)") && text.contains("helper"),
        "{text}"
    );
}

#[test]
fn a_tool_asking_for_input_suspends_the_agent_and_the_reply_resumes_it() {
    let script = json!([
        call("c1", "ask", &json!("Which branch?")),
        { "text": "deploying main", "finish_reason": "stop" },
    ]);
    let a = TestNode::start_with(CONFIG, None).unwrap();
    let c = start(agent_dir(&script), Some(&a));
    wait_for(CONVERGE, "node A to see the agent", || {
        a.capsule_names().iter().any(|n| n == "helper").then_some(())
    })
    .unwrap();
    let asked = a.send("mesh://helper", "deploy", "m-1", true).unwrap();
    let id = asked["result"]["task"]["id"].as_str().unwrap().to_owned();
    let waiting = wait_for(CONVERGE, "the agent's task to ask", || {
        let got = a.task(&id).ok()?;
        (got["result"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED").then_some(got)
    })
    .unwrap();
    let prompt = waiting["result"]["status"]["message"]["parts"][0]["text"].as_str().unwrap_or_default();
    assert!(prompt.contains("Which branch?"), "{waiting}");
    let reply = a
        .rpc(
            "SendMessage",
            json!({ "message": { "messageId": "r-1", "role": "ROLE_USER", "taskId": id, "parts": [{ "text": "main" }] } }),
        )
        .unwrap();
    assert!(reply.get("error").is_none(), "{reply}");
    let done = wait_for(CONVERGE, "the agent to finish", || {
        let got = a.task(&id).ok()?;
        (got["result"]["status"]["state"] == "TASK_STATE_COMPLETED").then_some(got)
    })
    .unwrap();
    assert_eq!(done["result"]["status"]["message"]["parts"][0]["text"], "deploying main", "{done}");
    // The model saw the answer as the tool's result.
    let trace = std::fs::read_to_string(trace_file(&c.data_dir)).unwrap();
    assert!(trace.contains("\"tool\":\"ask\"") && trace.contains("\"status\":\"passed\""), "{trace}");
}

#[test]
fn a_queue_workers_tasks_run_in_one_session_that_ends_when_the_queue_is_empty() {
    // One worker: the second task waits in the queue while the first asks for input.
    let script = json!([
        call("c1", "ask", &json!("Which branch?")),
        { "text": "deploying main", "finish_reason": "stop" },
        { "text": "and tagged it", "finish_reason": "stop" },
    ]);
    let c = start(agent_dir_with(&script, "[lifecycle]\ntask_acceptance = \"queue\"\nworkers = 1"), None);
    let first = c.send("mesh://helper", "deploy", "m-1", true).unwrap();
    let first_id = first["result"]["task"]["id"].as_str().unwrap().to_owned();
    let context = first["result"]["task"]["contextId"].as_str().unwrap().to_owned();
    wait_for(CONVERGE, "the first task to ask", || {
        let got = c.task(&first_id).ok()?;
        (got["result"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED").then_some(())
    })
    .unwrap();
    let message = json!({ "messageId": "m-2", "role": "ROLE_USER", "contextId": context, "parts": [{ "text": "tag it" }] });
    let second = c
        .rpc(
            "SendMessage",
            json!({ "tenant": "helper", "message": message, "configuration": { "returnImmediately": true } }),
        )
        .unwrap();
    let second_id = second["result"]["task"]["id"].as_str().unwrap_or_else(|| panic!("{second}")).to_owned();
    assert_eq!(second["result"]["task"]["status"]["state"], "TASK_STATE_SUBMITTED", "queued: {second}");
    let reply =
        json!({ "messageId": "r-1", "role": "ROLE_USER", "taskId": first_id, "parts": [{ "text": "main" }] });
    assert!(c.rpc("SendMessage", json!({ "message": reply })).unwrap().get("error").is_none());
    for (id, text) in [(&first_id, "deploying main"), (&second_id, "and tagged it")] {
        let done = wait_for(CONVERGE, "both tasks to complete", || {
            let got = c.task(id).ok()?;
            (got["result"]["status"]["state"] == "TASK_STATE_COMPLETED").then_some(got)
        })
        .unwrap();
        assert_eq!(done["result"]["status"]["message"]["parts"][0]["text"], text, "{done}");
    }
    // One session: one start, both tasks, and its end once the queue was empty.
    let trace = wait_for(CONVERGE, "the session to end", || {
        trace_text(&c.data_dir).filter(|t| t.contains("\"event\":\"session_end\""))
    })
    .unwrap();
    let sessions = std::fs::read_dir(c.data_dir.join("work/helper/sessions")).unwrap().count();
    assert_eq!(sessions, 1, "{trace}");
    assert_eq!(trace.matches("\"event\":\"session_start\"").count(), 1, "{trace}");
    assert!(trace.contains(&first_id) && trace.contains(&second_id), "{trace}");
    assert!(trace.contains("\"exit_status\":\"idle\""), "{trace}");
    // The second task continued the first one's conversation (same context, same session):
    // the driver saw two earlier answers and played its third reply.
    for id in [&first_id, &second_id] {
        let summary = mur_json(&["trace", id, "--node", &c.api, "--json"]);
        assert_eq!(summary["tasks"].as_u64(), Some(2), "{summary}");
    }
}

#[test]
fn canceling_an_agent_mid_call_stops_its_loop_and_frees_its_worker() {
    let script = json!([
        call("c1", "spin", &json!("forever")),
        { "text": "never reached", "finish_reason": "stop" },
    ]);
    let c = start(agent_dir(&script), None);
    let sent = c.send("mesh://helper", "spin", "m-1", true).unwrap();
    let id = sent["result"]["task"]["id"].as_str().unwrap().to_owned();
    // Working: the spin tool is running inside the agent's first call.
    wait_for(CONVERGE, "the agent to be working in its tool call", || {
        let trace = trace_text(&c.data_dir)?;
        let got = c.task(&id).ok()?;
        (got["result"]["status"]["state"] == "TASK_STATE_WORKING"
            && trace.contains("\"decision\":\"tool_calls\""))
        .then_some(())
    })
    .unwrap();
    let started = std::time::Instant::now();
    let canceled = c.rpc("CancelTask", json!({ "id": id })).unwrap();
    assert_eq!(canceled["result"]["status"]["state"], "TASK_STATE_CANCELED", "{canceled}");
    // The loop stops well before the tool's 60 s deadline, and says so in its trace.
    wait_for(CONVERGE, "the session to end canceled", || {
        let trace = trace_text(&c.data_dir)?;
        (trace.contains("\"event\":\"task_end\"") && trace.contains("\"status\":\"canceled\"")).then_some(())
    })
    .unwrap();
    assert!(started.elapsed() < Duration::from_secs(20), "took {:?}", started.elapsed());
    assert_eq!(c.task(&id).unwrap()["result"]["status"]["state"], "TASK_STATE_CANCELED");
}

#[test]
fn a_model_that_never_stops_fails_at_max_turns_with_the_reason() {
    let script = json!([call("c", "wordcount", &json!({ "text": "again" }))]);
    let c = start(agent_dir(&script), None);
    let answer = c.send("mesh://helper", "loop", "m-1", false).unwrap();
    let status = &answer["result"]["task"]["status"];
    assert_eq!(status["state"], "TASK_STATE_FAILED", "{answer}");
    let reason = status["message"]["parts"][0]["text"].as_str().unwrap_or_default();
    assert!(reason.contains("max_turns (6)"), "{reason}");
}

#[test]
fn a_bad_agent_manifest_is_refused_naming_the_key() {
    let dir = murmur_tests::init_data_dir_with(CONFIG);
    let manifest = "name = \"broken\"\nversion = \"0.1.0\"\nkind = \"agent\"\n[inference]\nmodel = \"m\"\nmax_turns = 0\ndriver = { artifact = \"missing@1.0.0\" }\n";
    std::fs::create_dir_all(dir.path().join("capsules")).unwrap();
    std::fs::write(dir.path().join("capsules/broken.toml"), manifest).unwrap();
    // A node with a broken capsule must not start.
    let stderr = murmur_tests::refused_run(dir.path());
    assert!(stderr.contains("broken.toml") && stderr.contains("`inference.max_turns`"), "{stderr}");
}

#[test]
fn an_agents_session_turns_and_calls_join_the_tasks_trace_across_the_mesh() {
    let collector = murmur_tests::OtlpCollector::start().unwrap();
    let env = |service: &str| {
        vec![
            ("OTEL_EXPORTER_OTLP_ENDPOINT".to_owned(), collector.endpoint.clone()),
            ("OTEL_EXPORTER_OTLP_PROTOCOL".to_owned(), "http/json".to_owned()),
            ("OTEL_SERVICE_NAME".to_owned(), service.to_owned()),
            ("OTEL_BSP_SCHEDULE_DELAY".to_owned(), "100".to_owned()),
        ]
    };
    let start_traced = |dir: &Path, service: &str, bootstrap: Option<&TestNode>| {
        let mut flags: Vec<String> = LOOPBACK.iter().map(|s| (*s).to_owned()).collect();
        if let Some(peer) = bootstrap {
            flags.extend(["--bootstrap".to_owned(), peer.dial_addrs()[0].clone()]);
        }
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        let env = env(service);
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        TestNode::start_in_env(dir, &flags, &env).unwrap()
    };
    let script = json!([
        call("c1", "wordcount", &json!({ "text": "a b" })),
        { "text": "2 words", "finish_reason": "stop" },
    ]);
    let a_dir = murmur_tests::init_data_dir_with(CONFIG);
    let c_dir = agent_dir(&script);
    let a = start_traced(a_dir.path(), "node-a", None);
    let _c = start_traced(c_dir.path(), "node-c", Some(&a));
    wait_for(CONVERGE, "node A to see the agent", || {
        a.capsule_names().iter().any(|n| n == "helper").then_some(())
    })
    .unwrap();

    let trace_id = "5cf92f3577b34da6a3ce929d0e0e4737";
    let params = json!({ "tenant": "mesh://helper", "message": { "messageId": "t-1", "parts": [{ "text": "count" }] } });
    let answer = murmur_tests::rpc_at(
        &format!("{}/", a.api),
        "SendMessage",
        params,
        &[("traceparent", &format!("00-{trace_id}-00f067aa0ba902b7-01"))],
    )
    .unwrap();
    assert_eq!(answer["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED", "{answer}");
    let seen = wait_for(CONVERGE, "the agent's spans in the client's trace", || {
        let spans = collector.spans();
        let on = |service: &str, name: &str| {
            spans.iter().any(|(s, n, t)| s == service && n == name && t == trace_id)
        };
        (on("node-a", "a2a")
            && on("node-c", "task.run")
            && on("node-c", "agent.session")
            && on("node-c", "capsule.inference")
            && on("node-c", "capsule.tool_call"))
        .then_some(())
    });
    assert!(seen.is_ok(), "{seen:?}; spans: {:?}", collector.spans());
}
