//! The agents (brains) routes: `GET /v1/agents` (every agent of the mesh, its state asked
//! of the node that runs it), `POST /v1/agents/{name}/messages` (a message from this
//! node's clients, `mur`, wherever the agent runs), and for this node's agents
//! `GET /v1/agents/{name}/logs` (`?lines=N&follow=true`, one JSON object per line) and
//! `GET /v1/agents/{name}/memory` (`?key=K`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use murmur_api::views::{
    AgentLogLine, AgentMemoryEntry, AgentMemoryView, AgentMessageRequest, AgentView, AgentsView,
};
use murmur_brain::SendErrorKind;
use serde::Deserialize;

use super::{ApiState, error};

/// Nodes asked for their agents' state at once by one `GET /v1/agents`.
const STATUS_ASKS_MAX: usize = 64;
/// Lines `?lines=` may ask for.
const LOG_LINES_MAX: usize = murmur_brain::logs::LINES_KEPT;

pub(super) async fn list(State(state): State<Arc<ApiState>>) -> Response {
    let local = state.net.local();
    let directory = match state.net.agent_directory().await {
        Ok(directory) => directory,
        Err(err) => return super::unavailable(&err),
    };
    let mut agents: Vec<AgentView> = state
        .brains
        .status()
        .into_iter()
        .map(|s| AgentView {
            name: s.name,
            node: local.to_string(),
            local: true,
            brain: s.brain,
            language: s.language,
            state: s.state,
            restarts: s.restarts,
            error: None,
        })
        .collect();
    let mut remote: BTreeMap<murmur_protocol::NodeId, Vec<String>> = BTreeMap::new();
    for (name, nodes) in directory {
        for node in nodes.into_iter().filter(|n| *n != local) {
            remote.entry(node).or_default().push(name.clone());
        }
    }
    let asks = remote.keys().take(STATUS_ASKS_MAX).map(|node| {
        let net = state.net.clone();
        let node = *node;
        async move { (node, net.agent_status(node).await) }
    });
    let answers: BTreeMap<_, _> = futures::future::join_all(asks).await.into_iter().collect();
    for (node, names) in remote {
        let answer = answers.get(&node);
        for name in names {
            let status = match answer {
                Some(Ok(list)) => list.iter().find(|s| s.name == name).cloned(),
                _ => None,
            };
            agents.push(match status {
                Some(s) => AgentView {
                    name: s.name,
                    node: node.to_string(),
                    local: false,
                    brain: s.brain,
                    language: s.language,
                    state: s.state,
                    restarts: s.restarts,
                    error: None,
                },
                None => AgentView {
                    name,
                    node: node.to_string(),
                    state: "unknown".into(),
                    error: Some(match answer {
                        Some(Err(why)) => why.clone(),
                        Some(Ok(_)) => "its node no longer lists it".into(),
                        None => format!("more than {STATUS_ASKS_MAX} nodes run agents; not asked"),
                    }),
                    ..AgentView::default()
                },
            });
        }
    }
    agents.sort_by(|a, b| (&a.name, &a.node).cmp(&(&b.name, &b.node)));
    Json(AgentsView { agents }).into_response()
}

pub(super) async fn send(
    State(state): State<Arc<ApiState>>,
    Path(name): Path<String>,
    Json(request): Json<AgentMessageRequest>,
) -> Response {
    match state.brains.send_as_client(&name, request.text).await {
        Ok(()) => {
            (StatusCode::ACCEPTED, Json(serde_json::json!({ "to": name, "delivered": true }))).into_response()
        }
        Err(failure) => {
            let (status, code) = match failure.kind {
                SendErrorKind::Invalid => (StatusCode::BAD_REQUEST, "invalid_message"),
                SendErrorKind::Unknown => (StatusCode::NOT_FOUND, "unknown_agent"),
                SendErrorKind::Ambiguous => (StatusCode::CONFLICT, "ambiguous_agent"),
                SendErrorKind::InboxFull => (StatusCode::TOO_MANY_REQUESTS, "inbox_full"),
                SendErrorKind::Refused => (StatusCode::FORBIDDEN, "refused"),
                SendErrorKind::Unreachable => (StatusCode::BAD_GATEWAY, "unreachable"),
            };
            error(status, code, &failure.message)
        }
    }
}

