//! The host as scripts call it: every function of `murmur:brain@0.1.0` by its name in
//! snake_case, arguments and answers as JSON values, so rhai and JavaScript share one
//! table and one implementation (the run's [`RunHost`]). A WIT `result` error is the
//! script's exception; an `option` none is `()` in rhai and `null` in JavaScript.
//!
//! An event is `{ id, kind, value }`: `kind` the case name in snake_case (`message`,
//! `timer`, `chat_delta`, …) and `value` its payload (absent for `timer`, `reload`,
//! `shutdown`, `chat_end`), records with snake_case fields.

use murmur_runtime::brain::{
    ChatDelta, ChatMessage, ChatRequest, Event, EventEnvelope, ToolCall, ToolCallDelta, ToolSpec, Usage,
};
use murmur_runtime::ports::BrainPort;
use serde_json::{Value, json};

use crate::run::RunHost;

/// Every function, with its number of arguments.
pub const FUNCTIONS: &[(&str, usize)] = &[
    ("subscribe_agent", 1),
    ("unsubscribe_agent", 1),
    ("subscribe_lifecycle", 0),
    ("unsubscribe_lifecycle", 1),
    ("send_agent", 2),
    ("recv", 0),
    ("try_recv", 0),
    ("time_now", 0),
    ("time_format", 2),
    ("wait_until", 1),
    ("wait_for", 1),
    ("wait_cron", 1),
    ("cancel_timer", 1),
    ("sleep_for", 1),
    ("sleep_until", 1),
    ("sleep_cron", 1),
    ("whoami", 0),
    ("log", 2),
    ("new_uuid", 0),
    ("base64_encode", 1),
    ("base64_decode", 1),
    ("memory_get", 1),
    ("memory_set", 2),
    ("memory_remove", 1),
    ("subscribe_endpoint", 1),
    ("unsubscribe_endpoint", 1),
    ("stream_endpoint", 2),
    ("chat_stream", 1),
    ("cancel_stream", 1),
    ("call_tool", 3),
    ("subscribe_resource_list", 1),
    ("subscribe_resource", 2),
    ("unsubscribe_resource", 1),
];

