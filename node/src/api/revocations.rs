//! `/v1/revocations`: the revocation lists this node holds (read), and handing it a new one
//! to take and spread through the mesh (admin).

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use murmur_protocol::Envelope;
use murmur_protocol::limits::ENVELOPE_BYTES_MAX;
use murmur_protocol::revocation::{ListSummary, Revocations};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{ApiState, error, unavailable};

/// `POST /v1/revocations` body: a signed list as `mur revocation sign` writes it, base64.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PublishBody {
    list: String,
}

/// `GET /v1/revocations`: every list held, by authority.
pub(super) async fn list(State(state): State<Arc<ApiState>>) -> Json<Value> {
    Json(lists_json(&state.net.revocations()))
}

/// `POST /v1/revocations`: takes a list (trusted authority, valid signature, newer than
/// the one held) and gossips it; a refusal is a 400 naming the failed check, and changes
/// nothing.
pub(super) async fn publish(State(state): State<Arc<ApiState>>, Json(body): Json<PublishBody>) -> Response {
    let bad = |message: String| error(StatusCode::BAD_REQUEST, "bad_request", &message);
    let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(body.list.trim()) else {
        return bad("`list` is not base64 (send the file `mur revocation sign` wrote, base64-encoded)".into());
    };
    let envelope = match Envelope::decode_bounded(&bytes, ENVELOPE_BYTES_MAX) {
        Ok(envelope) => envelope,
        Err(err) => return bad(format!("`list` is not a signed document: {err}")),
    };
    match state.net.revoke(envelope).await {
        Ok(Ok(taken)) => Json(json!({
            "authority": taken.authority.to_string(),
            "seq": taken.seq,
            "at": taken.at.to_rfc3339(),
            "newly_revoked_nodes": taken.nodes.iter().map(ToString::to_string).collect::<Vec<_>>(),
            "grants": taken.grants,
        }))
        .into_response(),
        Ok(Err(refusal)) => {
            let hint = match refusal.reason() {
                "untrusted_issuer" => {
                    " (add the authority to trust.authorities on this node, or sign with one it trusts)"
                }
                "not_newer" => {
                    " (sign a new list with a higher --seq; `mur revocation sign` defaults to the time)"
                }
                _ => "",
            };
            (
                StatusCode::BAD_REQUEST,
                Json(json!({ "error": {
                    "code": "revocation_refused",
                    "reason": refusal.reason(),
                    "message": format!("{refusal}{hint}"),
                }})),
            )
                .into_response()
        }
        Err(err) => unavailable(&err),
    }
}

fn lists_json(revocations: &Revocations) -> Value {
    let lists: Vec<Value> = revocations.lists().iter().map(list_json).collect();
    json!({ "lists": lists })
}

fn list_json(list: &ListSummary) -> Value {
    json!({
        "authority": list.authority.to_string(),
        "seq": list.seq,
        "at": list.at.to_rfc3339(),
        "nodes": list.nodes.iter().map(ToString::to_string).collect::<Vec<_>>(),
        "grants": list.grants,
    })
}
