//! An MCP server for the tests, built with the official Rust SDK: tools, a text and a
//! binary resource, change notifications, and ways to misbehave. Over stdio by default;
//! `--http ADDR` serves streamable HTTP at `http://ADDR/mcp` (printing the address),
//! `--token T` then requires `Authorization: Bearer T`.
//!
//! Tools: `add {a, b}`, `echo {text}`, `set_note {text}` (changes `mem://note` and notifies
//! its subscribers), `add_resource {uri, text}` (notifies a list change), `sleep {ms}`,
//! `crash` (exits 3 at once), `huge {bytes}` (a text of that many bytes), `fail` (a
//! result marked as an error), `env {name}` (that environment variable, or `unset`), `pid`.
//!
//! Misbehaviour: `--garbage` writes lines that are not JSON-RPC to stdout before serving;
//! `--exit-at-start` exits 3 before speaking MCP at all.

#![allow(deprecated)] // resources/subscribe: the handshake the node uses subscribes this way

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation, JsonObject,
    ListResourcesResult, ListToolsResult, PaginatedRequestParams, ReadResourceRequestParams,
    ReadResourceResponse, ReadResourceResult, Resource, ResourceContents, ResourceUpdatedNotificationParam,
    ServerCapabilities, ServerConfig, SubscribeRequestParams, Tool, UnsubscribeRequestParams,
};
use rmcp::service::{NotificationContext, Peer, RequestContext};
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::json;

enum Body {
    Text(String),
    Blob(Vec<u8>),
}

#[derive(Default)]
struct State {
    resources: Mutex<BTreeMap<String, (Resource, Body)>>,
    sessions: Mutex<Vec<Peer<RoleServer>>>,
    subscribers: Mutex<Vec<(String, Peer<RoleServer>)>>,
}

/// Shared by every session (streamable HTTP makes a handler per session).
#[derive(Clone)]
struct Fixture(Arc<State>);

impl Fixture {
    fn new() -> Self {
        let state = State::default();
        state.resources.lock().unwrap().extend([
            (
                "mem://note".to_owned(),
                (
                    Resource::new("mem://note", "note")
                        .with_mime_type("text/plain")
                        .with_description("a note"),
                    Body::Text("hello".into()),
                ),
            ),
            (
                "mem://blob".to_owned(),
                (
                    Resource::new("mem://blob", "blob").with_mime_type("application/octet-stream"),
                    Body::Blob(vec![0, 1, 2, 255]),
                ),
            ),
        ]);
        Self(Arc::new(state))
    }

    async fn set_note(&self, text: &str) {
        if let Some(entry) = self.0.resources.lock().unwrap().get_mut("mem://note") {
            entry.1 = Body::Text(text.into());
        }
        let peers: Vec<_> = self
            .0
            .subscribers
            .lock()
            .unwrap()
            .iter()
            .filter(|(uri, peer)| uri == "mem://note" && !peer.is_transport_closed())
            .map(|(_, peer)| peer.clone())
            .collect();
        for peer in peers {
            let _ = peer.notify_resource_updated(ResourceUpdatedNotificationParam::new("mem://note")).await;
        }
    }

    async fn add_resource(&self, uri: &str, text: &str) {
        let meta = Resource::new(uri, uri).with_mime_type("text/plain");
        self.0.resources.lock().unwrap().insert(uri.into(), (meta, Body::Text(text.into())));
        let peers = {
            let mut sessions = self.0.sessions.lock().unwrap();
            sessions.retain(|peer| !peer.is_transport_closed());
            sessions.clone()
        };
        for peer in peers {
            let _ = peer.notify_resource_list_changed().await;
        }
    }
}

fn arg<'a>(args: &'a Option<JsonObject>, key: &str) -> Result<&'a serde_json::Value, ErrorData> {
    args.as_ref()
        .and_then(|a| a.get(key))
        .ok_or_else(|| ErrorData::invalid_params(format!("missing `{key}`"), None))
}

fn text<'a>(args: &'a Option<JsonObject>, key: &str) -> Result<&'a str, ErrorData> {
    arg(args, key)?.as_str().ok_or_else(|| ErrorData::invalid_params(format!("`{key}` is a string"), None))
}

fn number(args: &Option<JsonObject>, key: &str) -> Result<f64, ErrorData> {
    arg(args, key)?.as_f64().ok_or_else(|| ErrorData::invalid_params(format!("`{key}` is a number"), None))
}

fn schema(properties: serde_json::Value) -> JsonObject {
    let required: Vec<_> = properties.as_object().unwrap().keys().cloned().collect();
    json!({"type": "object", "properties": properties, "required": required}).as_object().unwrap().clone()
}

