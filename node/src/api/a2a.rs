//! The A2A endpoint: JSON-RPC 2.0 over HTTP, with server-sent events for streams.
//!
//! One endpoint serves every capsule the mesh knows: `POST /a2a/{capsule}` (the URL each
//! capsule's agent card names), or `POST /` and `POST /a2a` with the capsule given as A2A
//! 1.0's `params.tenant` (or `params.metadata.capsule`). A capsule may be written
//! `NAME`, `mesh://NAME` or `mesh://NAME@PEER` (only that node may run it).
//!
//! Both generations of method names are served (see docs/src/a2a.md for the table): the
//! runtime specification's A2A 0.3 names (`message/send`, `message/stream`, `tasks/get`,
//! `tasks/cancel`, `tasks/resubscribe`) and A2A 1.0's (`SendMessage`,
//! `SendStreamingMessage`, `GetTask`, `ListTasks`, `CancelTask`, `SubscribeToTask`).
//! Answers take the shape of the version the client speaks: the `A2A-Version` header
//! (empty means 0.3), else the generation of the method name.
//!
//! Every task event carries its per-task sequence number, as the SSE `id`; a stream that
//! reconnects with `Last-Event-ID` (or `params.metadata.lastSeq`) resumes after it, from
//! the owner's bounded event log.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Extension, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use murmur_protocol::PeerUrl;
use murmur_protocol::task::{
    CLIENT_ID_BYTES_MAX, Sender, TASK_TEXT_BYTES_MAX, TaskEvent, TaskId, TaskSnapshot, TaskState,
};
use serde_json::{Value, json};
use tracing::Instrument;

use super::ApiState;
use crate::tasks::{CallError, DiskCursor, NewTask, TaskView};
use crate::telemetry::{self, TraceContext};
use murmur_config::limits::{
    A2A_BLOCKING_WAIT_MAX, A2A_LIST_DISK_READ_MAX, A2A_PAGE_SIZE_MAX, A2A_STREAMS_MAX,
};
use murmur_config::{ApiClient, Scope};

/// JSON-RPC and A2A error codes.
pub mod code {
    pub const PARSE_ERROR: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
    pub const INTERNAL: i64 = -32603;
    pub const TASK_NOT_FOUND: i64 = -32001;
    pub const TASK_NOT_CANCELABLE: i64 = -32002;
    pub const PUSH_NOT_SUPPORTED: i64 = -32003;
    pub const UNSUPPORTED_OPERATION: i64 = -32004;
    pub const CONTENT_TYPE_NOT_SUPPORTED: i64 = -32005;
    pub const VERSION_NOT_SUPPORTED: i64 = -32009;
    /// Murmur: a check refused the task (grant, policy, capsule); `data.check` names it.
    pub const TASK_REFUSED: i64 = -32030;
    /// Murmur: the task could not be placed, or its owner did not answer.
    pub const UNAVAILABLE: i64 = -32031;
}

/// Which generation of A2A a client speaks; answers take its shapes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialect {
    /// A2A 0.3, the runtime specification's (`kind` fields, `input-required`).
    V03,
    /// A2A 1.0 (ProtoJSON: `TASK_STATE_INPUT_REQUIRED`, `ROLE_AGENT`, oneof wrappers).
    V1,
}

/// A JSON-RPC error, with `data` for machine-readable detail.
#[derive(Debug)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    pub data: Option<Value>,
}

impl RpcError {
    fn new(code: i64, message: impl Into<String>) -> Self {
        Self { code, message: message.into(), data: None }
    }

    fn params(message: impl Into<String>) -> Self {
        Self::new(code::INVALID_PARAMS, message)
    }
}

impl From<CallError> for RpcError {
    fn from(err: CallError) -> Self {
        let check = err.check().to_owned();
        let code = match &err {
            CallError::Refused { .. } => code::TASK_REFUSED,
            CallError::NotFound(_) => code::TASK_NOT_FOUND,
            CallError::NotCancelable { .. } => code::TASK_NOT_CANCELABLE,
            CallError::NotWaiting { .. } => code::UNSUPPORTED_OPERATION,
            CallError::Unavailable(_) => code::UNAVAILABLE,
        };
        let reason = match &err {
            CallError::Refused { reason, .. } => reason.clone(),
            other => other.to_string(),
        };
        Self { code, message: err.to_string(), data: Some(json!({ "check": check, "reason": reason })) }
    }
}

/// One parsed call.
struct Call {
    id: Value,
    method: String,
    params: Value,
    dialect: Dialect,
    /// Who calls: its message ids and the tasks it sees are its own (`admin` sees all).
    client: ApiClient,
}

