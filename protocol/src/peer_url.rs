//! Peer URLs (where a task goes) and allowlist patterns (where a capsule may send).
//!
//! Grammar, after trimming surrounding whitespace:
//!
//! | form                          | meaning                                             |
//! |-------------------------------|-----------------------------------------------------|
//! | `mesh://NAME`                 | any node hosting capsule NAME; the router picks one |
//! | `mesh://NAME@PEERID`          | capsule NAME on that node only                      |
//! | `HOST:PORT`                   | a direct A2A HTTP peer, as in the runtime spec      |
//! | `http(s)://HOST[:PORT][/PATH]`| a direct A2A HTTP peer at an explicit endpoint      |
//!
//! One target has one spelling. Scheme, host and capsule name must be lowercase (an
//! uppercase one is refused with the lowercase spelling in the error, rather than folded,
//! so a pattern and a target can never disagree about case); the peer id and the path are
//! case-sensitive; a trailing `/` is insignificant; default ports (80, 443) are implied and
//! leading zeros in ports refused. Queries, fragments, user info, empty and `.`/`..` path
//! segments are refused.
//!
//! An allowlist pattern has the same grammar, except that any one component (capsule
//! name, peer id, host, port or path) may end in `*`, which matches any continuation of
//! *that component only*: `mesh://ec*` matches `mesh://echo` but not `mesh://echo@PEER`,
//! because a `*` never crosses `@`, `:` or the start of the path. To allow pinned targets,
//! say so: `mesh://echo@*`. Matching is component by component on normalized values.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::identity::NodeId;
use crate::limits::PEER_URL_LEN_MAX;
use crate::names::check_capsule_name;

/// Why a peer URL or pattern could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid peer URL `{input}`: {reason}")]
pub struct UrlError {
    pub input: String,
    pub reason: String,
}

/// Where a task is sent.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PeerUrl {
    /// `mesh://NAME[@PEERID]`.
    Mesh { capsule: String, node: Option<NodeId> },
    /// `HOST:PORT`.
    Direct { host: String, port: u16 },
    /// `http(s)://HOST[:PORT][/PATH]`; `path` is empty for the root, else starts with `/`
    /// and has no trailing `/`.
    Http { secure: bool, host: String, port: u16, path: String },
}

impl FromStr for PeerUrl {
    type Err = UrlError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let fail = |reason: String| UrlError { input: input.to_owned(), reason };
        let parts = split(input).map_err(fail)?;
        let exact = |c: Component<'_>| -> Result<String, String> {
            if c.wildcard {
                Err("`*` is only allowed in allowlist patterns".into())
            } else {
                Ok(c.text.to_owned())
            }
        };
        match parts {
            Parts::Mesh { name, node } => {
                let capsule = exact(name).map_err(fail)?;
                check_capsule_name(&capsule).map_err(fail)?;
                let node = node.map(|n| exact(n).and_then(|t| parse_node(&t))).transpose().map_err(fail)?;
                Ok(Self::Mesh { capsule, node })
            }
            Parts::Direct { host, port } => {
                let host = exact(host).and_then(|h| check_host(&h).map(|()| h)).map_err(fail)?;
                let port = exact(port).and_then(|p| parse_port(&p)).map_err(fail)?;
                Ok(Self::Direct { host, port })
            }
            Parts::Http { secure, host, port, path } => {
                let host = exact(host).and_then(|h| check_host(&h).map(|()| h)).map_err(fail)?;
                let port = match port {
                    Some(p) => exact(p).and_then(|p| parse_port(&p)).map_err(fail)?,
                    None => default_port(secure),
                };
                let path = exact(path).map_err(fail)?;
                Ok(Self::Http { secure, host, port, path })
            }
        }
    }
}

impl fmt::Display for PeerUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Mesh { capsule, node: None } => write!(f, "mesh://{capsule}"),
            Self::Mesh { capsule, node: Some(node) } => write!(f, "mesh://{capsule}@{node}"),
            Self::Direct { host, port } => write!(f, "{host}:{port}"),
            Self::Http { secure, host, port, path } => {
                let scheme = if *secure { "https" } else { "http" };
                if *port == default_port(*secure) {
                    write!(f, "{scheme}://{host}{path}")
                } else {
                    write!(f, "{scheme}://{host}:{port}{path}")
                }
            }
        }
    }
}

