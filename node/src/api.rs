//! The node's HTTP API (axum): health, peers, capsules, agents (brains), Prometheus
//! metrics, the A2A endpoint and agent cards.
//!
//! Who may call is the node's [`ClientPolicy`]: loopback clients by default, others with a
//! bearer token from the config. `/healthz` and agent cards are open to all.
//!
//! Errors are a status plus `{"error":{"code":"…","message":"…"}}`. Build the router with
//! [`app`] and test it in process with `tower::ServiceExt::oneshot`.

pub mod a2a;
mod agents;
pub mod artifacts;
mod cards;
mod guard;
mod live;
mod metrics;
mod openai;
mod revocations;
pub mod runtime;
mod traces;
mod ui;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Instant;

use axum::extract::{ConnectInfo, DefaultBodyLimit, Request, State};
use axum::http::{Method, StatusCode, Uri, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;

use murmur_config::{ApiClient, ClientPolicy, Scope};
use murmur_net::NetHandle;
use murmur_runtime::Runtime;

use crate::tasks::TaskService;

/// What the HTTP handlers read.
#[derive(Debug)]
pub struct ApiState {
    pub peer_id: String,
    pub api_addr: SocketAddr,
    /// The libp2p listen addresses, as the ready line printed them.
    pub listen_addrs: Vec<String>,
    pub started: Instant,
    pub net: NetHandle,
    pub runtime: Runtime,
    pub tasks: TaskService,
    pub policy: ClientPolicy,
    /// SSE streams open now.
    pub streams: AtomicUsize,
    /// Pulls artifacts from the mesh.
    pub puller: crate::artifacts::Puller,
    /// Where `mur install` pins and writes capsule manifests.
    pub install: artifacts::InstallTarget,
    /// The node's agents (brains).
    pub brains: murmur_brain::Brains,
    /// Model requests across the mesh (the OpenAI-compatible endpoint).
    pub models: Arc<crate::models::ModelRouter>,
    /// Brains' upstream providers.
    pub upstreams: Arc<crate::upstream::Upstreams>,
    /// The node's MCP servers (brains' tooling).
    pub mcp: Arc<murmur_mcp::Servers>,
    /// Chat completions being served now, and how many may be (`api.completions_max`).
    pub completions: AtomicUsize,
    pub completions_max: usize,
    /// Tokens of the completions this node's `/v1` finished: prompt, completion.
    pub tokens: [std::sync::atomic::AtomicU64; 2],
}

/// The router, with every route the node serves.
pub fn app(state: Arc<ApiState>) -> Router {
    // Each route needs a scope of the client's (`api.tokens`; this machine's clients hold
    // every scope); JSON-RPC methods check theirs in `a2a`, which is reachable with `read`.
    let read = Router::new()
        .route("/v1/peers", get(peers))
        .route("/v1/capsules", get(capsules))
        .route("/metrics", get(prometheus))
        .route("/v1/runtime/capsules", get(runtime::installed))
        .route("/v1/tasks/{id}/trace", get(traces::task_trace))
        .route("/v1/agents", get(agents::list))
        .route("/v1/agents/{name}/logs", get(agents::logs))
        .route("/v1/agents/{name}/memory", get(agents::memory))
        .route("/v1/revocations", get(revocations::list))
        .route("/v1/models", get(openai::models))
        .route("/v1/mcp", get(mcp_servers))
        .route("/v1/status", get(status))
        .route("/v1/tasks/events", get(live::task_events))
        .route("/v1/artifacts", get(live::artifacts))
        .route("/", post(a2a::rpc_node))
        .route("/a2a", post(a2a::rpc_node))
        .route("/a2a/{capsule}", post(a2a::rpc_capsule))
        .route_layer(middleware::from_fn(|r, n| needs(Scope::Read, r, n)));
    let send = Router::new()
        .route("/v1/tools/{name}/run", post(runtime::run_tool))
        .route("/v1/capsules/{name}/run", post(runtime::run_capsule))
        .route("/v1/agents/{name}/messages", post(agents::send))
        .route(
            "/v1/chat/completions",
            post(openai::chat).layer(DefaultBodyLimit::max(murmur_protocol::model::MODEL_OPEN_BYTES_MAX)),
        )
        .route_layer(middleware::from_fn(|r, n| needs(Scope::Send, r, n)));
    let admin = Router::new()
        .route("/v1/artifacts/pull", post(artifacts::pull))
        .route("/v1/revocations", post(revocations::publish))
        .route_layer(middleware::from_fn(|r, n| needs(Scope::Admin, r, n)));
    let guarded = read
        .merge(send)
        .merge(admin)
        .layer(DefaultBodyLimit::max(murmur_config::limits::A2A_REQUEST_BYTES_MAX))
        .route_layer(middleware::from_fn_with_state(state.clone(), admit));
    Router::new()
        .route("/healthz", get(healthz))
        .route("/ui", get(ui::index))
        .route("/ui/", get(ui::slash))
        .route("/ui/app.js", get(ui::script))
        .route("/ui/app.css", get(ui::style))
        .route("/.well-known/agent-card.json", get(cards::node_card))
        .route("/.well-known/agent.json", get(cards::node_card))
        .route("/a2a/.well-known/agent-card.json", get(cards::a2a_root_card))
        .route("/a2a/.well-known/agent.json", get(cards::a2a_root_card))
        .route("/a2a/{capsule}/.well-known/agent-card.json", get(cards::capsule_card))
        .merge(guarded)
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(state.clone(), guard::guard))
        .with_state(state)
}

