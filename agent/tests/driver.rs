//! The shipped OpenAI-compatible driver (`capsules/openai-driver`) in the agent loop,
//! against a provider played by a test server on 127.0.0.1: everything between the task
//! and the provider's socket is the shipping code (runner, runtime, `wasi:http` gate,
//! driver component). Run `bash capsules/build.sh` first; `tests/run.sh` does.

mod common;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use common::{NoInput, Node};
use murmur_agent::runner::{AgentRunner, TaskLink};
use murmur_agent::session::{TaskEnd, TaskStart};
use murmur_store::CapsuleKind;
use serde_json::{Value, json};

/// What the provider saw: the `Authorization` header and the JSON body of each request.
type Seen = Arc<Mutex<Vec<(Option<String>, Value)>>>;

/// An OpenAI-compatible provider that plays `replies` in order, on 127.0.0.1.
struct Provider {
    port: u16,
    seen: Seen,
}

impl Provider {
    async fn start(replies: Vec<Value>) -> Self {
        let seen: Seen = Arc::default();
        let state = (Arc::new(Mutex::new(VecDeque::from(replies))), seen.clone());
        let app = axum::Router::new()
            .route(
                "/v1/chat/completions",
                axum::routing::post(
                    |State((replies, seen)): State<(Arc<Mutex<VecDeque<Value>>>, Seen)>,
                     headers: HeaderMap,
                     Json(body): Json<Value>| async move {
                        let auth =
                            headers.get("authorization").and_then(|v| v.to_str().ok()).map(str::to_owned);
                        seen.lock().unwrap().push((auth, body));
                        let reply = replies.lock().unwrap().pop_front();
                        Json(reply.unwrap_or_else(|| json!({ "error": { "message": "script exhausted" } })))
                    },
                ),
            )
            .with_state(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self { port, seen }
    }

    fn requests(&self) -> Vec<(Option<String>, Value)> {
        self.seen.lock().unwrap().clone()
    }
}

fn completion(id: &str, content: Option<&str>, tool_calls: &[(&str, &str, Value)]) -> Value {
    let calls: Vec<Value> = tool_calls
        .iter()
        .map(|(id, name, args)| json!({ "id": id, "type": "function", "function": { "name": name, "arguments": args.to_string() } }))
        .collect();
    let finish = if calls.is_empty() { "stop" } else { "tool_calls" };
    let mut message = json!({ "role": "assistant", "content": content });
    if !calls.is_empty() {
        message["tool_calls"] = json!(calls);
    }
    json!({ "id": id, "object": "chat.completion", "choices": [{ "index": 0, "message": message, "finish_reason": finish }] })
}

/// A node with the shipped OpenAI driver in its store.
fn driver_node() -> Node {
    let node = Node::new();
    node.stock("openai-driver", "openai_driver", CapsuleKind::Driver);
    node
}

trait ProviderAgent {
    fn agent(&self, base: &str, allow: &str, driver_env: &str) -> Arc<murmur_runtime::Agent>;
    fn agent_keyed(
        &self,
        base: &str,
        allow: &str,
        driver_env: &str,
        key: &str,
    ) -> anyhow::Result<Arc<murmur_runtime::Agent>>;
}

impl ProviderAgent for Node {
    /// Agent `helper` whose driver reaches `base`, allowed `allow`; the API key is read
    /// from the node's environment: `CARGO_PKG_NAME`, which the test runner always sets.
    fn agent(&self, base: &str, allow: &str, driver_env: &str) -> Arc<murmur_runtime::Agent> {
        self.agent_keyed(base, allow, driver_env, "env:CARGO_PKG_NAME").unwrap()
    }

