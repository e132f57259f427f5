//! `murnode`'s configuration: a TOML file in the data directory, validated into [`Config`].
//!
//! [`RawConfig`] mirrors the file (unknown keys are errors); [`Config::from_raw`] checks
//! every rule and reports every broken one, each naming its key. Flags and `MURNODE_*`
//! environment variables are applied on top by the caller (flag > env > file > default).
//! The commented default file is `deploy/murnode.toml`; `murnode init` writes it.
//!
//! This crate owns the node's configuration, every bound of the daemon ([`limits`]) and the
//! wall clock and duration syntax config and flags share ([`clock`]). It must not know how
//! the node runs: it parses addresses with the `multiaddr` and `libp2p-identity` types
//! libp2p uses, without libp2p itself, so `mur` can read a node's config (its trusted
//! publishers) without building the network stack.
//!
//! ```
//! let raw = murmur_config::RawConfig::parse("[api]\nlisten = \"127.0.0.1:0\"\n").unwrap();
//! let config = murmur_config::Config::from_raw(&raw, std::path::Path::new("data")).unwrap();
//! assert_eq!(config.api_listen.ip().to_string(), "127.0.0.1");
//! ```

pub mod clock;
pub mod limits;

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use libp2p_identity::PeerId;
use multiaddr::{Multiaddr, Protocol};
use murmur_protocol::advert::HostedCapsule;
use murmur_protocol::limits::{ADVERT_CAPSULES_MAX, ADVERT_TTL_MS_MAX, ADVERT_TTL_MS_MIN};
use murmur_protocol::names::{check_capsule_name, check_version};
use murmur_protocol::{Digest, PublicKey};
use serde::Deserialize;

/// The commented default configuration, as `murnode init` writes it.
pub const DEFAULT_CONFIG_TOML: &str = include_str!("../../deploy/murnode.toml");

/// File name of the configuration inside the data directory.
pub const CONFIG_FILE: &str = "murnode.toml";

/// Default admin API address: loopback only.
pub const DEFAULT_API_LISTEN: &str = "127.0.0.1:7420";

/// Default libp2p port, TCP and UDP (QUIC).
pub const DEFAULT_P2P_PORT: u16 = 7421;

use crate::limits::{API_TOKENS_MAX, LISTEN_ADDRS_MAX, PINS_MAX};
/// Most bootstrap peers (the mesh keeps no more): each is dialled at start, and again
/// while it is not connected.
pub use murmur_protocol::limits::BOOTSTRAP_PEERS_MAX;

/// The file as written. Every field has a default, so an empty file is valid.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawConfig {
    pub api: RawApi,
    pub network: RawNetwork,
    pub adverts: RawAdverts,
    pub trust: RawTrust,
    pub runtime: RawRuntime,
    pub capsules: Vec<RawCapsule>,
    pub pins: Vec<RawPin>,
    /// `[credentials]`: `KEY = "VALUE"` or `KEY = { file = "PATH" }`.
    pub credentials: std::collections::BTreeMap<String, RawCredential>,
    /// `[[agents]]`: the long-running brains this node runs.
    pub agents: Vec<RawAgent>,
    /// `[[mcp]]`: MCP servers this node runs (stdio) or reaches (HTTP) for its agents.
    pub mcp: Vec<RawMcpServer>,
    /// `[tasks]`: how long finished tasks and routes stay on disk.
    pub tasks: RawTasks,
}

/// `[tasks]` as written.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawTasks {
    /// Finished tasks (and routes to other nodes' tasks) are kept this many days...
    pub keep_days: u64,
    /// ...and at most this many of each; the oldest go first.
    pub keep_max: usize,
    /// At SIGTERM, how long the node waits for the tasks it runs and has queued to end
    /// before it stops (it takes no new ones meanwhile); 0 stops at once.
    pub drain_secs: u64,
    /// Finished tasks held in memory, newest finish first (3.5 to 5 KB each); older ones
    /// are answered from the task database.
    pub finished_in_memory: usize,
}

impl Default for RawTasks {
    fn default() -> Self {
        Self {
            keep_days: 7,
            keep_max: 1_000_000,
            drain_secs: 15,
            finished_in_memory: limits::TASKS_FINISHED_IN_MEMORY,
        }
    }
}

/// One `[[mcp]]` entry as written: a program the node starts and speaks MCP with over its
/// stdin and stdout (`command`, `args`, `env`), or a streamable HTTP endpoint (`url`,
/// `api_key`).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMcpServer {
    pub name: String,
    pub command: Option<String>,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: std::collections::BTreeMap<String, String>,
    pub url: Option<String>,
    /// For `url`: `env:VARIABLE` or `config:KEY`, sent as `Authorization: Bearer`.
    pub api_key: Option<String>,
    /// How long one request (a tool call, a read) may take.
    #[serde(default = "default_mcp_timeout_secs")]
    pub timeout_secs: u64,
}

/// A validated `[[mcp]]` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct McpEntry {
    /// 1 to 64 letters, digits and `-_.`.
    pub name: String,
    pub transport: McpTransport,
    pub timeout: Duration,
}

/// How the node reaches an MCP server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum McpTransport {
    /// A child process: `command` (a path relative to the data directory when it has a
    /// `/`, else looked up on `PATH`), its arguments and extra environment; its working
    /// directory is the data directory.
    Stdio { command: PathBuf, args: Vec<String>, env: std::collections::BTreeMap<String, String> },
    /// A streamable HTTP endpoint.
    Http { url: String, api_key: Option<KeySource> },
}