impl Serialize for PeerUrl {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for PeerUrl {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// One allowlist entry: a peer URL in which one component may end in `*`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct AllowPattern(Pattern);

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Pattern {
    Mesh { name: Glob, node: NodeGlob },
    Direct { host: Glob, port: PortGlob },
    Http { secure: bool, host: Glob, port: PortGlob, path: Glob },
}

/// A component that must equal `prefix`, or with `wildcard` start with it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Glob {
    prefix: String,
    wildcard: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum NodeGlob {
    Unpinned,
    Any,
    Exact(NodeId),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum PortGlob {
    Any,
    Exact(u16),
}

impl AllowPattern {
    /// Whether `target` is allowed by this pattern.
    #[must_use]
    pub fn matches(&self, target: &PeerUrl) -> bool {
        match (&self.0, target) {
            (Pattern::Mesh { name, node }, PeerUrl::Mesh { capsule, node: target_node }) => {
                name.matches(capsule)
                    && match (node, target_node) {
                        (NodeGlob::Unpinned, None) | (NodeGlob::Any, Some(_)) => true,
                        (NodeGlob::Exact(want), Some(got)) => want == got,
                        _ => false,
                    }
            }
            (Pattern::Direct { host, port }, PeerUrl::Direct { host: h, port: p }) => {
                host.matches(h) && port.matches(*p)
            }
            (
                Pattern::Http { secure, host, port, path },
                PeerUrl::Http { secure: s, host: h, port: p, path: pa },
            ) => secure == s && host.matches(h) && port.matches(*p) && path.matches(pa),
            _ => false,
        }
    }
}

/// Whether any pattern in `allow` admits `target`.
#[must_use]
pub fn allowed(allow: &[AllowPattern], target: &PeerUrl) -> bool {
    allow.iter().any(|pattern| pattern.matches(target))
}

impl Glob {
    fn matches(&self, value: &str) -> bool {
        if self.wildcard { value.starts_with(&self.prefix) } else { value == self.prefix }
    }

    fn from(c: Component<'_>) -> Self {
        Self { prefix: c.text.to_owned(), wildcard: c.wildcard }
    }
}

impl fmt::Display for Glob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.prefix)?;
        if self.wildcard {
            f.write_str("*")?;
        }
        Ok(())
    }
}

impl PortGlob {
    fn matches(self, port: u16) -> bool {
        match self {
            Self::Any => true,
            Self::Exact(want) => want == port,
        }
    }

    fn parse(c: Component<'_>) -> Result<Self, String> {
        match (c.text, c.wildcard) {
            ("", true) => Ok(Self::Any),
            (_, true) => Err("a port is either a number or `*`".into()),
            (text, false) => parse_port(text).map(Self::Exact),
        }
    }
}

impl FromStr for AllowPattern {
    type Err = UrlError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let fail = |reason: String| UrlError { input: input.to_owned(), reason };
        let pattern = match split(input).map_err(fail)? {
            Parts::Mesh { name, node } => {
                if !name.wildcard {
                    check_capsule_name(name.text).map_err(fail)?;
                } else if !name.text.is_empty() {
                    check_name_prefix(name.text).map_err(fail)?;
                }
                let node = match node {
                    None => NodeGlob::Unpinned,
                    Some(Component { text: "", wildcard: true }) => NodeGlob::Any,
                    Some(Component { wildcard: true, .. }) => {
                        return Err(fail("a peer id in a pattern is either complete or `*`".into()));
                    }
                    Some(c) => NodeGlob::Exact(parse_node(c.text).map_err(fail)?),
                };
                Pattern::Mesh { name: Glob::from(name), node }
            }
            Parts::Direct { host, port } => {
                check_host_pattern(host).map_err(fail)?;
                Pattern::Direct { host: Glob::from(host), port: PortGlob::parse(port).map_err(fail)? }
            }
            Parts::Http { secure, host, port, path } => {
                check_host_pattern(host).map_err(fail)?;
                let port = match port {
                    Some(p) => PortGlob::parse(p).map_err(fail)?,
                    None => PortGlob::Exact(default_port(secure)),
                };
                Pattern::Http { secure, host: Glob::from(host), port, path: Glob::from(path) }
            }
        };
        Ok(Self(pattern))
    }
}

