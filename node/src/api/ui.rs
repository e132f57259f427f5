//! The dashboard at `/ui`: one page, a script and a style sheet, compiled into the binary
//! (no build step, nothing fetched from anywhere but this node). The page itself is open,
//! like `/healthz`; everything it shows it reads through the API with the client policy
//! `mur` has (a loopback browser holds every scope, any other asks for a token).

use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Redirect, Response};

const INDEX: &str = include_str!("../../ui/index.html");
const SCRIPT: &str = include_str!("../../ui/app.js");
const STYLE: &str = include_str!("../../ui/app.css");

/// Scripts and styles from this node only, no inline code, no framing, no forms posted
/// elsewhere: a name a peer chose cannot run as script even if it were put in as markup.
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
    img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

fn asset(body: &'static str, content_type: &'static str) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(POLICY));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    // The binary is the version: a new node serves new assets at once.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

pub(super) async fn index() -> Response {
    asset(INDEX, "text/html; charset=utf-8")
}

pub(super) async fn script() -> Response {
    asset(SCRIPT, "text/javascript; charset=utf-8")
}

pub(super) async fn style() -> Response {
    asset(STYLE, "text/css; charset=utf-8")
}

/// `/ui/` → `/ui` (the page's links are absolute, either works; one address is tidier).
pub(super) async fn slash() -> Redirect {
    Redirect::permanent("/ui")
}
