//! Agent cards: one for the node (`/.well-known/agent-card.json`, every capsule the mesh
//! knows as a skill, also at `/a2a/.well-known/agent-card.json`) and one per capsule
//! (`/a2a/{capsule}/.well-known/agent-card.json`).
//!
//! Cards carry A2A 1.0's fields (`supportedInterfaces`, `capabilities`, `skills`, …) and,
//! for 0.3 clients, `url`, `preferredTransport` and `protocolVersion`: each generation
//! reads its own fields and ignores the other's.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::{ApiState, error, unavailable};
use murmur_api::views::CapsuleView;

/// Where clients reach this node's API, for the URLs in cards: `api.public_url`, else the
/// listen address — from configuration, never from a request's `Host`. Only a node
/// listening on every address (`0.0.0.0`) without a `public_url` names the address the
/// client dialled (a `Host` the guard admitted: an IP, `localhost` or `api.hosts`).
fn base_url(headers: &HeaderMap, state: &ApiState) -> String {
    if let Some(url) = &state.policy.public_url {
        return url.clone();
    }
    if !state.api_addr.ip().is_unspecified() {
        return format!("http://{}", state.api_addr);
    }
    let host = headers.get("host").and_then(|h| h.to_str().ok()).filter(|h| !h.is_empty() && h.len() <= 255);
    format!("http://{}", host.map_or_else(|| state.api_addr.to_string(), str::to_owned))
}

fn skill(capsule: &CapsuleView) -> Value {
    let versions: Vec<&str> = capsule.providers.iter().map(|p| p.version.as_str()).collect();
    json!({
        "id": capsule.name,
        "name": capsule.name,
        "description": format!(
            "capsule `{}` (version {}), hosted by {} node(s) of the mesh; send it text",
            capsule.name,
            versions.first().copied().unwrap_or("?"),
            capsule.providers.len()
        ),
        "tags": ["murmur", "capsule"],
        "examples": [format!("mur send mesh://{} \"hello\"", capsule.name)],
        "inputModes": ["text/plain"],
        "outputModes": ["text/plain"],
    })
}

fn card(state: &ApiState, name: String, description: String, url: &str, skills: Vec<Value>) -> Value {
    let mut card = json!({
        "name": name,
        "description": description,
        "version": env!("CARGO_PKG_VERSION"),
        "supportedInterfaces": [
            { "url": url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0" },
            { "url": url, "protocolBinding": "JSONRPC", "protocolVersion": "0.3" },
        ],
        "provider": { "organization": "Murmur mesh", "url": "https://github.com/murmur-mesh" },
        "capabilities": { "streaming": true, "pushNotifications": false, "extendedAgentCard": false },
        "defaultInputModes": ["text/plain", "application/json"],
        "defaultOutputModes": ["text/plain"],
        "skills": skills,
        // A2A 0.3 fields.
        "url": url,
        "preferredTransport": "JSONRPC",
        "protocolVersion": "0.3.0",
    });
    if !state.policy.tokens.is_empty() {
        card["securitySchemes"] = json!({ "bearer": { "type": "http", "scheme": "bearer",
            "httpAuthSecurityScheme": { "scheme": "Bearer" } } });
        card["security"] = json!([{ "bearer": [] }]);
        card["securityRequirements"] = json!([{ "schemes": { "bearer": { "list": [] } } }]);
    }
    card
}

/// `GET /.well-known/agent-card.json`: the node, with every capsule the mesh knows.
pub async fn node_card(State(state): State<Arc<ApiState>>, headers: HeaderMap) -> Response {
    mesh_card(&state, &headers, "/").await
}

/// `GET /a2a/.well-known/agent-card.json`: what a client given a capsule's URL without a
/// trailing slash (`…/a2a/wordcount`) asks for when it resolves the card path relative to
/// it. The path no longer names the capsule, so it gets the node's card with `/a2a` as
/// the endpoint; a call there names its capsule in `params.tenant`, or is told to.
pub async fn a2a_root_card(State(state): State<Arc<ApiState>>, headers: HeaderMap) -> Response {
    mesh_card(&state, &headers, "/a2a").await
}

async fn mesh_card(state: &ApiState, headers: &HeaderMap, path: &str) -> Response {
    let capsules = match state.net.capsules().await {
        Ok(view) => view.capsules,
        Err(err) => return unavailable(&err),
    };
    let base = base_url(headers, state);
    let skills = capsules.iter().filter(|c| !c.providers.is_empty()).map(skill).collect();
    let name = format!("murmur node {}", state.peer_id);
    let description = "A Murmur mesh node. Send a message to any capsule of the mesh: POST to \
                       /a2a/NAME, or here with params.tenant = NAME."
        .to_owned();
    Json(card(state, name, description, &format!("{base}{path}"), skills)).into_response()
}

/// `GET /a2a/{capsule}/.well-known/agent-card.json`: one capsule of the mesh.
pub async fn capsule_card(
    State(state): State<Arc<ApiState>>,
    Path(capsule): Path<String>,
    headers: HeaderMap,
) -> Response {
    let capsules = match state.net.capsules().await {
        Ok(view) => view.capsules,
        Err(err) => return unavailable(&err),
    };
    let Some(found) = capsules.iter().find(|c| c.name == capsule && !c.providers.is_empty()) else {
        return error(
            StatusCode::NOT_FOUND,
            "not_found",
            &format!("no node of the mesh hosts capsule `{capsule}`"),
        );
    };
    let base = base_url(&headers, &state);
    let description =
        format!("Capsule `{capsule}` on the Murmur mesh; tasks reach a node that hosts it, wherever it is.");
    Json(card(&state, capsule.clone(), description, &format!("{base}/a2a/{capsule}"), vec![skill(found)]))
        .into_response()
}
