//! The tooling bridge with real processes: a node runs the toolbox brain and two MCP
//! servers (the fixture over stdio as a child of the node, and over streamable HTTP with a
//! bearer token); the brain calls their tools, watches their resources through changes and
//! a crash of the server, and hostile servers (one that exits at once, one that is not
//! there, one that writes garbage) are restarted with back-off while the node serves on.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use murmur_tests::{LOOPBACK, TestNode, bin, mur, wait_for};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(30);

fn toolbox() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../capsules/brains/toolbox.rhai")
}

/// The fixture serving streamable HTTP; killed when dropped.
struct HttpFixture {
    child: Child,
    url: String,
}

impl HttpFixture {
    fn start(token: &str) -> Self {
        let mut child = Command::new(bin("murmur-mcp-fixture"))
            .args(["--http", "127.0.0.1:0", "--token", token])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("the fixture starts");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let url =
            line.trim().strip_prefix("listening on ").expect("the fixture prints its address").to_owned();
        Self { child, url }
    }
}

impl Drop for HttpFixture {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(toml: &str, env: &[(&str, &str)]) -> (tempfile::TempDir, TestNode) {
    let dir = murmur_tests::init_data_dir_with(toml);
    let node = TestNode::start_in_env(dir.path(), LOOPBACK, env).expect("node starts");
    (dir, node)
}

fn say(node: &TestNode, text: &str) {
    let out = mur(&["agent", "send", "toolbox", text, "--node", &node.api]);
    assert!(out.status.success(), "mur agent send: {}", String::from_utf8_lossy(&out.stderr));
}

fn memory(node: &TestNode) -> serde_json::Map<String, Value> {
    let out = mur(&["agent", "memory", "toolbox", "--node", &node.api, "--json"]);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|e| Some((e["key"].as_str()?.to_owned(), e["value"].clone())))
        .collect()
}

/// Waits until the toolbox keeps `key` and `check` holds for it.
fn kept(node: &TestNode, key: &str, check: impl Fn(&str) -> bool) -> String {
    wait_for(WAIT, &format!("the toolbox to keep {key}"), || {
        memory(node).get(key).and_then(Value::as_str).filter(|v| check(v)).map(str::to_owned)
    })
    .unwrap_or_else(|e| panic!("{e}; it keeps {:?}\nnode log:\n{}", memory(node), node.stderr()))
}