impl ServerHandler for Fixture {
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_resources()
            .enable_resources_subscribe()
            .enable_resources_list_changed()
            .build();
        ServerConfig::new(capabilities).with_server_info(Implementation::new("murmur-mcp-fixture", "0.1.0"))
    }

    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let (n, s) = (json!({"type": "number"}), json!({"type": "string"}));
        Ok(ListToolsResult::with_all_items(vec![
            Tool::new("add", "a + b", schema(json!({"a": n, "b": n}))),
            Tool::new("echo", "the text", schema(json!({"text": s}))),
            Tool::new("set_note", "changes mem://note", schema(json!({"text": s}))),
            Tool::new("add_resource", "adds a text resource", schema(json!({"uri": s, "text": s}))),
            Tool::new("sleep", "sleeps", schema(json!({"ms": n}))),
            Tool::new("crash", "exits 3", schema(json!({}))),
            Tool::new("huge", "a long text", schema(json!({"bytes": n}))),
            Tool::new("fail", "reports an error", schema(json!({}))),
            Tool::new("env", "an environment variable", schema(json!({"name": s}))),
            Tool::new("pid", "this process's id", schema(json!({}))),
        ]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = &request.arguments;
        let answer = match request.name.as_ref() {
            "add" => (number(args, "a")? + number(args, "b")?).to_string(),
            "echo" => text(args, "text")?.to_owned(),
            "set_note" => {
                self.set_note(text(args, "text")?).await;
                "ok".into()
            }
            "add_resource" => {
                self.add_resource(text(args, "uri")?, text(args, "text")?).await;
                "ok".into()
            }
            "sleep" => {
                tokio::time::sleep(Duration::from_millis(number(args, "ms")? as u64)).await;
                "slept".into()
            }
            "crash" => std::process::exit(3),
            "huge" => "x".repeat(number(args, "bytes")? as usize),
            "fail" => {
                let result = CallToolResult::error(vec![ContentBlock::text("the fixture failed on purpose")]);
                return Ok(result.into());
            }
            "env" => std::env::var(text(args, "name")?).unwrap_or_else(|_| "unset".into()),
            "pid" => std::process::id().to_string(),
            other => {
                let result = CallToolResult::error(vec![ContentBlock::text(format!("no tool {other}"))]);
                return Ok(result.into());
            }
        };
        Ok(CallToolResult::success(vec![ContentBlock::text(answer)]).into())
    }

    async fn list_resources(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let resources = self.0.resources.lock().unwrap().values().map(|entry| entry.0.clone()).collect();
        Ok(ListResourcesResult::with_all_items(resources))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let resources = self.0.resources.lock().unwrap();
        let (meta, body) = resources
            .get(&request.uri)
            .ok_or_else(|| ErrorData::resource_not_found(request.uri.clone(), None))?;
        let contents = match body {
            Body::Text(text) => ResourceContents::text(text.clone(), &request.uri),
            Body::Blob(bytes) => {
                ResourceContents::blob(base64::engine::general_purpose::STANDARD.encode(bytes), &request.uri)
            }
        };
        let mime = meta.mime_type.clone().unwrap_or_default();
        Ok(ReadResourceResult::new(vec![contents.with_mime_type(mime)]).into())
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        self.0.sessions.lock().unwrap().push(context.peer);
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.0.subscribers.lock().unwrap().push((request.uri, context.peer));
        Ok(())
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.0.subscribers.lock().unwrap().retain(|(uri, _)| *uri != request.uri);
        Ok(())
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |name: &str| args.iter().any(|a| a == name);
    let value = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned();
    // stdout is the protocol: everything else goes to stderr, which the node logs.
    eprintln!("fixture starting (pid {})", std::process::id());
    if flag("--exit-at-start") {
        eprintln!("fixture exiting at start, on purpose");
        std::process::exit(3);
    }
    if flag("--garbage") {
        println!("this is not JSON-RPC");
        println!("{{\"jsonrpc\":\"2.0\",\"method\":\"no/such\",\"id\":\"x\",\"params\":[1,2");
    }
    let fixture = Fixture::new();
    if let Some(addr) = value("--http") {
        serve_http(fixture, &addr, value("--token")).await
    } else {
        let running = fixture.serve(rmcp::transport::stdio()).await?;
        let ended = running.waiting().await?;
        eprintln!("fixture ended: {ended:?}");
        Ok(())
    }
}

async fn serve_http(fixture: Fixture, addr: &str, token: Option<String>) -> anyhow::Result<()> {
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
    let service: StreamableHttpService<Fixture, LocalSessionManager> = StreamableHttpService::new(
        move || Ok(fixture.clone()),
        Arc::default(),
        StreamableHttpServerConfig::default(),
    );
    let expected = token.map(|t| format!("Bearer {t}"));
    let router = axum::Router::new().nest_service("/mcp", service).layer(axum::middleware::from_fn(
        move |request: axum::extract::Request, next: axum::middleware::Next| {
            let expected = expected.clone();
            async move {
                let given = request.headers().get("authorization").and_then(|v| v.to_str().ok());
                if expected.as_deref().is_some_and(|e| given != Some(e)) {
                    return axum::response::IntoResponse::into_response(axum::http::StatusCode::UNAUTHORIZED);
                }
                next.run(request).await
            }
        },
    ));
    let listener = tokio::net::TcpListener::bind(addr).await?;
    println!("listening on http://{}/mcp", listener.local_addr()?);
    axum::serve(listener, router).await?;
    Ok(())
}