impl fmt::Display for AllowPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Pattern::Mesh { name, node } => {
                write!(f, "mesh://{name}")?;
                match node {
                    NodeGlob::Unpinned => Ok(()),
                    NodeGlob::Any => f.write_str("@*"),
                    NodeGlob::Exact(node) => write!(f, "@{node}"),
                }
            }
            Pattern::Direct { host, port } => write!(f, "{host}:{}", PortText(*port)),
            Pattern::Http { secure, host, port, path } => {
                let scheme = if *secure { "https" } else { "http" };
                if *port == PortGlob::Exact(default_port(*secure)) {
                    write!(f, "{scheme}://{host}{path}")
                } else {
                    write!(f, "{scheme}://{host}:{}{path}", PortText(*port))
                }
            }
        }
    }
}

struct PortText(PortGlob);

impl fmt::Display for PortText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            PortGlob::Any => f.write_str("*"),
            PortGlob::Exact(port) => write!(f, "{port}"),
        }
    }
}

impl Serialize for AllowPattern {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for AllowPattern {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// One lexical component of a URL or pattern: its normalized text and whether it ended
/// in `*` (the `*` itself is not in `text`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Component<'a> {
    text: &'a str,
    wildcard: bool,
}

impl<'a> Component<'a> {
    fn of(raw: &'a str) -> Result<Self, String> {
        let (text, wildcard) = match raw.strip_suffix('*') {
            Some(rest) => (rest, true),
            None => (raw, false),
        };
        if text.contains('*') {
            return Err("`*` may only end a component".into());
        }
        Ok(Self { text, wildcard })
    }
}

/// A URL split into components, before each is checked.
enum Parts<'a> {
    Mesh { name: Component<'a>, node: Option<Component<'a>> },
    Direct { host: Component<'a>, port: Component<'a> },
    Http { secure: bool, host: Component<'a>, port: Option<Component<'a>>, path: Component<'a> },
}

/// Splits a URL or pattern into components without judging them; the callers check each
/// component against its grammar.
fn split(input: &str) -> Result<Parts<'_>, String> {
    let text = input.trim();
    if text.is_empty() {
        return Err("empty".into());
    }
    if text.len() > PEER_URL_LEN_MAX {
        return Err(format!("longer than {PEER_URL_LEN_MAX} bytes"));
    }
    if text.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("contains whitespace or control characters".into());
    }
    if text.contains(['?', '#']) {
        return Err("queries and fragments are not part of a peer URL".into());
    }
    if let Some((scheme, rest)) = text.split_once("://") {
        return match scheme {
            "mesh" => split_mesh(rest),
            "http" | "https" => split_http(scheme == "https", rest),
            s if s.eq_ignore_ascii_case("mesh")
                || s.eq_ignore_ascii_case("http")
                || s.eq_ignore_ascii_case("https") =>
            {
                Err(format!("write the scheme in lowercase (`{}://`)", s.to_ascii_lowercase()))
            }
            other => Err(format!("unknown scheme `{other}` (expected mesh, http or https)")),
        };
    }
    if text.contains('/') {
        return Err("a direct peer is `HOST:PORT`; use `http://HOST:PORT/PATH` for a path".into());
    }
    let (host, port) = split_host_port(text)?;
    let port = port.ok_or("missing port (write HOST:PORT)")?;
    Ok(Parts::Direct { host: Component::of(host)?, port: Component::of(port)? })
}

fn split_mesh(rest: &str) -> Result<Parts<'_>, String> {
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    if rest.contains('/') {
        return Err("a mesh URL has no path".into());
    }
    let (name, node) = match rest.split_once('@') {
        Some((name, node)) => (name, Some(node)),
        None => (rest, None),
    };
    if name.is_empty() {
        return Err("missing capsule name after `mesh://`".into());
    }
    let node = match node {
        Some("") => return Err("missing peer id after `@`".into()),
        Some(n) if n.contains('@') => return Err("more than one `@`".into()),
        Some(n) => Some(Component::of(n)?),
        None => None,
    };
    Ok(Parts::Mesh { name: Component::of(name)?, node })
}