fn servers(node: &TestNode) -> Vec<Value> {
    let out = mur(&["mcp", "--node", &node.api, "--json"]);
    assert!(out.status.success(), "mur mcp: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

fn server(node: &TestNode, name: &str) -> Value {
    servers(node).into_iter().find(|s| s["name"] == name).unwrap_or_else(|| panic!("no server {name}"))
}

#[test]
fn a_brain_uses_tools_and_resources_of_mcp_servers_over_stdio_and_http() {
    let http = HttpFixture::start("s3cret");
    let toml = format!(
        r#"
[credentials]
fixture = "s3cret"

[[mcp]]
name = "local"
command = "{fixture}"
env = {{ FIXTURE_GREETING = "hi" }}
timeout_secs = 3

[[mcp]]
name = "remote"
url = "{url}"
api_key = "config:fixture"

[[mcp]]
name = "locked"
url = "{url}"

[[agents]]
name = "toolbox"
brain = "{brain}"
mcp = ["local", "remote", "locked"]
"#,
        fixture = bin("murmur-mcp-fixture").display(),
        url = http.url,
        brain = toolbox().display(),
    );
    // A secret in the node's environment that no MCP server may see.
    let (_dir, mut node) = start(&toml, &[("MURMUR_TEST_SECRET", "do-not-pass")]);
    wait_for(WAIT, "the stdio and the HTTP server to be up", || {
        (server(&node, "local")["state"] == "up" && server(&node, "remote")["state"] == "up").then_some(())
    })
    .unwrap_or_else(|e| panic!("{e}: {:?}\n{}", servers(&node), node.stderr()));
    assert_eq!(server(&node, "local")["transport"], "stdio");

    // Tools of both, with JSON arguments.
    say(&node, r#"call sum local add {"a": 2, "b": 3.5}"#);
    say(&node, r#"call echoed remote echo {"text": "over http"}"#);
    say(&node, r#"call greeting local env {"name": "FIXTURE_GREETING"}"#);
    say(&node, r#"call secret local env {"name": "MURMUR_TEST_SECRET"}"#);
    assert_eq!(kept(&node, "sum", |_| true), "5.5");
    assert_eq!(kept(&node, "echoed", |_| true), "over http");
    assert_eq!(kept(&node, "greeting", |_| true), "hi", "the server's configured env");
    assert_eq!(kept(&node, "secret", |_| true), "unset", "the node's environment leaked to an MCP server");
    // Without the token, the HTTP server refuses the handshake: down, with why.
    wait_for(WAIT, "the server without a token to be down", || {
        (server(&node, "locked")["state"] == "down").then_some(())
    })
    .unwrap();
    say(&node, r#"call refused locked echo {"text": "x"}"#);
    let refused = kept(&node, "refused_error", |_| true);
    assert!(refused.contains("MCP server `locked` is down"), "{refused}");

    // Tool failures arrive as errors naming what failed.
    say(&node, r#"call failing local fail {}"#);
    say(&node, r#"call big local huge {"bytes": 2000000}"#);
    say(&node, r#"call slow local sleep {"ms": 10000}"#);
    say(&node, r#"call notjson local add [1, 2]"#);
    assert!(kept(&node, "failing_error", |_| true).contains("failed on purpose"));
    let big = kept(&node, "big_error", |_| true);
    assert!(big.contains("more than the 1048576 a brain is given"), "{big}");
    let slow = kept(&node, "slow_error", |_| true);
    assert!(slow.contains("got no answer within 3 s"), "{slow}");
    assert!(kept(&node, "notjson_error", |_| true).contains("a JSON object"));

    // Resources: the list, a text one, a binary one (base64), then changes.
    say(&node, "watch list remote");
    say(&node, "watch note local mem://note");
    say(&node, "watch blob local mem://blob");
    assert_eq!(kept(&node, "list", |_| true), "mem://blob,mem://note");
    assert_eq!(kept(&node, "note", |_| true), "hello");
    assert_eq!(kept(&node, "blob", |_| true), "AAEC/w==", "binary content is standard base64");
    say(&node, r#"call set local set_note {"text": "changed"}"#);
    kept(&node, "note", |v| v == "changed");
    say(&node, r#"call added remote add_resource {"uri": "mem://new", "text": "fresh"}"#);
    kept(&node, "list", |v| v == "mem://blob,mem://new,mem://note");
    assert_eq!(memory(&node)["note_updates"], "2");

    // The stdio server crashes: the node starts it again, and the watch carries on — it
    // reads the fresh server's note (`hello` again) and follows its changes.
    say(&node, r#"call pid local pid {}"#);
    let pid = kept(&node, "pid", |_| true);
    say(&node, r#"call crash local crash {}"#);
    kept(&node, "crash_error", |_| true);
    wait_for(WAIT, "the node to restart the crashed server", || {
        let local = server(&node, "local");
        (local["state"] == "up" && local["restarts"].as_u64() >= Some(1)).then_some(())
    })
    .unwrap_or_else(|e| panic!("{e}: {:?}", servers(&node)));
    assert!(node.metric("murmur_mcp_restarts_total{server=\"local\"}") >= 1);
    kept(&node, "note", |v| v == "hello");
    say(&node, r#"call set2 local set_note {"text": "after the crash"}"#);
    kept(&node, "note", |v| v == "after the crash");
    say(&node, r#"call sum2 local add {"a": 1, "b": 1}"#);
    assert_eq!(kept(&node, "sum2", |_| true), "2");
    say(&node, r#"call pid2 local pid {}"#);
    assert_ne!(kept(&node, "pid2", |_| true), pid, "a new process serves");

    // Its stderr is in the node's log, named.
    let log = node.stderr();
    assert!(log.contains("fixture starting"), "{log}");
    assert!(node.metric("murmur_mcp_requests_total{server=\"local\",outcome=\"failed\"}") >= 4);

    // Unsubscribed, the note's changes stop reaching the brain.
    say(&node, "unwatch note");
    let updates = wait_for(WAIT, "the unwatch", || {
        std::thread::sleep(Duration::from_millis(300));
        memory(&node).get("note_updates").cloned()
    })
    .unwrap();
    say(&node, r#"call set3 local set_note {"text": "unseen"}"#);
    kept(&node, "set3", |_| true);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(memory(&node)["note_updates"], updates);
    assert_eq!(memory(&node)["note"], "after the crash");

    // Stopping the node stops its stdio servers.
    say(&node, r#"call pid3 local pid {}"#);
    let child = kept(&node, "pid3", |_| true);
    node.terminate(Duration::from_secs(20)).unwrap();
    assert!(!Path::new(&format!("/proc/{child}")).exists(), "the MCP server outlived its node");
}

#[test]
fn hostile_mcp_servers_are_restarted_with_back_off_and_the_node_serves_on() {
    let fixture = bin("murmur-mcp-fixture");
    let toml = format!(
        r#"
[[mcp]]
name = "dies"
command = "{fixture}"
args = ["--exit-at-start"]

[[mcp]]
name = "absent"
command = "/nonexistent/mcp-server"

[[mcp]]
name = "garbage"
command = "{fixture}"
args = ["--garbage"]

[[agents]]
name = "toolbox"
brain = "{brain}"
mcp = ["dies", "garbage"]
"#,
        fixture = fixture.display(),
        brain = toolbox().display(),
    );
    let (_dir, node) = start(&toml, &[]);
    // The one that exits at once is tried again and again, each wait longer.
    let first = wait_for(WAIT, "`dies` to fail twice", || {
        let dies = server(&node, "dies");
        (dies["state"] == "down" && dies["restarts"].as_u64() >= Some(2)).then_some(dies)
    })
    .unwrap_or_else(|e| panic!("{e}: {:?}", servers(&node)));
    assert!(first["error"].as_str().unwrap().contains("handshake"), "{first}");
    let absent = wait_for(WAIT, "`absent` to be down", || {
        let absent = server(&node, "absent");
        (absent["state"] == "down").then_some(absent)
    })
    .unwrap();
    assert!(absent["error"].as_str().unwrap().contains("cannot start `/nonexistent/mcp-server`"), "{absent}");
    // Back-off: 1 s, 2 s, 4 s, … — four attempts take at least 1 + 2 + 4 s.
    let started = std::time::Instant::now();
    wait_for(WAIT, "`dies` to fail a fourth time", || {
        (server(&node, "dies")["restarts"].as_u64() >= Some(4)).then_some(())
    })
    .unwrap();
    assert!(started.elapsed() >= Duration::from_secs(3), "restarts without back-off");
    assert!(server(&node, "dies")["retry_in_secs"].as_u64() >= Some(1));

    // Lines that are not JSON-RPC are skipped: the server behind them works.
    wait_for(WAIT, "`garbage` to be up", || (server(&node, "garbage")["state"] == "up").then_some(()))
        .unwrap_or_else(|e| panic!("{e}: {:?}\n{}", servers(&node), node.stderr()));
    say(&node, r#"call sum garbage add {"a": 1, "b": 2}"#);
    assert_eq!(kept(&node, "sum", |_| true), "3");
    // A brain's call to the dead server fails at once, saying so; the node answers.
    say(&node, r#"call dead dies add {"a": 1, "b": 2}"#);
    let dead = kept(&node, "dead_error", |_| true);
    assert!(dead.contains("MCP server `dies` is down") && dead.contains("tries again in"), "{dead}");
    // A server the agent's entry does not list is refused before anything is asked.
    say(&node, r#"call sneaky absent add {"a": 1, "b": 2}"#);
    let sneaky = kept(&node, "sneaky_error", |_| true);
    assert!(sneaky.contains("MCP server `absent` is not in the `mcp` of agent `toolbox`"), "{sneaky}");
    assert!(node.get("/healthz").is_ok());
}

#[test]
fn an_mcp_entry_that_is_wrong_stops_the_node_naming_the_key() {
    let dir = murmur_tests::init_data_dir_with(
        "[[mcp]]\nname = \"both\"\ncommand = \"x\"\nurl = \"http://127.0.0.1:1/mcp\"\n\n[[agents]]\nname = \"a\"\nbrain = \"a.rhai\"\nmcp = [\"nowhere\"]\n",
    );
    let refusal = murmur_tests::refused_run(dir.path());
    assert!(refusal.contains("config key `mcp[0]`: needs exactly one of `command`"), "{refusal}");
    assert!(
        refusal.contains("config key `agents[0].mcp[0]`: `nowhere` names no [[mcp]] server"),
        "{refusal}"
    );
}
