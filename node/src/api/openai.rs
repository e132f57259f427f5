//! The OpenAI-compatible endpoint: `GET /v1/models` (every model an agent of the mesh
//! serves, with the nodes that serve it) and `POST /v1/chat/completions` (streamed as
//! Server-Sent Events of `chat.completion.chunk` objects ending with `data: [DONE]`, or
//! one `chat.completion`). A request reaches the serving agent as one `endpoint-message`
//! (the messages, the tools, and every other setting as the opaque `params` JSON); the
//! agent's deltas become chunks. Errors are OpenAI's shape,
//! `{"error":{"message","type","param","code"}}`.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::extract::rejection::JsonRejection;
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use murmur_api::views::{ModelView, ModelsView};
use murmur_protocol::model::{
    ChatDelta, ChatMessage, ChatRequest, ToolCall, ToolSpec, Usage, check_model_name,
};
use serde_json::{Map, Value, json};

use super::ApiState;
use crate::models::{OpenFailure, Reply};

/// How long a non-streamed completion may take.
const COMPLETION_WAIT_MAX: Duration = Duration::from_secs(300);

/// An error in OpenAI's shape.
fn oai_error(
    status: StatusCode,
    kind: &str,
    code: Option<&str>,
    param: Option<&str>,
    message: &str,
) -> Response {
    (status, Json(json!({ "error": { "message": message, "type": kind, "param": param, "code": code } })))
        .into_response()
}

/// A request OpenAI's API would refuse with 400: which parameter, and why.
struct BadRequest {
    param: String,
    message: String,
}

impl IntoResponse for BadRequest {
    fn into_response(self) -> Response {
        oai_error(StatusCode::BAD_REQUEST, "invalid_request_error", None, Some(&self.param), &self.message)
    }
}

fn bad_request(param: &str, message: &str) -> BadRequest {
    BadRequest { param: param.to_owned(), message: message.to_owned() }
}

/// `GET /v1/models`: OpenAI's list, each model with `served_by` (the nodes that serve it).
pub(super) async fn models(State(state): State<Arc<ApiState>>) -> Response {
    let mut models = match state.net.models().await {
        Ok(models) => models,
        Err(err) => return super::unavailable(&err),
    };
    let local = state.net.local();
    for model in state.brains.endpoints().models() {
        let nodes = models.entry(model).or_default();
        if !nodes.contains(&local) {
            nodes.insert(0, local);
        }
    }
    let data = models
        .into_iter()
        .map(|(id, nodes)| ModelView {
            id,
            object: "model".into(),
            created: 0,
            owned_by: "murmur".into(),
            local: nodes.contains(&local),
            served_by: nodes.iter().map(ToString::to_string).collect(),
        })
        .collect();
    Json(ModelsView { object: "list".into(), data }).into_response()
}

/// A parsed request: the model, what the agent gets, and how to answer.
struct Parsed {
    model: String,
    request: ChatRequest,
    stream: bool,
    include_usage: bool,
}

fn text_of(content: &Value, param: &str) -> Result<Option<String>, BadRequest> {
    match content {
        Value::Null => Ok(None),
        Value::String(text) => Ok(Some(text.clone())),
        Value::Array(parts) => {
            let mut text = String::new();
            for part in parts {
                match (part.get("type").and_then(Value::as_str), part.get("text").and_then(Value::as_str)) {
                    (Some("text"), Some(t)) => text.push_str(t),
                    (kind, _) => {
                        return Err(bad_request(
                            param,
                            &format!("content part of type {kind:?} is not supported: only text parts are"),
                        ));
                    }
                }
            }
            Ok(Some(text))
        }
        _ => Err(bad_request(param, "content must be a string, an array of text parts, or null")),
    }
}

fn opt_str(value: &Value, key: &str, param: &str) -> Result<Option<String>, BadRequest> {
    match value.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(bad_request(param, &format!("`{key}` must be a string"))),
    }
}

