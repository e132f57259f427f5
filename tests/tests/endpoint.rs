//! Agents as OpenAI-compatible models across the mesh, with real processes: node B runs
//! the echo-model brain (agent `echo`, model `echo-model`); a client of node A lists the
//! model and gets completions, streamed and not, with tools both ways; the client going
//! away, the agent unsubscribing and node B dying end sessions cleanly; with node C also
//! serving `echo-model`, requests spread and fail over; a brain of A streams a completion
//! from B's model through `provider.chat-stream`.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use murmur_tests::{LOOPBACK, TestNode, mur, wait_for};
use nix::sys::signal::Signal;
use serde_json::{Value, json};

const CONVERGE: Duration = Duration::from_secs(30);
const CONFIG: &str = "[adverts]\nrefresh_secs = 1\nttl_secs = 4\n";

fn echo_brain() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../capsules/brains/echo-model.rhai")
}

fn start(agent: Option<&str>, bootstrap: Option<&TestNode>) -> TestNode {
    let mut toml = CONFIG.to_owned();
    if let Some(name) = agent {
        toml.push_str(&format!(
            "[[agents]]\nname = \"{name}\"\nbrain = \"{}\"\ngrace_secs = 2\n",
            echo_brain().display()
        ));
    }
    TestNode::start_with(&toml, bootstrap).expect("node starts")
}

fn client() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder().timeout(Duration::from_secs(30)).build().unwrap()
}

fn post(node: &TestNode, body: &Value) -> (u16, Value, Option<String>) {
    let response = client().post(format!("{}/v1/chat/completions", node.api)).json(body).send().unwrap();
    let status = response.status().as_u16();
    let served = response.headers().get("x-murmur-node").and_then(|v| v.to_str().ok()).map(str::to_owned);
    (status, response.json().unwrap_or(Value::Null), served)
}

/// Reads a streamed completion: every `data:` payload in order (`[DONE]` as a string),
/// stopping early when `stop` says so (the connection is then dropped).
fn stream(node: &TestNode, body: &Value, mut stop: impl FnMut(&Value) -> bool) -> Vec<Value> {
    let response = client().post(format!("{}/v1/chat/completions", node.api)).json(body).send().unwrap();
    let content_type = response.headers()["content-type"].to_str().unwrap().to_owned();
    assert!(content_type.starts_with("text/event-stream"), "{content_type}");
    let mut events = Vec::new();
    for line in BufReader::new(response).lines() {
        let Ok(line) = line else { break };
        let Some(data) = line.strip_prefix("data:").map(str::trim) else { continue };
        let event = if data == "[DONE]" { json!("[DONE]") } else { serde_json::from_str(data).unwrap() };
        let done = stop(&event);
        events.push(event);
        if done {
            break;
        }
    }
    events
}

fn streamed_text(events: &[Value]) -> String {
    events.iter().filter_map(|e| e["choices"][0]["delta"]["content"].as_str()).collect()
}

fn say(node: &TestNode, agent: &str, text: &str) {
    let out = mur(&["agent", "send", agent, text, "--node", &node.api]);
    assert!(out.status.success(), "mur agent send: {}", String::from_utf8_lossy(&out.stderr));
}

fn memory(node: &TestNode, agent: &str, key: &str) -> Option<String> {
    let view = node.get(&format!("/v1/agents/{agent}/memory?key={key}")).ok()?;
    view["entries"][0]["value"].as_str().map(str::to_owned)
}

fn remembers(node: &TestNode, agent: &str, key: &str, value: &str) {
    wait_for(CONVERGE, &format!("{agent} to remember {key} = {value}"), || {
        (memory(node, agent, key).as_deref() == Some(value)).then_some(())
    })
    .unwrap_or_else(|e| panic!("{e}; it has {:?}; node log:\n{}", memory(node, agent, key), node.stderr()));
}

fn served_by(node: &TestNode, model: &str) -> Vec<String> {
    let Ok(list) = node.get("/v1/models") else { return vec![] };
    list["data"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["id"] == model)
        .flat_map(|m| m["served_by"].as_array().cloned().unwrap_or_default())
        .filter_map(|n| n.as_str().map(str::to_owned))
        .collect()
}

fn ask(text: &str) -> Value {
    json!({ "model": "echo-model", "messages": [
        { "role": "system", "content": "echo what the user says" },
        { "role": "user", "content": text },
    ] })
}

