//! Brains with real interpreters and real components (run `bash capsules/build.sh` first;
//! `tests/run.sh` does): the example brain in its three forms, timers, memory across
//! reloads, lifecycle, and hostile brains, on one node without a network.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use murmur_brain::{AgentConfig, Brains, NoMesh, Source, State};
use murmur_runtime::ports::Ports;
use murmur_runtime::{Runtime, RuntimeOptions};
use murmur_store::ArtifactStore;

fn capsules() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../capsules")
}

fn wasm(name: &str) -> PathBuf {
    let path = capsules().join("target/wasm32-wasip2/release").join(format!("{name}.wasm"));
    assert!(path.is_file(), "{} is missing: run `bash capsules/build.sh`", path.display());
    path
}

struct Node {
    _dir: tempfile::TempDir,
    brains: Brains,
}

impl Node {
    fn start(configs: Vec<AgentConfig>) -> Self {
        Self::start_with_store(configs, |_| {})
    }

    /// [`Node::start`] without the pooling allocator (script brains need no instance
    /// pool, and each pool reserves a large range of address space).
    fn start_scripts(configs: Vec<AgentConfig>) -> Self {
        Self::start_pooled(configs, |_| {}, false)
    }

    /// [`Node::start`], with `stock` filling the store first.
    fn start_with_store(configs: Vec<AgentConfig>, stock: impl FnOnce(&ArtifactStore)) -> Self {
        Self::start_pooled(configs, stock, true)
    }