/// `GET /v1/status`: the node at a glance.
async fn status(State(state): State<Arc<ApiState>>) -> Response {
    let (peers, capsules) = match tokio::try_join!(state.net.peers(), state.net.capsules()) {
        Ok(views) => views,
        Err(err) => return unavailable(&err),
    };
    let agents = state.brains.status();
    let mcp = state.mcp.status();
    let view = murmur_api::views::StatusView {
        peer_id: state.peer_id.clone(),
        version: crate::VERSION.into(),
        uptime_secs: state.started.elapsed().as_secs(),
        api: format!("http://{}", state.api_addr),
        listen_addrs: state.listen_addrs.clone(),
        peers_connected: peers.peers.iter().filter(|p| p.connected).count(),
        peers_known: peers.peers.iter().filter(|p| !p.connected).count(),
        peers_held_off: peers.peers.iter().filter(|p| p.held_ms.is_some()).count(),
        directory_nodes: 1 + peers.peers.iter().filter(|p| p.advert_seq.is_some()).count(),
        directory_capsules: capsules.capsules.len(),
        installed: state
            .runtime
            .installed()
            .iter()
            .map(|i| format!("{}@{} ({})", i.manifest.name, i.manifest.version, i.manifest.kind.as_str()))
            .collect(),
        agents_running: agents.iter().filter(|a| a.state == "running").count(),
        agents: agents.len(),
        mcp_up: mcp.iter().filter(|s| matches!(s.state, murmur_mcp::LinkState::Up { .. })).count(),
        mcp: mcp.len(),
        tasks: state.tasks.owned_by_state(),
        pulls: state.puller.active(),
    };
    Json(view).into_response()
}

/// `GET /v1/mcp`: the node's MCP servers and how each stands.
async fn mcp_servers(State(state): State<Arc<ApiState>>) -> Json<Vec<murmur_api::views::McpServerView>> {
    use murmur_mcp::LinkState;
    let views = state
        .mcp
        .status()
        .into_iter()
        .map(|s| {
            let (name, protocol, error, retry_in_secs) = match s.state {
                LinkState::Starting => ("starting", None, None, None),
                LinkState::Up { protocol } => ("up", Some(protocol), None, None),
                LinkState::Down { error, retry_at } => (
                    "down",
                    None,
                    Some(error),
                    Some(retry_at.saturating_duration_since(Instant::now()).as_secs()),
                ),
                LinkState::Stopped => ("stopped", None, None, None),
            };
            murmur_api::views::McpServerView {
                name: s.name,
                transport: s.transport.into(),
                state: name.into(),
                protocol,
                error,
                retry_in_secs,
                restarts: s.restarts,
                requests_ok: s.ok,
                requests_failed: s.failed,
            }
        })
        .collect();
    Json(views)
}

