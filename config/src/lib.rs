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
    /// Bearer tokens accepted from any client (`Authorization: Bearer TOKEN`).
    pub tokens: Vec<String>,
}

impl Default for RawApi {
    fn default() -> Self {
        Self { listen: DEFAULT_API_LISTEN.into(), loopback_open: true, tokens: Vec::new() }
    }
}

/// Who may call the node's API (A2A and admin): loopback clients by default, others with
/// a bearer token from the config.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ClientPolicy {
    pub loopback_open: bool,
    pub tokens: Vec<String>,
}

impl ClientPolicy {
    /// Whether a client at `peer` presenting `bearer` may call.
    #[must_use]
    pub fn admits(&self, peer: std::net::IpAddr, bearer: Option<&str>) -> bool {
        if self.loopback_open && peer.is_loopback() {
            return true;
        }
        // Compare every token in full, so timing says nothing about which prefix matched.
        bearer.is_some_and(|given| {
            self.tokens.iter().fold(false, |found, token| {
                let same = token.len() == given.len()
                    && token.bytes().zip(given.bytes()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0;
                found | same
            })
        })
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
}

impl Default for RawAdverts {
    fn default() -> Self {
        Self { refresh_secs: 30, ttl_secs: 90, suspect_secs: 10 }
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
}

impl Default for RawRuntime {
    fn default() -> Self {
        Self { capsules_dir: "capsules".into(), manifests: Vec::new(), pooling: true }
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
    pub network: NetworkConfig,
    pub adverts: AdvertConfig,
    pub trust: TrustConfig,
    pub runtime: RuntimeConfig,
    /// Capsules declared in the file, advertised as hosted (not run by this node).
    pub capsules: Vec<HostedCapsule>,
    /// Artifacts kept on at least R nodes.
    pub pins: Vec<Pin>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimeConfig {
    /// Absolute directory of capsule manifests this node runs.
    pub capsules_dir: PathBuf,
    /// Further manifests this node runs (absolute paths).
    pub manifests: Vec<PathBuf>,
    pub pooling: bool,
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

        let api_listen = raw.api.listen.parse::<SocketAddr>().unwrap_or_else(|_| {
            err("api.listen", format!("`{}` is not HOST:PORT with an IP address host", raw.api.listen));
            SocketAddr::from(([127, 0, 0, 1], 0))
        });

        if raw.api.tokens.len() > API_TOKENS_MAX {
            err("api.tokens", format!("has {} entries, more than {API_TOKENS_MAX}", raw.api.tokens.len()));
        }
        if raw
            .api
            .tokens
            .iter()
            .any(|t| t.len() < 16 || t.len() > 256 || !t.bytes().all(|b| b.is_ascii_graphic()))
        {
            err("api.tokens", "each token must be 16 to 256 visible ASCII characters".into());
        }

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

        if !errors.is_empty() {
            return Err(ConfigErrors(errors));
        }
        Ok(Self {
            api_listen,
            api_policy: ClientPolicy { loopback_open: raw.api.loopback_open, tokens: raw.api.tokens.clone() },
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
            },
            capsules,
            pins,
        })
    }
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