fn envelope(id: &Value, outcome: Result<Value, RpcError>) -> Value {
    match outcome {
        Ok(result) => json!({ "jsonrpc": "2.0", "id": id, "result": result }),
        Err(err) => {
            let mut error = json!({ "code": err.code, "message": err.message });
            if let Some(data) = err.data {
                error["data"] = data;
            }
            json!({ "jsonrpc": "2.0", "id": id, "error": error })
        }
    }
}

fn reply(id: &Value, outcome: Result<Value, RpcError>) -> Response {
    // JSON-RPC errors travel with 200: the HTTP exchange itself succeeded.
    (StatusCode::OK, Json(envelope(id, outcome))).into_response()
}

/// `POST /`, `POST /a2a`: the capsule comes from the params.
pub async fn rpc_node(
    State(state): State<Arc<ApiState>>,
    client: Option<Extension<ApiClient>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    handle(state, None, client, headers, body).await
}

/// `POST /a2a/{capsule}`.
pub async fn rpc_capsule(
    State(state): State<Arc<ApiState>>,
    Path(capsule): Path<String>,
    client: Option<Extension<ApiClient>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    handle(state, Some(capsule), client, headers, body).await
}

/// The scope a JSON-RPC method needs: sending, canceling and setting anything up need
/// `send`; reading tasks and cards `read`.
fn scope_of(method: &str) -> Scope {
    match method {
        "message/send"
        | "SendMessage"
        | "message/stream"
        | "SendStreamingMessage"
        | "tasks/cancel"
        | "CancelTask" => Scope::Send,
        _ => Scope::Read,
    }
}

fn parse_call(headers: &HeaderMap, body: &[u8]) -> Result<Call, (Value, RpcError)> {
    let request: Value = serde_json::from_slice(body)
        .map_err(|e| (Value::Null, RpcError::new(code::PARSE_ERROR, format!("the body is not JSON: {e}"))))?;
    let id = request.get("id").cloned().unwrap_or(Value::Null);
    if !(id.is_string() || id.is_number() || id.is_null()) {
        return Err((
            Value::Null,
            RpcError::new(code::INVALID_REQUEST, "`id` must be a string, a number or null"),
        ));
    }
    if request.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err((id, RpcError::new(code::INVALID_REQUEST, "`jsonrpc` must be \"2.0\"")));
    }
    let Some(method) = request.get("method").and_then(Value::as_str).map(str::to_owned) else {
        return Err((id, RpcError::new(code::INVALID_REQUEST, "`method` must be a string")));
    };
    let params = request.get("params").cloned().unwrap_or_else(|| json!({}));
    if !params.is_object() {
        return Err((id, RpcError::params("`params` must be an object")));
    }
    let header = headers.get("a2a-version").and_then(|v| v.to_str().ok()).map(str::trim).unwrap_or("");
    let dialect = match header {
        "" => {
            if method.contains('/') {
                Dialect::V03
            } else {
                Dialect::V1
            }
        }
        v if v == "0.3" || v.starts_with("0.3.") => Dialect::V03,
        v if v == "1" || v == "1.0" || v.starts_with("1.0.") => Dialect::V1,
        other => {
            let mut err =
                RpcError::new(code::VERSION_NOT_SUPPORTED, format!("A2A version `{other}` is not supported"));
            err.data = Some(json!({ "supported": ["0.3", "1.0"] }));
            return Err((id, err));
        }
    };
    Ok(Call { id, method, params, dialect, client: ApiClient { name: "local".into(), scope: Scope::Admin } })
}

async fn handle(
    state: Arc<ApiState>,
    tenant: Option<String>,
    client: Option<Extension<ApiClient>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let mut call = match parse_call(&headers, &body) {
        Ok(call) => call,
        Err((id, err)) => return reply(&id, Err(err)),
    };
    if let Some(Extension(client)) = client {
        let needed = scope_of(&call.method);
        if !client.may(needed) {
            return crate::api::forbidden(&client, needed);
        }
        call.client = client;
    }
    let trace = headers
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
        .and_then(TraceContext::parse)
        .unwrap_or_else(TraceContext::root);
    let span = tracing::info_span!("a2a", method = %call.method, trace_id = %trace.trace_id_hex());
    telemetry::set_parent(&span, &trace);
    let last_event_id =
        headers.get("last-event-id").and_then(|v| v.to_str().ok()).and_then(|v| v.trim().parse::<u64>().ok());
    dispatch(state, tenant, call, trace, last_event_id).instrument(span).await
}

