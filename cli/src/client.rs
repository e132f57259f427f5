//! How `mur` reaches a node's API: `--node URL`, else `$MURMUR_NODE`, else the local node;
//! with a bearer token for a node on another machine from `--token-file PATH`, else
//! `$MURMUR_TOKEN`. Never from the command line, where `ps` shows it to every user.

use std::time::Duration;

use anyhow::Context;
use clap::Args;
use serde::de::DeserializeOwned;

use murmur_api::exit::{CliError, CliResult};
use murmur_config::limits::{CLI_REQUEST_TIMEOUT, CLI_RUN_TIMEOUT};

/// The local node's API when nothing else is said (matches the default `api.listen`).
pub const DEFAULT_NODE_URL: &str = "http://127.0.0.1:7420";

/// Where the node is.
#[derive(Debug, Clone, Args)]
pub struct NodeArgs {
    /// The node's API URL.
    #[arg(long = "node", env = "MURMUR_NODE", value_name = "URL", default_value = DEFAULT_NODE_URL, global = true)]
    pub url: String,
    /// A file holding the bearer token for a node that is not on this machine (one of its
    /// `api.tokens`; the file's first line), e.g. a container's `/run/secrets/…`. Without
    /// it, `$MURMUR_TOKEN` is used.
    #[arg(long = "token-file", env = "MURMUR_TOKEN_FILE", value_name = "PATH", global = true)]
    pub token_file: Option<std::path::PathBuf>,
    /// Refused: a token on the command line is visible to every user through `ps`.
    #[arg(long = "token", value_name = "TOKEN", hide = true, global = true)]
    pub token_in_argv: Option<String>,
}

impl NodeArgs {
    /// An HTTP client for the node: `timeout` per request (none: wait as long as it
    /// takes), and the bearer token when one is given.
    pub fn client(&self, timeout: Option<Duration>) -> CliResult<reqwest::blocking::Client> {
        let mut headers = reqwest::header::HeaderMap::new();
        if let Some(token) = &self.token()? {
            let mut value =
                reqwest::header::HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| {
                    CliError::usage(anyhow::anyhow!("the bearer token must be visible ASCII characters"))
                })?;
            value.set_sensitive(true);
            headers.insert(reqwest::header::AUTHORIZATION, value);
        }
        reqwest::blocking::Client::builder()
            .timeout(timeout)
            .default_headers(headers)
            .build()
            .map_err(CliError::failed)
    }

    /// The bearer token: `--token-file`, else `$MURMUR_TOKEN`, else none.
    fn token(&self) -> CliResult<Option<String>> {
        if self.token_in_argv.is_some() {
            return Err(CliError::usage(anyhow::anyhow!(
                "--token would show the token to every user of this machine (ps); put it in a file for --token-file PATH (mode 0600), or in $MURMUR_TOKEN"
            )));
        }
        let Some(path) = &self.token_file else {
            return Ok(std::env::var("MURMUR_TOKEN").ok().filter(|t| !t.is_empty()));
        };
        let text =
            murmur_store::file::read_bounded(path, murmur_config::limits::CREDENTIAL_BYTES_MAX as usize)
                .with_context(|| format!("--token-file {}", path.display()))
                .map_err(CliError::usage)?;
        let text = String::from_utf8(text).map_err(|_| {
            CliError::usage(anyhow::anyhow!("--token-file {}: not UTF-8 text", path.display()))
        })?;
        let token = text.lines().next().unwrap_or_default().trim().to_owned();
        if token.is_empty() {
            return Err(CliError::usage(anyhow::anyhow!(
                "--token-file {}: the file is empty",
                path.display()
            )));
        }
        Ok(Some(token))
    }

    /// GETs `path` and decodes the JSON answer; an error document becomes the error text.
    pub fn get<T: DeserializeOwned>(&self, path: &str) -> CliResult<T> {
        self.request(reqwest::Method::GET, path, None)
    }

    /// POSTs `body` as JSON to `path` and decodes the JSON answer.
    pub fn post<T: DeserializeOwned>(&self, path: &str, body: &serde_json::Value) -> CliResult<T> {
        self.request(reqwest::Method::POST, path, Some(body))
    }

    /// POSTs `body` to `path` and hands each line of the streamed answer (JSON lines) to
    /// `on_line`, waiting as long as the node keeps the stream open.
    pub fn post_lines(
        &self,
        path: &str,
        body: &serde_json::Value,
        on_line: &mut dyn FnMut(serde_json::Value) -> CliResult,
    ) -> CliResult {
        self.lines(reqwest::Method::POST, path, Some(body), on_line)
    }

    /// GETs `path` and hands each line of the streamed answer (JSON lines) to `on_line`,
    /// waiting as long as the node keeps the stream open.
    pub fn get_lines(
        &self,
        path: &str,
        on_line: &mut dyn FnMut(serde_json::Value) -> CliResult,
    ) -> CliResult {
        self.lines(reqwest::Method::GET, path, None, on_line)
    }

    fn lines(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&serde_json::Value>,
        on_line: &mut dyn FnMut(serde_json::Value) -> CliResult,
    ) -> CliResult {
        use std::io::BufRead;
        let url = format!("{}{path}", self.url.trim_end_matches('/'));
        let mut request = self.client(None)?.request(method, &url);
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().map_err(|err| {
            CliError::failed(anyhow::anyhow!(
                "cannot reach the node at {} ({err}); is murnode running? (set --node or MURMUR_NODE)",
                self.url
            ))
        })?;
        let status = response.status();
        if !status.is_success() {
            let body = response.text().unwrap_or_default();
            let message = serde_json::from_str::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| v["error"]["message"].as_str().map(str::to_owned))
                .unwrap_or(body);
            let err = anyhow::anyhow!("the node answered {status}: {message}");
            // A request the node calls malformed is the caller's to fix (exit 2).
            return Err(if status == reqwest::StatusCode::BAD_REQUEST {
                CliError::usage(err)
            } else {
                CliError::failed(err)
            });
        }
        for line in std::io::BufReader::new(response).lines() {
            let line = line.context("reading the node's answer").map_err(CliError::failed)?;
            if line.trim().is_empty() {
                continue;
            }
            let value = serde_json::from_str(&line)
                .with_context(|| format!("unexpected line from {url}: {line}"))
                .map_err(CliError::failed)?;
            on_line(value)?;
        }
        Ok(())
    }

    fn request<T: DeserializeOwned>(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&serde_json::Value>,
    ) -> CliResult<T> {
        let url = format!("{}{path}", self.url.trim_end_matches('/'));
        // Tools may run up to their deadline (at most 10 minutes); wait a little longer.
        let timeout = if body.is_some() { CLI_RUN_TIMEOUT } else { CLI_REQUEST_TIMEOUT };
        let client = self.client(Some(timeout))?;
        let mut request = client.request(method, &url);
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().map_err(|err| {
            CliError::failed(anyhow::anyhow!(
                "cannot reach the node at {} ({err}); is murnode running? (set --node or MURMUR_NODE)",
                self.url
            ))
        })?;
        let status = response.status();
        let body = response.text().context("reading the node's answer")?;
        if !status.is_success() {
            let message = serde_json::from_str::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| v["error"]["message"].as_str().map(str::to_owned))
                .unwrap_or(body);
            return Err(CliError::failed(anyhow::anyhow!("the node answered {status}: {message}")));
        }
        serde_json::from_str(&body)
            .with_context(|| format!("unexpected answer from {url}"))
            .map_err(CliError::failed)
    }
}
