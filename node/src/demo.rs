//! `murnode demo`: a local mesh on 127.0.0.1 that does real work, step by step.
//!
//! It creates an authority key and signs a grant, starts three `murnode` processes (this
//! same binary) running the example capsules (real WebAssembly components from
//! `capsules/`, built on first use), bootstrapped in a chain, and then shows what the mesh
//! does: nodes find each other and learn every capsule; a client's task to
//! `mesh://wordcount` runs on the node that hosts it; the `relay` capsule on node1 sends a
//! task to `mesh://wordcount` on node3 because its grant allows it, and is refused before
//! anything leaves node1 when it tries `mesh://echo`, which its grant does not allow; a task
//! that asks for input gets it; an artifact published (signed) on node1 is installed on
//! node3 from the mesh, chunk by verified chunk, and runs there; a rhai brain on node1 and
//! a JavaScript brain on node3 talk across the mesh, and one answers when its timer fires;
//! a brain on node2 serves a model that a stock HTTP client streams from node1's
//! OpenAI-compatible endpoint.
//! Each step prints what happened and how long it took.
//! Without `--once` the nodes keep running for `mur` to explore until Ctrl-C.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use murmur_protocol::{AllowPattern, Grant, Signed};
use serde_json::{Value, json};

use murmur_api::exit::{CliError, CliResult};
use murmur_config::clock;
use murmur_store::keyfile;

/// Capsules each demo node runs: (name, component, extra manifest lines).
const CAPSULES: [&[(&str, &str, &str)]; 3] = [
    &[(
        "relay",
        "relay",
        "grant = \"../../relay.grant\"\n[capabilities]\nnetwork = { allow = [\"mesh://*\"] }\n",
    )],
    &[("echo", "echo", ""), ("ask", "ask", "[lifecycle]\ninput_timeout_secs = 120\n")],
    &[("wordcount", "wordcount", "")],
];

/// Brains each demo node runs: (agent, file, source). `scout` (rhai, node1) greets
/// `keeper` (JavaScript, node3) when an operator says `go`; `keeper` sets a timer, and when
/// it fires answers `scout` across the mesh.
const AGENTS: [&[(&str, &str, &str)]; 3] = [
    &[(
        "scout",
        "scout.rhai",
        r#"let operators = subscribe_agent("mur");
let keeper = subscribe_agent("keeper");
loop {
    let event = ();
    try { event = recv(); } catch { continue; }
    if event.kind != "message" { continue; }
    if event.id == operators && event.value == "go" { send_agent("keeper", "hello from scout"); }
    if event.id == keeper { memory_set("reply", event.value); log("info", `keeper says: ${event.value}`); }
}
"#,
    )],
    &[("echo", "echo-model.rhai", include_str!("../../capsules/brains/echo-model.rhai"))],
    &[(
        "keeper",
        "keeper.js",
        r#"subscribe_agent("scout");
let timer = null;
while (true) {
  let event;
  try { event = recv(); } catch (e) { continue; }
  if (event.kind === "message") { memory_set("heard", event.value); timer = wait_for(500); }
  if (event.kind === "timer" && event.id === timer) { send_agent("scout", `timer fired on ${whoami()}`); }
}
"#,
    )],
];

/// The guest components the demo runs.
const COMPONENTS: [&str; 4] = ["relay", "echo", "ask", "wordcount"];

/// How long any demo step may take before it counts as failed.
const STEP_TIMEOUT: Duration = Duration::from_secs(30);

/// Options of `murnode demo`.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// Exit after the walkthrough (status 0 only if every step behaved as expected).
    pub once: bool,
    /// Where to put the nodes' data directories (default: a new temporary directory).
    pub dir: Option<PathBuf>,
    /// Where the example components are (default: this checkout's capsules/, built on
    /// first use).
    pub components: Option<PathBuf>,
}

struct DemoNode {
    child: Child,
    name: String,
    peer_id: String,
    api: String,
    dial: String,
}

