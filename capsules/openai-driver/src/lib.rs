//! `openai-driver`: an inference driver (world `driver`) for OpenAI-compatible Chat
//! Completions providers, tool calling included. It turns one `murmur.inference/1` turn
//! into one `POST {base}/chat/completions` through `wasi:http/outgoing-handler` (the host
//! allows only the agent's `capabilities.network.allow`), and the provider's answer back
//! into a `murmur.inference/1` reply.
//!
//! Configuration, from the environment the agent's manifest gives its driver:
//! - `OPENAI_BASE_URL`: default `https://api.openai.com/v1`;
//! - `OPENAI_API_KEY`: sent as `Authorization: Bearer …` (the manifest names where the
//!   node reads it from, `inference.credentials`; it is never in the artifact);
//! - `OPENAI_CONTINUATION=previous_response_id`: for providers that keep the conversation
//!   (a `previous_response_id`-style field): the response `id` is returned as
//!   `continuation_id`, and a continuing turn sends only the new messages with
//!   `previous_response_id`. Unset: every turn is a full resend and nothing continues.

wit_bindgen::generate!({
    path: ["../../wit/tool", "../../wit/task", "../../wit/text", "../../wit/tool-registry", "../../wit/capsule", "../../wit/runtime-guest"],
    world: "murmur:runtime-guest/driver@0.1.0",
    generate_all,
});

use exports::murmur::tool::run::{Guest, Status, ToolInput, ToolResult};
use serde_json::{Value, json};
use wasi::http::outgoing_handler;
use wasi::http::types::{Fields, Method, OutgoingBody, OutgoingRequest, Scheme};
use wasi::io::streams::StreamError;

/// Bytes of a provider response the driver reads at most.
const RESPONSE_BYTES_MAX: usize = 8 << 20;

struct OpenAi;

fn failed(summary: String) -> ToolResult {
    ToolResult { status: Status::Error, summary: Some(summary), data: None, data_path: None, truncated: false, metadata: vec![] }
}

impl Guest for OpenAi {
    fn run(input: ToolInput) -> ToolResult {
        match turn(input.data.as_deref().unwrap_or_default()) {
            Ok((reply, continuation)) => ToolResult {
                status: Status::Passed,
                summary: None,
                data: Some(reply.to_string()),
                data_path: None,
                truncated: false,
                metadata: continuation.map(|id| vec![("continuation_id".into(), id)]).unwrap_or_default(),
            },
            Err(why) => failed(why),
        }
    }
}

/// One turn: the reply, and the continuation id when continuing is switched on.
fn turn(data: &str) -> Result<(Value, Option<String>), String> {
    let request: Value = serde_json::from_str(data).map_err(|e| format!("the turn is not JSON: {e}"))?;
    if request["format"] != "murmur.inference/1" {
        return Err(format!("unknown format {}: this driver speaks murmur.inference/1", request["format"]));
    }
    let continuing = std::env::var("OPENAI_CONTINUATION").is_ok_and(|v| v == "previous_response_id");
    let body = chat_request(&request, continuing);
    let base = std::env::var("OPENAI_BASE_URL").unwrap_or_else(|_| "https://api.openai.com/v1".into());
    let key = std::env::var("OPENAI_API_KEY").ok().filter(|k| !k.is_empty());
    let (status, answer) = post(&format!("{}/chat/completions", base.trim_end_matches('/')), key.as_deref(), &body.to_string())?;
    let answer: Value = serde_json::from_slice(&answer).map_err(|_| {
        format!("the provider answered {status} with a body that is not JSON: {}", excerpt(&answer))
    })?;
    if !(200..300).contains(&status) {
        let message = answer["error"]["message"].as_str().map_or_else(|| answer.to_string(), str::to_owned);
        return Err(format!("the provider answered {status}: {message}"));
    }
    let choice = &answer["choices"][0];
    let message = &choice["message"];
    if !message.is_object() {
        return Err(format!("the provider answered {status} without a message in choices[0]: {}", excerpt(answer.to_string().as_bytes())));
    }
    let mut tool_calls = Vec::new();
    for call in message["tool_calls"].as_array().into_iter().flatten() {
        let (Some(id), Some(name)) = (call["id"].as_str(), call["function"]["name"].as_str()) else {
            return Err(format!("the provider returned a tool call without an id or a function name: {call}"));
        };
        let arguments = call["function"]["arguments"].as_str().unwrap_or("{}");
        tool_calls.push(json!({ "id": id, "name": name, "arguments": arguments }));
    }
    let finish = choice["finish_reason"].as_str().unwrap_or(if tool_calls.is_empty() { "stop" } else { "tool_calls" });
    let reply = json!({
        "text": message["content"].as_str().unwrap_or_default(),
        "tool_calls": tool_calls,
        "finish_reason": finish,
    });
    let continuation = continuing.then(|| answer["id"].as_str().map(str::to_owned)).flatten();
    Ok((reply, continuation))
}