/// One `[[agents]]` entry as written.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAgent {
    pub name: String,
    /// A file (relative to the data directory) or `NAME@VERSION` of a `brain` artifact.
    pub brain: String,
    pub language: Option<String>,
    #[serde(default = "default_recv_timeout_secs")]
    pub recv_timeout_secs: u64,
    #[serde(default = "default_inbox")]
    pub inbox: usize,
    #[serde(default = "default_busy_ms")]
    pub busy_ms: u64,
    #[serde(default = "default_brain_memory_mb")]
    pub memory_mb: u64,
    #[serde(default = "default_grace_secs")]
    pub grace_secs: u64,
    /// `providers.NAME = { base_url, api_key }`: OpenAI-compatible upstreams this agent's
    /// `provider.chat-stream` may name.
    #[serde(default)]
    pub providers: std::collections::BTreeMap<String, RawProvider>,
    /// Tool capsules of this node the brain may call (`tooling.call-tool` with server
    /// `""`): names, or prefixes ending in `*`.
    #[serde(default)]
    pub tools: Vec<String>,
    /// `[[mcp]]` servers whose tools and resources the brain may use, by name.
    #[serde(default)]
    pub mcp: Vec<String>,
}

/// One upstream of an agent as written.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawProvider {
    /// The API's base, such as `https://api.openai.com/v1` (`/chat/completions` is added).
    pub base_url: String,
    /// Where the key comes from: `env:VARIABLE` (the node's environment, read when a
    /// stream opens) or `config:KEY` (the config's `[credentials]`). None: no key sent.
    pub api_key: Option<String>,
}

/// An upstream an agent's brain may stream completions from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProviderEntry {
    /// Without a trailing `/`.
    pub base_url: String,
    pub api_key: Option<KeySource>,
}

/// Where an upstream's key is read from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeySource {
    /// The node's environment variable.
    Env(String),
    /// A `[credentials]` key of the config.
    Config(String),
}

impl KeySource {
    /// The key now: the environment variable's value, or the credential's.
    pub fn read(
        &self,
        credentials: &std::collections::BTreeMap<String, Credential>,
    ) -> Result<String, String> {
        match self {
            Self::Env(var) => std::env::var(var).map_err(|_| format!("the node's environment has no {var}")),
            Self::Config(key) => {
                credentials.get(key).ok_or_else(|| format!("no [credentials] key {key}"))?.read()
            }
        }
    }
}

const fn default_recv_timeout_secs() -> u64 {
    60
}
const fn default_inbox() -> usize {
    256
}
const fn default_busy_ms() -> u64 {
    5000
}
const fn default_brain_memory_mb() -> u64 {
    64
}
const fn default_grace_secs() -> u64 {
    5
}
const fn default_mcp_timeout_secs() -> u64 {
    60
}

/// Where an agent's brain is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BrainRef {
    /// A file (absolute).
    File(PathBuf),
    /// A `brain` artifact of the node's store.
    Stored { name: String, version: String },
}

/// A validated `[[agents]]` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentEntry {
    pub name: String,
    pub brain: BrainRef,
    /// `rhai`, `js` or `wasm` when the config says.
    pub language: Option<String>,
    pub recv_timeout: Duration,
    pub inbox_max: usize,
    pub busy: Duration,
    pub memory_bytes: u64,
    pub grace: Duration,
    /// Upstreams by name (`provider.chat-stream`'s `provider`).
    pub providers: std::collections::BTreeMap<String, ProviderEntry>,
    /// Tool capsules the brain may call: names, or prefixes ending in `*`.
    pub tools: Vec<String>,
    /// `[[mcp]]` servers the brain may use.
    pub mcp: Vec<String>,
}

/// One `[credentials]` entry as written: the secret itself, or a file that holds it.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum RawCredential {
    Value(String),
    File { file: String },
}

/// A secret an agent's driver may be given by name (`inference.credentials`
/// `NAME = "config:KEY"`): a value from the config, or a file read when the agent is
/// installed. Its `Debug` never shows a value.
#[derive(Clone, PartialEq, Eq)]
pub enum Credential {
    Value(String),
    /// An absolute path.
    File(PathBuf),
}

impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Value(_) => f.write_str("Credential(<redacted>)"),
            Self::File(path) => write!(f, "Credential(file {})", path.display()),
        }
    }
}

impl Credential {
    /// The secret: the value, or the file's text without its trailing newline.
    pub fn read(&self) -> Result<String, String> {
        match self {
            Self::Value(value) => Ok(value.clone()),
            Self::File(path) => {
                let len = std::fs::metadata(path)
                    .map_err(|e| format!("cannot read {}: {e}", path.display()))?
                    .len();
                if len > limits::CREDENTIAL_BYTES_MAX {
                    return Err(format!(
                        "{} is {len} bytes, more than {} (a credential is a key, not a document)",
                        path.display(),
                        limits::CREDENTIAL_BYTES_MAX
                    ));
                }
                let text = std::fs::read_to_string(path)
                    .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
                Ok(text.trim_end_matches(['\n', '\r']).to_owned())
            }
        }
    }
}

/// A pinned artifact: `[[pins]] artifact = "NAME@VERSION"`, `replicas = R`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPin {
    pub artifact: String,
    #[serde(default = "default_replicas")]
    pub replicas: usize,
}

const fn default_replicas() -> usize {
    murmur_protocol::replicate::REPLICATION_FACTOR_DEFAULT
}

/// An artifact the mesh keeps on at least `replicas` nodes (every node that carries the
/// pin in its config takes part).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pin {
    pub name: String,
    pub version: String,
    pub replicas: usize,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawApi {
    pub listen: String,
    /// Clients on loopback may call without a token.
    pub loopback_open: bool,
    /// Bearer tokens accepted from any client (`Authorization: Bearer TOKEN`): a string
    /// (a client with every scope), or `{ name, token | token_file, scopes }`.
    pub tokens: Vec<RawToken>,
    /// Host names (beyond IP addresses and `localhost`) clients may reach the API by.
    pub hosts: Vec<String>,
    /// Web origins (`https://dash.example:8443`) whose pages may call the API.
    pub origins: Vec<String>,
    /// The URL clients reach the API at (`https://node1.example:7420`), for the URLs in
    /// agent cards; default `http://` and the listen address.
    pub public_url: Option<String>,
    /// Chat completions (`/v1/chat/completions`) this node serves at once; past it: 429.
    pub completions_max: usize,
}