impl Drop for DemoNode {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl DemoNode {
    fn capsules(&self) -> Vec<String> {
        get(&format!("{}/v1/capsules", self.api))
            .ok()
            .and_then(|v| v["capsules"].as_array().cloned())
            .unwrap_or_default()
            .iter()
            .filter_map(|c| c["name"].as_str().map(str::to_owned))
            .collect()
    }
}

fn get(url: &str) -> anyhow::Result<Value> {
    let client = reqwest::blocking::Client::builder().timeout(Duration::from_secs(5)).build()?;
    Ok(client.get(url).send()?.json()?)
}

/// Calls A2A `method` on a node; returns `result`, or the JSON-RPC error as an error.
fn rpc(node: &DemoNode, method: &str, params: Value) -> anyhow::Result<Value> {
    let client = reqwest::blocking::Client::builder().timeout(Duration::from_secs(90)).build()?;
    let body = json!({ "jsonrpc": "2.0", "id": 1, "method": method, "params": params });
    let answer: Value = client.post(format!("{}/", node.api)).json(&body).send()?.json()?;
    if let Some(error) = answer.get("error") {
        bail!(
            "{} (check: {})",
            error["message"].as_str().unwrap_or("?"),
            error["data"]["check"].as_str().unwrap_or("-")
        );
    }
    Ok(answer["result"].clone())
}

/// `POST /v1/artifacts/pull` with `install`: the last line of the answer.
fn install(node: &DemoNode, artifact: &str) -> anyhow::Result<Value> {
    let client = reqwest::blocking::Client::builder().timeout(Duration::from_secs(60)).build()?;
    let body = json!({ "artifact": artifact, "install": true });
    let text = client.post(format!("{}/v1/artifacts/pull", node.api)).json(&body).send()?.text()?;
    Ok(serde_json::from_str(text.lines().last().unwrap_or("null"))?)
}

/// A2A 1.0 `SendMessage`, waiting for the result unless `immediately`; returns the task.
fn send(node: &DemoNode, target: &str, text: &str, immediately: bool) -> anyhow::Result<Value> {
    let params = json!({
        "tenant": target,
        "message": { "messageId": uuid::Uuid::new_v4().to_string(), "role": "ROLE_USER", "parts": [{ "text": text }] },
        "configuration": { "returnImmediately": immediately },
    });
    Ok(rpc(node, "SendMessage", params)?["task"].clone())
}

fn state(task: &Value) -> String {
    let state = task["status"]["state"].as_str().unwrap_or("?");
    state.strip_prefix("TASK_STATE_").unwrap_or(state).to_lowercase().replace('_', "-")
}

fn text(task: &Value) -> &str {
    task["status"]["message"]["parts"][0]["text"].as_str().unwrap_or("")
}

fn short(peer: &str) -> String {
    format!("…{}", &peer[peer.len().saturating_sub(8)..])
}

fn config(authority: &str, publisher: &str) -> String {
    format!(
        "# murnode demo node: fast adverts so changes show within seconds.\n[adverts]\nrefresh_secs = 1\nttl_secs = 3\n\n# A lab mesh on this machine: every node's clients reach every capsule.\n[runtime]\naudience = \"mesh\"\n\n[trust]\nauthorities = [\"{authority}\"]\npublishers = [\"{publisher}\"]\n"
    )
}

/// Finds the example components, building them on first use from this checkout.
fn components(options: &DemoOptions) -> anyhow::Result<PathBuf> {
    if let Some(dir) = &options.components {
        return Ok(dir.clone());
    }
    let capsules = Path::new(env!("CARGO_MANIFEST_DIR")).join("../capsules");
    let built = capsules.join("target/wasm32-wasip2/release");
    let missing = || COMPONENTS.iter().any(|c| !built.join(format!("{c}.wasm")).is_file());
    if missing() {
        anyhow::ensure!(
            capsules.join("build.sh").is_file(),
            "the example components are not here; pass --components DIR (with {}.wasm)",
            COMPONENTS.join(".wasm, ")
        );
        println!("Building the example capsules (first run only): bash capsules/build.sh");
        let status = Command::new("bash")
            .arg(capsules.join("build.sh"))
            .stdout(Stdio::null())
            .status()
            .context("running capsules/build.sh")?;
        anyhow::ensure!(
            status.success() && !missing(),
            "capsules/build.sh failed (it needs `rustup target add wasm32-wasip2`)"
        );
    }
    Ok(built)
}

#[allow(clippy::too_many_arguments)] // one node's whole setup, given once
fn start(
    exe: &Path,
    dir: &Path,
    name: &str,
    capsules: &[(&str, &str, &str)],
    agents: &[(&str, &str, &str)],
    components: &Path,
    (authority, publisher): (&str, &str),
    bootstrap: Option<&str>,
) -> anyhow::Result<DemoNode> {
    let data_dir = dir.join(name);
    murmur_store::data_dir::init(&data_dir)?;
    let mut text = config(authority, publisher);
    for (agent, file, source) in agents {
        std::fs::write(data_dir.join(file), source)?;
        text.push_str(&format!("\n[[agents]]\nname = \"{agent}\"\nbrain = \"{file}\"\ngrace_secs = 1\n"));
    }
    std::fs::write(data_dir.join(murmur_config::CONFIG_FILE), text)?;
    std::fs::create_dir_all(data_dir.join("capsules"))?;
    for (capsule, component, extra) in capsules {
        let manifest = format!(
            "name = \"{capsule}\"\nversion = \"0.1.0\"\nkind = \"tool\"\nartifact = \"{}\"\n{extra}",
            components.join(format!("{component}.wasm")).display()
        );
        std::fs::write(data_dir.join("capsules").join(format!("{capsule}.toml")), manifest)?;
    }
    let mut command = Command::new(exe);
    command
        .args([
            "run",
            "--json",
            "--api",
            "127.0.0.1:0",
            "--listen",
            "/ip4/127.0.0.1/tcp/0",
            "--no-mdns",
            "--data-dir",
        ])
        .arg(&data_dir)
        .env("MURNODE_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(data_dir.join("murnode.log"))?);
    if let Some(peer) = bootstrap {
        command.args(["--bootstrap", peer]);
    }
    let mut child = command.spawn().context("starting murnode")?;
    let stdout = child.stdout.take().context("murnode stdout")?;
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines();
        let _ = tx.send(lines.next());
        for _ in lines {}
    });
    let line = match rx.recv_timeout(STEP_TIMEOUT) {
        Ok(Some(Ok(line))) => line,
        _ => {
            let _ = child.kill();
            bail!("{name} did not start; see {}", data_dir.join("murnode.log").display());
        }
    };
    let ready: Value = serde_json::from_str(&line)?;
    let peer_id = ready["peer_id"].as_str().context("peer_id")?.to_owned();
    let addr = ready["listen_addrs"][0].as_str().context("listen address")?;
    Ok(DemoNode {
        child,
        name: name.to_owned(),
        dial: format!("{addr}/p2p/{peer_id}"),
        api: format!("http://{}", ready["api_addr"].as_str().context("api_addr")?),
        peer_id,
    })
}