async fn dispatch(
    state: Arc<ApiState>,
    tenant: Option<String>,
    call: Call,
    trace: TraceContext,
    last_event_id: Option<u64>,
) -> Response {
    // The next hop continues this node's span (or the caller's, with telemetry off).
    let trace = telemetry::current_or(&trace);
    let id = call.id.clone();
    let dialect = call.dialect;
    let outcome = match call.method.as_str() {
        "message/send" | "SendMessage" => {
            send(&state, tenant, &call, &trace, false).await.map(|(view, _)| match dialect {
                Dialect::V03 => task_json(&view, dialect),
                Dialect::V1 => json!({ "task": task_json(&view, dialect) }),
            })
        }
        "message/stream" | "SendStreamingMessage" => match send(&state, tenant, &call, &trace, true).await {
            Ok((view, _)) => return stream(state, id, dialect, view, None),
            Err(err) => Err(err),
        },
        "tasks/get" | "GetTask" => match visible_task(&state, &call) {
            Ok(task) => state.tasks.get(&task).await.map(|v| task_json(&v, dialect)).map_err(Into::into),
            Err(err) => Err(err),
        },
        "tasks/cancel" | "CancelTask" => match visible_task(&state, &call) {
            Ok(task) => state.tasks.cancel(&task).await.map(|v| task_json(&v, dialect)).map_err(Into::into),
            Err(err) => Err(err),
        },
        "tasks/resubscribe" | "SubscribeToTask" => match visible_task(&state, &call) {
            Ok(task) => {
                let after = last_event_id.or_else(|| call.params["metadata"]["lastSeq"].as_u64());
                match state.tasks.get(&task).await {
                    Ok(view) => return stream(state, id, dialect, view, after),
                    Err(err) => Err(err.into()),
                }
            }
            Err(err) => Err(err),
        },
        "ListTasks" | "tasks/list" => list(&state, &call, dialect).await,
        "tasks/pushNotificationConfig/set"
        | "tasks/pushNotificationConfig/get"
        | "tasks/pushNotificationConfig/list"
        | "tasks/pushNotificationConfig/delete"
        | "CreateTaskPushNotificationConfig"
        | "GetTaskPushNotificationConfig"
        | "ListTaskPushNotificationConfigs"
        | "DeleteTaskPushNotificationConfig" => Err(RpcError::new(
            code::PUSH_NOT_SUPPORTED,
            "push notifications are not supported; use message/stream or tasks/resubscribe",
        )),
        "agent/getAuthenticatedExtendedCard" | "GetExtendedAgentCard" => {
            Err(RpcError::new(code::UNSUPPORTED_OPERATION, "this node has no extended agent card"))
        }
        other => Err(RpcError::new(code::METHOD_NOT_FOUND, format!("no method `{other}`"))),
    };
    reply(&id, outcome)
}

/// The task `call` names, if its client may see it: a client sees the tasks it sent
/// (their message ids are scoped to it), `admin` every task of this node.
fn visible_task(state: &ApiState, call: &Call) -> Result<TaskId, RpcError> {
    let task = task_param(&call.params)?;
    if visible(state, &call.client, &task) { Ok(task) } else { Err(CallError::NotFound(task).into()) }
}

/// Whether `client` may see `task`.
pub(super) fn visible(state: &ApiState, client: &ApiClient, task: &TaskId) -> bool {
    if client.may(Scope::Admin) {
        return true;
    }
    let manager = state.tasks.manager();
    if let Ok(record) = manager.record(task) {
        // Owned here: sent by a client of this node under its scoped message id.
        return record.origin == crate::tasks::Origin::Client
            && record.message_id.strip_prefix(&client.name).is_some_and(|m| m.starts_with('/'));
    }
    manager.route_of(task).is_some_and(|route| route.client.as_deref() == Some(client.name.as_str()))
}

fn task_param(params: &Value) -> Result<TaskId, RpcError> {
    let text =
        params["id"].as_str().ok_or_else(|| RpcError::params("`params.id` (the task id) is required"))?;
    // A2A 1.0 may name tasks by resource name (`tasks/{id}`).
    let text = text.strip_prefix("tasks/").unwrap_or(text);
    parse_task_id(text)
}

/// A task id from a client. One that is not in our format names no task this node could
/// know, so it answers as A2A clients expect for an unknown task (-32001), saying why.
fn parse_task_id(text: &str) -> Result<TaskId, RpcError> {
    text.parse().map_err(|_: murmur_protocol::task::TaskIdError| {
        // Quote a bounded part: the id is the caller's, of any length.
        let shown: String = text.chars().take(80).collect();
        RpcError::new(
            code::TASK_NOT_FOUND,
            format!("no task `{}`: task ids are 32 hex digits, dashes optional", shown.escape_debug()),
        )
    })
}