fn parse(body: Value) -> Result<Parsed, BadRequest> {
    let Value::Object(mut body) = body else {
        return Err(bad_request("body", "the body must be a JSON object"));
    };
    let model = match body.remove("model") {
        Some(Value::String(model)) => model,
        Some(_) => return Err(bad_request("model", "`model` must be a string")),
        None => return Err(bad_request("model", "you must provide a model parameter")),
    };
    check_model_name(&model).map_err(|e| bad_request("model", &e))?;
    let Some(Value::Array(raw_messages)) = body.remove("messages") else {
        return Err(bad_request("messages", "`messages` must be an array of messages"));
    };
    let mut messages = Vec::with_capacity(raw_messages.len());
    for (i, m) in raw_messages.iter().enumerate() {
        let param = format!("messages[{i}]");
        let role = m
            .get("role")
            .and_then(Value::as_str)
            .ok_or_else(|| bad_request(&param, "a message needs a `role`"))?;
        let mut tool_calls = Vec::new();
        if let Some(calls) = m.get("tool_calls").filter(|v| !v.is_null()) {
            let calls =
                calls.as_array().ok_or_else(|| bad_request(&param, "`tool_calls` must be an array"))?;
            for call in calls {
                let function = call
                    .get("function")
                    .ok_or_else(|| bad_request(&param, "a tool call needs a `function`"))?;
                tool_calls.push(ToolCall {
                    id: opt_str(call, "id", &param)?.unwrap_or_default(),
                    name: opt_str(function, "name", &param)?.unwrap_or_default(),
                    arguments: opt_str(function, "arguments", &param)?.unwrap_or_default(),
                });
            }
        }
        messages.push(ChatMessage {
            name: opt_str(m, "name", &param)?,
            role: role.to_owned(),
            content: text_of(m.get("content").unwrap_or(&Value::Null), &param)?,
            tool_calls,
            tool_call_id: opt_str(m, "tool_call_id", &param)?,
        });
    }
    let mut tools = Vec::new();
    if let Some(raw) = body.remove("tools").filter(|v| !v.is_null()) {
        let raw = raw.as_array().ok_or_else(|| bad_request("tools", "`tools` must be an array"))?;
        for (i, tool) in raw.iter().enumerate() {
            let param = format!("tools[{i}]");
            if tool.get("type").and_then(Value::as_str).is_some_and(|t| t != "function") {
                return Err(bad_request(&param, "only tools of type `function` are supported"));
            }
            let function =
                tool.get("function").ok_or_else(|| bad_request(&param, "a tool needs a `function`"))?;
            let name = opt_str(function, "name", &param)?
                .ok_or_else(|| bad_request(&param, "a function needs a `name`"))?;
            tools.push(ToolSpec {
                name,
                parameters: function.get("parameters").filter(|p| !p.is_null()).map(Value::to_string),
                description: opt_str(function, "description", &param)?,
            });
        }
    }
    let stream = match body.remove("stream") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => b,
        Some(_) => return Err(bad_request("stream", "`stream` must be a boolean")),
    };
    let include_usage = body
        .remove("stream_options")
        .and_then(|o| o.get("include_usage").and_then(Value::as_bool))
        .unwrap_or(false);
    let params = (!body.is_empty()).then(|| Value::Object(body).to_string());
    let request = ChatRequest { tools, params, messages };
    request.check().map_err(|(field, reason)| bad_request(field, &format!("`{field}` {reason}")))?;
    Ok(Parsed { model, request, stream, include_usage })
}

/// Releases a completion slot when the response is done.
struct Slot(Arc<ApiState>);

impl Slot {
    /// Counts a finished reply's tokens.
    fn finished(&self, usage: Usage) {
        self.0.tokens[0].fetch_add(usage.prompt_tokens, Ordering::Relaxed);
        self.0.tokens[1].fetch_add(usage.completion_tokens, Ordering::Relaxed);
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.completions.fetch_sub(1, Ordering::Relaxed);
    }
}