/// The client policy: loopback callers (by default) and holders of a configured token.
async fn admit(State(state): State<Arc<ApiState>>, mut request: Request, next: Next) -> Response {
    if let Some(client) = client_of(&state, &request) {
        request.extensions_mut().insert(client);
    } else {
        let peer = request.extensions().get::<ConnectInfo<SocketAddr>>().map(|c| c.0.ip());
        let bearer = bearer(&request);
        let message = if bearer.is_some() {
            "the bearer token is not one this node accepts"
        } else if peer.is_some_and(|ip| ip.is_loopback()) {
            "this node needs `Authorization: Bearer TOKEN` from every client, on this machine too (api.loopback_open = false; mur: --token-file PATH or MURMUR_TOKEN)"
        } else {
            "clients from other machines need `Authorization: Bearer TOKEN` (api.tokens in the node's config; mur: --token-file PATH or MURMUR_TOKEN)"
        };
        let mut response = error(StatusCode::UNAUTHORIZED, "unauthorized", message);
        response.headers_mut().insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static("Bearer"));
        return response;
    }
    next.run(request).await
}

/// Refuses a client without `scope` (403, naming what it holds and what it needs).
async fn needs(scope: Scope, request: Request, next: Next) -> Response {
    match request.extensions().get::<ApiClient>() {
        Some(client) if client.may(scope) => next.run(request).await,
        Some(client) => forbidden(client, scope),
        None => error(StatusCode::UNAUTHORIZED, "unauthorized", "no client"),
    }
}

/// The answer to a client whose token lacks `scope`.
pub(crate) fn forbidden(client: &ApiClient, scope: Scope) -> Response {
    error(
        StatusCode::FORBIDDEN,
        "forbidden",
        &format!(
            "client `{}` holds scope {}; this needs {} (api.tokens scopes in the node's config)",
            client.name,
            client.scope.as_str(),
            scope.as_str()
        ),
    )
}

/// `{"status": "ok"}` for anyone (a load balancer's probe); the node's identity and uptime
/// only for clients the policy admits.
async fn healthz(State(state): State<Arc<ApiState>>, request: Request) -> Response {
    // Draining (stopping): not ready for new work, so load balancers and Kubernetes'
    // readiness probe send it elsewhere.
    let (code, status) = if state.tasks.manager().is_draining() {
        (StatusCode::SERVICE_UNAVAILABLE, "draining")
    } else {
        (StatusCode::OK, "ok")
    };
    if !admitted(&state, &request) {
        return (code, Json(json!({ "status": status }))).into_response();
    }
    let body = json!({
        "status": status,
        "peer_id": state.peer_id,
        "uptime_secs": state.started.elapsed().as_secs(),
    });
    (code, Json(body)).into_response()
}

/// Whether the client policy admits `request`'s client.
fn admitted(state: &ApiState, request: &Request) -> bool {
    client_of(state, request).is_some()
}

/// `request`'s client, if the policy admits it.
fn client_of(state: &ApiState, request: &Request) -> Option<ApiClient> {
    // In-process callers (tests) have no socket address: they are this process.
    let peer = request.extensions().get::<ConnectInfo<SocketAddr>>().map(|c| c.0.ip());
    match peer {
        None => Some(ApiClient { name: "local".into(), scope: Scope::Admin }),
        Some(ip) => state.policy.client(ip, bearer(request)),
    }
}

fn bearer(request: &Request) -> Option<&str> {
    request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
        .map(str::trim)
}

async fn peers(State(state): State<Arc<ApiState>>) -> Response {
    match state.net.peers().await {
        Ok(view) => Json(view).into_response(),
        Err(err) => unavailable(&err),
    }
}

async fn capsules(State(state): State<Arc<ApiState>>) -> Response {
    match state.net.capsules().await {
        Ok(view) => Json(view).into_response(),
        Err(err) => unavailable(&err),
    }
}