/// The text of a message's parts: text parts as they are, data parts as JSON text.
fn message_text(message: &Value) -> Result<String, RpcError> {
    let parts =
        message["parts"].as_array().ok_or_else(|| RpcError::params("`message.parts` must be a list"))?;
    let mut texts = Vec::new();
    for part in parts {
        let kind = part["kind"].as_str();
        if let Some(text) = part["text"].as_str().filter(|_| kind.is_none_or(|k| k == "text")) {
            texts.push(text.to_owned());
        } else if let Some(data) = part.get("data").filter(|_| kind.is_none_or(|k| k == "data")) {
            texts.push(data.to_string());
        } else {
            return Err(RpcError::new(
                code::CONTENT_TYPE_NOT_SUPPORTED,
                "only text and data parts are supported (capsules take text)",
            ));
        }
    }
    let text = texts.join("\n");
    if text.len() > TASK_TEXT_BYTES_MAX {
        return Err(RpcError::params(format!(
            "the message is {} bytes, more than {TASK_TEXT_BYTES_MAX}",
            text.len()
        )));
    }
    Ok(text)
}

/// Which capsule a call names: the path, `params.tenant`, or `params.metadata.capsule`.
fn target(
    tenant: Option<String>,
    params: &Value,
) -> Result<(String, Option<murmur_protocol::NodeId>), RpcError> {
    let named = tenant
        .or_else(|| params["tenant"].as_str().filter(|t| !t.is_empty()).map(str::to_owned))
        .or_else(|| params["metadata"]["capsule"].as_str().map(str::to_owned))
        .ok_or_else(|| {
            RpcError::params(
                "which capsule? POST to /a2a/NAME, or set params.tenant (A2A 1.0) or params.metadata.capsule",
            )
        })?;
    let url = if named.starts_with("mesh://") { named.clone() } else { format!("mesh://{named}") };
    match url.parse::<PeerUrl>() {
        Ok(PeerUrl::Mesh { capsule, node }) => Ok((capsule, node)),
        _ => Err(RpcError::params(format!("`{named}` is not a capsule name or mesh:// URL"))),
    }
}

/// `message/send`: a follow-up for a task (when `message.taskId` is set) or a new task.
async fn send(
    state: &ApiState,
    tenant: Option<String>,
    call: &Call,
    trace: &TraceContext,
    streaming: bool,
) -> Result<(TaskView, bool), RpcError> {
    let params = &call.params;
    let message = params
        .get("message")
        .filter(|m| m.is_object())
        .ok_or_else(|| RpcError::params("`params.message` is required"))?;
    let text = message_text(message)?;
    // A stream never blocks: its events show the task's progress.
    let blocking = !streaming
        && match params["configuration"]["blocking"].as_bool() {
            Some(blocking) => blocking,
            None => {
                call.dialect == Dialect::V1
                    && !params["configuration"]["returnImmediately"].as_bool().unwrap_or(false)
            }
        };
    if let Some(task) = message["taskId"].as_str().filter(|t| !t.is_empty()) {
        let task = parse_task_id(task)?;
        if !visible(state, &call.client, &task) {
            return Err(CallError::NotFound(task).into());
        }
        let view = state.tasks.reply(&task, text).await?;
        let view = if blocking { settle(state, &task).await? } else { view };
        return Ok((view, false));
    }
    // Message ids are the client's own: the task's is `CLIENT/MESSAGE_ID`, so two clients
    // picking one id send two tasks, and neither sees the other's.
    let room = CLIENT_ID_BYTES_MAX - call.client.name.len() - 1;
    let message_id =
        message["messageId"].as_str().filter(|m| !m.is_empty() && m.len() <= room).ok_or_else(|| {
            RpcError::params(format!(
                "`message.messageId` must be 1 to {room} bytes (for client `{}`)",
                call.client.name
            ))
        })?;
    let context = match message["contextId"].as_str() {
        Some(c) if c.is_empty() || c.len() > CLIENT_ID_BYTES_MAX => {
            return Err(RpcError::params(format!(
                "`message.contextId` must be 1 to {CLIENT_ID_BYTES_MAX} bytes"
            )));
        }
        other => other.map(str::to_owned),
    };
    let (capsule, pin) = target(tenant, params)?;
    // One deadline for the whole blocking call: the owner's settle wait counts toward it.
    let started = tokio::time::Instant::now();
    let view = state
        .tasks
        .submit(NewTask {
            capsule,
            pin,
            text,
            message_id: format!("{}/{message_id}", call.client.name),
            client: Some(call.client.name.clone()),
            context,
            sender: Sender::Client,
            traceparent: Some(trace.header()),
            settle_wait: if blocking { A2A_BLOCKING_WAIT_MAX } else { Duration::ZERO },
        })
        .await?;
    let task = view.snapshot.task;
    tracing::debug!(task = %task, owner = %view.owner, "task placed");
    let settled = view.snapshot.state.is_terminal() || view.snapshot.state == TaskState::InputRequired;
    let view = if blocking && !settled {
        state
            .tasks
            .settle_at(view.owner, &task, A2A_BLOCKING_WAIT_MAX.saturating_sub(started.elapsed()))
            .await?
    } else {
        view
    };
    Ok((view, true))
}

