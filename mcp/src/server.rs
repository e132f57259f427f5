//! One configured MCP server: its supervisor (connect, health-check, restart with
//! back-off, stop) and the requests brains make of it.
//!
//! Sessions start with MCP's `initialize` handshake, which every server version speaks
//! (a 2026-07-28 server answers it as 2025-11-25); changes then come as notifications
//! to the connection's [`Handler`], after `resources/subscribe` for single resources.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use murmur_config::limits::{MCP_ANSWER_BYTES_MAX, MCP_REQUESTS_MAX, MCP_RESOURCES_MAX};
use murmur_config::{Credential, McpEntry, McpTransport};
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, ClientRequest, ContentBlock,
    Implementation, JsonObject, PaginatedRequestParams, PingRequest, ReadResourceRequestParams,
    ResourceContents, ResourceUpdatedNotificationParam,
};
use rmcp::service::{NotificationContext, Peer, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{ConfigureCommandExt, StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, RoleClient, ServiceError, ServiceExt};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::{Semaphore, broadcast, watch};
use tracing::{info, warn};

use crate::{ResourceContent, ResourceInfo};

/// The first wait after a failure; it doubles up to [`BACKOFF_MAX`].
const BACKOFF_MIN: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(60);
/// A connection up this long was healthy: the next failure waits [`BACKOFF_MIN`] again.
const HEALTHY_AFTER: Duration = Duration::from_secs(60);
/// How often a live connection is pinged, and how long the answer may take.
const PING_EVERY: Duration = Duration::from_secs(15);
const PING_TIMEOUT: Duration = Duration::from_secs(10);
/// How long starting a server and its handshake may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// Bytes of one stderr line that reach the node's log.
const STDERR_LINE_MAX: usize = 4096;
/// Changes buffered for a server's watches; a watch that falls behind re-reads.
const CHANGES_MAX: usize = 256;
/// Pages of a resource list read before the list is refused as too long.
const LIST_PAGES_MAX: usize = 64;
/// Environment a stdio server gets from the node besides its own `env`: enough to run a
/// program, never the node's secrets (`env:` keys of providers live there).
const PASSED_ENV: [&str; 6] = ["PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "TZ"];

/// Where a server's connection stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LinkState {
    Starting,
    /// Connected, speaking `protocol`.
    Up {
        protocol: String,
    },
    /// Not connected: why, and when the next attempt starts.
    Down {
        error: String,
        retry_at: Instant,
    },
    Stopped,
}

/// One server as the API and metrics show it.
#[derive(Clone, Debug)]
pub struct ServerStatus {
    pub name: String,
    /// `stdio` or `http`.
    pub transport: &'static str,
    pub state: LinkState,
    /// Times the supervisor started the server again after a failure.
    pub restarts: u64,
    /// Requests answered, and failed (errors, timeouts, tools that reported an error).
    pub ok: u64,
    pub failed: u64,
}

/// A change a server notified.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Change {
    ListChanged,
    Updated(String),
}

/// The connection now.
#[derive(Clone)]
pub(crate) struct Connection {
    pub(crate) peer: Peer<RoleClient>,
    /// Counts connections: a watch that saw generation N knows N+1 is a new one.
    pub(crate) generation: u64,
}

type Link = (LinkState, Option<Connection>);

/// One configured MCP server.
pub struct Server {
    entry: McpEntry,
    credentials: BTreeMap<String, Credential>,
    workdir: PathBuf,
    link: watch::Sender<Link>,
    pub(crate) changes: broadcast::Sender<Change>,
    requests: Semaphore,
    restarts: AtomicU64,
    ok: AtomicU64,
    failed: AtomicU64,
    stop: watch::Sender<bool>,
    supervisor: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server").field("name", &self.entry.name).finish_non_exhaustive()
    }
}

impl Server {
    pub(crate) fn start(
        entry: McpEntry,
        credentials: BTreeMap<String, Credential>,
        workdir: &Path,
    ) -> Arc<Self> {
        let server = Arc::new(Self {
            entry,
            credentials,
            workdir: workdir.to_path_buf(),
            link: watch::channel((LinkState::Starting, None)).0,
            changes: broadcast::channel(CHANGES_MAX).0,
            requests: Semaphore::new(MCP_REQUESTS_MAX),
            restarts: AtomicU64::new(0),
            ok: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            stop: watch::channel(false).0,
            supervisor: Mutex::new(None),
        });
        let task = tokio::spawn(supervise(server.clone()));
        *server.supervisor.lock().unwrap_or_else(PoisonError::into_inner) = Some(task);
        server
    }