impl Default for RawApi {
    fn default() -> Self {
        Self {
            listen: DEFAULT_API_LISTEN.into(),
            loopback_open: true,
            tokens: Vec::new(),
            hosts: Vec::new(),
            origins: Vec::new(),
            public_url: None,
            completions_max: 2048,
        }
    }
}

/// One `api.tokens` entry as written.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum RawToken {
    /// The token itself: a client named `token-N` (its place in the list) with every scope.
    Plain(String),
    /// A named client with its scopes, the token in the config or in a file (relative to
    /// the data directory, its first line).
    Scoped(RawScopedToken),
}

/// `{ name, token | token_file, scopes }`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawScopedToken {
    pub name: String,
    pub token: Option<String>,
    pub token_file: Option<String>,
    pub scopes: Vec<Scope>,
}

/// What an API client may do. `admin` includes `send`, which includes `read`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// Look: peers, the directory, metrics, tasks and their events, agents, traces.
    Read,
    /// Act: send tasks and agent messages, run tools and capsules, cancel and reply.
    Send,
    /// Change the node: pull and install artifacts.
    Admin,
}

impl Scope {
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Send => "send",
            Self::Admin => "admin",
        }
    }
}

/// A client the API admits: who it is and the widest scope it holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiClient {
    /// `local` for this machine's clients without a token, else the token's name.
    pub name: String,
    pub scope: Scope,
}

impl ApiClient {
    /// Whether it may do what `needed` covers.
    #[must_use]
    pub fn may(&self, needed: Scope) -> bool {
        self.scope >= needed
    }
}

/// A configured token. Its `Debug` never shows the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiToken {
    pub name: String,
    pub secret: String,
    pub scope: Scope,
}

impl fmt::Debug for ApiToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApiToken")
            .field("name", &self.name)
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

/// Who may call the node's API (A2A and admin): loopback clients by default, others with
/// a bearer token from the config.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ClientPolicy {
    pub loopback_open: bool,
    pub tokens: Vec<ApiToken>,
    /// Host names (lowercase, without port) the API answers to beyond IP literals and
    /// `localhost`: what keeps a DNS-rebinding page out.
    pub hosts: Vec<String>,
    /// Origins (`scheme://host[:port]`, lowercase) whose pages may call the API; no other
    /// page may.
    pub origins: Vec<String>,
    /// `api.public_url` without a trailing `/`.
    pub public_url: Option<String>,
}

impl ClientPolicy {
    /// Whether a client at `peer` presenting `bearer` may call.
    #[must_use]
    pub fn admits(&self, peer: std::net::IpAddr, bearer: Option<&str>) -> bool {
        self.client(peer, bearer).is_some()
    }