async fn settle(state: &ApiState, task: &TaskId) -> Result<TaskView, RpcError> {
    Ok(state.tasks.settle(task, A2A_BLOCKING_WAIT_MAX).await?)
}

/// Where a `ListTasks` page starts: an offset into the tasks in memory (owned and placed,
/// newest first), or a place among the finished tasks only the task database holds, which
/// follow them (`d` alone: from the newest of those).
#[derive(Debug, PartialEq, Eq)]
enum PageStart {
    Memory(usize),
    Disk(Option<DiskCursor>),
}

impl PageStart {
    fn parse(token: Option<&str>) -> Result<Self, RpcError> {
        let refused = || {
            RpcError::params(
                "`pageToken` is not one this node issued: pass the last answer's `nextPageToken`, or none for the first page",
            )
        };
        match token.filter(|t| !t.is_empty()) {
            None => Ok(Self::Memory(0)),
            Some("d") => Ok(Self::Disk(None)),
            Some(token) if token.starts_with('d') => {
                token.parse().map(|cursor| Self::Disk(Some(cursor))).map_err(|_| refused())
            }
            Some(token) => token.parse().map(Self::Memory).map_err(|_| refused()),
        }
    }
}

async fn list(state: &ApiState, call: &Call, dialect: Dialect) -> Result<Value, RpcError> {
    let params = &call.params;
    let wanted = match params["status"].as_str().or_else(|| params["state"].as_str()) {
        Some(text) => Some(text.parse::<TaskState>().map_err(RpcError::params)?),
        None => None,
    };
    let page_size = params["pageSize"]
        .as_u64()
        .map_or(50, |n| usize::try_from(n).unwrap_or(A2A_PAGE_SIZE_MAX))
        .clamp(1, A2A_PAGE_SIZE_MAX);
    let start = PageStart::parse(params["pageToken"].as_str())?;
    let context = params["contextId"].as_str();
    let all: Vec<TaskView> = state
        .tasks
        .list(wanted)
        .await
        .into_iter()
        .filter(|v| context.is_none_or(|c| v.snapshot.context == c))
        .filter(|v| visible(state, &call.client, &v.snapshot.task))
        .collect();
    let total = all.len();
    let (mut tasks, mut next, disk_from): (Vec<Value>, String, Option<Option<DiskCursor>>) = match start {
        PageStart::Memory(offset) => {
            let tasks = all.iter().skip(offset).take(page_size).map(|v| task_json(v, dialect)).collect();
            if offset.saturating_add(page_size) < total {
                (tasks, (offset + page_size).to_string(), None)
            } else {
                (tasks, String::new(), Some(None))
            }
        }
        PageStart::Disk(cursor) => (Vec::new(), String::new(), Some(cursor)),
    };
    // Past the tasks in memory come the finished ones only the database holds (only
    // finished tasks are ever left there), by finish time, newest first.
    let on_disk_too = wanted.is_none_or(TaskState::is_terminal) && state.tasks.has_disk_only();
    if let Some(cursor) = disk_from.filter(|_| on_disk_too) {
        if tasks.len() == page_size {
            next = "d".to_owned();
        } else {
            let keep = |s: &TaskSnapshot| {
                wanted.is_none_or(|w| s.state == w)
                    && context.is_none_or(|c| s.context == c)
                    && visible(state, &call.client, &s.task)
            };
            let (views, cursor) = state
                .tasks
                .list_on_disk(cursor.as_ref(), page_size - tasks.len(), A2A_LIST_DISK_READ_MAX, keep)
                .map_err(RpcError::from)?;
            tasks.extend(views.iter().map(|v| task_json(v, dialect)));
            next = cursor.map(|c| c.to_string()).unwrap_or_default();
        }
    }
    Ok(json!({ "tasks": tasks, "nextPageToken": next, "pageSize": page_size, "totalSize": total }))
}

fn state_name(state: TaskState, dialect: Dialect) -> String {
    match dialect {
        Dialect::V03 => state.as_str().to_owned(),
        Dialect::V1 => state.as_v1(),
    }
}

fn text_part(text: &str, dialect: Dialect) -> Value {
    match dialect {
        Dialect::V03 => json!({ "kind": "text", "text": text }),
        Dialect::V1 => json!({ "text": text }),
    }
}

fn agent_message(snapshot: &TaskSnapshot, seq: u64, text: &str, dialect: Dialect) -> Value {
    let mut message = json!({
        "messageId": format!("{}-{seq}", snapshot.task),
        "taskId": snapshot.task.to_string(),
        "contextId": snapshot.context,
        "parts": [text_part(text, dialect)],
    });
    match dialect {
        Dialect::V03 => {
            message["kind"] = json!("message");
            message["role"] = json!("agent");
        }
        Dialect::V1 => message["role"] = json!("ROLE_AGENT"),
    }
    message
}