/// `POST /v1/chat/completions`.
pub(super) async fn chat(
    State(state): State<Arc<ApiState>>,
    body: Result<Json<Value>, JsonRejection>,
) -> Response {
    let body = match body {
        Ok(Json(body)) => body,
        Err(rejection) if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            return oai_error(
                StatusCode::PAYLOAD_TOO_LARGE,
                "invalid_request_error",
                Some("request_too_large"),
                Some("messages"),
                &format!("a request is at most {} bytes", murmur_protocol::model::MODEL_OPEN_BYTES_MAX),
            );
        }
        Err(rejection) => return bad_request("body", &rejection.body_text()).into_response(),
    };
    let parsed = match parse(body) {
        Ok(parsed) => parsed,
        Err(bad) => return bad.into_response(),
    };
    let max = state.completions_max;
    if state.completions.fetch_add(1, Ordering::Relaxed) >= max {
        state.completions.fetch_sub(1, Ordering::Relaxed);
        return oai_error(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limit_exceeded",
            Some("rate_limit_exceeded"),
            None,
            &format!(
                "this node serves {max} completions at once, its limit (api.completions_max); retry later"
            ),
        );
    }
    let slot = Slot(state.clone());
    let prompt = parsed.request.clone();
    let reply = match state.models.open(Some(&state.brains), &parsed.model, parsed.request).await {
        Ok(reply) => reply,
        Err(OpenFailure::NotFound(message)) => {
            return oai_error(
                StatusCode::NOT_FOUND,
                "invalid_request_error",
                Some("model_not_found"),
                Some("model"),
                &message,
            );
        }
        Err(OpenFailure::Busy(message)) => {
            return oai_error(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limit_exceeded",
                Some("rate_limit_exceeded"),
                None,
                &message,
            );
        }
        Err(OpenFailure::Failed(message)) => {
            return oai_error(
                StatusCode::BAD_GATEWAY,
                "server_error",
                Some("model_unreachable"),
                None,
                &message,
            );
        }
    };
    let node = reply.node(state.net.local()).to_string();
    let reply =
        Answer { reply, id: format!("chatcmpl-{}", uuid::Uuid::new_v4().simple()), created: now_secs() };
    let mut response = if parsed.stream {
        stream(reply, parsed.model, prompt, parsed.include_usage, slot)
    } else {
        complete(reply, parsed.model, &prompt, slot).await
    };
    if let Ok(value) = axum::http::HeaderValue::from_str(&node) {
        response.headers_mut().insert("x-murmur-node", value);
    }
    response
}

struct Answer {
    reply: Reply,
    id: String,
    created: u64,
}

fn now_secs() -> u64 {
    murmur_config::clock::now().0 / 1000
}

/// What a reply said, for usage counted host-side.
#[derive(Default)]
struct Tally {
    text: String,
    usage: Option<Usage>,
}

impl Tally {
    fn add(&mut self, delta: &ChatDelta) {
        for part in [&delta.content, &delta.reasoning].into_iter().flatten() {
            self.text.push_str(part);
        }
        if let Some(args) = delta.tool_call.as_ref().and_then(|c| c.arguments.as_ref()) {
            self.text.push_str(args);
        }
        if delta.usage.is_some() {
            self.usage = delta.usage;
        }
    }

    /// The agent's own counts, else cl100k_base counts of the prompt and the reply.
    fn usage(&self, prompt: &ChatRequest) -> Usage {
        self.usage.unwrap_or_else(|| {
            let prompt_tokens: u64 = prompt
                .messages
                .iter()
                .map(|m| m.content.as_deref().map_or(0, murmur_runtime::count_tokens) + 4)
                .sum();
            let completion_tokens = murmur_runtime::count_tokens(&self.text);
            Usage { total_tokens: prompt_tokens + completion_tokens, prompt_tokens, completion_tokens }
        })
    }
}

fn usage_json(u: Usage) -> Value {
    json!({ "prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens, "total_tokens": u.total_tokens })
}

fn delta_json(delta: &ChatDelta, first: bool) -> Value {
    let mut out = Map::new();
    if first {
        out.insert("role".into(), json!("assistant"));
    }
    if let Some(content) = &delta.content {
        out.insert("content".into(), json!(content));
    }
    if let Some(reasoning) = &delta.reasoning {
        out.insert("reasoning_content".into(), json!(reasoning));
    }
    if let Some(call) = &delta.tool_call {
        let mut function = Map::new();
        if let Some(name) = &call.name {
            function.insert("name".into(), json!(name));
        }
        if let Some(arguments) = &call.arguments {
            function.insert("arguments".into(), json!(arguments));
        }
        let mut entry = json!({ "index": call.index, "function": function });
        if let Some(id) = &call.id {
            entry["id"] = json!(id);
            entry["type"] = json!("function");
        }
        out.insert("tool_calls".into(), json!([entry]));
    }
    Value::Object(out)
}

fn chunk(answer: &Answer, model: &str, include_usage: bool, choices: Value, usage: Option<Value>) -> Event {
    let mut chunk = json!({
        "id": answer.id, "object": "chat.completion.chunk", "created": answer.created,
        "model": model, "system_fingerprint": null, "choices": choices,
    });
    if include_usage {
        chunk["usage"] = usage.unwrap_or(Value::Null);
    }
    Event::default().data(chunk.to_string())
}

fn stream(reply: Answer, model: String, prompt: ChatRequest, include_usage: bool, slot: Slot) -> Response {
    struct S {
        reply: Answer,
        model: String,
        prompt: ChatRequest,
        include_usage: bool,
        tally: Tally,
        first: bool,
        done: bool,
        slot: Slot,
    }
    let start =
        S { reply, model, prompt, include_usage, tally: Tally::default(), first: true, done: false, slot };
    let events = futures::stream::unfold(start, |mut s| async move {
        if s.done {
            return None;
        }
        let mut out: Vec<Result<Event, Infallible>> = Vec::new();
        match s.reply.reply.next().await {
            Ok(delta) => {
                s.tally.add(&delta);
                let finish = delta.finish_reason.clone();
                let choice = json!([{ "index": 0, "delta": delta_json(&delta, s.first), "logprobs": null, "finish_reason": finish }]);
                s.first = false;
                out.push(Ok(chunk(&s.reply, &s.model, s.include_usage, choice, None)));
                if finish.is_some() {
                    let usage = s.tally.usage(&s.prompt);
                    s.slot.finished(usage);
                    if s.include_usage {
                        let usage = usage_json(usage);
                        out.push(Ok(chunk(&s.reply, &s.model, s.include_usage, json!([]), Some(usage))));
                    }
                    out.push(Ok(Event::default().data("[DONE]")));
                    s.done = true;
                }
            }
            Err(end) => {
                let message = end.unwrap_or_else(|| "the agent ended the reply without a finish reason".into());
                let error = json!({ "error": { "message": message, "type": "server_error", "param": null, "code": "session_ended" } });
                out.push(Ok(Event::default().data(error.to_string())));
                s.done = true;
            }
        }
        Some((out, s))
    })
    .flat_map(futures::stream::iter);
    Sse::new(events).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))).into_response()
}