/// Polls until `check` holds; returns how long it took.
fn until(what: &str, mut check: impl FnMut() -> bool) -> anyhow::Result<Duration> {
    let started = Instant::now();
    while !check() {
        if started.elapsed() > STEP_TIMEOUT {
            bail!("timed out after {STEP_TIMEOUT:?} waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(started.elapsed())
}

fn step(n: usize, text: &str) {
    println!("\n{n}. {text}");
}

/// Runs the walkthrough.
pub fn run(options: &DemoOptions) -> CliResult {
    let exe = std::env::current_exe().map_err(CliError::failed)?;
    let temp;
    let dir = match &options.dir {
        Some(dir) => dir.clone(),
        None => {
            temp = tempfile::Builder::new().prefix("murmur-demo-").tempdir().map_err(CliError::failed)?;
            temp.path().to_path_buf()
        }
    };
    let components = components(options).map_err(CliError::failed)?;
    walkthrough(&exe, &dir, &components, options.once).map_err(CliError::failed)
}

fn walkthrough(exe: &Path, dir: &Path, components: &Path, once: bool) -> anyhow::Result<()> {
    println!("Murmur demo: a local mesh of three nodes on 127.0.0.1 (data in {})", dir.display());
    std::fs::create_dir_all(dir)?;

    step(1, "Create an authority key and sign a grant: capsule `relay` may send to mesh://wordcount.");
    let authority = keyfile::generate();
    keyfile::create(&dir.join("authority.key"), &authority)?;
    let now = clock::now();
    let mut grant = Grant::new("relay", now.0, now, now.plus(24 * 3600 * 1000));
    grant.network = vec!["mesh://wordcount".parse::<AllowPattern>()?];
    let signed = Signed::sign(grant, &authority)?;
    std::fs::write(dir.join("relay.grant"), signed.envelope().encode())?;
    println!("   authority {}  (every node trusts it)", authority.public());
    println!("   {}  allows relay → mesh://wordcount, for 24 h", dir.join("relay.grant").display());
    let publisher = keyfile::generate();
    println!("   publisher {}  (every node trusts the artifacts it signs)", publisher.public());

    step(2, "Start three nodes, each bootstrapped only to the previous one.");
    let mut nodes: Vec<DemoNode> = Vec::new();
    let trust = (authority.public().to_string(), publisher.public().to_string());
    for (i, capsules) in CAPSULES.iter().enumerate() {
        let bootstrap = nodes.last().map(|n| n.dial.clone());
        let node = start(
            exe,
            dir,
            &format!("node{}", i + 1),
            capsules,
            AGENTS[i],
            components,
            (&trust.0, &trust.1),
            bootstrap.as_deref(),
        )?;
        let names: Vec<&str> = capsules.iter().map(|c| c.0).collect();
        println!("   {}  {}  api {}  runs {}", node.name, node.peer_id, node.api, names.join(", "));
        nodes.push(node);
    }

    step(3, "Every node discovers the others and learns every capsule (gossip + anti-entropy).");
    let all: Vec<&str> = CAPSULES.iter().flat_map(|c| c.iter().map(|c| c.0)).collect();
    for node in &nodes {
        let took = until("every capsule", || {
            let listed = node.capsules();
            all.iter().all(|c| listed.iter().any(|l| l == c))
        })?;
        println!("   {} lists all {} capsules after {} ms", node.name, all.len(), took.as_millis());
    }

    step(4, "A client asks node1 for mesh://wordcount; only node3 runs it, so the task goes there.");
    let started = Instant::now();
    let task = send(&nodes[0], "mesh://wordcount", "the quick brown fox jumps", false)?;
    anyhow::ensure!(state(&task) == "completed", "the task is {}: {}", state(&task), text(&task));
    let owner = task["metadata"]["murmur"]["owner"].as_str().unwrap_or("");
    anyhow::ensure!(owner == nodes[2].peer_id, "the task ran on {owner}, not node3");
    println!(
        "   task {} completed on node3 ({}) in {} ms",
        task["id"].as_str().unwrap_or("?"),
        short(owner),
        started.elapsed().as_millis()
    );
    println!("   result: {}", text(&task));

    step(5, "Capsule to capsule: `relay` on node1 sends to mesh://wordcount with murmur:message/send.");
    let relayed = send(&nodes[0], "mesh://relay", "mesh://wordcount hello from the relay capsule", false)?;
    anyhow::ensure!(state(&relayed) == "completed", "relay: {}", text(&relayed));
    let forwarded: Value = serde_json::from_str(text(&relayed)).context("relay's result")?;
    let forwarded_id = forwarded["task_id"].as_str().context("forwarded task id")?.to_owned();
    println!("   node1 checked relay's grant (trusted issuer, valid, names relay, allows the target): sent");
    println!(
        "   node3 checked it again on arrival (and that node1 hosts relay): accepted as task {forwarded_id}"
    );
    let done = {
        let mut found = None;
        until("the forwarded task to finish", || {
            found = rpc(&nodes[0], "GetTask", json!({ "id": forwarded_id }))
                .ok()
                .filter(|t| state(t) == "completed");
            found.is_some()
        })?;
        found.unwrap_or_default()
    };
    println!("   node1 asked its owner for it: {} → {}", state(&done), text(&done));

    step(
        6,
        "`relay` tries mesh://echo, which its grant does not allow: refused before anything leaves node1.",
    );
    let refused = send(&nodes[0], "mesh://relay", "mesh://echo this must not arrive", false)?;
    anyhow::ensure!(
        state(&refused) == "failed" && text(&refused).contains("target_not_allowed"),
        "expected a refusal, got {}: {}",
        state(&refused),
        text(&refused)
    );
    println!("   relay's task failed: {}", text(&refused));
    let echo_tasks = rpc(&nodes[1], "ListTasks", json!({}))?["tasks"]
        .as_array()
        .map_or(0, |t| t.iter().filter(|t| t["metadata"]["murmur"]["capsule"] == "echo").count());
    anyhow::ensure!(echo_tasks == 0, "echo ran {echo_tasks} task(s)");
    println!("   node2 (which runs echo) received nothing: 0 echo tasks");

    step(7, "A capsule that asks for input: `ask` on node2 waits (input-required) until a reply arrives.");
    let asked = send(&nodes[0], "mesh://ask", "Which colour should the mesh be?", true)?;
    let id = asked["id"].as_str().context("task id")?.to_owned();
    until("the question", || {
        rpc(&nodes[0], "GetTask", json!({ "id": id })).is_ok_and(|t| state(&t) == "input-required")
    })?;
    println!("   task {id} is input-required: \"Which colour should the mesh be?\"");
    let params = json!({ "message": { "messageId": uuid::Uuid::new_v4().to_string(), "taskId": id, "parts": [{ "text": "blue" }] } });
    let answered = rpc(&nodes[0], "SendMessage", params)?["task"].clone();
    anyhow::ensure!(state(&answered) == "completed", "ask: {}", text(&answered));
    println!("   replied \"blue\" through node1: {} → {}", state(&answered), text(&answered));

    step(
        8,
        "Artifacts: node1 publishes `mirror` (the echo component, signed); node3 installs it from the mesh and runs it.",
    );
    let component = std::fs::read(components.join("echo.wasm"))?;
    let meta = murmur_store::ArtifactMeta {
        name: "mirror".into(),
        version: "1.0.0".into(),
        kind: murmur_store::CapsuleKind::Tool,
        runtime: murmur_store::Platform::Wasm,
        description: "says back what it is given".into(),
        tags: vec!["demo".into()],
        input_schema: None,
        output_schema: None,
    };
    let store = murmur_store::ArtifactStore::open(&dir.join("node1/store"))?;
    let added = store.add(&meta, &component, Some((&publisher, clock::now())))?;
    println!("   node1's store: mirror@1.0.0 = {} ({} bytes), signed", added.manifest, added.size);
    let mut outcome = Value::Null;
    let took = until("node3 to install mirror@1.0.0", || {
        outcome = install(&nodes[2], "mirror@1.0.0").unwrap_or(Value::Null);
        let done = outcome["event"] == "done";
        if !done {
            // Not advertised yet (node1 re-reads its store every few seconds).
            std::thread::sleep(Duration::from_millis(200));
        }
        done
    })?;
    println!(
        "   node3 pulled {} bytes from {} provider(s), verified, pinned in murmur.lock, running: {} ms after publishing",
        outcome["fetched"],
        outcome["providers"],
        took.as_millis()
    );
    // node3's new advert (it hosts mirror now) is gossiped within milliseconds: wait for it
    // at node1 rather than race it.
    until("node1 to learn that node3 hosts mirror", || nodes[0].capsules().iter().any(|c| c == "mirror"))?;
    let mirrored = send(&nodes[0], "mesh://mirror", "carried across the mesh", false)?;
    anyhow::ensure!(state(&mirrored) == "completed", "mirror: {}", text(&mirrored));
    let owner = mirrored["metadata"]["murmur"]["owner"].as_str().unwrap_or("");
    anyhow::ensure!(owner == nodes[2].peer_id, "mirror ran on {owner}, not node3");
    println!("   node1 → mesh://mirror ran on node3: {}", text(&mirrored));

    step(
        9,
        "Brains: `scout` (rhai, node1) greets `keeper` (JavaScript, node3); keeper's timer fires and it answers across the mesh.",
    );
    until("node1 to list keeper", || {
        get(&format!("{}/v1/agents", nodes[0].api))
            .ok()
            .and_then(|v| v["agents"].as_array().cloned())
            .is_some_and(|agents| agents.iter().filter(|a| a["state"] == "running").count() == 3)
    })?;
    let started = Instant::now();
    let client = reqwest::blocking::Client::builder().timeout(Duration::from_secs(10)).build()?;
    let sent = client
        .post(format!("{}/v1/agents/scout/messages", nodes[0].api))
        .json(&json!({ "text": "go" }))
        .send()?;
    anyhow::ensure!(sent.status().is_success(), "mur agent send scout go: {}", sent.text()?);
    let memory = |node: &DemoNode, agent: &str, key: &str| {
        get(&format!("{}/v1/agents/{agent}/memory?key={key}", node.api))
            .ok()
            .and_then(|v| v["entries"][0]["value"].as_str().map(str::to_owned))
    };
    until("keeper to hear scout", || memory(&nodes[2], "keeper", "heard").is_some())?;
    println!(
        "   keeper (node3) heard \"{}\" {} ms after the operator's `go` to scout (node1)",
        memory(&nodes[2], "keeper", "heard").unwrap_or_default(),
        started.elapsed().as_millis()
    );
    until("scout to hear keeper's timer", || memory(&nodes[0], "scout", "reply").is_some())?;
    println!(
        "   scout (node1) heard \"{}\" {} ms after `go` (keeper's 500 ms timer, then a message back)",
        memory(&nodes[0], "scout", "reply").unwrap_or_default(),
        started.elapsed().as_millis()
    );

    step(
        10,
        "An agent as a model: brain `echo` on node2 serves `echo-model`; a stock HTTP client (curl) streams a chat completion from node1.",
    );
    until("node1 to list echo-model", || {
        get(&format!("{}/v1/models", nodes[0].api))
            .ok()
            .and_then(|v| v["data"].as_array().cloned())
            .is_some_and(|models| models.iter().any(|m| m["id"] == "echo-model"))
    })?;
    let body = r#"{"model":"echo-model","stream":true,"messages":[{"role":"user","content":"agents answer as models across the mesh"}]}"#;
    let url = format!("{}/v1/chat/completions", nodes[0].api);
    let started = Instant::now();
    let streamed = stream_completion(&url, body)?;
    let text: String = streamed
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str().map(str::to_owned))
        .collect();
    anyhow::ensure!(text == "agents answer as models across the mesh", "the stream said {text:?}");
    println!(
        "   {} chunks from node2's brain through node1 in {} ms: \"{text}\"",
        streamed.len(),
        started.elapsed().as_millis()
    );
    println!("   curl -N {url} -H 'content-type: application/json' -d '{body}'");

    println!("\nEvery step behaved as expected.");
    if once {
        return Ok(());
    }
    println!("\nThe nodes keep running. Watch node1 live in a browser: {}/ui", nodes[0].api);
    println!("Try:");
    println!("   export MURMUR_NODE={}", nodes[0].api);
    println!("   mur directory");
    println!("   mur send mesh://wordcount \"count these words\" --wait");
    println!(
        "   mur send mesh://ask \"Ready?\" --stream        (then, elsewhere: mur send mesh://ask yes --reply-to TASK_ID)"
    );
    println!("   mur task ls");
    println!("   mur models                                    (every model agents of the mesh serve)");
    println!(
        "   mur agent ls                                  (then: mur agent send scout go; mur agent logs scout)"
    );
    println!("Press Ctrl-C to stop them.");
    wait_for_interrupt();
    Ok(())
}

/// A streamed completion's chunks, read by curl when it is installed (a stock client, as a
/// user would run it), else by this process.
fn stream_completion(url: &str, body: &str) -> anyhow::Result<Vec<Value>> {
    let curl = Command::new("curl")
        .args(["-sSN", "--max-time", "30", url, "-H", "content-type: application/json", "-d", body])
        .output();
    let text = match curl {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).into_owned(),
        Ok(out) => bail!("curl failed: {}", String::from_utf8_lossy(&out.stderr)),
        Err(_) => reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()?
            .post(url)
            .header("content-type", "application/json")
            .body(body.to_owned())
            .send()?
            .text()?,
    };
    let mut chunks = Vec::new();
    let mut done = false;
    for data in text.lines().filter_map(|l| l.strip_prefix("data:")).map(str::trim) {
        if data == "[DONE]" {
            done = true;
        } else {
            chunks.push(
                serde_json::from_str::<Value>(data)
                    .with_context(|| format!("a chunk that is not JSON: {data}"))?,
            );
        }
    }
    anyhow::ensure!(done, "the stream did not end with [DONE]: {text}");
    Ok(chunks)
}

fn wait_for_interrupt() {
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread().enable_all().build() else { return };
    runtime.block_on(crate::daemon::shutdown_signal());
}
