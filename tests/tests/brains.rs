//! Brains across the mesh with real processes: node A runs the example brain in rhai and
//! two agents sharing its WebAssembly form; node B runs it in JavaScript and a stranger.
//! They talk through `/murmur/agent/1`; a test peer that claims to be one of A's agents
//! is refused; SIGTERM tells brains `shutdown`; memory survives the node's restart.

use std::path::{Path, PathBuf};
use std::time::Duration;

use murmur_tests::{LOOPBACK, TestNode, bin, guest, mur, wait_for};
use serde_json::Value;

const CONVERGE: Duration = Duration::from_secs(30);
const CONFIG: &str = "[adverts]\nrefresh_secs = 1\nttl_secs = 4\n";

fn example(language: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../capsules/brains/example.{language}"))
}

fn agents(entries: &[(&str, &Path)]) -> String {
    let mut toml = CONFIG.to_owned();
    for (name, brain) in entries {
        toml.push_str(&format!(
            "[[agents]]\nname = \"{name}\"\nbrain = \"{}\"\ngrace_secs = 3\n",
            brain.display()
        ));
    }
    toml
}

fn start(toml: &str, bootstrap: Option<&TestNode>) -> TestNode {
    let dir = murmur_tests::init_data_dir_with(toml);
    let mut args: Vec<String> = LOOPBACK.iter().map(|s| (*s).to_owned()).collect();
    if let Some(peer) = bootstrap {
        args.push("--bootstrap".into());
        args.push(peer.dial_addrs()[0].clone());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    TestNode::start_owned(dir, &args).expect("node starts")
}

fn say(node: &TestNode, agent: &str, text: &str) {
    let out = mur(&["agent", "send", agent, text, "--node", &node.api]);
    assert!(out.status.success(), "mur agent send {agent}: {}", String::from_utf8_lossy(&out.stderr));
}

/// What `agent` of `node` keeps, by key.
fn memory(node: &TestNode, agent: &str) -> serde_json::Map<String, Value> {
    let out = mur(&["agent", "memory", agent, "--node", &node.api, "--json"]);
    if !out.status.success() {
        return serde_json::Map::new();
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|e| Some((e["key"].as_str()?.to_owned(), e["value"].clone())))
        .collect()
}

fn remembers(node: &TestNode, agent: &str, key: &str) -> String {
    wait_for(CONVERGE, &format!("{agent} to remember {key}"), || {
        memory(node, agent).get(key).and_then(Value::as_str).map(str::to_owned)
    })
    .unwrap_or_else(|e| panic!("{e}; it keeps {:?}; node log:\n{}", memory(node, agent), node.stderr()))
}

#[test]
fn brains_on_two_nodes_talk_only_as_subscribed_and_forgers_are_refused() {
    let wasm = guest("example_brain");
    let a =
        start(&agents(&[("rhai-agent", &example("rhai")), ("twin-one", &wasm), ("twin-two", &wasm)]), None);
    let b = start(&agents(&[("js-agent", &example("js")), ("stranger", &example("rhai"))]), Some(&a));
    // Each node sees the other's agents in its directory.
    wait_for(CONVERGE, "both nodes to list all five agents", || {
        let listed = mur_json_lines(&["agent", "ls", "--node", &a.api, "--json"]);
        (listed.len() == 5 && listed.iter().all(|l| l["state"] == "running")).then_some(())
    })
    .unwrap();
    let listed = mur_json_lines(&["agent", "ls", "--node", &b.api, "--json"]);
    let js = listed.iter().find(|l| l["name"] == "js-agent").unwrap();
    assert_eq!((js["language"].as_str(), js["local"].as_bool()), (Some("js"), Some(true)), "{js}");
    let rhai = listed.iter().find(|l| l["name"] == "rhai-agent").unwrap();
    assert_eq!(
        (rhai["language"].as_str(), rhai["node"].as_str()),
        (Some("rhai"), Some(a.peer_id())),
        "{rhai}"
    );

    // Two agents share one component and know who they are.
    assert_eq!(remembers(&a, "twin-one", "whoami"), "twin-one");
    assert_eq!(remembers(&a, "twin-two", "whoami"), "twin-two");

    // rhai on A and JavaScript on B subscribe to each other and exchange messages.
    say(&a, "rhai-agent", "subscribe js-agent");
    say(&b, "js-agent", "subscribe rhai-agent");
    remembers(&a, "rhai-agent", "subscribed");
    remembers(&b, "js-agent", "subscribed");
    say(&a, "rhai-agent", "send js-agent ping from rhai");
    assert_eq!(remembers(&b, "js-agent", "from:rhai-agent"), "ping from rhai");
    // js-agent answered `pong js-agent`, and rhai-agent hears js-agent.
    assert_eq!(remembers(&a, "rhai-agent", "from:js-agent"), "pong js-agent");

    // A stranger nobody subscribed to: its message never lands.
    let dropped = "murmur_agent_events_dropped_total{agent=\"rhai-agent\",reason=\"not_subscribed\"}";
    let before = a.metric(dropped);
    say(&b, "stranger", "send rhai-agent ping from a stranger");
    wait_for(CONVERGE, "the stranger's message to be dropped", || (a.metric(dropped) > before).then_some(()))
        .unwrap();
    assert!(!memory(&a, "rhai-agent").contains_key("from:stranger"));

    // A peer that claims to be rhai-agent (which only A runs) is refused by B, and counted.
    let out = std::process::Command::new(bin("murmur-testpeer"))
        .args([
            "--dial",
            &b.dial_addrs()[0],
            "--agent-message",
            "rhai-agent:js-agent:forged",
            "--timeout-secs",
            "20",
        ])
        .output()
        .unwrap();
    let answer = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{answer}{}", String::from_utf8_lossy(&out.stderr));
    assert!(answer.contains("sender_not_advertised"), "{answer}");
    assert_eq!(b.metric("murmur_agent_messages_refused_total{check=\"sender_not_advertised\"}"), 1);
    assert_eq!(memory(&b, "js-agent")["from:rhai-agent"], "ping from rhai", "the forgery changed nothing");

    // Names: an unknown agent is a clear error to the client.
    let out = mur(&["agent", "send", "nobody", "hi", "--node", &a.api]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no agent named `nobody`"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn mur_json_lines(args: &[&str]) -> Vec<Value> {
    let out = mur(args);
    assert!(out.status.success(), "mur {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
}

#[test]
fn sigterm_tells_brains_shutdown_and_memory_survives_the_restart() {
    let dir = murmur_tests::init_data_dir_with(&agents(&[("keeper", &example("js"))]));
    let path = dir.path().to_path_buf();
    let mut node = TestNode::start_in(&path, LOOPBACK).unwrap();
    assert_eq!(remembers(&node, "keeper", "runs"), "1");
    say(&node, "keeper", "remember colour green");
    remembers(&node, "keeper", "colour");
    let logs = mur(&["agent", "logs", "keeper", "--node", &node.api, "--json"]);
    assert!(
        String::from_utf8_lossy(&logs.stdout).contains("keeper is up (run 1)"),
        "{}",
        String::from_utf8_lossy(&logs.stdout)
    );
    let status = node.terminate(Duration::from_secs(20)).unwrap();
    assert!(status.success(), "{status}");

    let node = TestNode::start_in(&path, LOOPBACK).unwrap();
    // The memory holds "1" from the first run until the new run counts itself.
    wait_for(CONVERGE, "keeper's second run to count itself", || {
        (memory(&node, "keeper").get("runs").and_then(Value::as_str) == Some("2")).then_some(())
    })
    .unwrap_or_else(|e| panic!("{e}; it keeps {:?}", memory(&node, "keeper")));
    let kept = memory(&node, "keeper");
    assert_eq!(kept["last_lifecycle"], "shutdown", "the brain heard shutdown before the node exited");
    assert_eq!(kept["colour"], "green");
    drop(dir);
}

#[test]
fn a_bad_agent_entry_stops_the_node_naming_the_key() {
    let dir =
        murmur_tests::init_data_dir_with(&format!("{CONFIG}[[agents]]\nname = \"Bad\"\nbrain = \"x\"\n"));
    let stderr = murmur_tests::refused_run(dir.path());
    assert!(stderr.contains("agents[0].name") && stderr.contains("agents[0].brain"), "{stderr}");
}

#[test]
fn a_brain_that_keeps_failing_is_restarted_and_its_restarts_show_in_mur_and_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let brain = dir.path().join("crasher.rhai");
    std::fs::write(&brain, "log(\"info\", \"about to fail\");\nsleep_for(50);\nthrow \"boom\";\n").unwrap();
    let node = start(&agents(&[("crasher", &brain)]), None);
    let restarts = wait_for(CONVERGE, "crasher to be restarted", || {
        let listed = mur_json_lines(&["agent", "ls", "--node", &node.api, "--json"]);
        let restarts = listed.first()?["restarts"].as_u64()?;
        (restarts >= 2).then_some(restarts)
    })
    .unwrap();
    assert!(node.metric("murmur_agent_restarts_total{agent=\"crasher\"}") >= restarts);
    let logs = mur(&["agent", "logs", "crasher", "--node", &node.api]);
    let logs = String::from_utf8_lossy(&logs.stdout);
    assert!(logs.contains("boom") && logs.contains("restarting in"), "{logs}");

    // `--follow` keeps printing: a restart that happens after it started shows up.
    let mut follow = std::process::Command::new(bin("mur"))
        .args(["agent", "logs", "crasher", "--lines", "0", "--follow", "--node", &node.api])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = follow.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let followed = (0..40)
        .find_map(|_| rx.recv_timeout(Duration::from_millis(500)).ok().filter(|l| l.contains("run started")));
    let _ = follow.kill();
    let _ = follow.wait();
    assert!(followed.is_some(), "mur agent logs --follow printed no new run");
}