#[test]
fn a_brain_on_another_node_serves_completions_streamed_and_not_with_tools_both_ways() {
    let b = start(Some("echo"), None);
    let a = start(Some("asker"), Some(&b));
    wait_for(CONVERGE, "A to list echo-model served by B", || {
        (served_by(&a, "echo-model") == [b.peer_id()]).then_some(())
    })
    .unwrap();
    let listed = a.get("/v1/models").unwrap();
    let echo = listed["data"].as_array().unwrap().iter().find(|m| m["id"] == "echo-model").unwrap().clone();
    assert_eq!((echo["object"].as_str(), echo["local"].as_bool()), (Some("model"), Some(false)), "{echo}");
    assert!(
        served_by(&a, "asker-model").contains(&a.peer_id().to_owned()),
        "A's own brain serves asker-model"
    );
    let out = mur(&["models", "--node", &a.api]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && table.contains("echo-model") && table.contains(b.peer_id()), "{table}");

    // Not streamed: one chat.completion with the echoed text and host-counted usage.
    let mut body = ask("hello mesh of agents");
    body["temperature"] = json!(0.25);
    let (status, reply, _) = post(&a, &body);
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["object"], "chat.completion");
    assert_eq!(reply["choices"][0]["message"]["content"], "hello mesh of agents");
    assert_eq!(reply["choices"][0]["finish_reason"], "stop");
    assert!(reply["usage"]["completion_tokens"].as_u64().unwrap() >= 4, "{reply}");
    assert!(reply["usage"]["prompt_tokens"].as_u64().unwrap() >= 8, "{reply}");
    // The node that answered counts them.
    assert_eq!(
        a.metric("murmur_endpoint_tokens_total{kind=\"completion\"}"),
        reply["usage"]["completion_tokens"].as_u64().unwrap()
    );
    // Every other setting reaches the agent as the opaque params.
    remembers(&b, "echo", "params", r#"{"temperature":0.25}"#);

    // Streamed, with usage: the same text in chunks, a usage chunk, then [DONE].
    let mut body = ask("hello mesh of agents");
    body["stream"] = json!(true);
    body["stream_options"] = json!({ "include_usage": true });
    let events = stream(&a, &body, |_| false);
    assert_eq!(events.last().unwrap(), "[DONE]", "{events:?}");
    assert_eq!(streamed_text(&events), "hello mesh of agents", "{events:?}");
    assert!(events.len() >= 6, "one chunk per word, a finish, usage, done: {events:?}");
    assert_eq!(events[0]["object"], "chat.completion.chunk");
    assert_eq!(events[0]["choices"][0]["delta"]["role"], "assistant");
    let usage = &events[events.len() - 2];
    assert_eq!(usage["choices"], json!([]), "{usage}");
    assert!(usage["usage"]["total_tokens"].as_u64().unwrap() > 0, "{usage}");
    assert!(events[..events.len() - 2].iter().all(|e| e["usage"].is_null()), "usage only in its own chunk");

    // A tool the client offers reaches the brain; the brain's call reaches the client.
    let tools = json!([{ "type": "function", "function": {
        "name": "lookup", "description": "looks things up",
        "parameters": { "type": "object", "properties": { "q": { "type": "string" } } } } }]);
    let mut body = ask("call weather");
    body["tools"] = tools.clone();
    let (status, reply, _) = post(&a, &body);
    assert_eq!(status, 200, "{reply}");
    let call = &reply["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(reply["choices"][0]["finish_reason"], "tool_calls", "{reply}");
    assert_eq!((call["id"].as_str(), call["type"].as_str()), (Some("call_1"), Some("function")), "{call}");
    assert_eq!(call["function"]["name"], "lookup");
    assert_eq!(call["function"]["arguments"], r#"{"q":"weather"}"#);
    remembers(&b, "echo", "tools", "lookup");
    body["stream"] = json!(true);
    let events = stream(&a, &body, |_| false);
    let first = &events[0]["choices"][0]["delta"]["tool_calls"][0];
    assert_eq!(
        (first["index"].as_u64(), first["function"]["name"].as_str()),
        (Some(0), Some("lookup")),
        "{events:?}"
    );
    assert!(events.iter().any(|e| e["choices"][0]["finish_reason"] == "tool_calls"), "{events:?}");

    // OpenAI's errors: unknown model, bad requests.
    let (status, reply, _) =
        post(&a, &json!({ "model": "no-such-model", "messages": [{ "role": "user", "content": "x" }] }));
    assert_eq!((status, reply["error"]["code"].as_str()), (404, Some("model_not_found")), "{reply}");
    let (status, reply, _) = post(&a, &json!({ "model": "echo-model" }));
    assert_eq!((status, reply["error"]["param"].as_str()), (400, Some("messages")), "{reply}");
    let (status, reply, _) =
        post(&a, &json!({ "model": "echo-model", "messages": [{ "role": "root", "content": "x" }] }));
    assert_eq!((status, reply["error"]["type"].as_str()), (400, Some("invalid_request_error")), "{reply}");
    let response = client()
        .post(format!("{}/v1/chat/completions", a.api))
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .unwrap();
    assert_eq!(response.status().as_u16(), 400);
    let huge = "x".repeat(murmur_protocol::model::MODEL_OPEN_BYTES_MAX + 1);
    let (status, _, _) = post(&a, &ask(&huge));
    assert_eq!(status, 413, "an oversized request is refused before it is read");

    // A brain of A streams a completion from B's model through provider.chat-stream.
    say(&a, "asker", "ask echo-model greetings from the other side");
    remembers(&a, "asker", "asked", "greetings from the other side");

    // The client going away mid-stream ends the session on B with an error, promptly.
    say(&b, "echo", "slow 200");
    let mut body = ask("one two three four five six seven eight nine ten eleven twelve");
    body["stream"] = json!(true);
    let gone = b.metric("murmur_endpoint_sessions_ended_total{outcome=\"client_gone\"}");
    let started = Instant::now();
    let events = stream(&a, &body, |e| e["choices"][0]["delta"]["content"].is_string());
    assert_eq!(streamed_text(&events), "one");
    remembers(&b, "echo", "last_end", "the client went away");
    assert!(started.elapsed() < Duration::from_secs(5), "ended within 5 s: {:?}", started.elapsed());
    assert_eq!(b.metric("murmur_endpoint_sessions_ended_total{outcome=\"client_gone\"}"), gone + 1);

    // Unsubscribing ends an in-flight session abruptly: the client gets an error.
    let mut said = false;
    let events = stream(&a, &body, |e| {
        if !said && e["choices"][0]["delta"]["content"].is_string() {
            say(&b, "echo", "unsubscribe");
            said = true;
        }
        false
    });
    let last = events.last().unwrap();
    assert!(last["error"]["message"].as_str().unwrap().contains("unsubscribed"), "{events:?}");
    assert!(!events.iter().any(|e| e == "[DONE]"), "an abrupt end is not a [DONE]");
    wait_for(CONVERGE, "echo-model to leave A's /v1/models", || {
        served_by(&a, "echo-model").is_empty().then_some(())
    })
    .unwrap();
    let (status, _, _) = post(&a, &ask("anyone?"));
    assert_eq!(status, 404);
    say(&b, "echo", "subscribe");
    wait_for(CONVERGE, "echo-model to be back", || (!served_by(&a, "echo-model").is_empty()).then_some(()))
        .unwrap();

    // Node B dying mid-stream fails the stream at A cleanly.
    let mut b = b;
    let mut killed = false;
    let started = Instant::now();
    let events = stream(&a, &body, |e| {
        if !killed && e["choices"][0]["delta"]["content"].is_string() {
            b.kill();
            killed = true;
        }
        false
    });
    let last = events.last().unwrap();
    assert!(last["error"]["message"].is_string(), "{events:?}");
    assert!(started.elapsed() < Duration::from_secs(10), "failed within 10 s: {:?}", started.elapsed());
}

#[test]
fn requests_spread_over_two_serving_nodes_and_fail_over_when_one_is_gone() {
    // A pings every second, so its round-trip estimates (the least of the last few pings)
    // settle within the test's first seconds.
    let a = TestNode::start_with(&format!("{CONFIG}[network]\nping_interval_secs = 1\n"), None)
        .expect("node starts");
    let b = start(Some("echo"), Some(&a));
    let mut c = start(Some("echo"), Some(&a));
    wait_for(CONVERGE, "A to list echo-model served by B and C", || {
        (served_by(&a, "echo-model").len() == 2).then_some(())
    })
    .unwrap();
    // The router ranks by round trip: wait until A's estimates of B and C are equally good
    // (within the protocol's spread margin; an unmeasured node counts as far away).
    wait_for(CONVERGE, "A to measure B and C as equally near", || {
        let peers = a.get("/v1/peers").ok()?;
        let rtts: Vec<f64> = peers["peers"].as_array()?.iter().filter_map(|p| p["rtt_ms"].as_f64()).collect();
        let near =
            rtts.len() >= 2 && rtts.iter().all(|r| *r < murmur_protocol::model::spread_margin(0) as f64);
        near.then_some(())
    })
    .unwrap();
    let mut by: std::collections::BTreeMap<String, u32> = std::collections::BTreeMap::new();
    for i in 0..8 {
        let (status, reply, node) = post(&a, &ask(&format!("request {i}")));
        assert_eq!(status, 200, "{reply}");
        assert_eq!(reply["choices"][0]["message"]["content"], format!("request {i}"));
        *by.entry(node.expect("x-murmur-node names the serving node")).or_default() += 1;
    }
    assert_eq!(by.len(), 2, "both nodes served some: {by:?}");
    assert!(by.values().all(|n| *n >= 2), "spread, not piled: {by:?}");

    // C freezes: its connection stays up and its advert listed, but no stream to it opens.
    // A request routed there was provably not taken (it never left A), so it goes to B.
    c.signal(Signal::SIGSTOP);
    let failovers = a.metric("murmur_model_failovers_total");
    for i in 0..2 {
        let (status, reply, node) = post(&a, &ask(&format!("frozen {i}")));
        assert_eq!(status, 200, "{reply}\n{}", a.stderr());
        assert_eq!(node.as_deref(), Some(b.peer_id()));
    }
    assert!(a.metric("murmur_model_failovers_total") > failovers, "at least one request failed over");
    // C dies: A hears its connection close and routes straight to B.
    c.kill();
    for i in 0..4 {
        let (status, reply, node) = post(&a, &ask(&format!("after {i}")));
        assert_eq!(status, 200, "{reply}\n{}", a.stderr());
        assert_eq!(node.as_deref(), Some(b.peer_id()));
    }
}

#[test]
fn a_node_withholds_its_models_while_a_peer_speaks_an_older_wire() {
    let b = start(Some("echo"), None);
    // A rehearses wire 1.2, whose advert decoder knows no `models`: B must not list them.
    let dir = murmur_tests::init_data_dir_with(CONFIG);
    let mut args: Vec<String> = LOOPBACK.iter().map(|s| (*s).to_owned()).collect();
    args.extend(["--bootstrap".to_owned(), b.dial_addrs()[0].clone()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let a = TestNode::start_in_env(dir.path(), &args, &[("MURMUR_WIRE_MINOR", "2")]).expect("node starts");
    wait_for(CONVERGE, "B to withhold its models", || {
        b.stderr().contains("not advertising the models this node serves").then_some(())
    })
    .unwrap();
    // A still holds B's advert (it lists agent `echo`), so nothing was refused.
    wait_for(CONVERGE, "A to list B's agent", || {
        let agents = a.get("/v1/agents").ok()?;
        agents["agents"].as_array()?.iter().any(|x| x["name"] == "echo").then_some(())
    })
    .unwrap();
    assert!(served_by(&a, "echo-model").is_empty());
    assert_eq!(a.metric("murmur_adverts_refused_total{reason=\"malformed\"}"), 0, "{}", a.stderr());
}

#[test]
fn an_agent_capsule_whose_model_is_a_brain_of_the_mesh_completes_a_task() {
    let b = start(Some("echo"), None);
    // Node C runs agent capsule `helper` with the shipped OpenAI driver pointed at C's own
    // /v1, and `echo-model` (B's brain) as its model.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let dir = murmur_tests::init_data_dir_with(CONFIG);
    murmur_tests::add_artifact(
        dir.path(),
        &murmur_tests::guest("openai_driver"),
        ("openai-driver", "0.1.0"),
        "driver",
        &[],
    );
    let manifest = format!(
        r#"name = "helper"
version = "0.1.0"
kind = "agent"
[capabilities]
network = {{ allow = ["127.0.0.1:{port}"] }}
[inference]
model = "echo-model"
driver = {{ artifact = "openai-driver@0.1.0" }}
max_turns = 2
[wasi]
env = {{ OPENAI_BASE_URL = "http://127.0.0.1:{port}/v1" }}
"#
    );
    std::fs::create_dir_all(dir.path().join("capsules")).unwrap();
    std::fs::write(dir.path().join("capsules/helper.toml"), manifest).unwrap();
    let api = format!("127.0.0.1:{port}");
    let mut args: Vec<String> = LOOPBACK.iter().map(|s| (*s).to_owned()).collect();
    args.extend(["--api".into(), api, "--bootstrap".into(), b.dial_addrs()[0].clone()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let c = TestNode::launch(&[], dir.path(), &args).expect("node starts");
    wait_for(CONVERGE, "C to list echo-model", || (!served_by(&c, "echo-model").is_empty()).then_some(()))
        .unwrap();
    let answer = c.send("mesh://helper", "the mesh answers itself", "m-1", false).unwrap();
    let task = &answer["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{answer}\n{}", c.stderr());
    assert_eq!(task["status"]["message"]["parts"][0]["text"], "the mesh answers itself", "{answer}");
    assert_eq!(b.metric("murmur_model_served_total"), 1, "B's brain answered the driver's one turn");
}

#[test]
fn a_client_opening_more_streams_than_the_node_serves_gets_429_and_the_rest_go_on() {
    let b = start(Some("echo"), None);
    let a = TestNode::start_with(&format!("{CONFIG}[api]\ncompletions_max = 3\n"), Some(&b))
        .expect("node starts");
    wait_for(CONVERGE, "A to list echo-model", || (!served_by(&a, "echo-model").is_empty()).then_some(()))
        .unwrap();
    say(&b, "echo", "slow 300");
    remembers(&b, "echo", "serving", "echo-model");
    // Three slow streams hold every slot of A's endpoint.
    let held: Vec<_> = (0..3)
        .map(|i| {
            let api = a.api.clone();
            std::thread::spawn(move || {
                let body = json!({ "model": "echo-model", "stream": true,
                    "messages": [{ "role": "user", "content": format!("slow {i} a b c d") }] });
                let response =
                    client().post(format!("{api}/v1/chat/completions")).json(&body).send().unwrap();
                BufReader::new(response).lines().map_while(Result::ok).any(|l| l.contains("[DONE]"))
            })
        })
        .collect();
    wait_for(CONVERGE, "three completions open at A", || {
        (a.metric("murmur_endpoint_completions_open") == 3).then_some(())
    })
    .unwrap();
    let (status, reply, _) = post(&a, &ask("one too many"));
    assert_eq!((status, reply["error"]["code"].as_str()), (429, Some("rate_limit_exceeded")), "{reply}");
    for stream in held {
        assert!(stream.join().unwrap(), "a held stream finished with [DONE]");
    }
    // Slots come back as streams end.
    say(&b, "echo", "slow 0");
    wait_for(CONVERGE, "A's slots to be free", || {
        (a.metric("murmur_endpoint_completions_open") == 0).then_some(())
    })
    .unwrap();
    let (status, reply, _) = post(&a, &ask("room again"));
    assert_eq!(status, 200, "{reply}");
}

#[test]
fn a_brain_streams_from_an_upstream_provider_configured_for_it() {
    // The upstream is node B's own OpenAI-compatible /v1 (its brain serves echo-model):
    // to node A it is any OpenAI-compatible API over HTTP.
    let b = start(Some("echo"), None);
    let toml = format!(
        "{CONFIG}[[agents]]\nname = \"asker\"\nbrain = \"{}\"\nproviders = {{ upstream = {{ base_url = \"{}/v1/\" }} }}\n",
        echo_brain().display(),
        b.api
    );
    let dir = murmur_tests::init_data_dir_with(&toml);
    let a = TestNode::start_owned(dir, LOOPBACK).expect("node starts");
    remembers(&a, "asker", "serving", "asker-model");
    say(&a, "asker", "ask-at upstream echo-model from far upstream");
    remembers(&a, "asker", "asked", "from far upstream");
    remembers(&b, "echo", "last_request", "from far upstream");
    // An unknown provider or an upstream that refuses: an error event, then chat-end.
    say(&a, "asker", "ask-at nowhere echo-model x");
    let error =
        wait_for(CONVERGE, "the unknown provider's error", || memory(&a, "asker", "ask_error")).unwrap();
    assert!(error.contains("no provider `nowhere`"), "{error}");
    say(&a, "asker", "ask-at upstream no-such-model x");
    wait_for(CONVERGE, "the upstream's 404", || {
        memory(&a, "asker", "ask_error").filter(|e| e.contains("404")).map(|_| ())
    })
    .unwrap();
    assert!(a.metric("murmur_upstream_errors_total") >= 2);
}