fn split_http(secure: bool, rest: &str) -> Result<Parts<'_>, String> {
    let (authority, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    if authority.contains('@') {
        return Err("user info (`user@host`) is not allowed".into());
    }
    let (host, port) = split_host_port(authority)?;
    let path = path.trim_end_matches('/');
    if path.split('/').any(|seg| seg == "." || seg == "..") {
        return Err("`.` and `..` path segments are not allowed".into());
    }
    if path.contains("//") {
        return Err("empty path segments are not allowed".into());
    }
    Ok(Parts::Http {
        secure,
        host: Component::of(host)?,
        port: port.map(Component::of).transpose()?,
        path: Component::of(path)?,
    })
}

/// Splits `host[:port]`, where host may be a bracketed IPv6 literal.
fn split_host_port(authority: &str) -> Result<(&str, Option<&str>), String> {
    if authority.is_empty() {
        return Err("missing host".into());
    }
    if let Some(after_bracket) = authority.strip_prefix('[') {
        let close = after_bracket.find(']').ok_or("unclosed `[` in IPv6 host")?;
        let host = &authority[..close + 2];
        return match &authority[close + 2..] {
            "" => Ok((host, None)),
            rest => rest
                .strip_prefix(':')
                .map(|port| (host, Some(port)))
                .ok_or_else(|| "expected `:PORT` after the IPv6 host".into()),
        };
    }
    match authority.split_once(':') {
        Some((_, port)) if port.contains(':') => Err("IPv6 hosts must be written in brackets".into()),
        Some((host, port)) => Ok((host, Some(port))),
        None => Ok((authority, None)),
    }
}

fn parse_port(text: &str) -> Result<u16, String> {
    match text.parse::<u16>() {
        Ok(0) | Err(_) => Err(format!("port `{text}` must be a number from 1 to 65535")),
        Ok(port) if text.starts_with('0') => Err(format!("port `{port}` has leading zeros")),
        Ok(port) => Ok(port),
    }
}

fn parse_node(text: &str) -> Result<NodeId, String> {
    text.parse::<NodeId>().map_err(|err| err.to_string())
}

const fn default_port(secure: bool) -> u16 {
    if secure { 443 } else { 80 }
}

/// Hosts are lowercase DNS names, IPv4 literals or bracketed IPv6 literals.
fn check_host(host: &str) -> Result<(), String> {
    if let Some(inner) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        let addr: Ipv6Addr = inner.parse().map_err(|_| format!("`{host}` is not an IPv6 address"))?;
        if format!("[{addr}]") != host {
            return Err(format!("write the IPv6 address in its shortest lowercase form, `[{addr}]`"));
        }
        return Ok(());
    }
    if host.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        host.parse::<Ipv4Addr>().map_err(|_| format!("`{host}` is not an IPv4 address"))?;
        return Ok(());
    }
    check_dns_prefix(host)?;
    if host.starts_with(['-', '.']) || host.ends_with(['-', '.']) || host.contains("..") {
        return Err(format!("`{host}` is not a valid host name"));
    }
    Ok(())
}

fn check_host_pattern(host: Component<'_>) -> Result<(), String> {
    if host.wildcard { check_dns_prefix(host.text) } else { check_host(host.text) }
}

fn check_dns_prefix(host: &str) -> Result<(), String> {
    if host.len() > 253 {
        return Err("host name longer than 253 bytes".into());
    }
    if host.bytes().any(|b| b.is_ascii_uppercase()) {
        return Err(format!("write the host in lowercase (`{}`)", host.to_ascii_lowercase()));
    }
    if !host.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.') {
        return Err(format!("`{host}` is not a valid host name"));
    }
    Ok(())
}

fn check_name_prefix(prefix: &str) -> Result<(), String> {
    // A prefix of a valid name is itself a valid name (the grammar has no suffix rules).
    check_capsule_name(prefix)
}

#[cfg(test)]
mod tests;