/// Calls host function `name` with `args` for the run of `host`; blocking ones wait on
/// `handle` (the script's thread parks, using no CPU).
pub fn call(
    host: &RunHost,
    handle: &tokio::runtime::Handle,
    name: &str,
    args: &[Value],
) -> Result<Value, String> {
    let text = |i: usize| -> Result<String, String> {
        args.get(i)
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| format!("{name}: argument {} must be a string", i + 1))
    };
    let number = |i: usize| -> Result<u64, String> {
        match args.get(i) {
            Some(Value::Number(n)) => n
                .as_u64()
                .or_else(|| {
                    n.as_f64().filter(|f| *f >= 0.0 && f.fract() == 0.0 && *f < 1.8e19).map(|f| f as u64)
                })
                .ok_or_else(|| format!("{name}: argument {} must be a whole number of at least 0", i + 1)),
            _ => Err(format!("{name}: argument {} must be a number", i + 1)),
        }
    };
    let ok = |s: String| Ok(Value::String(s));
    match name {
        "subscribe_agent" => host.subscribe_agent(text(0)?).and_then(ok),
        "unsubscribe_agent" => host.unsubscribe_agent(text(0)?).map(|()| Value::Null),
        "subscribe_lifecycle" => host.subscribe_lifecycle().and_then(ok),
        "unsubscribe_lifecycle" => {
            host.unsubscribe_lifecycle(text(0)?);
            Ok(Value::Null)
        }
        "send_agent" => handle.block_on(host.send_agent(text(0)?, text(1)?)).map(|()| Value::Null),
        "recv" => handle.block_on(host.recv()).map(|e| envelope(&e)),
        "try_recv" => Ok(host.try_recv().map_or(Value::Null, |e| envelope(&e))),
        "time_now" => Ok(json!(host.time_now())),
        "time_format" => host.time_format(number(0)?, text(1)?).and_then(ok),
        "wait_until" => host.wait_until(number(0)?).and_then(ok),
        "wait_for" => host.wait_for(number(0)?).and_then(ok),
        "wait_cron" => host.wait_cron(text(0)?).and_then(ok),
        "cancel_timer" => Ok(Value::Bool(host.cancel_timer(text(0)?))),
        "sleep_for" => handle.block_on(host.sleep_for(number(0)?)).map(|()| Value::Null),
        "sleep_until" => handle.block_on(host.sleep_until(number(0)?)).map(|()| Value::Null),
        "sleep_cron" => handle.block_on(host.sleep_cron(text(0)?)).map(|()| Value::Null),
        "whoami" => ok(host.whoami()),
        "log" => {
            host.log(text(0)?, text(1)?);
            Ok(Value::Null)
        }
        "new_uuid" => ok(host.new_uuid()),
        "base64_encode" => {
            let bytes = match args.first() {
                Some(Value::Array(items)) => items
                    .iter()
                    .map(|v| v.as_u64().and_then(|b| u8::try_from(b).ok()))
                    .collect::<Option<Vec<u8>>>()
                    .ok_or_else(|| "base64_encode: the bytes must be numbers 0 to 255".to_owned())?,
                Some(Value::String(text)) => text.clone().into_bytes(),
                _ => return Err("base64_encode: give it bytes (or a string, as its UTF-8 bytes)".into()),
            };
            ok(host.base64_encode(bytes))
        }
        "base64_decode" => host.base64_decode(text(0)?).map(|bytes| json!(bytes)),
        "memory_get" => {
            handle.block_on(host.memory_get(text(0)?)).map(|v| v.map_or(Value::Null, Value::String))
        }
        "memory_set" => handle.block_on(host.memory_set(text(0)?, text(1)?)).map(|()| Value::Null),
        "memory_remove" => handle.block_on(host.memory_remove(text(0)?)).map(Value::Bool),
        "subscribe_endpoint" => host.subscribe_endpoint(text(0)?).and_then(ok),
        "unsubscribe_endpoint" => host.unsubscribe_endpoint(text(0)?).map(|()| Value::Null),
        "stream_endpoint" => host.stream_endpoint(text(0)?, delta(args.get(1))?).map(|()| Value::Null),
        "chat_stream" => host.chat_stream(chat_request(args.first())?).and_then(ok),
        "cancel_stream" => Ok(Value::Bool(host.cancel_stream(text(0)?))),
        "call_tool" => host.call_tool(text(0)?, text(1)?, text(2)?).and_then(ok),
        "subscribe_resource_list" => host.subscribe_resource_list(text(0)?).and_then(ok),
        "subscribe_resource" => host.subscribe_resource(text(0)?, text(1)?).and_then(ok),
        "unsubscribe_resource" => Ok(Value::Bool(host.unsubscribe_resource(text(0)?))),
        other => Err(format!("no host function named `{other}`")),
    }
}

/// An event as scripts see it.
#[must_use]
pub fn envelope(envelope: &EventEnvelope) -> Value {
    let (kind, value) = match &envelope.event {
        Event::Message(text) => ("message", Some(json!(text))),
        Event::Error(text) => ("error", Some(json!(text))),
        Event::Timer => ("timer", None),
        Event::Reload => ("reload", None),
        Event::Shutdown => ("shutdown", None),
        Event::ChatDelta(delta) => ("chat_delta", Some(delta_json(delta))),
        Event::ChatEnd => ("chat_end", None),
        Event::ToolResult(r) => ("tool_result", Some(json!({ "name": r.name, "arguments": r.arguments, "value": r.value }))),
        Event::ResourceListUpdated(list) => (
            "resource_list_updated",
            Some(Value::Array(
                list.iter()
                    .map(|r| json!({ "uri": r.uri, "name": r.name, "mime_type": r.mime_type, "description": r.description }))
                    .collect(),
            )),
        ),
        Event::ResourceUpdated(r) => {
            ("resource_updated", Some(json!({ "uri": r.uri, "mime_type": r.mime_type, "content": r.content })))
        }
        Event::EndpointMessage(m) => (
            "endpoint_message",
            Some(json!({
                "session": m.session,
                "messages": m.messages.iter().map(message_json).collect::<Vec<_>>(),
                "tools": m.tools.iter().map(|t| json!({ "name": t.name, "description": t.description, "parameters": t.parameters })).collect::<Vec<_>>(),
                "params": m.params,
            })),
        ),
        Event::EndpointSessionEnd(end) => ("endpoint_session_end", Some(json!({ "session": end.session, "error": end.error }))),
    };
    let mut out = json!({ "id": envelope.id, "kind": kind });
    if let Some(value) = value {
        out["value"] = value;
    }
    out
}