fn status_json(
    snapshot: &TaskSnapshot,
    state: TaskState,
    text: Option<&str>,
    seq: u64,
    dialect: Dialect,
) -> Value {
    let mut status = json!({ "state": state_name(state, dialect) });
    if let Some(text) = text {
        status["message"] = agent_message(snapshot, seq, text, dialect);
    }
    status
}

fn result_artifact(snapshot: &TaskSnapshot, text: &str, dialect: Dialect) -> Value {
    json!({ "artifactId": format!("{}-result", snapshot.task), "name": "result", "parts": [text_part(text, dialect)] })
}

/// A task in the client's dialect.
fn task_json(view: &TaskView, dialect: Dialect) -> Value {
    let s = &view.snapshot;
    let mut task = json!({
        "id": s.task.to_string(),
        "contextId": s.context,
        "status": status_json(s, s.state, s.message.as_deref(), s.seq, dialect),
        "metadata": { "murmur": { "capsule": s.capsule, "owner": view.owner.to_string(), "seq": s.seq } },
    });
    if dialect == Dialect::V03 {
        task["kind"] = json!("task");
    }
    if s.state == TaskState::Completed
        && let Some(text) = &s.message
    {
        task["artifacts"] = json!([result_artifact(s, text, dialect)]);
    }
    task
}

/// One task event as stream items with their stream numbers: its status update, and the
/// result artifact before the final `completed` (numbered the one before it) unless the
/// client saw it already (`after`).
fn event_items(
    snapshot: &TaskSnapshot,
    event: &TaskEvent,
    dialect: Dialect,
    after: u64,
) -> Vec<(u64, Value)> {
    let mut items = Vec::new();
    let terminal = event.state.is_terminal();
    let artifact_seq = crate::tasks::artifact_seq(event);
    if event.state == TaskState::Completed
        && artifact_seq > after
        && let Some(text) = &event.text
    {
        let artifact = result_artifact(snapshot, text, dialect);
        let item = match dialect {
            Dialect::V03 => json!({
                "kind": "artifact-update", "taskId": snapshot.task.to_string(), "contextId": snapshot.context,
                "artifact": artifact, "lastChunk": true, "metadata": { "seq": artifact_seq },
            }),
            Dialect::V1 => json!({ "artifactUpdate": {
                "taskId": snapshot.task.to_string(), "contextId": snapshot.context,
                "artifact": artifact, "lastChunk": true, "metadata": { "seq": artifact_seq },
            }}),
        };
        items.push((artifact_seq, item));
    }
    let status = status_json(snapshot, event.state, event.text.as_deref(), event.seq, dialect);
    let item = match dialect {
        Dialect::V03 => json!({
            "kind": "status-update", "taskId": snapshot.task.to_string(), "contextId": snapshot.context,
            "status": status, "final": terminal, "metadata": { "seq": event.seq },
        }),
        Dialect::V1 => json!({ "statusUpdate": {
            "taskId": snapshot.task.to_string(), "contextId": snapshot.context,
            "status": status, "final": terminal, "metadata": { "seq": event.seq },
        }}),
    };
    items.push((event.seq, item));
    items
}

/// One of the [`A2A_STREAMS_MAX`] SSE streams the API serves at once (every kind counts),
/// released when the stream ends.
pub(super) struct StreamSlot(Arc<ApiState>);