    #[must_use]
    pub fn name(&self) -> &str {
        &self.entry.name
    }

    #[must_use]
    pub fn status(&self) -> ServerStatus {
        ServerStatus {
            name: self.entry.name.clone(),
            transport: match self.entry.transport {
                McpTransport::Stdio { .. } => "stdio",
                McpTransport::Http { .. } => "http",
            },
            state: self.link.borrow().0.clone(),
            restarts: self.restarts.load(Ordering::Relaxed),
            ok: self.ok.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
        }
    }

    /// Stops the server and waits for its supervisor to end.
    pub async fn stop(&self) {
        self.stop.send_replace(true);
        let task = self.supervisor.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(task) = task {
            let _ = task.await;
        }
    }

    /// The connection, waiting while the server starts; an error saying why there is none.
    pub(crate) async fn connected(&self) -> Result<Connection, String> {
        let mut link = self.link.subscribe();
        let name = &self.entry.name;
        let current = link
            .wait_for(|(state, _)| *state != LinkState::Starting)
            .await
            .map_err(|_| format!("MCP server `{name}` was stopped"))?;
        match &*current {
            (_, Some(connection)) => Ok(connection.clone()),
            (LinkState::Down { error, retry_at }, None) => {
                let wait = retry_at.saturating_duration_since(Instant::now()).as_secs();
                Err(format!("MCP server `{name}` is down ({error}); the node tries again in {wait} s"))
            }
            _ => Err(format!("MCP server `{name}` was stopped")),
        }
    }

    /// The connection once there is one (waiting through back-offs); none once stopped.
    pub(crate) async fn up(&self) -> Option<Connection> {
        let mut link = self.link.subscribe();
        let current = link.wait_for(|(state, c)| c.is_some() || *state == LinkState::Stopped).await.ok()?;
        current.1.clone()
    }

    /// Waits until the connection is no longer generation `generation` (or the server
    /// stopped).
    pub(crate) async fn replaced(&self, generation: u64) {
        let mut link = self.link.subscribe();
        let _ = link.wait_for(|(_, c)| c.as_ref().is_none_or(|c| c.generation != generation)).await;
    }

    /// Runs `request` on the connection, bounded by the server's timeout and its share of
    /// requests in flight, counted.
    async fn request<T, F>(&self, what: &str, request: impl FnOnce(Connection) -> F) -> Result<T, String>
    where
        F: Future<Output = Result<T, String>>,
    {
        let name = &self.entry.name;
        let work = async {
            let connection = self.connected().await?;
            let _turn =
                self.requests.acquire().await.map_err(|_| format!("MCP server `{name}` was stopped"))?;
            request(connection).await
        };
        let timeout = self.entry.timeout;
        let outcome = tokio::time::timeout(timeout, work).await.unwrap_or_else(|_| {
            Err(format!("MCP server `{name}`: {what} got no answer within {} s", timeout.as_secs()))
        });
        let counter = if outcome.is_ok() { &self.ok } else { &self.failed };
        counter.fetch_add(1, Ordering::Relaxed);
        outcome
    }

