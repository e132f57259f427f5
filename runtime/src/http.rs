//! `wasi:http/outgoing-handler` for inference drivers, and only for them: the runtime links
//! it into a second linker that only `driver` components are instantiated from, so a tool
//! or capsule that imports it fails to load. Every request is checked against the
//! driver's `capabilities.network.allow` (the agent's) before any connection is made; a
//! refused request fails with `HTTP-request-denied` and a line in the node's log.
//!
//! A request to `https://HOST:PORT/PATH` is allowed when a pattern admits it as written
//! (`https://api.openai.com/*`) or as `HOST:PORT` (`api.openai.com:443`, `127.0.0.1:*`).

use murmur_protocol::peer_url::allowed;
use murmur_protocol::{AllowPattern, PeerUrl};
use wasmtime_wasi_http::{Error, RequestOptions, WasiBody, WasiHttpHooks};

/// The allowlist a driver's requests pass.
#[derive(Clone, Debug, Default)]
pub struct Gate {
    pub(crate) capsule: String,
    pub(crate) allow: Vec<AllowPattern>,
}

impl Gate {
    /// Whether the allowlist admits `uri`. A target the peer-URL grammar refuses (user
    /// info, `.` or `..` segments, spelled out or percent-encoded, empty segments) is never
    /// admitted: a server would resolve it to a path the pattern did not name.
    #[must_use]
    pub fn admits(&self, uri: &http::Uri) -> bool {
        let Some(host) = uri.host() else { return false };
        if uri.authority().is_some_and(|a| a.as_str().contains('@')) {
            return false;
        }
        let trimmed = uri.path().trim_end_matches('/');
        let dotted = |segment: &str| {
            let decoded = segment.to_ascii_lowercase().replace("%2e", ".");
            decoded == "." || decoded == ".."
        };
        if trimmed.split('/').skip(1).any(|segment| segment.is_empty() || dotted(segment)) {
            return false;
        }
        let secure = uri.scheme() == Some(&http::uri::Scheme::HTTPS);
        let port = uri.port_u16().unwrap_or(if secure { 443 } else { 80 });
        let host = host.to_ascii_lowercase();
        let path = uri.path().trim_end_matches('/').to_owned();
        let direct = PeerUrl::Direct { host: host.clone(), port };
        let http = PeerUrl::Http { secure, host, port, path };
        allowed(&self.allow, &direct) || allowed(&self.allow, &http)
    }
}

type Pending = Box<dyn Future<Output = Result<(), Error>> + Send>;

impl WasiHttpHooks for Gate {
    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        fut: Pending,
    ) -> Box<dyn Future<Output = Result<(http::Response<WasiBody>, Pending), Error>> + Send> {
        _ = fut;
        if !self.admits(request.uri()) {
            tracing::warn!(capsule = %self.capsule, uri = %request.uri(), "driver request refused: not in capabilities.network.allow");
            return Box::new(async { Err(Error::HttpRequestDenied) });
        }
        Box::new(async move {
            use http_body_util::BodyExt;
            let (response, io) = wasmtime_wasi_http::default_send_request(request, options).await?;
            Ok((response.map(BodyExt::boxed_unsync), Box::new(io) as Pending))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gate(patterns: &[&str]) -> Gate {
        Gate { capsule: "d".into(), allow: patterns.iter().map(|p| p.parse().unwrap()).collect() }
    }

    #[test]
    fn requests_pass_only_what_the_allowlist_names() {
        let uri = |u: &str| u.parse::<http::Uri>().unwrap();
        let g = gate(&["api.openai.com:443", "127.0.0.1:*"]);
        assert!(g.admits(&uri("https://api.openai.com/v1/chat/completions")));
        assert!(g.admits(&uri("http://127.0.0.1:8080/v1/chat/completions?x=1")));
        assert!(!g.admits(&uri("http://api.openai.com/v1")), "port 80 is not 443");
        assert!(!g.admits(&uri("https://evil.example/v1")));
        assert!(!gate(&[]).admits(&uri("https://api.openai.com/")));
        let g = gate(&["https://api.example.com/v1*"]);
        assert!(g.admits(&uri("https://api.example.com/v1/chat")));
        assert!(!g.admits(&uri("https://api.example.com/admin")));
        for sneaky in [
            "https://api.example.com/v1/../admin",
            "https://api.example.com/v1/%2e%2E/admin",
            "https://api.example.com/v1/./x",
            "https://api.example.com/v1//admin",
            "https://user@api.example.com/v1/chat",
        ] {
            assert!(!g.admits(&uri(sneaky)), "{sneaky}");
        }
        assert!(!gate(&["api.example.com:443"]).admits(&uri("https://api.example.com.evil.test/")));
        assert!(
            gate(&["api.example.com:443"]).admits(&uri("https://API.example.com/v1")),
            "hosts compare lowercased"
        );
    }
}
