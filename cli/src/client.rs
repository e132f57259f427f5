//! How `mur` reaches a node's API: `--node URL`, else `$MURMUR_NODE`, else the local node;
//! with `--token` (or `$MURMUR_TOKEN`) as a bearer token for a node on another machine.

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
    /// Bearer token for a node that is not on this machine (one of its `api.tokens`).
    #[arg(long = "token", env = "MURMUR_TOKEN", value_name = "TOKEN", hide_env_values = true, global = true)]
    pub token: Option<String>,
}

impl NodeArgs {
    /// An HTTP client for the node: `timeout` per request (none: wait as long as it
    /// takes), and the bearer token when one is given.
    pub fn client(&self, timeout: Option<Duration>) -> CliResult<reqwest::blocking::Client> {
        let mut headers = reqwest::header::HeaderMap::new();
        if let Some(token) = &self.token {
            let mut value =
                reqwest::header::HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| {
                    CliError::usage(anyhow::anyhow!("--token: a token is visible ASCII characters"))
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
        use std::io::BufRead;
        let url = format!("{}{path}", self.url.trim_end_matches('/'));
        let response = self.client(None)?.post(&url).json(body).send().map_err(|err| {
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
