//! Tasks across the mesh with real processes: three `murnode`s on loopback, real guest
//! components, grants signed with `mur grant sign`.
//!
//! Topology: A runs `relay` capsules (senders, with grants of every kind), B runs `ask`
//! (request-input) capsules, C runs `wordcount`. A is bootstrapped to nothing, B to A, C to
//! B: A and C meet through the mesh.

use std::path::{Path, PathBuf};
use std::time::Duration;

use murmur_tests::{TestNode, install_manifest, mur, mur_json, rpc_at, wait_for};
use serde_json::{Value, json};

const CONVERGE: Duration = Duration::from_secs(30);

/// Fast adverts, so membership changes show within seconds.
fn config(authorities: &[&str], extra: &str) -> String {
    let list: Vec<String> = authorities.iter().map(|a| format!("\"{a}\"")).collect();
    format!(
        "[adverts]\nrefresh_secs = 1\nttl_secs = 4\n[trust]\nauthorities = [{}]\n{extra}",
        list.join(", ")
    )
}

/// A key file and its public key.
fn authority(dir: &Path, name: &str) -> (PathBuf, String) {
    let path = dir.join(format!("{name}.key"));
    let out = mur(&["key", "gen", "--out", path.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let shown = mur_json(&["key", "show", path.to_str().unwrap(), "--json"]);
    (path, shown["public_key"].as_str().unwrap().to_owned())
}

fn sign(key: &Path, capsule: &str, allow: &str, out: &Path, extra: &[&str]) {
    let mut args = vec![
        "grant",
        "sign",
        "--key",
        key.to_str().unwrap(),
        "--capsule",
        capsule,
        "--allow",
        allow,
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend(extra);
    let out = mur(&args);
    assert!(out.status.success(), "grant sign: {}", String::from_utf8_lossy(&out.stderr));
}

/// Starts a node whose data dir holds `manifests` (name, component, extra manifest TOML).
fn node(toml: &str, manifests: &[(&str, &str, String)], bootstrap: Option<&TestNode>) -> TestNode {
    let dir = murmur_tests::init_data_dir_with(toml);
    for (name, component, extra) in manifests {
        install_manifest(dir.path(), name, component, extra);
    }
    let mut args: Vec<String> = murmur_tests::LOOPBACK.iter().map(|s| (*s).to_owned()).collect();
    if let Some(peer) = bootstrap {
        args.push("--bootstrap".into());
        args.push(peer.dial_addrs()[0].clone());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    TestNode::start_owned(dir, &args).expect("node starts")
}

fn wait_capsules(nodes: &[&TestNode], names: &[&str]) {
    for node in nodes {
        wait_for(CONVERGE, "every capsule in the directory", || {
            let listed = node.capsule_names();
            names.iter().all(|n| listed.iter().any(|l| l == n)).then_some(())
        })
        .unwrap();
    }
}

fn result(answer: &Value) -> &Value {
    assert!(answer.get("error").is_none(), "unexpected error: {answer}");
    answer.get("result").expect("a result")
}

fn state(task: &Value) -> &str {
    task["status"]["state"].as_str().unwrap_or("?")
}

fn text(task: &Value) -> &str {
    task["status"]["message"]["parts"][0]["text"].as_str().unwrap_or("")
}

#[test]
fn a_task_sent_at_a_runs_on_the_only_node_that_hosts_it_and_never_twice() {
    let a = node(&config(&[], ""), &[], None);
    let b = node(&config(&[], ""), &[], Some(&a));
    let c = node(&config(&[], ""), &[("wordcount", "wordcount", String::new())], Some(&b));
    wait_capsules(&[&a], &["wordcount"]);

    let answer = a.send("mesh://wordcount", "one two three four", "m-1", false).unwrap();
    let task = &result(&answer)["task"];
    assert_eq!(state(task), "TASK_STATE_COMPLETED", "{answer}");
    assert!(text(task).contains("\"words\":4"), "{answer}");
    assert_eq!(task["metadata"]["murmur"]["owner"], c.peer_id());
    assert_eq!(task["artifacts"][0]["parts"][0]["text"], text(task));
    let id = task["id"].as_str().unwrap().to_owned();

    // The same message again names the same task: nothing runs a second time.
    let again = a.send("mesh://wordcount", "one two three four", "m-1", false).unwrap();
    assert_eq!(result(&again)["task"]["id"], id.as_str());
    assert_eq!(c.task_ids(), vec![id.clone()], "C ran the task once");

    // A asks the owner for it; the 0.3 method name answers in 0.3 shapes.
    let got = a.rpc("tasks/get", json!({ "id": id })).unwrap();
    assert_eq!((result(&got)["kind"].as_str(), state(result(&got))), (Some("task"), "completed"));
    assert!(a.task_ids().contains(&id), "A lists the task it placed");

    // The CLI: prints the task and its result.
    let out = mur(&["send", "mesh://wordcount", "alpha beta", "--wait", "--node", &a.api]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("completed") && stdout.contains("\"words\":2"), "{stdout}");

    // Errors: unknown task, unknown capsule, bad params, unknown method.
    let missing = a.task("00000000-0000-0000-0000-000000000001").unwrap();
    assert_eq!(missing["error"]["code"], -32001, "{missing}");
    // An id in someone else's format names no task here either (A2A clients expect -32001).
    let foreign = a.task("task-123").unwrap();
    assert_eq!(foreign["error"]["code"], -32001, "{foreign}");
    let nowhere = a.send("mesh://nothing-here", "x", "m-2", true).unwrap();
    assert_eq!(nowhere["error"]["code"], -32031, "{nowhere}");
    assert!(nowhere["error"]["message"].as_str().unwrap().contains("no live node hosts mesh://nothing-here"));
    let bad = a.rpc("SendMessage", json!({ "tenant": "wordcount" })).unwrap();
    assert_eq!(bad["error"]["code"], -32602, "{bad}");
    let unknown = a.rpc("tasks/explode", json!({})).unwrap();
    assert_eq!(unknown["error"]["code"], -32601, "{unknown}");
}

#[test]
fn a_fresh_nodes_capsules_refuse_clients_of_other_nodes() {
    // C keeps the shipped default (runtime.audience = granted); A is a lab node.
    let c_dir = murmur_tests::init_data_dir_as_shipped();
    install_manifest(c_dir.path(), "wordcount", "wordcount", "");
    let mut args: Vec<&str> = murmur_tests::LOOPBACK.to_vec();
    let a = node(&config(&[], ""), &[], None);
    let bootstrap = a.dial_addrs()[0].clone();
    args.extend(["--bootstrap", &bootstrap]);
    let c = TestNode::start_owned(c_dir, &args).unwrap();
    wait_capsules(&[&a], &["wordcount"]);

    // A client of A (any host on the LAN that runs murnode) cannot run C's capsule.
    let refused = a.send("mesh://wordcount", "one two", "m-1", false).unwrap();
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("not_in_audience") && message.contains("audience = granted"), "{refused}");
    assert!(c.task_ids().is_empty(), "nothing was stored at C");
    // C's own client can.
    let answer = c.send("mesh://wordcount", "one two", "m-1", false).unwrap();
    assert_eq!(state(&result(&answer)["task"]), "TASK_STATE_COMPLETED", "{answer}");
}

/// One `/murmur/task/1` request from a fresh peer that placed nothing (`murmur-testpeer
/// --task SPEC`), and the node's answer.
fn stranger_asks(node: &TestNode, spec: &str) -> Value {
    let out = std::process::Command::new(murmur_tests::bin("murmur-testpeer"))
        .args(["--dial", &node.dial_addrs()[0], "--task", spec, "--timeout-secs", "20"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    let line: Value = serde_json::from_str(stdout.trim()).unwrap();
    line["answer"].clone()
}

#[test]
fn only_the_node_that_placed_a_task_acts_on_it_and_no_peer_squats_an_id() {
    let a = node(&config(&[], ""), &[], None);
    let c = node(&config(&[], ""), &[("wordcount", "wordcount", String::new())], Some(&a));
    wait_capsules(&[&a], &["wordcount"]);
    let answer = a.send("mesh://wordcount", "one two", "m-1", false).unwrap();
    let task = &result(&answer)["task"];
    assert_eq!(task["metadata"]["murmur"]["owner"], c.peer_id());
    let id = task["id"].as_str().unwrap().to_owned();

    // Another peer cannot read, follow or cancel it: to it the task does not exist.
    for action in ["get", "events", "cancel"] {
        let answer = stranger_asks(&c, &format!("{action}:{id}"));
        assert_eq!(answer["not_found"], true, "{action}: {answer}");
    }
    assert_eq!(state(result(&a.task(&id).unwrap())), "TASK_STATE_COMPLETED", "A still reads it");

    // Nor pre-submit the id A will give its client's next message.
    let squatted = {
        let entry: murmur_protocol::NodeId = a.peer_id().parse().unwrap();
        // This machine's client is `local`: its message ids are scoped as `local/ID`.
        murmur_protocol::task::TaskId::placed(&entry, &murmur_protocol::task::Sender::Client, "local/m-2")
    };
    let answer = stranger_asks(&c, &format!("submit:wordcount:local/m-2:{squatted}"));
    assert_eq!(answer["check"], "foreign_task_id", "{answer}");
    assert_eq!(c.task_ids(), vec![id.clone()], "nothing was stored for the squat");
    let answer = a.send("mesh://wordcount", "three four five", "m-2", false).unwrap();
    let task = &result(&answer)["task"];
    assert_eq!(
        (task["id"].as_str(), state(task)),
        (Some(squatted.to_string().as_str()), "TASK_STATE_COMPLETED")
    );
    assert!(text(task).contains("\"words\":3"), "A's client got its own result: {answer}");

    // A task in its own name is a task (open mesh: clients of other nodes are served).
    let own = stranger_asks(&c, "submit:wordcount:m-3");
    assert!(own["task"].is_string() && own.get("check").is_none(), "{own}");
}

#[test]
fn grants_are_checked_at_both_ends_and_refused_tasks_never_run() {
    let dir = tempfile::tempdir().unwrap();
    let (real, real_pub) = authority(dir.path(), "authority");
    let (rogue, rogue_pub) = authority(dir.path(), "rogue");
    let grant = |name: &str| dir.path().join(format!("{name}.grant"));
    sign(&real, "relay-ok", "mesh://wordcount", &grant("relay-ok"), &[]);
    sign(&real, "relay-narrow", "mesh://echo", &grant("relay-narrow"), &[]);
    sign(
        &real,
        "relay-expired",
        "mesh://wordcount",
        &grant("relay-expired"),
        &["--not-before", "2020-01-01T00:00:00Z", "--valid-for", "1h"],
    );
    sign(&rogue, "relay-forged", "mesh://wordcount", &grant("relay-forged"), &[]);
    sign(&real, "someone-else", "mesh://wordcount", &grant("relay-stolen"), &[]);
    let manifest = |name: &str, with_grant: bool| {
        let grant_line =
            if with_grant { format!("grant = \"{}\"\n", grant(name).display()) } else { String::new() };
        (name.to_owned(), format!("{grant_line}[capabilities]\nnetwork = {{ allow = [\"mesh://*\"] }}\n"))
    };
    let relays: Vec<(String, String)> = vec![
        manifest("relay-ok", true),
        manifest("relay-none", false),
        manifest("relay-narrow", true),
        manifest("relay-expired", true),
        manifest("relay-forged", true),
        (
            "relay-stolen".to_owned(),
            format!(
                "grant = \"{}\"\n[capabilities]\nnetwork = {{ allow = [\"mesh://*\"] }}\n",
                grant("relay-stolen").display()
            ),
        ),
    ];
    let manifests: Vec<(&str, &str, String)> =
        relays.iter().map(|(n, e)| (n.as_str(), "relay", e.clone())).collect();
    // A (the sender) also trusts the rogue key: its own check passes a forged grant, so
    // the receiving end is the one that must refuse it.
    let a = node(&config(&[&real_pub, &rogue_pub], ""), &manifests, None);
    let c = node(&config(&[&real_pub], ""), &[("wordcount", "wordcount", String::new())], Some(&a));
    wait_capsules(&[&a], &["wordcount", "relay-ok"]);

    let relay = |capsule: &str, words: &str| {
        let answer = a
            .send(
                &format!("mesh://{capsule}"),
                &format!("mesh://wordcount {words}"),
                &format!("{capsule}-1"),
                false,
            )
            .unwrap();
        result(&answer)["task"].clone()
    };
    let ok = relay("relay-ok", "granted words");
    assert_eq!(state(&ok), "TASK_STATE_COMPLETED", "{ok}");
    let forwarded: Value = serde_json::from_str(text(&ok)).unwrap();
    let forwarded_id = forwarded["task_id"].as_str().unwrap().to_owned();
    let done = wait_for(CONVERGE, "the forwarded task to complete", || {
        let got = a.task(&forwarded_id).ok()?;
        (state(&got["result"]) == "TASK_STATE_COMPLETED").then_some(got)
    })
    .unwrap();
    assert!(text(&done["result"]).contains("\"words\":2"), "{done}");

    // Refused at the sending end (nothing leaves A).
    for (capsule, check) in [
        ("relay-none", "no_grant"),
        ("relay-narrow", "target_not_allowed"),
        ("relay-expired", "expired"),
        ("relay-stolen", "wrong_capsule"),
    ] {
        let task = relay(capsule, "refused words");
        assert_eq!(state(&task), "TASK_STATE_FAILED", "{capsule}: {task}");
        assert!(text(&task).contains(&format!("grant check failed ({check})")), "{capsule}: {}", text(&task));
    }
    // Refused at the receiving end: C does not trust the rogue authority. The sender learns
    // the runtime specification's `rejected` (no task), not an error; C counts why.
    let forged = relay("relay-forged", "forged words");
    assert_eq!(state(&forged), "TASK_STATE_COMPLETED", "{forged}");
    let answer: Value = serde_json::from_str(text(&forged)).unwrap();
    assert_eq!(
        (answer["state"].as_str(), answer["task_id"].as_str()),
        (Some("rejected"), Some("")),
        "{answer}"
    );
    assert_eq!(c.metric("murmur_task_refusals_total{check=\"untrusted_issuer\"}"), 1);

    // Only the granted task ever reached wordcount.
    assert_eq!(c.task_ids(), vec![forwarded_id]);
}

#[test]
fn request_input_suspends_a_task_until_a_reply_and_a_slow_reply_fails_it() {
    let a = node(&config(&[], ""), &[], None);
    let b = node(
        &config(&[], ""),
        &[
            ("ask", "ask", String::new()),
            ("ask-fast", "ask", "[lifecycle]\ninput_timeout_secs = 1\n".to_owned()),
        ],
        Some(&a),
    );
    wait_capsules(&[&a], &["ask", "ask-fast"]);

    let asked = a.send("mesh://ask", "Which branch?", "q-1", false).unwrap();
    let task = &result(&asked)["task"];
    assert_eq!((state(task), text(task)), ("TASK_STATE_INPUT_REQUIRED", "Which branch?"), "{asked}");
    let id = task["id"].as_str().unwrap();
    // The reply is a message/send naming the task (0.3 shapes), sent to A, routed to B.
    let reply = a
        .rpc(
            "message/send",
            json!({ "message": { "kind": "message", "messageId": "r-1", "role": "user", "taskId": id,
                "parts": [{ "kind": "text", "text": "main" }] }, "configuration": { "blocking": true } }),
        )
        .unwrap();
    assert_eq!(
        (state(result(&reply)), text(result(&reply))),
        ("completed", "Which branch? -> main"),
        "{reply}"
    );
    // A second reply finds nobody waiting.
    let late = a
        .rpc(
            "message/send",
            json!({ "message": { "messageId": "r-2", "taskId": id, "parts": [{ "text": "x" }] } }),
        )
        .unwrap();
    assert_eq!(late["error"]["code"], -32004, "{late}");

    let slow = a.send("mesh://ask-fast", "Quick?", "q-2", false).unwrap();
    let slow_id = result(&slow)["task"]["id"].as_str().unwrap().to_owned();
    let failed = wait_for(CONVERGE, "the unanswered task to fail", || {
        let got = a.task(&slow_id).ok()?;
        (state(&got["result"]) == "TASK_STATE_FAILED").then_some(got)
    })
    .unwrap();
    assert!(text(&failed["result"]).contains("input_timeout_secs"), "{failed}");
    drop(b);
}

#[test]
fn task_acceptance_none_refuses_and_single_takes_one_at_a_time() {
    let a = node(
        &config(&[], ""),
        &[
            ("echo-none", "echo", "[lifecycle]\ntask_acceptance = \"none\"\n".to_owned()),
            ("ask-single", "ask", "[lifecycle]\ntask_acceptance = \"single\"\n".to_owned()),
        ],
        None,
    );
    wait_capsules(&[&a], &["echo-none", "ask-single"]);
    let none = a.send("mesh://echo-none", "hi", "n-1", false).unwrap();
    assert!(none["error"]["message"].as_str().unwrap_or("").contains("not_accepting"), "{none}");
    let first = a.send("mesh://ask-single", "first?", "s-1", false).unwrap();
    assert_eq!(state(&result(&first)["task"]), "TASK_STATE_INPUT_REQUIRED");
    let second = a.send("mesh://ask-single", "second?", "s-2", false).unwrap();
    assert!(second["error"]["message"].as_str().unwrap_or("").contains("busy"), "{second}");

    // Canceling the waiting task (with the CLI) frees the capsule for the next one.
    let first_id = result(&first)["task"]["id"].as_str().unwrap().to_owned();
    let canceled = mur_json(&["task", "cancel", &first_id, "--json", "--node", &a.api]);
    assert_eq!(canceled["status"]["state"], "TASK_STATE_CANCELED", "{canceled}");
    // (The canceled run stops a moment after the cancel answers.)
    let third = wait_for(CONVERGE, "the capsule to be free", || {
        let answer = a.send("mesh://ask-single", "third?", "s-3", false).ok()?;
        answer.get("result").is_some().then_some(answer)
    })
    .unwrap();
    assert_eq!(state(&result(&third)["task"]), "TASK_STATE_INPUT_REQUIRED", "{third}");
    // A finished task cannot be canceled.
    let again = a.rpc("CancelTask", json!({ "id": first_id })).unwrap();
    assert_eq!(again["error"]["code"], -32002, "{again}");
    let listed = mur(&["task", "ls", "--state", "canceled", "--node", &a.api]);
    assert!(String::from_utf8_lossy(&listed.stdout).contains(&first_id));
}

#[test]
fn a_stream_that_reconnects_resumes_after_the_last_event_it_saw() {
    let a = node(&config(&[], ""), &[], None);
    let _b = node(&config(&[], ""), &[("ask", "ask", String::new())], Some(&a));
    wait_capsules(&[&a], &["ask"]);

    // Stream until the task asks for input, then drop the connection.
    let events = murmur_tests::sse(
        &format!("{}/a2a/ask", a.api),
        json!({ "jsonrpc": "2.0", "id": 7, "method": "message/stream",
            "params": { "message": { "messageId": "st-1", "parts": [{ "kind": "text", "text": "Color?" }] } } }),
        &[],
        |_, event| event["result"]["status"]["state"] == "input-required",
    )
    .unwrap();
    let seqs: Vec<u64> = events.iter().map(|(seq, _)| *seq).collect();
    assert_eq!(seqs, vec![1, 2, 3], "{events:?}");
    assert_eq!(events[0].1["result"]["kind"], "task");
    let id = events[0].1["result"]["id"].as_str().unwrap().to_owned();

    // While nobody listens the task moves on.
    let reply = a
        .rpc(
            "message/send",
            json!({ "message": { "messageId": "st-r", "taskId": id, "parts": [{ "text": "blue" }] } }),
        )
        .unwrap();
    result(&reply);
    wait_for(CONVERGE, "completion", || {
        (state(&a.task(&id).ok()?["result"]) == "TASK_STATE_COMPLETED").then_some(())
    })
    .unwrap();

    // Resubscribing with the last id seen delivers exactly what was missed.
    let resumed = murmur_tests::sse(
        &format!("{}/", a.api),
        json!({ "jsonrpc": "2.0", "id": 8, "method": "tasks/resubscribe", "params": { "id": id } }),
        &[("Last-Event-ID", "3")],
        |_, event| event["result"]["final"] == true,
    )
    .unwrap();
    let kinds: Vec<(u64, String)> = resumed
        .iter()
        .map(|(seq, e)| (*seq, e["result"]["kind"].as_str().unwrap_or("?").to_owned()))
        .collect();
    assert_eq!(
        kinds,
        vec![(4, "status-update".into()), (5, "artifact-update".into()), (6, "status-update".into())],
        "{resumed:?}"
    );
    assert_eq!(resumed[1].1["result"]["artifact"]["parts"][0]["text"], "Color? -> blue");
    // Every event has its own id: a client dropped right after any one of them and
    // resuming from it gets exactly the events after it, ending with the final status.
    let resume = |last: u64| {
        murmur_tests::sse(
            &format!("{}/", a.api),
            json!({ "jsonrpc": "2.0", "id": 10, "method": "tasks/resubscribe", "params": { "id": id } }),
            &[("Last-Event-ID", &last.to_string())],
            |_, event| event["result"]["final"] == true,
        )
        .unwrap()
    };
    let all = resume(0);
    let ids: Vec<u64> = all.iter().map(|(seq, _)| *seq).collect();
    assert_eq!(ids, (1..=6).collect::<Vec<_>>(), "{all:?}");
    for (i, (seen, _)) in all.iter().enumerate().take(all.len() - 1) {
        let rest: Vec<u64> = resume(*seen).iter().map(|(seq, _)| *seq).collect();
        assert_eq!(rest, ids[i + 1..], "resumed after event {seen}");
    }
    // A 1.0 client resubscribing from the start gets the task first, in 1.0 shapes.
    let from_start = murmur_tests::sse(
        &format!("{}/", a.api),
        json!({ "jsonrpc": "2.0", "id": 9, "method": "SubscribeToTask", "params": { "id": id } }),
        &[("A2A-Version", "1.0")],
        |_, _| false,
    )
    .unwrap();
    assert_eq!(from_start.len(), 1, "{from_start:?}");
    assert_eq!(from_start[0].1["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED");
}

#[test]
fn a_killed_owner_loses_no_task() {
    let a = node(&config(&[], ""), &[], None);
    let b_dir = murmur_tests::init_data_dir_with(&config(&[], ""));
    install_manifest(b_dir.path(), "ask", "ask", "[lifecycle]\ntask_acceptance = \"queue\"\nworkers = 1\n");
    install_manifest(b_dir.path(), "wordcount", "wordcount", "");
    let b_path = b_dir.path().to_path_buf();
    let bootstrap = a.dial_addrs()[0].clone();
    let flags = |extra: &[&str]| -> Vec<String> {
        let mut flags: Vec<String> = murmur_tests::LOOPBACK.iter().map(|s| (*s).to_owned()).collect();
        flags.extend(["--bootstrap".to_owned(), bootstrap.clone()]);
        flags.extend(extra.iter().map(|s| (*s).to_owned()));
        flags
    };
    let start_b = || {
        let flags = flags(&[]);
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        TestNode::start_in(&b_path, &flags).unwrap()
    };
    let mut b = start_b();
    wait_capsules(&[&a], &["ask", "wordcount"]);

    let done = a.send("mesh://wordcount", "kept after a crash", "k-0", false).unwrap();
    let done_id = result(&done)["task"]["id"].as_str().unwrap().to_owned();
    // One worker: the first task waits for input (running), the next two queue behind it.
    let ids: Vec<String> = (1..=3)
        .map(|i| {
            let sent = a.send("mesh://ask", &format!("q{i}?"), &format!("k-{i}"), true).unwrap();
            result(&sent)["task"]["id"].as_str().unwrap().to_owned()
        })
        .collect();
    wait_for(CONVERGE, "the first task to ask", || {
        (state(result(&a.task(&ids[0]).ok()?)) == "TASK_STATE_INPUT_REQUIRED").then_some(())
    })
    .unwrap();
    assert_eq!(state(result(&a.task(&ids[1]).unwrap())), "TASK_STATE_SUBMITTED");

    b.kill();
    let b = start_b();
    // Completed stays completed; the running one failed with a reason; the queued run.
    let got = |id: &str| {
        wait_for(CONVERGE, "the restarted owner", || a.task(id).ok().filter(|t| t.get("result").is_some()))
            .unwrap()
    };
    assert_eq!(state(result(&got(&done_id))), "TASK_STATE_COMPLETED");
    let crashed = got(&ids[0]);
    assert_eq!(state(result(&crashed)), "TASK_STATE_FAILED");
    assert!(text(result(&crashed)).contains("restarted"), "{crashed}");
    wait_for(CONVERGE, "the queued task to run", || {
        (state(result(&a.task(&ids[1]).ok()?)) == "TASK_STATE_INPUT_REQUIRED").then_some(())
    })
    .unwrap();
    for (i, id) in ids.iter().enumerate().skip(1) {
        wait_for(CONVERGE, "input required", || {
            (state(result(&a.task(id).ok()?)) == "TASK_STATE_INPUT_REQUIRED").then_some(())
        })
        .unwrap();
        let reply = a.rpc("SendMessage", json!({ "message": { "messageId": format!("kr-{i}"), "taskId": id, "parts": [{ "text": "ok" }] } })).unwrap();
        assert_eq!(state(&result(&reply)["task"]), "TASK_STATE_COMPLETED", "{reply}");
    }
    drop(b);
}

#[test]
fn clients_need_loopback_or_a_token_and_cards_describe_the_mesh() {
    let token = "s3cret-token-for-tests";
    let reader = "read-only-token-for-tests";
    let sender = "send-only-token-for-tests";
    let other = "another-sender-for-tests";
    let tokens = format!(
        "tokens = [\"{token}\", {{ name = \"dash\", token = \"{reader}\", scopes = [\"read\"] }}, {{ name = \"ci\", token = \"{sender}\", scopes = [\"send\"] }}, {{ name = \"qa\", token = \"{other}\", scopes = [\"send\"] }}]"
    );
    let a = node(
        &config(&[], &format!("[api]\nloopback_open = false\n{tokens}\n")),
        &[("echo", "echo", String::new())],
        None,
    );
    let params = json!({ "tenant": "echo", "message": { "messageId": "p-1", "parts": [{ "text": "hi" }] } });
    let client = reqwest::blocking::Client::new();
    let body = json!({ "jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params });
    let denied = client.post(format!("{}/", a.api)).json(&body).send().unwrap();
    assert_eq!(denied.status(), 401);
    let wrong =
        client.post(format!("{}/", a.api)).bearer_auth("wrong-token-of-16-bytes").json(&body).send().unwrap();
    assert_eq!(wrong.status(), 401);
    let answer = rpc_at(
        &format!("{}/", a.api),
        "SendMessage",
        params,
        &[("Authorization", &format!("Bearer {token}"))],
    )
    .unwrap();
    assert_eq!(result(&answer)["task"]["status"]["state"], "TASK_STATE_COMPLETED", "{answer}");
    // Scopes: `read` lists but may not send; `send` sends but may not install; 403 names both.
    let as_reader = |method: &str, params: Value| {
        let body = json!({ "jsonrpc": "2.0", "id": 1, "method": method, "params": params });
        client.post(format!("{}/", a.api)).bearer_auth(reader).json(&body).send().unwrap()
    };
    let listed = as_reader("ListTasks", json!({}));
    assert_eq!(listed.status(), 200);
    let refused = as_reader(
        "SendMessage",
        json!({ "tenant": "echo", "message": { "messageId": "r-1", "parts": [{ "text": "hi" }] } }),
    );
    assert_eq!(refused.status(), 403);
    let text = refused.text().unwrap();
    assert!(text.contains("client `dash` holds scope read; this needs send"), "{text}");
    let peers = client.get(format!("{}/v1/peers", a.api)).bearer_auth(sender).send().unwrap();
    assert_eq!(peers.status(), 200, "send includes read");
    let pull = client
        .post(format!("{}/v1/artifacts/pull", a.api))
        .bearer_auth(sender)
        .json(&json!({ "name": "echo", "version": "1.0.0" }))
        .send()
        .unwrap();
    assert_eq!(pull.status(), 403);
    assert!(pull.text().unwrap().contains("this needs admin"));
    // Clients are isolated: one message id from two clients is two tasks, and each sees
    // only its own (an admin token sees both).
    let rpc_as = |bearer: &str, method: &str, params: Value| {
        rpc_at(&format!("{}/", a.api), method, params, &[("Authorization", &format!("Bearer {bearer}"))])
            .unwrap()
    };
    let send_as = |bearer: &str| {
        let params =
            json!({ "tenant": "echo", "message": { "messageId": "same-id", "parts": [{ "text": bearer }] } });
        result(&rpc_as(bearer, "SendMessage", params))["task"]["id"].as_str().unwrap().to_owned()
    };
    let (ci_task, qa_task) = (send_as(sender), send_as(other));
    assert_ne!(ci_task, qa_task, "one message id, two clients, two tasks");
    let ids = |bearer: &str| -> Vec<String> {
        let listed = rpc_as(bearer, "ListTasks", json!({}));
        result(&listed)["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["id"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(ids(other), vec![qa_task.clone()]);
    let foreign = rpc_as(other, "GetTask", json!({ "id": ci_task }));
    assert_eq!(foreign["error"]["code"], -32001, "{foreign}");
    let foreign = rpc_as(other, "CancelTask", json!({ "id": ci_task }));
    assert_eq!(foreign["error"]["code"], -32001, "{foreign}");
    let trace = client.get(format!("{}/v1/tasks/{ci_task}/trace", a.api)).bearer_auth(other).send().unwrap();
    assert_eq!(trace.status(), 404);
    assert!(trace.text().unwrap().contains("\"not_found\""), "another client's task has no trace for it");
    let all = ids(token);
    assert!(all.contains(&ci_task) && all.contains(&qa_task), "{all:?}");
    // `mur` without a token is refused with the reason; a token on the command line (where
    // `ps` shows it) is refused before anything is sent; from a file or the environment it
    // is admitted.
    let out = murmur_tests::mur(&["send", "echo", "hi", "--wait", "--node", &a.api]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("Authorization: Bearer TOKEN"), "{out:?}");
    let out = murmur_tests::mur(&["send", "echo", "argv", "--wait", "--node", &a.api, "--token", token]);
    assert_eq!(out.status.code(), Some(2), "a usage error: {out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("--token-file"), "{out:?}");
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), format!("{token}\n")).unwrap();
    let path = file.path().to_str().unwrap();
    let sent = murmur_tests::mur_json(&[
        "send",
        "echo",
        "hi",
        "--wait",
        "--json",
        "--node",
        &a.api,
        "--token-file",
        path,
    ]);
    assert_eq!(sent["status"]["state"], "TASK_STATE_COMPLETED", "{sent}");
    let out = std::process::Command::new(murmur_tests::bin("mur"))
        .args(["task", "ls", "--json", "--node", &a.api])
        .env("MURMUR_TOKEN", token)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        listed["tasks"].as_array().is_some_and(|t| t.len() == 4),
        "the admin token sees every task: {listed}"
    );

    // Agent cards are open to all: the node's lists the mesh's capsules as skills.
    let card = a.get("/.well-known/agent-card.json").unwrap();
    assert!(card["skills"].as_array().unwrap().iter().any(|s| s["id"] == "echo"), "{card}");
    assert_eq!(card["capabilities"]["streaming"], true);
    assert_eq!(card["supportedInterfaces"][0]["protocolBinding"], "JSONRPC");
    assert!(card["securitySchemes"]["bearer"].is_object());
    let echo = a.get("/a2a/echo/.well-known/agent-card.json").unwrap();
    assert_eq!(echo["url"], format!("{}/a2a/echo", a.api));
    assert_eq!(echo["skills"][0]["id"], "echo");
    let missing = reqwest::blocking::get(format!("{}/a2a/nope/.well-known/agent-card.json", a.api)).unwrap();
    assert_eq!(missing.status(), 404);
}

#[test]
fn a_tasks_spans_on_two_nodes_share_one_trace_id() {
    let collector = murmur_tests::OtlpCollector::start().unwrap();
    let env = |service: &'static str| {
        vec![
            ("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint.clone()),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json".to_owned()),
            ("OTEL_SERVICE_NAME", service.to_owned()),
            ("OTEL_BSP_SCHEDULE_DELAY", "100".to_owned()),
        ]
    };
    let start = |service: &'static str, manifests: &[(&str, &str)], bootstrap: Option<&TestNode>| {
        let dir = murmur_tests::init_data_dir_with(&config(&[], ""));
        for (name, component) in manifests {
            install_manifest(dir.path(), name, component, "");
        }
        let mut flags: Vec<String> = murmur_tests::LOOPBACK.iter().map(|s| (*s).to_owned()).collect();
        if let Some(peer) = bootstrap {
            flags.extend(["--bootstrap".to_owned(), peer.dial_addrs()[0].clone()]);
        }
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        let env = env(service);
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let node = TestNode::start_in_env(dir.path(), &flags, &env).unwrap();
        (node, dir)
    };
    let (a, _a_dir) = start("node-a", &[], None);
    let (_c, _c_dir) = start("node-c", &[("wordcount", "wordcount")], Some(&a));
    wait_capsules(&[&a], &["wordcount"]);

    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let params = json!({ "tenant": "wordcount", "message": { "messageId": "t-1", "parts": [{ "text": "traced words" }] } });
    let answer = rpc_at(
        &format!("{}/", a.api),
        "SendMessage",
        params,
        &[("traceparent", &format!("00-{trace_id}-00f067aa0ba902b7-01"))],
    )
    .unwrap();
    assert_eq!(result(&answer)["task"]["status"]["state"], "TASK_STATE_COMPLETED", "{answer}");

    wait_for(CONVERGE, "spans from both nodes in one trace", || {
        let spans = collector.spans();
        let on = |service: &str, name: &str| {
            spans.iter().any(|(s, n, t)| s == service && n == name && t == trace_id)
        };
        (on("node-a", "a2a") && on("node-c", "task.accept") && on("node-c", "task.run")).then_some(())
    })
    .unwrap();
}

/// The network driver's mapping of libp2p's failures, through the daemon that ships: a
/// delivery whose outcome became unknown (the owner accepted it, held the request open
/// while the task ran, and its connection closed) fails at the entry node and is never
/// placed on the other node that hosts the capsule, not even when the client sends the
/// same message again: the task may be running at the first owner.
#[test]
fn a_delivery_lost_with_its_owner_is_never_run_elsewhere() {
    let spin = || vec![("spin", "misbehaving_spin", "[limits]\ndeadline_ms = 30000\n".to_owned())];
    let a = node(&config(&[], ""), &[], None);
    let mut b = node(&config(&[], ""), &spin(), Some(&a));
    let mut c = node(&config(&[], ""), &spin(), Some(&a));
    wait_for(CONVERGE, "node A to know both providers of spin", || {
        let view = a.get("/v1/capsules").ok()?;
        let spin = view["capsules"].as_array()?.iter().find(|c| c["name"] == "spin")?.clone();
        (spin["providers"].as_array()?.len() == 2).then_some(())
    })
    .unwrap();

    // A blocking send: the owner accepts, then holds the request open while the task runs.
    let send = |message_id: &'static str| {
        let api = a.api.clone();
        std::thread::spawn(move || {
            let message =
                json!({ "messageId": message_id, "role": "ROLE_USER", "parts": [{ "text": "go" }] });
            rpc_at(&api, "SendMessage", json!({ "tenant": "spin", "message": message }), &[]).unwrap()
        })
    };
    let first = send("lost-1");
    let owner_is_b = wait_for(Duration::from_secs(10), "an owner to accept the task", || {
        if !b.task_ids().is_empty() { Some(true) } else { (!c.task_ids().is_empty()).then_some(false) }
    })
    .unwrap();
    let (owner, other) = if owner_is_b { (&mut b, &c) } else { (&mut c, &b) };
    owner.kill();

    let answer = first.join().unwrap();
    let error = answer.get("error").unwrap_or_else(|| panic!("the placement must fail: {answer}"));
    let message = error["message"].as_str().unwrap_or_default();
    assert!(message.contains("not retried elsewhere"), "{answer}");
    assert!(other.task_ids().is_empty(), "the other provider was given the task: {:?}", other.task_ids());

    // The same message again: the router sends it only to the possible owner, which is down.
    let again = send("lost-1").join().unwrap();
    assert!(again.get("error").is_some(), "a retry must not run the task elsewhere: {again}");
    assert!(other.task_ids().is_empty(), "the retry reached the other provider: {:?}", other.task_ids());
}

#[test]
fn a_route_the_entry_node_acknowledged_survives_its_sigkill() {
    let b = node(&config(&[], ""), &[("ask", "ask", String::new())], None);
    let a_dir = murmur_tests::init_data_dir_with(&config(&[], ""));
    let bootstrap = b.dial_addrs()[0].clone();
    let mut flags: Vec<String> = murmur_tests::LOOPBACK.iter().map(|s| (*s).to_owned()).collect();
    flags.extend(["--bootstrap".to_owned(), bootstrap]);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let mut a = TestNode::start_in(a_dir.path(), &flags).unwrap();
    wait_capsules(&[&a], &["ask"]);
    // Acknowledged, then killed at once: well inside the second in which a write nobody
    // waits for may still be in memory only.
    let sent: Vec<String> = (0..5)
        .map(|i| {
            let answer = a.send("mesh://ask", &format!("kept {i}?"), &format!("sk-{i}"), true).unwrap();
            result(&answer)["task"]["id"].as_str().unwrap().to_owned()
        })
        .collect();
    a.kill();
    let a = TestNode::start_in(a_dir.path(), &flags).unwrap();
    // A's router remembers nothing now: only the stored routes lead to B.
    for id in &sent {
        let got = wait_for(CONVERGE, "the restarted entry node to find the task", || {
            a.task(id).ok().filter(|t| t.get("result").is_some())
        })
        .unwrap_or_else(|e| panic!("{e}: task {id} is lost at its entry node\n{}", a.stderr()));
        assert_eq!(result(&got)["metadata"]["murmur"]["owner"], b.peer_id(), "{got}");
    }
}

#[test]
fn a_stopping_node_drains_its_tasks_while_new_ones_go_to_other_nodes() {
    let a = node(&config(&[], "[tasks]\ndrain_secs = 30\n"), &[("sleeper", "sleeper", String::new())], None);
    let b = node(&config(&[], ""), &[("sleeper", "sleeper", String::new())], Some(&a));
    let mut a = a;
    wait_for(CONVERGE, "B to list sleeper on A and B", || {
        let view = b.get("/v1/capsules").ok()?;
        let hosts = view["capsules"].as_array()?.iter().find(|c| c["name"] == "sleeper")?["providers"]
            .as_array()?
            .len();
        (hosts == 2).then_some(())
    })
    .unwrap();
    // A task that is working on A when A is told to stop, its client waiting for the result.
    let pinned = format!("mesh://sleeper@{}", a.peer_id());
    let waiting = {
        let (api, pinned) = (a.api.clone(), pinned.clone());
        std::thread::spawn(move || {
            let params = json!({
                "tenant": pinned,
                "message": { "messageId": "drain-1", "role": "ROLE_USER", "parts": [{ "text": "3000" }] },
                "configuration": { "returnImmediately": false },
            });
            rpc_at(&api, "SendMessage", params, &[])
        })
    };
    let id = wait_for(CONVERGE, "the long task to work on A", || {
        let id = a.task_ids().into_iter().next()?;
        (state(result(&a.task(&id).ok()?)) == "TASK_STATE_WORKING").then_some(id)
    })
    .unwrap();
    let stopping = std::time::Instant::now();
    a.signal(nix::sys::signal::Signal::SIGTERM);
    // Draining: not ready; A withdrew its capsules, so a task pinned to A finds no host
    // (had it arrived first, A's owner would refuse it: not_accepting, shutting down).
    wait_for(CONVERGE, "A's health to say draining", || {
        (a.get("/healthz").ok()?["status"] == "draining").then_some(())
    })
    .unwrap();
    let refused = a.send(&pinned, "10", "drain-2", false).unwrap();
    let check = refused["error"]["data"]["check"].as_str().unwrap_or_default();
    assert!(check == "unavailable" || check == "not_accepting", "{refused}");
    // A new task for the capsule, sent through A itself, runs on B.
    let elsewhere = a.send("mesh://sleeper", "10", "drain-3", false).unwrap();
    let task = &result(&elsewhere)["task"];
    assert_eq!(state(task), "TASK_STATE_COMPLETED", "{elsewhere}");
    assert_eq!(task["metadata"]["murmur"]["owner"], b.peer_id(), "{elsewhere}");
    // The task A held ends as it would have, its waiting client gets the result, and only
    // then does A stop.
    let answer = waiting.join().unwrap().unwrap();
    let done = &result(&answer)["task"];
    assert_eq!(state(done), "TASK_STATE_COMPLETED", "{answer}\n{}", a.stderr());
    assert!(text(done).contains("slept 3000 ms"), "{answer}");
    let status = a.wait_exit(Duration::from_secs(30)).unwrap();
    assert!(status.success(), "{status}\n{}", a.stderr());
    assert!(stopping.elapsed() >= Duration::from_millis(1500), "A waited for its task");
    assert!(a.stderr().contains("drained: every task this node held has ended"), "{}", a.stderr());
    // On disk as completed: A started again answers for it.
    let again = TestNode::start_in(&a.data_dir, murmur_tests::LOOPBACK).unwrap();
    let kept = again.task(&id).unwrap();
    assert_eq!(state(result(&kept)), "TASK_STATE_COMPLETED", "{kept}");
}

/// Every page of `ListTasks` with `params`, following `nextPageToken` to its end.
fn list_all(node: &TestNode, params: Value) -> Vec<Value> {
    let mut pages = Vec::new();
    let mut token = String::new();
    loop {
        let mut params = params.clone();
        params["pageToken"] = json!(token);
        let page = result(&node.rpc("ListTasks", params).unwrap()).clone();
        token = page["nextPageToken"].as_str().unwrap().to_owned();
        pages.push(page);
        assert!(pages.len() < 100, "the pages never end");
        if token.is_empty() {
            return pages;
        }
    }
}

fn ids(pages: &[Value]) -> Vec<String> {
    pages
        .iter()
        .flat_map(|p| p["tasks"].as_array().unwrap().iter().map(|t| t["id"].as_str().unwrap().to_owned()))
        .collect()
}

#[test]
fn list_pages_go_on_past_memory_to_the_finished_tasks_only_the_disk_holds() {
    // Ten finished tasks in memory; 25 finish, so 15 are held only by the task database.
    let dir = murmur_tests::init_data_dir_with(&config(&[], "[tasks]\nfinished_in_memory = 10\n"));
    install_manifest(dir.path(), "echo", "echo", "");
    let flags = murmur_tests::LOOPBACK;
    let mut a = TestNode::start_in(dir.path(), flags).unwrap();
    wait_capsules(&[&a], &["echo"]);
    let mut sent: Vec<String> = (0..25)
        .map(|i| {
            let answer = a.send("mesh://echo", &format!("t{i}"), &format!("p-{i}"), false).unwrap();
            let task = &result(&answer)["task"];
            assert_eq!(state(task), "TASK_STATE_COMPLETED", "{answer}");
            task["id"].as_str().unwrap().to_owned()
        })
        .collect();
    sent.sort();

    let check = |a: &TestNode, when: &str| {
        let pages = list_all(a, json!({ "pageSize": 7 }));
        let listed = ids(&pages);
        let mut unique = listed.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique, sent, "{when}: every task once: {listed:?}");
        assert_eq!(listed.len(), 25, "{when}: none twice");
        assert!(pages.iter().all(|p| p["tasks"].as_array().unwrap().len() <= 7), "{when}");
        assert!(pages.len() >= 4, "{when}: {} pages", pages.len());
        assert!(
            pages.iter().any(|p| p["nextPageToken"].as_str().unwrap().starts_with('d')),
            "{when}: the later pages come from the task database"
        );
        // A filter applies to the database's part too; a state nothing finished is in reads
        // none of it.
        let completed = ids(&list_all(a, json!({ "pageSize": 100, "status": "TASK_STATE_COMPLETED" })));
        assert_eq!(completed.len(), 25, "{when}");
        let working = list_all(a, json!({ "status": "TASK_STATE_WORKING" }));
        assert_eq!((working.len(), ids(&working).len()), (1, 0), "{when}");
        let other = ids(&list_all(a, json!({ "contextId": "no such context" })));
        assert!(other.is_empty(), "{when}: {other:?}");
    };
    check(&a, "running");

    // A token this node could not have issued is refused, and says what to pass instead.
    let bad = a.rpc("ListTasks", json!({ "pageToken": "d0123" })).unwrap();
    assert_eq!(bad["error"]["code"], -32602, "{bad}");
    assert!(bad["error"]["message"].as_str().unwrap().contains("nextPageToken"), "{bad}");

    // After a restart, which loads only the newest ten, the same.
    a.terminate(Duration::from_secs(20)).unwrap();
    let a = TestNode::start_in(dir.path(), flags).unwrap();
    check(&a, "after a restart");
}