fn delta_json(delta: &ChatDelta) -> Value {
    json!({
        "content": delta.content,
        "reasoning": delta.reasoning,
        "tool_call": delta.tool_call.as_ref().map(|c| json!({ "index": c.index, "id": c.id, "name": c.name, "arguments": c.arguments })),
        "finish_reason": delta.finish_reason,
        "usage": delta.usage.as_ref().map(|u| json!({ "prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens, "total_tokens": u.total_tokens })),
    })
}

fn message_json(m: &ChatMessage) -> Value {
    json!({
        "role": m.role,
        "content": m.content,
        "name": m.name,
        "tool_calls": m.tool_calls.iter().map(|c| json!({ "id": c.id, "name": c.name, "arguments": c.arguments })).collect::<Vec<_>>(),
        "tool_call_id": m.tool_call_id,
    })
}

fn opt_text(value: &Value, key: &str) -> Option<String> {
    value.get(key).and_then(Value::as_str).map(str::to_owned)
}

fn delta(value: Option<&Value>) -> Result<ChatDelta, String> {
    let value = value.filter(|v| v.is_object()).ok_or("a delta is a map")?;
    let tool_call = value.get("tool_call").filter(|v| v.is_object()).map(|c| ToolCallDelta {
        index: c.get("index").and_then(Value::as_u64).and_then(|i| u32::try_from(i).ok()).unwrap_or(0),
        id: opt_text(c, "id"),
        name: opt_text(c, "name"),
        arguments: opt_text(c, "arguments"),
    });
    let usage = value.get("usage").filter(|v| v.is_object()).map(|u| {
        let n = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0);
        Usage {
            prompt_tokens: n("prompt_tokens"),
            completion_tokens: n("completion_tokens"),
            total_tokens: n("total_tokens"),
        }
    });
    Ok(ChatDelta {
        content: opt_text(value, "content"),
        reasoning: opt_text(value, "reasoning"),
        tool_call,
        finish_reason: opt_text(value, "finish_reason"),
        usage,
    })
}

fn chat_request(value: Option<&Value>) -> Result<ChatRequest, String> {
    let value = value.filter(|v| v.is_object()).ok_or("a chat request is a map")?;
    let messages = value
        .get("messages")
        .and_then(Value::as_array)
        .map(|list| {
            list.iter()
                .map(|m| ChatMessage {
                    role: opt_text(m, "role").unwrap_or_else(|| "user".into()),
                    content: opt_text(m, "content"),
                    name: opt_text(m, "name"),
                    tool_calls: m
                        .get("tool_calls")
                        .and_then(Value::as_array)
                        .map(|calls| {
                            calls
                                .iter()
                                .map(|c| ToolCall {
                                    id: opt_text(c, "id").unwrap_or_default(),
                                    name: opt_text(c, "name").unwrap_or_default(),
                                    arguments: opt_text(c, "arguments").unwrap_or_default(),
                                })
                                .collect()
                        })
                        .unwrap_or_default(),
                    tool_call_id: opt_text(m, "tool_call_id"),
                })
                .collect()
        })
        .unwrap_or_default();
    let tools = value
        .get("tools")
        .and_then(Value::as_array)
        .map(|list| {
            list.iter()
                .map(|t| ToolSpec {
                    name: opt_text(t, "name").unwrap_or_default(),
                    description: opt_text(t, "description"),
                    parameters: opt_text(t, "parameters"),
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(ChatRequest {
        provider: opt_text(value, "provider"),
        model: opt_text(value, "model").ok_or("a chat request names its model")?,
        messages,
        tools,
        params: opt_text(value, "params"),
    })
}