async fn complete(mut reply: Answer, model: String, prompt: &ChatRequest, slot: Slot) -> Response {
    let mut tally = Tally::default();
    let mut content: Option<String> = None;
    let mut reasoning: Option<String> = None;
    let mut calls: Vec<Value> = Vec::new();
    let collect = async {
        loop {
            let delta = match reply.reply.next().await {
                Ok(delta) => delta,
                Err(end) => {
                    return Err(
                        end.unwrap_or_else(|| "the agent ended the reply without a finish reason".into())
                    );
                }
            };
            tally.add(&delta);
            if let Some(t) = &delta.content {
                content.get_or_insert_with(String::new).push_str(t);
            }
            if let Some(t) = &delta.reasoning {
                reasoning.get_or_insert_with(String::new).push_str(t);
            }
            if let Some(call) = &delta.tool_call {
                let index = call.index as usize;
                if index >= murmur_protocol::model::REQUEST_TOOLS_MAX {
                    return Err(format!("the agent streamed a tool call at index {index}"));
                }
                while calls.len() <= index {
                    calls.push(
                        json!({ "id": "", "type": "function", "function": { "name": "", "arguments": "" } }),
                    );
                }
                let entry = &mut calls[index];
                if let Some(id) = &call.id {
                    entry["id"] = json!(id);
                }
                for (key, part) in [("name", &call.name), ("arguments", &call.arguments)] {
                    if let Some(part) = part {
                        let joined = format!("{}{part}", entry["function"][key].as_str().unwrap_or(""));
                        entry["function"][key] = json!(joined);
                    }
                }
            }
            if let Some(finish) = delta.finish_reason {
                return Ok(finish);
            }
        }
    };
    let finish = match tokio::time::timeout(COMPLETION_WAIT_MAX, collect).await {
        Ok(Ok(finish)) => finish,
        Ok(Err(message)) => {
            return oai_error(StatusCode::BAD_GATEWAY, "server_error", Some("session_ended"), None, &message);
        }
        Err(_) => {
            return oai_error(
                StatusCode::GATEWAY_TIMEOUT,
                "server_error",
                Some("timeout"),
                None,
                &format!(
                    "the agent did not finish within {} s; stream the reply for longer ones",
                    COMPLETION_WAIT_MAX.as_secs()
                ),
            );
        }
    };
    let mut message = json!({ "role": "assistant", "content": content, "refusal": null });
    if let Some(reasoning) = reasoning {
        message["reasoning_content"] = json!(reasoning);
    }
    if !calls.is_empty() {
        message["tool_calls"] = Value::Array(calls);
    }
    let usage = tally.usage(prompt);
    slot.finished(usage);
    Json(json!({
        "id": reply.id,
        "object": "chat.completion",
        "created": reply.created,
        "model": model,
        "system_fingerprint": null,
        "choices": [{ "index": 0, "message": message, "logprobs": null, "finish_reason": finish }],
        "usage": usage_json(usage),
    }))
    .into_response()
}
