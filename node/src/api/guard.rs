//! What keeps web pages out of the node's API, on every route (open ones included).
//!
//! - **Host.** A request must name the node by an IP address, `localhost`, or a name in
//!   `api.hosts`. A page that rebinds its own DNS name to 127.0.0.1 (DNS rebinding) sends
//!   its own name as Host, and is refused: it can neither read nor call.
//! - **Origin.** A browser sends `Origin` with every cross-origin request and every
//!   non-GET one. A request whose `Origin` is neither the node itself (same scheme-less
//!   authority as its Host) nor one of `api.origins` is refused: a page on another site
//!   cannot make the node act, even with the user's loopback address.
//! - **Content type.** A POST's body must be `application/json`: a page on another origin
//!   can send `text/plain` or a form without asking, but JSON only after a CORS preflight,
//!   which the node answers only for `api.origins`.
//! - **CORS** is closed unless `api.origins` lists the origin: then its preflight is
//!   answered and its responses carry `Access-Control-Allow-Origin`.
//!
//! Clients that are not browsers (`mur`, SDKs, curl) send no `Origin` and a Host of the
//! address they dialled, and are unaffected.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use murmur_config::ClientPolicy;

use super::{ApiState, error};

/// Checks every request; see the module docs.
pub(super) async fn guard(State(state): State<Arc<ApiState>>, request: Request, next: Next) -> Response {
    let policy = &state.policy;
    let headers = request.headers();
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok()).map(str::to_ascii_lowercase);
    if let Some(host) = &host
        && !host_allowed(policy, host)
    {
        return error(
            StatusCode::FORBIDDEN,
            "host_not_allowed",
            &format!(
                "this node does not answer to the name `{host}`: reach it by its IP address, localhost, or a name in api.hosts"
            ),
        );
    }
    let origin = headers
        .get(header::ORIGIN)
        .and_then(|v| v.to_str().ok())
        .map(|o| o.trim_end_matches('/').to_ascii_lowercase());
    let listed = origin.as_ref().is_some_and(|o| policy.origins.contains(o));
    if let Some(origin) = &origin
        && !listed
        && !same_origin(origin, host.as_deref())
    {
        return error(
            StatusCode::FORBIDDEN,
            "origin_not_allowed",
            &format!("a page of `{origin}` may not call this node (add it to api.origins to let it)"),
        );
    }
    if request.method() == Method::OPTIONS {
        // A CORS preflight: answered for listed origins only.
        return match (listed, &origin) {
            (true, Some(origin)) => preflight(origin),
            _ => error(
                StatusCode::FORBIDDEN,
                "origin_not_allowed",
                "cross-origin requests are closed on this node",
            ),
        };
    }
    if request.method() == Method::POST && !is_json(headers) {
        return error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "json_required",
            "a POST body must be application/json (Content-Type: application/json)",
        );
    }
    let mut response = next.run(request).await;
    if let (true, Some(origin)) = (listed, origin)
        && let Ok(value) = HeaderValue::from_str(&origin)
    {
        response.headers_mut().insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, value);
        response.headers_mut().insert(header::VARY, HeaderValue::from_static("Origin"));
    }
    response
}

/// The name part of a Host value (`[::1]:7420` → `::1`, `node:7420` → `node`).
fn host_name(authority: &str) -> &str {
    if let Some(rest) = authority.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match authority.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => authority,
    }
}

fn host_allowed(policy: &ClientPolicy, authority: &str) -> bool {
    let name = host_name(authority);
    name.parse::<std::net::IpAddr>().is_ok() || name == "localhost" || policy.hosts.iter().any(|h| h == name)
}

/// Whether `origin` (`scheme://authority`) is the node itself as reached at `host`.
fn same_origin(origin: &str, host: Option<&str>) -> bool {
    let Some(authority) = origin.strip_prefix("http://").or_else(|| origin.strip_prefix("https://")) else {
        return false;
    };
    host.is_some_and(|host| host == authority)
}

fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map(|v| v.trim().to_ascii_lowercase())
        .is_some_and(|v| v == "application/json" || (v.starts_with("application/") && v.ends_with("+json")))
}

fn preflight(origin: &str) -> Response {
    let mut response = StatusCode::NO_CONTENT.into_response();
    let headers = response.headers_mut();
    if let Ok(value) = HeaderValue::from_str(origin) {
        headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, value);
    }
    headers.insert(header::ACCESS_CONTROL_ALLOW_METHODS, HeaderValue::from_static("GET, POST"));
    headers.insert(
        header::ACCESS_CONTROL_ALLOW_HEADERS,
        HeaderValue::from_static("authorization, content-type, a2a-version, traceparent"),
    );
    headers.insert(header::ACCESS_CONTROL_MAX_AGE, HeaderValue::from_static("600"));
    headers.insert(header::VARY, HeaderValue::from_static("Origin"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_ip_literals_localhost_or_configured_names() {
        let policy = ClientPolicy { hosts: vec!["node1.lab".into()], ..ClientPolicy::default() };
        for ok in ["127.0.0.1:7420", "[::1]:7420", "10.0.0.2", "localhost:7420", "node1.lab:7420"] {
            assert!(host_allowed(&policy, ok), "{ok}");
        }
        for bad in ["evil.example:7420", "localhost.evil.example", "node1.lab.evil", "127.0.0.1.nip.io:7420"]
        {
            assert!(!host_allowed(&policy, bad), "{bad}");
        }
        assert!(same_origin("http://127.0.0.1:7420", Some("127.0.0.1:7420")));
        assert!(!same_origin("http://127.0.0.1:7421", Some("127.0.0.1:7420")));
        assert!(!same_origin("null", Some("127.0.0.1:7420")));
    }
}