    fn start_pooled(configs: Vec<AgentConfig>, stock: impl FnOnce(&ArtifactStore), pooling: bool) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(ArtifactStore::open(&dir.path().join("store")).unwrap());
        stock(&store);
        let runtime = Runtime::new(
            RuntimeOptions::new(dir.path().to_path_buf(), pooling),
            store.clone(),
            Ports::standalone().unwrap(),
        )
        .unwrap();
        // The node's one tool capsule: `wordcount`, for the tooling tests.
        let tool = format!(
            "name = \"wordcount\"\nversion = \"1.0.0\"\nkind = \"tool\"\nartifact = \"{}\"\n",
            wasm("wordcount").display()
        );
        let manifest = murmur_runtime::CapsuleManifest::parse(&tool, Path::new("/"), dir.path()).unwrap();
        runtime.install(manifest).unwrap();
        let brains = Brains::start(
            configs,
            runtime,
            store,
            &dir.path().join("brains.redb"),
            &dir.path().join("agents"),
            Arc::new(NoMesh),
            Arc::new(murmur_brain::NoMcp),
        )
        .unwrap();
        Self { _dir: dir, brains }
    }

    fn memory(&self, agent: &str) -> std::collections::BTreeMap<String, String> {
        self.brains.memory(agent).unwrap().into_iter().collect()
    }

    /// Waits until `agent` remembers `key` (as `value`, when given).
    async fn remembers(&self, agent: &str, key: &str, value: Option<&str>) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(found) = self.memory(agent).get(key)
                && value.is_none_or(|v| v == found)
            {
                return found.clone();
            }
            assert!(
                Instant::now() < deadline,
                "{agent} never remembered {key}={value:?}; it remembers {:?}; its log: {:?}",
                self.memory(agent),
                self.brains.agent(agent).map(|a| a.logs.tail(20))
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn say(&self, agent: &str, text: &str) {
        self.brains.send_as_client(agent, text.into()).await.unwrap_or_else(|e| panic!("to {agent}: {e}"));
    }

    async fn until(&self, what: &str, check: impl Fn(&Brains) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !check(&self.brains) {
            assert!(Instant::now() < deadline, "{what} did not happen in time");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

fn agent(name: &str, source: Source) -> AgentConfig {
    AgentConfig::new(name, source)
}

fn script(dir: &Path, file: &str, text: &str) -> Source {
    let path = dir.join(file);
    std::fs::write(&path, text).unwrap();
    Source::File(path)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_example_brain_behaves_the_same_in_rhai_javascript_and_webassembly() {
    let forms = [
        ("ex-rhai", Source::File(capsules().join("brains/example.rhai"))),
        ("ex-js", Source::File(capsules().join("brains/example.js"))),
        ("ex-wasm", Source::File(wasm("example_brain"))),
    ];
    let node = Node::start(forms.iter().map(|(name, source)| agent(name, source.clone())).collect());
    for (name, _) in &forms {
        node.remembers(name, "whoami", Some(name)).await;
    }
    // A ring: each hears its predecessor, which pings it; it answers `pong` (which the
    // predecessor, hearing only its own predecessor, drops).
    let names: Vec<&str> = forms.iter().map(|(n, _)| *n).collect();
    for (i, name) in names.iter().enumerate() {
        let pred = names[(i + names.len() - 1) % names.len()];
        node.say(name, &format!("subscribe {pred}")).await;
        node.remembers(name, "subscribed", Some(pred)).await;
    }
    for (i, name) in names.iter().enumerate() {
        let pred = names[(i + names.len() - 1) % names.len()];
        node.say(pred, &format!("send {name} ping from {pred}")).await;
        node.say(name, "remember colour blue").await;
        node.say(name, "timer 50 soon").await;
        node.say(name, "timer 60000 never").await;
        node.say(name, "cancel never").await;
        node.say(name, "send nobody hello").await;
    }
    let normalize = |name: &str, pred: &str| {
        let mut memory = node.memory(name);
        memory.remove("whoami");
        memory
            .into_iter()
            .map(|(k, v)| (k.replace(pred, "PRED"), v.replace(pred, "PRED").replace(name, "ME")))
            .collect::<std::collections::BTreeMap<_, _>>()
    };
    let mut seen = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let pred = names[(i + names.len() - 1) % names.len()];
        node.remembers(name, &format!("from:{pred}"), None).await;
        node.remembers(name, "timer:soon", Some("fired")).await;
        node.remembers(name, "send_error", None).await;
        node.remembers(name, "colour", Some("blue")).await;
        // The cancelled timer would have fired long after; give it no chance to matter.
        seen.push(normalize(name, pred));
    }
    assert_eq!(seen[0], seen[1], "rhai and JavaScript differ");
    assert_eq!(seen[1], seen[2], "JavaScript and WebAssembly differ");
    let memory = &seen[0];
    assert_eq!(memory["from:PRED"], "ping from PRED");
    assert_eq!(memory["runs"], "1");
    assert!(!memory.contains_key("timer:never"));
    assert!(memory["send_error"].contains("no agent named `nobody`"), "{memory:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn two_agents_sharing_a_component_know_who_they_are() {
    let brain = Source::File(wasm("example_brain"));
    let node = Node::start(vec![agent("alice", brain.clone()), agent("bob", brain)]);
    assert_eq!(node.remembers("alice", "whoami", None).await, "alice");
    assert_eq!(node.remembers("bob", "whoami", None).await, "bob");
    // Memory is per agent: the same key, two values.
    node.say("alice", "remember k a").await;
    node.say("bob", "remember k b").await;
    node.remembers("alice", "k", Some("a")).await;
    node.remembers("bob", "k", Some("b")).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn every_timer_function_keeps_its_word() {
    let dir = tempfile::tempdir().unwrap();
    let timers = script(
        dir.path(),
        "timers.rhai",
        r#"
        let now = time_now();
        memory_set("formatted", time_format(0, "%Y-%m-%d %H:%M:%S"));
        try { time_format(now, "%Q"); } catch (e) { memory_set("bad_format", `${e}`); }
        try { wait_until(now - 1); } catch (e) { memory_set("past_wait", `${e}`); }
        try { sleep_until(now - 1); } catch (e) { memory_set("past_sleep", `${e}`); }
        try { wait_cron("no such spec"); } catch (e) { memory_set("bad_cron", `${e}`); }
        let at = wait_until(now + 100);
        let after = wait_for(150);
        let cancelled = wait_for(300);
        memory_set("cancel_pending", `${cancel_timer(cancelled)}`);
        memory_set("cancel_again", `${cancel_timer(cancelled)}`);
        let cron = wait_cron("* * * * * *");
        let started = time_now();
        sleep_for(50);
        memory_set("slept_ms", `${time_now() - started >= 50}`);
        let fired = [];
        let crons = 0;
        while crons < 2 {
            let event = recv();
            if event.kind != "timer" { continue; }
            if event.id == at { fired.push("until"); }
            if event.id == after { fired.push("after"); }
            if event.id == cancelled { fired.push("cancelled"); }
            if event.id == cron { crons += 1; fired.push("cron"); if crons < 2 { cron = wait_cron("* * * * * *"); } }
        }
        sleep_cron("* * * * * *");
        memory_set("fired", fired.reduce(|sum, x| if sum == () { x } else { sum + "," + x }));
        memory_set("done", "yes");
        loop { recv(); }
        "#,
    );
    let node = Node::start(vec![agent("clock", timers)]);
    node.remembers("clock", "done", Some("yes")).await;
    let memory = node.memory("clock");
    assert_eq!(memory["formatted"], "1970-01-01 00:00:00");
    assert!(memory["bad_format"].contains("not a strftime format"), "{memory:?}");
    assert!(memory["past_wait"].contains("not in the future"), "{memory:?}");
    assert!(memory["past_sleep"].contains("not in the future"), "{memory:?}");
    assert!(memory["bad_cron"].contains("not a cron spec"), "{memory:?}");
    assert_eq!((memory["cancel_pending"].as_str(), memory["cancel_again"].as_str()), ("true", "false"));
    assert_eq!(memory["slept_ms"], "true");
    let fired: Vec<&str> = memory["fired"].split(',').collect();
    // The cron fires on the next whole second, which may come before the 100 ms wait: only
    // the two waits' order is fixed.
    let waits: Vec<&str> = fired.iter().copied().filter(|f| *f != "cron").collect();
    assert_eq!(waits, ["until", "after"], "{fired:?}");
    assert_eq!(fired.iter().filter(|f| **f == "cron").count(), 2, "{fired:?}");
    assert!(!fired.contains(&"cancelled"), "a cancelled wait fired: {fired:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn memory_survives_a_reload_and_a_bad_edit_leaves_the_live_run_going() {
    let dir = tempfile::tempdir().unwrap();
    let example = std::fs::read_to_string(capsules().join("brains/example.rhai")).unwrap();
    let source = script(dir.path(), "brain.rhai", &example);
    let mut config = agent("keeper", source);
    config.grace = Duration::from_secs(2);
    let node = Node::start(vec![config]);
    node.remembers("keeper", "runs", Some("1")).await;
    node.say("keeper", "remember before reload").await;
    node.remembers("keeper", "before", Some("reload")).await;

    // A valid edit: the brain hears `reload`, exits, and the new code runs on its memory.
    std::fs::write(dir.path().join("brain.rhai"), format!("{example}\n// edited\n")).unwrap();
    node.remembers("keeper", "last_lifecycle", Some("reload")).await;
    node.remembers("keeper", "runs", Some("2")).await;
    assert_eq!(node.memory("keeper")["before"], "reload");

    // An edit that does not parse: the live run hears the failure and keeps answering.
    std::fs::write(dir.path().join("brain.rhai"), "let x = ;").unwrap();
    let error = node.remembers("keeper", "lifecycle_error", None).await;
    assert!(error.contains("reload failed") && error.contains("rhai"), "{error}");
    node.say("keeper", "remember still alive").await;
    node.remembers("keeper", "still", Some("alive")).await;
    assert_eq!(node.memory("keeper")["runs"], "2");
    assert_eq!(node.brains.agent("keeper").unwrap().stats.restarts(), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn shutdown_tells_subscribed_brains_and_waits_for_them() {
    let node = Node::start(vec![agent("js", Source::File(capsules().join("brains/example.js")))]);
    node.remembers("js", "runs", Some("1")).await;
    let began = Instant::now();
    node.brains.shutdown(Duration::from_secs(10)).await;
    assert!(began.elapsed() < Duration::from_secs(5), "a brain that exits at once was waited for");
    assert_eq!(node.memory("js")["last_lifecycle"], "shutdown");
    assert_eq!(node.brains.agent("js").unwrap().state(), State::Stopped);
}

#[tokio::test(flavor = "multi_thread")]
async fn hostile_brains_are_stopped_restarted_and_contained() {
    let dir = tempfile::tempdir().unwrap();
    let hostile = Source::File(wasm("hostile_brain"));
    let busy = |mut config: AgentConfig| {
        config.busy = Duration::from_millis(300);
        config.memory_bytes = 16 << 20;
        config
    };
    let mut sink = agent(
        "sink",
        script(dir.path(), "sink.rhai", "subscribe_agent(\"flood-wasm\"); loop { sleep_for(60000); }"),
    );
    sink.inbox_max = 8;
    let configs = vec![
        busy(agent("spin-rhai", script(dir.path(), "spin.rhai", "let n = 0; loop { n += 1; }"))),
        busy(agent("spin-js", script(dir.path(), "spin.js", "let n = 0; while (true) { n++; }"))),
        busy(agent("spin-wasm", hostile.clone())),
        busy(agent("bomb-wasm", hostile.clone())),
        busy(agent("bomb-rhai", script(dir.path(), "bomb.rhai", "let s = \"x\"; loop { s += s; }"))),
        busy(agent(
            "bomb-js",
            script(dir.path(), "bomb.js", "let a = []; while (true) { a.push(new Array(100000).fill(1)); }"),
        )),
        busy(agent("flood-wasm", hostile.clone())),
        busy(agent("hoard-wasm", hostile)),
        sink,
        agent("calm", Source::File(capsules().join("brains/example.rhai"))),
    ];
    let node = Node::start(configs);
    let restarted =
        |name: &'static str| move |brains: &Brains| brains.agent(name).unwrap().stats.restarts() >= 1;
    for name in ["spin-rhai", "spin-js", "spin-wasm", "bomb-wasm", "bomb-rhai", "bomb-js"] {
        node.until(&format!("{name} to be stopped and restarted"), restarted(name)).await;
    }
    let log = |name: &str| {
        node.brains
            .agent(name)
            .unwrap()
            .logs
            .tail(50)
            .iter()
            .map(|l| l.message.clone())
            .collect::<Vec<_>>()
            .join("\n")
    };
    for name in ["spin-rhai", "spin-js", "spin-wasm"] {
        let log = log(name);
        assert!(log.contains("without waiting") || log.contains("deadline"), "{name}: {log}");
        assert!(log.contains("restarting in"), "{name}: {log}");
    }
    assert!(log("bomb-wasm").contains("memory limit"), "{}", log("bomb-wasm"));
    // The flood fills the sink's small inbox; every further send is refused and counted.
    node.until("the sink's inbox to overflow", |brains| {
        brains.agent("sink").unwrap().stats.dropped_by_reason().get("inbox_full").copied().unwrap_or(0) > 10
    })
    .await;
    assert_eq!(node.brains.agent("sink").unwrap().inbox.depth(), 8);
    let answer = node.remembers("hoard-wasm", "answer", None).await;
    assert!(answer.contains("at most 65536 bytes"), "{answer}");
    assert!(!node.memory("hoard-wasm").contains_key("big"));
    // Through all of it, a calm brain on the same node answers.
    node.say("calm", "remember fine yes").await;
    node.remembers("calm", "fine", Some("yes")).await;
    assert_eq!(node.brains.agent("calm").unwrap().stats.restarts(), 0);
}

fn brain_artifact(store: &ArtifactStore, text: &str) {
    let meta = murmur_store::ArtifactMeta {
        name: "planner".into(),
        version: "1.0.0".into(),
        kind: murmur_store::CapsuleKind::Brain,
        runtime: murmur_store::Platform::Native,
        description: "the example brain".into(),
        tags: vec![],
        input_schema: None,
        output_schema: None,
    };
    store.add(&meta, text.as_bytes(), None).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_brain_from_the_store_runs_and_reloads_when_its_artifact_changes() {
    let example = std::fs::read_to_string(capsules().join("brains/example.rhai")).unwrap();
    let mut config = agent("stored", Source::Stored { name: "planner".into(), version: "1.0.0".into() });
    config.language = Some(murmur_brain::Language::Rhai);
    let mut store_path = None;
    let node = Node::start_with_store(vec![config], |store| {
        brain_artifact(store, &example);
        store_path = Some(store.root().to_path_buf());
    });
    assert_eq!(node.remembers("stored", "runs", None).await, "1");
    assert_eq!(node.brains.status()[0].brain, "planner@1.0.0");
    // The same name@version replaced in the store: the node reloads it.
    let store = ArtifactStore::open(&store_path.unwrap()).unwrap();
    brain_artifact(&store, &format!("{example}\n// a new release\n"));
    node.remembers("stored", "last_lifecycle", Some("reload")).await;
    node.remembers("stored", "runs", Some("2")).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn bare_mur_is_this_nodes_clients_and_lifecycle_is_once_per_run() {
    let dir = tempfile::tempdir().unwrap();
    let brain = script(
        dir.path(),
        "ops.rhai",
        r#"
        let own = subscribe_agent("mur");
        let other = subscribe_agent("mur@12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN");
        let lifecycle = subscribe_lifecycle();
        unsubscribe_lifecycle(lifecycle);
        try { subscribe_lifecycle(); } catch (e) { memory_set("second_lifecycle", `${e}`); }
        unsubscribe_lifecycle("not-ours");
        memory_set("ready", "yes");
        loop {
            let event = ();
            try { event = recv(); } catch { continue; }
            if event.id == own { memory_set("own", event.value); }
            if event.id == other { memory_set("other", event.value); }
        }
        "#,
    );
    let node = Node::start(vec![agent("ops", brain)]);
    node.remembers("ops", "ready", Some("yes")).await;
    assert!(node.memory("ops")["second_lifecycle"].contains("one subscription per run"));
    let message = |text: &str| murmur_protocol::agent::AgentMessage {
        to: "ops".into(),
        from: "mur".into(),
        text: text.into(),
    };
    // Another node's operators: not heard through the bare `mur` subscription…
    let stranger = murmur_protocol::SecretKey::from_seed([3; 32]).node_id();
    let _ = node.brains.deliver(stranger, message("from a stranger's operator"));
    // …and a subscribed node's are, through `mur@PEER`.
    let subscribed: murmur_protocol::NodeId =
        "12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN".parse().unwrap();
    let _ = node.brains.deliver(subscribed, message("from that node's operator"));
    node.say("ops", "from this node's operator").await;
    node.remembers("ops", "own", Some("from this node's operator")).await;
    node.remembers("ops", "other", Some("from that node's operator")).await;
    assert_eq!(node.brains.agent("ops").unwrap().stats.dropped_by_reason()["not_subscribed"], 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_javascript_brain_runs_as_the_function_body_it_was_checked_as() {
    let dir = tempfile::tempdir().unwrap();
    // Top-level `return` parses as a function body (the check) and must run the same way.
    let brain = script(
        dir.path(),
        "early.js",
        "memory_set(\"ran\", \"yes\");\nif (true) { return; }\nmemory_set(\"after\", \"no\");\n",
    );
    let node = Node::start(vec![agent("early", brain)]);
    node.remembers("early", "ran", Some("yes")).await;
    assert!(!node.memory("early").contains_key("after"));
}

fn request(text: &str) -> murmur_protocol::model::ChatRequest {
    murmur_protocol::model::ChatRequest {
        messages: vec![murmur_protocol::model::ChatMessage {
            role: "user".into(),
            content: Some(text.into()),
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// Reads a session to its end: the text and how it ended.
async fn read(mut session: murmur_brain::Session) -> (String, Option<String>) {
    let mut text = String::new();
    loop {
        match tokio::time::timeout(Duration::from_secs(20), session.next()).await.expect("the session moves")
        {
            Ok(delta) => text.push_str(delta.content.as_deref().unwrap_or_default()),
            Err(end) => return (text, end),
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn endpoint_sessions_end_exactly_once_and_hostile_calls_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    // `rival` tries to take echo's model, to stream into echo's sessions, and to stream
    // an oversized delta; it remembers each refusal.
    let rival = script(
        dir.path(),
        "rival.rhai",
        r#"
        subscribe_agent("mur");
        loop {
            let event = recv();
            if event.kind != "message" { continue; }
            let words = event.value.split(" ");
            switch words[0] {
                "take" => { try { subscribe_endpoint(words[1]); memory_set("took", "yes"); } catch (e) { memory_set("take_error", `${e}`); } }
                "bad-name" => { try { subscribe_endpoint("no spaces allowed"); } catch (e) { memory_set("name_error", `${e}`); } }
                "inject" => { try { stream_endpoint(words[1], #{ content: "forged" }); } catch (e) { memory_set("inject_error", `${e}`); } }
                "huge" => {
                    let id = subscribe_endpoint("huge-model");
                    let text = "x";
                    while text.len() <= 65536 { text += text; }
                    let event = recv();
                    try { stream_endpoint(event.value.session, #{ content: text }); } catch (e) { memory_set("huge_error", `${e}`); }
                    stream_endpoint(event.value.session, #{ content: "small", finish_reason: "stop" });
                }
            }
        }
        "#,
    );
    let node = Node::start_scripts(vec![
        agent("echo", Source::File(capsules().join("brains/echo-model.rhai"))),
        agent("rival", rival),
    ]);
    node.remembers("echo", "serving", Some("echo-model")).await;
    assert!(node.brains.serves("echo-model"));
    assert_eq!(node.brains.endpoints().models(), vec!["echo-model".to_owned()]);

    // A completion, ended normally, and the agent told so.
    let session = node.brains.open_session("echo-model", request("a b c")).unwrap();
    assert_eq!(read(session).await, ("a b c".to_owned(), None));
    node.remembers("echo", "last_end", Some("ok")).await;

    // Unknown models are refused as not served; a taken model cannot be taken twice.
    let refused = node.brains.open_session("nobody-model", request("x")).unwrap_err();
    assert!(matches!(refused, murmur_brain::OpenError::NotServed(_)), "{refused}");
    node.say("rival", "take echo-model").await;
    let error = node.remembers("rival", "take_error", None).await;
    assert!(error.contains("already served by agent `echo`"), "{error}");
    node.say("rival", "bad-name").await;
    assert!(node.remembers("rival", "name_error", None).await.contains("model name"));

    // Another agent cannot stream into echo's session; the session is unharmed.
    node.say("echo", "slow 100").await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let session = node.brains.open_session("echo-model", request("one two three")).unwrap();
    node.say("rival", &format!("inject {}", session.id)).await;
    let error = node.remembers("rival", "inject_error", None).await;
    assert!(error.contains("no open endpoint session of this agent"), "{error}");
    assert_eq!(read(session).await, ("one two three".to_owned(), None));

    // An oversized delta is refused and the session goes on.
    node.say("rival", "huge").await;
    node.until("rival to serve huge-model", |b| b.serves("huge-model")).await;
    let session = node.brains.open_session("huge-model", request("x")).unwrap();
    assert_eq!(read(session).await, ("small".to_owned(), None));
    assert!(node.remembers("rival", "huge_error", None).await.contains("at most 65536 bytes"));

    // The client going away ends the session, and the agent hears it once.
    let ended = |outcome: &str| {
        node.brains.endpoints().stats.ended().into_iter().find(|(o, _)| *o == outcome).map_or(0, |(_, n)| n)
    };
    let mut session = node.brains.open_session("echo-model", request("one two three four five")).unwrap();
    assert!(session.next().await.is_ok());
    drop(session);
    node.remembers("echo", "last_end", Some("the client went away")).await;
    assert_eq!(ended("client_gone"), 1);

    // Unsubscribing ends open sessions with an error; the model leaves.
    let session = node.brains.open_session("echo-model", request("one two three four five")).unwrap();
    node.say("echo", "unsubscribe").await;
    let (_, end) = read(session).await;
    assert_eq!(end.as_deref(), Some("the agent unsubscribed the model"));
    node.until("echo-model to leave", |b| !b.serves("echo-model")).await;
    assert_eq!(ended("unsubscribed"), 1);
    assert_eq!(ended("completed"), 3);
    assert_eq!(node.brains.endpoints().open_sessions(), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_brain_calls_the_tool_capsules_its_allowlist_names_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let text = r#"
        let ok = call_tool("", "wordcount", "one two three");
        memory_set("ok_id", ok);
        let missing = call_tool("", "word-missing", "x");
        memory_set("missing_id", missing);
        try { call_tool("", "echo", "x"); } catch (e) { memory_set("denied", `${e}`); }
        try { call_tool("files", "read", "{}"); } catch (e) { memory_set("not_allowed", `${e}`); }
        try { subscribe_resource_list(""); } catch (e) { memory_set("no_resources", `${e}`); }
        memory_set("unsubscribed_nothing", `${unsubscribe_resource(ok)}`);
        loop {
            let e = recv();
            if e.kind == "tool_result" {
                memory_set(`result_${e.id}`, e.value.value);
                memory_set(`name_${e.id}`, e.value.name);
            }
            if e.kind == "error" { memory_set(`error_${e.id}`, e.value); }
        }
    "#;
    let mut config = agent("toolbox", script(dir.path(), "toolbox.rhai", text));
    config.tools = vec!["word*".into()];
    let node = Node::start_scripts(vec![config]);
    let ok = node.remembers("toolbox", "ok_id", None).await;
    let result = node.remembers("toolbox", &format!("result_{ok}"), None).await;
    let counted: serde_json::Value = serde_json::from_str(&result).unwrap();
    assert_eq!(counted["words"], 3, "{result}");
    // Written just after the result: wait for it too.
    assert_eq!(node.remembers("toolbox", &format!("name_{ok}"), None).await, "wordcount");
    // Allowed by the glob, but not installed: the call is queued and fails as an event.
    let missing = node.memory("toolbox")["missing_id"].clone();
    let error = node.remembers("toolbox", &format!("error_{missing}"), None).await;
    assert!(error.contains("word-missing"), "{error}");
    let memory = node.memory("toolbox");
    assert!(memory["denied"].contains("`echo` is not in the `tools` of agent `toolbox`"), "{memory:?}");
    assert!(memory["not_allowed"].contains("MCP server `files` is not in the `mcp`"), "{memory:?}");
    assert!(memory["no_resources"].contains("no resources"), "{memory:?}");
    assert_eq!(memory["unsubscribed_nothing"], "false", "a tool call is no resource subscription");
}