    /// Calls tool `tool` with `arguments`: its text (every text content, joined by
    /// newlines; other contents described), or the error it reported.
    pub async fn call_tool(&self, tool: &str, arguments: JsonObject) -> Result<String, String> {
        let name = self.entry.name.clone();
        self.request(&format!("tool `{tool}`"), |connection| async move {
            let params = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments);
            let result = connection.peer.call_tool(params).await.map_err(|e| failed(&name, tool, &e))?;
            let text = tool_text(&result);
            bounded(&format!("the result of tool `{tool}`"), &text)?;
            if result.is_error == Some(true) {
                return Err(format!("tool `{tool}` of MCP server `{name}` reported an error: {text}"));
            }
            Ok(text)
        })
        .await
    }

    /// The server's resources, every page.
    pub async fn resources(&self) -> Result<Vec<ResourceInfo>, String> {
        let name = self.entry.name.clone();
        self.request("resources/list", |connection| async move {
            let (mut all, mut cursor) = (Vec::new(), None);
            for _ in 0..LIST_PAGES_MAX {
                let params = PaginatedRequestParams::default().with_cursor(cursor);
                let page = connection
                    .peer
                    .list_resources(Some(params))
                    .await
                    .map_err(|e| format!("MCP server `{name}`: resources/list: {e}"))?;
                all.extend(page.resources.into_iter().map(|r| ResourceInfo {
                    uri: r.uri.clone(),
                    name: r.name.clone(),
                    mime_type: r.mime_type.clone(),
                    description: r.description.clone(),
                }));
                if all.len() > MCP_RESOURCES_MAX {
                    return Err(format!("MCP server `{name}` lists more than {MCP_RESOURCES_MAX} resources"));
                }
                cursor = page.next_cursor;
                if cursor.is_none() {
                    return Ok(all);
                }
            }
            Err(format!("MCP server `{name}` lists its resources over more than {LIST_PAGES_MAX} pages"))
        })
        .await
    }

    /// Resource `uri`, read now.
    pub async fn read(&self, uri: &str) -> Result<ResourceContent, String> {
        let name = self.entry.name.clone();
        self.request(&format!("resources/read of `{uri}`"), |connection| async move {
            let result = connection
                .peer
                .read_resource(ReadResourceRequestParams::new(uri))
                .await
                .map_err(|e| format!("MCP server `{name}`: resources/read of `{uri}`: {e}"))?;
            let Some(first) = result.contents.into_iter().next() else {
                return Err(format!("MCP server `{name}` read `{uri}` as nothing"));
            };
            let content =
                resource_content(uri, first).map_err(|e| format!("MCP server `{name}` read `{uri}`: {e}"))?;
            bounded(&format!("resource `{uri}`"), &content.content)?;
            Ok(content)
        })
        .await
    }

    /// Asks the server to notify changes of `uri` on `connection` (`resources/subscribe`).
    pub(crate) async fn subscribe(&self, connection: &Connection, uri: &str) -> Result<(), String> {
        #[allow(deprecated)] // the handshake this client uses subscribes this way
        let asked = connection.peer.subscribe(rmcp::model::SubscribeRequestParams::new(uri));
        tokio::time::timeout(self.entry.timeout, asked)
            .await
            .map_err(|_| format!("resources/subscribe of `{uri}` got no answer"))?
            .map_err(|e| format!("MCP server `{}` cannot subscribe to `{uri}`: {e}", self.entry.name))
    }

    /// Connects once: the running service, or why it failed.
    async fn connect(&self, generation: u64) -> Result<RunningService<RoleClient, Handler>, String> {
        let handler = Handler { changes: self.changes.clone() };
        let running = match &self.entry.transport {
            McpTransport::Stdio { command, args, env } => {
                let passed: Vec<(&str, String)> =
                    PASSED_ENV.iter().filter_map(|k| Some((*k, std::env::var(k).ok()?))).collect();
                let command_line = tokio::process::Command::new(command).configure(|c| {
                    c.args(args)
                        .env_clear()
                        .envs(passed)
                        .envs(env)
                        .current_dir(&self.workdir)
                        .kill_on_drop(true);
                });
                let (transport, stderr) = TokioChildProcess::builder(command_line)
                    .stderr(Stdio::piped())
                    .spawn()
                    .map_err(|e| format!("cannot start `{}`: {e}", command.display()))?;
                if let Some(stderr) = stderr {
                    tokio::spawn(log_stderr(self.entry.name.clone(), generation, stderr));
                }
                tokio::time::timeout(CONNECT_TIMEOUT, handler.serve(transport)).await
            }
            McpTransport::Http { url, api_key } => {
                let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
                if let Some(source) = api_key {
                    config = config.auth_header(source.read(&self.credentials)?);
                }
                let transport = StreamableHttpClientTransport::from_config(config);
                tokio::time::timeout(CONNECT_TIMEOUT, handler.serve(transport)).await
            }
        };
        let running = running
            .map_err(|_| format!("no MCP handshake within {} s", CONNECT_TIMEOUT.as_secs()))?
            .map_err(|e| format!("the MCP handshake failed: {e}"))?;
        // Answers are read fresh: a cached list served when the server fails would hide it.
        running.peer().set_response_cache_config(rmcp::ClientCacheConfig::disabled()).await;
        Ok(running)
    }
}