async fn prometheus(State(state): State<Arc<ApiState>>) -> Response {
    match state.net.metrics().await {
        Ok(m) => {
            let text = metrics::render(
                &m,
                &state.brains.metrics(),
                &metrics::ModelFigures::of(&state),
                &state.mcp.status(),
                state.tasks.manager().writes_waited(),
            );
            ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
        }
        Err(err) => unavailable(&err),
    }
}

async fn not_found(method: Method, uri: Uri) -> Response {
    error(StatusCode::NOT_FOUND, "not_found", &format!("no route for {method} {}", uri.path()))
}

pub(crate) fn unavailable(err: &anyhow::Error) -> Response {
    error(StatusCode::SERVICE_UNAVAILABLE, "mesh_unavailable", &format!("{err:#}"))
}

/// An error response in the API's one error shape.
pub fn error(status: StatusCode, code: &str, message: &str) -> Response {
    (status, Json(json!({ "error": { "code": code, "message": message } }))).into_response()
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt;

    use super::*;
    use murmur_api::views::{CapsuleView, CapsulesView, PeersView};
    use murmur_net::Query;

    /// A state whose mesh is a stub task answering queries with fixed views.
    async fn state() -> Arc<ApiState> {
        let (tx, mut rx) = tokio::sync::mpsc::channel(4);
        tokio::spawn(async move {
            while let Some(query) = rx.recv().await {
                match query {
                    Query::Peers(reply) => {
                        let _ = reply.send(PeersView { local_peer_id: "me".into(), peers: vec![] });
                    }
                    Query::Capsules(reply) => {
                        let _ = reply.send(CapsulesView {
                            capsules: vec![CapsuleView { name: "echo".into(), providers: vec![] }],
                        });
                    }
                    Query::Metrics(reply) => {
                        let _ = reply.send(murmur_net::NetMetrics::default());
                    }
                    Query::SetHosted(_, reply) => {
                        let _ = reply.send(());
                    }
                    Query::Revoke(_, reply) => {
                        let _ = reply.send(Err(murmur_protocol::revocation::RevocationRefusal::Full));
                    }
                }
            }
        });
        // The directory lives for the rest of the test process (a few KiB in /tmp).
        let dir = tempfile::tempdir().unwrap().keep();
        let store = Arc::new(murmur_store::ArtifactStore::open(&dir.join("store")).unwrap());
        let runtime = Runtime::new(
            murmur_runtime::RuntimeOptions::new(dir.clone(), false),
            store,
            murmur_runtime::ports::Ports::standalone().unwrap(),
        )
        .unwrap();
        let manager = crate::tasks::TaskManager::open(&dir.join("tasks.redb")).await.unwrap();
        let net = NetHandle::for_tests(tx);
        let net_for_models = net.clone();
        Arc::new(ApiState {
            peer_id: "12D3KooWtest".into(),
            api_addr: "127.0.0.1:7420".parse().unwrap(),
            started: Instant::now(),
            listen_addrs: Vec::new(),
            tasks: TaskService::new(manager, net.clone()),
            puller: crate::artifacts::Puller::new(
                net.clone(),
                runtime.store().clone(),
                vec![],
                crate::artifacts::Advertiser::new(net.clone(), runtime.store().clone()),
            ),
            install: artifacts::InstallTarget::new(&dir, &dir.join("capsules"), vec![]),
            brains: murmur_brain::Brains::start(
                vec![],
                runtime.clone(),
                runtime.store().clone(),
                &dir.join("brains.redb"),
                &dir.join("agents"),
                Arc::new(murmur_brain::NoMesh),
                Arc::new(murmur_brain::NoMcp),
            )
            .unwrap(),
            net,
            runtime,
            policy: ClientPolicy {
                loopback_open: true,
                origins: vec!["https://dash.example".into()],
                ..ClientPolicy::default()
            },
            streams: AtomicUsize::new(0),
            models: crate::models::ModelRouter::new(net_for_models),
            upstreams: Arc::new(
                crate::upstream::Upstreams::new(Default::default(), Default::default()).unwrap(),
            ),
            mcp: Arc::default(),
            completions: AtomicUsize::new(0),
            completions_max: 2048,
            tokens: Default::default(),
        })
    }

    async fn get(uri: &str) -> (StatusCode, String) {
        let response =
            app(state().await).oneshot(Request::get(uri).body(Body::empty()).unwrap()).await.unwrap();
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
        (status, String::from_utf8(bytes.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn healthz_reports_ok_and_the_peer_id() {
        let (status, body) = get("/healthz").await;
        let body: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(status, StatusCode::OK);
        assert_eq!((body["status"].as_str(), body["peer_id"].as_str()), (Some("ok"), Some("12D3KooWtest")));
    }

    #[tokio::test]
    async fn peers_and_capsules_are_json_views() {
        let (status, body) = get("/v1/capsules").await;
        assert_eq!(status, StatusCode::OK);
        let view: CapsulesView = serde_json::from_str(&body).unwrap();
        assert_eq!(view.capsules[0].name, "echo");
        let (_, body) = get("/v1/peers").await;
        assert_eq!(serde_json::from_str::<PeersView>(&body).unwrap().local_peer_id, "me");
    }

    #[tokio::test]
    async fn metrics_are_prometheus_text() {
        let (status, body) = get("/metrics").await;
        assert_eq!(status, StatusCode::OK);
        assert!(body.contains("# TYPE murmur_peers_connected gauge"), "{body}");
        assert!(body.contains("murmur_adverts_refused_total{reason=\"bad_signature\"} 0"), "{body}");
    }

    #[tokio::test]
    async fn running_an_unknown_tool_is_a_404_in_the_error_shape() {
        let response = app(state().await)
            .oneshot(
                Request::post("/v1/tools/nope/run")
                    .header("content-type", "application/json")
                    .body(Body::from(r#"{"data":"x"}"#))
                    .unwrap(),
            )
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::NOT_FOUND);
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
        let body: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(body["error"]["message"], "no capsule or tool named `nope` runs on this node");
        let (status, body) = get("/v1/runtime/capsules").await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "[]"));
    }

    /// Sends `request` to a fresh app; the status and the parsed error code.
    async fn send(request: Request<Body>) -> (StatusCode, String, axum::http::HeaderMap) {
        let response = app(state().await).oneshot(request).await.unwrap();
        let (status, headers) = (response.status(), response.headers().clone());
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
        let code = serde_json::from_slice::<serde_json::Value>(&bytes)
            .ok()
            .and_then(|v| v["error"]["code"].as_str().map(str::to_owned))
            .unwrap_or_default();
        (status, code, headers)
    }

    #[tokio::test]
    async fn pages_of_other_sites_and_rebound_names_are_kept_out() {
        let rpc = r#"{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":{}}"#;
        // What a page can send without asking: a text/plain POST (no preflight).
        let simple = Request::post("/")
            .header("host", "127.0.0.1:7420")
            .header("content-type", "text/plain")
            .body(Body::from(rpc))
            .unwrap();
        assert_eq!(send(simple).await.0, StatusCode::UNSUPPORTED_MEDIA_TYPE);
        // A page of another origin, even with JSON (a browser sends its Origin).
        let cross = Request::post("/")
            .header("host", "127.0.0.1:7420")
            .header("origin", "https://evil.example")
            .header("content-type", "application/json")
            .body(Body::from(rpc))
            .unwrap();
        let (status, code, _) = send(cross).await;
        assert_eq!((status, code.as_str()), (StatusCode::FORBIDDEN, "origin_not_allowed"));
        // DNS rebinding: the page's own name, now pointing at 127.0.0.1, as Host.
        let rebound =
            Request::get("/v1/peers").header("host", "evil.example:7420").body(Body::empty()).unwrap();
        let (status, code, _) = send(rebound).await;
        assert_eq!((status, code.as_str()), (StatusCode::FORBIDDEN, "host_not_allowed"));
        let card = Request::get("/.well-known/agent-card.json")
            .header("host", "evil.example")
            .body(Body::empty())
            .unwrap();
        assert_eq!(send(card).await.0, StatusCode::FORBIDDEN, "open routes are guarded too");
        // A preflight from an unlisted origin is refused; a listed one is answered.
        let preflight = |origin: &str| {
            Request::options("/")
                .header("host", "127.0.0.1:7420")
                .header("origin", origin)
                .body(Body::empty())
                .unwrap()
        };
        assert_eq!(send(preflight("https://evil.example")).await.0, StatusCode::FORBIDDEN);
        let (status, _, headers) = send(preflight("https://dash.example")).await;
        assert_eq!(status, StatusCode::NO_CONTENT);
        assert_eq!(headers["access-control-allow-origin"], "https://dash.example");
        // The node's own pages, and clients that are not browsers, pass.
        let own = Request::get("/v1/peers")
            .header("host", "127.0.0.1:7420")
            .header("origin", "http://127.0.0.1:7420")
            .body(Body::empty())
            .unwrap();
        assert_eq!(send(own).await.0, StatusCode::OK);
        let listed = Request::get("/v1/peers")
            .header("host", "127.0.0.1:7420")
            .header("origin", "https://dash.example")
            .body(Body::empty())
            .unwrap();
        let (status, _, headers) = send(listed).await;
        assert_eq!(
            (status, headers["access-control-allow-origin"].to_str().unwrap()),
            (StatusCode::OK, "https://dash.example")
        );
        let cli = Request::get("/v1/peers").header("host", "localhost:7420").body(Body::empty()).unwrap();
        assert_eq!(send(cli).await.0, StatusCode::OK);
    }

    #[tokio::test]
    async fn cards_name_the_configured_address_never_the_requests_host() {
        let card = |host: &str| {
            Request::get("/.well-known/agent-card.json").header("host", host).body(Body::empty()).unwrap()
        };
        let read = |response: Response| async move {
            let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
            serde_json::from_slice::<serde_json::Value>(&bytes).unwrap()["url"].as_str().unwrap().to_owned()
        };
        let response = app(state().await).oneshot(card("localhost:9999")).await.unwrap();
        assert_eq!(read(response).await, "http://127.0.0.1:7420/", "from the listen address");
        let mut configured = state().await;
        Arc::get_mut(&mut configured).unwrap().policy.public_url = Some("https://node1.example:7420".into());
        let response = app(configured).oneshot(card("10.1.2.3:7420")).await.unwrap();
        assert_eq!(read(response).await, "https://node1.example:7420/", "from api.public_url");
    }

    #[tokio::test]
    async fn a_capsule_url_without_its_slash_still_finds_a_card() {
        // `.well-known/agent-card.json` resolved against `…/a2a/wordcount` (RFC 3986, as
        // `new URL(path, base)` does) loses the capsule's segment.
        let resolved = "/a2a/.well-known/agent-card.json";
        let request = Request::get(resolved).header("host", "127.0.0.1:7420").body(Body::empty()).unwrap();
        let response = app(state().await).oneshot(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
        let card: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(card["url"], "http://127.0.0.1:7420/a2a", "calls go where a tenant is read");
        assert_eq!(card["supportedInterfaces"][0]["url"], "http://127.0.0.1:7420/a2a");
    }

    #[tokio::test]
    async fn anonymous_health_checks_learn_only_that_the_node_is_up() {
        let from = |ip: [u8; 4]| {
            Request::get("/healthz")
                .header("host", "127.0.0.1:7420")
                .extension(ConnectInfo(SocketAddr::from((ip, 40000))))
                .body(Body::empty())
                .unwrap()
        };
        let body = |response: Response| async move {
            let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
            serde_json::from_slice::<serde_json::Value>(&bytes).unwrap()
        };
        let anonymous = body(app(state().await).oneshot(from([192, 0, 2, 7])).await.unwrap()).await;
        assert_eq!(anonymous, json!({ "status": "ok" }));
        let local = body(app(state().await).oneshot(from([127, 0, 0, 1])).await.unwrap()).await;
        assert_eq!(local["peer_id"], "12D3KooWtest");
    }

    #[tokio::test]
    async fn unknown_routes_get_the_error_shape() {
        let (status, body) = get("/nope").await;
        let body: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert_eq!(body["error"]["code"], "not_found");
        assert_eq!(body["error"]["message"], "no route for GET /nope");
    }
}
