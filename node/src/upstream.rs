//! Upstream providers for brains: `provider.chat-stream` naming `provider: NAME` streams a
//! chat completion from the OpenAI-compatible API configured for that agent
//! (`[[agents]] providers.NAME = { base_url, api_key }`): one `POST {base_url}/chat/completions`
//! with `stream: true`, whose Server-Sent Events (parsed by `eventsource-stream`) become
//! deltas. Tool-call pieces of one chunk become one delta each; usage is asked for
//! (`stream_options.include_usage`) and passed on.

use std::collections::{BTreeMap, VecDeque};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use eventsource_stream::Eventsource;
use futures::{Stream, StreamExt};
use murmur_brain::ChatStream;
use murmur_config::{Credential, ProviderEntry};
use murmur_protocol::model::{ChatDelta, ChatRequest, ToolCallDelta, Usage};
use murmur_runtime::ports::PortFuture;
use serde_json::{Map, Value, json};

/// How long an upstream may take to answer the request's headers.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long an upstream may stay silent mid-stream.
const IDLE_TIMEOUT: Duration = Duration::from_secs(120);
/// The largest error body read from an upstream.
const ERROR_BODY_MAX: usize = 4096;

/// The upstreams of every agent of this node.
#[derive(Debug)]
pub struct Upstreams {
    client: reqwest::Client,
    /// Agent → provider name → where.
    providers: BTreeMap<String, BTreeMap<String, ProviderEntry>>,
    credentials: BTreeMap<String, Credential>,
    /// Streams that failed to open or broke, for `/metrics`.
    pub errors: AtomicU64,
}

type Events = Pin<Box<dyn Stream<Item = Result<eventsource_stream::Event, String>> + Send>>;

/// One upstream stream, read as deltas.
struct UpstreamStream {
    events: Events,
    pending: VecDeque<ChatDelta>,
    finished: bool,
    provider: String,
}

impl Upstreams {
    pub fn new(
        providers: BTreeMap<String, BTreeMap<String, ProviderEntry>>,
        credentials: BTreeMap<String, Credential>,
    ) -> anyhow::Result<Self> {
        let client = reqwest::Client::builder().connect_timeout(CONNECT_TIMEOUT).build()?;
        Ok(Self { client, providers, credentials, errors: AtomicU64::new(0) })
    }

    /// Opens a stream of `model` for `agent` from its provider `name`.
    pub async fn open(
        &self,
        agent: &str,
        name: &str,
        model: &str,
        request: &ChatRequest,
    ) -> Result<Box<dyn ChatStream>, String> {
        let opened = self.open_inner(agent, name, model, request).await;
        if opened.is_err() {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
        opened
    }

    async fn open_inner(
        &self,
        agent: &str,
        name: &str,
        model: &str,
        request: &ChatRequest,
    ) -> Result<Box<dyn ChatStream>, String> {
        let Some(provider) = self.providers.get(agent).and_then(|p| p.get(name)) else {
            let known: Vec<&String> =
                self.providers.get(agent).map(|p| p.keys().collect()).unwrap_or_default();
            return Err(format!(
                "agent `{agent}` has no provider `{name}` (configured: {known:?}; [[agents]] providers.NAME = {{ base_url, api_key }})"
            ));
        };
        let key = match &provider.api_key {
            None => None,
            Some(source) => {
                Some(source.read(&self.credentials).map_err(|e| format!("provider `{name}`: {e}"))?)
            }
        };
        let url = format!("{}/chat/completions", provider.base_url);
        let mut call = self.client.post(&url).json(&body(model, request)?);
        if let Some(key) = key {
            call = call.bearer_auth(key);
        }
        let response = tokio::time::timeout(CONNECT_TIMEOUT, call.send())
            .await
            .map_err(|_| {
                format!("provider `{name}` ({url}) did not answer within {} s", CONNECT_TIMEOUT.as_secs())
            })?
            .map_err(|e| format!("provider `{name}` ({url}): {e}"))?;
        let status = response.status();
        if !status.is_success() {
            let text = response.text().await.unwrap_or_default();
            let message = serde_json::from_str::<Value>(&text)
                .ok()
                .and_then(|v| v["error"]["message"].as_str().map(str::to_owned))
                .unwrap_or_else(|| text.chars().take(ERROR_BODY_MAX).collect());
            return Err(format!("provider `{name}` answered {status}: {message}"));
        }
        let events = response.bytes_stream().eventsource().map(|e| e.map_err(|e| e.to_string()));
        Ok(Box::new(UpstreamStream {
            events: Box::pin(events),
            pending: VecDeque::new(),
            finished: false,
            provider: name.to_owned(),
        }))
    }
}

/// The upstream request: OpenAI's shape, the brain's `params` merged in (they may not
/// override the model, the messages, the tools or streaming).
fn body(model: &str, request: &ChatRequest) -> Result<Value, String> {
    let mut body = match request.params.as_deref() {
        None => Map::new(),
        Some(text) => match serde_json::from_str(text) {
            Ok(Value::Object(map)) => map,
            _ => return Err("the request's params must be a JSON object".into()),
        },
    };
    let messages: Vec<Value> = request
        .messages
        .iter()
        .map(|m| {
            let mut out = json!({ "role": m.role, "content": m.content });
            if let Some(name) = &m.name {
                out["name"] = json!(name);
            }
            if !m.tool_calls.is_empty() {
                out["tool_calls"] = m
                    .tool_calls
                    .iter()
                    .map(|c| json!({ "id": c.id, "type": "function", "function": { "name": c.name, "arguments": c.arguments } }))
                    .collect();
            }
            if let Some(id) = &m.tool_call_id {
                out["tool_call_id"] = json!(id);
            }
            out
        })
        .collect();
    body.insert("model".into(), json!(model));
    body.insert("messages".into(), Value::Array(messages));
    if !request.tools.is_empty() {
        let tools: Result<Vec<Value>, String> = request
            .tools
            .iter()
            .map(|t| {
                let parameters = match &t.parameters {
                    None => json!({ "type": "object" }),
                    Some(text) => serde_json::from_str(text)
                        .map_err(|e| format!("tool `{}`: parameters are not JSON: {e}", t.name))?,
                };
                Ok(json!({ "type": "function", "function": { "name": t.name, "description": t.description, "parameters": parameters } }))
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools?));
    }
    body.insert("stream".into(), json!(true));
    body.insert("stream_options".into(), json!({ "include_usage": true }));
    Ok(Value::Object(body))
}

/// The deltas one chunk carries (one per tool-call piece).
fn deltas(chunk: &Value) -> Vec<ChatDelta> {
    let text = |v: &Value| v.as_str().map(str::to_owned);
    let choice = &chunk["choices"][0];
    let delta = &choice["delta"];
    let mut out = Vec::new();
    let content = text(&delta["content"]).filter(|c| !c.is_empty());
    let reasoning =
        text(&delta["reasoning_content"]).or_else(|| text(&delta["reasoning"])).filter(|r| !r.is_empty());
    if content.is_some() || reasoning.is_some() {
        out.push(ChatDelta { content, reasoning, ..ChatDelta::default() });
    }
    for call in delta["tool_calls"].as_array().into_iter().flatten() {
        out.push(ChatDelta {
            tool_call: Some(ToolCallDelta {
                id: text(&call["id"]),
                name: text(&call["function"]["name"]),
                index: call["index"].as_u64().and_then(|i| u32::try_from(i).ok()).unwrap_or(0),
                arguments: text(&call["function"]["arguments"]),
            }),
            ..ChatDelta::default()
        });
    }
    if let Some(reason) = text(&choice["finish_reason"]) {
        out.push(ChatDelta { finish_reason: Some(reason), ..ChatDelta::default() });
    }
    if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
        let n = |k: &str| usage[k].as_u64().unwrap_or(0);
        out.push(ChatDelta {
            usage: Some(Usage {
                total_tokens: n("total_tokens"),
                prompt_tokens: n("prompt_tokens"),
                completion_tokens: n("completion_tokens"),
            }),
            ..ChatDelta::default()
        });
    }
    out
}