/// Why an agent of this node is asked for and not found: where it runs, if elsewhere.
async fn not_here(state: &ApiState, name: &str) -> Response {
    let elsewhere =
        state.net.agent_directory().await.ok().and_then(|d| d.get(name).cloned()).unwrap_or_default();
    let message = if elsewhere.is_empty() {
        format!("no agent named `{name}` runs on this node or in the mesh")
    } else {
        let nodes: Vec<String> = elsewhere.iter().map(ToString::to_string).collect();
        format!("agent `{name}` runs on {}; ask that node (--node)", nodes.join(", "))
    };
    error(StatusCode::NOT_FOUND, "not_here", &message)
}

#[derive(Debug, Deserialize)]
pub(super) struct LogQuery {
    lines: Option<usize>,
    #[serde(default)]
    follow: bool,
}

pub(super) async fn logs(
    State(state): State<Arc<ApiState>>,
    Path(name): Path<String>,
    Query(query): Query<LogQuery>,
) -> Response {
    let Some(agent) = state.brains.agent(&name) else { return not_here(&state, &name).await };
    let line = |l: murmur_brain::logs::Line| {
        let view = AgentLogLine { ts_ms: l.ts_ms, level: l.level, source: l.source, message: l.message };
        let mut text = serde_json::to_string(&view).unwrap_or_default();
        text.push('\n');
        text
    };
    let tail: String =
        agent.logs.tail(query.lines.unwrap_or(100).min(LOG_LINES_MAX)).into_iter().map(line).collect();
    if !query.follow {
        return ([(header::CONTENT_TYPE, "application/x-ndjson")], tail).into_response();
    }
    let follow = agent.logs.follow();
    let lines = futures::stream::unfold((Some(tail), follow), move |(first, mut follow)| async move {
        if let Some(first) = first {
            return Some((Ok::<_, std::io::Error>(first), (None, follow)));
        }
        let next = match tokio::time::timeout(Duration::from_secs(15), follow.recv()).await {
            Ok(Ok(next)) => line(next),
            Ok(Err(tokio::sync::broadcast::error::RecvError::Lagged(missed))) => format!(
                "{{\"source\":\"host\",\"level\":\"warn\",\"ts_ms\":0,\"message\":\"{missed} lines missed (the reader was slow)\"}}\n"
            ),
            Ok(Err(_)) => return None,
            // Keep the connection alive through quiet minutes.
            Err(_) => "\n".to_owned(),
        };
        Some((Ok(next), (None, follow)))
    });
    ([(header::CONTENT_TYPE, "application/x-ndjson")], Body::from_stream(lines)).into_response()
}

#[derive(Debug, Deserialize)]
pub(super) struct MemoryQuery {
    key: Option<String>,
}

pub(super) async fn memory(
    State(state): State<Arc<ApiState>>,
    Path(name): Path<String>,
    Query(query): Query<MemoryQuery>,
) -> Response {
    if state.brains.agent(&name).is_none() {
        return not_here(&state, &name).await;
    }
    let brains = state.brains.clone();
    let (agent, key) = (name.clone(), query.key.clone());
    let read = tokio::task::spawn_blocking(move || match &key {
        Some(key) => {
            brains.memory_get(&agent, key).map(|v| v.map(|v| vec![(key.clone(), v)]).unwrap_or_default())
        }
        None => brains.memory(&agent),
    })
    .await;
    let entries = match read {
        Ok(Ok(entries)) => entries,
        Ok(Err(why)) => return error(StatusCode::INTERNAL_SERVER_ERROR, "memory_unreadable", &why),
        Err(why) => return error(StatusCode::INTERNAL_SERVER_ERROR, "memory_unreadable", &why.to_string()),
    };
    let entries: Vec<AgentMemoryEntry> =
        entries.into_iter().map(|(key, value)| AgentMemoryEntry { key, value }).collect();
    if let Some(key) = &query.key
        && entries.is_empty()
    {
        return error(StatusCode::NOT_FOUND, "no_such_key", &format!("agent `{name}` keeps no `{key}`"));
    }
    Json(AgentMemoryView { agent: name, entries }).into_response()
}