    /// The client at `peer` presenting `bearer`, if admitted: a token's holder (its name
    /// and scope), else, on loopback when `api.loopback_open`, `local` with every scope.
    #[must_use]
    pub fn client(&self, peer: std::net::IpAddr, bearer: Option<&str>) -> Option<ApiClient> {
        // Compare every token in full, so timing says nothing about which prefix matched.
        let held = bearer.and_then(|given| {
            self.tokens.iter().fold(None, |found, token| {
                let same = token.secret.len() == given.len()
                    && token.secret.bytes().zip(given.bytes()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0;
                if same { Some(token) } else { found }
            })
        });
        if let Some(token) = held {
            return Some(ApiClient { name: token.name.clone(), scope: token.scope });
        }
        (self.loopback_open && peer.is_loopback())
            .then(|| ApiClient { name: "local".into(), scope: Scope::Admin })
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawNetwork {
    pub listen: Vec<String>,
    pub bootstrap: Vec<String>,
    pub mdns: bool,
    pub mdns_query_interval_secs: u64,
    pub connections_max: u32,
    pub idle_timeout_secs: u64,
    pub ping_interval_secs: u64,
    pub ping_timeout_secs: u64,
}

impl Default for RawNetwork {
    fn default() -> Self {
        Self {
            listen: vec![
                format!("/ip4/0.0.0.0/tcp/{DEFAULT_P2P_PORT}"),
                format!("/ip4/0.0.0.0/udp/{DEFAULT_P2P_PORT}/quic-v1"),
            ],
            bootstrap: Vec::new(),
            mdns: true,
            mdns_query_interval_secs: 10,
            connections_max: 256,
            idle_timeout_secs: 120,
            ping_interval_secs: 15,
            ping_timeout_secs: 20,
        }
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawAdverts {
    pub refresh_secs: u64,
    pub ttl_secs: u64,
    pub suspect_secs: u64,
    pub announce_early: bool,
}

impl Default for RawAdverts {
    fn default() -> Self {
        Self { refresh_secs: 30, ttl_secs: 90, suspect_secs: 10, announce_early: false }
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawTrust {
    pub authorities: Vec<String>,
    pub publishers: Vec<String>,
    pub closed: bool,
    pub cert: String,
}

impl Default for RawTrust {
    fn default() -> Self {
        Self { authorities: Vec::new(), publishers: Vec::new(), closed: false, cert: "node.cert".into() }
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawRuntime {
    pub capsules_dir: String,
    pub manifests: Vec<String>,
    pub pooling: bool,
    pub audience: murmur_protocol::owner::Audience,
}

impl Default for RawRuntime {
    fn default() -> Self {
        Self {
            capsules_dir: "capsules".into(),
            manifests: Vec::new(),
            pooling: true,
            audience: murmur_protocol::owner::Audience::default(),
        }
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCapsule {
    pub name: String,
    pub version: String,
    pub digest: Option<String>,
}

/// A validated configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    pub api_listen: SocketAddr,
    pub api_policy: ClientPolicy,
    /// `api.completions_max`: chat completions served at once.
    pub completions_max: usize,
    pub network: NetworkConfig,
    pub adverts: AdvertConfig,
    pub trust: TrustConfig,
    pub runtime: RuntimeConfig,
    /// Capsules declared in the file, advertised as hosted (not run by this node).
    pub capsules: Vec<HostedCapsule>,
    /// Artifacts kept on at least R nodes.
    pub pins: Vec<Pin>,
    /// `[credentials]`, by key.
    pub credentials: std::collections::BTreeMap<String, Credential>,
    /// `[[agents]]`, in file order.
    pub agents: Vec<AgentEntry>,
    /// `[[mcp]]`, in file order.
    pub mcp: Vec<McpEntry>,
    /// `[tasks]`: finished tasks and routes kept this long and at most this many.
    pub tasks_keep: Duration,
    pub tasks_keep_max: usize,
    /// `tasks.drain_secs`: how long a stopping node waits for its tasks.
    pub tasks_drain: Duration,
    /// `tasks.finished_in_memory`: finished tasks held in memory.
    pub tasks_finished_in_memory: usize,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimeConfig {
    /// Absolute directory of capsule manifests this node runs.
    pub capsules_dir: PathBuf,
    /// Further manifests this node runs (absolute paths).
    pub manifests: Vec<PathBuf>,
    pub pooling: bool,
    /// Whose tasks its capsules take, unless a manifest says (`lifecycle.audience`).
    pub audience: murmur_protocol::owner::Audience,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetworkConfig {
    pub listen: Vec<Multiaddr>,
    pub bootstrap: Vec<(PeerId, Multiaddr)>,
    pub mdns: bool,
    pub mdns_query_interval: Duration,
    pub connections_max: u32,
    pub idle_timeout: Duration,
    /// How often each connection is pinged.
    pub ping_interval: Duration,
    /// A connection whose ping goes unanswered this long is closed: its peer froze, lost
    /// power or sits behind a partition (TCP alone keeps such a connection ~15 minutes).
    pub ping_timeout: Duration,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdvertConfig {
    pub refresh: Duration,
    pub ttl: Duration,
    /// A peer gone this long is declared departed (zero: never; see `MeshConfig::suspect_ms`).
    pub suspect: Duration,
    /// Republish our advert the moment the first peer subscribes, too
    /// (`MeshConfig::announce_early`).
    pub announce_early: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrustConfig {
    pub authorities: Vec<PublicKey>,
    /// Keys trusted to sign artifact bundles' catalogs.
    pub publishers: Vec<PublicKey>,
    pub closed: bool,
    /// Absolute path of this node's certificate.
    pub cert: PathBuf,
}

/// The tokens of `api.tokens`, each checked (a bad entry is reported through `err`).
fn api_tokens(raw: &[RawToken], data_dir: &Path, err: &mut impl FnMut(&str, String)) -> Vec<ApiToken> {
    let mut tokens: Vec<ApiToken> = Vec::new();
    for (i, entry) in raw.iter().enumerate() {
        let (name, secret, scope) = match entry {
            RawToken::Plain(secret) => (format!("token-{}", i + 1), secret.clone(), Scope::Admin),
            RawToken::Scoped(RawScopedToken { name, token, token_file, scopes }) => {
                let secret = match (token, token_file) {
                    (Some(token), None) => token.clone(),
                    (None, Some(file)) => {
                        let path = data_dir.join(file);
                        match std::fs::read(&path) {
                            Ok(bytes) if bytes.len() as u64 <= limits::CREDENTIAL_BYTES_MAX => {
                                String::from_utf8_lossy(&bytes)
                                    .lines()
                                    .next()
                                    .unwrap_or_default()
                                    .trim()
                                    .to_owned()
                            }
                            Ok(_) => {
                                err(
                                    "api.tokens",
                                    format!(
                                        "`{name}`: {} is larger than a token file may be",
                                        path.display()
                                    ),
                                );
                                continue;
                            }
                            Err(e) => {
                                err(
                                    "api.tokens",
                                    format!("`{name}`: cannot read token_file {}: {e}", path.display()),
                                );
                                continue;
                            }
                        }
                    }
                    _ => {
                        err("api.tokens", format!("`{name}`: give exactly one of token and token_file"));
                        continue;
                    }
                };
                let Some(scope) = scopes.iter().copied().max() else {
                    err("api.tokens", format!("`{name}`: scopes is empty (read, send or admin)"));
                    continue;
                };
                (name.clone(), secret, scope)
            }
        };
        let name_ok = !name.is_empty()
            && name.len() <= 32
            && name != "local"
            && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
        if !name_ok {
            err("api.tokens", format!("`{name}`: a client name is 1 to 32 of a-z 0-9 - _ (and not `local`)"));
        } else if tokens.iter().any(|t| t.name == name) {
            err("api.tokens", format!("`{name}` appears twice"));
        } else if secret.len() < 16 || secret.len() > 256 || !secret.bytes().all(|b| b.is_ascii_graphic()) {
            err("api.tokens", format!("`{name}`: a token must be 16 to 256 visible ASCII characters"));
        } else if tokens.iter().any(|t| t.secret == secret) {
            err(
                "api.tokens",
                format!(
                    "`{name}`: the same token as `{}`",
                    tokens.iter().find(|t| t.secret == secret).map_or("", |t| t.name.as_str())
                ),
            );
        } else {
            tokens.push(ApiToken { name, secret, scope });
        }
    }
    tokens
}

/// Every rule the configuration broke, each naming its key.
#[derive(Debug, PartialEq, Eq)]
pub struct ConfigErrors(pub Vec<String>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.as_slice() {
            [one] => f.write_str(one),
            many => {
                write!(f, "{} problems:", many.len())?;
                many.iter().try_for_each(|e| write!(f, "\n  - {e}"))
            }
        }
    }
}

impl std::error::Error for ConfigErrors {}

impl RawConfig {
    /// Parses TOML text; unknown keys and wrong types are errors naming the key and line.
    pub fn parse(text: &str) -> Result<Self, ConfigErrors> {
        toml::from_str(text)
            .map_err(|err| ConfigErrors(vec![err.to_string().trim_end().replace('\n', "\n    ")]))
    }

    /// The security posture this configuration sets up, in one sentence per aspect (what
    /// `murnode init` reports; see the trust guide's "Postures").
    #[must_use]
    pub fn posture(&self) -> Vec<String> {
        use murmur_protocol::owner::Audience;
        let mesh = if self.trust.closed {
            "a closed mesh: only nodes with a certificate from trust.authorities are admitted".to_owned()
        } else if self.network.mdns {
            "an open mesh: any murnode on this LAN (mDNS) or reaching a bootstrap peer may join".to_owned()
        } else {
            "an open mesh without mDNS: any murnode reaching a bootstrap peer may join".to_owned()
        };
        let audience = match self.runtime.audience {
            Audience::Local => {
                "capsules take tasks only from this node's own clients and capsules (runtime.audience = local)"
            }
            Audience::Granted => {
                "capsules take tasks from this node's clients, and from capsules of other nodes holding a grant signed by trust.authorities (runtime.audience = granted); clients of other nodes are refused"
            }
            Audience::Mesh => {
                "capsules take tasks from the clients of every node of the mesh (runtime.audience = mesh)"
            }
        };
        let grants = if self.trust.authorities.is_empty() {
            "trust.authorities is empty: no grant verifies, so no capsule of another node gets in"
        } else {
            "grants signed by trust.authorities admit other nodes' capsules to what they allow"
        };
        let api = if self.api.tokens.is_empty() {
            "the API answers clients on this machine only (no api.tokens)"
        } else {
            "the API answers this machine's clients and holders of api.tokens"
        };
        vec![mesh, audience.to_owned(), grants.to_owned(), api.to_owned()]
    }

    /// Reads the file at `path`.
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .map_err(|err| anyhow::anyhow!("cannot read config {}: {err}", path.display()))?;
        Self::parse(&text).map_err(|err| anyhow::anyhow!("config {}: {err}", path.display()))
    }
}

impl Config {
    /// Checks every rule; relative paths are resolved against `data_dir`.
    pub fn from_raw(raw: &RawConfig, data_dir: &Path) -> Result<Self, ConfigErrors> {
        let mut errors = Vec::new();
        let mut err = |key: &str, msg: String| errors.push(format!("config key `{key}`: {msg}"));

        if !(1..=65_536).contains(&raw.api.completions_max) {
            err("api.completions_max", format!("is {} but must be 1..=65536", raw.api.completions_max));
        }
        let api_listen = raw.api.listen.parse::<SocketAddr>().unwrap_or_else(|_| {
            err("api.listen", format!("`{}` is not HOST:PORT with an IP address host", raw.api.listen));
            SocketAddr::from(([127, 0, 0, 1], 0))
        });

        for host in &raw.api.hosts {
            if host.is_empty()
                || host.len() > 253
                || !host.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
            {
                err("api.hosts", format!("`{host}` is not a host name (letters, digits, `-`, `.`; no port)"));
            }
        }
        for origin in &raw.api.origins {
            let ok = ["http://", "https://"].iter().any(|s| origin.starts_with(s))
                && !origin.trim_start_matches("https://").trim_start_matches("http://").contains(['/', ' '])
                && origin.len() <= 300;
            if !ok {
                err(
                    "api.origins",
                    format!("`{origin}` is not an origin like https://dash.example:8443 (no path)"),
                );
            }
        }
        if let Some(url) = &raw.api.public_url
            && (!(url.starts_with("http://") || url.starts_with("https://"))
                || url.len() > 300
                || !url.bytes().all(|b| b.is_ascii_graphic()))
        {
            err("api.public_url", format!("`{url}` is not an http(s) URL"));
        }
        if raw.api.tokens.len() > API_TOKENS_MAX {
            err("api.tokens", format!("has {} entries, more than {API_TOKENS_MAX}", raw.api.tokens.len()));
        }
        let tokens = api_tokens(&raw.api.tokens, data_dir, &mut err);

        let net = &raw.network;
        if net.listen.len() > LISTEN_ADDRS_MAX {
            err("network.listen", format!("has {} entries, more than {LISTEN_ADDRS_MAX}", net.listen.len()));
        }
        let listen = net
            .listen
            .iter()
            .filter_map(|text| parse_listen(text).map_err(|msg| err("network.listen", msg)).ok())
            .collect();
        if net.bootstrap.len() > BOOTSTRAP_PEERS_MAX {
            err(
                "network.bootstrap",
                format!("has {} entries, more than {BOOTSTRAP_PEERS_MAX}", net.bootstrap.len()),
            );
        }
        let bootstrap = net
            .bootstrap
            .iter()
            .filter_map(|text| parse_bootstrap(text).map_err(|msg| err("network.bootstrap", msg)).ok())
            .collect();
        if !(1..=3600).contains(&net.mdns_query_interval_secs) {
            err("network.mdns_query_interval_secs", "must be 1..=3600".into());
        }
        if !(2..=65_536).contains(&net.connections_max) {
            err("network.connections_max", "must be 2..=65536".into());
        }
        if !(10..=86_400).contains(&net.idle_timeout_secs) {
            err("network.idle_timeout_secs", "must be 10..=86400".into());
        }
        if !(1..=3600).contains(&net.ping_interval_secs) {
            err("network.ping_interval_secs", "must be 1..=3600".into());
        }
        if !(1..=600).contains(&net.ping_timeout_secs) {
            err("network.ping_timeout_secs", "must be 1..=600".into());
        }

        let ttl_range_secs = ADVERT_TTL_MS_MIN.div_ceil(1000)..=ADVERT_TTL_MS_MAX / 1000;
        if !ttl_range_secs.contains(&raw.adverts.ttl_secs) {
            err("adverts.ttl_secs", format!("must be {}..={}", ttl_range_secs.start(), ttl_range_secs.end()));
        }
        if raw.adverts.refresh_secs == 0 || raw.adverts.refresh_secs >= raw.adverts.ttl_secs {
            err(
                "adverts.refresh_secs",
                format!("must be at least 1 and less than adverts.ttl_secs ({})", raw.adverts.ttl_secs),
            );
        }

        if raw.adverts.suspect_secs > 3600 {
            err("adverts.suspect_secs", "must be 0..=3600 (0 turns departure notices off)".into());
        }

        let authorities: Vec<PublicKey> = raw
            .trust
            .authorities
            .iter()
            .filter_map(|text| text.parse().map_err(|e| err("trust.authorities", format!("{e}"))).ok())
            .collect();
        let publishers: Vec<PublicKey> = raw
            .trust
            .publishers
            .iter()
            .filter_map(|text| text.parse().map_err(|e| err("trust.publishers", format!("{e}"))).ok())
            .collect();
        if raw.trust.closed && raw.trust.authorities.is_empty() {
            err("trust.closed", "a closed mesh needs at least one key in trust.authorities".into());
        }

        if raw.capsules.len() > ADVERT_CAPSULES_MAX {
            err(
                "capsules",
                format!("declares {} capsules, more than {ADVERT_CAPSULES_MAX}", raw.capsules.len()),
            );
        }
        let mut capsules: Vec<HostedCapsule> = Vec::new();
        for (i, c) in raw.capsules.iter().enumerate() {
            let key = format!("capsules[{i}]");
            if let Err(msg) = check_capsule_name(&c.name) {
                err(&format!("{key}.name"), msg);
            }
            if let Err(msg) = check_version(&c.version) {
                err(&format!("{key}.version"), msg);
            }
            let digest = c.digest.as_deref().and_then(|d| {
                d.parse::<Digest>().map_err(|e| err(&format!("{key}.digest"), e.to_string())).ok()
            });
            if capsules.iter().any(|other| other.name == c.name) {
                err(&format!("{key}.name"), format!("capsule `{}` is declared twice", c.name));
            }
            capsules.push(HostedCapsule { name: c.name.clone(), digest, version: c.version.clone() });
        }

        if raw.pins.len() > PINS_MAX {
            err("pins", format!("lists {} artifacts, more than {PINS_MAX}", raw.pins.len()));
        }
        let mut pins: Vec<Pin> = Vec::new();
        for (i, pin) in raw.pins.iter().enumerate() {
            let key = format!("pins[{i}]");
            let Some((name, version)) = pin.artifact.split_once('@') else {
                err(&format!("{key}.artifact"), format!("`{}` is not NAME@VERSION", pin.artifact));
                continue;
            };
            if let Err(msg) = check_capsule_name(name).and_then(|()| check_version(version)) {
                err(&format!("{key}.artifact"), msg);
            }
            let max = murmur_protocol::replicate::REPLICATION_FACTOR_MAX;
            if !(1..=max).contains(&pin.replicas) {
                err(&format!("{key}.replicas"), format!("is {} but must be 1..={max}", pin.replicas));
            }
            if pins.iter().any(|p| p.name == name && p.version == version) {
                err(&format!("{key}.artifact"), format!("`{}` is pinned twice", pin.artifact));
            }
            pins.push(Pin { name: name.into(), version: version.into(), replicas: pin.replicas });
        }

        if raw.credentials.len() > limits::CREDENTIALS_MAX {
            err(
                "credentials",
                format!("has {} entries, more than {}", raw.credentials.len(), limits::CREDENTIALS_MAX),
            );
        }
        let mut credentials = std::collections::BTreeMap::new();
        for (key, credential) in &raw.credentials {
            if !credential_key(key) {
                err(&format!("credentials.{key}"), "a key is 1 to 64 of A-Z, a-z, 0-9, `_`, `-`, `.`".into());
                continue;
            }
            let credential = match credential {
                RawCredential::Value(value) if value.len() as u64 > limits::CREDENTIAL_BYTES_MAX => {
                    err(
                        &format!("credentials.{key}"),
                        format!("is longer than {} bytes", limits::CREDENTIAL_BYTES_MAX),
                    );
                    continue;
                }
                RawCredential::Value(value) => Credential::Value(value.clone()),
                RawCredential::File { file } => Credential::File(data_dir.join(file)),
            };
            credentials.insert(key.clone(), credential);
        }

        if raw.agents.len() > murmur_protocol::limits::ADVERT_AGENTS_MAX {
            err(
                "agents",
                format!(
                    "lists {} agents, more than {}",
                    raw.agents.len(),
                    murmur_protocol::limits::ADVERT_AGENTS_MAX
                ),
            );
        }
        let mut agents: Vec<AgentEntry> = Vec::new();
        for (i, agent) in raw.agents.iter().enumerate() {
            let key = format!("agents[{i}]");
            if let Err(msg) = murmur_protocol::agent::check_agent_name(&agent.name) {
                err(&format!("{key}.name"), msg);
            }
            if agents.iter().any(|a| a.name == agent.name) {
                err(&format!("{key}.name"), format!("agent `{}` is configured twice", agent.name));
            }
            let brain = match brain_ref(&agent.brain, data_dir) {
                Ok(brain) => brain,
                Err(msg) => {
                    err(&format!("{key}.brain"), msg);
                    continue;
                }
            };
            if let Some(language) = &agent.language
                && !["rhai", "js", "wasm"].contains(&language.as_str())
            {
                err(&format!("{key}.language"), format!("`{language}` is not one of rhai, js, wasm"));
            }
            let mut range = |field: &str, value: u64, low: u64, high: u64| {
                if !(low..=high).contains(&value) {
                    err(&format!("{key}.{field}"), format!("is {value} but must be {low}..={high}"));
                }
            };
            range("recv_timeout_secs", agent.recv_timeout_secs, 1, 86_400);
            range("inbox", agent.inbox as u64, 1, 65_536);
            range("busy_ms", agent.busy_ms, 10, 600_000);
            range("memory_mb", agent.memory_mb, 1, 4096);
            range("grace_secs", agent.grace_secs, 0, 300);
            let mut providers = std::collections::BTreeMap::new();
            for (name, provider) in &agent.providers {
                let field = format!("{key}.providers.{name}");
                if let Err(msg) = check_plain_name(name) {
                    err(&field, format!("a provider name {msg}"));
                }
                let base_url = provider.base_url.trim_end_matches('/').to_owned();
                if !(base_url.starts_with("http://") || base_url.starts_with("https://"))
                    || base_url.len() > 512
                {
                    err(
                        &format!("{field}.base_url"),
                        format!("`{}` is not an http:// or https:// URL", provider.base_url),
                    );
                }
                let api_key = match key_source(provider.api_key.as_deref(), &raw.credentials) {
                    Ok(source) => source,
                    Err(msg) => {
                        err(&format!("{field}.api_key"), msg);
                        None
                    }
                };
                providers.insert(name.clone(), ProviderEntry { base_url, api_key });
            }
            for (j, tool) in agent.tools.iter().enumerate() {
                let pattern = tool.strip_suffix('*').unwrap_or(tool);
                if !pattern.is_empty() && check_capsule_name(pattern).is_err() {
                    err(
                        &format!("{key}.tools[{j}]"),
                        format!("`{tool}` is not a capsule name or a prefix ending in `*`"),
                    );
                }
            }
            for (j, server) in agent.mcp.iter().enumerate() {
                if !raw.mcp.iter().any(|m| &m.name == server) {
                    err(&format!("{key}.mcp[{j}]"), format!("`{server}` names no [[mcp]] server"));
                }
            }
            agents.push(AgentEntry {
                name: agent.name.clone(),
                brain,
                language: agent.language.clone(),
                recv_timeout: Duration::from_secs(agent.recv_timeout_secs),
                inbox_max: agent.inbox,
                busy: Duration::from_millis(agent.busy_ms),
                memory_bytes: agent.memory_mb << 20,
                grace: Duration::from_secs(agent.grace_secs),
                providers,
                tools: agent.tools.clone(),
                mcp: agent.mcp.clone(),
            });
        }

        if !(1..=3650).contains(&raw.tasks.keep_days) {
            err("tasks.keep_days", format!("is {} but must be 1..=3650", raw.tasks.keep_days));
        }
        if !(1_000..=100_000_000).contains(&raw.tasks.keep_max) {
            err("tasks.keep_max", format!("is {} but must be 1000..=100000000", raw.tasks.keep_max));
        }
        if !(10..=limits::TASKS_FINISHED_IN_MEMORY_MAX).contains(&raw.tasks.finished_in_memory) {
            err(
                "tasks.finished_in_memory",
                format!(
                    "is {} but must be 10..={}",
                    raw.tasks.finished_in_memory,
                    limits::TASKS_FINISHED_IN_MEMORY_MAX
                ),
            );
        }
        if raw.tasks.drain_secs > 3600 {
            err("tasks.drain_secs", format!("is {} but must be 0..=3600", raw.tasks.drain_secs));
        }
        if raw.mcp.len() > limits::MCP_SERVERS_MAX {
            err("mcp", format!("lists {} servers, more than {}", raw.mcp.len(), limits::MCP_SERVERS_MAX));
        }
        let mut mcp: Vec<McpEntry> = Vec::new();
        for (i, server) in raw.mcp.iter().enumerate() {
            let key = format!("mcp[{i}]");
            if let Err(msg) = check_plain_name(&server.name) {
                err(&format!("{key}.name"), msg);
            }
            if mcp.iter().any(|m| m.name == server.name) {
                err(&format!("{key}.name"), format!("MCP server `{}` is configured twice", server.name));
            }
            if !(1..=3600).contains(&server.timeout_secs) {
                err(
                    &format!("{key}.timeout_secs"),
                    format!("is {} but must be 1..=3600", server.timeout_secs),
                );
            }
            let transport = match (&server.command, &server.url) {
                (Some(command), None) => {
                    if server.api_key.is_some() {
                        err(
                            &format!("{key}.api_key"),
                            "is for `url` servers; give a command its key in `env`".into(),
                        );
                    }
                    let command =
                        if command.contains('/') { data_dir.join(command) } else { PathBuf::from(command) };
                    McpTransport::Stdio { command, args: server.args.clone(), env: server.env.clone() }
                }
                (None, Some(url)) => {
                    if !(url.starts_with("http://") || url.starts_with("https://")) || url.len() > 512 {
                        err(&format!("{key}.url"), format!("`{url}` is not an http:// or https:// URL"));
                    }
                    if !server.args.is_empty() || !server.env.is_empty() {
                        err(&format!("{key}.args"), "`args` and `env` are for `command` servers".into());
                    }
                    let api_key =
                        key_source(server.api_key.as_deref(), &raw.credentials).unwrap_or_else(|msg| {
                            err(&format!("{key}.api_key"), msg);
                            None
                        });
                    McpTransport::Http { url: url.clone(), api_key }
                }
                _ => {
                    err(
                        &key,
                        "needs exactly one of `command` (a stdio server) and `url` (streamable HTTP)".into(),
                    );
                    continue;
                }
            };
            mcp.push(McpEntry {
                name: server.name.clone(),
                transport,
                timeout: Duration::from_secs(server.timeout_secs),
            });
        }

        if !errors.is_empty() {
            return Err(ConfigErrors(errors));
        }
        Ok(Self {
            api_listen,
            completions_max: raw.api.completions_max,
            api_policy: ClientPolicy {
                loopback_open: raw.api.loopback_open,
                tokens,
                hosts: raw.api.hosts.iter().map(|h| h.to_ascii_lowercase()).collect(),
                origins: raw
                    .api
                    .origins
                    .iter()
                    .map(|o| o.trim_end_matches('/').to_ascii_lowercase())
                    .collect(),
                public_url: raw.api.public_url.as_ref().map(|u| u.trim_end_matches('/').to_owned()),
            },
            network: NetworkConfig {
                listen,
                bootstrap,
                mdns: net.mdns,
                mdns_query_interval: Duration::from_secs(net.mdns_query_interval_secs),
                connections_max: net.connections_max,
                idle_timeout: Duration::from_secs(net.idle_timeout_secs),
                ping_interval: Duration::from_secs(net.ping_interval_secs),
                ping_timeout: Duration::from_secs(net.ping_timeout_secs),
            },
            adverts: AdvertConfig {
                refresh: Duration::from_secs(raw.adverts.refresh_secs),
                ttl: Duration::from_secs(raw.adverts.ttl_secs),
                suspect: Duration::from_secs(raw.adverts.suspect_secs),
                announce_early: raw.adverts.announce_early,
            },
            trust: TrustConfig {
                authorities,
                publishers,
                closed: raw.trust.closed,
                cert: data_dir.join(&raw.trust.cert),
            },
            runtime: RuntimeConfig {
                capsules_dir: data_dir.join(&raw.runtime.capsules_dir),
                manifests: raw.runtime.manifests.iter().map(|m| data_dir.join(m)).collect(),
                pooling: raw.runtime.pooling,
                audience: raw.runtime.audience,
            },
            capsules,
            pins,
            credentials,
            agents,
            mcp,
            tasks_keep: Duration::from_secs(raw.tasks.keep_days * 86_400),
            tasks_keep_max: raw.tasks.keep_max,
            tasks_drain: Duration::from_secs(raw.tasks.drain_secs),
            tasks_finished_in_memory: raw.tasks.finished_in_memory,
        })
    }
}

/// Reads where a key comes from: `env:VARIABLE` or `config:KEY` (a `[credentials]` key).
fn key_source(
    text: Option<&str>,
    credentials: &std::collections::BTreeMap<String, RawCredential>,
) -> Result<Option<KeySource>, String> {
    let Some(text) = text else { return Ok(None) };
    match (text.strip_prefix("env:"), text.strip_prefix("config:")) {
        (Some(var), _) if !var.is_empty() => Ok(Some(KeySource::Env(var.to_owned()))),
        (_, Some(k)) if credentials.contains_key(k) => Ok(Some(KeySource::Config(k.to_owned()))),
        (_, Some(k)) => Err(format!("`config:{k}` names no [credentials] key")),
        _ => Err("must be `env:VARIABLE` or `config:KEY`, never the key itself".into()),
    }
}

/// A provider's or an MCP server's name: 1 to 64 letters, digits and `-_.`.
fn check_plain_name(name: &str) -> Result<(), String> {
    if name.is_empty()
        || name.len() > 64
        || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    {
        return Err(format!("`{name}` is not 1 to 64 letters, digits and `-_.`"));
    }
    Ok(())
}

/// Reads `brain = "…"`: a file (it has a `/` or a brain's file extension; relative to the
/// data directory) or `NAME@VERSION` of a `brain` artifact.
fn brain_ref(text: &str, data_dir: &Path) -> Result<BrainRef, String> {
    let looks_like_file =
        text.contains('/') || [".rhai", ".js", ".mjs", ".wasm"].iter().any(|e| text.ends_with(e));
    if looks_like_file {
        return Ok(BrainRef::File(data_dir.join(text)));
    }
    match text.split_once('@') {
        Some((name, version)) if check_capsule_name(name).is_ok() && check_version(version).is_ok() => {
            Ok(BrainRef::Stored { name: name.into(), version: version.into() })
        }
        _ => Err(format!(
            "`{text}` is neither a file (give a path with `/`, or a .rhai, .js or .wasm name) nor NAME@VERSION of a brain artifact"
        )),
    }
}

/// The grammar of a `[credentials]` key (what `config:KEY` names).
#[must_use]
pub fn credential_key(key: &str) -> bool {
    (1..=64).contains(&key.len())
        && key.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// Parses a listen multiaddr: TCP or QUIC over IPv4/IPv6, no `/p2p/` suffix.
pub fn parse_listen(text: &str) -> Result<Multiaddr, String> {
    let addr: Multiaddr = text.parse().map_err(|e| format!("`{text}` is not a multiaddr: {e}"))?;
    let protocols: Vec<Protocol<'_>> = addr.iter().collect();
    let transport_ok = matches!(
        protocols.as_slice(),
        [Protocol::Ip4(_) | Protocol::Ip6(_), Protocol::Tcp(_)]
            | [Protocol::Ip4(_) | Protocol::Ip6(_), Protocol::Udp(_), Protocol::QuicV1]
    );
    if !transport_ok {
        return Err(format!("`{text}` must be /ip4|ip6/ADDR/tcp/PORT or /ip4|ip6/ADDR/udp/PORT/quic-v1"));
    }
    Ok(addr)
}

/// Parses a bootstrap multiaddr, which must end in `/p2p/<peer id>`.
pub fn parse_bootstrap(text: &str) -> Result<(PeerId, Multiaddr), String> {
    let addr: Multiaddr = text.parse().map_err(|e| format!("`{text}` is not a multiaddr: {e}"))?;
    match addr.iter().last() {
        Some(Protocol::P2p(peer)) => Ok((peer, addr)),
        _ => Err(format!("`{text}` must end in /p2p/<peer id> so the peer can be authenticated")),
    }
}

#[cfg(test)]
mod tests;