    /// [`ProviderAgent::agent`] with the API key read from `key` (`env:…` or `config:…`).
    fn agent_keyed(
        &self,
        base: &str,
        allow: &str,
        driver_env: &str,
        key: &str,
    ) -> anyhow::Result<Arc<murmur_runtime::Agent>> {
        let manifest = format!(
            r#"name = "helper"
version = "0.1.0"
kind = "agent"
[capabilities]
tools = ["wordcount"]
network = {{ allow = ["{allow}"] }}
[inference]
model = "gpt-4o-mini"
system_prompt = "Be brief."
driver = {{ artifact = "openai-driver@0.1.0" }}
credentials = {{ OPENAI_API_KEY = "{key}" }}
params = {{ temperature = 0 }}
[wasi]
env = {{ OPENAI_BASE_URL = "{base}" {driver_env} }}
"#
        );
        self.try_install_agent(&manifest)
    }
}

fn link(task: &str, context: &str) -> TaskLink {
    TaskLink {
        start: TaskStart {
            task_id: task.into(),
            context_id: context.into(),
            source: "a2a".into(),
            text: "count: a b c".into(),
        },
        port: Arc::new(NoInput),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_openai_driver_calls_tools_through_a_chat_completions_provider() {
    let provider = Provider::start(vec![
        completion("r1", None, &[("call_1", "wordcount", json!({ "text": "a b c" }))]),
        completion("r2", Some("3 words"), &[]),
    ])
    .await;
    let node = driver_node();
    let base = format!("http://127.0.0.1:{}/v1", provider.port);
    let agent = node.agent(&base, &format!("127.0.0.1:{}", provider.port), "");
    let end = AgentRunner::new(node.runtime.clone()).run_task(agent, link("t1", "ctx")).await;
    assert_eq!(end, TaskEnd::Completed("3 words".into()));

    let seen = provider.requests();
    assert_eq!(seen.len(), 2);
    let (auth, first) = &seen[0];
    assert_eq!(auth.as_deref(), Some("Bearer murmur-agent"), "the key comes from the node's environment");
    assert_eq!(first["model"], "gpt-4o-mini");
    assert_eq!(first["temperature"], 0, "params pass through");
    assert_eq!(first["messages"][0], json!({ "role": "system", "content": "Be brief." }));
    assert_eq!(first["messages"][1]["content"], "count: a b c");
    assert_eq!(first["tools"][0]["function"]["name"], "wordcount");
    assert_eq!(first["tools"][0]["function"]["description"], "counts words");
    let (_, second) = &seen[1];
    let messages = second["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 4, "the whole history again: {second}");
    assert_eq!(messages[2]["tool_calls"][0]["id"], "call_1");
    assert_eq!(messages[2]["tool_calls"][0]["function"]["name"], "wordcount");
    assert_eq!(
        (messages[3]["role"].as_str(), messages[3]["tool_call_id"].as_str()),
        (Some("tool"), Some("call_1"))
    );
    assert!(messages[3]["content"].as_str().unwrap().contains("\"words\":3"), "{second}");
    assert!(second.get("previous_response_id").is_none());
}

#[tokio::test(flavor = "multi_thread")]
async fn continuation_sends_only_the_delta_and_never_crosses_contexts() {
    let provider = Provider::start(vec![
        completion("resp-1", None, &[("call_1", "wordcount", json!({ "text": "a b c" }))]),
        completion("resp-2", Some("3 words"), &[]),
        completion("resp-3", Some("fresh"), &[]),
    ])
    .await;
    let node = driver_node();
    let base = format!("http://127.0.0.1:{}/v1", provider.port);
    let agent = node.agent(
        &base,
        &format!("127.0.0.1:{}", provider.port),
        r#", OPENAI_CONTINUATION = "previous_response_id""#,
    );
    // One session (a queue worker's), two contexts.
    let mut session = AgentRunner::new(node.runtime.clone()).open(agent).await.unwrap();
    assert_eq!(session.run_task(link("t1", "ctx-a")).await, TaskEnd::Completed("3 words".into()));
    // A task of another context in the same session starts over, whatever the driver holds.
    assert_eq!(session.run_task(link("t2", "ctx-b")).await, TaskEnd::Completed("fresh".into()));
    session.close("idle").await;

    let seen = provider.requests();
    let non_system = |body: &Value| -> Vec<Value> {
        body["messages"].as_array().unwrap().iter().filter(|m| m["role"] != "system").cloned().collect()
    };
    assert!(seen[0].1.get("previous_response_id").is_none());
    // Turn 2 continues resp-1: only the tool result went on the wire.
    assert_eq!(seen[1].1["previous_response_id"], "resp-1");
    let delta = non_system(&seen[1].1);
    assert_eq!(delta.len(), 1, "{}", seen[1].1);
    assert_eq!(delta[0]["tool_call_id"], "call_1");
    // The other context: a full resend, no continuation.
    assert!(seen[2].1.get("previous_response_id").is_none(), "{}", seen[2].1);
    assert_eq!(non_system(&seen[2].1).len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_host_outside_the_allowlist_is_refused_before_any_connection() {
    let provider = Provider::start(vec![completion("r1", Some("never"), &[])]).await;
    // A listening socket the driver is pointed at but not allowed to reach.
    let forbidden = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    forbidden.set_nonblocking(true).unwrap();
    let port = forbidden.local_addr().unwrap().port();
    let node = driver_node();
    let agent =
        node.agent(&format!("http://127.0.0.1:{port}/v1"), &format!("127.0.0.1:{}", provider.port), "");
    let end = AgentRunner::new(node.runtime.clone()).run_task(agent, link("t1", "ctx")).await;
    let TaskEnd::Failed(reason) = end else { panic!("{end:?}") };
    assert!(reason.contains("HttpRequestDenied"), "{reason}");
    let accepted = forbidden.accept();
    assert!(
        matches!(&accepted, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "the forbidden socket saw a connection: {accepted:?}"
    );
    assert!(provider.requests().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_drivers_key_can_come_from_the_node_config() {
    let provider = Provider::start(vec![completion("r1", Some("hi"), &[])]).await;
    let credentials = [("openai".to_owned(), murmur_config::Credential::Value("sk-from-config".into()))]
        .into_iter()
        .collect();
    let node = Node::with_credentials(credentials);
    node.stock("openai-driver", "openai_driver", CapsuleKind::Driver);
    let base = format!("http://127.0.0.1:{}/v1", provider.port);
    let allow = format!("127.0.0.1:{}", provider.port);
    let agent = node.agent_keyed(&base, &allow, "", "config:openai").unwrap();
    let end = AgentRunner::new(node.runtime.clone()).run_task(agent, link("t1", "ctx")).await;
    assert_eq!(end, TaskEnd::Completed("hi".into()));
    assert_eq!(provider.requests()[0].0.as_deref(), Some("Bearer sk-from-config"));
    // A key the config lacks stops the install, naming it.
    let err = node.agent_keyed(&base, &allow, "", "config:missing").unwrap_err();
    assert!(format!("{err:#}").contains("no [credentials] entry `missing`"), "{err:#}");
}