impl StreamSlot {
    /// A slot, unless as many streams as the node serves are open.
    pub(super) fn take(state: &Arc<ApiState>) -> Option<Self> {
        if state.streams.fetch_add(1, Ordering::Relaxed) >= A2A_STREAMS_MAX {
            state.streams.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        Some(Self(state.clone()))
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        self.0.streams.fetch_sub(1, Ordering::Relaxed);
    }
}

struct StreamState {
    state: Arc<ApiState>,
    id: Value,
    dialect: Dialect,
    task: TaskId,
    after: u64,
    done: bool,
    first: Option<TaskView>,
    _slot: StreamSlot,
}

/// An SSE stream of a task's events after `after` (from the start: the task itself first,
/// then every change). Each SSE event's `id` is its own stream number (the task's sequence
/// number for a status, the one before it for the result artifact), so a client that
/// resumes after any event gets exactly the ones after it.
fn stream(state: Arc<ApiState>, id: Value, dialect: Dialect, view: TaskView, after: Option<u64>) -> Response {
    let Some(slot) = StreamSlot::take(&state) else {
        return reply(
            &id,
            Err(RpcError::new(code::UNAVAILABLE, format!("more than {A2A_STREAMS_MAX} streams are open"))),
        );
    };
    let task = view.snapshot.task;
    // Without a resume point the stream opens with the task as it is now.
    let (first, after) = match after {
        None => (Some(view.clone()), view.snapshot.seq),
        Some(after) => (None, after),
    };
    let start = StreamState { state, id, dialect, task, after, done: false, first, _slot: slot };
    let events = futures::stream::unfold(start, |mut s| async move {
        if s.done {
            return None;
        }
        let mut out: Vec<Result<Event, Infallible>> = Vec::new();
        if let Some(view) = s.first.take() {
            let item = match s.dialect {
                Dialect::V03 => task_json(&view, s.dialect),
                Dialect::V1 => json!({ "task": task_json(&view, s.dialect) }),
            };
            out.push(Ok(sse(&s.id, view.snapshot.seq, item)));
            s.done = view.snapshot.state.is_terminal();
            return Some((out, s));
        }
        match s.state.tasks.events(&s.task, s.after, Duration::from_secs(5), false).await {
            Ok((events, view)) => {
                for event in &events {
                    for (seq, item) in event_items(&view.snapshot, event, s.dialect, s.after) {
                        out.push(Ok(sse(&s.id, seq, item)));
                    }
                    s.after = event.seq;
                }
                let last_state = events.last().map(|e| e.state);
                // Done once the final event went out (or the task ended with nothing newer).
                s.done = last_state.is_some_and(TaskState::is_terminal)
                    || (events.is_empty()
                        && view.snapshot.state.is_terminal()
                        && view.snapshot.seq <= s.after);
                if events.is_empty() && view.snapshot.state.is_terminal() && view.snapshot.seq > s.after {
                    // Events older than the log: send the task as it is, then end.
                    let item = match s.dialect {
                        Dialect::V03 => task_json(&view, s.dialect),
                        Dialect::V1 => json!({ "task": task_json(&view, s.dialect) }),
                    };
                    out.push(Ok(sse(&s.id, view.snapshot.seq, item)));
                    s.done = true;
                }
            }
            Err(err) => {
                let body = envelope(&s.id, Err(err.into()));
                out.push(Ok(Event::default().data(body.to_string())));
                s.done = true;
            }
        }
        Some((out, s))
    })
    .flat_map(futures::stream::iter);
    Sse::new(events).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))).into_response()
}