/// Keeps `server` connected until it is stopped.
async fn supervise(server: Arc<Server>) {
    let name = server.entry.name.clone();
    let mut stop = server.stop.subscribe();
    let (mut backoff, mut generation) = (BACKOFF_MIN, 0u64);
    loop {
        generation += 1;
        server.link.send_replace((LinkState::Starting, None));
        let connected = tokio::select! {
            connected = server.connect(generation) => connected,
            () = until_stopped(&mut stop) => break,
        };
        let error = match connected {
            Ok(running) => {
                let protocol =
                    running.peer().peer_info().map(|i| i.protocol_version.to_string()).unwrap_or_default();
                info!(server = %name, %protocol, "MCP server up");
                let connection = Connection { peer: running.peer().clone(), generation };
                server.link.send_replace((LinkState::Up { protocol }, Some(connection)));
                let up = Instant::now();
                let Some(why) = keep_alive(running, &mut stop).await else { break };
                if up.elapsed() >= HEALTHY_AFTER {
                    backoff = BACKOFF_MIN;
                }
                why
            }
            Err(error) => error,
        };
        server.restarts.fetch_add(1, Ordering::Relaxed);
        let retry_at = Instant::now() + backoff;
        warn!(server = %name, %error, retry_in_secs = backoff.as_secs(), "MCP server down; restarting it after a back-off");
        server.link.send_replace((LinkState::Down { error, retry_at }, None));
        tokio::select! {
            () = tokio::time::sleep(backoff) => {}
            () = until_stopped(&mut stop) => break,
        }
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
    server.link.send_replace((LinkState::Stopped, None));
    info!(server = %name, "MCP server stopped");
}

async fn until_stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|stopped| *stopped).await;
}

/// Holds a live connection, pinging it; why it ended, or none when the node stopped it
/// (then it was cancelled and its process ended).
async fn keep_alive(
    running: RunningService<RoleClient, Handler>,
    stop: &mut watch::Receiver<bool>,
) -> Option<String> {
    let peer = running.peer().clone();
    let cancel = running.cancellation_token();
    let ended = running.waiting();
    tokio::pin!(ended);
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + PING_EVERY, PING_EVERY);
    loop {
        tokio::select! {
            reason = &mut ended => return Some(format!("the connection ended ({reason:?})")),
            () = until_stopped(stop) => {
                cancel.cancel();
                let _ = ended.await;
                return None;
            }
            _ = tick.tick() => {
                let ping = peer.send_request(ClientRequest::PingRequest(PingRequest::default()));
                match tokio::time::timeout(PING_TIMEOUT, ping).await {
                    // An error answer is an answer: 2026-07-28 servers refuse `ping` itself.
                    Ok(Ok(_) | Err(ServiceError::McpError(_))) => {}
                    Ok(Err(error)) => {
                        cancel.cancel();
                        let _ = ended.await;
                        return Some(format!("a ping failed: {error}"));
                    }
                    Err(_) => {
                        cancel.cancel();
                        let _ = ended.await;
                        return Some(format!("no answer to a ping within {} s", PING_TIMEOUT.as_secs()));
                    }
                }
            }
        }
    }
}

/// Forwards a stdio server's stderr to the node's log, a line at a time.
async fn log_stderr(server: String, generation: u64, stderr: tokio::process::ChildStderr) {
    let mut lines = BufReader::new(stderr).lines();
    loop {
        match lines.next_line().await {
            Ok(Some(mut line)) => {
                if line.len() > STDERR_LINE_MAX {
                    let cut = (0..=STDERR_LINE_MAX).rev().find(|i| line.is_char_boundary(*i)).unwrap_or(0);
                    line.truncate(cut);
                    line.push('…');
                }
                info!(target: "murmur::mcp::stderr", server = %server, run = generation, "{line}");
            }
            Ok(None) => return,
            // Not UTF-8: the rest is dropped, the server goes on.
            Err(error) => {
                warn!(server = %server, %error, "MCP server stderr is not text; no longer forwarded");
                return;
            }
        }
    }
}

/// The client side of one connection: notifications become [`Change`]s.
#[derive(Clone)]
pub(crate) struct Handler {
    changes: broadcast::Sender<Change>,
}

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("murnode", env!("CARGO_PKG_VERSION")),
        )
    }

    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _: NotificationContext<RoleClient>,
    ) {
        // No watch listening is fine: nothing to tell.
        let _ = self.changes.send(Change::Updated(params.uri));
    }

    async fn on_resource_list_changed(&self, _: NotificationContext<RoleClient>) {
        let _ = self.changes.send(Change::ListChanged);
    }
}

fn failed(server: &str, tool: &str, error: &ServiceError) -> String {
    format!("MCP server `{server}`: tool `{tool}`: {error}")
}