/// The Chat Completions request for one turn.
fn chat_request(request: &Value, continuing: bool) -> Value {
    let mut messages = Vec::new();
    if let Some(system) = request["system_prompt"].as_str() {
        messages.push(json!({ "role": "system", "content": system }));
    }
    for m in request["messages"].as_array().into_iter().flatten() {
        let mut message = json!({ "role": m["role"], "content": m["content"] });
        if let Some(calls) = m["tool_calls"].as_array().filter(|c| !c.is_empty()) {
            message["tool_calls"] = calls
                .iter()
                .map(|c| json!({ "id": c["id"], "type": "function", "function": { "name": c["name"], "arguments": c["arguments"] } }))
                .collect();
        }
        if let Some(id) = m["tool_call_id"].as_str() {
            message["tool_call_id"] = json!(id);
        }
        messages.push(message);
    }
    let mut body = json!({ "model": request["model"], "messages": messages });
    let tools: Vec<Value> = request["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| json!({ "type": "function", "function": { "name": t["name"], "description": t["description"], "parameters": t["input_schema"] } }))
        .collect();
    if !tools.is_empty() {
        body["tools"] = json!(tools);
    }
    if let (true, Some(id)) = (continuing, request["continuation_id"].as_str()) {
        body["previous_response_id"] = json!(id);
    }
    // Provider parameters pass through; they never replace what the turn set.
    if let Some(params) = request["params"].as_object() {
        for (key, value) in params {
            if body.get(key).is_none() {
                body[key] = value.clone();
            }
        }
    }
    body
}

/// POSTs `body` as JSON to `url`; the status and the response body.
fn post(url: &str, key: Option<&str>, body: &str) -> Result<(u16, Vec<u8>), String> {
    let (scheme, rest) = url.split_once("://").ok_or_else(|| format!("OPENAI_BASE_URL `{url}` has no scheme"))?;
    let scheme = match scheme {
        "https" => Scheme::Https,
        "http" => Scheme::Http,
        other => return Err(format!("OPENAI_BASE_URL scheme `{other}` is not http or https")),
    };
    let (authority, path) = rest.find('/').map_or((rest, "/"), |i| (&rest[..i], &rest[i..]));
    let mut headers = vec![("content-type".to_owned(), b"application/json".to_vec())];
    if let Some(key) = key {
        headers.push(("authorization".to_owned(), format!("Bearer {key}").into_bytes()));
    }
    let fields = Fields::from_list(&headers).map_err(|e| format!("headers: {e:?}"))?;
    let request = OutgoingRequest::new(fields);
    let set = [
        request.set_method(&Method::Post),
        request.set_scheme(Some(&scheme)),
        request.set_authority(Some(authority)),
        request.set_path_with_query(Some(path)),
    ];
    if set.iter().any(Result::is_err) {
        return Err(format!("`{url}` is not a valid request target"));
    }
    let outgoing = request.body().map_err(|()| "the request body is unavailable".to_owned())?;
    let pending = outgoing_handler::handle(request, None).map_err(|e| format!("POST {url}: {e:?}"))?;
    // A request the host refused (or could not connect) closes the body stream: the
    // response's error then says why, so it is reported before any write error.
    let mut write_error = None;
    {
        let stream = outgoing.write().map_err(|()| "the request body stream is unavailable".to_owned())?;
        for chunk in body.as_bytes().chunks(4096) {
            if let Err(e) = stream.blocking_write_and_flush(chunk) {
                write_error = Some(format!("POST {url}: writing the body: {e:?}"));
                break;
            }
        }
    }
    let finished = OutgoingBody::finish(outgoing, None);
    pending.subscribe().block();
    let response = match pending.get() {
        Some(Ok(Ok(response))) => response,
        Some(Ok(Err(code))) => return Err(format!("POST {url}: {code:?}")),
        _ => return Err(write_error.unwrap_or_else(|| format!("POST {url}: no response"))),
    };
    if let Some(error) = write_error {
        return Err(error);
    }
    finished.map_err(|e| format!("POST {url}: {e:?}"))?;
    let status = response.status();
    let incoming = response.consume().map_err(|()| "the response body is unavailable".to_owned())?;
    let mut bytes = Vec::new();
    {
        let stream = incoming.stream().map_err(|()| "the response stream is unavailable".to_owned())?;
        loop {
            match stream.blocking_read(64 * 1024) {
                Ok(chunk) => bytes.extend_from_slice(&chunk),
                Err(StreamError::Closed) => break,
                Err(e) => return Err(format!("POST {url}: reading the response: {e:?}")),
            }
            if bytes.len() > RESPONSE_BYTES_MAX {
                return Err(format!("POST {url}: the response is larger than {RESPONSE_BYTES_MAX} bytes"));
            }
        }
    }
    Ok((status, bytes))
}

fn excerpt(bytes: &[u8]) -> String {
    String::from_utf8_lossy(&bytes[..bytes.len().min(200)]).into_owned()
}

export!(OpenAi);