fn sse(id: &Value, seq: u64, result: Value) -> Event {
    Event::default().id(seq.to_string()).data(envelope(id, Ok(result)).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(state: TaskState, message: Option<&str>) -> TaskSnapshot {
        TaskSnapshot {
            seq: 3,
            task: TaskId::derive("client@x", "m1"),
            state,
            capsule: "echo".into(),
            context: "ctx".into(),
            message: message.map(str::to_owned),
        }
    }

    fn view(state: TaskState, message: Option<&str>) -> TaskView {
        TaskView {
            snapshot: snapshot(state, message),
            owner: murmur_protocol::SecretKey::from_seed([1; 32]).node_id(),
        }
    }

    #[test]
    fn a_list_page_starts_in_memory_or_on_disk_by_its_token() {
        assert_eq!(PageStart::parse(None).unwrap(), PageStart::Memory(0));
        assert_eq!(PageStart::parse(Some("")).unwrap(), PageStart::Memory(0));
        assert_eq!(PageStart::parse(Some("150")).unwrap(), PageStart::Memory(150));
        assert_eq!(PageStart::parse(Some("d")).unwrap(), PageStart::Disk(None));
        let token = format!("d{}", "ff".repeat(24));
        assert_eq!(PageStart::parse(Some(&token)).unwrap(), PageStart::Disk(Some(token.parse().unwrap())));
        for bad in ["-1", "1.5", "dd", "next", &format!("d{}", "f".repeat(47))] {
            let refused = PageStart::parse(Some(bad)).unwrap_err();
            assert!(format!("{refused:?}").contains("nextPageToken"), "{bad}: {refused:?}");
        }
    }

    #[test]
    fn tasks_take_the_shape_of_each_dialect() {
        let v03 = task_json(&view(TaskState::Completed, Some("hi")), Dialect::V03);
        assert_eq!(v03["kind"], "task");
        assert_eq!(v03["status"]["state"], "completed");
        assert_eq!(v03["status"]["message"]["role"], "agent");
        assert_eq!(v03["artifacts"][0]["parts"][0], json!({"kind": "text", "text": "hi"}));
        let v1 = task_json(&view(TaskState::InputRequired, Some("which?")), Dialect::V1);
        assert!(v1.get("kind").is_none());
        assert_eq!(v1["status"]["state"], "TASK_STATE_INPUT_REQUIRED");
        assert_eq!(v1["status"]["message"]["role"], "ROLE_AGENT");
        assert_eq!(v1["status"]["message"]["parts"][0], json!({"text": "which?"}));
        assert!(v1.get("artifacts").is_none());
    }

    #[test]
    fn completed_events_carry_the_artifact_then_the_final_status_each_numbered() {
        let s = snapshot(TaskState::Completed, Some("done"));
        let event = TaskEvent { seq: 5, text: Some("done".into()), state: TaskState::Completed };
        let items = event_items(&s, &event, Dialect::V03, 3);
        assert_eq!((items[0].0, items[0].1["kind"].as_str()), (4, Some("artifact-update")));
        assert_eq!(items[0].1["metadata"]["seq"], 4);
        assert_eq!(
            (items[1].0, items[1].1["kind"].as_str(), items[1].1["final"].as_bool()),
            (5, Some("status-update"), Some(true))
        );
        // A client that saw the artifact gets the final status alone.
        let items = event_items(&s, &event, Dialect::V03, 4);
        assert_eq!(items.len(), 1);
        assert_eq!((items[0].0, items[0].1["kind"].as_str()), (5, Some("status-update")));
        let items =
            event_items(&s, &TaskEvent { seq: 2, text: None, state: TaskState::Working }, Dialect::V1, 1);
        assert_eq!(items.len(), 1);
        assert_eq!(items[0].1["statusUpdate"]["status"]["state"], "TASK_STATE_WORKING");
        assert_eq!(items[0].1["statusUpdate"]["metadata"]["seq"], 2);
    }

    #[test]
    fn calls_are_validated_and_versions_chosen() {
        let headers = HeaderMap::new();
        let call = parse_call(&headers, br#"{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{}}"#)
            .ok()
            .unwrap();
        assert_eq!(call.dialect, Dialect::V1);
        let call =
            parse_call(&headers, br#"{"jsonrpc":"2.0","id":"a","method":"message/send"}"#).ok().unwrap();
        assert_eq!(call.dialect, Dialect::V03);
        let (_, err) = parse_call(&headers, b"{").err().unwrap();
        assert_eq!(err.code, code::PARSE_ERROR);
        let (_, err) = parse_call(&headers, br#"{"jsonrpc":"1.0","id":1,"method":"x"}"#).err().unwrap();
        assert_eq!(err.code, code::INVALID_REQUEST);
        let (_, err) =
            parse_call(&headers, br#"{"jsonrpc":"2.0","id":1,"method":"x","params":[1]}"#).err().unwrap();
        assert_eq!(err.code, code::INVALID_PARAMS);
        let mut headers = HeaderMap::new();
        headers.insert("a2a-version", "2.0".parse().unwrap());
        let (_, err) = parse_call(&headers, br#"{"jsonrpc":"2.0","id":1,"method":"GetTask"}"#).err().unwrap();
        assert_eq!(err.code, code::VERSION_NOT_SUPPORTED);
        headers.insert("a2a-version", "0.3".parse().unwrap());
        assert_eq!(
            parse_call(&headers, br#"{"jsonrpc":"2.0","id":1,"method":"GetTask"}"#).ok().unwrap().dialect,
            Dialect::V03
        );
    }

    #[test]
    fn a_task_id_not_in_our_format_is_a_task_not_found() {
        // A2A clients treat -32001 as "no such task"; -32602 read as a malformed call.
        for id in ["task-123", "", "tasks/not-ours", &"x".repeat(10_000)] {
            let err = task_param(&json!({ "id": id })).unwrap_err();
            assert_eq!(err.code, code::TASK_NOT_FOUND, "{id:.20}");
            assert!(err.message.len() < 300, "the message quotes a bounded part of the id");
        }
        assert_eq!(parse_task_id("junk").unwrap_err().code, code::TASK_NOT_FOUND);
        assert_eq!(task_param(&json!({})).unwrap_err().code, code::INVALID_PARAMS);
    }

    #[test]
    fn parts_and_targets_are_read_strictly() {
        let message = json!({"parts": [{"kind": "text", "text": "a"}, {"text": "b"}, {"kind": "data", "data": {"x": 1}}]});
        assert_eq!(message_text(&message).unwrap(), "a\nb\n{\"x\":1}");
        let file = json!({"parts": [{"kind": "file", "file": {"uri": "x"}}]});
        assert_eq!(message_text(&file).unwrap_err().code, code::CONTENT_TYPE_NOT_SUPPORTED);
        assert_eq!(target(Some("echo".into()), &json!({})).unwrap().0, "echo");
        assert_eq!(target(None, &json!({"tenant": "mesh://wc"})).unwrap().0, "wc");
        assert_eq!(target(None, &json!({})).unwrap_err().code, code::INVALID_PARAMS);
        assert_eq!(target(Some("Bad Name".into()), &json!({})).unwrap_err().code, code::INVALID_PARAMS);
    }
}