fn bounded(what: &str, text: &str) -> Result<(), String> {
    if text.len() > MCP_ANSWER_BYTES_MAX {
        return Err(format!(
            "{what} is {} bytes, more than the {MCP_ANSWER_BYTES_MAX} a brain is given",
            text.len()
        ));
    }
    Ok(())
}

/// A tool result as text: its text contents joined by newlines, other contents named;
/// structured content when there is no text.
fn tool_text(result: &CallToolResult) -> String {
    let parts: Vec<String> = result
        .content
        .iter()
        .map(|block| match block {
            ContentBlock::Text(text) => text.text.clone(),
            ContentBlock::Image(image) => {
                format!("[image {}, {} bytes of base64]", image.mime_type, image.data.len())
            }
            ContentBlock::Audio(audio) => format!("[audio {}]", audio.mime_type),
            ContentBlock::Resource(embedded) => match &embedded.resource {
                ResourceContents::TextResourceContents { text, .. } => text.clone(),
                ResourceContents::BlobResourceContents { uri, blob, .. } => {
                    format!("[resource {uri}, {} bytes of base64]", blob.len())
                }
                _ => "[a resource of a kind this node does not know]".to_owned(),
            },
            ContentBlock::ResourceLink(link) => format!("[resource {}]", link.uri),
            _ => "[content of a kind this node does not know]".to_owned(),
        })
        .collect();
    match (&result.structured_content, parts.is_empty()) {
        (Some(structured), true) => structured.to_string(),
        _ => parts.join("\n"),
    }
}

/// Whether content of `mime` is text a brain reads as it is.
fn textual(mime: Option<&str>) -> bool {
    let Some(mime) = mime else { return false };
    let essence = mime.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
    essence.starts_with("text/")
        || essence.ends_with("+json")
        || essence.ends_with("+xml")
        || [
            "application/json",
            "application/xml",
            "application/javascript",
            "application/toml",
            "application/yaml",
        ]
        .contains(&essence.as_str())
}

/// One read resource as a brain gets it: text stays text; a blob stays base64 (checked),
/// unless its type is textual and it decodes as UTF-8.
fn resource_content(uri: &str, contents: ResourceContents) -> Result<ResourceContent, String> {
    use base64::Engine as _;
    match contents {
        ResourceContents::TextResourceContents { mime_type, text, .. } => {
            Ok(ResourceContent { uri: uri.to_owned(), mime_type, content: text })
        }
        ResourceContents::BlobResourceContents { mime_type, blob, .. } => {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(&blob)
                .map_err(|e| format!("its blob is not standard padded base64: {e}"))?;
            let content = match String::from_utf8(bytes) {
                Ok(text) if textual(mime_type.as_deref()) => text,
                _ => blob,
            };
            Ok(ResourceContent { uri: uri.to_owned(), mime_type, content })
        }
        _ => Err("its contents are of a kind this node does not know".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn textual_types_are_read_as_text_and_the_rest_stays_base64() {
        let blob = |mime: &str, bytes: &[u8]| {
            use base64::Engine as _;
            let blob = base64::engine::general_purpose::STANDARD.encode(bytes);
            let contents = ResourceContents::BlobResourceContents {
                uri: "mem://x".into(),
                mime_type: Some(mime.into()),
                blob,
                meta: None,
            };
            resource_content("mem://x", contents).map(|c| c.content)
        };
        assert_eq!(blob("text/plain; charset=utf-8", b"hi").unwrap(), "hi");
        assert_eq!(blob("application/vnd.api+json", b"{}").unwrap(), "{}");
        assert_eq!(blob("application/octet-stream", &[0, 1, 2, 255]).unwrap(), "AAEC/w==");
        // Textual in name but not UTF-8: it stays base64 rather than being mangled.
        assert_eq!(blob("text/plain", &[0xff, 0xfe]).unwrap(), "//4=");
        let bad = ResourceContents::BlobResourceContents {
            uri: "mem://x".into(),
            mime_type: None,
            blob: "not base64!".into(),
            meta: None,
        };
        assert!(resource_content("mem://x", bad).unwrap_err().contains("not standard padded base64"));
    }

    #[test]
    fn a_tool_result_reads_as_its_text() {
        let result = CallToolResult::success(vec![ContentBlock::text("one"), ContentBlock::text("two")]);
        assert_eq!(tool_text(&result), "one\ntwo");
    }
}