impl UpstreamStream {
    async fn next_delta(&mut self) -> Result<ChatDelta, Option<String>> {
        loop {
            if let Some(delta) = self.pending.pop_front() {
                return Ok(delta);
            }
            if self.finished {
                return Err(None);
            }
            let provider = &self.provider;
            let event = match tokio::time::timeout(IDLE_TIMEOUT, self.events.next()).await {
                Err(_) => {
                    return Err(Some(format!(
                        "provider `{provider}` was silent for {} s",
                        IDLE_TIMEOUT.as_secs()
                    )));
                }
                Ok(None) => {
                    self.finished = true;
                    return Err(None);
                }
                Ok(Some(Err(e))) => return Err(Some(format!("provider `{provider}`'s stream broke: {e}"))),
                Ok(Some(Ok(event))) => event,
            };
            if event.data.trim() == "[DONE]" {
                self.finished = true;
                continue;
            }
            let chunk: Value = serde_json::from_str(&event.data)
                .map_err(|e| Some(format!("provider `{provider}` sent a chunk that is not JSON: {e}")))?;
            if let Some(message) = chunk["error"]["message"].as_str() {
                return Err(Some(format!("provider `{provider}`: {message}")));
            }
            self.pending.extend(deltas(&chunk));
        }
    }
}

impl ChatStream for UpstreamStream {
    fn next(&mut self) -> PortFuture<'_, Result<ChatDelta, Option<String>>> {
        Box::pin(self.next_delta())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_become_deltas_one_per_tool_call_piece() {
        let chunk = json!({ "choices": [{ "index": 0, "delta": { "content": "hi", "tool_calls": [
            { "index": 0, "id": "c1", "type": "function", "function": { "name": "a", "arguments": "{" } },
            { "index": 1, "function": { "arguments": "}" } } ] }, "finish_reason": "tool_calls" }],
            "usage": { "prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5 } });
        let out = deltas(&chunk);
        assert_eq!(out.len(), 5, "{out:?}");
        assert_eq!(out[0].content.as_deref(), Some("hi"));
        assert_eq!(out[1].tool_call.as_ref().unwrap().id.as_deref(), Some("c1"));
        assert_eq!(out[2].tool_call.as_ref().unwrap().index, 1);
        assert_eq!(out[3].finish_reason.as_deref(), Some("tool_calls"));
        assert_eq!(out[4].usage.unwrap().total_tokens, 5);
        assert!(
            deltas(&json!({ "choices": [{ "delta": { "role": "assistant", "content": "" } }] })).is_empty()
        );
    }

    #[test]
    fn the_body_keeps_the_brains_settings_but_not_over_what_the_host_sets() {
        let request = ChatRequest {
            params: Some(r#"{"temperature":0.1,"model":"sneaky","stream":false}"#.into()),
            messages: vec![murmur_protocol::model::ChatMessage {
                role: "user".into(),
                content: Some("x".into()),
                ..Default::default()
            }],
            ..Default::default()
        };
        let sent = body("gpt-4o-mini", &request).unwrap();
        assert_eq!((sent["model"].as_str(), sent["stream"].as_bool()), (Some("gpt-4o-mini"), Some(true)));
        assert_eq!(sent["temperature"], 0.1);
        let bad = ChatRequest { params: Some("[1]".into()), ..request };
        assert!(body("m", &bad).is_err());
    }
}
